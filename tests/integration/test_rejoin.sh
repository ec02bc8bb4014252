#!/usr/bin/env bash
# A rejoin hands the partitions back while the pod waits for records, and the
# first batch read from the commit fails for a board: the board stays held
# until its partition is read again, and none of its later events is written
# past the failed ones.
#
# The pod is frozen past its session timeout (the group drops it), events are
# produced meanwhile, and on SIGCONT it is revoked and assigned again inside
# one wait for records. The board's day-1 window key has the wrong type, so
# its first batch (day-1 events, then day-2 ones) fails; its next batch holds
# only day-2 events, which alone would be written fine. Were the revoke's
# release applied to that next batch, the hold made by the first would be
# lifted without a rewind: the day-2 events written, the board's marker past
# the failed batch, and once the key is deleted the failed events skipped
# as applied (the chaos soak lost events this way after a Kafka outage).
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services " "
"$BIN/lbadmin" create-topic --brokers "$BROKERS" --topic scores --partitions 1 \
    >>"$T_DIR/lbadmin.log" 2>&1 || fail "cannot create scores"
export GROUP=lb-rejoin BATCH_MAX=100
write_config "$T_DIR/projector.yaml" "$MODE_PROFILES"
start_projector projector "$T_DIR/projector.yaml"
pod=$PROJECTOR_PID
day() { date -u -d "$START + $1 days" +%Y-%m-%dT00:00:00Z; }
gen=(--boards 1 --board-prefix sum- --players 40 --days 1 --score-max 1000)
produce -n 200 --seed 61 "${gen[@]}" --start "$(day 0)"
wait_caught_up 60
verify "${MODE_ORACLE[@]}"

bad_key="lb:{sum-0}:daily:$(date -u -d "$START + 1 days" +%F)"
redis_cli "$(live_ports | first)" -c SET "$bad_key" "not a sorted set" >/dev/null
kill -STOP "$pod"
# shellcheck disable=SC2016 # expanded when the hook runs
on_exit 'kill -CONT "$pod" 2>/dev/null'
frozen_at=$SECONDS
produce -n 30 --seed 62 "${gen[@]}" --start "$(day 1)"  # day 1: refused
produce -n 400 --seed 63 "${gen[@]}" --start "$(day 2)" # day 2: would be written
while ((SECONDS - frozen_at < 10)); do                  # past the 6 s session
    sleep 1
done
assigned=$(grep -c 'msg="assigned' "$T_DIR/projector.log")
kill -CONT "$pod"
log "pod frozen $((SECONDS - frozen_at)) s with 430 events produced"
lb_wait_for 60 bash -c "(( \$(grep -c 'msg=\"assigned' '$T_DIR/projector.log') > $assigned ))" ||
    fail "the pod was not assigned the partition again"
grep -q 'msg="revoking' "$T_DIR/projector.log" || fail "the pod was not revoked while frozen"
wait_log "$T_DIR/projector.log" "board 'sum-0'.*WRONGTYPE: key $bad_key" 30
sleep 3 # rewinds of the held partition meet the key again
day2=$(redis_cli "$(live_ports | first)" -c EXISTS "lb:{sum-0}:daily:$(date -u -d "$START + 2 days" +%F)")
[[ $day2 == 0 ]] || fail "day-2 events of sum-0 were written while its earlier events were held"
ok "revoked and assigned again in one wait: the failed board is held, its later events wait"

redis_cli "$(live_ports | first)" -c DEL "$bad_key" >/dev/null
wait_caught_up 60
verify "${MODE_ORACLE[@]}"
assert_committed_at_end
ok "after DEL, every event of the batches read after the rejoin is counted once"

#!/usr/bin/env bash
# Every aggregation mode end to end: best (desc and asc), latest and sum
# boards, with retractions and a custom window, projected by two projectors
# in one group while the group is rebalanced under them: a second pod joins,
# one pod freezes (SIGSTOP) past its session timeout and wakes up as a zombie
# holding a batch for partitions it no longer owns, one is SIGKILLed, and
# one dies between EXEC and its offset commit; then a rolling deploy: a pod
# of the previous release (apply protocol 4) writes alone, then beside a pod
# of this release on the same boards, and is replaced. Latest boards it
# started keep per-window stamps under both; those this release started
# keep ~newest and refuse it (their fence key). The final state must equal
# the independent oracle's, member by member: no event lost, none applied
# twice, no stale write over the new owner's.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
export GROUP=lb-semantics
write_config "$T_DIR/projector.yaml" "$MODE_PROFILES"
oracle=("${MODE_ORACLE[@]}")
gen=("${MODE_GEN[@]}")

# 1. a second pod joins mid-stream; the first freezes past its session
#    timeout, its partitions move, and it wakes up as a zombie
start_projector a "$T_DIR/projector.yaml"
pod_a=$PROJECTOR_PID
produce -n 60000 --seed 61 "${gen[@]}" --rate 5000 &
producer=$!
T_PIDS+=("$producer")
sleep 2
start_projector b "$T_DIR/projector.yaml"
pod_b=$PROJECTOR_PID
wait_log "$T_DIR/b.log" "assigned [1-9]" 30
ok "b joined the group and took partitions from a"
sleep 1
kill -STOP "$pod_a"
log "a frozen; b takes its partitions after the session timeout"
wait_log "$T_DIR/b.log" "assigned 6 partition" 30
kill -CONT "$pod_a"
ok "a woke up as a zombie after b took over all 6 partitions"
wait "$producer" || fail "producer failed"

# 2. SIGKILL of b without a commit; then a pod that dies between EXEC and
#    the commit of its second batch
kill -9 "$pod_b"
wait "$pod_b" 2>/dev/null || true
start_projector crashing "$T_DIR/projector.yaml" LB_FAULT_CRASH_AFTER_BATCHES=2
crashing=$PROJECTOR_PID
wait_log "$T_DIR/crashing.log" "assigned [1-9]" 40
produce -n 20000 --seed 62 "${gen[@]}" --rate 10000
status=0
wait "$crashing" || status=$?
[[ $status == 70 ]] || fail "the pod with the fault did not crash between EXEC and commit (exit $status)"
ok "a pod died between EXEC and its offset commit"
start_projector b "$T_DIR/projector.yaml"
pod_b=$PROJECTOR_PID
produce -n 10000 --seed 63 "${gen[@]}"
wait_caught_up 180

retractions=$(awk '$6 == "RETRACT"' "$T_DIR/events.tsv" | wc -l)
((retractions > 1000)) || fail "only $retractions retractions in the stream"
verify "${oracle[@]}"
assert_committed_at_end
ok "best, latest and sum boards exact after join, zombie, SIGKILL and a crash before commit ($retractions retractions)"

# 3. a rolling deploy: the previous release (apply protocol 4, its own
#    script under its own SHA1) alone, as before the deploy: the latest
#    boards it starts (lat-up-*) keep per-window stamps. Then a pod of this
#    release beside it in one group, on the same boards, while events flow:
#    it keeps those boards' stamps per window too, and the boards it
#    started (lat-*, with ~newest) refuse the old pod as fenced. Then the
#    old pod is replaced, as the deploy goes on. Exact, member by member.
previous_release=33bb04b # the release before apply protocol 5
old_bin=$("$repo/ops/build-release.sh" "$previous_release") ||
    fail "cannot build the previous release $previous_release"
stop_projector "$pod_a"
[[ $STOP_STATUS == 0 ]] || fail "a exited $STOP_STATUS"
stop_projector "$pod_b"
[[ $STOP_STATUS == 0 ]] || fail "b exited $STOP_STATUS"
up=(--boards 4 --players 100 --board-prefix lat-up- --score-max 1000 --start "$START" --days 3
    --dim patch --dim-values 3 --retract-every 25 --retry-every 11)
PROJECTOR_BIN=$old_bin/projector start_projector old "$T_DIR/projector.yaml"
pod_old=$PROJECTOR_PID
wait_log "$T_DIR/old.log" "assigned 6 partition" 40
produce -n 4000 --seed 65 "${up[@]}"
wait_caught_up 60
start_projector c "$T_DIR/projector.yaml"
pod_c=$PROJECTOR_PID
wait_log "$T_DIR/c.log" "assigned [1-9]" 40
# (one producer at a time: they share produce's files)
produce -n 3000 --seed 66 "${up[@]}" --rate 1000
produce -n 30000 --seed 64 "${gen[@]}" --rate 5000 &
producer=$!
T_PIDS+=("$producer")
wait_log "$T_DIR/old.log" "fenced" 30
sleep 2
stop_projector "$pod_old"
# 6: it stopped holding partitions (the fenced boards'), which README's exit
# codes say; what it did not write is read again by this release's pod
[[ $STOP_STATUS == 0 || $STOP_STATUS == 6 ]] || fail "the old pod exited $STOP_STATUS"
old_applied=$(sed -n 's/.*totals: records=[0-9]* applied=\([0-9]*\).*/\1/p' "$T_DIR/old.log" | tail -n 1)
((${old_applied:-0} > 0)) || fail "the previous release's pod applied nothing: the deploy was not exercised"
wait "$producer" || fail "producer failed"
wait_caught_up 180
verify "${oracle[@]}"
assert_committed_at_end
for board in lat-up-0 lat-2; do
    newest=$(redis_cli "$(live_ports | first)" -c EXISTS "lb:{$board}:~newest")
    fence=$(redis_cli "$(live_ports | first)" -c TYPE "lb:{$board}:~fence")
    if [[ $board == lat-up-0 ]]; then
        [[ $newest == 0 && $fence == none ]] ||
            fail "$board, started by the previous release, has a ~newest ($newest) or a fence ($fence)"
    else
        [[ $newest == 1 && $fence == hash ]] ||
            fail "$board, started by this release, has no ~newest ($newest) or no hash fence ($fence)"
    fi
done
ok "rolling deploy: a previous-release pod ($old_applied events applied) alone, then beside this release's on the same boards, exact; latest boards it started keep per-window stamps, those this release started refused it"

# 4. the oracle can fail: one member changed behind the projector's back
key="" port=""
for i in 0 1 2 3 4 5; do
    port=$(redis_port "$i")
    [[ $(redis_cli "$port" ROLE | head -n 1) == master ]] || continue
    key=$(redis_cli "$port" --scan --pattern 'lb:{sum-*}:alltime' | first)
    [[ -z $key ]] || break
done
[[ -n $key ]] || fail "no sum board's alltime key on any master"
member=$(redis_cli "$port" ZRANGE "$key" 0 0)
redis_cli "$port" ZINCRBY "$key" 1073741824 "$member" >/dev/null # the sum + 1 (T = 30)
if "$BIN/verify_state" --events "$T_DIR/events.tsv" --nodes "$(seed_list | tr -d ' ')" \
    "${oracle[@]}" >"$T_DIR/verify-tampered.out" 2>&1; then
    fail "the oracle did not notice a tampered sum"
fi
grep -q "difference: $key: $member has" "$T_DIR/verify-tampered.out" ||
    fail "the oracle did not name $key $member: $(cat "$T_DIR/verify-tampered.out")"
ok "the oracle reports a sum one higher than the events make it"

stop_projector "$pod_c"
[[ $STOP_STATUS == 0 ]] || fail "c exited $STOP_STATUS"
# the markers did their work: redelivered segments were found applied
# (skipped whole, or planned again without what was applied)
skipped=$(grep -ho 'skipped_segments=[0-9]*' "$T_DIR"/a.log "$T_DIR"/b.log "$T_DIR"/c.log | awk -F= '{ s += $2 } END { print s + 0 }')
replans=$(grep -ho 'replans=[0-9]*' "$T_DIR"/a.log "$T_DIR"/b.log "$T_DIR"/c.log | awk -F= '{ s += $2 } END { print s + 0 }')
((skipped + replans > 0)) || fail "no pod ever met an applied segment: the redeliveries were not exercised"
ok "redelivered board segments met their markers: $skipped skipped, $replans planned again"

#!/usr/bin/env bash
# A producer's retries: the same event (its event_id and key) written again
# as a record of its own - some right behind the first, most in a later
# batch, a third with another score (a conflict) - over best, latest and sum
# boards, while the projector is SIGKILLed and dies between EXEC and its
# offset commit; then two boards are lost whole (dedupe sets included) and
# rebuilt by replay, and the first events are sent again. Each event counts
# once: the oracle counts each (board, event_id) once (best boards refusing
# retractions do not dedupe and take every record), replay --verify finds
# the rebuilt dedupe sets equal, and the metrics count every retry.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
export GROUP=lb-duplicates
pick_metrics_port
grep -c 'dedupe: {window: 30d}' <<<"$MODE_PROFILES" | grep -qx 5 ||
    fail "the profiles do not set their dedupe windows"
write_config "$T_DIR/projector.yaml" "$MODE_PROFILES
$METRICS_YAML"
gen=("${MODE_GEN[@]}" --retry-every 7)
replay() { "$BIN/replay" --config "$T_DIR/projector.yaml" "$@"; }

# 1. SIGKILL while events and their retries flow
start_projector projector "$T_DIR/projector.yaml"
produce -n 40000 --seed 71 "${gen[@]}" --rate 12000 &
producer=$!
T_PIDS+=("$producer")
sleep 2
kill_mid_stream
start_projector projector "$T_DIR/projector.yaml"
wait "$producer" || fail "producer failed"
wait_caught_up 120
stop_projector "$PROJECTOR_PID"

# 2. dies after its first batch is in Redis, before committing it
produce -n 6000 --seed 72 "${gen[@]}"
start_projector crashing "$T_DIR/projector.yaml" LB_FAULT_CRASH_AFTER_BATCHES=1
status=0
wait "$PROJECTOR_PID" || status=$?
[[ $status == 70 ]] || fail "fault injection did not fire (exit $status)"
start_projector projector "$T_DIR/projector.yaml"
wait_caught_up 120
retries=$(awk '{ n[$2 "\t" $1]++ } END { for (k in n) r += n[k] - 1; print r + 0 }' "$T_DIR/events.tsv")
conflicts=$(awk '{ k = $2 "\t" $1; if (k in first && first[k] != $3 "\t" $4) c++; else if (!(k in first)) first[k] = $3 "\t" $4 }
                 END { print c + 0 }' "$T_DIR/events.tsv")
((retries > 5000 && conflicts > 1000)) || fail "only $retries retries, $conflicts conflicts in the stream"
verify "${MODE_ORACLE[@]}"
assert_committed_at_end
ok "$retries retried records ($conflicts with another score) counted once through a SIGKILL and a crash before commit"
metrics_scrape "$METRICS_URL" "$T_DIR/m1"
dups=$(metrics_value "$T_DIR/m1" 'lb_events_total{outcome="duplicate"}')
confl=$(metrics_value "$T_DIR/m1" 'lb_events_total{outcome="conflict"}')
((dups > 0 && confl > 0)) || fail "duplicates $dups, conflicts $confl counted by the last pod"
stop_projector "$PROJECTOR_PID"

# 3. two boards lost whole, windows, markers and dedupe sets: replay
#    rebuilds them from what Kafka retains, dedupe sets included
lost=(sum-3 lat-2)
node=$(live_ports | first)
for board in "${lost[@]}"; do
    lose_board "$board"
    [[ $(redis_cli "$node" -c EXISTS "lb:{$board}:alltime" "lb:{$board}:~seen") == 0 ]] ||
        fail "board $board was not lost"
done
replay --board "${lost[0]}" --board "${lost[1]}" >"$T_DIR/replay.out" 2>&1 ||
    fail "replay of ${lost[*]} failed: $(tail -n 5 "$T_DIR/replay.out")"
for board in "${lost[@]}"; do
    [[ $(redis_cli "$node" -c EXISTS "lb:{$board}:~seen") == 1 ]] ||
        fail "replay did not rebuild the dedupe set of $board"
done
verify "${MODE_ORACLE[@]}"
status=0
replay --slots 0-16383 --verify >"$T_DIR/replay-verify.out" 2>&1 || status=$?
[[ $status == 0 ]] || fail "replay --verify exited $status: $(tail -n 5 "$T_DIR/replay-verify.out")"
grep -q ' 0 differing' "$T_DIR/replay-verify.out" || fail "replay --verify found differences"
ok "boards ${lost[*]} rebuilt by replay with their dedupe sets; replay --verify agrees on every board"

# 4. the first events of the stream, sent again (a producer replaying its
#    outbox): every record on a board that dedupes is a duplicate or a
#    conflict, on the rebuilt boards too; the boards are unchanged
start_projector projector "$T_DIR/projector.yaml"
produce -n 400 --seed 71 "${gen[@]}"
wait_caught_up 60
expected=$(tail -n 400 "$T_DIR/events.tsv" | awk '$2 !~ /^top-/' | wc -l)
for _ in $(seq 50); do # the page is published once a second
    metrics_scrape "$METRICS_URL" "$T_DIR/m2"
    dups=$(metrics_value "$T_DIR/m2" 'lb_events_total{outcome="duplicate"}')
    confl=$(metrics_value "$T_DIR/m2" 'lb_events_total{outcome="conflict"}')
    ((dups + confl < expected)) || break
    sleep 0.2
done
((dups + confl == expected)) ||
    fail "$expected records sent again to boards that dedupe; $dups duplicates + $confl conflicts counted"
verify "${MODE_ORACLE[@]}"
assert_committed_at_end
ok "$expected records sent again all counted as duplicates ($confl conflicts); state exact"

# 5. the window made smaller (30 d to 1 d) in the configuration: the live
#    dedupe set still holds the ids of 3 days (trimmed to the old window),
#    which the script takes as forgotten until the board's newest moves;
#    replay --verify under the new window reads them so too and agrees
produce -n 3000 --seed 74 --boards 1 --board-prefix sum-new- --players 50 --score-max 1000 \
    --start "$START" --days 3
wait_caught_up 60
held=$(redis_cli "$node" -c ZCARD "lb:{sum-new-0}:~seen")
((held == 3000)) || fail "the dedupe set of sum-new-0 holds $held ids, not 3000"
sed 's/dedupe: {window: 30d}/dedupe: {window: 1d}/' "$T_DIR/projector.yaml" >"$T_DIR/smaller.yaml"
status=0
"$BIN/replay" --config "$T_DIR/smaller.yaml" --board sum-new-0 --verify \
    >"$T_DIR/replay-smaller.out" 2>&1 || status=$?
if ((status != 0)) || ! grep -q ' 0 differing' "$T_DIR/replay-smaller.out"; then
    fail "replay --verify under a smaller window exited $status: $(tail -n 5 "$T_DIR/replay-smaller.out")"
fi
ok "a window made smaller: replay --verify agrees with the live board, whose set holds $held ids"

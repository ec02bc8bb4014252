#!/usr/bin/env bash
# Events from the producer land in exactly the expected members and composite
# scores of every window key; committed offsets end at the last offset + 1
# and carry each partition's event-time watermark; SIGTERM leaves cleanly
# with exit 0. loadgen, paced, gives up on a topic that does not exist.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
write_config "$T_DIR/projector.yaml"
produce -n 50000 --seed 11 --boards 20 --players 3000 --start "$START" --days 3 \
    --deliveries-out "$T_DIR/deliveries.tsv"
start_projector projector "$T_DIR/projector.yaml"
wait_caught_up 120
verify
assert_committed_at_end

# each partition's commit carries its event-time watermark (the highest ts
# of its records), which lbadmin offsets shows
want=$(awk -F '\t' 'NR == FNR { ts[$1] = $5; next } ts[$3] > m[$1] { m[$1] = ts[$3] }
    END { for (p in m) print p, m[p] }' "$T_DIR/events.part" "$T_DIR/deliveries.tsv" | sort -n)
got=$("$BIN/lbadmin" offsets --brokers "$BROKERS" --topic scores --group "${GROUP:-lb-test}" |
    awk '$1 == "scores" { print $2, $7 }' | while read -r p at; do
        [[ $at == - ]] && continue
        printf '%s %s\n' "$p" "$(date -u -d "$at" +%s%3N)"
    done)
[[ -n $want && $got == "$want" ]] || fail "commit watermarks: lbadmin shows '$got', the events say '$want'"
ok "every partition's commit carries the highest event time of its records ($(wc -l <<<"$want") partitions)"

# more events while it runs: they are applied too
produce -n 20000 --seed 12 --boards 20 --players 3000 --start "$START" --days 3 --rate 20000
wait_caught_up 120
verify
assert_committed_at_end

stop_projector "$PROJECTOR_PID" 20
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS after SIGTERM"
grep -q 'msg="stopping: committing durable offsets' "$T_DIR/projector.log" ||
    fail "no orderly stop in the log"
ok "SIGTERM: exit 0"

# loadgen, paced, to a topic the broker does not have (no auto-creation):
# its first event is never acknowledged (librdkafka waits 30 s for an
# unknown topic to appear, topic.metadata.propagation.max.ms, longer than
# --timeout); loadgen gives up after --timeout and says how many events
# were not delivered
status=0 t0=$SECONDS
timeout 30 "$BIN/loadgen" --brokers "$BROKERS" --topic no-such-topic -n 5 --rate 100 --timeout 3 \
    >"$T_DIR/nack.out" 2>&1 || status=$?
took=$((SECONDS - t0))
[[ $status == 1 ]] || fail "loadgen to a missing topic exited $status, not 1: $(tail -n 2 "$T_DIR/nack.out")"
grep -q 'acknowledged no event of topic no-such-topic for 3 s' "$T_DIR/nack.out" ||
    fail "loadgen does not say that nothing was acknowledged: $(tail -n 2 "$T_DIR/nack.out")"
((took <= 10)) || fail "loadgen took $took s to give up on a missing topic (--timeout 3)"
grep -Eq '; [1-9][0-9]* event\(s\) not delivered' "$T_DIR/nack.out" ||
    fail "loadgen does not count the events not delivered: $(tail -n 2 "$T_DIR/nack.out")"
ok "loadgen --rate to a missing topic: exit 1 after $took s, its events counted as not delivered"

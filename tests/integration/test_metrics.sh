#!/usr/bin/env bash
# /metrics, /healthz and /readyz: the page is parsed by a strict Prometheus
# text-format parser (promparse), its counters must match what the test
# produced (good events, poison events by reason), and /readyz must flip to
# 503 while Redis is frozen and back to 200 when it returns.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services "scores:6,scores-dlq:1"
mport=$(lb_free_port_base 1 31000 32000) || fail "no free port for metrics"
export GROUP=lb-metrics
DLQ_TOPIC=scores-dlq write_config "$T_DIR/projector.yaml" "metrics:
  listen: 127.0.0.1:$mport"
url=http://127.0.0.1:$mport

produce -n 10000 --seed 91 --boards 6 --players 300 --start "$START" --days 2 --poison-every 50
start_projector projector "$T_DIR/projector.yaml"
wait_caught_up 120
sleep 2 # the page is rendered once a second

scrape() { # FILE: the parsed page
    curl -sf "$url/metrics" >"$1.raw" || fail "GET /metrics failed"
    "$BIN/promparse" <"$1.raw" >"$1" 2>"$1.err" || fail "/metrics is not valid: $(cat "$1.err")"
}
value() { # FILE SERIES: its value, or fail
    local v
    v=$(awk -v s="$2" '$1 == s { print $2 }' "$1")
    [[ -n $v ]] || fail "no series $2 in /metrics"
    printf '%s\n' "$v"
}
scrape "$T_DIR/m1"

poison=$(awk '$6 ~ /^POISON:/' "$T_DIR/events.tsv" | wc -l)
total=$(wc -l <"$T_DIR/events.tsv")
[[ $(value "$T_DIR/m1" 'lb_events_total{outcome="consumed"}') == "$total" ]] ||
    fail "consumed $(value "$T_DIR/m1" 'lb_events_total{outcome="consumed"}'), produced $total"
[[ $(value "$T_DIR/m1" 'lb_events_total{outcome="applied"}') == $((total - poison)) ]] ||
    fail "applied is not $((total - poison))"
[[ $(value "$T_DIR/m1" 'lb_events_total{outcome="rejected"}') == "$poison" ]] ||
    fail "rejected is not $poison"
[[ $(value "$T_DIR/m1" 'lb_events_total{outcome="dead_lettered"}') == "$poison" ]] ||
    fail "dead_lettered is not $poison"
while read -r count reason; do
    got=$(value "$T_DIR/m1" "lb_rejected_events_total{reason=\"$reason\"}")
    [[ $got == "$count" ]] || fail "rejected $reason: $got, produced $count"
done < <(awk '$6 ~ /^POISON:/ { sub(/^POISON:/, "", $6); print $6 }' "$T_DIR/events.tsv" | sort | uniq -c)
[[ $(value "$T_DIR/m1" 'lb_event_visible_seconds_count{}') == $((total - poison)) ]] ||
    fail "the visibility histogram did not see every applied event"
lag=$(awk '$1 ~ /^lb_consumer_lag\{/ { n++; s += $2 } END { print n + 0, s + 0 }' "$T_DIR/m1")
[[ $lag == "6 0" ]] || fail "expected lag 0 on 6 partitions, got (partitions, lag) $lag"
[[ $(value "$T_DIR/m1" 'lb_partitions_assigned{}') == 6 ]] || fail "not 6 partitions assigned"
awk '$1 == "lb_last_commit_timestamp_seconds{}" && $2 > 1e9 { ok = 1 } END { exit !ok }' \
    "$T_DIR/m1" || fail "no commit time"
awk '$1 == "lb_batch_events_count{}" && $2 > 0 { ok = 1 } END { exit !ok }' "$T_DIR/m1" ||
    fail "no batch observed"
ok "/metrics parses and its counters match: $total consumed, $poison dead-lettered by reason, lag 0"

[[ $(curl -s -o /dev/null -w '%{http_code}' "$url/healthz") == 200 ]] || fail "/healthz not 200"
[[ $(curl -s -o /dev/null -w '%{http_code}' "$url/readyz") == 200 ]] || fail "/readyz not 200"
ok "/healthz and /readyz answer 200"

readyz_becomes() { # CODE TIMEOUT
    local deadline=$((SECONDS + $2))
    while ((SECONDS < deadline)); do
        [[ $(curl -s -m 2 -o /dev/null -w '%{http_code}' "$url/readyz") == "$1" ]] && return 0
        sleep 0.5
    done
    return 1
}
pids=()
for i in 0 1 2 3 4 5; do
    pids+=("$(lb_redis_pid "$(redis_port "$i")")")
done
kill -STOP "${pids[@]}"
on_exit "kill -CONT ${pids[*]} 2>/dev/null"
readyz_becomes 503 20 || fail "/readyz stayed ready with Redis frozen"
ok "/readyz is 503 while Redis is frozen"
kill -CONT "${pids[@]}"
readyz_becomes 200 40 || fail "/readyz did not come back after Redis did"
ok "/readyz is 200 again once Redis answers"
scrape "$T_DIR/m2"
[[ $(value "$T_DIR/m2" 'lb_redis_up{}') == 1 ]] || fail "lb_redis_up is not 1"

# a second pod on the same metrics port: refused at start, exit 3, and why
status=0
timeout 30 "$BIN/projector" --config "$T_DIR/projector.yaml" >"$T_DIR/second.log" 2>&1 || status=$?
[[ $status == 3 ]] || fail "a second projector on port $mport exited $status, not 3"
grep -q "cannot listen on 127.0.0.1:$mport" "$T_DIR/second.log" || fail "the port clash is not explained"
ok "a metrics port already in use stops the start with exit 3 and says so"

stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"

# A tailing pod's batches carry batch.linger's worth of events, also while
# the batch before is in Redis. They used to take what had come in during
# its round trip: here, at 3,000 events/s and a linger of 1 s, 7 to 11
# batches of which 4 to 8 held at most 100 events (a request per board for
# every few events), where a batch now holds about 3,000 and only the last
# may be small.
BATCH_MAX=10000 BATCH_LINGER=1s write_config "$T_DIR/tail.yaml" "metrics:
  listen: 127.0.0.1:$mport"
start_projector tail "$T_DIR/tail.yaml"
readyz_becomes 200 40 || fail "the second pod did not become ready"
produce -n 9000 --seed 93 --boards 6 --players 300 --start "$START" --days 2 --rate 3000
wait_caught_up 120
sleep 2
scrape "$T_DIR/m3"
batches=$(value "$T_DIR/m3" 'lb_batch_events_count{}')
small=$(value "$T_DIR/m3" 'lb_batch_events_bucket{le="100"}')
events=$(printf '%.0f' "$(value "$T_DIR/m3" 'lb_batch_events_sum{}')")
[[ $events == 9000 ]] || fail "the tailing pod's batches held $events events, not 9000"
((small <= 1)) || fail "$small of the tailing pod's $batches batches held 100 events or fewer"
# a batch's time ends with its replies, read while the next one lingered
# (about 20 ms here), not when the next one is sent (a linger later)
awk -v s="$(value "$T_DIR/m3" 'lb_batch_seconds_sum{}')" -v n="$batches" 'BEGIN { exit !(s < 0.5 * n) }' ||
    fail "lb_batch_seconds took in the next batch's linger: $(value "$T_DIR/m3" 'lb_batch_seconds_sum{}') s for $batches batches"
ok "a tailing pod's batches hold a linger's worth: $events events in $batches batches"
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"

# A merged top due cuts a batch's linger short (README "Writing"): a pod of
# split boards (merged tops of 20, staleness 400 ms: each window's top is due
# 100 ms after a write) and a linger of 3 s shows every write in its merged
# tops within 2 s (within 1 s in most runs; the 19,000 events below are read
# with the sanitizer build beside another test). One whose batch waited out
# the linger showed the writes of the batch before it 3 s late. It reads the 19,000 events there
# (the last batch of them lingers), then a trickle.
BATCH_LINGER=3s GROUP=lb-metrics-split write_config "$T_DIR/split.yaml" "metrics:
  listen: 127.0.0.1:$mport
profiles:
  - name: split
    match: \"g*\"
    split: {shards: 3, top: 20, staleness: 400ms}$_windows" '  key_prefix: "sp:"'
start_projector split "$T_DIR/split.yaml"
readyz_becomes 200 40 || fail "the pod of split boards did not become ready"
GROUP=lb-metrics-split wait_caught_up 120
produce -n 1500 --seed 95 --boards 6 --players 300 --start "$START" --days 2 --rate 500
GROUP=lb-metrics-split wait_caught_up 60
sleep 2
scrape "$T_DIR/m4"
refreshes=$(value "$T_DIR/m4" 'lb_top_staleness_seconds_count{}')
within=$(value "$T_DIR/m4" 'lb_top_staleness_seconds_bucket{le="2"}')
((refreshes >= 6)) || fail "only $refreshes merged top refreshes observed"
[[ $within == "$refreshes" ]] ||
    fail "$((refreshes - within)) of $refreshes merged top refreshes came more than 2 s after the write (batch.linger 3 s)"
ok "a merged top due cuts a batch's linger: $refreshes refreshes, each within 2 s of its write"
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"

#!/usr/bin/env bash
# Whole services restarting under the projector and replay:
#
#  1. the whole Redis Cluster is stopped (SIGTERM to every node, which writes
#     its data: the nodes keep AOF and RDB files here) and started again 8 s
#     later from that data, while events are produced: the projector holds
#     every partition (metrics: held for Redis), says Redis is unreachable,
#     resumes by itself and ends exact;
#  2. the Kafka broker stops for 10 s (longer than the consumer's session)
#     and starts again (about 15 s without it) while the projector
#     drains a backlog (held from within a second of its first applied
#     batch until the broker is down; it applies more of the backlog
#     while the broker is away) and replay rebuilds a flushed master: both
#     continue by
#     themselves; nothing is lost or counted twice (the oracle is exact for
#     best, latest and sum boards, retractions included).
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export REDIS_PERSIST=1
start_services
export GROUP=lb-restarts
pick_metrics_port
write_config "$T_DIR/projector.yaml" "$MODE_PROFILES
$METRICS_YAML"
url=$METRICS_URL
gen=("${MODE_GEN[@]}")

start_projector projector "$T_DIR/projector.yaml"
produce -n 20000 --seed 131 "${gen[@]}" --rate 20000
wait_caught_up 120

# 1. the whole Redis Cluster down for 8 s, and back with its data
produce -n 25000 --seed 132 "${gen[@]}" --rate 1000 &
producer=$!
T_PIDS+=("$producer")
sleep 2
logged=$(wc -l <"$T_DIR/projector.log")
lb_redis_cluster_stop 2>>"$T_DIR/redis-restart.log" || fail "stopping the cluster failed"
log "stopped every Redis node (SIGTERM); starting them again in 8 s"
# (split boards' records may show held for Redis before a write fails: their
# merged tops cannot be refreshed either)
shown_down() { metrics_series_is "$url" 'lb_partitions_held' 6 && metrics_series_is "$url" 'lb_redis_up' 0; }
lb_wait_for 10 shown_down || fail "partitions not held, or lb_redis_up not 0"
metrics_scrape "$url" "$T_DIR/m-down"
for p in 0 1 2 3 4 5; do
    [[ $(metrics_value "$T_DIR/m-down" "lb_partition_held{topic=\"scores\",partition=\"$p\",reason=\"redis\"}") == 1 ]] ||
        fail "partition $p is not shown held for Redis"
done
# (the metrics may show the hold first, through the split boards' merged
# tops; the log says it once the batch's writes have given up: wait for it)
held_logged() { tail -n +$((logged + 1)) "$T_DIR/projector.log" | grep -q 'held at offset [0-9]* (redis)'; }
lb_wait_for 10 held_logged || fail "the log does not say the projector holds for Redis"
tail -n +$((logged + 1)) "$T_DIR/projector.log" | grep -E 'cannot connect to Redis|connection to Redis .* lost' >/dev/null ||
    fail "the log does not say Redis is unreachable"
sleep 4
lb_redis_cluster_resume 2>>"$T_DIR/redis-restart.log" || fail "the cluster did not come back"
log "every Redis node started again from its data"
kill -0 "$producer" 2>/dev/null || fail "the producer finished during the outage: nothing ran after it"
wait "$producer" || fail "producer failed"
wait_caught_up 120
metrics_scrape "$url" "$T_DIR/m-up"
[[ $(metrics_value "$T_DIR/m-up" 'lb_redis_up{}') == 1 ]] || fail "lb_redis_up is not 1 again"
verify "${MODE_ORACLE[@]}"
ok "the whole Redis Cluster restarted with its data: the projector held for Redis, resumed by itself, exact"

# 2. the Kafka broker restarts while the projector drains a backlog and
# replay rebuilds a flushed master
stop_projector "$PROJECTOR_PID"
produce -n 120000 --seed 133 "${gen[@]}"
lost=
for p in $(live_ports); do
    [[ $(redis_cli "$p" ROLE | first) == master ]] && lost=$p && break
done
redis_cli "$lost" FLUSHALL >/dev/null
# at 6000 events/s replay takes about 28 s over the 165,000 events: it
# is still running when the check 10 s into the outage below looks
"$BIN/replay" --config "$T_DIR/projector.yaml" --node "127.0.0.1:$lost" --max-rate 6000 \
    >"$T_DIR/replay.out" 2>"$T_DIR/replay.err" &
replay_pid=$!
T_PIDS+=("$replay_pid")
wait_log "$T_DIR/replay.err" 'events read' 30
# The projector drains the backlog at whatever speed this machine has (82,565
# of the 120,000 events went before a graceful stop of Kafka ended, in one CI
# run), so it is held (SIGSTOP) from its first applied batch (as the metrics
# page shows it, rendered once a second) until the broker is down: its drain
# meets the outage on any machine, and it applies more of the backlog while
# nothing can be committed.
start_projector projector "$T_DIR/projector.yaml"
applied() { # events the projector applied, as its metrics page says (0 before any)
    local n
    n=$(awk '/"applied"/ { print $2 }' <(curl -sf "$url/metrics") | first)
    echo "${n:-0}"
}
c1=0 deadline=$((SECONDS + 20))
while ((c1 == 0)); do
    ((SECONDS < deadline)) || fail "the projector applied nothing of the backlog in 20 s"
    sleep 0.02
    c1=$(applied)
done
kill -STOP "$PROJECTOR_PID"
((c1 < 120000)) || fail "the projector had applied the whole backlog at its first look"
lb_kafka_stop 2>>"$T_DIR/kafka-restart.log" || {
    kill -CONT "$PROJECTOR_PID"
    fail "stopping Kafka failed"
}
kill -CONT "$PROJECTOR_PID"
kill -0 "$replay_pid" 2>/dev/null || fail "replay had ended before Kafka stopped: $(tail -n 3 "$T_DIR/replay.err")"
log "Kafka stopped while the projector drains (it had applied $c1 of the 120000-event backlog) and replay reads"
sleep 10
c2=$(applied)
((c2 > c1)) || fail "the projector applied nothing while Kafka was away ($c2 applied, $c1 before)"
kill -0 "$replay_pid" 2>/dev/null || fail "replay exited during the Kafka outage: $(cat "$T_DIR/replay.err")"
kill -0 "$PROJECTOR_PID" 2>/dev/null || fail "the projector exited during the Kafka outage"
lb_kafka_start >>"$T_DIR/kafka-restart.log" 2>&1 || fail "Kafka did not start again"
log "Kafka is back"
status=0
wait "$replay_pid" || status=$?
[[ $status == 0 ]] || fail "replay exited $status after the Kafka restart: $(tail -n 5 "$T_DIR/replay.err")"
grep -q 'of [0-9]* board(s) rebuilt' "$T_DIR/replay.out" || fail "replay rebuilt nothing"
wait_caught_up 180
verify "${MODE_ORACLE[@]}"
ok "Kafka restarted under the projector's drain and replay's read: both went on, exact"

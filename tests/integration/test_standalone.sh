#!/usr/bin/env bash
# A standalone Redis (cluster support disabled) is detected and written
# through the same code path: every slot goes to it.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_kafka
port=$(lb_free_port_base 1) || fail "no free port for Redis"
mkdir -p "$T_DIR/redis"
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$T_DIR/redis" \
    --logfile "$T_DIR/redis.log" </dev/null >/dev/null 2>&1 &
redis_pid=$!
T_PIDS+=("$redis_pid")
lb_wait_for 10 redis-cli -p "$port" ping >/dev/null 2>&1 || fail "redis-server did not start"

cat >"$T_DIR/projector.yaml" <<YAML
kafka:
  brokers: $BROKERS
  group: lb-test
  topics: [scores]
  commit_interval: 200ms
input:
  schemas:
    1: $repo/schemas/score_event.avsc
redis:
  nodes: [127.0.0.1:$port]
YAML
produce -n 20000 --seed 81 --boards 10 --players 1000 --start "$START" --days 3
start_projector projector "$T_DIR/projector.yaml"
wait_caught_up 60
"$BIN/verify_state" --events "$T_DIR/events.tsv" --nodes "127.0.0.1:$port" >"$T_DIR/verify.out" 2>&1 || {
    cat "$T_DIR/verify.out" >&2
    fail "Redis does not hold what the events say"
}
ok "$(tail -n 1 "$T_DIR/verify.out")"
assert_committed_at_end
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"
grep -q "standalone Redis" "$T_DIR/projector.log" || fail "standalone mode was not detected"
ok "standalone Redis: same path, exact state"

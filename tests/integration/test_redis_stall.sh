#!/usr/bin/env bash
# All of Redis down for ~20 s (every node, masters and replicas, frozen with
# SIGSTOP, so no failover can hide it): the projector keeps its group
# membership (its session timeout is 6 s), commits nothing during the
# outage, survives a rebalance (a second pod joins), and resumes by itself
# when Redis is back; no event is lost.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
COMMAND_TIMEOUT=500ms write_config "$T_DIR/projector.yaml"
start_projector projector "$T_DIR/projector.yaml"
produce -n 10000 --seed 41 --boards 8 --players 1000 --start "$START" --days 3
wait_caught_up 60
verify

pids=()
for i in 0 1 2 3 4 5; do
    pids+=("$(lb_redis_pid "$(redis_port "$i")")")
done
# shellcheck disable=SC2016 # expanded when the hook runs
on_exit 'kill -CONT "${pids[@]}" 2>/dev/null'
kill -STOP "${pids[@]}"
log "froze every Redis node"
frozen_at=$SECONDS
produce -n 10000 --seed 42 --boards 8 --players 1000 --start "$START" --days 3
sleep 2
first=$(committed_offsets | awk '{ print $1, $2 }')
sleep 8
second=$(committed_offsets | awk '{ print $1, $2 }')
[[ $first == "$second" ]] || fail "offsets were committed while Redis was frozen"
lag=$(committed_offsets | awk '{ lag += $3 - $2 } END { print lag + 0 }')
((lag > 0)) || fail "everything was committed although Redis was frozen"
kill -0 "$PROJECTOR_PID" || fail "the projector died while Redis was down"
ok "stalled with $lag events uncommitted while Redis was frozen"

# A second pod joins while the first is paused: the rebalance must not leave
# any partition paused for good once Redis is back.
first_pid=$PROJECTOR_PID
start_projector projector2 "$T_DIR/projector.yaml"
second_pid=$PROJECTOR_PID
lb_wait_for 30 grep -q "assigned" "$T_DIR/projector2.log" || fail "the second pod got no partitions"
while ((SECONDS - frozen_at < 20)); do
    sleep 1
done
third=$(committed_offsets | awk '{ print $1, $2 }')
[[ $first == "$third" ]] || fail "offsets were committed while Redis was frozen"
kill -0 "$first_pid" || fail "the first projector died while Redis was down"

kill -CONT "${pids[@]}"
log "Redis is back after $((SECONDS - frozen_at)) s"
wait_caught_up 120
verify
assert_committed_at_end
grep -q 'msg="writing [0-9]* board request(s) failed (attempt' "$T_DIR/projector.log" ||
    fail "no retry was logged"
grep -q 'held at offset [0-9]* (redis)' "$T_DIR/projector.log" || fail "partitions were not held"
kill -0 "$first_pid" || fail "the first projector died"
kill -0 "$second_pid" || fail "the second projector died"
ok "resumed by itself after a rebalance during the outage; nothing lost"

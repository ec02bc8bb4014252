#!/usr/bin/env bash
# Masters die while events flow (kill -9). The projector rides through every
# failover without a restart and ends with every event in Redis.
#
# Then the case WAIT exists for: a master whose replica lags (frozen) keeps
# acknowledging writes it cannot replicate, and dies. With WAIT (the
# default: one replica when the master has one) none of those writes is
# committed, so after the failover they are written again and nothing is
# missing. The same scenario with wait_replicas: 0 is run last as a control:
# it must lose committed events, or this test would prove nothing.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cluster_ok() { redis_cli "$1" cluster info 2>/dev/null | grep 'cluster_state:ok' >/dev/null; }
# wait_calls PORT - how many WAITs the node answered (since its last CONFIG RESETSTAT)
wait_calls() {
    local calls
    calls=$(redis_cli "$1" INFO commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_wait:calls=\([0-9]*\),.*/\1/p')
    echo "${calls:-0}"
}

# kill_master_under_load PORT [FREEZE_REPLICA]
kill_master_under_load() {
    local master=$1 freeze=${2:-0} replica
    replica=$(replica_of "$master")
    [[ -n $replica ]] || fail "master $master has no replica"
    local master_pid replica_pid
    master_pid=$(lb_redis_pid "$master")
    replica_pid=$(lb_redis_pid "$replica")
    produce -n 30000 --seed "$((60 + master % 10))" --boards 30 --players 3000 \
        --start "$START" --days 3 --rate 7500 &
    local producer=$!
    T_PIDS+=("$producer")
    sleep 1
    if ((freeze)); then
        # The replica stops, and the master drops its replication link, so
        # from now on the master acknowledges writes that exist nowhere else.
        # (Freezing alone is not enough: the kernel would buffer the stream.)
        # Kept shorter than the failure detection, so the replica still
        # counts as healthy and WAIT still asks for it.
        # shellcheck disable=SC2016 # expanded when the hook runs
        on_exit 'kill -CONT '"$replica_pid"' 2>/dev/null'
        kill -STOP "$replica_pid"
        redis_cli "$master" client kill type replica >/dev/null
        log "froze replica $replica and cut its link to master $master"
    fi
    sleep 1.2
    kill -9 "$master_pid"
    log "killed master $master (pid $master_pid) while events flow"
    ((freeze)) && kill -CONT "$replica_pid"
    lb_wait_for 30 is_master "$replica" || fail "replica $replica was not promoted"
    lb_wait_for 30 cluster_ok "$replica" || fail "the cluster did not recover"
    log "replica $replica is the master now"
    wait "$producer" || fail "producer failed"
}

# Masters ping their replicas every 100 s, not 10: until the first write,
# the replicas of the new cluster stay "loading" at offset 0 behind masters
# at offset 0 when the projector starts, however long Kafka took (step 0).
export REDIS_CONF_EXTRA=$'repl-ping-replica-period 100\nrepl-timeout 300'
start_services
# WAIT gives up after 250 ms, not the default 1 s: a WAIT falls short only
# when sent early enough in the replica's 1.2 s freeze (section 2) to time
# out before the master dies; with 1 s that was one WAIT, the first 0.2 s
write_config "$T_DIR/wait.yaml" "" "  wait_timeout: 250ms"
write_config "$T_DIR/nowait.yaml" "" "  wait_replicas: 0"
masters=()
for i in 0 1 2 3 4 5; do
    port=$(redis_port "$i")
    is_master "$port" || continue
    masters+=("$port")
    [[ $(redis_cli "$port" INFO replication | tr -d '\r' | sed -n 's/^master_repl_offset://p') == 0 ]] ||
        fail "master $port has moved from replication offset 0: step 0 is not staged"
done
(($(redis_cli "${masters[0]}" CLUSTER SHARDS | grep -c '^loading$') == 3)) ||
    fail "CLUSTER SHARDS does not call the 3 replicas loading: step 0 is not staged"
start_projector projector "$T_DIR/wait.yaml"
lb_wait_for 30 grep -q 'assigned [0-9]* partition' "$T_DIR/projector.log" ||
    fail "the projector was assigned no partition"
sleep 1
for port in "${masters[@]}"; do redis_cli "$port" CONFIG RESETSTAT >/dev/null; done
produce -n 10000 --seed 59 --boards 30 --players 3000 --start "$START" --days 3
wait_caught_up 60

# 0. the projector started on a new cluster, whose replicas Redis calls
#    "loading" until something is written (as it does a replica that never
#    synced: test_unsynced): it asked the masters, and waits for the
#    replicas from its first write. 10,000 events in batches of at most
#    2,000 reach each master in 5 batches or more, each ended by a WAIT
#    (the masters were asked, WAIT 0 0, before the counts were reset)
for port in "${masters[@]}"; do
    (($(wait_calls "$port") >= 5)) ||
        fail "master $port answered $(wait_calls "$port") WAIT(s): the projector wrote to a new cluster without waiting for its replicas"
done
ok "the projector waits for replicas from its first write on a new cluster"

# 1. a master dies
kill_master_under_load "$(redis_port 0)"
wait_caught_up 120
verify
assert_committed_at_end
kill -0 "$PROJECTOR_PID" || fail "the projector died"
ok "master killed under load: failover followed without a restart, nothing lost"

# 2. a master with a lagging replica dies; WAIT kept its writes uncommitted
kill_master_under_load "$(redis_port 1)" 1
wait_caught_up 120
verify
assert_committed_at_end
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"
shortfalls=$(grep -o 'totals: .*' "$T_DIR/projector.log" | grep -o 'wait_shortfalls=[0-9]*' |
    cut -d= -f2)
((shortfalls > 0)) || fail "WAIT never fell short: the replica was not lagging"
ok "lagging replica, master killed: $shortfalls WAIT shortfalls held the offsets, nothing lost"

# 3. control: the same without WAIT loses acknowledged, committed events
start_projector nowait "$T_DIR/nowait.yaml"
kill_master_under_load "$(redis_port 2)" 1
wait_caught_up 120
nodes=""
for ((i = 0; i < 6; i++)); do
    nodes+="${nodes:+,}127.0.0.1:$(redis_port "$i")"
done
status=0
"$BIN/verify_state" --events "$T_DIR/events.tsv" --nodes "$nodes" >"$T_DIR/control.out" 2>&1 ||
    status=$?
[[ $status == 1 ]] || {
    cat "$T_DIR/control.out" >&2
    fail "without WAIT the lagging-replica failover lost nothing: the scenario has no teeth"
}
ok "control: without WAIT the same failover lost committed events ($(tail -n 1 "$T_DIR/control.out" |
    grep -o '[0-9]* differences'))"

# 4. replicas that come back: a pod started while every master had none
#    writes without WAIT, and waits for them again within seconds of their
#    return (the map is read again every 10 s while a master has none)
stop_projector "$PROJECTOR_PID"
start_projector again "$T_DIR/wait.yaml"
produce -n 2000 --seed 64 --boards 30 --players 3000 --start "$START" --days 3
wait_caught_up 60
lb_redis_cluster_resume 2>>"$T_DIR/redis-resume.log" || fail "the killed nodes did not come back"
masters=()
for i in 0 1 2 3 4 5; do
    port=$(redis_port "$i")
    is_master "$port" && masters+=("$port")
done
((${#masters[@]} == 3)) || fail "expected 3 masters, found ${#masters[@]}"
replica_online() { redis_cli "$1" INFO replication | grep -q 'state=online'; }
for port in "${masters[@]}"; do
    lb_wait_for 60 replica_online "$port" || fail "master $port has no replica online again"
    redis_cli "$port" CONFIG RESETSTAT >/dev/null
done
produce -n 7000 --seed 65 --boards 30 --players 3000 --start "$START" --days 3 --rate 500
wait_caught_up 60
for port in "${masters[@]}"; do
    (($(wait_calls "$port") > 0)) || fail "master $port answered no WAIT after its replica came back"
done
ok "replicas back after the pod started: it waits for them again"

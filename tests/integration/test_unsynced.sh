#!/usr/bin/env bash
# A new cluster whose replicas never synced: the nodes require a password
# and the replicas give their masters another one (a rotation that forgot
# masterauth), so each sits on the cluster bus with its link to its master
# down, trying again every second. Redis 7.0
# calls such a replica "loading", exactly as it calls the in-sync replicas
# of a new cluster, and its master, which no replica ever reached, stays at
# replication offset 0 however much is written. With wait_replicas: auto
# the projector must not wait for a replica that cannot answer (every batch
# would fall short and hold forever): it asks each master, writes without
# WAIT as documented for a master without a replica, commits everything,
# and says so: the log, lb_redis_writes_without_wait_total, and the alert
# ProjectorWritingWithoutReplica (alone: nothing is held). Then the
# replicas are repaired, and one breaks again after it synced: the cluster
# still calls it online, so the pod holds rather than commit writes no
# replica has, until the replica is shut down (the redis-failover runbook).
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REDIS_PASSWORD=pw-$RANDOM$RANDOM
export REDIS_PASSWORD REDIS_MASTERAUTH=old-$REDIS_PASSWORD
start_services
pick_metrics_port
# shellcheck disable=SC2016 # ${...} is for the projector's configuration
write_config "$T_DIR/projector.yaml" "$METRICS_YAML" '  password: ${REDIS_PASSWORD}'

masters=() replicas=()
for i in 0 1 2 3 4 5; do
    port=$(redis_port "$i")
    if is_master "$port"; then masters+=("$port"); else replicas+=("$port"); fi
done
((${#masters[@]} == 3 && ${#replicas[@]} == 3)) || fail "expected 3 masters and 3 replicas"
for port in "${replicas[@]}"; do
    redis_cli "$port" INFO replication | grep -q 'master_link_status:down' ||
        fail "replica $port is linked to its master: the scenario is not staged"
done
shards=$(redis_cli "${masters[0]}" CLUSTER SHARDS)
(($(grep -c '^loading$' <<<"$shards") == 3)) ||
    fail "CLUSTER SHARDS does not call the 3 replicas loading: the scenario is not staged"
ok "a new cluster whose replicas never synced: Redis calls them loading"

start_projector projector "$T_DIR/projector.yaml"
produce -n 6000 --seed 91 --boards 20 --players 800 --start "$START" --days 3
wait_caught_up 60
verify
assert_committed_at_end
# the alert, on a pod that keeps up: a scrape, more events written (without
# WAIT), a scrape once its page shows them applied and no lag
settled() { # APPLIED: the page shows that many events applied, and no lag
    local page
    page=$(curl -sf "$METRICS_URL/metrics" | "$BIN/promparse") || return 1
    awk -v want="$1" '$1 ~ /^lb_consumer_lag\{/ { n++; lag += $2 }
        $1 == "lb_events_total{outcome=\"applied\"}" { applied = $2 }
        END { exit !(n > 0 && lag == 0 && applied == want) }' <<<"$page"
}
# scrape_around NAME APPLIED N SEED - the alert test's two scrapes of a pod
# that keeps up: one once it shows APPLIED events applied and no lag, then N
# events more, one once it shows them applied and no lag again
scrape_around() {
    lb_wait_for 30 settled "$2" || fail "the page does not show $2 events applied and no lag"
    alerts_scrape "$1" 1
    produce -n "$3" --seed "$4" --boards 20 --players 800 --start "$START" --days 3
    wait_caught_up 60
    lb_wait_for 30 settled $(($2 + $3)) || fail "the page does not show $(($2 + $3)) events applied"
    metrics_scrape "$METRICS_URL" "$T_DIR/alerts/$1/001"
}
scrape_around unsynced 6000 3000 92
verify
assert_committed_at_end
alerts_test unsynced ProjectorWritingWithoutReplica
unwaited=$(metrics_value "$T_DIR/alerts/unsynced/001" 'lb_redis_writes_without_wait_total{}')
((unwaited > 0)) || fail "lb_redis_writes_without_wait_total is $unwaited"
grep -q 'without WAIT: it has no healthy replica' "$T_DIR/projector.log" ||
    fail "the log does not say that writes go without WAIT"
for port in "${masters[@]}"; do
    offset=$(redis_cli "$port" INFO replication | tr -d '\r' | sed -n 's/^master_repl_offset://p')
    [[ $offset == 0 ]] || fail "master $port is at replication offset $offset, not 0: not the case staged"
done
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"
shortfalls=$(grep -o 'totals: .*' "$T_DIR/projector.log" | grep -o 'wait_shortfalls=[0-9]*' |
    cut -d= -f2)
[[ -n $shortfalls ]] || fail "the projector logged no totals"
[[ $shortfalls == 0 ]] ||
    fail "$shortfalls WAIT(s) fell short: the projector waited for replicas that never synced"
ok "every event committed and in Redis, written without WAIT, no batch held on a replica that cannot answer"

# 2. ops/runbooks/redis-failover.md, step 5: the replicas repaired, then one
#    whose link breaks for good while the cluster still calls it online. The
#    pod holds its master's partitions on WAIT shortfalls rather than commit
#    writes no replica has; the replica shut down, as the runbook says, the
#    pod resumes by itself and nothing is missing.
for port in "${replicas[@]}"; do
    redis_cli "$port" CONFIG SET masterauth "$REDIS_PASSWORD" >/dev/null
done
replica_online() { redis_cli "$1" INFO replication | grep -q 'state=online'; }
# health_of NODE PORT - what CLUSTER SHARDS, asked on NODE, calls the node
# listening on PORT
health_of() {
    redis_cli "$1" CLUSTER SHARDS | tr -d '\r' |
        awk -v port="$2" 'prev == "port" { mine = ($0 == port) } mine && prev == "health" { print; exit }
            { prev = $0 }'
}
for port in "${masters[@]}"; do
    lb_wait_for 30 replica_online "$port" || fail "master $port has no replica online after the repair"
done
# and CLUSTER SHARDS, which the pod asks, calls them online too (it can say
# loading for a moment after INFO says online: the pod then writes without
# WAIT until it looks again, which CI51 met)
shards_online() { # as every master's CLUSTER SHARDS says
    local m r
    for m in "${masters[@]}"; do
        for r in "${replicas[@]}"; do
            [[ $(health_of "$m" "$r") == online ]] || return 1
        done
    done
}
lb_wait_for 30 shards_online || fail "CLUSTER SHARDS does not call the repaired replicas online"
start_projector again "$T_DIR/projector.yaml"
produce -n 3000 --seed 93 --boards 20 --players 800 --start "$START" --days 3
wait_caught_up 60
# the repaired replicas are waited for again: no write without WAIT, no alert
scrape_around repaired 3000 2000 95
alerts_test repaired
[[ $(metrics_value "$T_DIR/alerts/repaired/001" 'lb_redis_writes_without_wait_total{}') == 0 ]] ||
    fail "writes went without WAIT although every replica was repaired"
master=${masters[0]}
replica=$(replica_of "$master")
redis_cli "$replica" CONFIG SET masterauth "old-$REDIS_PASSWORD" >/dev/null
redis_cli "$master" CLIENT KILL TYPE replica >/dev/null
link_down() { redis_cli "$1" INFO replication | grep -q 'master_link_status:down'; }
lb_wait_for 10 link_down "$replica" || fail "replica $replica is still linked to $master"
[[ $(health_of "$master" "$replica") == online ]] ||
    fail "the cluster calls replica $replica $(health_of "$master" "$replica"), not online: not the case staged"
produce -n 3000 --seed 94 --boards 20 --players 800 --start "$START" --days 3
lb_wait_for 30 grep -q 'WAIT: 0 of 1 replica' "$T_DIR/again.log" ||
    fail "no WAIT fell short on master $master whose replica does not replicate"
sleep 3
lag=$(group_lag)
((lag > 0)) || fail "offsets were committed for writes no replica has"
ok "a replica online but not replicating: the pod holds (lag $lag) rather than commit unreplicated writes"
kill "$(lb_redis_pid "$replica")"
wait_caught_up 60
verify
assert_committed_at_end
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"
ok "the replica shut down (the runbook's way out): the pod resumed by itself, nothing lost"

#!/usr/bin/env bash
# ops/chaos.sh - the chaos soak: three projector pods in one group, a steady
# producer (best, latest and sum boards, with retractions and retries, three
# writer schema versions registered in a schema registry; res-* boards whose
# days and weeks close and publish final standings while their late events
# keep coming), and a fault every few seconds, taken in turn from a seeded
# shuffle of:
#
#   pod_kill       SIGKILL a pod (the harness restarts it)
#   pod_freeze     SIGSTOP a pod past its session timeout, then SIGCONT (it
#                  wakes up as a zombie)
#   master_kill    SIGKILL a Redis master: its replica takes over; the old
#                  master is started again and rejoins as a replica
#   kafka_restart  stop the Kafka broker, start it again a few seconds later
#   lost_shard     SIGKILL a master and all its replicas and delete their
#                  data; a new empty node takes their slots by the runbook's
#                  procedure (ops/runbooks/lost-shard.md, run as written) and
#                  replay rebuilds them while events flow; a replica is added
#   registry_outage  SIGKILL the schema registry and a pod: the pod comes back
#                  with no schema cached and waits; the registry is started
#                  again (same ids) a few seconds later
#
# A fault fires only on a healthy cluster (every node up and agreeing, every
# master with a replica, Kafka up, every pod running); pods that exit are
# restarted and counted. At the end it waits for the group to catch up and
# checks Redis against the independent oracle (tests/integration/verify_state):
# no event lost, none counted twice, every key, member, score and expiry
# exact, every closed window's final standings exact with its late events
# left out. The seed fixes the event stream and the fault schedule (kind,
# target, second); both are printed, and --seed runs the same again.
#
#   ops/chaos.sh [--duration SECONDS] [--seed N] [--rate EVENTS_PER_S] [--secure]
#
# --secure: the same on a TLS-only Redis Cluster (mutual TLS) and a SASL_SSL
# Kafka broker (REDIS_TLS=1, KAFKA_SASL=1 of ops/services.sh).
# Defaults: 120 s (what ops/test.sh runs), seed 1, 400 events/s. Binaries
# from LB_BIN (default build/bin). Exit 0 when the oracle agrees.
set -euo pipefail

duration=120 seed=1 rate=400
while (($#)); do
    case $1 in
    --secure)
        # TLS-only Redis Cluster (mutual TLS) and SASL_SSL Kafka, the pods
        # and replay connecting as the broker's admin user
        export REDIS_TLS=1 REDIS_TLS_AUTH_CLIENTS=yes KAFKA_SASL=1 KAFKA_USER=admin
        shift
        ;;
    --duration) duration=$2 && shift 2 ;;
    --seed) seed=$2 && shift 2 ;;
    --rate) rate=$2 && shift 2 ;;
    -h | --help)
        sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "chaos: unknown argument '$1' (see --help)" >&2
        exit 2
        ;;
    esac
done
for v in duration seed rate; do
    [[ ${!v} =~ ^[0-9]+$ ]] || {
        echo "chaos: --$v wants a whole number, not '${!v}'" >&2
        exit 2
    }
done

# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tests/integration/lib.sh"

# ---- the schedule: a seeded shuffle of the five kinds, again and again --------------
kinds=(pod_kill pod_freeze master_kill kafka_restart lost_shard registry_outage)
RANDOM=$seed
schedule=()
at=10
while ((at < duration)); do
    order=("${kinds[@]}")
    for ((i = ${#order[@]} - 1; i > 0; i--)); do
        j=$((RANDOM % (i + 1)))
        swap=${order[i]} order[i]=${order[j]} order[j]=$swap
    done
    for kind in "${order[@]}"; do
        ((at < duration)) || break
        schedule+=("$at $kind $((RANDOM % 3))")
        at=$((at + 8 + RANDOM % 8))
    done
done
log "seed $seed, $duration s, $rate events/s; fault schedule (second kind target):"
printf '  %s\n' "${schedule[@]}" >&2

# ---- services and pods ------------------------------------------------------------------
knows() { redis_cli "$1" CLUSTER NODES | grep -q ":$2@"; } # NODE PORT: NODE has met PORT
start_services
export GROUP=lb-chaos
"$BIN/lbadmin" create-topic --brokers "$BROKERS" "${KAFKA_X[@]}" --topic scores-results \
    --partitions 3 >>"$T_DIR/lbadmin.log" 2>&1 || fail "cannot create scores-results"
runbook_procedure "$repo/ops/runbooks/lost-shard.md" "$T_DIR/procedure.sh"
export PATH=$BIN:$PATH
pods=(0 0 0)
declare -A count=([pod_kill]=0 [pod_freeze]=0 [master_kill]=0 [kafka_restart]=0 [lost_shard]=0
    [registry_outage]=0 [pod_restarts]=0 [replays]=0)

# the schema registry the producer registers its writers in and the pods
# fetch them from (the project's test registry; its ids survive a restart)
registry_port=$(lb_free_port_base 1 32000 32700) || fail "no free port for the registry"
start_registry() {
    test_schema_registry --listen "127.0.0.1:$registry_port" --first-id 100 \
        --state "$T_DIR/registry.state" >>"$T_DIR/registry.log" 2>&1 &
    registry_pid=$!
    T_PIDS+=("$registry_pid")
    lb_wait_for 10 curl -sf "http://127.0.0.1:$registry_port/subjects" -o /dev/null ||
        fail "the schema registry did not start"
}
start_registry
export REGISTRY_YAML="  registry:
    url: http://127.0.0.1:$registry_port
    timeout: 1s"

# the pods' configuration names the nodes alive when it is written
pod_config() { write_config "$T_DIR/projector.yaml" "$MODE_PROFILES$MODE_RESULTS"; }
start_pod() {
    pod_config
    start_projector "pod$1" "$T_DIR/projector.yaml"
    pods[$1]=$PROJECTOR_PID
}
# restart the pods that exited (a SIGKILL, a fatal error), and count them
tend_pods() {
    local i
    for i in 0 1 2; do
        if ! kill -0 "${pods[i]}" 2>/dev/null ||
            [[ $(awk '{ print $3 }' "/proc/${pods[i]}/stat" 2>/dev/null) == Z ]]; then
            wait "${pods[i]}" 2>/dev/null || true
            start_pod "$i"
            count[pod_restarts]=$((count[pod_restarts] + 1))
            log "pod $i restarted"
        fi
    done
}

healthy() {
    local p nodes
    lb_kafka_status >/dev/null 2>&1 || return 1
    for p in $(live_ports); do
        redis_cli "$p" CLUSTER INFO | grep -q '^cluster_state:ok' || return 1
    done
    nodes=$(redis_cli "$(live_ports | first)" CLUSTER NODES) || return 1
    grep -q 'fail' <<<"$nodes" && return 1
    kill -0 "$registry_pid" 2>/dev/null || return 1
    [[ $(wc -l <<<"$nodes") == "$(live_ports | wc -l)" ]] || return 1
    # every master with slots has a connected replica
    awk '$3 ~ /master/ && NF > 8 { m[$1] = 1 } $3 ~ /slave/ && $8 == "connected" { r[$4] = 1 }
         END { for (id in m) if (!(id in r)) exit 1 }' <<<"$nodes"
}

# ---- the faults ---------------------------------------------------------------------------
fault_pod_kill() {
    kill -9 "${pods[$1]}"
    log "pod $1 (pid ${pods[$1]}) SIGKILLed"
    sleep 1
    tend_pods
}
fault_pod_freeze() {
    kill -STOP "${pods[$1]}"
    log "pod $1 frozen past its session timeout"
    sleep 8
    kill -CONT "${pods[$1]}"
}
fault_master_kill() {
    local -a m
    mapfile -t m < <(slot_masters)
    local port=${m[$1 % ${#m[@]}]}
    kill -9 "$(lb_redis_pid "$port")"
    log "master $port SIGKILLed; its replica takes over"
    sleep 5
    lb_redis_cluster_resume 2>>"$T_DIR/chaos-redis.log" || fail "the killed master did not rejoin"
    log "$port is back, as a replica"
}
fault_kafka_restart() {
    lb_kafka_stop 2>>"$T_DIR/chaos-kafka.log" || fail "stopping Kafka failed"
    log "Kafka stopped"
    sleep 5
    lb_kafka_start >>"$T_DIR/chaos-kafka.log" 2>&1 || fail "Kafka did not start again"
    log "Kafka is back"
}
fault_lost_shard() {
    local -a m
    mapfile -t m < <(slot_masters)
    lose_shard "${m[$1 % ${#m[@]}]}"
    local survivor
    survivor=$(live_ports | first)
    local port replica survivors
    port=$(new_node_port) || fail "no free port"
    lb_redis_node_add "$port" || fail "no new node"
    survivors=$(live_ports | grep -vx "$port" | sed 's/^/127.0.0.1:/' | tr '\n' ' ')
    pod_config # replay's seeds: the nodes alive now
    local rcli_opts=""
    [[ ${REDIS_TLS:-0} == 1 ]] &&
        rcli_opts="--tls --cacert $(lb_tls_dir)/ca.crt --cert $(lb_tls_dir)/client.crt --key $(lb_tls_dir)/client.key"
    RCLI_OPTS=$rcli_opts SURVIVORS=$survivors NEW=127.0.0.1:$port CONFIG=$T_DIR/projector.yaml \
        timeout 300 bash -euo pipefail "$T_DIR/procedure.sh" >>"$T_DIR/chaos-procedure.log" 2>&1 ||
        fail "the lost-shard procedure failed: $(tail -n 3 "$T_DIR/chaos-procedure.log")"
    count[replays]=$((count[replays] + 1))
    log "the runbook's procedure gave the shard to 127.0.0.1:$port and replay rebuilt it"
    replica=$(new_node_port) || fail "no free port"
    lb_redis_node_add "$replica" || fail "no replica node"
    redis_cli "$survivor" CLUSTER MEET 127.0.0.1 "$replica" >/dev/null
    lb_wait_for 30 knows "$replica" "$port" ||
        fail "the replica did not meet the cluster"
    redis_cli "$replica" CLUSTER REPLICATE "$(redis_cli "$port" CLUSTER MYID)" >/dev/null ||
        fail "CLUSTER REPLICATE failed"
    log "127.0.0.1:$replica replicates it"
}

fault_registry_outage() {
    kill -9 "$registry_pid"
    wait "$registry_pid" 2>/dev/null || true
    log "schema registry SIGKILLed"
    fault_pod_kill "$1" # its new self has nothing cached: it waits
    sleep 5
    start_registry
    log "schema registry is back"
}

# ---- the run ---------------------------------------------------------------------------------
for i in 0 1 2; do
    start_pod "$i"
done
produce -n $((rate * duration)) --seed "$seed" "${MODE_GEN[@]}" --rate "$rate" --evolve \
    --board-prefix "best-,asc-,lat-,sum-,top-,spl-,res-" \
    --registry "http://127.0.0.1:$registry_port" &
producer=$!
T_PIDS+=("$producer")
started=$SECONDS
fired=()
for item in "${schedule[@]}"; do
    read -r second kind target <<<"$item"
    while ((SECONDS - started < second)); do
        tend_pods
        sleep 0.5
    done
    waited=$SECONDS
    until healthy; do
        tend_pods
        ((SECONDS - waited < 120)) || fail "the cluster is not healthy 120 s after the last fault"
        sleep 1
    done
    tend_pods
    log "t=$((SECONDS - started))s: $kind (target $target)"
    "fault_$kind" "$target"
    count[$kind]=$((count[$kind] + 1))
    fired+=("$((SECONDS - started)) $kind $target")
done
wait "$producer" || fail "the producer failed"
until healthy; do
    tend_pods
    sleep 1
done
tend_pods
wait_caught_up 300
verify "${MODE_ORACLE[@]}" "${MODE_RESULTS_ORACLE[@]}"
grep -q "^verify_state: [1-9][0-9]* closed windows checked" "$T_DIR/verify.out" ||
    fail "no window closed: $(head -n 1 "$T_DIR/verify.out")"
assert_committed_at_end
events=$(wc -l <"$T_DIR/events.tsv")
summary="chaos: seed $seed, $((SECONDS - started)) s, $events events; faults:"
for kind in "${kinds[@]}"; do
    summary+=" $kind=${count[$kind]}"
done
summary+="; pod restarts ${count[pod_restarts]}, replays ${count[replays]}; oracle: exact"
summary+=" ($(sed -n 's/^verify_state: \([0-9]*\) closed windows checked.*, \([0-9]*\) late writes.*/\1 closed windows, \2 late writes left out/p' "$T_DIR/verify.out"))"
printf '%s\n' "$summary"
log "faults as fired (second kind target): ${fired[*]}"
ok "$summary"

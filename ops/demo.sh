#!/usr/bin/env bash
# The main job on the local default, from nothing:
#
#   installs what is missing, builds, starts a Redis Cluster (3 masters +
#   3 replicas) and a Kafka broker on loopback, produces a sample stream,
#   runs the projector until it has committed the end of the topic, and
#   prints the top 10 of every window of one board.
#
#   ops/demo.sh [--keep]     --keep leaves Redis and Kafka running afterwards
#                            (stop them with ops/redis-cluster.sh stop and
#                            ops/kafka.sh stop)
#
# Ports: REDIS_PORT_BASE (7000..7005) and KAFKA_PORT (9092, controller 9093).
# Sample size: DEMO_EVENTS (200000), DEMO_BOARDS (8), DEMO_PLAYERS (5000).
# State: LB_STATE_DIR (default ${TMPDIR:-/tmp}/leaderboard-projector-demo),
# emptied at the start so every run shows the same fresh stream.
set -euo pipefail
export LB_STATE_DIR=${LB_STATE_DIR:-${TMPDIR:-/tmp}/leaderboard-projector-demo}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
keep=0
[[ ${1-} == --keep ]] && keep=1
events=${DEMO_EVENTS:-200000}
boards=${DEMO_BOARDS:-8}
players=${DEMO_PLAYERS:-5000}
group=leaderboard-projector
step() { printf '\n==> %s\n' "$*"; }

step "installing what is missing"
ops/install-deps.sh

step "building"
cmake -S . -B build >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
bin=$repo/build/bin
export LB_BIN=$bin

# shellcheck source=ops/services.sh
. ops/services.sh
projector_pid=""
started_redis=0
started_kafka=0
# Stops what this run started, and nothing else.
cleanup() {
    local status=$?
    lb_cleanup_begin
    # it may have ended already: cleanup goes on (set -e)
    if [[ -n $projector_pid ]]; then kill -9 "$projector_pid" 2>/dev/null || true; fi
    if ((keep == 0)); then
        if ((started_kafka)); then lb_kafka_stop >/dev/null 2>&1 || true; fi
        if ((started_redis)); then lb_redis_cluster_stop >/dev/null 2>&1 || true; fi
    fi
    lb_cleanup_end "$status"
}
trap cleanup EXIT
lb_trap_signals
trap 'exit 141' PIPE

step "starting a Redis Cluster and a Kafka broker on loopback"
export KAFKA_TOPICS=scores:6,scores-dlq:1
lb_services_wipe >/dev/null 2>&1 || true
started_redis=1
lb_redis_cluster_start || { started_redis=0; exit 1; }
started_kafka=1
lb_kafka_start || { started_kafka=0; exit 1; }
brokers=$(lb_kafka_bootstrap)

step "producing $events sample events ($boards boards, $players players, the last 7 days)"
# (loadgen's default start: --days before now, so no event is in the future)
"$bin/loadgen" --brokers "$brokers" -n "$events" --boards "$boards" --players "$players" \
    --days 7

step "projecting (config/local.yaml) until the group has committed the end of the topic"
"$bin/projector" --config config/local.yaml >"$(lb_state_dir)/projector.log" 2>&1 &
projector_pid=$!
start=$SECONDS
"$bin/lbadmin" wait-caught-up --brokers "$brokers" --topic scores --group "$group" --timeout 300
kill -TERM "$projector_pid"
wait "$projector_pid"
projector_pid=""
echo "projected in about $((SECONDS - start)) s; log: $(lb_state_dir)/projector.log"
grep -o 'totals: .*' "$(lb_state_dir)/projector.log" | tr -d '"' || true
"$bin/lbadmin" offsets --brokers "$brokers" --topic scores --group "$group"

step "top 10 of every window of board g1"
"$bin/lbread" --config config/local.yaml --board g1 --top 10

if ((keep)); then
    step "left running: Redis $(lb_redis_seeds), Kafka $brokers"
    echo "stop with: ops/redis-cluster.sh stop; ops/kafka.sh stop"
fi

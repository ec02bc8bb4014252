# shellcheck shell=bash
#
# tests/integration/lib.sh - shared by the integration tests; source it.
#
# Each test gets its own state directory and its own free ports, starts a
# real Redis Cluster (3 masters + 3 replicas) and a real Kafka broker with
# ops/services.sh, and an EXIT trap stops everything it started, by PID, on
# every exit path. On failure the directory (logs included) is kept and the
# tails of the logs are printed.
#
# Results and assertions go to stderr as "ok ..." / "FAIL ...", after the
# seconds since the test started (where a slow test spends its time).

set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${LB_BIN:-$repo/build/bin}
export LB_BIN=$BIN
# shellcheck source=ops/services.sh
. "$repo/ops/services.sh"

T_NAME=$(basename "$0" .sh)
T_DIR=$(mktemp -d "${TMPDIR:-/tmp}/lb-$T_NAME.XXXXXX")
export LB_STATE_DIR=$T_DIR/state
T_PIDS=()
T_SERVICES=0
T_ON_EXIT=()
# shellcheck disable=SC2034 # set by stop_projector, read by the tests
STOP_STATUS=0

log() { printf '%s %4ds: %s\n' "$T_NAME" "$SECONDS" "$*" >&2; }
fail() {
    log "FAIL: $*"
    exit 1
}
ok() { log "ok: $*"; }

# on_exit CMD... - run CMD during cleanup, before services are stopped.
on_exit() { T_ON_EXIT+=("$*"); }

# _t_tree PID - PID and every process below it, parents first
_t_tree() {
    local child
    printf '%s\n' "$1"
    for child in $(pgrep -P "$1"); do
        _t_tree "$child"
    done
}
t_cleanup() {
    local status=$? pid hook
    local -a tree
    lb_cleanup_begin
    for hook in "${T_ON_EXIT[@]}"; do
        eval "$hook" || true
    done
    for pid in "${T_PIDS[@]}"; do
        # this shell's own children only (a PID it reaped may be another
        # process's by now), each with what runs below it: a producer's
        # loadgen outlives its subshell, orphaned, so the tree is read
        # before anything in it is killed
        [[ $(ps -o ppid= -p "$pid" 2>/dev/null) -eq $$ ]] || continue
        mapfile -t tree < <(_t_tree "$pid")
        kill -9 "${tree[@]}" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if ((T_SERVICES)); then
        lb_kafka_stop >/dev/null 2>&1 || true
        lb_redis_cluster_stop >/dev/null 2>&1 || true
    fi
    # a sanitizer's report in anything the test kept fails it, whatever the
    # reporting process exited with (ASan's 1 is replay's own exit 1 too)
    local reports
    if ((status == 0)) && reports=$(grep -rlE --exclude-dir=state \
        -e 'ERROR: (Address|Leak)Sanitizer' -e 'runtime error: ' "$T_DIR" 2>/dev/null); then
        log "FAIL: a sanitizer reported in $(echo "$reports" | tr '\n' ' ')"
        status=1
    fi
    if ((status == 0)) && [[ -z ${LB_KEEP_LOGS-} ]]; then
        rm -rf "$T_DIR"
    else
        local f
        for f in "$T_DIR"/*.log; do
            [[ -f $f ]] || continue
            printf -- '----- last 30 lines of %s -----\n' "$f" >&2
            tail -n 30 "$f" >&2
        done
        if ((status)); then
            log "failed (status $status); logs kept in $T_DIR"
        else
            log "passed; logs kept in $T_DIR (LB_KEEP_LOGS)"
        fi
    fi
    lb_cleanup_end "$status"
}
trap t_cleanup EXIT
lb_trap_signals

# start_kafka [TOPICS] - a Kafka broker with TOPICS (default scores:6) on
# free ports.
start_kafka() {
    export KAFKA_TOPICS=${1:-scores:6}
    KAFKA_PORT=$(lb_free_port_base 2 21000 25000) || fail "no free ports for Kafka"
    export KAFKA_PORT KAFKA_CONTROLLER_PORT=$((KAFKA_PORT + 1))
    T_SERVICES=1
    lb_kafka_start >"$T_DIR/kafka-start.log" 2>&1 || fail "Kafka did not start"
    BROKERS=127.0.0.1:$KAFKA_PORT
    # with KAFKA_SASL=1 the test's own tools (loadgen, lbadmin) are the admin
    KAFKA_X=()
    local p
    for p in $(lb_kafka_client_props admin); do KAFKA_X+=(-X "$p"); done
}
KAFKA_X=()

# start_redis - a Redis Cluster 3+3 on free ports.
start_redis() {
    REDIS_PORT_BASE=$(lb_free_port_base 6) || fail "no free ports for Redis"
    export REDIS_PORT_BASE REDIS_NODE_TIMEOUT_MS=${REDIS_NODE_TIMEOUT_MS:-2000}
    T_SERVICES=1
    lb_redis_cluster_start >"$T_DIR/redis-start.log" 2>&1 || fail "Redis Cluster did not start"
}

# start_services [TOPICS] - Redis Cluster 3+3 and Kafka with TOPICS
# (default scores:6) on free ports.
start_services() {
    start_redis
    start_kafka "${1-}"
    SEEDS=$(lb_redis_seeds)
    log "services up: redis $SEEDS, kafka $BROKERS"
}

redis_port() { printf '%s\n' $((REDIS_PORT_BASE + $1)); }

# redis_cli PORT ARGS... - redis-cli on a node of the test cluster, with its
# credentials if it has any.
redis_cli() {
    local port=$1
    shift
    _lb_redis_cli "$port" "$@"
}

# first - the first line of stdin; the rest is read too, so that a writer
# is never killed by SIGPIPE (which pipefail would turn into a failure).
first() {
    local line=
    IFS= read -r line || true
    cat >/dev/null
    printf '%s\n' "$line"
}

# live_ports - the ports of every running node of the test cluster, nodes
# added since it started included.
live_ports() { lb_redis_cluster_status 2>/dev/null | awk '$3 == "alive" { print $1 }'; }

# every live node as a seed: tests kill masters, and a projector started
# later must still find a live node to learn the cluster from
seed_list() {
    local p list=""
    for p in $(live_ports); do
        list+="${list:+, }127.0.0.1:$p"
    done
    printf '%s\n' "$list"
}

# slot_masters - the ports of the masters that own slots now.
slot_masters() {
    local p
    for p in $(live_ports); do
        redis_cli "$p" CLUSTER NODES |
            awk -v p=":$p@" 'index($2, p) && $3 ~ /master/ && NF > 8 { f = 1 } END { exit !f }' &&
            printf '%s\n' "$p"
    done
    return 0
}

# master_of_slot SLOT - the port of the master that serves SLOT now (a
# migrating slot's "[slot->-node]" entries are not ranges, and skipped).
master_of_slot() {
    [[ $1 =~ ^[0-9]+$ ]] || return 1
    redis_cli "$(live_ports | first)" CLUSTER NODES | awk -v slot="$1" '$3 ~ /master/ && $3 !~ /(^|,)fail(,|$)/ {
        for (i = 9; i <= NF; i++) {
            if ($i ~ /^\[/) continue
            n = split($i, r, "-")
            if (slot + 0 >= r[1] + 0 && slot + 0 <= r[n] + 0) { split($2, a, "[:@]"); print a[2]; exit }
        }
    }'
}

# master_of_key KEY - the port of the master that holds KEY's slot now.
master_of_key() { master_of_slot "$(redis_cli "$(live_ports | first)" CLUSTER KEYSLOT "$1")"; }

# new_node_port - a free port for a node added to the cluster, not one a
# dead node had: the cluster still lists a failed node at its address until
# it is forgotten, and two entries there would confuse shard_ports.
new_node_port() {
    local known port k
    known=$(redis_cli "$(live_ports | first)" CLUSTER NODES | awk '{ split($2, a, "[:@]"); print a[2] }')
    for ((k = 0; k < 20; k++)); do
        port=$(lb_free_port_base 1) || return 1
        grep -qx "$port" <<<"$known" || {
            printf '%s\n' "$port"
            return 0
        }
    done
    return 1
}

# shard_ports MASTER_PORT - the master's port and its replicas' ports.
shard_ports() {
    local nodes id
    nodes=$(redis_cli "$1" CLUSTER NODES) || fail "CLUSTER NODES on $1"
    id=$(awk -v p=":$1@" 'index($2, p) { print $1 }' <<<"$nodes")
    printf '%s\n' "$1"
    awk -v m="$id" '$4 == m { split($2, a, "[:@]"); print a[2] }' <<<"$nodes"
}

# replica_of MASTER_PORT - the port of one of its replicas (nothing: none).
replica_of() { shard_ports "$1" | sed -n 2p; }

# is_master PORT - the node says it is a master (for lb_wait_for after a
# failover).
is_master() { [[ $(redis_cli "$1" ROLE 2>/dev/null | first) == master ]]; }

# kill_master_under_load MASTER DELAY PRODUCE_ARGS... - produce in the
# background, SIGKILL MASTER after DELAY seconds, and return once its replica
# is promoted and the producer is done.
kill_master_under_load() {
    local victim=$1 delay=$2 replica producer
    shift 2
    replica=$(replica_of "$victim")
    [[ -n $replica ]] || fail "master $victim has no replica"
    produce "$@" &
    producer=$!
    T_PIDS+=("$producer")
    sleep "$delay"
    kill -9 "$(lb_redis_pid "$victim")"
    lb_wait_for 30 is_master "$replica" || fail "replica $replica was not promoted"
    wait "$producer" || fail "producer failed"
}

# all_failed PORTS SURVIVOR - every node in PORTS (a list) is flagged
# "fail" (not "fail?": the cluster agreed) by SURVIVOR.
all_failed() {
    local p
    for p in $1; do
        redis_cli "$2" CLUSTER NODES |
            awk -v p=":$p@" 'index($2, p) && $3 ~ /(^|,)fail(,|$)/ { f = 1 } END { exit !f }' ||
            return 1
    done
}

# lose_shard MASTER_PORT - kill -9 the master and every replica of it and
# delete their data (machines lost with their disks); returns once the
# survivors agree they failed.
lose_shard() {
    local dead p survivor
    dead=$(shard_ports "$1")
    for p in $dead; do
        lb_redis_node_destroy "$p" || fail "cannot destroy node $p"
    done
    survivor=$(live_ports | first)
    lb_wait_for 30 all_failed "$dead" "$survivor" || fail "the cluster did not flag $dead as failed"
    log "lost the shard of $1: nodes ${dead//$'\n'/ } killed, data deleted, flagged failed"
}

# replace_shard N CONFIG [no-replay] - after lose_shard, ops/runbooks/lost-shard.md's
# procedure run exactly as written: a new, empty node takes the lost slots
# and replay --node rebuilds them (CONFIG's settings, every live node as a
# seed: $T_DIR/replay-N.yaml). Sets NEW; the output (replay's included) in
# $T_DIR/procedure-N.out. With no-replay, the procedure stops before its
# last step, replay (the test runs it later, as the runbook writes it).
replace_shard() {
    local n=$1 config=$2 port procedure=$T_DIR/lost-shard-procedure.sh
    [[ -s $procedure ]] || runbook_procedure "$repo/ops/runbooks/lost-shard.md" "$procedure"
    if [[ ${3-} == no-replay ]]; then
        grep -q '^replay ' "$procedure" || fail "the runbook's procedure has no replay step"
        grep -v '^replay ' "$procedure" >"$T_DIR/lost-shard-no-replay.sh"
        procedure=$T_DIR/lost-shard-no-replay.sh
    fi
    port=$(new_node_port) || fail "no free port for the new node"
    lb_redis_node_add "$port" || fail "the new node did not start"
    local survivors
    survivors=$(live_ports | grep -vx "$port" | sed 's/^/127.0.0.1:/' | tr '\n' ' ')
    NEW=127.0.0.1:$port
    # by the third loss every original node is gone: replay's seeds must
    # name nodes alive now (the runbook says so)
    local seeds
    seeds=$(sed 's/ $//; s/ /, /g' <<<"$survivors")
    sed "s/^  nodes: .*/  nodes: [$seeds, $NEW]/" "$config" >"$T_DIR/replay-$n.yaml"
    local status=0
    # the runbook calls replay by name
    PATH=$BIN:$PATH SURVIVORS=$survivors NEW=$NEW CONFIG=$T_DIR/replay-$n.yaml \
        timeout 300 bash -euo pipefail "$procedure" >"$T_DIR/procedure-$n.out" 2>&1 ||
        status=$?
    cat "$T_DIR/procedure-$n.out" >&2
    [[ $status == 0 ]] || fail "the runbook's procedure failed (exit $status)"
    if [[ ${3-} == no-replay ]]; then
        ok "the runbook's procedure put the empty node $NEW in the lost shard's place (no replay yet)"
        return 0
    fi
    grep -Eq 'events read .* [1-9][0-9]* of [1-9][0-9]* board\(s\) rebuilt' "$T_DIR/procedure-$n.out" ||
        fail "replay rebuilt no board"
    ok "the runbook's procedure put the empty node $NEW in the lost shard's place and replay rebuilt it"
}

# write_config FILE [EXTRA_YAML [EXTRA_REDIS]] - a projector configuration
# for these services; EXTRA_YAML is appended (more top-level sections),
# EXTRA_REDIS goes into the redis: section. From the environment: GROUP,
# BATCH_MAX, BATCH_LINGER, COMMAND_TIMEOUT, DRAIN_TIMEOUT (5s: tests stop projectors with
# Redis down and should not wait the default 20s), DLQ_TOPIC, INSTANCE_ID
# (group.instance.id), REGISTRY_YAML (more lines of input:, e.g. registry:);
# with KAFKA_SASL=1, KAFKA_USER (default projector) is who it connects as;
# with REDIS_TLS=1, redis.tls has the test CA and client certificate (unless
# EXTRA_REDIS gives its own tls:).
write_config() {
    local file=$1 more_yaml=${2-} more_redis=${3-} sasl="" p
    for p in $(lb_kafka_client_props "${KAFKA_USER:-projector}"); do
        sasl+=$'\n'"  ${p%%=*}: ${p#*=}"
    done
    if [[ ${REDIS_TLS:-0} == 1 && $more_redis != *"tls:"* ]]; then
        local d
        d=$(lb_tls_dir)
        more_redis+="${more_redis:+$'\n'}  tls: {enabled: true, ca_file: $d/ca.crt, cert_file: $d/client.crt, key_file: $d/client.key}"
    fi
    # written aside and renamed: a projector starting now reads the old or
    # the new file, never half of one
    cat >"$file.tmp" <<YAML
kafka:
  brokers: $BROKERS
  group: ${GROUP:-lb-test}
  topics: [scores]
  commit_interval: 200ms
  session.timeout.ms: "${SESSION_TIMEOUT_MS:-6000}"$sasl${DLQ_TOPIC:+
  dlq_topic: $DLQ_TOPIC}${INSTANCE_ID:+
  group.instance.id: "$INSTANCE_ID"}
input:
  format: confluent
  schemas:
    1: $repo/schemas/score_event.avsc
    # loadgen's unknown_op poison events: a writer schema with an op (BAN)
    # the projector does not know
    2: $repo/tests/integration/schemas/score_event_ban.avsc${REGISTRY_YAML:+
$REGISTRY_YAML}
redis:
  nodes: [$(seed_list)]
  command_timeout: ${COMMAND_TIMEOUT:-2s}
$more_redis
batch:
  max_events: ${BATCH_MAX:-2000}
  linger: ${BATCH_LINGER:-20ms}
shutdown:
  drain_timeout: ${DRAIN_TIMEOUT:-5s}
$more_yaml
YAML
    mv -f "$file.tmp" "$file"
}

# start_projector NAME CONFIG [ENV=VALUE...] - runs the projector in the
# background; its pid is in PROJECTOR_PID, its log in $T_DIR/NAME.log.
# PROJECTOR_BIN names another build's projector (a previous release).
start_projector() {
    local name=$1 config=$2
    shift 2
    env "$@" "${PROJECTOR_BIN:-$BIN/projector}" --config "$config" >>"$T_DIR/$name.log" 2>&1 &
    PROJECTOR_PID=$!
    T_PIDS+=("$PROJECTOR_PID")
}

# stop_projector PID [TIMEOUT_S] - SIGTERM and wait; the exit status is left
# in STOP_STATUS (not printed: wait only works in this shell, not in $(...)).
stop_projector() {
    local pid=$1 timeout=${2:-20}
    kill -TERM "$pid"
    local deadline=$((SECONDS + timeout))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && fail "projector $pid still running ${timeout}s after SIGTERM"
    STOP_STATUS=0
    # shellcheck disable=SC2034 # read by the tests
    wait "$pid" || STOP_STATUS=$?
}

# produce ARGS... - loadgen against the test broker; events appended to
# $T_DIR/events.tsv, where each landed to $T_DIR/delivered.tsv (the
# oracle's close offsets need it; a test's own --deliveries-out too).
produce() {
    local a prev="" deliveries=$T_DIR/deliveries.part
    for a in "$@"; do
        [[ $prev == --deliveries-out ]] && deliveries=$a
        prev=$a
    done
    # tests and the chaos soak stop Kafka while producing: the producer
    # rides through (loadgen's own default gives up after 10 s unanswered)
    "$BIN/loadgen" --brokers "$BROKERS" "${KAFKA_X[@]}" --timeout 300 \
        --events-out "$T_DIR/events.part" --deliveries-out "$T_DIR/deliveries.part" "$@" \
        >>"$T_DIR/loadgen.log" 2>&1 || fail "loadgen failed"
    cat "$T_DIR/events.part" >>"$T_DIR/events.tsv"
    cat "$deliveries" >>"$T_DIR/delivered.tsv"
}

# load_start ARGS... - produce ARGS in the background until load_stop: a
# load that runs through a repair, a replay or a reshard however long that
# takes on this machine (give -n a cap it never reaches). Sets LOAD_PID.
load_start() {
    produce "$@" &
    LOAD_PID=$!
    T_PIDS+=("$LOAD_PID")
    on_exit "pkill -TERM -P $LOAD_PID loadgen 2>/dev/null"
}

# load_stop WHAT - stops the load with SIGTERM: loadgen produces no more,
# delivers what it produced, and produce records exactly those events.
# Fails if the load had already ended before WHAT was done, or failed.
load_stop() {
    pkill -TERM -P "$LOAD_PID" loadgen || fail "the load ended before $1: nothing ran beside it"
    wait "$LOAD_PID" || fail "the load failed"
}

# final_state BOARD WINDOW - the window's state in the board's ~final
# (claimed, published, reopening, ...; empty while it has not closed)
final_state() { redis_cli "$(live_ports | first)" -c HGET "lb:{$1}:~final" "s:$2"; }
window_published() { [[ $(final_state "$1" "$2") == published ]]; } # BOARD WINDOW
window_claimed() { [[ $(final_state "$1" "$2") == claimed ]]; }     # BOARD WINDOW

# lose_board BOARD - deletes every key of BOARD (windows, markers, dedupe
# set), on whichever node holds them.
lose_board() {
    local port key
    for port in $(live_ports); do
        redis_cli "$port" --scan --pattern "lb:{$1}:*" | while read -r key; do
            redis_cli "$port" DEL "$key" >/dev/null
        done
    done
}

# hang_up_on_clients PERIOD PORT... - in the background, every PERIOD
# seconds, the nodes of every PORT hold writes for a moment (CLIENT PAUSE
# WRITE) and then close every client connection (CLIENT KILL TYPE normal):
# a tool that was writing loses requests it sent and never got an answer
# to, each time (a kill alone mostly meets idle connections, which a client
# reopens without a word); its pid in HANGUP_PID, for stop_hanging_up.
hang_up_on_clients() {
    local period=$1
    shift
    (
        while :; do
            for m in "$@"; do redis_cli "$m" CLIENT PAUSE 150 WRITE >/dev/null 2>&1; done
            sleep 0.1
            for m in "$@"; do redis_cli "$m" CLIENT KILL TYPE normal >/dev/null 2>&1; done
            sleep "$period"
        done
    ) &
    HANGUP_PID=$!
    T_PIDS+=("$HANGUP_PID")
}
stop_hanging_up() {
    kill "$HANGUP_PID"
    wait "$HANGUP_PID" 2>/dev/null || true
}

# replay_bg [-1] NAME [VAR=VALUE...] -- ARGS... - replay (--config
# $T_DIR/projector.yaml ARGS) in the background with those variables, its
# output in $T_DIR/NAME.out and NAME.err (-1: both in NAME.out), its pid in
# rpid; woken (a fault may have stopped it) and stopped on the test's exit.
replay_bg() {
    local joined=0 name
    if [[ $1 == -1 ]]; then
        joined=1
        shift
    fi
    name=$1
    local -a vars=()
    shift
    while [[ $1 != -- ]]; do
        vars+=("$1")
        shift
    done
    shift
    if ((joined)); then
        env "${vars[@]}" "$BIN/replay" --config "$T_DIR/projector.yaml" "$@" >"$T_DIR/$name.out" 2>&1 &
    else
        env "${vars[@]}" "$BIN/replay" --config "$T_DIR/projector.yaml" "$@" >"$T_DIR/$name.out" \
            2>"$T_DIR/$name.err" &
    fi
    rpid=$!
    T_PIDS+=("$rpid")
    on_exit "kill -CONT $rpid 2>/dev/null"
}

# rebuild_board CONFIG BOARD [VERIFY_ARGS...] - BOARD lost (every key
# deleted), rebuilt by replay --board with CONFIG, and the oracle run with
# VERIFY_ARGS: the state must be exact again.
rebuild_board() {
    local config=$1 board=$2
    shift 2
    lose_board "$board"
    "$BIN/replay" --config "$config" --board "$board" >"$T_DIR/replay.out" 2>&1 ||
        fail "replay --board $board failed: $(tail -n 5 "$T_DIR/replay.out")"
    verify "$@"
}

# kill_mid_stream - SIGKILL the projector (PROJECTOR_PID) and check it left
# records uncommitted (a kill between batches would prove nothing).
kill_mid_stream() {
    kill -9 "$PROJECTOR_PID"
    wait "$PROJECTOR_PID" 2>/dev/null || true
    local lag
    lag=$(group_lag)
    ((lag > 0)) || fail "the kill was not mid-stream (nothing left uncommitted)"
    log "killed the projector mid-stream with ${lag} records not committed"
}

wait_caught_up() {
    local timeout=${1:-120}
    "$BIN/lbadmin" wait-caught-up --brokers "$BROKERS" "${KAFKA_X[@]}" --topic scores \
        --group "${GROUP:-lb-test}" \
        --timeout "$timeout" >>"$T_DIR/lbadmin.log" 2>&1 ||
        fail "group ${GROUP:-lb-test} did not catch up within ${timeout}s"
}

# committed_offsets - "partition committed high" lines.
committed_offsets() {
    "$BIN/lbadmin" offsets --brokers "$BROKERS" "${KAFKA_X[@]}" --timeout 30 --topic scores \
        --group "${GROUP:-lb-test}" |
        awk '$1 == "scores" { print $2, $3, $5 }'
}
# group_lag - the records not committed yet, summed over partitions
group_lag() { committed_offsets | awk '{ c = ($2 == "-") ? 0 : $2; lag += $3 - c } END { print lag + 0 }'; }

# assert_committed_at_end - every partition's committed offset is its high
# watermark, i.e. the last offset + 1 (the projector applied every event).
assert_committed_at_end() {
    local lines
    lines=$(committed_offsets) || fail "cannot read offsets"
    [[ -n $lines ]] || fail "no partitions"
    local p c h
    while read -r p c h; do
        [[ $c == "$h" ]] || fail "partition $p: committed $c, high watermark $h"
    done <<<"$lines"
    ok "committed offset = last offset + 1 on every partition"
}

# run_oracle ARGS... - verify_state with the test's events, where they landed,
# and the live nodes (TLS when the cluster has it).
run_oracle() {
    local nodes="" p
    for p in $(live_ports); do
        nodes+="${nodes:+,}127.0.0.1:$p"
    done
    local -a more=()
    [[ ${REDIS_TLS:-0} == 1 ]] && more=(--tls-dir "$(lb_tls_dir)")
    [[ -f $T_DIR/delivered.tsv ]] && more+=(--deliveries "$T_DIR/delivered.tsv")
    "$BIN/verify_state" --events "$T_DIR/events.tsv" --nodes "$nodes" "${more[@]}" "$@"
}

# verify [ARGS...] - compare Redis with the independent oracle.
verify() {
    local status deadline=$((SECONDS + 60))
    # exit 3: not settled yet (a rebuild running, a merged top not refreshed,
    # a window closing or reopened while the oracle read)
    while :; do
        status=0
        run_oracle "$@" >"$T_DIR/verify.out" 2>&1 || status=$?
        ((status == 3 && SECONDS < deadline)) || break
        sleep 0.5
    done
    ((status == 0)) || {
        cat "$T_DIR/verify.out" >&2
        fail "Redis does not hold what the events say"
    }
    ok "$(tail -n 1 "$T_DIR/verify.out")"
}

# A start time three days back, so every window is alive.
# shellcheck disable=SC2034 # used by the tests
START=$(date -u -d '3 days ago' +%Y-%m-%dT00:00:00Z)

# Boards of every aggregation mode, by prefix: best-* (desc), asc-* (best,
# asc, latest wins ties), lat-* (latest, no tie-break), sum-* (sum), top-*
# (best, retractions refused; top-1* and top-2* also decay across the
# patch window's values, compound and linear), spl-* (best, split over 3
# shards by player, merged tops of 20; loadgen gives board n the n mod 6-th
# prefix), each with alltime, daily, weekly, monthly and a custom "patch"
# window; the oracle's matching --profile options and loadgen options that
# spread events (retractions included) over such boards.
_windows='
    windows:
      alltime: {}
      daily: {ttl: 7d}
      weekly: {ttl: 28d}
      monthly: {ttl: 93d}
      custom: [{dim: patch}]'
# The four aggregation profiles, then (below) with dedupe windows and the
# other board kinds.
_mode_profiles="profiles:
  - name: best
    match: \"best-*\"
    aggregation: best$_windows
  - name: fastest
    match: \"asc-*\"
    aggregation: best
    order: asc
    tie_break: latest$_windows
  - name: latest
    match: \"lat-*\"
    aggregation: latest
    tie_break: none$_windows
  - name: total
    match: \"sum-*\"
    aggregation: sum$_windows"
# MODE_PROFILES: those with dedupe windows longer than the events' span
# (the oracle counts each event_id once on those boards), and top-* boards
# (best, retractions refused: no dedupe, every record counts). sed, not
# ${var//}: a line is matched for one of three aggregations.
# shellcheck disable=SC2034,SC2001
MODE_PROFILES="$(sed 's/^    aggregation: \(best\|latest\|sum\)$/&\n    dedupe: {window: 30d}/' <<<"$_mode_profiles")
  - name: decaying
    match: [\"top-1*\"]
    aggregation: best
    retractions: reject
    score_max: 80000$_windows
    decay: {dim: patch, tax: 0.15, stacking: compound, max_age: 1}
  - name: decaying-linear
    match: [\"top-2*\"]
    aggregation: best
    retractions: reject
    score_max: 80000$_windows
    decay: {dim: patch, tax: 0.1, max_age: 5, key: overall}
  - name: top
    match: \"top-*\"
    aggregation: best
    retractions: reject$_windows
  - name: split
    match: \"spl-*\"
    dedupe: {window: 30d}
    split: {shards: 3, top: 20}$_windows"
# shellcheck disable=SC2034
MODE_ORACLE=(--windows "alltime,daily:7d,weekly:28d,monthly:93d,patch"
    --profile best-=best/desc/earliest --profile asc-=best/asc/latest
    --profile lat-=latest/desc/none --profile sum-=sum/desc/earliest
    --profile top-=best/desc/earliest/noretract
    --decay top-1=patch/0.15/compound/1/0.01/decayed --decay top-2=patch/0.1/linear/5/0.01/overall
    --profile spl-=best/desc/earliest --split spl-=3/20)
# Final standings on res-* boards (README "Final standings"), appended to
# MODE_PROFILES: the first 20 of each day and all of each week, closed as
# soon as the watermark passes their end (no grace: events of closed days
# keep coming, late), published to scores-results; the oracle's matching
# options.
# shellcheck disable=SC2034 # used by the tests and the chaos soak
MODE_RESULTS='
  - name: results
    match: "res-*"
    aggregation: best
    windows:
      alltime: {}
      daily: {ttl: 7d, results: {top: 20, grace: 0s}}
      weekly: {ttl: 28d, results: {top: all, grace: 0s}}
      monthly: {ttl: 93d}
      custom: [{dim: patch}]
results: {topic: scores-results, schema_id: 1, idle: 10m}'
# shellcheck disable=SC2034
MODE_RESULTS_ORACLE=(--results "res-=daily/20/0,weekly/0/0")
# shellcheck disable=SC2034
MODE_GEN=(--boards 30 --players 400 --board-prefix "best-,asc-,lat-,sum-,top-,spl-" --score-max 1000
    --start "$START" --days 3 --dim patch --dim-values 3 --retract-every 25 --retry-every 11)

# wait_log FILE PATTERN TIMEOUT - until FILE has a line matching PATTERN.
wait_log() {
    local deadline=$((SECONDS + $3))
    until grep -q "$2" "$1" 2>/dev/null; do
        ((SECONDS < deadline)) || fail "no '$2' in $(basename "$1") after $3 s"
        sleep 0.2
    done
}

# metrics_scrape URL FILE - /metrics of URL, checked by the strict parser,
# into FILE as "series value" lines.
metrics_scrape() {
    curl -sf "$1/metrics" >"$2.raw" || fail "GET $1/metrics failed"
    "$BIN/promparse" <"$2.raw" >"$2" 2>"$2.err" || fail "/metrics is not valid: $(cat "$2.err")"
}

# metrics_series_is URL SERIES VALUE - true when a scrape shows SERIES at
# VALUE (false when it does not, or the page is not served yet), for waits.
metrics_series_is() {
    local page
    page=$(curl -sf "$1/metrics") || return 1
    [[ $(awk -v s="$2" '$1 == s { print $2 }' <<<"$page") == "$3" ]]
}

# metrics_value FILE SERIES - its value in a scraped page, or fail.
metrics_value() {
    local v
    v=$(awk -v s="$2" '$1 == s { print $2 }' "$1")
    [[ -n $v ]] || fail "no series $2 in /metrics"
    printf '%s\n' "$v"
}

# committed_sum - the sum of the group's committed offsets (-1 if none).
committed_sum() {
    committed_offsets | awk '{ s += ($2 < 0 ? 0 : $2) } END { print s + 0 }'
}

# runbook_procedure RUNBOOK OUT - the shell blocks between the runbook's
# "procedure: begin" and "procedure: end" markers, as one script: the tests
# run an operator procedure exactly as the runbook writes it.
runbook_procedure() {
    awk '/<!-- procedure: begin -->/ { on = 1; next }
         /<!-- procedure: end -->/ { on = 0 }
         on && /^```sh$/ { code = 1; next }
         on && /^```$/ { code = 0; next }
         on && code' "$1" >"$2"
    [[ -s $2 ]] || fail "no procedure in $1"
}

# pick_metrics_port - a free port for the projector's /metrics: sets
# METRICS_URL and METRICS_YAML (a metrics: section for write_config).
pick_metrics_port() {
    local port
    port=$(lb_free_port_base 1 31000 32000) || fail "no free port for metrics"
    # shellcheck disable=SC2034 # read by the tests
    METRICS_URL=http://127.0.0.1:$port
    # shellcheck disable=SC2034
    METRICS_YAML="metrics:
  listen: 127.0.0.1:$port"
}

# alerts_scrape NAME COUNT - COUNT scrapes of /metrics (METRICS_URL), 5 s
# apart, kept as the input of the alert-rule test of scenario NAME.
alerts_scrape() {
    local dir=$T_DIR/alerts/$1 k
    mkdir -p "$dir"
    date +%s.%N >"$dir/t0"
    for ((k = 0; k < $2; k++)); do
        ((k == 0)) || sleep 5
        metrics_scrape "$METRICS_URL" "$dir/$(printf '%03d' "$k")"
    done
}

# alerts_test NAME ALERT... - checks ops/deploy/alerts.yaml with promtool
# on the series scraped for scenario NAME: exactly the ALERTs given fire
# (for pod "p0"), no other. The scrapes are the first samples, 5 s apart;
# the state they show is then held for ten more minutes (gauges as last
# seen, counters growing at their last rate, timestamps rebased so that
# Prometheus' time() starts at the first scrape). The rules are tested
# without their annotations (prose), so labels alone are compared.
alerts_test() {
    local name=$1 dir=$T_DIR/alerts/$1 promtool
    shift
    promtool=$(lb_fetch_promtool) || fail "no promtool"
    awk '/^ *annotations:/ { skip = 1; indent = match($0, /[^ ]/); next }
         skip && match($0, /[^ ]/) > indent { next }
         { skip = 0; print }' "$repo/ops/deploy/alerts.yaml" >"$dir/rules.yaml"
    local -a scrapes
    mapfile -t scrapes < <(find "$dir" -name '[0-9][0-9][0-9]' | sort)
    ((${#scrapes[@]} >= 2)) || fail "alerts_test $name: fewer than two scrapes"
    {
        printf 'rule_files: [rules.yaml]\nevaluation_interval: 5s\ntests:\n  - interval: 5s\n'
        printf '    input_series:\n'
        awk -v t0="$(cat "$dir/t0")" -v n=${#scrapes[@]} '
            FNR == 1 { k++ }
            {
                s = $1; v = $2
                if (s ~ /_timestamp_seconds/) v = v - t0
                if (!(s in seen)) { seen[s] = 1; order[++ns] = s }
                val[s, k] = v
            }
            END {
                for (i = 1; i <= ns; i++) {
                    s = order[i]; line = ""
                    for (j = 1; j <= n; j++) line = line (((s, j) in val) ? val[s, j] : "_") " "
                    if (!((s, n) in val)) {
                        line = line "_x120"
                    } else {
                        last = val[s, n]; prev = ((s, n - 1) in val) ? val[s, n - 1] : last
                        step = (s ~ /(_total|_count|_sum|_bucket)\{/) && last >= prev ? last - prev : 0
                        line = line (last + step) "+" step "x120"
                    }
                    if (!sub(/\{\}$/, "{pod=\"p0\",job=\"leaderboard-projector\"}", s))
                        sub(/\}$/, ",pod=\"p0\",job=\"leaderboard-projector\"}", s)
                    printf "      - series: '\''%s'\''\n        values: '\''%s'\''\n", s, line
                }
            }' "${scrapes[@]}"
        printf '    alert_rule_test:\n'
        local alert rule want
        local -a rules
        mapfile -t rules < <(awk '/- alert:/ { print $3 }' "$dir/rules.yaml")
        for rule in "${rules[@]}"; do
            want=0
            for alert in "$@"; do
                [[ $alert == "$rule" ]] && want=1
            done
            printf '      - eval_time: %ds\n        alertname: %s\n' $((${#scrapes[@]} * 5 + 600)) "$rule"
            if ((want)); then
                printf '        exp_alerts:\n          - exp_labels: {%s}\n' "$(alert_labels "$rule")"
            else
                printf '        exp_alerts: []\n'
            fi
        done
    } >"$dir/test.yaml"
    (cd "$dir" && "$promtool" test rules test.yaml) >"$dir/promtool.out" 2>&1 || {
        cat "$dir/promtool.out" >&2
        fail "alert rules on scenario $name: not exactly $* (promtool test in $dir)"
    }
    ok "alert rules on scenario $name: ${*:-no alert} fire, nothing else"
}

# alert_labels RULE - the labels an alert of RULE has for pod p0.
alert_labels() {
    case $1 in
    ProjectorRedisDown | ProjectorKafkaUnreachable)
        printf 'pod: p0, job: leaderboard-projector, severity: page' ;;
    ProjectorDeadLettering | ProjectorNotScraped | ProjectorWritingWithoutReplica)
        printf 'pod: p0, severity: ticket' ;;
    *)
        printf 'pod: p0, severity: page' ;;
    esac
}

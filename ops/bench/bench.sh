#!/usr/bin/env bash
# The projector's benchmark, in one command: throughput, cost and freshness on
# real Kafka and a real Redis Cluster, with the Redis ceiling measured in the
# same run so the ratio means something on a noisy machine.
#
#   ops/bench/bench.sh [options]
#
#   --events N           events pre-filled into the topic (2000000)
#   --boards N           boards (50)
#   --players N          players (100000), Zipf-skewed by --zipf S (1.1)
#   --days N             event times spread over the last N days (7)
#   --replicas N         Redis replicas per master, 0 or 1 (0)
#   --aggregation A      every board best, latest or sum (best); sum boards
#                        use 1-day ticks so hot players' totals stay in range
#   --retractions R      the profile's retractions: allow or reject (allow);
#                        best boards that reject them go without a script
#   --dedupe D           the profile's dedupe: off, or a window such as 24h
#                        (default: the projector's, on for boards that take
#                        retractions and for sum boards)
#   --decay              decaying boards (README "Decaying boards"): best,
#                        retractions rejected, a patch window (1.0, 1.1, 1.2)
#                        and an overall board at 10% per patch behind; adds
#                        the extra write's cost (the ceiling's Redis CPU
#                        against the same boards without decay, through the
#                        apply script) and a rebuild of every board's overall
#                        board when patch 1.3 comes (members/s, Redis CPU)
#   --runs N             repetitions of each measurement; medians reported (3)
#   --fresh-seconds N    length of each freshness run (20)
#   --fresh-rate N       events/s of the freshness runs (half the median
#                        drain): the same load for two builds compared
#   --fresh-warmup N     seconds of the same load, projected and not
#                        measured, before the first freshness run (60): a
#                        broker just started spends 2 to 3 times the CPU on
#                        it for its first minute or two (README "Performance",
#                        "A freshly started broker"), which a 2-core machine
#                        takes from Redis; 0 measures that too
#   --load-linger MS     linger.ms of the freshness run's load producer (50):
#                        how long it gathers events into one produce request.
#                        Its events are not measured (the probes go alone,
#                        linger 0), but on a small machine the broker's cost
#                        of tiny produce requests comes out of Redis' share
#                        (README "Performance", "Measured again, 2026-11-25")
#   --linger MS          the projector's batch linger (20, its default): how
#                        long a tailing pod gathers events into one request
#                        per board; the drain's batches are full at once
#   --brokers HOST:PORT  use this running Kafka instead of starting one
#   --redis HOST:PORT    use this running Redis Cluster instead of starting one
#                        (Redis CPU is then not measured)
#   --out DIR            where results go (build/bench/<UTC time>)
#   --tls                the Redis Cluster it starts speaks TLS only (mutual
#                        TLS, REDIS_TLS=1 of ops/services.sh) and every tool
#                        reaches it through redis.tls: what TLS costs
#   --hot                one hot board instead (README "Split boards"): every
#                        event on one board, drained as one key (shards: 1)
#                        and split over 3 masters (shards: 3, merged tops of
#                        100): events/s and their ratio, each master's Redis
#                        CPU in cores, the merged tops' staleness p99 (the
#                        pod's histogram); only these drains are run
#
# What it measures (each run from an empty Redis):
#   drain      the projector started on the full topic until its group has
#              committed the end: events/s and member updates/s (timed from
#              outside, by the committed offsets), projector CPU seconds per
#              million events, peak RSS, Redis CPU over the same interval
#   ceiling    the same transactions: the topic read back first and planned
#              by the same engine in the same batches, then pushed into the
#              cluster as fast as it takes them, no Kafka in the loop (lbbench);
#              Redis CPU per million events from INFO cpu of every master
#   floor      the same member updates as plain MULTI / ZADD GT|LT /
#              PEXPIREAT / EXEC per board, no script, no markers: what
#              exactly-once costs is the ceiling's Redis CPU over the floor's
#   freshness  at half the median drain rate, the latency from an event's
#              time to its visibility in Redis, read from Redis (lbbench);
#              the cores Redis, the projector, the broker and the load
#              used meanwhile
#   replay     replay --slots 0-16383 from an empty Redis: every board rebuilt
#              from the topic (plan, read, apply into staging, swap), events/s
#              timed from outside
#
# Output: a table on stdout, results.json, results.csv and logs in --out.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"

events=2000000 boards=50 players=100000 zipf=1.1 days=7 replicas=0 runs=3 fresh_seconds=20
fresh_rate="" fresh_warmup=60
load_linger=50 linger=20
aggregation=best retractions=allow decay=0 hot=0 dedupe=""
brokers="" redis="" out=""
while (($#)); do
    case $1 in
    --events) events=$2 ;;
    --boards) boards=$2 ;;
    --players) players=$2 ;;
    --zipf) zipf=$2 ;;
    --days) days=$2 ;;
    --replicas) replicas=$2 ;;
    --aggregation) aggregation=$2 ;;
    --retractions) retractions=$2 ;;
    --dedupe) dedupe=$2 ;;
    --runs) runs=$2 ;;
    --fresh-seconds) fresh_seconds=$2 ;;
    --fresh-rate) fresh_rate=$2 ;;
    --fresh-warmup) fresh_warmup=$2 ;;
    --load-linger) load_linger=$2 ;;
    --linger) linger=$2 ;;
    --brokers) brokers=$2 ;;
    --redis) redis=$2 ;;
    --out) out=$2 ;;
    --tls)
        export REDIS_TLS=1 REDIS_TLS_AUTH_CLIENTS=yes
        shift
        continue
        ;;
    --decay)
        decay=1 retractions=reject
        shift
        continue
        ;;
    --hot)
        hot=1
        shift
        continue
        ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "bench: unknown option $1 (see --help)" >&2
        exit 2
        ;;
    esac
    shift 2
done
case $aggregation in
best | latest | sum) ;;
*)
    echo "bench: --aggregation wants best, latest or sum, not '$aggregation'" >&2
    exit 2
    ;;
esac
[[ $load_linger =~ ^[0-9]+$ ]] || {
    echo "bench: --load-linger wants milliseconds, not '$load_linger'" >&2
    exit 2
}
if [[ ! $linger =~ ^[0-9]{1,5}$ ]] || ((10#$linger > 10000)); then
    echo "bench: --linger wants milliseconds up to 10000 (batch.linger's bound), not '$linger'" >&2
    exit 2
fi
[[ -z $fresh_rate || $fresh_rate =~ ^[1-9][0-9]*$ ]] || {
    echo "bench: --fresh-rate wants events per second, not '$fresh_rate'" >&2
    exit 2
}
[[ $fresh_warmup =~ ^[0-9]+$ ]] || {
    echo "bench: --fresh-warmup wants seconds, not '$fresh_warmup'" >&2
    exit 2
}
if ((decay)) && [[ -n $dedupe ]]; then
    echo "bench: --decay compares against boards without dedupe; leave --dedupe out" >&2
    exit 2
fi
if ((decay)) && [[ $aggregation != best ]]; then
    echo "bench: --decay needs --aggregation best" >&2
    exit 2
fi
if ((hot)) && [[ $decay == 1 || -n $redis ]]; then
    echo "bench: --hot splits the board (no --decay) and measures each master's CPU (no --redis)" >&2
    exit 2
fi
((hot)) && boards=1 # whatever --boards said
case $retractions in
allow | reject) ;;
*)
    echo "bench: --retractions wants allow or reject, not '$retractions'" >&2
    exit 2
    ;;
esac
out=${out:-$repo/build/bench/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
log() { printf 'bench: %s\n' "$*" >&2; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
spread() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s..%s", lo, hi }'; }
field() { # FILE KEY [EXPR]: one value per line
    awk -v k="$2" '{ for (i = 1; i <= NF; i++) { split($i, a, "="); if (a[1] == k) print a[2] } }' "$1"
}
derive() { # FILE AWK-EXPR over fields: one value per line
    awk "{ for (i = 1; i <= NF; i++) { split(\$i, a, \"=\"); f[a[1]] = a[2] } print $2 }" "$1"
}
row() { printf '%-44s %14s   %s\n' "$1" "$2" "$3"; }
stat_of() { # FILE EXPR -> "median spread"
    local values
    values=$(derive "$1" "$2")
    printf '%s %s\n' "$(median <<<"$values")" "$(spread <<<"$values")"
}
fmt() { awk -v v="$1" -v d="${2:-0}" 'BEGIN { printf "%.*f", d, v }'; }

ops/install-deps.sh >&2
cmake -S . -B build >/dev/null
cmake --build build -j "$(nproc)" >/dev/null
bin=$repo/build/bin
export LB_BIN=$bin LB_STATE_DIR=$out/state

# shellcheck source=ops/services.sh
. ops/services.sh
started=0
projector_pid="" load_pid=""
cleanup() {
    local status=$?
    lb_cleanup_begin
    # either may have ended already: cleanup goes on (set -e)
    if [[ -n $projector_pid ]]; then kill -9 "$projector_pid" 2>/dev/null || true; fi
    if [[ -n $load_pid ]]; then kill -9 "$load_pid" 2>/dev/null || true; fi
    if ((started)); then
        lb_kafka_stop >/dev/null 2>&1 || true
        lb_redis_cluster_stop >/dev/null 2>&1 || true
        rm -rf "$out/state"
    fi
    lb_cleanup_end "$status"
}
trap cleanup EXIT
lb_trap_signals

if [[ -z $brokers || -z $redis ]]; then
    [[ -z $brokers && -z $redis ]] || {
        echo "bench: give both --brokers and --redis, or neither" >&2
        exit 2
    }
    export REDIS_REPLICAS=$replicas KAFKA_TOPICS=
    REDIS_PORT_BASE=$(lb_free_port_base $((3 * (1 + replicas))))
    KAFKA_PORT=$(lb_free_port_base 2 21000 25000)
    export REDIS_PORT_BASE KAFKA_PORT KAFKA_CONTROLLER_PORT=$((KAFKA_PORT + 1))
    started=1
    lb_redis_cluster_start >"$out/redis-start.log" 2>&1
    lb_kafka_start >"$out/kafka-start.log" 2>&1
    brokers=127.0.0.1:$KAFKA_PORT
    redis=127.0.0.1:$REDIS_PORT_BASE
fi
# Topics of this run only, so nothing earlier is drained or measured.
run_id=$(date -u +%Y%m%d%H%M%S)-$$
bench_topic=bench-$run_id fresh_topic=fresh-$run_id
for t in "$bench_topic" "$fresh_topic"; do
    "$bin/lbadmin" create-topic --brokers "$brokers" --topic "$t" --partitions 6 >&2
done
redis_host=${redis%:*} redis_port=${redis##*:}

masters() {
    _lb_redis_cli_auth 10 -h "$redis_host" -p "$redis_port" cluster nodes 2>/dev/null |
        awk '$3 ~ /master/ && $3 !~ /fail/ { split($2, a, "@"); print a[1] }'
}
flush_redis() {
    local node
    for node in $(masters); do
        _lb_redis_cli_auth 10 -h "${node%:*}" -p "${node##*:}" flushall >/dev/null
    done
}
# CPU seconds (user + system) used so far by the given pids
cpu_seconds() {
    local tick total=0 pid f
    tick=$(getconf CLK_TCK)
    for pid in "$@"; do
        [[ -r /proc/$pid/stat ]] || continue
        f=$(sed 's/.*) //' "/proc/$pid/stat")
        read -r -a fields <<<"$f"
        total=$((total + fields[11] + fields[12]))
    done
    awk -v t="$total" -v k="$tick" 'BEGIN { printf "%.3f", t / k }'
}
kafka_pids() {
    if ((started)); then
        cat "$(lb_state_dir)/kafka/kafka.pid" 2>/dev/null || true
    fi
}
redis_pids() {
    ((started)) || return 0
    local i
    for ((i = 0; i < 3 * (1 + replicas); i++)); do
        lb_redis_pid $((REDIS_PORT_BASE + i))
    done
}
# the masters' pids, in the order of their ports
master_pids() {
    ((started)) || return 0
    local node
    for node in $(masters | sort -t: -k2 -n); do
        lb_redis_pid "${node##*:}"
    done
}

# --decay: the profile's windows and decay (score_max bounds the overall
# board's budget: 100000 x 2 at max_age, in tenths, fits 2^23)
decay_profile() { # RETRACTIONS [DECAY LINE]
    ((decay)) || return 0
    printf '    score_max: 100000\n'
    printf '    windows: {alltime: {}, daily: {ttl: 7d}, weekly: {ttl: 28d}, monthly: {ttl: 93d}, custom: [{dim: patch}]}\n'
    printf '%s\n' "${1-}"
}
write_config() { # FILE TOPIC [KAFKA PROPERTY LINE] [RETRACTIONS] [PROFILE LINES]
    cat >"$1" <<YAML
# written by ops/bench/bench.sh
batch: {max_events: 5000, linger: ${linger}ms}
kafka:
  brokers: $brokers
  group: \${BENCH_GROUP:-bench}
  topics: [$2]
  commit_interval: 200ms
  ${3-}
input:
  schemas:
    1: $repo/schemas/score_event.avsc
redis:
  nodes: [$redis]
$([[ ${REDIS_TLS:-0} == 1 ]] &&
        printf '  tls: {enabled: true, ca_file: %s/ca.crt, cert_file: %s/client.crt, key_file: %s/client.key}' \
            "$(lb_tls_dir)" "$(lb_tls_dir)" "$(lb_tls_dir)")
profiles:
  - name: bench
    aggregation: $aggregation
    retractions: ${4:-$retractions}
    $([[ $aggregation == sum ]] && echo 'tie_resolution: d')
    $(case $dedupe in '') ;; off) echo 'dedupe: off' ;; *) echo "dedupe: {window: $dedupe}" ;; esac)
${5-}
YAML
}
decay_yaml=$(decay_profile '    decay: {dim: patch, tax: 0.1, max_age: 10, precision: 0.1}')
write_config "$out/drain.yaml" "$bench_topic" "" "" "$decay_yaml"
# each freshness run starts at the end of the topic, not at earlier runs' events
write_config "$out/fresh.yaml" "$fresh_topic" 'auto.offset.reset: latest' "" "$decay_yaml"
# --decay: the same boards without decay, through the apply script
write_config "$out/baseline.yaml" "$bench_topic" "" allow "$(decay_profile '    dedupe: off')"

start=$(date -u -d "$days days ago" +%Y-%m-%dT%H:%M:%SZ)
gen=(--seed 7 --boards "$boards" --players "$players" --zipf "$zipf" --days "$days" --start "$start")
((decay)) && gen+=(--dim patch --dim-list "1.0,1.1,1.2" --score-max 100000)

log "pre-filling topic $bench_topic with $events events"
t0=$(date +%s.%N)
"$bin/loadgen" --brokers "$brokers" --topic "$bench_topic" -n "$events" "${gen[@]}" 2>"$out/prefill.log"
prefill_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

# drain NAME CONFIG: --runs drains of the whole topic by CONFIG, each from an
# empty Redis by a new group (bench-NAME-<pid>-<run>), a line per run in
# $out/NAME.txt; m<i>_cpu is the i-th master's CPU seconds (Redis started
# here), stale_p99 the bucket of the merged tops' staleness histogram that
# holds its 99th percentile (a config with a metrics section)
drain() {
    local name=$1 config=$2 run i listen
    listen=$(sed -n 's/^  listen: //p' "$config")
    : >"$out/$name.txt"
    for ((run = 1; run <= runs; run++)); do
        flush_redis
        mapfile -t rpids < <(redis_pids)
        mapfile -t mpids < <(master_pids)
        mapfile -t kpids < <(kafka_pids)
        local -a m0=()
        for i in "${!mpids[@]}"; do m0[i]=$(cpu_seconds "${mpids[i]}"); done
        redis_cpu0=$(cpu_seconds "${rpids[@]}") kafka_cpu0=$(cpu_seconds "${kpids[@]}")
        wall0=$(date +%s.%N)
        BENCH_GROUP=bench-$name-$$-$run "$bin/projector" --config "$config" \
            >"$out/$name-$run.log" 2>&1 &
        projector_pid=$!
        "$bin/lbadmin" wait-caught-up --brokers "$brokers" --topic "$bench_topic" \
            --group "bench-$name-$$-$run" --timeout 1800 >"$out/$name-$run.wait"
        cpu=$(cpu_seconds "$projector_pid")
        rss_kb=$(awk '/VmHWM/ { print $2 }' "/proc/$projector_pid/status")
        redis_cpu=$(awk -v a="$redis_cpu0" -v b="$(cpu_seconds "${rpids[@]}")" 'BEGIN { printf "%.3f", b - a }')
        kafka_cpu=$(awk -v a="$kafka_cpu0" -v b="$(cpu_seconds "${kpids[@]}")" 'BEGIN { printf "%.3f", b - a }')
        wall=$(awk -v a="$wall0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
        local masters_cpu="" stale=""
        for i in "${!mpids[@]}"; do
            masters_cpu+=$(awk -v i=$((i + 1)) -v a="${m0[i]}" -v b="$(cpu_seconds "${mpids[i]}")" \
                'BEGIN { printf " m%d_cpu=%.3f", i, b - a }')
        done
        if [[ -n $listen ]]; then
            # refreshes still due after the catch-up are part of the figure:
            # wait for them before reading it (at most 10 s)
            local deadline=$((SECONDS + 10))
            while curl -sf "http://$listen/metrics" >"$out/$name-$run.metrics" &&
                awk '$1 == "lb_top_windows_pending" && $2 > 0 { f = 1 } END { exit !f }' \
                    "$out/$name-$run.metrics" && ((SECONDS < deadline)); do
                sleep 0.2
            done
            stale=$(awk '$1 ~ /^lb_top_staleness_seconds_bucket/ { split($1, a, "\""); le[++n] = a[2]; c[n] = $2 }
                $1 == "lb_top_staleness_seconds_count" { total = $2 }
                END { for (i = 1; i <= n; i++) if (c[i] >= 0.99 * total) { printf " stale_p99=%s stale_n=%d", le[i], total; exit } }' \
                "$out/$name-$run.metrics")
        fi
        kill -TERM "$projector_pid"
        wait "$projector_pid"
        projector_pid=""
        updates=$(grep -o 'member_updates=[0-9]*' "$out/$name-$run.log" | tail -n 1 | cut -d= -f2)
        if ! read -r drained secs < <(awk '/^drain/ { split($2, a, "="); split($3, b, "="); print a[2], b[2] }' \
            "$out/$name-$run.wait"); then
            log "$name, run $run: the topic was drained too fast to time (lbadmin looks every 100 ms, and saw no commit before the last); give --events more"
            exit 1
        fi
        # member updates are counted for the whole topic; the timed part is
        # 'drained' events of it (timing starts at the first commit seen)
        echo "run=$run events=$drained seconds=$secs total=$events member_updates=$updates cpu=$cpu rss_kb=$rss_kb redis_cpu=$redis_cpu kafka_cpu=$kafka_cpu wall=$wall$masters_cpu$stale" |
            tee -a "$out/$name.txt" >&2
    done
}
if ((hot)); then
    # one hot board, as one key and split over the 3 masters
    port=$(lb_free_port_base 1 31000 32000)
    for n in 1 3; do
        write_config "$out/hot-$n.yaml" "$bench_topic" "" "" "    split: {shards: $n, top: 100}
metrics:
  listen: 127.0.0.1:$port"
        log "one hot board, shards: $n"
        drain "hot-$n" "$out/hot-$n.yaml"
    done
    eps() { stat_of "$out/hot-$1.txt" 'f["events"] / f["seconds"]' | awk '{ printf "%.0f", $1 }'; }
    cores() { # SHARDS: each master's median cores used, "a / b / c"
        local i s=""
        for i in 1 2 3; do
            s+="${s:+ / }$(stat_of "$out/hot-$1.txt" "f[\"m${i}_cpu\"] / f[\"wall\"]" | awk '{ printf "%.2f", $1 }')"
        done
        printf '%s' "$s"
    }
    {
        echo "leaderboard projector benchmark, one hot board, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "machine: $(nproc) cores ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)); Redis Cluster 3 masters + $replicas replica(s) each; Kafka 1 broker; all on this machine"
        echo "events $events on 1 board, players $players (Zipf $zipf), times over $days days, windows alltime+daily+weekly+monthly, aggregation $aggregation, retractions $retractions, batch 5000 events / $linger ms, runs $runs (medians; every run in hot-1.txt and hot-3.txt)"
        echo
        row "metric" "shards: 1" "shards: 3"
        row "drain throughput, events/s" "$(eps 1)" "$(eps 3)"
        row "throughput ratio (3 / 1)" "" "$(awk -v a="$(eps 1)" -v b="$(eps 3)" 'BEGIN { printf "%.2f", b / a }')"
        row "each master's Redis CPU, cores" "$(cores 1)" "$(cores 3)"
        row "projector CPU, cores" "$(stat_of "$out/hot-1.txt" 'f["cpu"] / f["wall"]' | awk '{ printf "%.2f", $1 }')" \
            "$(stat_of "$out/hot-3.txt" 'f["cpu"] / f["wall"]' | awk '{ printf "%.2f", $1 }')"
        row "Kafka broker CPU, cores" "$(stat_of "$out/hot-1.txt" 'f["kafka_cpu"] / f["wall"]' | awk '{ printf "%.2f", $1 }')" \
            "$(stat_of "$out/hot-3.txt" 'f["kafka_cpu"] / f["wall"]' | awk '{ printf "%.2f", $1 }')"
        row "merged top staleness p99, s (bucket)" "-" "$(field "$out/hot-3.txt" stale_p99 | sort -g | tail -n 1) (the worst run's; $(field "$out/hot-3.txt" stale_n | awk "{ s += \$1 } END { print s }") refreshes)"
        row "cores available" "$(nproc)" "shared by the masters, Kafka and the projector"
    } | tee "$out/results.txt"
    log "results in $out (results.txt, hot-1.txt, hot-3.txt, logs)"
    exit 0
fi
drain drain "$out/drain.yaml"

log "replay: every board rebuilt from the topic (what a lost cluster would need)"
: >"$out/replay.txt"
for ((run = 1; run <= runs; run++)); do
    flush_redis
    t0=$(date +%s.%N)
    # the last drain's group has committed the end: --to committed is all of it
    BENCH_GROUP=bench-drain-$$-$runs "$bin/replay" --config "$out/drain.yaml" --slots 0-16383 \
        >"$out/replay-$run.out" 2>"$out/replay-$run.log"
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
    read_n=$(sed -n 's/^replay: \([0-9]*\) events read.*/\1/p' "$out/replay-$run.out")
    echo "run=$run events=$read_n seconds=$secs" | tee -a "$out/replay.txt" >&2
done

if ((decay)); then
    log "decay: every board's overall board rebuilt when patch 1.3 comes"
    mapfile -t rpids < <(redis_pids)
    BENCH_GROUP=bench-drain-$$-$runs "$bin/projector" --config "$out/drain.yaml" \
        >"$out/rebuild.log" 2>&1 &
    projector_pid=$!
    redis_cpu0=$(cpu_seconds "${rpids[@]}")
    "$bin/loadgen" --brokers "$brokers" --topic "$bench_topic" -n $((boards * 20)) --seed 99 \
        --boards "$boards" --players "$players" --days 1 --start "$start" --dim patch \
        --dim-list 1.3 2>"$out/rebuild-load.log"
    lb_wait_for 1800 bash -c "(( \$(grep -c 'rebuilt the overall board' '$out/rebuild.log') >= $boards ))"
    redis_cpu=$(awk -v a="$redis_cpu0" -v b="$(cpu_seconds "${rpids[@]}")" 'BEGIN { printf "%.3f", b - a }')
    kill -TERM "$projector_pid"
    wait "$projector_pid"
    projector_pid=""
    # members, and the span from the first start to the last end (log times)
    awk -v cpu="$redis_cpu" '
        function ms(line) { match(line, /ts=[^ ]*/); t = substr(line, RSTART + 3, RLENGTH - 4)
            split(t, a, "T"); split(a[2], b, ":"); return (b[1] * 3600 + b[2] * 60 + b[3]) * 1000 }
        /rebuilding the overall board/ && !first { first = ms($0) }
        /rebuilt the overall board/ { last = ms($0); match($0, /, [0-9]+ members/)
            members += substr($0, RSTART + 2, RLENGTH - 10) }
        END { printf "members=%d seconds=%.3f redis_cpu=%s\n", members, (last - first) / 1000, cpu }
    ' "$out/rebuild.log" | tee "$out/rebuild.txt" >&2
fi

log "ceiling: the same transactions without Kafka in the loop"
flush_redis
"$bin/lbbench" ceiling --config "$out/drain.yaml" --runs "$runs" \
    2>"$out/ceiling.log" | tee "$out/ceiling-floor.txt" >&2
grep '^ceiling ' "$out/ceiling-floor.txt" >"$out/ceiling.txt"
grep '^floor ' "$out/ceiling-floor.txt" >"$out/floor.txt"
if ((decay)); then
    log "decay: the ceiling of the same boards without decay"
    flush_redis
    "$bin/lbbench" ceiling --config "$out/baseline.yaml" --runs "$runs" \
        2>"$out/ceiling-baseline.log" | grep '^ceiling ' | tee "$out/ceiling-baseline.txt" >&2
fi

drain_eps=$(derive "$out/drain.txt" 'f["events"] / f["seconds"]' | median)
if [[ -n $fresh_rate ]]; then
    log "freshness at $fresh_rate events/s (--fresh-rate; half the median drain is $(fmt "$drain_eps" 0 | awk '{ printf "%d", $1 / 2 }'))"
else
    fresh_rate=$(awk -v r="$drain_eps" 'BEGIN { printf "%d", r / 2 }')
    log "freshness at $fresh_rate events/s (half the median drain)"
fi
# fresh_start NAME SEED SECONDS: a projector of its own group at the end of
# the fresh topic (projector_pid), then SECONDS of the load (load_pid)
fresh_start() {
    flush_redis
    BENCH_GROUP=bench-fresh-$$-$1 "$bin/projector" --config "$out/fresh.yaml" \
        >"$out/fresh-$1.log" 2>&1 &
    projector_pid=$!
    lb_wait_for 60 grep -q "assigned" "$out/fresh-$1.log"
    "$bin/loadgen" --brokers "$brokers" --topic "$fresh_topic" --ts-now --rate "$fresh_rate" \
        -n $((fresh_rate * $3)) --seed "$2" --boards "$boards" \
        --players "$players" --zipf "$zipf" -X "linger.ms=$load_linger" \
        2>"$out/fresh-load-$1.log" &
    load_pid=$!
}
fresh_stop() {
    wait "$load_pid"
    load_pid=""
    kill -TERM "$projector_pid"
    wait "$projector_pid"
    projector_pid=""
}
if ((fresh_warmup > 0)); then
    log "freshness: warming the broker with ${fresh_warmup}s of the same load (not measured)"
    fresh_start warmup 100 "$fresh_warmup"
    fresh_stop
fi
: >"$out/fresh.txt"
for ((run = 1; run <= runs; run++)); do
    fresh_start "$run" $((100 + run)) $((fresh_seconds + 4))
    sleep 1
    mapfile -t rpids < <(redis_pids)
    mapfile -t kpids < <(kafka_pids)
    cpu0=("$(cpu_seconds "${rpids[@]}")" "$(cpu_seconds "$projector_pid")"
        "$(cpu_seconds "${kpids[@]}")")
    wall0=$(date +%s.%N)
    line=$("$bin/lbbench" freshness --config "$out/fresh.yaml" --topic "$fresh_topic" \
        --duration "$fresh_seconds" --probes "$out/fresh-probes-$run.txt" 2>>"$out/fresh-$run.log")
    cpu1=("$(cpu_seconds "${rpids[@]}")" "$(cpu_seconds "$projector_pid")"
        "$(cpu_seconds "${kpids[@]}")")
    wall=$(awk -v a="$wall0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
    cores="" names=(redis projector kafka)
    for i in "${!names[@]}"; do
        cores+=$(awk -v n="${names[i]}" -v a="${cpu0[i]}" -v b="${cpu1[i]}" -v w="$wall" \
            'BEGIN { printf " %s_cores=%.2f", n, (b - a) / w }')
    done
    fresh_stop
    # the load over its own life (it may end before the probes do, when the
    # projector fell behind); the probes' polling over the run's
    cores+=$(sed -n 's/.* in \([0-9.]*\) s .*, cpu \([0-9.]*\) s$/\2 \1/p' "$out/fresh-load-$run.log" |
        awk '{ printf " load_cores=%.2f", $1 / $2 }')
    cores+=$(awk -v w="$wall" '{ for (i = 1; i <= NF; i++) if ($i ~ /^probe_cpu_s=/) {
        split($i, kv, "="); printf " probe_cores=%.2f", kv[2] / w } }' <<<"$line")
    echo "$line$cores" | tee -a "$out/fresh.txt" >&2
done

# ---- the table ----------------------------------------------------------------
cores=$(nproc)
cpu_model=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)

read -r d_eps d_eps_spread < <(stat_of "$out/drain.txt" 'f["events"] / f["seconds"]')
read -r d_ups d_ups_spread < <(stat_of "$out/drain.txt" 'f["member_updates"] * f["events"] / f["total"] / f["seconds"]')
read -r c_ups c_ups_spread < <(stat_of "$out/ceiling.txt" 'f["member_updates_per_s"]')
read -r c_rcpu c_rcpu_spread < <(stat_of "$out/ceiling.txt" 'f["redis_cpu_s_per_1m"]')
read -r f_rcpu f_rcpu_spread < <(stat_of "$out/floor.txt" 'f["redis_cpu_s_per_1m"]')
read -r f_ups f_ups_spread < <(stat_of "$out/floor.txt" 'f["member_updates_per_s"]')
over_floor=$(awk -v a="$c_rcpu" -v b="$f_rcpu" 'BEGIN { printf "%.0f", (a / b - 1) * 100 }')
read -r cpu_m cpu_spread < <(stat_of "$out/drain.txt" 'f["cpu"] / f["total"] * 1e6')
read -r rcpu_m rcpu_spread < <(stat_of "$out/drain.txt" 'f["redis_cpu"] / f["total"] * 1e6')
read -r share_r share_r_spread < <(stat_of "$out/drain.txt" 'f["redis_cpu"] / f["wall"]')
read -r share_p share_p_spread < <(stat_of "$out/drain.txt" 'f["cpu"] / f["wall"]')
read -r share_k share_k_spread < <(stat_of "$out/drain.txt" 'f["kafka_cpu"] / f["wall"]')
read -r rss_m rss_spread < <(stat_of "$out/drain.txt" 'f["rss_kb"] / 1024')
read -r p50 p50_spread < <(stat_of "$out/fresh.txt" 'f["p50_ms"]')
read -r p99 p99_spread < <(stat_of "$out/fresh.txt" 'f["p99_ms"]')
read -r pmax pmax_spread < <(stat_of "$out/fresh.txt" 'f["max_ms"]')
read -r replay_eps replay_spread < <(stat_of "$out/replay.txt" 'f["events"] / f["seconds"]')
ratio=$(awk -v a="$d_ups" -v b="$c_ups" 'BEGIN { printf "%.2f", a / b }')

{
    echo "leaderboard projector benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "machine: $cores cores ($cpu_model); Redis Cluster 3 masters + $replicas replica(s) each; Kafka 1 broker; all on this machine"
    echo "events $events, boards $boards, players $players (Zipf $zipf), times over $days days, windows alltime+daily+weekly+monthly$( ((decay)) && echo "+patch (1.0, 1.1, 1.2) and an overall board (decay: 10% per patch, linear, max_age 10, in 0.1)"), aggregation $aggregation, retractions $retractions, dedupe ${dedupe:-default} (each board's batch $([[ $aggregation/$retractions/$decay == best/reject/0 && ${dedupe:-off} == off ]] && echo "one MULTI/EXEC, no script" || echo "one EVALSHA of the apply script")), batch 5000 events / $linger ms, runs $runs, pre-fill ${prefill_s}s"
    echo
    row "metric" "median" "spread (min..max over $runs runs)"
    row "drain throughput, events/s" "$(fmt "$d_eps")" "$(awk -v s="$d_eps_spread" 'BEGIN { split(s, a, "\\.\\."); printf "%.0f..%.0f", a[1], a[2] }')"
    row "drain, Redis member updates/s" "$(fmt "$d_ups")" "$(awk -v s="$d_ups_spread" 'BEGIN { split(s, a, "\\.\\."); printf "%.0f..%.0f", a[1], a[2] }')"
    row "ceiling, Redis member updates/s" "$(fmt "$c_ups")" "$(awk -v s="$c_ups_spread" 'BEGIN { split(s, a, "\\.\\."); printf "%.0f..%.0f", a[1], a[2] }')"
    row "drain / ceiling" "$ratio" "target >= 0.80 (best), 0.85 (latest, sum)"
    row "floor, Redis member updates/s" "$(fmt "$f_ups")" "$(awk -v s="$f_ups_spread" 'BEGIN { split(s, a, "\\.\\."); printf "%.0f..%.0f", a[1], a[2] }') (plain MULTI/ZADD, no markers)"
    row "ceiling, Redis CPU s per 1M events" "$(fmt "$c_rcpu" 2)" "$c_rcpu_spread (INFO cpu)"
    row "floor, Redis CPU s per 1M events" "$(fmt "$f_rcpu" 2)" "$f_rcpu_spread (INFO cpu)"
    row "exactly-once over the floor, Redis CPU" "${over_floor}%" "ceiling / floor - 1"
    row "projector CPU s per 1M events" "$(fmt "$cpu_m" 2)" "$cpu_spread"
    if ((started)); then
        row "Redis CPU s per 1M events" "$(fmt "$rcpu_m" 2)" "$rcpu_spread"
    else
        row "Redis CPU s per 1M events" "n/a" "not measured: Redis not started by the benchmark"
    fi
    if ((started)); then
        row "drain, cores used: Redis" "$(fmt "$share_r" 2)" "$share_r_spread (CPU s / wall s, of $cores cores)"
        row "drain, cores used: projector" "$(fmt "$share_p" 2)" "$share_p_spread"
        row "drain, cores used: Kafka broker" "$(fmt "$share_k" 2)" "$share_k_spread"
    fi
    row "projector peak RSS, MiB" "$(fmt "$rss_m" 1)" "$rss_spread"
    row "freshness at $fresh_rate events/s, p50 ms" "$p50" "$p50_spread"
    row "freshness p99 ms" "$p99" "$p99_spread (target < 250)"
    row "freshness max ms" "$pmax" "$pmax_spread"
    row "freshness runs with p99 < 250 ms" "$(derive "$out/fresh.txt" 'f["p99_ms"] < 250' | awk '{ n += $1 } END { printf "%d of %d", n, NR }')" "every run: $(field "$out/fresh.txt" p99_ms | paste -sd' ')"
    if ((started)); then
        for who in redis:Redis projector:projector kafka:"Kafka broker" load:"load (loadgen)" \
            probe:"probes (lbbench)"; do
            read -r m sp < <(stat_of "$out/fresh.txt" "f[\"${who%%:*}_cores\"]")
            row "freshness, cores used: ${who#*:}" "$(fmt "$m" 2)" "$sp$([[ $who == redis:* ]] && echo " (the load's producer: linger.ms $load_linger; the broker warmed by ${fresh_warmup}s of it first)")"
        done
    fi
    row "replay rebuild (all boards), events/s" "$(fmt "$replay_eps")" "$(awk -v s="$replay_spread" 'BEGIN { split(s, a, "\\.\\."); printf "%.0f..%.0f", a[1], a[2] }') (plan, read, apply, swap)"
    if ((decay)); then
        read -r b_rcpu b_rcpu_spread < <(stat_of "$out/ceiling-baseline.txt" 'f["redis_cpu_s_per_1m"]')
        row "decay: ceiling without decay, Redis CPU s/1M" "$(fmt "$b_rcpu" 2)" "$b_rcpu_spread (the apply script, no overall board)"
        row "decay: the overall board's write, Redis CPU" "$(awk -v a="$c_rcpu" -v b="$b_rcpu" 'BEGIN { printf "%+.2f s/1M", a - b }')" "ceiling with decay - without"
        row "decay: rebuild, members/s (one pod)" "$(derive "$out/rebuild.txt" 'f["members"] / f["seconds"]' | xargs printf '%.0f')" "$(field "$out/rebuild.txt" members) members of $boards boards"
        row "decay: rebuild, Redis CPU s per 1M members" "$(derive "$out/rebuild.txt" 'f["redis_cpu"] / f["members"] * 1e6' | xargs printf '%.2f')" "the masters' CPU (/proc) over the rebuild and its 20 events per board"
    fi
} | tee "$out/results.txt"

cat >"$out/results.json" <<JSON
{
  "machine": {"cores": $cores, "cpu": "$cpu_model"},
  "parameters": {"events": $events, "boards": $boards, "players": $players, "zipf": $zipf,
                 "days": $days, "aggregation": "$aggregation", "retractions": "$retractions", "dedupe": "${dedupe:-default}", "redis_masters": 3, "redis_replicas": $replicas, "runs": $runs,
                 "batch_max_events": 5000, "batch_linger_ms": $linger, "fresh_seconds": $fresh_seconds},
  "drain_events_per_s": {"median": $d_eps, "spread": "$d_eps_spread"},
  "drain_member_updates_per_s": {"median": $d_ups, "spread": "$d_ups_spread"},
  "ceiling_member_updates_per_s": {"median": $c_ups, "spread": "$c_ups_spread"},
  "drain_over_ceiling": $ratio,
  "floor_member_updates_per_s": {"median": $f_ups, "spread": "$f_ups_spread"},
  "ceiling_redis_cpu_s_per_million_events": {"median": $c_rcpu, "spread": "$c_rcpu_spread"},
  "floor_redis_cpu_s_per_million_events": {"median": $f_rcpu, "spread": "$f_rcpu_spread"},
  "exactly_once_over_floor_percent": $over_floor,
  "projector_cpu_s_per_million_events": {"median": $cpu_m, "spread": "$cpu_spread"},
  "redis_cpu_s_per_million_events": $( ((started)) && echo "{\"median\": $rcpu_m, \"spread\": \"$rcpu_spread\"}" || echo null),
  "projector_peak_rss_mib": {"median": $rss_m, "spread": "$rss_spread"},
  "freshness": {"rate_events_per_s": $fresh_rate, "load_linger_ms": $load_linger, "broker_warmup_s": $fresh_warmup, "p50_ms": $p50, "p99_ms": $p99, "max_ms": $pmax},
  "replay_events_per_s": {"median": $replay_eps, "spread": "$replay_spread"}
}
JSON
{
    echo "metric,median,spread"
    echo "drain_events_per_s,$d_eps,$d_eps_spread"
    echo "drain_member_updates_per_s,$d_ups,$d_ups_spread"
    echo "ceiling_member_updates_per_s,$c_ups,$c_ups_spread"
    echo "drain_over_ceiling,$ratio,"
    echo "floor_member_updates_per_s,$f_ups,$f_ups_spread"
    echo "ceiling_redis_cpu_s_per_million_events,$c_rcpu,$c_rcpu_spread"
    echo "floor_redis_cpu_s_per_million_events,$f_rcpu,$f_rcpu_spread"
    echo "exactly_once_over_floor_percent,$over_floor,"
    echo "projector_cpu_s_per_million_events,$cpu_m,$cpu_spread"
    echo "redis_cpu_s_per_million_events,$rcpu_m,$rcpu_spread"
    echo "projector_peak_rss_mib,$rss_m,$rss_spread"
    echo "freshness_p50_ms,$p50,$p50_spread"
    echo "freshness_p99_ms,$p99,$p99_spread"
    echo "freshness_max_ms,$pmax,$pmax_spread"
    echo "replay_events_per_s,$replay_eps,$replay_spread"
} >"$out/results.csv"
log "results in $out (results.txt, results.json, results.csv, logs)"

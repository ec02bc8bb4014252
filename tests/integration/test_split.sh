#!/usr/bin/env bash
# Split boards (README "Split boards"): hot boards over 3 hash tags by
# player, best (desc, retractions: the script), sum and best asc without
# retractions (a transaction, no script), projected from one stream twice:
# split (N = 3, prefix lb:) and as one key each (N = 1, prefix one:), two
# consumer groups. Scores are few and ties are per day, so equal composites
# fall in different shards. Checked after each step:
#   - the independent oracle (verify_state --split) finds every shard key,
#     member, composite and expiry exact, and every merged top exact;
#   - each merged top equals the first 50 of the same window as one key;
#   - lbread --around ranks players exactly as the one key ranks them
#     (equal composites by member bytes) and the oracle's --rank agrees;
#   - a board's shards are spread over the 3 masters.
# Steps: a first stream; a pod SIGKILLed mid-stream; a master killed under
# load (its replica promoted); one shard of a board lost and rebuilt by
# replay --slots beside the running pods, then a whole board by --board; a
# pod killed while its records wait for a merged top it cannot refresh.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
profiles() { # SHARDS
    local split="split: {shards: $1, top: 50, staleness: 400ms}"
    printf 'profiles:\n'
    printf '  - name: hot\n    match: "hot-*"\n    tie_resolution: d\n    dedupe: {window: 30d}\n'
    printf '    %s%s\n' "$split" "$_windows"
    printf '  - name: xp\n    match: "hs-*"\n    aggregation: sum\n    tie_resolution: d\n'
    printf '    dedupe: {window: 30d}\n    %s%s\n' "$split" "$_windows"
    printf '  - name: fastest\n    match: "ha-*"\n    order: asc\n    tie_break: latest\n'
    printf '    tie_resolution: d\n    retractions: reject\n    %s%s\n' "$split" "$_windows"
}
pick_metrics_port
GROUP=lb-split write_config "$T_DIR/split.yaml" "$(profiles 3)
$METRICS_YAML"
GROUP=lb-split-one write_config "$T_DIR/one.yaml" "$(profiles 1)" "  key_prefix: \"one:\""
rules=(--windows "alltime,daily:7d,weekly:28d,monthly:93d,patch" --resolution-ms 86400000
    --profile hot-=best/desc/earliest --profile hs-=sum/desc/earliest
    --profile ha-=best/asc/latest/noretract)
split_rules=("${rules[@]}" --split hot-=3/50 --split hs-=3/50 --split ha-=3/50)
gen=(--boards 6 --board-prefix "hot-,hs-,ha-" --players 2000 --score-max 40 --start "$START"
    --days 3 --dim patch --dim-values 2 --retract-every 40 --retry-every 13)

start_projector split "$T_DIR/split.yaml"
pod_split=$PROJECTOR_PID
start_projector one "$T_DIR/one.yaml"
pod_one=$PROJECTOR_PID

# the merged tops against the same windows as one key
same_as_one_key() {
    local board window order n=0 port_top port_one
    for board in hot-0 hs-1 ha-2; do
        order=REV
        [[ $board == ha-* ]] && order=""
        port_top=$(key_port "lb:{$board}:~top:alltime")
        port_one=$(key_port "one:{$board}:alltime")
        for window in alltime "patch:v0" "patch:v1"; do
            [[ $(redis_cli "$port_top" ZCARD "lb:{$board}:~top:$window") == 50 ]] ||
                fail "merged top of $board $window does not hold 50 entries"
            # shellcheck disable=SC2086 # order is one word or none
            diff <(redis_cli "$port_top" ZRANGE "lb:{$board}:~top:$window" 0 -1 $order WITHSCORES) \
                <(redis_cli "$port_one" ZRANGE "one:{$board}:$window" 0 49 $order WITHSCORES) \
                >"$T_DIR/top.diff" || fail "merged top of $board $window differs from one key: $(head -n 6 "$T_DIR/top.diff")"
            n=$((n + 1))
        done
    done
    ok "$n merged tops equal the first 50 of the same windows as one key"
}

# key_port KEY - the port of the master serving KEY
key_port() {
    local slot p
    slot=$(redis_cli "$(live_ports | first)" CLUSTER KEYSLOT "$1")
    for p in $(slot_masters); do
        redis_cli "$p" CLUSTER COUNTKEYSINSLOT "$slot" >/dev/null 2>&1 || continue
        redis_cli "$p" CLUSTER NODES | awk -v s="$slot" -v p=":$p@" 'index($2, p) {
            for (i = 9; i <= NF; i++) { n = split($i, r, "-"); lo = r[1]; hi = (n > 1) ? r[2] : r[1]
                if (s >= lo && s <= hi) f = 1 } } END { exit !f }' && { printf '%s\n' "$p"; return 0; }
    done
    fail "no master serves $1"
}

# lbread's rank across the shards against the one key's, for some players;
# the oracle ranks them all from one read of the events
ranks_exact() {
    local board=$1 window=$2 port player want comp got specs=() wants=() oracle
    port=$(key_port "one:{$board}:$window")
    for player in $(redis_cli "$port" ZRANGE "one:{$board}:$window" 0 -1 | awk 'NR % 97 == 1'); do
        score=$(redis_cli "$port" ZSCORE "one:{$board}:$window" "$player")
        if [[ $board == ha-* ]]; then # asc: lower is better
            want=$(($(redis_cli "$port" ZRANK "one:{$board}:$window" "$player") + 1))
            comp=$(($(redis_cli "$port" ZCOUNT "one:{$board}:$window" -inf "($score") + 1))
        else
            want=$(($(redis_cli "$port" ZREVRANK "one:{$board}:$window" "$player") + 1))
            comp=$(($(redis_cli "$port" ZCOUNT "one:{$board}:$window" "($score" +inf) + 1))
        fi
        "$BIN/lbread" --config "$T_DIR/split.yaml" --board "$board" --window "$window" \
            --around "$player" >"$T_DIR/lbread.out" 2>&1 || fail "lbread failed: $(tail -n 3 "$T_DIR/lbread.out")"
        got=$(awk '$1 == ">" { print $2, $3 }' "$T_DIR/lbread.out")
        [[ $got == "$want $comp" ]] || fail "lbread ranks $player of $board $window '$got', one key '$want $comp'"
        specs+=(--rank "$board/$window/$player")
        wants+=("$want")
    done
    ((${#wants[@]} >= 5)) || fail "only ${#wants[@]} players ranked"
    "$BIN/verify_state" --events "$T_DIR/events.tsv" "${split_rules[@]}" "${specs[@]}" \
        >"$T_DIR/rank.out" || fail "verify_state --rank failed: $(head -n 3 "$T_DIR/rank.out")"
    oracle=$(awk '$1 == "rank" { printf "%s%s", sep, $2; sep = " " }' "$T_DIR/rank.out")
    [[ $oracle == "${wants[*]}" ]] ||
        fail "the oracle ranks ${specs[*]} as '$oracle', one key as '${wants[*]}'"
    ok "${#wants[@]} players of $board $window: lbread's rank across shards is the one key's"
}

ties_across_shards() { # some equal composites sit in different shards
    local tags
    tags=$(for p in $(slot_masters); do redis_cli "$p" --scan --pattern 'lb:{hot-0#*}:alltime'; done)
    [[ $(wc -l <<<"$tags") == 3 ]] || fail "hot-0 has not 3 shard keys: $tags"
    local all
    all=$(for t in $tags; do redis_cli "$(key_port "$t")" ZRANGE "$t" 0 -1 WITHSCORES | awk -v t="$t" 'NR % 2 == 0 { print $0, t }'; done |
        sort -u | awk '{ print $1 }' | sort | uniq -d | wc -l)
    ((all > 0)) || fail "no equal composites in two shards of hot-0: the tie rule is untested"
    local masters
    masters=$(for t in $tags; do key_port "$t"; done | sort -u | wc -l)
    ((masters == 3)) || fail "hot-0's shards are on $masters master(s), not 3"
    ok "hot-0's 3 shards are on 3 masters; $all composites are shared by players in different shards"
}

check_all() {
    GROUP=lb-split wait_caught_up 180
    GROUP=lb-split-one wait_caught_up 180
    verify "${split_rules[@]}"
    verify "${rules[@]}" --prefix one:
    same_as_one_key
}

# 1. a first stream
produce -n 20000 --seed 801 "${gen[@]}"
check_all
ties_across_shards
ranks_exact hot-0 alltime
ranks_exact hs-1 alltime
ok "first stream: split and one-key layouts exact"

# 2. the split pod SIGKILLed mid-stream, started again
produce -n 20000 --seed 802 "${gen[@]}" --rate 8000 &
producer=$!
T_PIDS+=("$producer")
sleep 1.5
PROJECTOR_PID=$pod_split GROUP=lb-split kill_mid_stream
wait "$producer" || fail "producer failed"
start_projector split2 "$T_DIR/split.yaml"
pod_split=$PROJECTOR_PID
check_all
ok "a pod killed mid-stream: exact after its restart"

# 3. a master killed under load; its replica takes over
victim=$(key_port "lb:{hot-0}:~top:alltime")
kill_master_under_load "$victim" 1.2 -n 15000 --seed 803 "${gen[@]}" --rate 7500
check_all
ranks_exact ha-2 alltime
ok "master $victim (hot-0's tops) killed under load: exact after the failover"

# 4. one shard of a board lost, rebuilt by replay --slots beside the pods
tag=$(for p in $(slot_masters); do redis_cli "$p" --scan --pattern 'lb:{hs-1#1.*}:alltime'; done | first)
tag=${tag#lb:\{}
tag=${tag%%\}*}
[[ -n $tag ]] || fail "no shard 1 of hs-1"
port=$(key_port "lb:{$tag}:alltime")
redis_cli "$port" --scan --pattern "lb:{$tag}:*" | while read -r key; do
    redis_cli "$port" DEL "$key" >/dev/null
done
redis_cli "$port" --scan --pattern "lb:{$tag}:*" | grep . >/dev/null && fail "shard $tag not lost"
slot=$(redis_cli "$port" CLUSTER KEYSLOT "{$tag}")
status=0
verify_quiet() { "$BIN/verify_state" --events "$T_DIR/events.tsv" --nodes "$1" "${split_rules[@]}" >"$T_DIR/lost.out" 2>&1; }
verify_quiet "127.0.0.1:$port" || status=$?
((status == 1)) || fail "the oracle did not see shard $tag lost (exit $status)"
"$BIN/replay" --config "$T_DIR/split.yaml" --slots "$slot" >"$T_DIR/replay.out" 2>&1 ||
    fail "replay --slots $slot failed: $(tail -n 5 "$T_DIR/replay.out")"
grep -q "merged top(s) of split boards refreshed" "$T_DIR/replay.out" ||
    fail "replay refreshed no merged top: $(tail -n 5 "$T_DIR/replay.out")"
check_all
ok "shard $tag (slot $slot) lost and rebuilt by replay --slots: exact, merged tops too"

# 5. a whole split board lost, rebuilt by replay --board (all its shards)
for p in $(live_ports); do
    for pattern in 'lb:{ha-2#*' 'lb:{ha-2}:*'; do
        redis_cli "$p" --scan --pattern "$pattern" | while read -r key; do
            redis_cli "$p" DEL "$key" >/dev/null 2>&1 || true
        done
    done
done
"$BIN/replay" --config "$T_DIR/split.yaml" --board ha-2 >"$T_DIR/replay-board.out" 2>&1 ||
    fail "replay --board ha-2 failed: $(tail -n 5 "$T_DIR/replay-board.out")"
grep -Eq '3 of 3 board\(s\) rebuilt' "$T_DIR/replay-board.out" ||
    fail "replay --board ha-2 did not rebuild its 3 shards: $(tail -n 2 "$T_DIR/replay-board.out")"
check_all
ranks_exact ha-2 alltime

# 6. a pod killed after applying records and before its merged tops show
#    them. Staged wide: the lease of hot-0's alltime top is another
#    refresher's for 2 minutes more (one that went away holding it), so the
#    pod cannot refresh that window; its partitions' commits must stay
#    below the records that changed it. Killed then, and the lease run
#    out, the records are read again by the next pod, which takes the lease
#    over and refreshes the top.
tops_port=$(key_port "lb:{hot-0}:~tops")
redis_cli "$tops_port" HSET "lb:{hot-0}:~tops" h:alltime gone u:alltime \
    "$(($(date +%s%3N) + 120000))" >/dev/null
produce -n 3000 --seed 806 "${gen[@]}"
sleep 4 # applied, and committed at 1 s intervals as far as it may
c1=$(GROUP=lb-split committed_offsets)
sleep 2
c2=$(GROUP=lb-split committed_offsets)
[[ $c1 == "$c2" ]] || fail "commits still moved 4 s after the stream: $c1 -> $c2"
below=$(awk '{ c = ($2 == "-") ? 0 : $2 } c < $3 { n++ } END { print n + 0 }' <<<"$c2")
((below > 0)) || fail "every partition committed its end: the records of hot-0 do not wait for its top"
metrics_scrape "$METRICS_URL" "$T_DIR/m-6"
waiting=$(awk '$1 ~ /^lb_partition_held\{.*reason="top"\}$/ { s += $2 } END { print s + 0 }' "$T_DIR/m-6")
((waiting == below)) ||
    fail "metrics say $waiting partition(s) wait for a merged top, the offsets $below: $c2"
PROJECTOR_PID=$pod_split GROUP=lb-split kill_mid_stream
# the lease runs out now (here, so that no slow step before the kill saw
# it run out first): the next pod takes over the gone refresher's lease
redis_cli "$tops_port" HSET "lb:{hot-0}:~tops" u:alltime "$(date +%s%3N)" >/dev/null
start_projector split3 "$T_DIR/split.yaml"
pod_split=$PROJECTOR_PID
check_all
ok "a pod killed before its merged tops showed its records: $below partition(s) had waited; exact"

# the merged tops' staleness, as the pod measured it
metrics_scrape "$METRICS_URL" "$T_DIR/metrics"
written=$(metrics_value "$T_DIR/metrics" 'lb_top_refreshes_total{result="written"}')
((written > 0)) || fail "the pod wrote no merged top"
grep '^lb_top_staleness_seconds_bucket' "$T_DIR/metrics" | tr '\n' ' ' >&2
echo >&2
stop_projector "$pod_split"
stop_projector "$pod_one"
ok "split boards: exact through a crash, a failover, a lost shard and a lost board"

#!/usr/bin/env bash
# A lost shard, staged the way it happens: a master and all its replicas are
# SIGKILLed and their data directories deleted; a new, empty node (no data,
# no scripts) takes the shard's place by the runbook's procedure, run here
# exactly as ops/runbooks/lost-shard.md writes it (its shell blocks are
# extracted and executed): find the dead nodes and lost slots, CLUSTER FORGET
# on every survivor, CLUSTER MEET, CLUSTER ADDSLOTSRANGE, wait until every
# node's CLUSTER SHARDS agrees and cluster_state is ok, replay --node NEW.
#
#  a. the projector is stopped through the whole incident (events keep
#     arriving), and started after replay;
#  b. the projector runs through it with cluster-require-full-coverage yes
#     (Redis' default): everything pauses, and metrics and log say Redis;
#  c. the same with cluster-require-full-coverage no: boards on the other
#     shards keep changing, and each partition's commit stops exactly at its
#     first event of a board on the lost shard;
#  d. final standings: a day closes after the empty node serves the slots
#     and before replay: boards elsewhere publish it, those on the new node
#     wait for replay (the slots' ~intact marks), then publish it exact;
#  e. every master emptied and a pod started before replay: it marks
#     nothing (the results topic says the cluster is not new), and replay
#     --slots 0-16383 marks every slot;
#  f. an upgrade: the marks deleted, the boards standing: the first pod
#     marks every slot.
#
# Split boards (spl-*, lib.sh) have a shard on every master: each loss takes
# one shard of each, and replay --node rebuilds it and refreshes their merged
# tops (in c, a partition may stop at an event of a split board whose
# player's shard was lost, or at its first event written since the loss:
# its records wait for merged tops no pod can write without the lost shard).
#
# After each, the independent oracle is exact for best, latest and sum boards
# and replay --verify is clean.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
export GROUP=lb-lost-shard
pick_metrics_port
write_config "$T_DIR/projector.yaml" "$MODE_PROFILES
$METRICS_YAML"
url=$METRICS_URL
gen=("${MODE_GEN[@]}")

check_exact() {
    wait_caught_up 180
    verify "${MODE_ORACLE[@]}"
    local status=0
    "$BIN/replay" --config "$T_DIR/replay-$1.yaml" --node "$NEW" --verify >"$T_DIR/verify-$1.out" 2>&1 ||
        status=$?
    [[ $status == 0 ]] || {
        cat "$T_DIR/verify-$1.out" >&2
        fail "replay --verify exited $status"
    }
    ok "replay --verify of $NEW: $(grep 'replay --verify' "$T_DIR/verify-$1.out")"
}

start_projector projector "$T_DIR/projector.yaml"
produce -n 20000 --seed 121 "${gen[@]}" --rate 20000
wait_caught_up 120
mapfile -t original < <(slot_masters)
((${#original[@]} == 3)) || fail "expected 3 masters, found ${#original[@]}"

# a. projector stopped through the whole incident
stop_projector "$PROJECTOR_PID"
produce -n 10000 --seed 122 "${gen[@]}" --rate 20000 # a backlog meanwhile
lose_shard "${original[0]}"
replace_shard a "$T_DIR/projector.yaml"
start_projector projector "$T_DIR/projector.yaml"
check_exact a
ok "a: projector down through the loss, started after replay: exact"

# b. projector running, full coverage required: everything pauses. The
# load runs until the repair is done (SIGTERM: loadgen stops producing and
# delivers what it produced; its cap of 300 s is never reached)
load_start -n 300000 --seed 123 "${gen[@]}" --rate 1000
sleep 3
logged=$(wc -l <"$T_DIR/projector.log")
lose_shard "${original[1]}"
sleep 4
c1=$(committed_sum)
sleep 3
c2=$(committed_sum)
[[ $c1 == "$c2" ]] || fail "commits moved ($c1 -> $c2) while the cluster was down"
metrics_scrape "$url" "$T_DIR/m-b"
[[ $(metrics_value "$T_DIR/m-b" 'lb_redis_up{}') == 0 ]] || fail "lb_redis_up is not 0"
[[ $(metrics_value "$T_DIR/m-b" 'lb_partitions_held{}') == 6 ]] || fail "not every partition held"
held_redis=$(awk '$1 ~ /^lb_partition_held\{.*reason="redis"\}$/ { s += $2 } END { print s + 0 }' "$T_DIR/m-b")
[[ $held_redis == 6 ]] || fail "$held_redis partition(s) held for Redis, not 6"
[[ $(curl -s -o /dev/null -w '%{http_code}' "$url/readyz") == 503 ]] || fail "/readyz not 503"
# (grep reads all of it: -q would stop early, and tail, writing a log past
# 8 KiB in two blocks, would die of SIGPIPE, which pipefail reports)
since_loss() { tail -n +$((logged + 1)) "$T_DIR/projector.log"; }
since_loss | grep -E 'CLUSTERDOWN|no Redis master serves slot' >/dev/null ||
    fail "the log does not say the cluster is down"
since_loss | grep -i 'dead-letter\|dlq' >/dev/null && fail "the log blames the DLQ"
ok "b: the cluster refuses writes: every partition held, commits stopped, metrics and log say Redis"
replace_shard b "$T_DIR/projector.yaml"
load_stop "the repair"
check_exact b
ok "b: projector running through the loss (full coverage required): exact"

# c. projector running, full coverage not required: only the lost shard's
# boards wait
for p in $(live_ports); do
    redis_cli "$p" CONFIG SET cluster-require-full-coverage no >/dev/null
done
victim=$(redis_cli "${original[2]}" ROLE | first)
[[ $victim == master ]] || fail "${original[2]} is no longer a master"
lost_ranges=$(redis_cli "${original[2]}" CLUSTER NODES | awk '$3 ~ /myself/ { for (i = 9; i <= NF; i++) print $i }')
lost_slot() { # SLOT: whether it is in the lost ranges
    local r
    for r in $lost_ranges; do
        (($1 >= ${r%-*} && $1 <= ${r#*-})) && return 0
    done
    return 1
}
# production until the repair is done, as in b: the checks below, the
# runbook and replay all happen while it runs (a fixed 30 s was once not
# enough on a loaded two-core machine under ASan)
load_start --deliveries-out "$T_DIR/deliveries.tsv" -n 300000 --seed 124 "${gen[@]}" --rate 1000
sleep 3
lose_shard "${original[2]}"
sleep 6
lost_boards=() survivor_key=
any=$(live_ports | first)
while read -r b; do
    [[ $b == spl-* ]] && continue # split: a player's shard decides (event_lost)
    if lost_slot "$(redis_cli "$any" CLUSTER KEYSLOT "$b")"; then
        lost_boards+=("$b")
    elif [[ -z $survivor_key ]]; then
        survivor_key="lb:{$b}:alltime"
    fi
done < <(cut -f 4 "$T_DIR/deliveries.tsv" | sort -u)
((${#lost_boards[@]} > 0)) || fail "no board on the lost shard"
# event_lost BOARD EVENT_ID: whether the event's keys are on the lost shard
# (a split board's: its player's shard's, by the oracle's own tag rule)
event_lost() {
    local player tag
    player=$(awk -F '\t' -v id="$2" '$1 == id { print $3; exit }' "$T_DIR/events.part")
    [[ -n $player ]] || fail "event $2 is not in the events produced"
    tag=$("$BIN/verify_state" "${MODE_ORACLE[@]}" --tag "$1/$player") || fail "verify_state --tag failed"
    lost_slot "$(redis_cli "$any" CLUSTER KEYSLOT "$tag")"
}
# tops_lost BOARD: whether BOARD's merged tops cannot be written: a split
# board has a shard on every master (test_split checks the spread), and a
# top is merged from all of them, so any lost master stops its refreshes;
# the records that changed it wait uncommitted
tops_lost() {
    [[ $1 == spl-* ]]
}
state_of() { # KEY: a digest of the key, read from its master (redirections followed)
    redis_cli "$(live_ports | first)" -c ZRANGE "$1" 0 -1 WITHSCORES | md5sum
}
c1=$(committed_offsets)
s1=$(state_of "$survivor_key")
sleep 3
c2=$(committed_offsets)
s2=$(state_of "$survivor_key")
[[ $s1 != "$s2" ]] || fail "$survivor_key did not change while the other shard was lost"
[[ $(cut -d' ' -f 1,2 <<<"$c1") == "$(cut -d' ' -f 1,2 <<<"$c2")" ]] ||
    fail "commits still moved after the held events: $c1 -> $c2"
# each partition's commit stands on its first event of a lost board, or
# on its first event of a split board written since (its merged tops wait
# for the lost shard: reason "top")
held_at=0 held_split=0 held_top=0
while read -r p c h; do
    ((c < h)) || continue
    read -r id board < <(awk -v p="$p" -v o="$c" '$1 == p && $2 == o { print $3, $4 }' "$T_DIR/deliveries.tsv") ||
        true
    [[ -n $board ]] || fail "partition $p: no event delivered at its committed offset $c"
    if event_lost "$board" "$id"; then
        [[ $board == spl-* ]] && held_split=$((held_split + 1))
        held_at=$((held_at + 1))
    elif tops_lost "$board"; then
        held_top=$((held_top + 1))
    else
        fail "partition $p stopped at offset $c, event $id of board $board, not of the lost shard"
    fi
done <<<"$c2"
((held_at + held_top > 0)) || fail "no partition stopped at a lost board's event"
metrics_scrape "$url" "$T_DIR/m-c"
held() { awk -v r="reason=\"$1\"}" '$1 ~ /^lb_partition_held\{/ && index($1, r) { s += $2 } END { print s + 0 }' "$T_DIR/m-c"; }
# one reason each: Redis where the commit stands on a lost event, Redis or
# top where it stands on a lost top's (a later lost event's hold shows first)
(($(held redis) >= held_at && $(held redis) + $(held top) == held_at + held_top)) ||
    fail "metrics say $(held redis) partition(s) held for Redis and $(held top) for a merged top, the offsets $held_at and $held_top"
ok "c: ${#lost_boards[@]} lost board(s) and the lost shards of split boards hold $held_at partition(s) exactly at their first event ($held_split of a split board), lost merged tops $held_top; $survivor_key kept changing"
replace_shard c "$T_DIR/projector.yaml"
load_stop "the repair"
check_exact c
ok "c: projector running through the loss (full coverage not required): exact"

# d. final standings: a day closes while its board's shard is being rebuilt.
# The pod runs with res-* boards publishing their days (lib.sh MODE_RESULTS);
# yesterday is open on them. The master holding res-0 is lost, a new empty
# node takes its place (the runbook's procedure up to replay), and the pod
# writes res-0 and its neighbours there again from what it had not
# committed. Then events of today move the close watermark past yesterday:
# boards on the other shards publish it, those of the new node must not
# (frozen now, their standings would miss everything lost). Once replay
# --node has rebuilt the node, they close from every event, exact.
stop_projector "$PROJECTOR_PID"
"$BIN/lbadmin" create-topic --brokers "$BROKERS" "${KAFKA_X[@]}" --topic scores-results \
    --partitions 1 >>"$T_DIR/lbadmin.log" 2>&1 || fail "cannot create scores-results"
write_config "$T_DIR/results.yaml" "$MODE_PROFILES$MODE_RESULTS
$METRICS_YAML"
oracle=("${MODE_ORACLE[@]}" "${MODE_RESULTS_ORACLE[@]}")
start_projector projector "$T_DIR/results.yaml"
wait_log "$T_DIR/projector.log" 'every slot marked' 30
yesterday=$(date -u -d "$START + 2 days" +daily:%Y-%m-%d)
res_gen=(--boards 12 --players 300 --board-prefix res- --score-max 100000)
produce -n 3000 --seed 125 "${res_gen[@]}" --start "$(date -u -d "$START + 2 days" +%FT%TZ)" --days 1
wait_caught_up 120
[[ -z $(final_state res-0 "$yesterday") ]] || fail "res-0 $yesterday closed before today's events"
victim=""
for p in $(slot_masters); do
    [[ $(redis_cli "$p" EXISTS "lb:{res-0}:~open") == 1 ]] && victim=$p
done
[[ -n $victim ]] || fail "no master holds lb:{res-0}:~open"
lost_res=() kept_res=()
for ((i = 0; i < 12; i++)); do
    if [[ $(redis_cli "$victim" EXISTS "lb:{res-$i}:~open") == 1 ]]; then
        lost_res+=("res-$i")
    else
        kept_res+=("res-$i")
    fi
done
((${#kept_res[@]} > 0)) || fail "every res board is on $victim"
load_start -n 300000 --seed 126 "${res_gen[@]}" --start "$(date -u -d "$START + 2 days" +%FT%TZ)" \
    --days 1 --rate 500
sleep 2
lose_shard "$victim"
replace_shard d "$T_DIR/results.yaml" no-replay
load_stop "the node's replacement"
window_written() { [[ $(redis_cli "$(live_ports | first)" -c EXISTS "lb:{$1}:$2") == 1 ]]; }
lb_wait_for 60 window_written res-0 "$yesterday" || fail "the pod did not write res-0 $yesterday again"
logged=$(wc -l <"$T_DIR/projector.log")
produce -n 600 --seed 127 "${res_gen[@]}" --hours 1 # up to now: past yesterday's end
wait_caught_up 120
all_published() {
    local b
    for b in "$@"; do
        window_published "$b" "$yesterday" || return 1
    done
}
lb_wait_for 60 all_published "${kept_res[@]}" ||
    fail "the boards on the other shards did not publish $yesterday"
sleep 3 # they were due at the same check; one more
for b in "${lost_res[@]}"; do
    state=$(final_state "$b" "$yesterday")
    [[ -z $state ]] || fail "$b $yesterday is $state before replay rebuilt its node"
done
since() { tail -n +$((logged + 1)) "$T_DIR/projector.log"; }
since | grep "window '$yesterday' closed, but slot [0-9]* has no ~intact mark" >/dev/null ||
    fail "the log does not say why the lost boards wait"
new_slots=$(redis_cli "${NEW##*:}" CLUSTER NODES | awk '$3 ~ /myself/ {
    for (i = 9; i <= NF; i++) { n = split($i, r, "-"); s += r[n] - r[1] + 1 } } END { print s }')
lb_wait_for 10 metrics_series_is "$url" 'lb_results_unrebuilt_slots' "$new_slots" ||
    fail "lb_results_unrebuilt_slots is not $new_slots: $(curl -sf "$url/metrics" | grep unrebuilt)"
since | grep "$new_slots slot(s) have no ~intact mark" >/dev/null ||
    fail "the log does not count the slots without a mark"
ok "d: ${#kept_res[@]} board(s) on the other shards published $yesterday; the ${#lost_res[@]} on the new node wait, $new_slots slot(s) unrebuilt"
# rebuilt NAME SLOTS SELECTION... - replay of SELECTION marks SLOTS slots
# rebuilt, and the pods read the marks at once
rebuilt() {
    local name=$1 slots=$2
    shift 2
    "$BIN/replay" --config "$T_DIR/replay-d.yaml" "$@" >"$T_DIR/replay-$name.out" 2>&1 ||
        fail "replay $* failed: $(tail -n 3 "$T_DIR/replay-$name.out")"
    grep -q "^replay: $slots slot(s) without a ~intact mark .* marked rebuilt" "$T_DIR/replay-$name.out" ||
        fail "replay $* did not mark $slots slots: $(grep -v '^replay: progress' "$T_DIR/replay-$name.out" | tail -n 3)"
    lb_wait_for 10 metrics_series_is "$url" 'lb_results_unrebuilt_slots' 0 ||
        fail "lb_results_unrebuilt_slots did not go back to 0"
}
exact() { # the oracle, final standings included
    wait_caught_up 120
    verify "${oracle[@]}"
    grep -q "^verify_state: [1-9][0-9]* closed windows checked" "$T_DIR/verify.out" ||
        fail "no closed window checked: $(head -n 1 "$T_DIR/verify.out")"
}
# replay's last step meets Redis failing for a moment: while replay waits
# 8 s before reading the slots' ~intact marks, a master stops answering
# clients for 16 s (CLIENT PAUSE ALL: the reads time out); while it waits
# 8 s before writing those of the rebuilt slots, writes are held (CLIENT
# PAUSE WRITE) and every client's connection is cut with its writes in
# flight. It asks again, both times (it used to exit 1 there, every board
# swapped, the slots unmarked). The reads go out 8 s into the first pause,
# on a new connection where replay had none to that master, which is given
# connect_timeout (1 s) + command_timeout (2 s here): with 11 s of CLIENT
# PAUSE they timed out in one run of four, the pause ending as the deadline
# did
intact_pauses() { (($(grep -c 'LB_FAULT_INTACT_PAUSE_MS: pausing' "$T_DIR/replay-d.out" 2>/dev/null) >= $1)); }
fail_at_pauses() { # MASTER...: each step well within replay's 8 s pause (3 s was not, with three tests at a time)
    local p
    lb_wait_for 300 intact_pauses 1 || return 1
    redis_cli "$1" CLIENT PAUSE 16000 ALL >/dev/null
    lb_wait_for 60 intact_pauses 2 || return 1
    for p in "$@"; do redis_cli "$p" CLIENT PAUSE 12000 WRITE >/dev/null; done
    sleep 9.5 # replay's pause over, its writes sent and held
    for p in "$@"; do redis_cli "$p" CLIENT KILL TYPE normal >/dev/null; done
    for p in "$@"; do redis_cli "$p" CLIENT UNPAUSE >/dev/null; done
}
mapfile -t now_masters < <(slot_masters)
fail_at_pauses "${now_masters[@]}" &
failer=$!
T_PIDS+=("$failer")
LB_FAULT_INTACT_PAUSE_MS=8000 rebuilt d "$new_slots" --node "$NEW"
wait "$failer" || fail "replay did not pause before reading and writing the marks: $(tail -n 3 "$T_DIR/replay-d.out")"
for step in reading writing; do
    grep -Eq "^replay: $step the slots' ~intact marks failed \(attempt 1\): slot [0-9]+: " \
        "$T_DIR/replay-d.out" || fail "replay did not say why it asked again $step the marks: $(tail -n 5 "$T_DIR/replay-d.out")"
done
lb_wait_for 60 all_published "${lost_res[@]}" || fail "the rebuilt boards did not publish $yesterday"
exact
ok "d: replay --node rebuilt the node (a master silent as it read the marks, its connections cut as it wrote them); the ${#lost_res[@]} board(s) waiting published $yesterday from every event, exact"

# e. every master loses its data at once (each flushed, as a lone Redis
# restarted without persistence would be) and a pod starts before any
# replay: with no mark anywhere it could take the cluster for a new one,
# but the boards published in the results topic have no ~final, so it
# marks nothing and says to rebuild every slot; replay --slots 0-16383
# does, marks them all, and everything is exact again.
stop_projector "$PROJECTOR_PID"
for p in $(slot_masters); do
    redis_cli "$p" FLUSHALL >/dev/null
done
logged=$(wc -l <"$T_DIR/projector.log")
start_projector projector "$T_DIR/results.yaml"
wait_log "$T_DIR/projector.log" 'every shard lost its data' 30
since | grep 'every slot marked' >/dev/null && fail "the pod marked every slot of a cluster that lost them all"
lb_wait_for 10 metrics_series_is "$url" 'lb_results_unrebuilt_slots' 16384 ||
    fail "lb_results_unrebuilt_slots is not 16384: $(curl -sf "$url/metrics" | grep '^lb_results_unrebuilt')"
rebuilt e 16384 --slots 0-16383
exact
ok "e: every master emptied, a pod started: nothing marked, $(since | grep -c 'every shard lost') warning; replay --slots 0-16383 marked every slot, exact"

# f. an upgrade: a cluster the previous release wrote (every board's keys,
# no mark at all: they are deleted here) meets its first pod of this one,
# which marks every slot, since the boards the results topic names have
# their ~final.
stop_projector "$PROJECTOR_PID"
for p in $(slot_masters); do
    redis_cli "$p" --scan --pattern 'lb:~intact{*' | sed 's/^/DEL /' | redis_cli "$p" >/dev/null
    [[ -z $(redis_cli "$p" --scan --pattern 'lb:~intact{*') ]] || fail "marks left on $p"
done
logged=$(wc -l <"$T_DIR/projector.log")
start_projector projector "$T_DIR/results.yaml"
marked_all() { since | grep 'every slot marked' >/dev/null; }
lb_wait_for 30 marked_all || fail "the first pod after the upgrade did not mark every slot"
lb_wait_for 10 metrics_series_is "$url" 'lb_results_unrebuilt_slots' 0 ||
    fail "lb_results_unrebuilt_slots is not 0 after the upgrade"
since | grep 'every shard lost' >/dev/null && fail "the upgrade was taken for the loss of every shard"
ok "f: a cluster without marks whose boards stand (an upgrade): its first pod marked every slot"

#!/usr/bin/env bash
# Final standings (README "Final standings"): daily windows close when the
# whole topic's committed event time (each commit's watermark) passed their
# end plus the grace; two pods; each closed window is frozen and published
# once: <prefix>{B}:final:<window> holds the first results.top entries of
# the window as it was, ~final says published, and the results topic holds
# one record per window key. Events that come after the close into a
# closed window are counted and change nothing there, while they still
# count for the windows still open (alltime). A pod killed between the
# claim and the acknowledgement (before the broker acknowledged the record,
# or after it and before the window was marked published) leaves the window
# claimed; the next pod publishes it again, and every record of a window key
# carries the same bytes.
# A shard lost with every pod down and replaced empty: replay puts its
# boards' closed windows back from the results topic as they closed. Idle
# partitions (one caught up and days behind, one never written) hold no
# window open. The independent oracle checks every closed window's final
# standings, the late events left out, and the published ranks.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# the events' three days run Sunday to Tuesday, so that a week ends inside
# them: they start on the last Sunday at least three days back
START=$(date -u -d "$((3 + $(date -u -d '3 days ago' +%u) % 7)) days ago" +%Y-%m-%dT00:00:00Z)
start_services
export GROUP=lb-results DLQ_TOPIC=scores-dlq # late events are dead-lettered too
# the closer reads the boards' ~open and ~final two boards a round (256 by
# default): the three boards take two rounds; and starts windows for 0 ms
# after a check's first (50 ms by default): one a check, the others that
# closed wait for the next step
export LB_FAULT_CLOSER_ROUND=2 LB_FAULT_CLOSER_STEP_MS=0
for t in scores-results scores-dlq; do
    "$BIN/lbadmin" create-topic --brokers "$BROKERS" "${KAFKA_X[@]}" --topic "$t" \
        --partitions 3 >>"$T_DIR/lbadmin.log" 2>&1 || fail "cannot create $t"
done
pick_metrics_port
profiles="profiles:
  - name: res
    match: [\"res-*\"]
    tie_resolution: s
    windows:
      alltime: {}
      daily: {ttl: 30d, results: {top: 20, grace: 1h}}
      weekly: {ttl: 60d, results: {top: all, grace: 1h}}
results: {topic: scores-results, schema_id: 1, idle: 10m, lease: 10s}"
write_config "$T_DIR/projector.yaml" "$profiles
$METRICS_YAML"
write_config "$T_DIR/projector-b.yaml" "$profiles" # the second pod: no metrics port
gen=(--boards 3 --board-prefix res- --players 300 --score-max 500)
oracle=(--windows "alltime,daily:30d,weekly:60d" --resolution-ms 1000 --profile res-=best/desc/earliest
    --results "res-=daily/20/3600000,weekly/0/3600000" --idle-ms 600000)

# the close watermark as the commits carry it: the lowest partition's
close_watermark() {
    "$BIN/lbadmin" offsets --brokers "$BROKERS" "${KAFKA_X[@]}" --topic scores --group "$GROUP" |
        awk '$1 == "scores" && $7 != "-" { print $7 }' | while read -r at; do
        date -u -d "$at" +%s%3N
    done | sort -n | head -n 1
}
# the windows of the events' three days whose end + 1 h 'until' (ms)
# passed: days, then weeks (Monday = day 4 of the epoch's week, 1970-01-05)
closed_windows() {
    local first=$(($(date -u -d "$START" +%s) / 86400)) until=$1 day monday seen=""
    for ((day = first; day < first + 3; day++)); do
        (((day + 1) * 86400000 + 3600000 <= until)) &&
            date -u -d "@$((day * 86400))" +daily:%Y-%m-%d
    done
    for ((day = first; day < first + 3; day++)); do
        monday=$((day - (day - 4) % 7))
        [[ $seen == *" $monday "* ]] && continue
        seen+=" $monday "
        (((monday + 7) * 86400000 + 3600000 <= until)) &&
            date -u -d "@$((monday * 86400))" +weekly:%G-W%V
    done
    return 0
}
# same_as_oracle BOARD WINDOW [ORACLE ARGS...] - the published standings
# (lbadmin results: the entries) equal the oracle's, ranks included
same_as_oracle() {
    "$BIN/lbadmin" results --brokers "$BROKERS" "${KAFKA_X[@]}" --topic "${RESULTS_TOPIC:-scores-results}" \
        --board "$1" --window "$2" --timeout 20 >"$T_DIR/published.out" 2>>"$T_DIR/lbadmin.log" ||
        fail "lbadmin results --board $1 --window $2: $(tail -n 1 "$T_DIR/lbadmin.log")"
    run_oracle "${oracle[@]}" "${@:3}" --final "$1/$2" >"$T_DIR/expected.out" 2>&1 ||
        fail "the oracle has no final standings of $1 $2: $(tail -n 3 "$T_DIR/expected.out")"
    [[ -s $T_DIR/expected.out ]] || fail "the oracle's standings of $1 $2 are empty"
    diff <(tail -n +4 "$T_DIR/published.out") "$T_DIR/expected.out" >"$T_DIR/final.diff" ||
        fail "the published standings of $1 $2 are not the oracle's:
$(head -n 8 "$T_DIR/final.diff")"
}
dump_results() {
    "$BIN/lbadmin" dump --brokers "$BROKERS" "${KAFKA_X[@]}" --topic scores-results --timeout 20 \
        >"$T_DIR/results.dump" 2>>"$T_DIR/lbadmin.log" || fail "cannot read scores-results"
}

at() { date -u -d "$START + $1" "${2:-+%Y-%m-%dT%H:%M:%SZ}"; } # OFFSET [FORMAT]
# 1. three days of events, two pods; the days and the week the watermark
#    passed close. Around each boundary (Monday 00:00 ends Sunday and its
#    week, Tuesday 00:00 ends Monday) events of the hour before come late,
#    after the first hour past it, inside the grace (1 h): the window has
#    not closed, so they count there
produce -n 1900 --seed 541 "${gen[@]}" --start "$START" --days 1
for d in 1 2; do
    produce -n 100 --seed "$((540 + 3 * d))" "${gen[@]}" --start "$(at "$d days")" --hours 1
    produce -n 100 --seed "$((541 + 3 * d))" "${gen[@]}" --start "$(at "$d days - 1 hour")" --hours 1
    produce -n 1800 --seed "$((542 + 3 * d))" "${gen[@]}" --start "$(at "$d days + 1 hour")" --hours 23
done
start_projector a "$T_DIR/projector.yaml"
pod_a=$PROJECTOR_PID
start_projector b "$T_DIR/projector-b.yaml"
pod_b=$PROJECTOR_PID
wait_caught_up 120
verify "${oracle[@]}"
until=$(close_watermark)
[[ -n $until ]] || fail "no commit carries a watermark"
mapfile -t days < <(closed_windows "$until")
[[ ${days[*]} == "$(at "0 days" +daily:%Y-%m-%d) $(at "1 day" +daily:%Y-%m-%d) $(at "0 days" +weekly:%G-W%V)" ]] ||
    fail "not Sunday, Monday and Sunday's week closed by $until: ${days[*]}"
all_published() {
    local b w
    for b in res-0 res-1 res-2; do
        for w in "${days[@]}"; do
            [[ $(final_state "$b" "$w") == published ]] || return 1
        done
    done
}
unpublished() { # what ~open and ~final hold, for a failure's message
    local b
    for b in res-0 res-1 res-2; do
        printf '%s ~open: %s\n' "$b" "$(redis_cli "$(live_ports | first)" -c HGETALL "lb:{$b}:~open" | tr '\n' ' ')"
        printf '%s ~final: %s\n' "$b" "$(redis_cli "$(live_ports | first)" -c HGETALL "lb:{$b}:~final" |
            grep -v '^r:' | tr '\n' ' ' | cut -c1-300)"
    done
}
lb_wait_for 30 all_published ||
    fail "not every closed window was published: ${days[*]} (watermark $until)
$(unpublished)"
for b in res-0 res-1 res-2; do
    port=$(live_ports | first)
    for w in "${days[@]}"; do
        top=19 # daily: the first 20; weekly: all
        [[ $w == weekly:* ]] && top=-1
        diff <(redis_cli "$port" -c ZRANGE "lb:{$b}:final:$w" 0 -1 REV WITHSCORES) \
            <(redis_cli "$port" -c ZRANGE "lb:{$b}:$w" 0 "$top" REV WITHSCORES) >/dev/null ||
            fail "the final standings of $b $w are not the window's first $((top + 1))"
        [[ $(redis_cli "$port" -c TTL "lb:{$b}:final:$w") == -1 ]] ||
            fail "the final standings of $b $w expire"
    done
    # the last day has not closed
    last=$(date -u -d "$START + 2 days" +daily:%Y-%m-%d)
    [[ " ${days[*]} " == *" $last "* || -z $(final_state "$b" "$last") ]] ||
        fail "$b $last was closed before the watermark passed it"
done
dump_results
for b in res-0 res-1 res-2; do
    for w in "${days[@]}"; do
        [[ $(grep -c " key={$b}:$w " "$T_DIR/results.dump") == 1 ]] ||
            fail "{$b}:$w is not in the results topic exactly once"
    done
done
n=$(wc -l <"$T_DIR/results.dump")
((n == 3 * ${#days[@]})) || fail "$n records in the results topic, not $((3 * ${#days[@]}))"
"$BIN/lbread" --config "$T_DIR/projector.yaml" --board res-1 --window "${days[0]}" --final \
    --top 3 >"$T_DIR/lbread-final.out" 2>&1 || fail "lbread --final failed: $(cat "$T_DIR/lbread-final.out")"
grep -q "final standings of board 'res-1' window ${days[0]}: closed at .*, published" \
    "$T_DIR/lbread-final.out" || fail "lbread --final: $(head -n 1 "$T_DIR/lbread-final.out")"
verify "${oracle[@]}"
grep -q "^verify_state: $((3 * ${#days[@]})) closed windows checked" "$T_DIR/verify.out" ||
    fail "the oracle did not check $((3 * ${#days[@]})) closed windows: $(head -n 1 "$T_DIR/verify.out")"
# (no window closed before the late events inside its grace: step 2 counts
# every window_closed record in the dead-letter topic)
grep -q "closed windows checked (final standings), 0 late writes left out" "$T_DIR/verify.out" ||
    fail "events inside the grace were left out of a closed window: $(head -n 1 "$T_DIR/verify.out")"
same_as_oracle res-1 "${days[0]}"
same_as_oracle res-2 "${days[2]}"
ok "${days[*]} closed on 3 boards, events inside the grace in them: frozen (no expiry), published once each, as the oracle ranks them"

# 2. late events after the grace, around both boundaries (Sunday's and
#    Monday's): not written into the closed days (nor Sunday's closed
#    week), counted; they still count for the windows still open (alltime,
#    Monday's week) (pod a alone, so that its metrics count all)
stop_projector "$pod_b"
closed_days() {
    local b
    for b in res-0 res-1 res-2; do
        redis_cli "$(live_ports | first)" -c ZRANGE "lb:{$b}:${days[0]}" 0 -1 WITHSCORES
        redis_cli "$(live_ports | first)" -c ZRANGE "lb:{$b}:${days[1]}" 0 -1 WITHSCORES
    done | md5sum
}
closed_days >"$T_DIR/closed.md5"
digest() { redis_cli "$(live_ports | first)" -c ZRANGE "$1" 0 -1 WITHSCORES | md5sum; }
day0=$(digest "lb:{res-0}:${days[0]}")
final0=$(digest "lb:{res-0}:final:${days[0]}")
produce -n 600 --seed 502 --boards 3 --board-prefix res- --players 300 --score-max 100000 \
    --start "$START" --days 2
wait_caught_up 120
closed_days | cmp -s - "$T_DIR/closed.md5" || fail "late events changed the closed ${days[0]} or ${days[1]}"
# every one of them falls in one closed window or two (Sunday's: the day
# and its week): each counted once (the page is rendered every second:
# waited for)
want=$(grep -c '^e502-' "$T_DIR/events.tsv")
lb_wait_for 10 metrics_series_is "$METRICS_URL" lb_late_after_close_total "$want" || {
    metrics_scrape "$METRICS_URL" "$T_DIR/m-late"
    fail "$(metrics_value "$T_DIR/m-late" 'lb_late_after_close_total{}') late events counted, not the $want produced"
}
late=$want
best=$(awk -F '\t' '$1 ~ /^e502-/ && $2 == "res-0" { if ($4 > m) m = $4 } END { print m + 0 }' "$T_DIR/events.tsv")
top=$(redis_cli "$(live_ports | first)" -c ZRANGE "lb:{res-0}:alltime" 0 0 REV WITHSCORES | tail -n 1)
(((${top%.*} >> 30) >= best)) || fail "a late event did not count for alltime ($best > $((${top%.*} >> 30)))"
dump_results
((n == $(wc -l <"$T_DIR/results.dump"))) || fail "late events published something again"
verify "${oracle[@]}"
grep -Eq "closed windows checked \(final standings\), [1-9][0-9]* late writes left out" "$T_DIR/verify.out" ||
    fail "the oracle left no late write out: $(head -n 1 "$T_DIR/verify.out")"
# each dead-lettered once as window_closed, and redrive refuses them
"$BIN/lbadmin" dump --brokers "$BROKERS" "${KAFKA_X[@]}" --topic scores-dlq --timeout 20 \
    >"$T_DIR/dlq.dump" 2>>"$T_DIR/lbadmin.log" || fail "cannot read scores-dlq"
closed_dlq=$(grep -c ' lb.reason=window_closed ' "$T_DIR/dlq.dump" || true)
((closed_dlq == want)) || fail "$closed_dlq window_closed records in scores-dlq, not the $want late events"
status=0
"$BIN/lbadmin" redrive --brokers "$BROKERS" "${KAFKA_X[@]}" --topic scores-dlq --timeout 20 \
    >"$T_DIR/redrive.out" 2>&1 || status=$?
{ ((status == 1)) && grep -q "^redrive: 0 record(s) produced back .*, $want refused (window_closed)" \
    "$T_DIR/redrive.out"; } || fail "redrive did not refuse the window_closed records (exit $status): $(tail -n 2 "$T_DIR/redrive.out")"
ok "late events: $late counted, dead-lettered once each as window_closed (redrive refuses them), the closed days unchanged, alltime and the open week took them"

# replay of a board beside the running pod: the closed windows are rebuilt
# from the events before their close offsets only (not reopened), their
# final standings untouched
"$BIN/replay" --config "$T_DIR/projector.yaml" --board res-0 >"$T_DIR/replay.out" 2>&1 ||
    fail "replay --board res-0 failed: $(tail -n 3 "$T_DIR/replay.out")"
grep -Eq 'closed windows \(final standings\) not reopened: [1-9][0-9]* window write' "$T_DIR/replay.out" ||
    fail "replay did not leave late events out of the closed windows: $(tail -n 3 "$T_DIR/replay.out")"
[[ $(digest "lb:{res-0}:${days[0]}") == "$day0" ]] || fail "replay changed the closed ${days[0]} of res-0"
[[ $(digest "lb:{res-0}:final:${days[0]}") == "$final0" && $(final_state res-0 "${days[0]}") == published ]] ||
    fail "replay touched the final standings of res-0 ${days[0]}"
top=$(redis_cli "$(live_ports | first)" -c ZRANGE "lb:{res-0}:alltime" 0 0 REV WITHSCORES | tail -n 1)
(((${top%.*} >> 30) >= best)) || fail "replay left a late event out of alltime"
[[ -z $(redis_cli "$(live_ports | first)" -c HGET "lb:{res-0}:~open" "${days[0]}") ]] ||
    fail "replay's swap listed the closed ${days[0]} in res-0's ~open"
verify "${oracle[@]}"
ok "replay --board res-0: closed windows as they closed, final standings untouched, alltime whole"

# replay --republish of res-0's first day, killed while it reads: the day
# is left reopening. Nothing closes it then; the pod writes the late events
# that come meanwhile into it (they are not late there, and still are in
# the closed week). A replay --republish that completes rebuilds the day
# from every event and the pod publishes it again, once, as the oracle
# ranks it; the week stays as it closed.
w0=${days[0]}
republished_key="{res-0}:$w0"
"$BIN/replay" --config "$T_DIR/projector.yaml" --board res-0 --window "$w0" --republish \
    --max-rate 200 >"$T_DIR/replay-killed.out" 2>&1 &
replay_pid=$!
reopening() { [[ $(final_state res-0 "$w0") == reopening ]]; }
lb_wait_for 30 reopening || {
    kill -9 "$replay_pid" 2>/dev/null
    fail "replay --republish did not reopen res-0 $w0: $(tail -n 3 "$T_DIR/replay-killed.out")"
}
kill -9 "$replay_pid" 2>/dev/null
wait "$replay_pid" 2>/dev/null || true
[[ $(redis_cli "$(live_ports | first)" -c HEXISTS "lb:~replay-reopening" "$w0 res-0") == 1 ]] ||
    fail "the killed replay left no note of res-0 $w0 in lb:~replay-reopening"
dump_results
records=$(wc -l <"$T_DIR/results.dump")
week_before=$(digest "lb:{res-0}:final:${days[2]}")
produce -n 300 --seed 507 --boards 3 --board-prefix res- --players 300 --score-max 100000 \
    --start "$START" --days 1
wait_caught_up 120
best=$(awk -F '\t' '$1 ~ /^e507-/ && $2 == "res-0" { if ($4 > m) m = $4 } END { print m + 0 }' "$T_DIR/events.tsv")
top=$(redis_cli "$(live_ports | first)" -c ZRANGE "lb:{res-0}:$w0" 0 0 REV WITHSCORES | tail -n 1)
(((${top%.*} >> 30) >= best)) || fail "the pod did not write a late event into the reopening res-0 $w0"
# a closer check (every 2 s, two boards a round) tries to close it, and
# leaves it reopening
lb_wait_for 15 grep -q "board 'res-0' window '$w0' is being reopened by replay --republish" \
    "$T_DIR/a.log" ||
    fail "the pod did not try to close res-0 $w0 (the late events listed it in ~open)
$(unpublished)
$(curl -sf "$METRICS_URL/metrics" | grep '^lb_results')"
reopening || fail "res-0 $w0 is $(final_state res-0 "$w0") while replay has not rebuilt it"
dump_results
(($(wc -l <"$T_DIR/results.dump") == records)) || fail "res-0 $w0 was published while reopening"
# and a note whose window is not reopening (a run killed before its reopen
# step): not named, deleted
redis_cli "$(live_ports | first)" -c HSET "lb:~replay-reopening" "daily:2000-01-01 res-0" x >/dev/null
# and Redis fails it twice on its way: while it waits 8 s before its
# reopened step, the board's master stops answering for 12 s (CLIENT PAUSE
# ALL: the step times out), and so does the master of lb:~reopened while
# it waits before telling the pods. It asks again both times (it used to
# exit 1 at the step, the window left reopening). Where replay's lease is
# on a paused master too, its renewal fails first: the same retry
final_master=$(master_of_key "lb:{res-0}:~final")
told_master=$(master_of_key "lb:~reopened")
[[ -n $final_master && -n $told_master ]] || fail "no master of lb:{res-0}:~final or of lb:~reopened"
paused_at() { grep -q "$1: pausing" "$T_DIR/replay-republish.out" 2>/dev/null; }
fail_at_pauses() {
    lb_wait_for 300 paused_at LB_FAULT_REOPENED_PAUSE_MS || return 1
    redis_cli "$final_master" CLIENT PAUSE 12000 ALL >/dev/null || return 1
    lb_wait_for 60 paused_at LB_FAULT_ANNOUNCE_PAUSE_MS || return 1
    redis_cli "$told_master" CLIENT PAUSE 12000 ALL >/dev/null || return 1
}
# Before it, two replays (of every board) froze while they read, each with
# a record in hand (it stops itself with SIGSTOP there: a VM paused, a
# process swapped out), past their leases' TTL (3 s here, 30 s by
# default), so this run takes the lease. The first is resumed while this
# run holds the lease, the second once this run has finished and given the
# lease back: each stops before its next batch (exit 1), writes no staging
# key (the leftovers of both were deleted by the next run's start), and
# leaves the lease and the journal alone; the second does not take the
# free lease again, since the journal no longer names it. Each run stages
# under its own prefix, so even a write already on its way when it froze
# lands in keys no other run reads. A third froze at its start, with the
# lease and before deleting what earlier runs left (LB_FAULT_START_STOP):
# resumed while this run holds the lease, it deletes none of this run's
# staging keys (this run's epoch, in its prefix, is larger), leaves the
# journal alone and stops (exit 1).
staged_under() { # PREFIX: staging keys under it, on the masters
    local p
    for p in $(live_ports); do
        if is_master "$p"; then redis_cli "$p" --scan --pattern "$1*"; fi
    done | wc -l
}
staging_of() { sed -n 's/^  this run stages its copy under \(.*\){<board>}:\.\.\.$/\1/p' "$1" | first; }
lease_gone() { [[ $(redis_cli "$(live_ports | first)" -c EXISTS "lb:~replay-lease") == 0 ]]; }
lease_of() { [[ $(redis_cli "$(live_ports | first)" -c GET "lb:~replay-lease") == *" $1 "* ]]; }
journal_of() { [[ $(redis_cli "$(live_ports | first)" -c HGET "lb:~replay-journal" owner) == *" $1 "* ]]; }
stopped() { [[ $(ps -o stat= -p "$1") == T* ]]; }
declare -A frozen_pid frozen_prefix
# NAME ENV=VALUE... -- ARGS...: replay_bg, its output in
# $T_DIR/replay-NAME.out, until it stops itself (a fault's SIGSTOP)
replay_until_stopped() {
    replay_bg -1 "replay-$1" "${@:2}"
    lb_wait_for 60 stopped "$rpid" || fail "replay $1 did not stop itself: $(tail -n 3 "$T_DIR/replay-$1.out")"
}
# PID CODE WHAT OUT: the stopped replay PID woken, it exits CODE (else fail,
# naming WHAT and the end of its output OUT)
wake_exits() {
    local rc=0
    kill -CONT "$1"
    wait "$1" || rc=$?
    ((rc == $2)) || fail "$3 exited $rc once resumed, not $2: $(tail -n 3 "$4")"
}
freeze_replay() { # NAME: started, until it stops itself
    local out="$T_DIR/replay-frozen-$1.out"
    replay_until_stopped "frozen-$1" LB_FAULT_LEASE_TTL_MS=3000 LB_FAULT_READ_STOP=1 -- \
        --board 'res-*' --max-rate 200
    frozen_pid[$1]=$rpid
    frozen_prefix[$1]=$(staging_of "$out")
    if [[ -z ${frozen_prefix[$1]} ]] || (($(staged_under "${frozen_prefix[$1]}") == 0)); then
        fail "replay $1 staged nothing under '${frozen_prefix[$1]}': $(head -n 12 "$out")"
    fi
}
resume_frozen() { # NAME: it stops, exit 1, writing nothing
    local out="$T_DIR/replay-frozen-$1.out"
    wake_exits "${frozen_pid[$1]}" 1 "replay $1" "$out"
    grep -q "^replay: the replay lease lb:~replay-lease went to another run while this one was stalled; stopping" "$out" ||
        fail "replay $1 did not stop on the lost lease: $(tail -n 3 "$out")"
    (($(staged_under "${frozen_prefix[$1]}") == 0)) ||
        fail "replay $1 wrote $(staged_under "${frozen_prefix[$1]}") staging key(s) under ${frozen_prefix[$1]} after it lost the lease"
}
freeze_replay first # (the killed run's lease taken over: its process is gone)
lb_wait_for 10 lease_gone || fail "the first frozen replay's lease did not run out"
freeze_replay second
lb_wait_for 10 lease_gone || fail "the second frozen replay's lease did not run out"
replay_until_stopped frozen-start LB_FAULT_LEASE_TTL_MS=3000 LB_FAULT_START_STOP=1 -- --board 'res-*'
at_start=$rpid
lb_wait_for 10 lease_gone || fail "the replay frozen at its start kept its lease"
# and a staging key of the release before, which staged every run under
# lb:~replay:{<board>}:...: a leftover too
redis_cli "$(live_ports | first)" -c ZADD "lb:~replay:{res-0}:alltime" 1 older-release >/dev/null
fail_at_pauses &
failer=$!
T_PIDS+=("$failer")
# (it stops itself too once it wrote a batch, its leftovers deleted: held
# there, well within its lease (120 s here), while the first frozen run
# and the one frozen at its start wake; so no master of its faults is
# silent yet, nor its end reached)
LB_FAULT_REOPENED_PAUSE_MS=8000 LB_FAULT_ANNOUNCE_PAUSE_MS=8000 LB_FAULT_READ_STOP=1 \
    LB_FAULT_LEASE_TTL_MS=120000 \
    "$BIN/replay" --config "$T_DIR/projector.yaml" --board res-0 --window "$w0" --republish \
    >"$T_DIR/replay-republish.out" 2>&1 &
republish=$!
T_PIDS+=("$republish")
lb_wait_for 120 stopped "$republish" ||
    fail "replay --republish did not stop itself: $(tail -n 3 "$T_DIR/replay-republish.out")"
resume_frozen first
lease_of "$republish" || fail "the first frozen replay took the lease: $(redis_cli "$(live_ports | first)" -c GET "lb:~replay-lease")"
journal_of "$republish" || fail "the first frozen replay changed the journal's owner"
[[ $(redis_cli "$(live_ports | first)" -c EXISTS "lb:~replay:{res-0}:alltime") == 0 ]] ||
    fail "the staging key lb:~replay:{res-0}:alltime of the release before was not deleted"
republish_prefix=$(staging_of "$T_DIR/replay-republish.out")
[[ -n $republish_prefix && $republish_prefix != "${frozen_prefix[second]}" ]] ||
    fail "two runs stage under '$republish_prefix'"
staged=$(staged_under "$republish_prefix")
((staged > 0)) || fail "replay --republish staged nothing under $republish_prefix before it stopped"
wake_exits "$at_start" 1 "the replay frozen at its start" "$T_DIR/replay-frozen-start.out"
grep -q "^replay: the replay journal lb:~replay-journal is a later run's: the replay lease went to another run while this one was stalled; stopping" \
    "$T_DIR/replay-frozen-start.out" ||
    fail "the replay frozen at its start did not stop on the lost lease: $(tail -n 3 "$T_DIR/replay-frozen-start.out")"
(($(staged_under "$republish_prefix") == staged)) ||
    fail "the replay frozen at its start deleted $((staged - $(staged_under "$republish_prefix"))) of the $staged staging key(s) of replay --republish"
lease_of "$republish" || fail "the replay frozen at its start took the lease"
journal_of "$republish" || fail "the replay frozen at its start replaced the journal"
grep -q "^  an earlier replay did not finish: pid ${frozen_pid[second]} on host .*, selection '--board res-\\* --max-rate 200'" \
    "$T_DIR/replay-republish.out" ||
    fail "the plan did not name the frozen run: $(head -n 12 "$T_DIR/replay-republish.out")"
grep -q "^  [1-9][0-9]* staging key(s) left by an earlier run are deleted before reading" \
    "$T_DIR/replay-republish.out" ||
    fail "the plan did not list the frozen run's staging keys: $(head -n 12 "$T_DIR/replay-republish.out")"
kill -CONT "$republish"
wait "$republish" || fail "replay --republish failed: $(tail -n 3 "$T_DIR/replay-republish.out")"
resume_frozen second
lease_gone || fail "the second frozen replay kept the lease it took again: $(redis_cli "$(live_ports | first)" -c GET "lb:~replay-lease")"
# (replay ends only after both pauses: a failer still waiting is one whose
# pause never came)
if kill -0 "$failer" 2>/dev/null; then
    kill "$failer"
    fail "replay did not pause before its reopened step and before telling the pods: $(tail -n 3 "$T_DIR/replay-republish.out")"
fi
wait "$failer" || fail "pausing the masters of lb:{res-0}:~final and lb:~reopened failed"
grep -q "^replay: the reopened step of board 'res-0' window '$w0' failed (attempt 1)" \
    "$T_DIR/replay-republish.out" ||
    fail "replay's reopened step did not fail and retry: $(grep -m 3 'attempt\|reopened' "$T_DIR/replay-republish.out")"
grep -q "^replay: telling the pods failed (attempt 1)" "$T_DIR/replay-republish.out" ||
    fail "replay's telling the pods did not fail and retry: $(grep -m 3 'attempt\|pods' "$T_DIR/replay-republish.out")"
if grep -q "could not tell the pods" "$T_DIR/replay-republish.out"; then
    fail "replay gave up telling the pods: $(grep -m 1 'could not tell' "$T_DIR/replay-republish.out")"
fi
grep -q "^replay: 1 closed window(s) reopened and rebuilt from every event" "$T_DIR/replay-republish.out" ||
    fail "replay --republish did not say it reopened res-0 $w0: $(tail -n 3 "$T_DIR/replay-republish.out")"
# the killed run's window, named in this run's plan (the stale note not); handed
# back, no longer (the stale note deleted)
grep -q "^  1 closed window(s) left reopening by a replay --republish that did not finish ($w0 of res-0)" \
    "$T_DIR/replay-republish.out" ||
    fail "the plan did not name res-0 $w0 left reopening: $(head -n 12 "$T_DIR/replay-republish.out")"
[[ $(redis_cli "$(live_ports | first)" -c HLEN "lb:~replay-reopening") == 0 ]] ||
    fail "lb:~replay-reopening still names a window: $(redis_cli "$(live_ports | first)" -c HKEYS "lb:~replay-reopening")"
republished() { [[ $(final_state res-0 "$w0") == published ]]; }
lb_wait_for 20 republished || fail "res-0 $w0 was not published again: $(final_state res-0 "$w0")"
dump_results
(($(wc -l <"$T_DIR/results.dump") == records + 1)) ||
    fail "$(($(wc -l <"$T_DIR/results.dump") - records)) record(s) published by the republication, not 1"
(($(grep " key=$republished_key " "$T_DIR/results.dump" | grep -o 'sha256=[0-9a-f]*' | sort -u | wc -l) == 2)) ||
    fail "the republished $republished_key has the bytes it had"
[[ $(digest "lb:{res-0}:final:${days[2]}") == "$week_before" ]] || fail "the republication changed res-0's closed week"
verify "${oracle[@]}"
same_as_oracle res-0 "$w0"
ok "replay --republish of res-0 $w0: killed, it left the day reopening (written, not closed), which the next run's plan named; run again while two replays frozen past their leases resumed (one while it ran, one after) and stopped, writing nothing, through two masters not answering (its reopened step, telling the pods: both asked again), the day was rebuilt from every event and published again, as the oracle ranks it"

# the same day left reopening by a killed --republish again, and not run
# again until its ttl had passed: its live key expired (staged with a
# configuration whose daily ttl is 2 h: the day ended days ago). It
# cannot be rebuilt: --republish puts it back published, as it closed (its
# final standings and record stand, nothing is published again), out of
# ~open, its note gone; the pods no longer try to close it
"$BIN/replay" --config "$T_DIR/projector.yaml" --board res-0 --window "$w0" --republish \
    --max-rate 200 >"$T_DIR/replay-killed2.out" 2>&1 &
replay_pid=$!
lb_wait_for 30 reopening || {
    kill -9 "$replay_pid" 2>/dev/null
    fail "replay --republish did not reopen res-0 $w0 again: $(tail -n 3 "$T_DIR/replay-killed2.out")"
}
kill -9 "$replay_pid" 2>/dev/null
wait "$replay_pid" 2>/dev/null || true
redis_cli "$(live_ports | first)" -c HSET "lb:{res-0}:~open" "$w0" 1 >/dev/null # a late event's listing
final_before=$(digest "lb:{res-0}:final:$w0")
dump_results
records=$(wc -l <"$T_DIR/results.dump")
sed 's/daily: {ttl: 30d,/daily: {ttl: 2h,/' "$T_DIR/projector.yaml" >"$T_DIR/expired.yaml"
grep -q 'ttl: 2h' "$T_DIR/expired.yaml" || fail "no daily ttl to shorten in projector.yaml"
"$BIN/replay" --config "$T_DIR/expired.yaml" --board res-0 --window "$w0" --republish \
    >"$T_DIR/replay-expired.out" 2>&1 ||
    fail "replay --republish of an expired day failed: $(tail -n 3 "$T_DIR/replay-expired.out")"
grep -q "board 'res-0' window '$w0' was left reopening and its live key expired" "$T_DIR/replay-expired.out" ||
    fail "replay did not say it put res-0 $w0 back: $(grep -m 3 "res-0" "$T_DIR/replay-expired.out")"
[[ $(final_state res-0 "$w0") == published ]] || fail "res-0 $w0 is $(final_state res-0 "$w0"), not published"
[[ $(redis_cli "$(live_ports | first)" -c HEXISTS "lb:{res-0}:~open" "$w0") == 0 ]] ||
    fail "res-0 $w0 is still listed in ~open"
[[ $(redis_cli "$(live_ports | first)" -c HLEN "lb:~replay-reopening") == 0 ]] ||
    fail "lb:~replay-reopening still names a window: $(redis_cli "$(live_ports | first)" -c HKEYS "lb:~replay-reopening")"
[[ $(digest "lb:{res-0}:final:$w0") == "$final_before" ]] || fail "the final standings of res-0 $w0 changed"
sleep 3 # a closer check or more
dump_results
(($(wc -l <"$T_DIR/results.dump") == records)) || fail "res-0 $w0 was published again"
ok "res-0 $w0 left reopening again, its ttl passed: replay --republish put it back published as it closed, out of ~open, nothing published again"

# The live day, gone with the short ttl, rebuilt as it closed for what
# follows, by two runs: the first swaps it in and freezes at its end, past
# its lease (3 s), before deleting its journal (LB_FAULT_FINISH_STOP); the
# second takes the lease, begins its journal and stops itself once it wrote
# a batch. The first, woken, deletes neither the second's journal (what an
# operator reads should the second die) nor its staging keys, and exits 0:
# its own work was done.
replay_until_stopped frozen-end LB_FAULT_LEASE_TTL_MS=3000 LB_FAULT_FINISH_STOP=1 -- \
    --board res-0 --window "$w0"
at_end=$rpid
lb_wait_for 10 lease_gone || fail "the replay frozen at its end kept its lease"
replay_until_stopped day LB_FAULT_READ_STOP=1 LB_FAULT_LEASE_TTL_MS=120000 -- \
    --board res-0 --window "$w0"
day_run=$rpid
journal_of "$day_run" || fail "the second replay of res-0 $w0 began no journal"
day_prefix=$(staging_of "$T_DIR/replay-day.out")
staged=$(staged_under "$day_prefix")
((staged > 0)) || fail "the second replay of res-0 $w0 staged nothing under '$day_prefix'"
wake_exits "$at_end" 0 "the replay frozen at its end" "$T_DIR/replay-frozen-end.out"
journal_of "$day_run" || fail "the replay frozen at its end deleted the later run's journal"
lease_of "$day_run" || fail "the replay frozen at its end took or gave back the later run's lease"
(($(staged_under "$day_prefix") == staged)) ||
    fail "the replay frozen at its end deleted $((staged - $(staged_under "$day_prefix"))) of the later run's $staged staging key(s)"
grep -q "^replay: lb:~replay-journal not updated: it is a later run's" "$T_DIR/replay-frozen-end.out" ||
    fail "the replay frozen at its end did not say it left the journal: $(tail -n 3 "$T_DIR/replay-frozen-end.out")"
kill -CONT "$day_run"
wait "$day_run" || fail "replay --board res-0 --window $w0 failed: $(tail -n 3 "$T_DIR/replay-day.out")"
[[ $(redis_cli "$(live_ports | first)" -c EXISTS "lb:~replay-journal") == 0 ]] ||
    fail "the journal outlived the run that finished last"
verify "${oracle[@]}"
ok "res-0 $w0 rebuilt by a replay woken at its end, past its lease, beside a later run: it left that run's journal, lease and staging keys alone"

# A replay --republish of the day frozen between its lease's renewal and its
# reopen step (LB_FAULT_STEP_STOP=reopen), past its lease; another
# --republish of the day meanwhile reopens, rebuilds and hands it back, and
# a pod publishes it again. Woken, the first reopens nothing: its step finds
# the later run's mark in ~final (e:<window>) and it stops (exit 1). Without
# that, the day would stay reopening, published by no pod.
replay_until_stopped frozen-step LB_FAULT_LEASE_TTL_MS=3000 LB_FAULT_STEP_STOP=reopen -- \
    --board res-0 --window "$w0" --republish
at_step=$rpid
lb_wait_for 10 lease_gone || fail "the replay frozen at its reopen step kept its lease"
"$BIN/replay" --config "$T_DIR/projector.yaml" --board res-0 --window "$w0" --republish \
    >"$T_DIR/replay-republish2.out" 2>&1 ||
    fail "the second replay --republish of res-0 $w0 failed: $(tail -n 3 "$T_DIR/replay-republish2.out")"
lb_wait_for 20 republished || fail "res-0 $w0 was not published again: $(final_state res-0 "$w0")"
dump_results
records=$(wc -l <"$T_DIR/results.dump")
wake_exits "$at_step" 1 "the replay frozen at its reopen step" "$T_DIR/replay-frozen-step.out"
[[ $(final_state res-0 "$w0") == published ]] ||
    fail "the replay frozen at its reopen step left res-0 $w0 $(final_state res-0 "$w0"), not published"
[[ $(redis_cli "$(live_ports | first)" -c HEXISTS "lb:{res-0}:~open" "$w0") == 0 ]] ||
    fail "the replay frozen at its reopen step listed res-0 $w0 in ~open"
[[ $(redis_cli "$(live_ports | first)" -c HLEN "lb:~replay-reopening") == 0 ]] ||
    fail "lb:~replay-reopening names a window: $(redis_cli "$(live_ports | first)" -c HKEYS "lb:~replay-reopening")"
step_prefix=$(staging_of "$T_DIR/replay-frozen-step.out")
[[ -n $step_prefix ]] || fail "the replay frozen at its reopen step named no staging prefix"
(($(staged_under "$step_prefix") == 0)) ||
    fail "the replay frozen at its reopen step wrote $(staged_under "$step_prefix") staging key(s) under $step_prefix once woken"
grep -q "^replay: board 'res-0' window '$w0': reopen: not done, a later replay run reopened it" \
    "$T_DIR/replay-frozen-step.out" ||
    fail "the replay frozen at its reopen step did not name the later run: $(tail -n 3 "$T_DIR/replay-frozen-step.out")"
grep -q "^replay: the replay lease lb:~replay-lease went to another run while this one was stalled; stopping" \
    "$T_DIR/replay-frozen-step.out" ||
    fail "the replay frozen at its reopen step did not stop on the lost lease: $(tail -n 3 "$T_DIR/replay-frozen-step.out")"
sleep 3 # a closer check or more
dump_results
(($(wc -l <"$T_DIR/results.dump") == records)) || fail "res-0 $w0 was published again after the frozen run woke"
verify "${oracle[@]}"
ok "replay --republish of res-0 $w0 woken at its reopen step, past its lease, after a later --republish handed the day back: it reopened nothing and stopped"

# 3. pods killed between the claim and the acknowledgement: c after it
#    produced a window's record and before the broker acknowledged it (the
#    record may or may not have reached the broker); c2 after the broker
#    acknowledged another window's record and before it marked it
#    published. Both windows stay claimed; the next pod publishes them again
#    once their leases (results.lease, 10 s here) ran out, with the same bytes
stop_projector "$pod_a"
crash_pod() { # NAME FAULT SEED: a pod started with FAULT=1 until it exits
    start_projector "$1" "$T_DIR/projector.yaml" "$2=1"
    local pid=$PROJECTOR_PID
    produce -n 3000 --seed "$3" --boards 3 --board-prefix res- --players 300 --score-max 500 --days 1
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && fail "pod $1 ($2) published nothing in 60 s"
    wait "$pid" 2>/dev/null || true
}
crashed_on() { # NAME WORD: the board and window the pod's fault line names
    grep -o "board '[^']*' window '[^']*' $2" "$T_DIR/$1.log" | head -n 1 |
        sed "s/board '\([^']*\)' window '\([^']*\)'.*/\1 \2/"
}
crash_pod c LB_FAULT_CRASH_BEFORE_ACK 503
read -r ab aw <<<"$(crashed_on c claimed)"
[[ -n $aw && $(final_state "$ab" "$aw") == claimed ]] ||
    fail "no window left claimed by the kill before the acknowledgement ($ab $aw)"
# its lease runs results.lease (10 s here) from the claim, not the default 30 s
port=$(live_ports | first)
until_ms=$(redis_cli "$port" -c HGET "lb:{$ab}:~final" "u:$aw")
now_ms=$(redis_cli "$port" TIME | awk 'NR == 1 { s = $1 } NR == 2 { printf "%.0f", s * 1000 + int($1 / 1000) }')
((until_ms - now_ms <= 10000)) ||
    fail "the claim of {$ab}:$aw holds its lease $((until_ms - now_ms)) ms more: not results.lease (10 s)"
crash_pod c2 LB_FAULT_CRASH_BEFORE_DONE 504
read -r cb cw <<<"$(crashed_on c2 acknowledged)"
[[ -n $cw && $(final_state "$cb" "$cw") == claimed ]] ||
    fail "no window left claimed by the kill after the acknowledgement ($cb $cw)"
start_projector d "$T_DIR/projector.yaml"
pod_d=$PROJECTOR_PID
wait_caught_up 120
before=("${days[@]}")
until=$(close_watermark)
mapfile -t days < <(closed_windows "$until")
# (the events of the last day were produced around now: their day closed)
lb_wait_for 90 all_published ||
    fail "not every closed window was published after the kills: ${days[*]} (watermark $until)
$(unpublished)"
dump_results
# the windows the killed pods claimed were published again, with the same
# bytes; those published before were not touched
again=0
for b in res-0 res-1 res-2; do
    for w in "${days[@]}"; do
        copies=$(grep -c " key={$b}:$w " "$T_DIR/results.dump" || true)
        [[ "{$b}:$w" == "$republished_key" ]] && continue # two publications (step 2)
        shas=$(grep " key={$b}:$w " "$T_DIR/results.dump" | grep -o 'sha256=[0-9a-f]*' | sort -u)
        ((copies >= 1 && $(wc -l <<<"$shas") == 1)) ||
            fail "the records of {$b}:$w are not one set of bytes: $copies, $shas"
        if [[ " ${before[*]} " == *" $w "* ]]; then
            ((copies == 1)) || fail "{$b}:$w, published before, is in the results topic $copies times"
        fi
        again=$((again + copies - 1))
    done
done
(($(grep -c " key={$cb}:$cw " "$T_DIR/results.dump") >= 2)) ||
    fail "{$cb}:$cw, acknowledged before the kill, was not published again"
verify "${oracle[@]}"
ok "killed before the acknowledgement of {$ab}:$aw and after that of {$cb}:$cw: the next pod published both claims again ($again record(s) twice), byte-identical"

stop_projector "$pod_d"

# 5. the shard holding res-0 is lost (its master and replicas killed, their
#    data deleted) while every pod is down; a new, empty node takes its
#    place by the runbook's procedure (replay --node). The results topic is
#    the record of what closed: replay puts res-0's closed windows back as
#    they closed (~final, the final standings), rebuilds each closed window
#    from the events before its close offsets only, and publishes nothing.
#    A pod started after it does not close them again, and late events
#    still change nothing there.
lost_port=$(master_of_key "lb:{res-0}:~final")
[[ -n $lost_port ]] || fail "no master holds lb:{res-0}:~final"
final_of() { # BOARD WINDOW: ~final's fields of a closed window, and its final key
    redis_cli "$(live_ports | first)" -c HMGET "lb:{$1}:~final" "s:$2" "c:$2" "n:$2" "o:$2"
    digest "lb:{$1}:final:$2"
}
state_of() { # res-0's closed windows as they are: final_of, and the window
    local w
    for w in "${days[@]}"; do
        final_of res-0 "$w"
        digest "lb:{res-0}:$w"
    done
}
state_of >"$T_DIR/res-0.before"
dump_results
records=$(wc -l <"$T_DIR/results.dump")
lose_shard "$lost_port"
replace_shard 5 "$T_DIR/projector.yaml"
grep -Eq "replay: [1-9][0-9]* closed window\(s\) put back from results topic scores-results" \
    "$T_DIR/procedure-5.out" || fail "replay put no closed window back from the results topic"
state_of >"$T_DIR/res-0.after"
diff "$T_DIR/res-0.before" "$T_DIR/res-0.after" >"$T_DIR/res-0.diff" ||
    fail "res-0's closed windows did not come back as they closed:
$(head -n 12 "$T_DIR/res-0.diff")"
start_projector e "$T_DIR/projector.yaml"
produce -n 300 --seed 505 --boards 3 --board-prefix res- --players 300 --score-max 100000 \
    --start "$START" --days 1
wait_caught_up 120
sleep 3 # a closer check or more: it would have closed them again by now
state_of >"$T_DIR/res-0.later"
diff "$T_DIR/res-0.before" "$T_DIR/res-0.later" >"$T_DIR/res-0.diff" ||
    fail "after the loss, a pod changed res-0's closed windows:
$(head -n 12 "$T_DIR/res-0.diff")"
dump_results
(($(wc -l <"$T_DIR/results.dump") == records)) ||
    fail "after the loss, $(($(wc -l <"$T_DIR/results.dump") - records)) record(s) were published again"
verify "${oracle[@]}"
ok "res-0's shard lost and replaced empty: its closed windows put back from the results topic as they closed, nothing published again, late events still left out"

# 5b. a master restarted empty (FLUSHALL, its replica follows) under the
#     running pod: late events into res-1's first closed day reach the
#     closer first. It puts the day back from the results topic (~final and
#     the final standings as they were) instead of closing it again, and
#     publishes nothing; replay --node (the runbook's row for it) then
#     rebuilds everything the node held, closed days as they closed.
flushed_port=$(master_of_key "lb:{res-1}:~final")
[[ -n $flushed_port ]] || fail "no master holds lb:{res-1}:~final"
final_of res-1 "${days[0]}" >"$T_DIR/res-1.before"
redis_cli "$flushed_port" FLUSHALL >/dev/null
produce -n 300 --seed 506 --boards 3 --board-prefix res- --players 300 --score-max 100000 \
    --start "$START" --days 1
wait_caught_up 120
put_back() {
    final_of res-1 "${days[0]}" >"$T_DIR/res-1.after"
    cmp -s "$T_DIR/res-1.before" "$T_DIR/res-1.after"
}
lb_wait_for 30 put_back || fail "the pod did not put res-1's closed day back as it closed:
$(diff "$T_DIR/res-1.before" "$T_DIR/res-1.after" | head -n 12)"
restored_some() { # the page is rendered every second
    curl -sf "$METRICS_URL/metrics" |
        awk '$1 == "lb_results_windows_total{result=\"restored\"}" && $2 >= 1 { f = 1 } END { exit !f }'
}
lb_wait_for 5 restored_some || fail "lb_results_windows_total{result=\"restored\"} did not count it"
dump_results
(($(wc -l <"$T_DIR/results.dump") == records)) ||
    fail "after the flush, $(($(wc -l <"$T_DIR/results.dump") - records)) record(s) were published again"
"$BIN/replay" --config "$T_DIR/projector.yaml" --node "127.0.0.1:$flushed_port" \
    >"$T_DIR/replay-flushed.out" 2>&1 || fail "replay --node failed: $(tail -n 3 "$T_DIR/replay-flushed.out")"
verify "${oracle[@]}"
stop_projector "$PROJECTOR_PID"
ok "a master restarted empty under a running pod: the pod put res-1's closed day back from the results topic, published nothing, and replay --node made every board exact"

# 3b. late events while the dead-letter topic cannot be written (a pod whose
#     dlq_topic does not exist yet). A late event counts for the windows
#     still open: the apply script writes it there, leaves its closed day
#     out (window_closed) and moves the markers past it. Its partition holds
#     at it (its copy is not in the topic) and is read again; the script
#     then skips it and does not reject it again, yet its copy is still not
#     there: the partition stays held until the topic exists, and then every
#     late event is dead-lettered
DLQ_TOPIC=scores-dlq-late write_config "$T_DIR/dlq-late.yaml" "$profiles"
held_at=$(committed_offsets)
produce -n 200 --seed 530 --boards 3 --board-prefix res- --players 300 --score-max 100000 \
    --start "$START" --days 2
start_projector dlq-late "$T_DIR/dlq-late.yaml"
wait_log "$T_DIR/dlq-late.log" 'held at offset [0-9]* (dlq)' 30
sleep 6 # read again several times (100 ms, doubling): each time skipped by the script
[[ $(committed_offsets | awk '{ print $1, $2 }') == "$(awk '{ print $1, $2 }' <<<"$held_at")" ]] ||
    fail "with the dead-letter topic missing, commits passed late events:
before: $(tr '\n' ' ' <<<"$held_at")
now:    $(committed_offsets | tr '\n' ' ')"
"$BIN/lbadmin" create-topic --brokers "$BROKERS" "${KAFKA_X[@]}" --topic scores-dlq-late \
    --partitions 1 >>"$T_DIR/lbadmin.log" 2>&1 || fail "cannot create scores-dlq-late"
wait_caught_up 120
"$BIN/lbadmin" dump --brokers "$BROKERS" "${KAFKA_X[@]}" --topic scores-dlq-late --timeout 20 \
    >"$T_DIR/dlq-late.dump" 2>>"$T_DIR/lbadmin.log" || fail "cannot read scores-dlq-late"
want=$(grep -c '^e530-' "$T_DIR/events.tsv")
got=$(grep ' lb.reason=window_closed ' "$T_DIR/dlq-late.dump" |
    grep -o 'lb\.source\.partition=[0-9]* lb\.source\.offset=[0-9]*' | sort -u | wc -l)
((got == want)) || fail "$got of the $want late events are in scores-dlq-late"
stop_projector "$PROJECTOR_PID"
verify "${oracle[@]}"
ok "late events with the dead-letter topic missing: their partitions held, read again (the script skipping them) and still held; once it existed all $want were dead-lettered"

# 4. idle partitions (topic idle, 4 partitions, its own group and key
#    prefix): the first day on partitions 0 to 2, the next two days on 0 and
#    1 only. Partition 2 falls idle (caught up, its watermark days behind the
#    others'), partition 3 never has an event: both count as the topic's
#    highest watermark, and the first two days close. Without that rule the
#    lowest watermark (partition 2's, inside the first day) closes nothing.
#    The pod starts before its results topic exists: it says so and closes
#    nothing until the topic is created.
"$BIN/lbadmin" create-topic --brokers "$BROKERS" "${KAFKA_X[@]}" --topic idle --partitions 4 \
    >>"$T_DIR/lbadmin.log" 2>&1 || fail "cannot create the idle topic"
export GROUP=lb-idle RESULTS_TOPIC=idle-results
write_config "$T_DIR/idle.yaml" "${profiles/scores-results/idle-results}" "  key_prefix: \"idle:\""
sed -i 's/topics: \[scores\]/topics: [idle]/' "$T_DIR/idle.yaml"
mv "$T_DIR/events.tsv" "$T_DIR/events-scores.tsv" # verified above; the oracle reads idle's alone
mv "$T_DIR/delivered.tsv" "$T_DIR/delivered-scores.tsv"
idle_gen=(-t idle --boards 2 --board-prefix res-i --players 100 --score-max 500)
for p in 0 1 2; do
    produce "${idle_gen[@]}" --partition "$p" -n 300 --seed "$((510 + p))" --start "$START" --days 1
done
for p in 0 1; do
    produce "${idle_gen[@]}" --partition "$p" -n 600 --seed "$((520 + p))" --days 2 \
        --start "$(date -u -d "$START + 1 day" +%Y-%m-%dT%H:%M:%SZ)"
done
# (nothing read yet: wait-caught-up gives up naming each partition's lag)
status=0
"$BIN/lbadmin" wait-caught-up --brokers "$BROKERS" "${KAFKA_X[@]}" --topic idle --group lb-idle \
    --timeout 1 >"$T_DIR/lags.out" 2>&1 || status=$?
{ ((status == 1)) && grep -q "still lags 2100 events on idle after 1 s (by partition: 0: 900, 1: 900, 2: 300)" \
    "$T_DIR/lags.out"; } || fail "wait-caught-up (exit $status): $(cat "$T_DIR/lags.out")"
start_projector idle "$T_DIR/idle.yaml"
"$BIN/lbadmin" wait-caught-up --brokers "$BROKERS" "${KAFKA_X[@]}" --topic idle --group lb-idle \
    --timeout 120 >>"$T_DIR/lbadmin.log" 2>&1 || fail "group lb-idle did not catch up"
idle_days=("$(date -u -d "$START" +daily:%Y-%m-%d)" "$(date -u -d "$START + 1 day" +daily:%Y-%m-%d)")
missing="results topic idle-results does not exist: create it (lbadmin create-topic, with cleanup.policy=compact); no window closes until it is"
lb_wait_for 30 grep -qF "$missing" "$T_DIR/idle.log" ||
    fail "the pod did not say that its results topic is missing: $(grep -m 2 'results' "$T_DIR/idle.log")"
sleep 4 # two closer checks (2 s) at least, caught up: the days would have closed by now
for b in res-i0 res-i1; do
    [[ -z $(redis_cli "$(live_ports | first)" -c HKEYS "idle:{$b}:~final") ]] ||
        fail "$b closed windows without a results topic: $(redis_cli "$(live_ports | first)" -c HGETALL "idle:{$b}:~final" | head -n 4 | tr '\n' ' ')"
done
ok "the pod started without its results topic: it said so ($missing) and closed nothing"
# its results go to a topic that takes records of 9000 bytes at most; a
# week's "all" comes in numbered parts
"$BIN/lbadmin" create-topic --brokers "$BROKERS" "${KAFKA_X[@]}" --topic idle-results \
    --partitions 1 --config max.message.bytes=9000 >>"$T_DIR/lbadmin.log" 2>&1 ||
    fail "cannot create the idle-results topic"
idle_published() {
    local b w
    for b in res-i0 res-i1; do
        for w in "${idle_days[@]}"; do
            [[ $(redis_cli "$(live_ports | first)" -c HGET "idle:{$b}:~final" "s:$w") == published ]] ||
                return 1
        done
    done
}
lb_wait_for 30 idle_published || fail "with partitions 2 and 3 idle, ${idle_days[*]} did not close:
$(redis_cli "$(live_ports | first)" -c HGETALL "idle:{res-i0}:~open" | tr '\n' ' ')"
[[ -z $(redis_cli "$(live_ports | first)" -c HGET "idle:{res-i0}:~final" \
    "s:$(date -u -d "$START + 2 days" +daily:%Y-%m-%d)") ]] || fail "the last day closed too"
verify "${oracle[@]}" --prefix idle: --topic idle
same_as_oracle res-i0 "${idle_days[1]}" --prefix idle: --topic idle
ok "partition 2 idle and partition 3 empty: ${idle_days[*]} closed and published, as the oracle ranks them"
week=$(date -u -d "$START" +weekly:%G-W%V)
week_published() {
    [[ $(redis_cli "$(live_ports | first)" -c HGET "idle:{res-i0}:~final" "s:$week") == published ]]
}
lb_wait_for 30 week_published || fail "res-i0 $week was not published"
same_as_oracle res-i0 "$week" --prefix idle: --topic idle
parts=$(sed -n 's/.* parts \([0-9]*\) .*/\1/p' "$T_DIR/published.out")
((parts >= 2)) || fail "res-i0 $week (all, records of at most 9000 bytes) came in ${parts:-no} part(s)"
ok "res-i0 $week, all of it, in $parts parts of records that fit idle-results, ranked across them as the oracle ranks them"
stop_projector "$PROJECTOR_PID"
# a top of 100 cannot fit one record of idle-results: it stops the start
# (file:line); top 20 fits
sed 's/top: 20,/top: 100,/' "$T_DIR/idle.yaml" >"$T_DIR/too-big.yaml"
status=0
timeout 60 "$BIN/projector" --config "$T_DIR/too-big.yaml" >"$T_DIR/too-big.log" 2>&1 || status=$?
line=$(grep -n 'top: 100,' "$T_DIR/too-big.yaml" | cut -d: -f1)
refused="too-big.yaml:$line: results.top 100: one record of it can take [0-9]* bytes, more than topic idle-results takes (max.message.bytes 9000"
{ ((status == 3)) && grep -q "$refused" "$T_DIR/too-big.log"; } ||
    fail "a top too large for its topic's records did not stop the start with file:line (exit $status): $(grep -m 1 'level=error' "$T_DIR/too-big.log")"
ok "a top of 100 that cannot fit a record of idle-results stopped the start: $(grep -o 'too-big.yaml:[0-9]*: results.top 100: one record of it can take [0-9]* bytes' "$T_DIR/too-big.log")"

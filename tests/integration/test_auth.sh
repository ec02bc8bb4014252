#!/usr/bin/env bash
# A cluster that requires an ACL user and password: the projector
# authenticates every connection (redirection targets included) and
# projects normally; with a wrong password it commits nothing, says why, and
# neither password ever appears in its logs or in --check-config. Then least
# privilege: the projector, replay and lbread under exactly the users of
# ops/deploy/redis-acl.conf (every aggregation, dedupe, retractions, the
# plain transaction, final standings closed and published, a lost board
# rebuilt, a board with closed days replayed, all verified), and, for each
# command of the projector's rule, a run with that one command taken away
# (ACL SETUSER on every node, replicas included) fails with NOPERM naming it
# (ASKING with a slot staged as migrating, where the projector meets ASK).
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REDIS_USER=lb-admin # the ACL file's users come in part 3
REDIS_PASSWORD=pw-$RANDOM$RANDOM-right
export REDIS_USER REDIS_PASSWORD LB_TEST_WRONG_PASSWORD=pw-$RANDOM$RANDOM-wrong
export REDIS_ACL_FILE=$repo/ops/deploy/redis-acl.conf REDIS_ACL_PASSWORD=acl-$RANDOM$RANDOM
start_services
# shellcheck disable=SC2016 # ${...} is for the projector's configuration
write_config "$T_DIR/projector.yaml" "" '  user: lb-admin
  password: ${REDIS_PASSWORD}'
# shellcheck disable=SC2016
GROUP=lb-wrong write_config "$T_DIR/wrong.yaml" "" '  user: lb-admin
  password: ${LB_TEST_WRONG_PASSWORD}'

produce -n 20000 --seed 71 --boards 10 --players 1000 --start "$START" --days 3
start_projector projector "$T_DIR/projector.yaml"
wait_caught_up 60
verify
assert_committed_at_end
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"
ok "authenticated as lb-admin on every node"

start_projector wrong "$T_DIR/wrong.yaml"
sleep 6
GROUP=lb-wrong committed_offsets | awk '$2 != "-" { exit 1 }' ||
    fail "offsets were committed without access to Redis"
grep -q "WRONGPASS" "$T_DIR/wrong.log" || fail "the AUTH failure is not logged"
stop_projector "$PROJECTOR_PID"
"$BIN/projector" --check-config "$T_DIR/projector.yaml" >"$T_DIR/check-config.log" 2>&1 ||
    fail "--check-config refused a valid configuration"
for f in "$T_DIR"/projector.log "$T_DIR"/wrong.log "$T_DIR"/check-config.log; do
    if grep -q -e "$REDIS_PASSWORD" -e "$LB_TEST_WRONG_PASSWORD" "$f"; then
        fail "a password appears in $(basename "$f")"
    fi
done
ok "wrong password: nothing committed, WRONGPASS logged, no password in any log"

# 3. least privilege: the rules of ops/deploy/redis-acl.conf, exactly
pick_metrics_port # the readiness probe (PING) is part of the rule
# res-* boards publish final standings (lib.sh's MODE_RESULTS) to acl-results
MODE_RESULTS=${MODE_RESULTS/scores-results/acl-results}
acl_oracle=("${MODE_ORACLE[@]}" "${MODE_RESULTS_ORACLE[@]}" --topic acl)
acl_config() { # FILE USER [GROUP]
    # shellcheck disable=SC2016 # ${...} is for the projector's configuration
    GROUP=${3:-lb-acl} DRAIN_TIMEOUT=1s write_config "$1" "$MODE_PROFILES$MODE_RESULTS
$METRICS_YAML" "  user: $2
  password: \${REDIS_ACL_PASSWORD}"
}
acl_config "$T_DIR/acl.yaml" projector
acl_config "$T_DIR/replay.yaml" replay
acl_config "$T_DIR/reader.yaml" reader
export GROUP=lb-acl
: >"$T_DIR/events.tsv" # the oracle's events: this group's, from here on
: >"$T_DIR/delivered.tsv"
for t in acl acl-results; do
    "$BIN/lbadmin" create-topic --brokers "$BROKERS" --topic "$t" --partitions 3 \
        >>"$T_DIR/lbadmin.log" 2>&1 || fail "cannot create the $t topic"
done
sed -i 's/topics: \[scores\]/topics: [acl]/' "$T_DIR/acl.yaml" "$T_DIR/replay.yaml"
acl_produce() { produce -t acl "${MODE_GEN[@]}" "$@"; }
acl_offsets() {
    "$BIN/lbadmin" offsets --brokers "$BROKERS" --topic acl --group lb-acl | awk '$1 == "acl"'
}
acl_caught_up() {
    "$BIN/lbadmin" wait-caught-up --brokers "$BROKERS" --topic acl --group lb-acl --timeout "$1" \
        >>"$T_DIR/lbadmin.log" 2>&1 || fail "group lb-acl did not catch up within $1 s"
}
for p in $(slot_masters); do # the old keys belong to the first part's boards
    redis_cli "$p" FLUSHALL >/dev/null
done
acl_produce -n 6000 --seed 81
acl_produce -n 900 --seed 80 --boards 3 --board-prefix res-
start_projector acl "$T_DIR/acl.yaml"
acl_caught_up 90
first_day=$(date -u -d "$START" +daily:%Y-%m-%d)
lb_wait_for 30 window_published res-0 "$first_day" || fail "res-0 $first_day was not published"
verify "${acl_oracle[@]}"
grep -q "^verify_state: [1-9][0-9]* closed windows checked" "$T_DIR/verify.out" ||
    fail "no closed window under the rule: $(head -n 1 "$T_DIR/verify.out")"
stop_projector "$PROJECTOR_PID"
grep -qi noperm "$T_DIR/acl.log" && fail "NOPERM under the projector's rule: $(grep -i -m 1 noperm "$T_DIR/acl.log")"
ok "the projector under its least-privilege rule: every mode exact, final standings published, no NOPERM"

lost=sum-3
rebuild_board "$T_DIR/replay.yaml" "$lost" "${acl_oracle[@]}"
# a board with closed days: replay reads their close offsets in ~final
"$BIN/replay" --config "$T_DIR/replay.yaml" --board res-1 >"$T_DIR/replay-res.out" 2>&1 ||
    fail "replay --board res-1 under its rule failed: $(tail -n 3 "$T_DIR/replay-res.out")"
verify "${acl_oracle[@]}"
"$BIN/replay" --config "$T_DIR/replay.yaml" --slots 0-16383 --verify >"$T_DIR/verify.out" 2>&1 ||
    fail "replay --verify under its rule failed: $(tail -n 3 "$T_DIR/verify.out")"
grep -q ' 0 differing' "$T_DIR/verify.out" || fail "replay --verify found differences"
"$BIN/lbread" --config "$T_DIR/reader.yaml" --board "$lost" --top 5 >"$T_DIR/lbread.out" 2>&1 ||
    fail "lbread under its rule failed: $(tail -n 3 "$T_DIR/lbread.out")"
grep -q "lb:{$lost}:alltime" "$T_DIR/lbread.out" || fail "lbread printed no window"
"$BIN/lbread" --config "$T_DIR/reader.yaml" --board "$lost" --window alltime --top 5 \
    >"$T_DIR/lbread-window.out" 2>&1 ||
    fail "lbread --window under its rule failed: $(tail -n 3 "$T_DIR/lbread-window.out")"
grep -q "lb:{$lost}:alltime" "$T_DIR/lbread-window.out" || fail "lbread --window printed no window"
"$BIN/lbread" --config "$T_DIR/reader.yaml" --board top-16 --window decayed --top 5 \
    >"$T_DIR/lbread-decayed.out" 2>&1 ||
    fail "lbread of an overall board under its rule failed: $(tail -n 3 "$T_DIR/lbread-decayed.out")"
grep -q "after tax" "$T_DIR/lbread-decayed.out" || fail "lbread printed no after-tax scores"
"$BIN/lbread" --config "$T_DIR/reader.yaml" --board res-1 --window "$first_day" --final --top 3 \
    >"$T_DIR/lbread-final.out" 2>&1 ||
    fail "lbread --final under its rule failed: $(tail -n 3 "$T_DIR/lbread-final.out")"
grep -q "published" "$T_DIR/lbread-final.out" || fail "lbread --final: $(head -n 1 "$T_DIR/lbread-final.out")"
ok "replay (a lost board, a board with closed days, then --verify) and lbread (all windows, --window, an overall board, --final) under their rules"

# each command of the projector's rule is needed: taken away, a run fails
# with NOPERM naming it (the events it could not write are written after)
acl_setuser() { # RULE...
    local p
    for p in $(live_ports); do
        redis_cli "$p" ACL SETUSER projector "$@" >/dev/null || fail "ACL SETUSER $* on $p"
    done
}
rule=$(grep '^user projector ' "$REDIS_ACL_FILE")
mapfile -t commands < <(tr ' ' '\n' <<<"$rule" | sed -n 's/^+//p' | grep -vx asking)
((${#commands[@]} >= 20)) || fail "only ${#commands[@]} commands in the projector's rule"
sweeps() { curl -sf "$METRICS_URL/metrics" | awk '$1 == "lb_results_sweeps_total" { print $2 }'; }
sweeps_over() { # the pod's first sweep of every master has completed
    local n
    n=$(sweeps)
    ((${n:-0} > 0))
}
seed=100
published_again=()
for cmd in "${commands[@]}"; do
    seed=$((seed + 1))
    acl_setuser "-$cmd"
    if [[ $cmd == script\|load ]]; then # only sent to a node without the script
        for p in $(live_ports); do
            redis_cli "$p" SCRIPT FLUSH >/dev/null
        done
    fi
    more=() # RENAME: a rebuild ends with it, and a new patch starts one
    [[ $cmd == rename ]] && more=(--dim-values 5)
    [[ $cmd == pexpiretime ]] && more=(--board-prefix spl-) # split boards' merged tops
    case $cmd in # final standings: new boards, whose days the watermark passed close at once
        hgetall | del | zcard | zrangestore | hsetnx | hget | hkeys)
            more=(--board-prefix "res-$seed-" --boards 2)
            ;;
    esac
    acl_produce -n 400 --seed "$seed" "${more[@]}"
    start_projector "acl-$seed" "$T_DIR/acl.yaml"
    deadline=$((SECONDS + 30))
    until grep -i noperm "$T_DIR/acl-$seed.log" 2>/dev/null | grep -iF "'$cmd'" >/dev/null; do
        ((SECONDS < deadline)) ||
            fail "without +$cmd no NOPERM naming it: $(grep -i -m 2 'noperm\|error' "$T_DIR/acl-$seed.log")"
        sleep 0.2
    done
    if [[ $cmd == pexpiretime ]]; then
        # the merged tops it could not refresh: done once PEXPIRETIME is allowed
        # again (tried every 100 ms, and at shutdown)
        acl_setuser "+$cmd"
        sleep 3
    fi
    if [[ $cmd == hgetall || $cmd == del || $cmd == hsetnx || $cmd == hkeys ]]; then
        # the closer's refused read (HGETALL), claim (DEL: the day still in
        # ~open), keep (HSETNX: claimed by this pod) or done (HKEYS: its
        # records sent) is tried again: allowed again, the same pod
        # publishes the day it could not
        # (the pod's first sweep reads every board's ~open and ~final and
        # would find the day again: the refusal outlasts it)
        lb_wait_for 30 sweeps_over || fail "the pod's first sweep did not complete"
        if [[ $cmd == hsetnx || $cmd == hkeys ]]; then # refused after the claim
            lb_wait_for 30 window_claimed "res-$seed-0" "$first_day" ||
                fail "without +$cmd res-$seed-0 $first_day was not claimed: $(final_state "res-$seed-0" "$first_day")"
        fi
        sleep 2
        ! window_published "res-$seed-0" "$first_day" ||
            fail "without +$cmd res-$seed-0 $first_day was published: the retry is not tested"
        if [[ $cmd == hsetnx ]]; then
            # the failing board's ~final is read again at each check (2 s),
            # not every board's: res-0, with nothing to close, stays unread
            # (but by a sweep, once a minute: then watched again)
            for _ in 1 2; do
                before=$(sweeps)
                sleep 5
                idle=$(redis_cli "$(live_ports | first)" -c OBJECT IDLETIME "lb:{res-0}:~final")
                [[ $(sweeps) == "$before" ]] && break
            done
            [[ $idle =~ ^[0-9]+$ ]] || fail "no ~final of res-0 to watch: OBJECT IDLETIME answered '$idle'"
            ((idle >= 4)) ||
                fail "without +$cmd the ~final of res-0 (nothing to close) was read ${idle} s ago: read again at each check"
        fi
        acl_setuser "+$cmd"
        lb_wait_for 30 window_published "res-$seed-0" "$first_day" ||
            fail "allowed +$cmd again, the pod did not publish res-$seed-0 $first_day: $(final_state "res-$seed-0" "$first_day")"
        # once: a refused "done" is tried again alone, its records not sent again
        "$BIN/lbadmin" dump --brokers "$BROKERS" --topic acl-results --timeout 20 \
            >"$T_DIR/acl-results.dump" 2>>"$T_DIR/lbadmin.log" || fail "cannot read acl-results"
        copies=$(grep -c " key={res-$seed-0}:$first_day " "$T_DIR/acl-results.dump" || true)
        ((copies == 1)) ||
            fail "allowed +$cmd again, res-$seed-0 $first_day was published in $copies records, not 1"
        published_again+=("$cmd")
    fi
    stop_projector "$PROJECTOR_PID"
    acl_setuser "+$cmd"
done
((${#published_again[@]} == 4)) || fail "the closer's steps tried again: only ${published_again[*]}"
ok "each of the ${#commands[@]} commands of the projector's rule but ASKING is needed: without it, NOPERM naming it; the closer's (${published_again[*]}) allowed again, the same pod published the day, in one record"

# ASKING: a new board's slot is migrating (MIGRATING on its master,
# IMPORTING on another, no key moved yet), so the projector's writes meet ASK
# and are sent to the importing node after ASKING. Without +asking: NOPERM
# naming it. With it, the importing node accepts ASKING and answers TRYAGAIN
# (a multi-key request for keys it does not have yet): the projector holds
# until the migration completes, then writes the board there.
probe=sum-ask0
port=$(slot_masters | first)
slot=$(redis_cli "$port" CLUSTER KEYSLOT "{$probe}")
source_port='' target_port=''
for p in $(slot_masters); do
    if redis_cli "$p" CLUSTER NODES | awk -v s="$slot" '$3 ~ /myself/ {
            for (i = 9; i <= NF; i++) { n = split($i, r, "-"); if ($i !~ /^\[/ && s >= r[1] && s <= r[n]) f = 1 } }
            END { exit !f }'; then
        source_port=$p
    else
        target_port=$p
    fi
done
[[ -n $source_port && -n $target_port ]] || fail "no owner of slot $slot, or no other master"
# the slot must be the probe's alone: no key of MODE_GEN's boards (their
# shards and merged tops included) in it, only the slot's ~intact mark (a
# key every slot holds: README "Final standings")
slot_keys() { # PORT: the keys of the slot it holds, but the mark
    redis_cli "$1" CLUSTER GETKEYSINSLOT "$slot" 100000 | grep -v '^lb:~intact{' || true
}
[[ -z $(slot_keys "$source_port") ]] ||
    fail "slot $slot of $probe already holds keys of other boards: pick another probe"
source_id=$(redis_cli "$source_port" CLUSTER MYID)
target_id=$(redis_cli "$target_port" CLUSTER MYID)
redis_cli "$target_port" CLUSTER SETSLOT "$slot" IMPORTING "$source_id" >/dev/null
redis_cli "$source_port" CLUSTER SETSLOT "$slot" MIGRATING "$target_id" >/dev/null
acl_setuser -asking
produce -t acl --boards 1 --board-prefix sum-ask --players 50 --score-max 1000 --start "$START" \
    --days 3 --dim patch --dim-values 3 --retract-every 25 -n 300 --seed 200
start_projector acl-asking "$T_DIR/acl.yaml"
wait_log "$T_DIR/acl-asking.log" "NOPERM.*'asking'" 30
stop_projector "$PROJECTOR_PID"
acl_setuser +asking
[[ -z $(slot_keys "$target_port") ]] ||
    fail "keys of $probe were written to the importing node without ASKING"
start_projector acl-after "$T_DIR/acl.yaml"
wait_log "$T_DIR/acl-after.log" "board 'sum-ask0': 127.0.0.1:$target_port: TRYAGAIN" 30
[[ -z $(slot_keys "$target_port") ]] ||
    fail "the importing node took a part of $probe's request"
# the migration completes: the slot's keys (its mark) move, then the slot
mark=$(redis_cli "$source_port" CLUSTER GETKEYSINSLOT "$slot" 10 | grep '^lb:~intact{') ||
    fail "slot $slot has no ~intact mark on $source_port"
moved=$(redis_cli "$source_port" MIGRATE 127.0.0.1 "$target_port" "" 0 5000 \
    AUTH2 "$REDIS_USER" "$REDIS_PASSWORD" KEYS "$mark")
[[ $moved == OK ]] || fail "cannot MIGRATE $mark to $target_port: $moved"
for p in "$target_port" "$source_port" $(slot_masters); do
    redis_cli "$p" CLUSTER SETSLOT "$slot" NODE "$target_id" >/dev/null
done
acl_caught_up 90
[[ -n $(slot_keys "$target_port") ]] || fail "no key of $probe on the slot's new master"
[[ $(redis_cli "$source_port" CLUSTER COUNTKEYSINSLOT "$slot") == 0 ]] ||
    fail "keys of $probe were written to the slot's old master"
# still running: it finishes the rebuilds that the pods without RENAME,
# SCAN or TIME left (its sweep finds them; the oracle waits for them)
verify "${acl_oracle[@]}"
stop_projector "$PROJECTOR_PID"
ok "ASKING: without it NOPERM naming it; with it the importing node answers TRYAGAIN, the projector holds until the slot has moved; every board exact after"

#!/usr/bin/env bash
# Decaying boards (README "Decaying boards"): achievement boards, lower is
# better, the earliest submission wins a tie, runs submitted again and again
# (producer retries, equal scores in equal hours), kept per patch; the
# overall board ranks everyone by after-tax score (20% per patch behind,
# linear, at most 3 patches, hundredths). Patches are released in turn by
# the stream itself (1.8, 1.9, 1.10: versions, not text; then 2.0 and a late
# hotfix 1.9.1 that sorts between 1.9 and 1.10), projected by two pods in
# one group; one pod is SIGKILLed while it holds a rebuild, which the other
# finishes once the lease runs out; a lost board is rebuilt by replay beside
# the running pods; boards whose profile lists the patches take those only,
# aged by the list. After each step the independent oracle (verify_state
# --decay) must find every patch board and every overall board exact.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
export GROUP=lb-decay
decaying() { # NAME MATCH DECAY: an achievement profile, lower is better
    printf '  - name: %s\n    match: ["%s"]\n    order: asc\n    retractions: reject\n' "$1" "$2"
    printf '    tie_resolution: h\n    score_max: 50000\n'
    printf '    windows: {alltime: {}, custom: [{dim: patch}]}\n    decay: {%s}\n' "$3"
}
write_config "$T_DIR/projector.yaml" "profiles:
$(decaying achievements 'ach-*' 'dim: patch, tax: 0.2, stacking: linear, max_age: 3, precision: 0.01')
$(decaying listed 'lst-*' 'dim: patch, tax: 0.1, stacking: compound, max_age: 4, patches: ["1.8", "1.9", "1.10", "2.0"]')"
oracle=(--windows "alltime,patch" --resolution-ms 3600000 --profile ach-=best/asc/earliest/noretract
    --decay ach-=patch/0.2/linear/3/0.01/decayed --profile lst-=best/asc/earliest/noretract
    --decay "lst-=patch/0.1/compound/4/0.01/decayed/1.8,1.9,1.10,2.0")
gen=(--boards 4 --board-prefix ach- --players 3000 --score-max 300 --start "$START" --days 1
    --dim patch --retry-every 7)
release() { # PATCHES SEED - events of these patches, then the state checked
    produce -n 8000 --seed "$2" "${gen[@]}" --dim-list "$1"
    wait_caught_up 120
    verify "${oracle[@]}"
}

# 1. two pods; patch 1.8, then 1.9 released (the first rebuild)
slow=LB_FAULT_REBUILD_INTERVAL_MS=150 # rebuild steps 150 ms apart: a crash can meet one
start_projector a "$T_DIR/projector.yaml" "$slow"
pod_a=$PROJECTOR_PID
start_projector b "$T_DIR/projector.yaml" "$slow"
pod_b=$PROJECTOR_PID
release 1.8 301
release 1.8,1.9 302
grep -q "rebuilt the overall board of 'ach-" "$T_DIR/a.log" "$T_DIR/b.log" ||
    fail "no rebuild was logged when 1.9 came"
ok "patches 1.8 and 1.9: per-patch and overall boards exact"

# the oracle is not blind to the overall board: one wrong score is found
board_port=""
for p in $(slot_masters); do
    [[ $(redis_cli "$p" EXISTS "lb:{ach-1}:decayed") == 1 ]] && board_port=$p
done
[[ -n $board_port ]] || fail "no overall board for ach-1"
entry=$(redis_cli "$board_port" ZRANGE "lb:{ach-1}:decayed" 0 0 WITHSCORES | tr '\n' ' ')
read -r member score <<<"$entry"
redis_cli "$board_port" ZADD "lb:{ach-1}:decayed" "$((score + 1))" "$member" >/dev/null
status=0
"$BIN/verify_state" --events "$T_DIR/events.tsv" --nodes "127.0.0.1:$board_port" "${oracle[@]}" \
    >"$T_DIR/verify-mutant.out" 2>&1 || status=$?
((status == 1)) || fail "the oracle missed a wrong after-tax score (exit $status)"
redis_cli "$board_port" ZADD "lb:{ach-1}:decayed" "$score" "$member" >/dev/null
ok "the oracle finds a wrong after-tax score"

# lbread shows each overall entry's after-tax score, raw score and patch:
# 1.8 is one patch behind (x 1.2), 1.9 the current one
"$BIN/lbread" --config "$T_DIR/projector.yaml" --board ach-1 --window decayed --top 300 \
    >"$T_DIR/lbread.out" 2>&1 || fail "lbread failed: $(tail -n 3 "$T_DIR/lbread.out")"
grep -q "current patch 1.9" "$T_DIR/lbread.out" || fail "lbread names no current patch 1.9"
rows=0
while read -r _ _ _ _ taxed raw patch _; do
    case $patch in
    1.8) want=$((raw * 120)) ;;
    1.9) want=$((raw * 100)) ;;
    *) fail "lbread: an entry from patch '$patch'" ;;
    esac
    [[ $taxed == "$((want / 100)).$(printf '%02d' $((want % 100)))" ]] ||
        fail "lbread: $taxed after tax for $raw from $patch"
    rows=$((rows + 1))
done < <(awk '$1 ~ /^[0-9]+$/ && NF >= 7' "$T_DIR/lbread.out")
((rows == 300)) || fail "lbread showed $rows overall entries, not 300"
ok "lbread: after-tax score, raw score and patch of each overall entry"

# 2. 1.10 released; pod a is killed while it holds a rebuild; b finishes it
mark=$(grep -c "rebuilding the overall board" "$T_DIR/a.log" || true)
produce -n 8000 --seed 303 "${gen[@]}" --dim-list 1.8,1.9,1.10 &
producer=$!
T_PIDS+=("$producer")
deadline=$((SECONDS + 60))
until (($(grep -c "rebuilding the overall board" "$T_DIR/a.log" || true) > mark)); do
    ((SECONDS < deadline)) || fail "pod a took no rebuild when 1.10 came"
    sleep 0.05
done
held=$(grep "rebuilding the overall board" "$T_DIR/a.log" | tail -n 1 | sed "s/.*board of '\([^']*\)' (gen \([0-9]*\).*/\1 \2/")
read -r held_board held_gen <<<"$held"
kill -9 "$pod_a"
wait "$pod_a" 2>/dev/null || true
grep -q "rebuilt the overall board of '$held_board' (gen $held_gen)" "$T_DIR/a.log" &&
    fail "pod a finished the rebuild of $held_board before the kill: nothing was proven"
log "pod a killed while it held the rebuild of $held_board (gen $held_gen)"
wait "$producer" || fail "producer failed"
wait_caught_up 120
verify "${oracle[@]}"
grep -q "rebuilt the overall board of '$held_board' (gen $held_gen)" "$T_DIR/b.log" ||
    fail "pod b did not finish the rebuild of $held_board (gen $held_gen) that a left"
ok "patch 1.10: a's rebuild of $held_board finished by b; every board exact"

# 3. a comes back (its sweep finds nothing left); 2.0 and a late hotfix
#    1.9.1 (between 1.9 and 1.10: the ages of 1.8 and 1.9 move, 1.8 is
#    capped at 3 patches behind)
start_projector a2 "$T_DIR/projector.yaml"
release 1.9,1.10,2.0 304
release 1.9.1,2.0 305
ok "patches 2.0 and a late 1.9.1: every board exact"

# 4. boards whose profile lists its patches: 1.8 is three behind 2.0 though
#    nobody wrote 1.9 or 1.10, and 9.9, not listed, is refused (invalid_dims)
produce -n 4000 --seed 306 --boards 2 --board-prefix lst- --players 500 --score-max 300 \
    --start "$START" --days 1 --dim patch --dim-list "1.8,2.0,9.9"
wait_caught_up 120
verify "${oracle[@]}"
grep -q "invalid_dims" "$T_DIR/b.log" "$T_DIR/a2.log" || fail "no event of patch 9.9 was refused"
ok "a listed order: ages by the list, an unlisted patch refused; every board exact"

# 5. a lost board rebuilt by replay beside the running pods, then --verify
rebuild_board "$T_DIR/projector.yaml" ach-2 "${oracle[@]}"
rebuild_board "$T_DIR/projector.yaml" lst-1 "${oracle[@]}"
"$BIN/replay" --config "$T_DIR/projector.yaml" --board '*' --verify >"$T_DIR/replay-verify.out" 2>&1 ||
    fail "replay --verify failed: $(tail -n 3 "$T_DIR/replay-verify.out")"
grep -q ' 0 differing' "$T_DIR/replay-verify.out" || fail "replay --verify found differences"
ok "a lost decaying board rebuilt by replay (patch and overall boards), --verify clean"

# --verify does not compare an overall board the projector is rebuilding
# (it holds old values until the RENAME): it says so, and does not fail.
# The rebuild is another pod's, its lease running for minutes: no pod here
# can take it over and end it before replay looks.
for p in $(slot_masters); do
    [[ $(redis_cli "$p" EXISTS "lb:{ach-3}:~decay") == 1 ]] &&
        redis_cli "$p" HSET "lb:{ach-3}:~decay" rebuilding 1 holder elsewhere \
            until $(($(date +%s) * 1000 + 600000)) >/dev/null
done
"$BIN/replay" --config "$T_DIR/projector.yaml" --board 'ach-*' --verify >"$T_DIR/replay-verify2.out" 2>&1 ||
    fail "replay --verify failed on a board being rebuilt: $(tail -n 3 "$T_DIR/replay-verify2.out")"
grep -q '1 overall board(s) of decaying boards not compared' "$T_DIR/replay-verify2.out" ||
    fail "replay --verify did not say it left a rebuilding overall board out"
for p in $(slot_masters); do
    [[ $(redis_cli "$p" EXISTS "lb:{ach-3}:~decay") == 1 ]] &&
        redis_cli "$p" HDEL "lb:{ach-3}:~decay" rebuilding holder until >/dev/null
done
ok "replay --verify leaves out an overall board being rebuilt, and says so"
stop_projector "$pod_b"
stop_projector "$PROJECTOR_PID"

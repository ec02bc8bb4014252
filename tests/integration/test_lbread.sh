#!/usr/bin/env bash
# lbread against a real cluster: the three rankings (unique, competition
# 1224, dense 1223) with ties, the decoded score and time, the page around a
# player deep in a board, and the bookkeeping keys left out. The expected
# ranks are worked out by hand below, not taken from lbread.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_redis
BROKERS=127.0.0.1:9 # lbread never talks to Kafka
write_config "$T_DIR/projector.yaml"
key='lb:{r1}:alltime'
rc() { redis_cli "$(redis_port 0)" -c "$@"; } # follows MOVED to the owner

# Default profile: desc, earliest wins ties, 1 s ticks from 2025-01-01,
# T = 30: composite = score * 2^30 + (2^30 - 1 - tick).
T=$((1 << 30))
c() { echo $(($1 * T + T - 1 - $2)); } # score, tick
rc ZADD "$key" "$(c 50 100)" ann "$(c 50 100)" bob "$(c 50 200)" cat \
    "$(c 40 0)" dan "$(c 40 0)" eve "$(c 40 0)" fay "$(c 30 86400)" gus "$(c -5 0)" hal >/dev/null
rc HSET 'lb:{r1}:~applied' 'scores:0' 41 >/dev/null
rc HSET 'lb:{r1}:alltime:~ts' ann 1 >/dev/null

"$BIN/lbread" --config "$T_DIR/projector.yaml" --board r1 --top 20 >"$T_DIR/top.out" ||
    fail "lbread failed: $(cat "$T_DIR/top.out")"
cat "$T_DIR/top.out" >&2
# rank comp dense player score, in Redis's order (equal composites by
# member name, descending for a desc board)
expected="1 1 1 bob 50
2 1 1 ann 50
3 3 2 cat 50
4 4 3 fay 40
5 4 3 eve 40
6 4 3 dan 40
7 7 4 gus 30
8 8 5 hal -5"
got=$(awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print $1, $2, $3, $4, $5 }' "$T_DIR/top.out")
[[ $got == "$expected" ]] || fail "ranks differ; expected:
$expected
got:
$got"
ok "unique, competition and dense ranks with ties; negative score decoded"
grep -q 'bob .* 2025-01-01T00:01:40Z' "$T_DIR/top.out" || fail "bob's time is not tick 100"
grep -q 'gus .* 2025-01-02T00:00:00Z' "$T_DIR/top.out" || fail "gus's time is not tick 86400"
ok "achieved-at times decoded from the tie-breaker"
grep -q '~' "$T_DIR/top.out" && fail "bookkeeping keys shown as windows"
ok "markers and ~ts hashes are not shown"

# the page of 3 around eve (position 5): positions 4..6, ranks carried over
"$BIN/lbread" --config "$T_DIR/projector.yaml" --board r1 --window alltime --around eve \
    --top 3 >"$T_DIR/around.out" || fail "lbread --around failed"
got=$(awk '$1 ~ /^[0-9]+$/ || $1 == ">" { sub(/^> */, ">"); print $1, $2, $3, $4 }' "$T_DIR/around.out")
expected="4 4 3 fay
>5 4 3 eve
6 4 3 dan"
[[ $got == "$expected" ]] || fail "page around eve differs; expected:
$expected
got:
$got"
ok "the page around a player keeps competition and dense ranks from the top"

"$BIN/lbread" --config "$T_DIR/projector.yaml" --board r1 --around nobody >"$T_DIR/none.out" ||
    fail "lbread failed for an absent player"
grep -q "player 'nobody' is in none of the 1 window" "$T_DIR/none.out" || fail "absent player not reported"
status=0
"$BIN/lbread" --config "$T_DIR/projector.yaml" --board r1 --top 0 2>"$T_DIR/usage.err" || status=$?
[[ $status == 2 ]] || fail "--top 0 exited $status, not 2 (usage)"
ok "an absent player is said so; a bad --top is a usage error"

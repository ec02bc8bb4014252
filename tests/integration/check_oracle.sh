#!/usr/bin/env bash
# The oracle's own word on state that moves while it reads (verify_state,
# exit 3: read again) against state that is settled and wrong (exit 1), on
# one real redis-server and no projector. verify_state reads each board's
# ~final, then every key, then ~final again; CI met a window that the
# projector closed between the first two (its frozen copy looked like a key
# with no closed window). Here the test plays the projector: it writes the
# closing, or a reopening, while the oracle is past its first look at
# ~final (a scanning connection after the first one), and the scans are
# made long by 400,000 keys of filler outside the prefix. No Kafka.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

port=$(lb_free_port_base 1) || fail "no free port for Redis"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --enable-debug-command local --dir "$T_DIR" >"$T_DIR/redis.log" 2>&1 &
T_PIDS+=("$!")
lb_wait_for 10 _lb_redis_cli "$port" PING >/dev/null 2>&1 || fail "redis-server did not start"
[[ $(redis_cli "$port" DEBUG POPULATE 400000 filler 10) == OK ]] || fail "DEBUG POPULATE failed"

: >"$T_DIR/events.tsv"
: >"$T_DIR/delivered.tsv"
oracle() {
    "$BIN/verify_state" --events "$T_DIR/events.tsv" --deliveries "$T_DIR/delivered.tsv" \
        --nodes "127.0.0.1:$port" --results "res-=daily/20/3600000" "$@"
}

# oracle_meanwhile STATUS MESSAGE CMD... - the oracle's exit is STATUS and
# its output says MESSAGE, with CMD run (a redis-cli on the node) once its
# second scanning connection shows: its first look at ~final is over and
# its last has not begun.
oracle_meanwhile() {
    local want=$1 message=$2 first="" id status=0
    shift 2
    oracle >"$T_DIR/oracle.out" 2>&1 &
    local pid=$!
    T_PIDS+=("$pid")
    while :; do
        kill -0 "$pid" 2>/dev/null || fail "the oracle ended before its second scan was seen"
        id=$(redis_cli "$port" CLIENT LIST TYPE normal | awk '/ cmd=scan / {
            sub(/^id=/, "", $1); print $1 }' | sort -n | tail -n 1) || fail "CLIENT LIST failed"
        if [[ -n $id ]]; then
            [[ -z $first ]] && first=$id
            ((id > first)) && break
        fi
        sleep 0.02
    done
    "$@" >/dev/null || fail "$* failed"
    wait "$pid" || status=$?
    ((status == want)) || fail "the oracle exited $status, not $want: $(cat "$T_DIR/oracle.out")"
    grep -q "$message" "$T_DIR/oracle.out" || fail "the oracle did not say '$message': $(cat "$T_DIR/oracle.out")"
}

# settled STATUS MESSAGE - the oracle, nothing moving: exit STATUS, saying
# MESSAGE
settled() {
    local status=0
    oracle >"$T_DIR/oracle.out" 2>&1 || status=$?
    ((status == $1)) || fail "the oracle exited $status, not $1: $(cat "$T_DIR/oracle.out")"
    grep -q "$2" "$T_DIR/oracle.out" || fail "the oracle did not say '$2': $(cat "$T_DIR/oracle.out")"
}

final='lb:{res-0}:~final'
frozen='lb:{res-0}:final:daily:2026-01-01'
closed_at=$(date -u -d '2026-01-02 01:00' +%s)000
unsettled='a window closed or was reopened while the keys were read: not settled'

settled 0 '0 differences'
ok "nothing under the prefix: exit 0"

# 1. a window closes while the oracle reads: the frozen copy and s: in one
# transaction, as the projector's claim writes them
close_window() {
    printf '%s\n' MULTI "ZADD $frozen 5 p1" \
        "HSET $final s:daily:2026-01-01 claimed c:daily:2026-01-01 $closed_at n:daily:2026-01-01 1" \
        EXEC | redis_cli "$port"
}
oracle_meanwhile 3 "$unsettled" close_window
ok "a window closed while the oracle read: exit 3 (not settled)"
# the same state settled is judged: no event falls in that window
settled 1 'daily:2026-01-01 closed, and no event falls in it'
ok "the same state, settled: exit 1"

# 2. the window reopened (published, then reopening, its publisher
# cleared) while the oracle reads
redis_cli "$port" HSET "$final" s:daily:2026-01-01 published p:daily:2026-01-01 pod-a >/dev/null
oracle_meanwhile 3 "$unsettled" redis_cli "$port" HSET "$final" s:daily:2026-01-01 reopening
ok "a published window reopened while the oracle read: exit 3"
settled 1 "state 'reopening' in ~final"
ok "the same state, settled: exit 1"

# 3. the window, claimed before the oracle starts, is reopened and claimed
# again while it reads: only its closing time tells
redis_cli "$port" HSET "$final" s:daily:2026-01-01 claimed >/dev/null
oracle_meanwhile 3 "$unsettled" redis_cli "$port" HSET "$final" \
    c:daily:2026-01-01 "$((closed_at + 60000))"
ok "a window reopened and closed again while the oracle read: exit 3"
settled 1 'daily:2026-01-01 closed, and no event falls in it'
ok "the same state, settled: exit 1"

# 4. a frozen copy with no closed window, nothing moving: the difference CI
# reported, now settled, stays a difference
redis_cli "$port" DEL "$final" >/dev/null
settled 1 "unexpected key $frozen (no closed window in ~final)"
ok "a final key with no closed window, settled: exit 1"

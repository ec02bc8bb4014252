#!/usr/bin/env bash
# replay rebuilds a lost shard beside the running projector:
#
#  1. boards of every mode are projected; one master is flushed (its replica
#     follows), so its slots lose their keys and markers; events keep coming
#     and the projector keeps writing, recreating some of those keys from
#     scratch; `replay --node` rebuilds the node's slots while both go on;
#     `replay --verify` is clean and the state equals the oracle's.
#  2. replaying slots that lost nothing changes nothing (dump before/after,
#     --verify).
#  3. a retention gap (records deleted with Kafka's own DeleteRecordsCommand)
#     shows in the plan, is refused with exit 4, and --allow-gap runs.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
export GROUP=lb-replay
write_config "$T_DIR/projector.yaml" "$MODE_PROFILES"
gen=("${MODE_GEN[@]}")
replay() { "$BIN/replay" --config "$T_DIR/projector.yaml" "$@"; }

masters=()
for i in 0 1 2 3 4 5; do
    port=$(redis_port "$i")
    [[ $(redis_cli "$port" ROLE | head -n 1) == master ]] && masters+=("$port")
done
((${#masters[@]} == 3)) || fail "expected 3 masters, found ${#masters[@]}"
lost=${masters[0]} intact=${masters[1]}
keys_on() { redis_cli "$1" --scan --pattern 'lb:*' | wc -l; }

# 1. a lost shard, rebuilt while the projector keeps writing
start_projector projector "$T_DIR/projector.yaml"
produce -n 40000 --seed 71 "${gen[@]}" --rate 20000
wait_caught_up 120
before=$(keys_on "$lost")
((before > 20)) || fail "only $before keys on $lost before the loss"
redis_cli "$lost" FLUSHALL >/dev/null
ok "flushed master $lost: $before keys (scores and markers) gone"

produce -n 60000 --seed 72 "${gen[@]}" --rate 3000 &
producer=$!
T_PIDS+=("$producer")
sleep 2 # the projector writes the flushed slots again, from scratch
replay --node "127.0.0.1:$lost" --dry-run >"$T_DIR/plan.out" || fail "replay --dry-run failed"
grep -q 'replay plan' "$T_DIR/plan.out" || fail "no plan printed"
grep -q 'retention' "$T_DIR/plan.out" && fail "a retention gap where there is none"
status=0
replay --node "127.0.0.1:$lost" --max-rate 50000 --verbose >"$T_DIR/replay.out" 2>"$T_DIR/replay.err" ||
    status=$?
cat "$T_DIR/replay.out" >&2
[[ $status == 0 ]] || fail "replay exited $status: $(cat "$T_DIR/replay.err")"
grep -Eq 'events read .* [1-9][0-9]* of [1-9][0-9]* board\(s\) rebuilt' "$T_DIR/replay.out" ||
    fail "replay rebuilt no board"
kill -0 "$producer" 2>/dev/null || fail "the producer finished before replay did: nothing ran beside it"
ok "replay --node rebuilt the lost slots while events were produced and projected"
wait "$producer" || fail "producer failed"
wait_caught_up 120
verify "${MODE_ORACLE[@]}"
status=0
replay --node "127.0.0.1:$lost" --verify >"$T_DIR/verify.out" 2>&1 || status=$?
cat "$T_DIR/verify.out" >&2
[[ $status == 0 ]] || fail "replay --verify exited $status"
grep -q ' 0 differing' "$T_DIR/verify.out" || fail "replay --verify reported differences"
ok "the rebuilt shard equals the oracle, and replay --verify agrees"

# --verify notices a loss (and says so with exit 5)
key=$(redis_cli "$lost" --scan --pattern 'lb:{sum-*}:alltime' | head -n 1)
[[ -n $key ]] || fail "no sum board on $lost"
redis_cli "$lost" DEL "$key" >/dev/null
status=0
replay --node "127.0.0.1:$lost" --verify >"$T_DIR/verify2.out" 2>&1 || status=$?
[[ $status == 5 ]] || fail "replay --verify exited $status after a key was deleted, not 5"
grep -q "$key: member .* missing" "$T_DIR/verify2.out" || fail "the deleted key is not named"
ok "replay --verify reports a deleted key with exit 5"
board=${key#lb:\{}
board=${board%%\}*}
replay --board "$board" >/dev/null 2>&1 ||
    fail "replay --board failed"
verify "${MODE_ORACLE[@]}"
ok "replay --board put the deleted key back exactly"

# 2. slots that lost nothing: replay changes nothing
dump() {
    local k
    redis_cli "$intact" --scan --pattern 'lb:*' | sort | while read -r k; do
        printf '%s %s\n' "$k" "$(redis_cli "$intact" TYPE "$k")"
        case $(redis_cli "$intact" TYPE "$k") in
        zset) redis_cli "$intact" ZRANGE "$k" 0 -1 WITHSCORES ;;
        hash) redis_cli "$intact" HGETALL "$k" | paste - - | sort ;;
        esac
        redis_cli "$intact" PEXPIRETIME "$k"
    done
}
dump >"$T_DIR/before.dump"
replay --node "127.0.0.1:$intact" >/dev/null 2>"$T_DIR/replay2.err" ||
    fail "replay of intact slots failed: $(cat "$T_DIR/replay2.err")"
dump >"$T_DIR/after.dump"
# the markers of a rebuilt board end at the last offset replay read: the
# only thing allowed to change
if ! diff <(grep -v '^scores:' "$T_DIR/before.dump") <(grep -v '^scores:' "$T_DIR/after.dump") \
    >"$T_DIR/dump.diff"; then
    cat "$T_DIR/dump.diff" >&2
    fail "replaying intact slots changed them"
fi
replay --node "127.0.0.1:$intact" --verify >/dev/null 2>&1 || fail "--verify of intact slots failed"
ok "replaying slots that lost nothing changed no score, member or expiry"

# one window of one board: only that key is rebuilt, the rest stays live
wkey=$(redis_cli "$intact" --scan --pattern 'lb:{lat-*}:weekly:*' | grep -v '~ts$' | head -n 1)
[[ -n $wkey ]] || fail "no weekly key of a latest board on $intact"
wboard=${wkey#lb:\{}
wboard=${wboard%%\}*}
window=${wkey#*\}:}
redis_cli "$intact" DEL "$wkey" >/dev/null
other=$(redis_cli "$intact" ZRANGE "lb:{$wboard}:alltime" 0 -1 WITHSCORES | md5sum)
replay --board "$wboard" --window "$window" >"$T_DIR/window.out" 2>&1 ||
    fail "replay --window failed: $(cat "$T_DIR/window.out")"
[[ $(redis_cli "$intact" EXISTS "$wkey") == 1 ]] || fail "$wkey was not rebuilt"
[[ $(redis_cli "$intact" ZRANGE "lb:{$wboard}:alltime" 0 -1 WITHSCORES | md5sum) == "$other" ]] ||
    fail "replay --window touched another window"
verify "${MODE_ORACLE[@]}"
ok "replay --board $wboard --window $window rebuilt that one key exactly"

# 3. a retention gap
stop_projector "$PROJECTOR_PID"
cat >"$T_DIR/delete.json" <<JSON
{"partitions": [{"topic": "scores", "partition": 0, "offset": 100}], "version": 1}
JSON
lb_kafka_admin org.apache.kafka.tools.DeleteRecordsCommand --bootstrap-server "$BROKERS" \
    --offset-json-file "$T_DIR/delete.json" >"$T_DIR/delete.log" 2>&1 ||
    fail "DeleteRecordsCommand failed: $(cat "$T_DIR/delete.log")"
status=0
replay --node "127.0.0.1:$lost" --dry-run >"$T_DIR/gap.out" 2>&1 || status=$?
grep -q 'scores \[0\]: events before offset 100 were deleted by retention' "$T_DIR/gap.out" ||
    fail "the plan does not show the gap: $(cat "$T_DIR/gap.out")"
[[ $status == 4 ]] || fail "--dry-run with a gap exited $status, not 4"
status=0
replay --node "127.0.0.1:$lost" >"$T_DIR/gap-run.out" 2>&1 || status=$?
[[ $status == 4 ]] || fail "replay with a gap exited $status, not 4"
grep -q 'allow-gap' "$T_DIR/gap-run.out" || fail "the refusal does not name --allow-gap"
replay --node "127.0.0.1:$lost" --allow-gap >"$T_DIR/gap-allowed.out" 2>&1 ||
    fail "replay --allow-gap failed: $(cat "$T_DIR/gap-allowed.out")"
ok "a retention gap is shown, refused with exit 4, and --allow-gap runs"

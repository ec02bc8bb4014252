#!/usr/bin/env bash
# Events the projector cannot project go to the dead-letter topic:
#
#  1. poison events of every kind (bad magic byte, unknown schema id,
#     truncated Avro, score out of range, a board id with '{', an empty
#     player, an unknown op, a board id and an event_id that are not UTF-8,
#     a ts an hour ahead of its record's timestamp),
#     produced raw among good ones, all end in the
#     DLQ with their key, bytes and the right reason and source headers; the
#     good events around them are applied exactly; every offset advances.
#  2. while the DLQ cannot be written (the topic does not exist and the
#     broker does not create topics), each partition stalls at its first
#     poison event: nothing after it is committed, nothing is skipped. Once
#     the topic exists, everything goes through.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
"$BIN/lbadmin" create-topic --brokers "$BROKERS" --topic scores-dlq --partitions 1 \
    >>"$T_DIR/lbadmin.log" 2>&1 || fail "cannot create the DLQ topic"
DLQ_TOPIC=scores-dlq GROUP=lb-dlq write_config "$T_DIR/projector.yaml"
export GROUP=lb-dlq

produce -n 20000 --seed 81 --boards 8 --players 500 --start "$START" --days 2 --poison-every 40
start_projector projector "$T_DIR/projector.yaml"
wait_caught_up 120
verify
assert_committed_at_end

"$BIN/lbadmin" dump --brokers "$BROKERS" --topic scores-dlq >"$T_DIR/dlq.dump" 2>>"$T_DIR/lbadmin.log" ||
    fail "cannot read the DLQ"
expected=$(awk '$6 ~ /^POISON:/ { sub(/^POISON:/, "", $6); print $6 }' "$T_DIR/events.tsv" | sort | uniq -c)
got=$(grep -o 'lb\.reason=[a-z_]*' "$T_DIR/dlq.dump" | cut -d= -f2 | sort | uniq -c)
[[ -n $expected ]] || fail "no poison events were produced"
[[ $got == "$expected" ]] || fail "DLQ reasons differ; expected:
$expected
got:
$got"
kinds=$(wc -l <<<"$expected")
((kinds == 9)) || fail "expected 9 reasons for the 10 kinds of poison, saw $kinds"
ok "every poison event is in the DLQ with its reason: $(tr -s ' \n' ' ' <<<"$got")"

missing=$(awk '!/lb\.detail=[^ ]/ || !/lb\.source\.topic=scores / || !/lb\.source\.partition=[0-9]/ ||
    !/lb\.source\.offset=[0-9]/ || !/lb\.rejected\.at=20[0-9-]*T/ || !/bytes=[1-9]/' "$T_DIR/dlq.dump" | wc -l)
((missing == 0)) || fail "$missing DLQ records lack a header or their bytes"
# the key is the original message key (the player; empty for the empty player)
keys_expected=$(awk '$6 ~ /^POISON:/ { print ($3 == "-" ? "" : $3) }' "$T_DIR/events.tsv" | sort)
keys_got=$(sed 's/.* key=\([^ ]*\) .*/\1/' "$T_DIR/dlq.dump" | sort)
[[ $keys_got == "$keys_expected" ]] || fail "DLQ keys are not the original keys"
dups=$(grep -o 'lb\.source\.partition=[0-9]* lb\.source\.offset=[0-9]*' "$T_DIR/dlq.dump" | sort | uniq -d | wc -l)
((dups == 0)) || fail "$dups source offsets dead-lettered twice"
ok "DLQ records carry the original key and bytes, the detail, source and time headers"

# re-drive: fix the cause (the producer's schema 99 is registered at last)
# and produce those records back; they are applied, nothing is dead-lettered
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"
sed -i "s|^    2: .*|&\n    99: $repo/schemas/score_event.avsc|" "$T_DIR/projector.yaml"
grep -q '^    99: ' "$T_DIR/projector.yaml" || fail "could not add schema 99"
"$BIN/lbadmin" redrive --brokers "$BROKERS" --topic scores-dlq --reason unknown_schema_id \
    >"$T_DIR/redrive.out" 2>>"$T_DIR/lbadmin.log" || fail "redrive failed"
unknown=$(awk '$6 == "POISON:unknown_schema_id"' "$T_DIR/events.tsv" | wc -l)
grep -q "redrive: $unknown record(s) produced back" "$T_DIR/redrive.out" ||
    fail "redrive did not produce the $unknown records: $(cat "$T_DIR/redrive.out")"
start_projector projector "$T_DIR/projector.yaml"
wait_caught_up 120
awk -F'\t' -v OFS='\t' '$6 == "POISON:unknown_schema_id" { $6 = "SUBMIT"; print }' \
    "$T_DIR/events.tsv" >"$T_DIR/redriven.tsv"
cat "$T_DIR/redriven.tsv" >>"$T_DIR/events.tsv"
verify
"$BIN/lbadmin" dump --brokers "$BROKERS" --topic scores-dlq >"$T_DIR/dlq2.dump" 2>>"$T_DIR/lbadmin.log" ||
    fail "cannot read the DLQ"
[[ $(wc -l <"$T_DIR/dlq2.dump") == $(wc -l <"$T_DIR/dlq.dump") ]] ||
    fail "re-driven records were dead-lettered again"
ok "after the fix, lbadmin redrive put $unknown records back and they were applied exactly"

# 2. the DLQ cannot be written: partitions stall at their first poison event
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"
declare -A first_poison=()
while read -r p o; do
    [[ -z ${first_poison[$p]-} || $o -lt ${first_poison[$p]} ]] && first_poison[$p]=$o
done < <(sed -n 's/.*lb\.source\.partition=\([0-9]*\) lb\.source\.offset=\([0-9]*\).*/\1 \2/p' "$T_DIR/dlq.dump")
export GROUP=lb-dlq-stall
DLQ_TOPIC=scores-dlq-late write_config "$T_DIR/stall.yaml"
start_projector stall "$T_DIR/stall.yaml"
wait_log "$T_DIR/stall.log" 'held at offset [0-9]* (dlq)' 30
sleep 3 # commits go every 200 ms: one past a held poison event would show by now
stalled=0
while read -r p c h; do
    [[ $c == - ]] && c=0
    first=${first_poison[$p]-}
    [[ -n $first ]] || continue
    ((c <= first)) || fail "partition $p committed $c, past its first poison event at $first"
    ((c < h)) && stalled=$((stalled + 1))
done < <(committed_offsets)
((stalled > 0)) || fail "no partition stalled"
grep -q 'not in the dead-letter topic .scores-dlq-late. yet' "$T_DIR/stall.log" ||
    fail "the stall is not logged"
grep -q 'held at offset [0-9]* (dlq)' "$T_DIR/stall.log" || fail "the hold is not logged"
ok "with the DLQ unwritable, $stalled partition(s) stalled at their first poison event"
"$BIN/lbadmin" create-topic --brokers "$BROKERS" --topic scores-dlq-late --partitions 1 \
    >>"$T_DIR/lbadmin.log" 2>&1 || fail "cannot create the late DLQ topic"
wait_caught_up 180
assert_committed_at_end
"$BIN/lbadmin" dump --brokers "$BROKERS" --topic scores-dlq-late >"$T_DIR/dlq-late.dump" \
    2>>"$T_DIR/lbadmin.log" || fail "cannot read the late DLQ"
n=$(awk '$6 ~ /^POISON:/' "$T_DIR/events.tsv" | wc -l)
m=$(grep -c 'lb\.reason=' "$T_DIR/dlq-late.dump")
((m >= n)) || fail "only $m of $n poison events reached the DLQ once it existed"
verify
ok "once the DLQ exists the stalled partitions resume: $m records dead-lettered, state exact"
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"

#!/usr/bin/env bash
# Changing the number of shards of split boards, by the runbook
# (ops/runbooks/split-boards.md, its shell blocks extracted and run as
# written), staged the way it happens: the pods run with the old N, are
# stopped, events keep arriving, the configuration changes, the procedure
# rebuilds the profile's boards in the new layout and deletes the old one,
# the pods start with the new configuration and drain the backlog. Twice:
#   a. N = 1 to 3, a board turned into a split board (its windows, markers
#      and dedupe set under its own tag are the old layout);
#   b. N = 3 to 2 (shard tags the new N does not use are the old layout).
# After each, the independent oracle is exact in the new layout (no key of
# the old one left: an extra key is a difference), the other profile's
# boards are untouched by the procedure, and replay --verify is clean.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
export GROUP=lb-resplit
profiles() { # SHARDS
    printf 'profiles:\n  - name: hot\n    match: "hot-*"\n    dedupe: {window: 30d}\n'
    printf '    split: {shards: %s, top: 20, staleness: 400ms}%s\n' "$1" "$_windows"
    printf '  - name: cold\n    match: "cold-*"\n    aggregation: sum\n    dedupe: {window: 30d}%s\n' \
        "$_windows"
}
rules() { # SHARDS: the oracle's rules for that layout
    local -a split=()
    (($1 > 1)) && split=(--split "hot-=$1/20")
    verify --windows "alltime,daily:7d,weekly:28d,monthly:93d,patch" \
        --profile hot-=best/desc/earliest --profile cold-=sum/desc/earliest "${split[@]}"
}
gen=(--boards 6 --board-prefix "hot-,cold-" --players 300 --score-max 1000 --start "$START"
    --days 3 --dim patch --dim-values 2 --retract-every 30 --retry-every 13)
for n in 1 3 2; do
    write_config "$T_DIR/n$n.yaml" "$(profiles "$n")"
done
runbook_procedure "$repo/ops/runbooks/split-boards.md" "$T_DIR/procedure.sh"
export PATH=$BIN:$PATH # the runbook calls replay and lbread by name

# cold - a digest of every key of the cold-* boards (the other profile)
cold() {
    local p
    for p in $(slot_masters); do
        redis_cli "$p" --scan --pattern 'lb:{cold-*' | sort | while read -r key; do
            printf '%s ' "$key"
            redis_cli "$p" DUMP "$key" | md5sum
        done
    done | sort | md5sum
}

# resplit FROM TO - the pod stopped, a backlog produced, the procedure run
# for the new configuration, the pod started with it
resplit() {
    stop_projector "$PROJECTOR_PID"
    produce -n 3000 --seed $((900 + $2)) "${gen[@]}" --rate 20000
    "$BIN/projector" --check-config "$T_DIR/n$2.yaml" >"$T_DIR/check-$2.out" 2>&1 ||
        fail "--check-config of the new configuration failed: $(tail -n 3 "$T_DIR/check-$2.out")"
    local before status=0
    before=$(cold)
    (cd "$T_DIR" && CONFIG=$T_DIR/n$2.yaml BOARDS='hot-*' NODE=127.0.0.1:$(slot_masters | first) \
        timeout 300 bash -euo pipefail procedure.sh) >"$T_DIR/resplit-$2.out" 2>&1 || status=$?
    cat "$T_DIR/resplit-$2.out" >&2
    ((status == 0)) || fail "the runbook's procedure failed (exit $status)"
    grep -Eq '[1-9][0-9]* of [1-9][0-9]* board\(s\) rebuilt' "$T_DIR/resplit-$2.out" ||
        fail "replay rebuilt no board"
    deleted=$(sed -n 's/^deleted \([0-9]*\) key(s) of the old layout$/\1/p' "$T_DIR/resplit-$2.out")
    ((${deleted:-0} > 0)) || fail "the procedure deleted no key of the old layout"
    [[ $(cold) == "$before" ]] || fail "the procedure changed a cold-* board (not of the profile)"
    start_projector "pod-$2" "$T_DIR/n$2.yaml"
    produce -n 3000 --seed $((950 + $2)) "${gen[@]}" --rate 5000
    wait_caught_up 120
    rules "$2"
    "$BIN/replay" --config "$T_DIR/n$2.yaml" --board 'hot-*' --verify >"$T_DIR/verify-$2.out" 2>&1 ||
        fail "replay --verify (runbook step 5) failed: $(tail -n 3 "$T_DIR/verify-$2.out")"
    grep -q ' 0 differing' "$T_DIR/verify-$2.out" || fail "replay --verify found differences"
    ok "N = $1 to $2 by the runbook: $deleted key(s) of the old layout deleted; exact in the new layout, cold-* untouched"
}

start_projector pod-1 "$T_DIR/n1.yaml"
produce -n 6000 --seed 901 "${gen[@]}" --rate 20000
wait_caught_up 120
rules 1
ok "hot-* as one key each (N = 1): exact"

resplit 1 3
# the old layout under the boards' own tags is gone: only merged tops stay
for p in $(slot_masters); do
    redis_cli "$p" --scan --pattern 'lb:{hot-[0-9]}:*'
done | grep -Ev '^lb:\{hot-[0-9]+\}:~top(s|:.*)$' >"$T_DIR/left.txt" || true
[[ ! -s $T_DIR/left.txt ]] || fail "keys of the one-key layout left: $(head -n 3 "$T_DIR/left.txt")"

resplit 3 2
stop_projector "$PROJECTOR_PID"
ok "split boards change N by the runbook, exact both ways"

#!/usr/bin/env bash
# Port picking for tests that run at the same time (ops/services.sh,
# lb_free_port_base; run.sh --lanes): shells picking blocks of the same range
# at once never get the same block, a block stays reserved while the shell
# that picked it runs (a broker takes seconds to bind what it was given),
# and is free again once that shell has ended. No services.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
services=$here/../../ops/services.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/lb-ports.XXXXXX")
export LB_PORT_RESERVATIONS=$work/reservations
holders=()
cleanup() {
    local pid
    for pid in "${holders[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "FAIL $*" >&2
    exit 1
}

# a range of 8 blocks of 2 (a broker and its controller) where no socket of
# any state is (as lb_free_port_base counts them), its ports + 10000 too:
# all below 32768, where Linux's outgoing connections take theirs
# shellcheck source=ops/services.sh
. "$services"
_lb_collect_busy_ports || fail "no ss: the ports cannot be checked"
lo=
for try in 21000 21200 21400 21600 21800 22000 22200 22400; do
    busy=0
    for ((p = try; p < try + 80; p++)); do
        if [[ -n ${_lb_busy[$p]-} || -n ${_lb_busy[$((p + 10000))]-} ]]; then
            busy=1
            break
        fi
    done
    ((busy)) || {
        lo=$try
        break
    }
done
[[ -n $lo ]] || fail "no range of 80 ports without sockets in 21000..22480 to pick from"
hi=$((lo + 80))

# pick S - a shell of its own picks a block into $work/S and then waits (its
# reservation held) until $work/S.end appears, or this test has ended
pick() {
    S=$1 bash -c '. "$0"
        lb_free_port_base 2 "$1" "$2" >"$3/$S.tmp" 2>"$3/$S.err" || echo none >"$3/$S.tmp"
        mv "$3/$S.tmp" "$3/$S"
        until [[ -e $3/$S.end ]] || ! kill -0 "$4" 2>/dev/null; do sleep 0.05; done' \
        "$services" "$lo" "$hi" "$work" "$$" &
    holders+=("$!")
}

# await S - the block shell S picked is in $work/S (20 s at most)
await() {
    local tries=400
    until [[ -e $work/$1 ]]; do
        ((--tries > 0)) || fail "shell $1 picked nothing in 20 s: $(cat "$work/$1.err" 2>/dev/null)"
        sleep 0.05
    done
}

for s in 1 2 3 4 5 6 7 8; do pick "$s"; done
for s in 1 2 3 4 5 6 7 8; do await "$s"; done
mapfile -t got < <(cat "$work"/[1-8])
for base in "${got[@]}"; do
    [[ $base =~ ^[0-9]+$ ]] || fail "8 shells picking 8 blocks at once: one got none ($(cat "$work"/[1-8].err))"
done
dups=$(printf '%s\n' "${got[@]}" | sort | uniq -d)
[[ -z $dups ]] || fail "8 shells picking at once got the same block twice: $(printf '%s ' "${got[@]}")"
echo "8 shells picking at once: 8 blocks ($(printf '%s ' "${got[@]}"))"

# every block reserved, none bound: a ninth shell gets none
pick 9
await 9
[[ $(cat "$work/9") == none ]] || fail "a ninth shell got block $(cat "$work/9"), reserved by a running shell"
grep -q "no block of 2 free ports in $lo..$hi" "$work/9.err" || fail "the ninth shell's error: $(cat "$work/9.err")"
echo "a ninth shell while they run: none ($(cat "$work/9.err"))"

# the first shell ends: its block, and only it, is free again
touch "$work/1.end" "$work/9.end"
wait "${holders[0]}" "${holders[8]}"
base=$(lb_free_port_base 2 "$lo" "$hi") || fail "no block once the shell holding ${got[0]} had ended"
[[ $base == "${got[0]}" ]] || fail "picked $base once the shell holding ${got[0]} had ended"
echo "after the first shell ended: its block ${got[0]} again"

# what a shell that has ended reserved is dropped when the table is written
touch "$work"/{2..8}.end
wait
holders=()
lb_free_port_base 2 "$lo" "$hi" >/dev/null || fail "no block once every shell had ended"
table=$(cat "$LB_PORT_RESERVATIONS")
grep -qv " $$\$" <<<"$table" && fail "ended shells' reservations still listed: $table"
[[ $(wc -l <<<"$table") == 4 ]] || fail "this shell's two blocks not both listed: $table"
echo "after every shell ended: only this shell's two blocks listed"

# a table that cannot be written (its directory missing): a block all the
# same, and a line saying that it is not reserved
said=$(LB_PORT_RESERVATIONS=$work/missing/reservations lb_free_port_base 2 "$lo" "$hi" 2>&1 >/dev/null)
base=$(LB_PORT_RESERVATIONS=$work/missing/reservations lb_free_port_base 2 "$lo" "$hi" 2>/dev/null) ||
    fail "no block when the table cannot be written"
[[ $base =~ ^[0-9]+$ ]] || fail "when the table cannot be written: '$base', not a port"
[[ $said == *"ports are not reserved"* ]] || fail "when the table cannot be written, said: '$said'"
echo "a table that cannot be written: block $base, and said: $said"
echo "PASS port reservations"

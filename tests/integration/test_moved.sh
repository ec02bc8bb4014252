#!/usr/bin/env bash
# The slot of an active board moves to another master while events flow:
# the projector follows MOVED (and ASK while the slot is migrating), loses
# nothing, and the final state is exact.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cli() {
    local port=$1
    shift
    redis-cli -h 127.0.0.1 -p "$port" "$@"
}

# migrate_slot SLOT FROM_PORT TO_PORT - the standard live migration
migrate_slot() {
    local slot=$1 from=$2 to=$3 from_id to_id keys port
    from_id=$(cli "$from" cluster myid)
    to_id=$(cli "$to" cluster myid)
    cli "$to" cluster setslot "$slot" importing "$from_id" >/dev/null
    cli "$from" cluster setslot "$slot" migrating "$to_id" >/dev/null
    while :; do
        keys=$(cli "$from" cluster getkeysinslot "$slot" 10 | tr '\n' ' ')
        [[ -n ${keys// /} ]] || break
        # shellcheck disable=SC2086
        cli "$from" migrate 127.0.0.1 "$to" "" 0 5000 keys $keys >/dev/null
        sleep 0.3 # keep the slot migrating for a while: ASK territory
    done
    for port in $(cli "$(redis_port 0)" cluster nodes | awk '$3 ~ /master/ { split($2, a, "[:@]"); print a[2] }'); do
        cli "$port" cluster setslot "$slot" node "$to_id" >/dev/null
    done
}

start_services
write_config "$T_DIR/projector.yaml"
start_projector projector "$T_DIR/projector.yaml"
produce -n 20000 --seed 31 --boards 4 --players 500 --start "$START" --days 3
wait_caught_up 60

slot=$(cli "$(redis_port 0)" cluster keyslot g1)
from=$(master_of_slot "$slot")
to=$(redis_port 0)
[[ $from == "$to" ]] && to=$(redis_port 1)
log "moving slot $slot (board g1) from $from to $to while events flow"
produce -n 40000 --seed 32 --boards 4 --players 500 --start "$START" --days 3 --rate 8000 &
producer=$!
T_PIDS+=("$producer")
sleep 1
migrate_slot "$slot" "$from" "$to"
[[ $(master_of_slot "$slot") == "$to" ]] || fail "slot $slot did not move"
wait "$producer" || fail "producer failed"
wait_caught_up 120
verify --expiry-slack-ms 1000 # MIGRATE moves TTLs as relative times; GT keeps the later one
assert_committed_at_end

stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"
moved=$(grep -o 'moved=[0-9]*' "$T_DIR/projector.log" | tail -n 1 | cut -d= -f2)
ask=$(grep -o ' ask=[0-9]*' "$T_DIR/projector.log" | tail -n 1 | cut -d= -f2)
log "redirections followed: moved=$moved ask=$ask"
((moved > 0)) || fail "the projector never met MOVED; the test did not test it"
ok "followed the slot to its new master"

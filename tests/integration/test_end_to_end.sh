#!/usr/bin/env bash
# Events from the producer land in exactly the expected members and composite
# scores of every window key; committed offsets end at the last offset + 1;
# SIGTERM leaves cleanly with exit 0.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
write_config "$T_DIR/projector.yaml"
produce -n 50000 --seed 11 --boards 20 --players 3000 --start "$START" --days 3
start_projector projector "$T_DIR/projector.yaml"
wait_caught_up 120
verify
assert_committed_at_end

# more events while it runs: they are applied too
produce -n 20000 --seed 12 --boards 20 --players 3000 --start "$START" --days 3 --rate 20000
wait_caught_up 120
verify
assert_committed_at_end

stop_projector "$PROJECTOR_PID" 20
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS after SIGTERM"
grep -q 'msg="stopping: committing durable offsets' "$T_DIR/projector.log" ||
    fail "no orderly stop in the log"
ok "SIGTERM: exit 0"

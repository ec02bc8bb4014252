#!/usr/bin/env bash
# A cluster that requires an ACL user and password: the projector
# authenticates every connection (redirection targets included) and
# projects normally; with a wrong password it commits nothing, says why, and
# neither password ever appears in its logs or in --check-config.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REDIS_USER=projector
REDIS_PASSWORD=pw-$RANDOM$RANDOM-right
export REDIS_USER REDIS_PASSWORD LB_TEST_WRONG_PASSWORD=pw-$RANDOM$RANDOM-wrong
start_services
# shellcheck disable=SC2016 # ${...} is for the projector's configuration
write_config "$T_DIR/projector.yaml" "" '  user: projector
  password: ${REDIS_PASSWORD}'
# shellcheck disable=SC2016
GROUP=lb-wrong write_config "$T_DIR/wrong.yaml" "" '  user: projector
  password: ${LB_TEST_WRONG_PASSWORD}'

produce -n 20000 --seed 71 --boards 10 --players 1000 --start "$START" --days 3
start_projector projector "$T_DIR/projector.yaml"
wait_caught_up 60
verify
assert_committed_at_end
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"
ok "authenticated as projector on every node"

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

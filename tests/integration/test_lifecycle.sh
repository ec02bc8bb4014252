#!/usr/bin/env bash
# The projector's lifecycle under load:
#  - SIGTERM during a busy stream: exit 0 well within shutdown.drain_timeout,
#    the committed offsets stop mid-stream, and a restart continues without
#    loss or double count (sum boards would show either);
#  - SIGHUP re-reads log.level from the file;
#  - log.format json gives one JSON object per line;
#  - a static member fenced by a second process with the same
#    group.instance.id exits 1 with the reason.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
export GROUP=lb-lifecycle
config() { # LEVEL
    DRAIN_TIMEOUT=10s write_config "$T_DIR/projector.yaml" "$MODE_PROFILES
log:
  level: $1
  format: json"
}
config info

# a stream that outlasts anything below (a minute at 10,000 events/s),
# stopped by the test right after the SIGTERM: a 60,000-event one could end
# first wherever the pod's start and stop took long
load_start -n 600000 --seed 101 "${MODE_GEN[@]}" --rate 10000
start_projector projector "$T_DIR/projector.yaml"
wait_log "$T_DIR/projector.log" "assigned" 30
sleep 2

# SIGHUP: debug from the file, without a restart
grep -q '"level":"debug"' "$T_DIR/projector.log" && fail "debug lines before SIGHUP"
config debug
kill -HUP "$PROJECTOR_PID"
wait_log "$T_DIR/projector.log" 'log level is now debug' 10
ok "SIGHUP re-read log.level"

# SIGTERM mid-stream
start=$SECONDS
stop_projector "$PROJECTOR_PID" 15
elapsed=$((SECONDS - start))
[[ $STOP_STATUS == 0 ]] || fail "SIGTERM: exit $STOP_STATUS, not 0"
((elapsed <= 10)) || fail "SIGTERM took ${elapsed}s, more than the 10s drain timeout"
lag=$(group_lag)
load_stop "SIGTERM (not a busy stop)"
ok "SIGTERM during the stream: exit 0 in ${elapsed}s, $lag events left uncommitted"

# every line so far is a JSON object with the four fields
bad=$(grep -vc '^{"ts":"[0-9T:.-]*Z","level":"[a-z]*","component":"[a-z]*","msg":".*"}$' \
    "$T_DIR/projector.log" || true)
((bad == 0)) || fail "$bad log lines are not JSON objects of the expected shape"
ok "log.format json: every line is one JSON object"

config info
start_projector projector "$T_DIR/projector.yaml"
wait_caught_up 120
verify "${MODE_ORACLE[@]}"
assert_committed_at_end
ok "the restart continued exactly where the committed offsets said: no loss, no double count"
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"

# static membership: a second process with the same group.instance.id
# fences the first, which must stop with a clear error and exit 1
INSTANCE_ID=pod-0 write_config "$T_DIR/static.yaml"
start_projector static-a "$T_DIR/static.yaml"
pod_a=$PROJECTOR_PID
wait_log "$T_DIR/static-a.log" "assigned" 30
start_projector static-b "$T_DIR/static.yaml"
pod_b=$PROJECTOR_PID
deadline=$((SECONDS + 60))
while kill -0 "$pod_a" 2>/dev/null && kill -0 "$pod_b" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.5
done
if ! kill -0 "$pod_a" 2>/dev/null; then fenced=$pod_a name=static-a other=$pod_b; else fenced=$pod_b name=static-b other=$pod_a; fi
kill -0 "$fenced" 2>/dev/null && fail "neither member was fenced within 60 s"
status=0
wait "$fenced" || status=$?
[[ $status == 1 ]] || fail "the fenced member exited $status, not 1"
grep -q 'fatal consumer error.*FENCED' "$T_DIR/$name.log" || fail "the fencing is not explained in the log"
ok "a fenced static member exits 1 and says why"
stop_projector "$other"

#!/usr/bin/env bash
# The integration harness's own exit paths (tests/integration/lib.sh): a test
# that fails, is interrupted (SIGINT, a terminal's Ctrl-C) or is terminated
# (SIGTERM, a CI runner's timeout) while its background producer runs leaves
# nothing of the producer running, neither its subshell nor the program the
# subshell runs (loadgen in the tests; a sleep here). And run.sh stops at an
# interrupted test instead of starting the next. No services.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/lb-harness.XXXXXX")
strays=()
cleanup() {
    local pid
    for pid in "${strays[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

# the inner test: a producer started the way the tests start one (a
# background subshell running a program, its PID in T_PIDS), then the end
# named by $1
cat >"$work/inner.sh" <<'EOF'
. "$HARNESS_DIR/lib.sh"
(
    sleep 600 &
    echo "$!" >"$HARNESS_WORK/child.pid"
    wait "$!"
) &
T_PIDS+=("$!")
until [[ -s $HARNESS_WORK/child.pid ]]; do sleep 0.05; done
case $1 in
    fail) fail "on purpose, with the producer running" ;;
    *) wait ;; # until a signal ends it
esac
EOF

gone() { # PID: no longer running (a zombie waiting for init counts as gone)
    ! kill -0 "$1" 2>/dev/null || [[ $(ps -o stat= -p "$1" 2>/dev/null) == Z* ]]
}

failures=0
for end in fail interrupt terminate; do
    rm -f "$work/child.pid"
    # a job of its own, as a test run from a terminal is (without job
    # control a background bash ignores SIGINT)
    set -m
    HARNESS_DIR=$here HARNESS_WORK=$work TMPDIR=$work bash "$work/inner.sh" "$end" \
        >"$work/inner.log" 2>&1 &
    inner=$!
    set +m
    for _ in $(seq 200); do
        [[ -s $work/child.pid ]] && break
        sleep 0.05
    done
    if [[ ! -s $work/child.pid ]]; then
        echo "FAIL $end: the inner test never started its producer" >&2
        kill -9 -- "-$inner" 2>/dev/null || true # its job: the test and what it started
        exit 1
    fi
    child=$(cat "$work/child.pid")
    strays+=("$child")
    expected=1
    if [[ $end != fail ]]; then
        sleep 0.2 # inside its wait
        kill "-$([[ $end == interrupt ]] && echo INT || echo TERM)" "$inner"
        expected=130
    fi
    status=0
    wait "$inner" || status=$?
    if ((status != expected)); then
        echo "FAIL $end: the inner test exited $status, not $expected" >&2
        failures=$((failures + 1))
    fi
    for _ in $(seq 50); do
        gone "$child" && break
        sleep 0.1
    done
    if gone "$child"; then
        echo "ok $end: exit $status, the producer's program (pid $child) stopped with it"
    else
        echo "FAIL $end: the producer's program (pid $child) still runs after the test ended" >&2
        failures=$((failures + 1))
    fi
done

# run.sh, beside two tests: the first interrupted (exit 130, as lib.sh
# makes it), the second must not start
mkdir "$work/runner"
cp "$here/run.sh" "$work/runner/"
echo 'exit 130' >"$work/runner/test_a.sh"
cat >"$work/runner/test_b.sh" <<'EOF'
: >"$HARNESS_WORK/b.ran"
EOF
status=0
HARNESS_WORK=$work bash "$work/runner/run.sh" test_a test_b >"$work/runner.out" 2>&1 || status=$?
if ((status != 130)) || [[ -e $work/b.ran ]]; then
    echo "FAIL run.sh: exit $status after an interrupted test (not 130), or the next test ran:" >&2
    cat "$work/runner.out" >&2
    failures=$((failures + 1))
else
    echo "ok run.sh: exit 130 at the interrupted test, the next one not started"
fi
((failures == 0))

#!/usr/bin/env bash
# The integration harness's own exit paths (tests/integration/lib.sh): a test
# that fails, is interrupted (SIGINT, a terminal's Ctrl-C) or is terminated
# (SIGTERM, a CI runner's timeout) while its background producer runs leaves
# nothing of the producer running, neither its subshell nor the program the
# subshell runs (loadgen in the tests; a sleep here). An interrupted test
# ends by the signal, so a loop running it stops too; and run.sh stops at a
# test a signal ended instead of starting the next; a second Ctrl-C does not
# cut the cleanup short. A test that passed is failed by a sanitizer's
# report in what it kept. No services.
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
# a cleanup step that takes a while (a test's own hook), for a second Ctrl-C
[[ $1 == interrupt-twice ]] && on_exit "sleep 1"
until [[ -s $HARNESS_WORK/child.pid ]]; do sleep 0.05; done
case $1 in
    fail) fail "on purpose, with the producer running" ;;
    pass) ;;
    # a tool's sanitizer report, its exit code the one the test expected
    sanitizer) echo "==1==ERROR: LeakSanitizer: detected memory leaks" >"$T_DIR/tool.out" ;;
    *) wait ;; # until a signal ends it
esac
EOF

gone() { # PID: no longer running (a zombie waiting for init counts as gone)
    ! kill -0 "$1" 2>/dev/null || [[ $(ps -o stat= -p "$1" 2>/dev/null) == Z* ]]
}

# start_job NAME CMD... - CMD as a job of its own, as a test run from a
# terminal is (without job control a background bash ignores SIGINT), once
# its inner test has started its producer; sets job (CMD's PID, its job's
# id) and child (the producer's program)
start_job() {
    local name=$1
    shift
    rm -f "$work/child.pid"
    set -m
    HARNESS_DIR=$here HARNESS_WORK=$work TMPDIR=$work "$@" >"$work/$name.log" 2>&1 &
    job=$!
    set +m
    for _ in $(seq 200); do
        [[ -s $work/child.pid ]] && break
        sleep 0.05
    done
    if [[ ! -s $work/child.pid ]]; then
        echo "FAIL $name: the inner test never started its producer" >&2
        kill -9 -- "-$job" 2>/dev/null || true # the test and what it started
        exit 1
    fi
    child=$(cat "$work/child.pid")
    strays+=("$child")
}

failures=0
for end in fail pass sanitizer interrupt interrupt-twice terminate; do
    start_job "$end" bash "$work/inner.sh" "$end"
    inner=$job
    expected=1
    [[ $end == pass ]] && expected=0
    if [[ $end == interrupt* || $end == terminate ]]; then
        sleep 0.2 # inside its wait
        if [[ $end == interrupt* ]]; then
            kill -INT "$inner"
            expected=130
            if [[ $end == interrupt-twice ]]; then
                # inside the cleanup's hook: a Ctrl-C, which reaches the
                # hook's program too (the producer, started in the
                # background, ignores SIGINT, as programs started that way do)
                sleep 0.3
                kill -INT -- "-$inner"
            fi
        else
            kill -TERM "$inner"
            expected=143
        fi
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

# a Ctrl-C at a loop running the test (the signal goes to the whole job):
# the test stops its producer and ends by SIGINT, so the loop (bash, which
# ends itself once its child has ended by the SIGINT it got too) does not
# go on to its next command
rm -f "$work/after.ran"
# shellcheck disable=SC2016 # $1 and $2 are the inner bash's
start_job loop bash -c 'bash "$1" interrupt; : >"$2"' loop "$work/inner.sh" "$work/after.ran"
loop=$job
sleep 0.2
kill -INT -- "-$loop" 2>/dev/null || true
status=0
wait "$loop" || status=$?
if ((status != 130)) || [[ -e $work/after.ran ]]; then
    echo "FAIL loop: exit $status (not 130), or it went on after the interrupted test" >&2
    failures=$((failures + 1))
else
    echo "ok loop: a Ctrl-C ended the loop with the test, not only the test"
fi

export LB_CACHE_DIR=$work/cache # the tests' seconds, not the real ones'

# run.sh, beside two tests: the first ended by a signal sent to it alone
# (as lib.sh ends a test it interrupted), the second must not start
mkdir "$work/runner"
cp "$here/run.sh" "$work/runner/"
echo 'kill -s TERM "$$"' >"$work/runner/test_a.sh"
cat >"$work/runner/test_b.sh" <<'EOF'
: >"$HARNESS_WORK/b.ran"
EOF
status=0
HARNESS_WORK=$work bash "$work/runner/run.sh" test_a test_b >"$work/runner.out" 2>&1 || status=$?
if ((status != 143)) || [[ -e $work/b.ran ]]; then
    echo "FAIL run.sh: exit $status after a terminated test (not 143), or the next test ran:" >&2
    cat "$work/runner.out" >&2
    failures=$((failures + 1))
else
    echo "ok run.sh: exit 143 at the terminated test, the next one not started"
fi

# run.sh --lanes 2: a failing test beside a passing one (both reported,
# exit 1); then the run terminated, and interrupted as a terminal's Ctrl-C
# does (the whole job: tests running in a lane ignore SIGINT), while two
# tests run: both get SIGTERM and stop, the third is not started, the run
# ends by the signal's status
echo 'exit 1' >"$work/runner/test_f.sh"
echo 'exit 0' >"$work/runner/test_g.sh"
status=0
bash "$work/runner/run.sh" --lanes 2 test_f test_g >"$work/lanes.out" 2>&1 || status=$?
if ((status != 1)) || ! grep -q '^FAIL test_f' "$work/lanes.out" || ! grep -q '^PASS test_g' "$work/lanes.out"; then
    echo "FAIL run.sh --lanes: exit $status (not 1), or a test's line is missing:" >&2
    cat "$work/lanes.out" >&2
    failures=$((failures + 1))
else
    echo "ok run.sh --lanes: a failure beside a pass, both reported, exit 1"
fi
for t in c d; do
    cat >"$work/runner/test_$t.sh" <<EOF2
sleep 600 &
sleeping=\$!
# its cleanup takes a while, as stopping Kafka and Redis does
trap 'kill "\$sleeping"; sleep 1; : >"\$HARNESS_WORK/$t.stopped"; exit 143' TERM
: >"\$HARNESS_WORK/$t.started"
wait
EOF2
done
# shellcheck disable=SC2016 # expanded by the test
echo ': >"$HARNESS_WORK/e.ran"' >"$work/runner/test_e.sh"
for how in TERM INT TERM-to-the-job; do
    rm -f "$work"/[cde].*
    start=$SECONDS
    set -m
    HARNESS_WORK=$work bash "$work/runner/run.sh" --lanes 2 test_c test_d test_e \
        >"$work/lanes-$how.out" 2>&1 &
    run=$!
    set +m
    until [[ -e $work/c.started && -e $work/d.started ]] || ((SECONDS - start > 10)); do
        sleep 0.05
    done
    expected=143
    case $how in
        INT) # a Ctrl-C: the whole job
            kill -INT -- "-$run"
            expected=130
            ;;
        TERM) kill -TERM "$run" ;;
        *) kill -TERM -- "-$run" ;;
    esac
    for _ in $(seq 100); do
        gone "$run" && break
        sleep 0.1
    done
    if ! gone "$run"; then
        echo "FAIL run.sh --lanes, SIG$how: still running 10 s after the signal" >&2
        kill -9 -- "-$run" 2>/dev/null || true # the job: run.sh, its lanes, its tests
        failures=$((failures + 1))
        continue
    fi
    status=0
    wait "$run" || status=$?
    if ((status != expected)) || [[ ! -e $work/c.stopped || ! -e $work/d.stopped || -e $work/e.ran ]]; then
        echo "FAIL run.sh --lanes, SIG$how: exit $status (not $expected), a running test not stopped, or the next one started:" >&2
        kill -9 -- "-$run" 2>/dev/null || true # what of the job is left
        cat "$work/lanes-$how.out" >&2
        failures=$((failures + 1))
    else
        echo "ok run.sh --lanes, SIG$how: exit $expected, both running tests stopped, the next not started"
    fi
done

# --lanes: the slowest tests of the last run go first (the seconds file is
# this run's seconds merged over the last run's)
for t in h i j; do
    # shellcheck disable=SC2016 # expanded by the test
    printf 'echo %s >>"$HARNESS_WORK/order"; sleep 0.3\n' "$t" >"$work/runner/test_$t.sh"
done
printf 'test_h 1\ntest_j 100\ntest_i 90\ntest_x 7\n' >"$LB_CACHE_DIR/integration-seconds"
status=0
HARNESS_WORK=$work bash "$work/runner/run.sh" --lanes 2 test_h test_i test_j >"$work/order.out" 2>&1 || status=$?
if ((status != 0)) || [[ $(tail -n 1 "$work/order") != h ]] ||
    ! grep -q '^test_x 7$' "$LB_CACHE_DIR/integration-seconds" ||
    grep -q '^test_j 100$' "$LB_CACHE_DIR/integration-seconds" ||
    [[ $(grep -c '^test_[hij] [0-9]*$' "$LB_CACHE_DIR/integration-seconds") != 3 ]]; then
    echo "FAIL run.sh --lanes: exit $status, started in the order $(tr '\n' ' ' <"$work/order") (h last expected), seconds file:" >&2
    cat "$LB_CACHE_DIR/integration-seconds" >&2
    failures=$((failures + 1))
else
    echo "ok run.sh --lanes: the slowest of the last run first, the seconds file merged"
fi
# an empty seconds file (cleared by hand) changes nothing but the order
: >"$LB_CACHE_DIR/integration-seconds"
status=0
bash "$work/runner/run.sh" --lanes 2 test_f test_g >"$work/empty.out" 2>&1 || status=$?
if ((status != 1)) || ! grep -q '^FAIL test_f' "$work/empty.out"; then
    echo "FAIL run.sh --lanes with an empty seconds file: exit $status (not 1):" >&2
    cat "$work/empty.out" >&2
    failures=$((failures + 1))
else
    echo "ok run.sh --lanes: an empty seconds file, every test run"
fi
# a Ctrl-C at a loop running run.sh --lanes: the run ends by SIGINT, so the
# loop stops too, as it does for one test
rm -f "$work"/[cde].* "$work/after.ran"
start=$SECONDS
set -m
# shellcheck disable=SC2016 # $1 and $2 are the inner bash's
HARNESS_WORK=$work bash -c 'bash "$1" --lanes 2 test_c test_d test_e; : >"$2"' loop \
    "$work/runner/run.sh" "$work/after.ran" >"$work/lanes-loop.out" 2>&1 &
loop=$!
set +m
until [[ -e $work/c.started && -e $work/d.started ]] || ((SECONDS - start > 10)); do
    sleep 0.05
done
kill -INT -- "-$loop" 2>/dev/null || true
for _ in $(seq 100); do
    gone "$loop" && break
    sleep 0.1
done
status=0
if gone "$loop"; then
    wait "$loop" || status=$?
else
    kill -9 -- "-$loop" 2>/dev/null || true
fi
if ((status != 130)) || [[ -e $work/after.ran ]]; then
    echo "FAIL run.sh --lanes in a loop: exit $status (not 130), or the loop went on after a Ctrl-C" >&2
    failures=$((failures + 1))
else
    echo "ok run.sh --lanes in a loop: a Ctrl-C ended the loop with the run"
fi
((failures == 0))

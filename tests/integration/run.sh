#!/usr/bin/env bash
# Runs every integration test (tests/integration/test_*.sh), each with its
# own real Redis Cluster and Kafka broker. Prints one line per test and
# exits non-zero if any failed. A test that cannot start its services fails;
# nothing is skipped. A test ended by SIGINT or SIGTERM (lib.sh stops what it
# started, then ends by the same signal) ends the run, with its status (130
# or 143).
#
#   tests/integration/run.sh [--lanes N] [test_name...]
#
# --lanes N runs N tests at a time (each lane takes the next test not yet
# taken, the slowest of the last run first, or for a test this machine has
# not run yet, of tests/integration/seconds: a fresh-clone run of the test
# command, CI63, 2 lanes on 2 cores; lb_free_port_base reserves the ports
# it gives a test until the test ends, so two lanes never start services on
# the same ports). A test's output is printed whole when it ends. SIGINT
# or SIGTERM to the run is passed on to the tests running, as SIGTERM (tests
# started in the background ignore SIGINT).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lanes=1
if [[ ${1-} == --lanes ]]; then
    lanes=${2-}
    [[ $lanes =~ ^[1-9][0-9]*$ ]] || {
        echo "run.sh: --lanes takes a number of tests at a time, not '$lanes'" >&2
        exit 2
    }
    shift 2
fi
tests=("$@")
if ((${#tests[@]} == 0)); then
    for t in "$here"/test_*.sh; do
        tests+=("$(basename "$t" .sh)")
    done
fi
# each test's seconds in the last run, for the order of the next
seconds_file=${LB_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/leaderboard-projector}/integration-seconds
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run_test TEST: runs it (its output to stdout), prints its line, records its
# seconds and status under $work/TEST; returns its status
run_test() {
    local t=$1 start=$SECONDS status=0
    mkdir -p "$work/$t"
    if ((lanes > 1)); then
        bash "$here/$t.sh" >"$work/$t/out" 2>&1 &
        local pid=$!
        echo "$pid" >"$work/$t/pid"
        # a signal that came before the pid file was there: on_signal did
        # not see this test
        [[ -e $work/.stop ]] && kill -TERM "$pid" 2>/dev/null
        # the lane's trapped TERM ends wait early: wait until the test ends
        while ! wait "$pid" && kill -0 "$pid" 2>/dev/null; do :; done
        wait "$pid" || status=$?
    else
        bash "$here/$t.sh" || status=$?
    fi
    local word=PASS
    ((status == 0)) || word=FAIL
    echo "$status" >"$work/$t/status"
    echo "$t $((SECONDS - start))" >"$work/$t/seconds"
    if ((lanes > 1)); then
        # shellcheck disable=SC2016 # expanded by sh, from its arguments
        flock "$work/.print" sh -c 'cat "$1"; printf "%s %s (%ds)\n" "$2" "$3" "$4"' _ \
            "$work/$t/out" "$word" "$t" $((SECONDS - start))
    else
        printf '%s %s (%ds)\n' "$word" "$t" $((SECONDS - start))
    fi
    return "$status"
}

# interrupted or terminated: the run stops too. A Ctrl-C reaches this shell
# as well and bash ends it once the test has; a signal sent to the test
# alone (a stuck test killed by hand) would otherwise end one test and the
# next would start
stopped() {
    local status=$1
    ((status == 130 || status == 143))
}

if ((lanes == 1)); then
    for t in "${tests[@]}"; do
        run_test "$t"
        status=$?
        if stopped "$status"; then
            printf '%s ended by a signal (status %d): the tests after it were not run\n' "$t" "$status"
            exit "$status"
        fi
    done
else
    known=/dev/null defaults=/dev/null
    [[ -s $seconds_file ]] && known=$seconds_file
    [[ -s $here/seconds ]] && defaults=$here/seconds
    mapfile -t ordered < <(printf '%s\n' "${tests[@]}" |
        awk 'FILENAME == ARGV[1] { s[$1] = $2; next }
            FILENAME == ARGV[2] { if (!($1 in s)) s[$1] = $2; next }
            { print (($1 in s) ? s[$1] : 1e9), $1 }' \
            "$known" "$defaults" - | sort -k1,1nr -k2,2 | awk '{ print $2 }')
    ((${#ordered[@]} == ${#tests[@]})) && tests=("${ordered[@]}")
    lane() {
        # a Ctrl-C or SIGTERM to the whole job reaches the lanes too: they
        # stay until their tests have stopped (the tests, started in the
        # background, ignore SIGINT; lib.sh stops them on SIGTERM)
        trap '' INT
        trap : TERM
        local t
        for t in "${tests[@]}"; do
            [[ -e $work/.stop ]] && return 0
            mkdir "$work/$t.taken" 2>/dev/null || continue
            run_test "$t"
            if stopped $?; then
                touch "$work/.stop"
                return 0
            fi
        done
    }
    on_signal() {
        signalled=$1
        touch "$work/.stop"
        local p
        for p in "$work"/*/pid; do
            [[ -e $p && ! -e ${p%/pid}/status ]] && kill -TERM "$(cat "$p")" 2>/dev/null
        done
    }
    signalled=0
    trap "on_signal 130" INT
    trap "on_signal 143" TERM
    pids=()
    for ((i = 0; i < lanes; i++)); do
        lane &
        pids+=($!)
    done
    for p in "${pids[@]}"; do
        while ! wait "$p"; do # a trapped signal ends wait early: wait again
            kill -0 "$p" 2>/dev/null || break
        done
    done
    trap - INT TERM
    if ((signalled)); then
        printf "the run was ended by a signal (status %d): the tests not started were not run\n" "$signalled"
        # by SIGINT itself, as lib.sh ends a test: a loop running this
        # stops too
        rm -rf "$work"
        trap - EXIT
        ((signalled == 130)) && kill -s INT $$
        exit "$signalled"
    fi
fi

failed=()
ran=0
for t in "${tests[@]}"; do
    [[ -e $work/$t/status ]] || continue
    ran=$((ran + 1))
    status=$(cat "$work/$t/status")
    ((status == 0)) || failed+=("$t")
    if stopped "$status"; then
        printf '%s ended by a signal (status %d): the tests not started were not run\n' "$t" "$status"
        exit "$status"
    fi
done
if ((ran)) && mkdir -p "$(dirname "$seconds_file")"; then # this run's first, then the rest
    tmp=$(mktemp "$seconds_file.XXXXXX") &&
        { cat "$work"/*/seconds; cat "$seconds_file" 2>/dev/null || true; } | awk '!seen[$1]++' >"$tmp" &&
        mv -f "$tmp" "$seconds_file"
fi
if ((${#failed[@]})); then
    printf '%d of %d integration tests failed: %s\n' ${#failed[@]} ${#tests[@]} "${failed[*]}"
    exit 1
fi
if ((ran < ${#tests[@]})); then
    printf '%d of %d integration tests were not run\n' $((${#tests[@]} - ran)) ${#tests[@]}
    exit 1
fi
printf 'all %d integration tests passed\n' ${#tests[@]}

#!/usr/bin/env bash
# Runs every integration test (tests/integration/test_*.sh), one after the
# other, each with its own real Redis Cluster and Kafka broker. Prints one
# line per test and exits non-zero if any failed. A test that cannot start
# its services fails; nothing is skipped. A test ended by SIGINT or SIGTERM
# (lib.sh stops what it started, then ends by the same signal) ends the run,
# with its status (130 or 143).
#
#   tests/integration/run.sh [test_name...]
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tests=("$@")
if ((${#tests[@]} == 0)); then
    for t in "$here"/test_*.sh; do
        tests+=("$(basename "$t" .sh)")
    done
fi

failed=()
for t in "${tests[@]}"; do
    start=$SECONDS
    status=0
    bash "$here/$t.sh" || status=$?
    if ((status == 0)); then
        printf 'PASS %s (%ds)\n' "$t" $((SECONDS - start))
    else
        printf 'FAIL %s (%ds)\n' "$t" $((SECONDS - start))
        failed+=("$t")
    fi
    # interrupted or terminated: the run stops too. A Ctrl-C reaches this
    # shell as well and bash ends it once the test has; a signal sent to
    # the test alone (a stuck test killed by hand) would otherwise end one
    # test and the next would start
    if ((status == 130 || status == 143)); then
        printf '%s ended by a signal (status %d): the tests after it were not run\n' "$t" "$status"
        exit "$status"
    fi
done
if ((${#failed[@]})); then
    printf '%d of %d integration tests failed: %s\n' ${#failed[@]} ${#tests[@]} "${failed[*]}"
    exit 1
fi
printf 'all %d integration tests passed\n' ${#tests[@]}

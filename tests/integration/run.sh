#!/usr/bin/env bash
# Runs every integration test (tests/integration/test_*.sh), one after the
# other, each with its own real Redis Cluster and Kafka broker. Prints one
# line per test and exits non-zero if any failed. A test that cannot start
# its services fails; nothing is skipped. An interrupted test (it exits 130
# on SIGINT or SIGTERM) ends the run, with status 130.
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
    # interrupted (lib.sh exits 130 on SIGINT and SIGTERM, having stopped
    # what it started): the run stops too, or a Ctrl-C would end one test
    # and the next would start
    if ((status == 130)); then
        printf 'interrupted during %s: the tests after it were not run\n' "$t"
        exit 130
    fi
done
if ((${#failed[@]})); then
    printf '%d of %d integration tests failed: %s\n' ${#failed[@]} ${#tests[@]} "${failed[*]}"
    exit 1
fi
printf 'all %d integration tests passed\n' ${#tests[@]}

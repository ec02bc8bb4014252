#!/usr/bin/env bash
# Runs every integration test (tests/integration/test_*.sh), one after the
# other, each with its own real Redis Cluster and Kafka broker. Prints one
# line per test and exits non-zero if any failed. A test that cannot start
# its services fails; nothing is skipped.
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
    if bash "$here/$t.sh"; then
        printf 'PASS %s (%ds)\n' "$t" $((SECONDS - start))
    else
        printf 'FAIL %s (%ds)\n' "$t" $((SECONDS - start))
        failed+=("$t")
    fi
done
if ((${#failed[@]})); then
    printf '%d of %d integration tests failed: %s\n' ${#failed[@]} ${#tests[@]} "${failed[*]}"
    exit 1
fi
printf 'all %d integration tests passed\n' ${#tests[@]}

#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang, ASan + UBSan) and runs
# each for a fixed time. A crash, leak, timeout or sanitizer report fails
# the run and leaves the input that caused it in the artifacts directory:
# make it a unit test and commit it to the target's corpus.
#
#   ops/fuzz.sh [--seconds N] [--jobs J] [TARGET...]
#
# N defaults to 10 per target (ops/test.sh's short run); run long by hand,
# e.g. ops/fuzz.sh --seconds 3600 fuzz_event. Seeds are read from the source
# tree (never written): the unit tests' payloads, schemas, configs and
# captured Redis replies; what the fuzzer finds new goes to a scratch corpus
# under build-fuzz/ that later runs start from.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=10
jobs=$(nproc 2>/dev/null || echo 2)
targets=()
while (($#)); do
    case $1 in
    --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    fuzz_*) targets+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ $seconds =~ ^[0-9]+$ ]] || { echo "fuzz.sh: --seconds '$seconds' is not a number" >&2; exit 2; }
((${#targets[@]})) || targets=(fuzz_event fuzz_avsc fuzz_config fuzz_reply fuzz_node)

# Seed directories of each target, in the source tree.
seeds() {
    case $1 in
    fuzz_event) printf '%s\n' tests/fuzz/corpus/event ;;
    fuzz_avsc) printf '%s\n' schemas tests/unit/schemas tests/fuzz/findings ;;
    fuzz_config) printf '%s\n' config ;;
    fuzz_reply) printf '%s\n' tests/fuzz/corpus/reply tests/unit/topology ;;
    fuzz_node) printf '%s\n' tests/fuzz/corpus/node ;;
    *) echo "fuzz.sh: no target '$1'" >&2; return 1 ;;
    esac
}

cd "$repo"
build=$repo/build-fuzz
CC=clang cmake -S . -B "$build" -DLB_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
    >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

artifacts=$build/artifacts
mkdir -p "$artifacts"
failed=()
for t in "${targets[@]}"; do
    mapfile -t dirs < <(seeds "$t")
    scratch=$build/corpus/$t
    mkdir -p "$scratch"
    log=$build/$t.log
    # The scratch corpus first: libFuzzer writes new inputs to the first directory.
    if LB_SOURCE_DIR=$repo ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$build/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/$t-" \
        "$scratch" "${dirs[@]}" >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        echo "$t: ${runs:-?} inputs in ${seconds}s, no finding"
    else
        echo "$t: FAILED; the last lines of $log:" >&2
        tail -n 30 "$log" >&2
        failed+=("$t")
    fi
done
if ((${#failed[@]})); then
    echo "fuzz.sh: findings in ${failed[*]}; inputs in $artifacts" >&2
    exit 1
fi

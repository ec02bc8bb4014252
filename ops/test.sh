#!/usr/bin/env bash
# Runs every test the project has, the way CI does (.ci/run calls this):
#
#   1. installs what is missing (Debian packages, Kafka jars; idempotent)
#   2. checks formatting with clang-format (.clang-format)
#   3. builds with warnings as errors (hardened: _FORTIFY_SOURCE, stack
#      protector, full RELRO), checks what cmake --install lays out, and runs
#      the unit tests (label "unit"; those labelled "redis" start their own
#      redis-server on a free port)
#   4. builds the unit tests with AddressSanitizer + UndefinedBehaviorSanitizer
#      (leak checking on) and runs them
#   5. builds the libFuzzer targets (tests/fuzz, clang) and runs each for
#      6 s (ops/fuzz.sh; longer by hand)
#   6. (in the integration tests) builds the previous release's projector
#      once into the cache, for the rolling-deploy test
#   7. runs the integration tests (CTest label "integration", one scenario
#      per script), two at a time, against a real Redis Cluster and a real
#      Kafka broker, started and stopped by the tests themselves, with the
#      sanitizer build of the projector and tools (a memory error, undefined
#      behaviour or leak anywhere on those paths fails the test)
#   8. runs the chaos soak for two minutes on the release build
#      (ops/chaos.sh; longer runs by hand, see the README)
#
# Build directories: build/, build-asan/ and build-fuzz/ (reused when present).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
jobs=$(nproc 2>/dev/null || echo 2)
step() { printf '\n==> %s (%d s in)\n' "$*" "$SECONDS"; }

step "dependencies"
ops/install-deps.sh

step "clang-format"
mapfile -t sources < <(git ls-files -co --exclude-standard '*.c' '*.h')
clang-format --dry-run --Werror "${sources[@]}"
echo "${#sources[@]} files formatted"

step "shellcheck"
mapfile -t scripts < <(git ls-files -co --exclude-standard '*.sh' .ci/run)
# a few scripts per call, one call per core: each test sources lib.sh and
# services.sh, checked again for it (97 s in one call on two cores, 51 s so)
printf '%s\n' "${scripts[@]}" | xargs -P "$jobs" -n 4 shellcheck -x
echo "${#scripts[@]} scripts clean"
# the runbooks' operator procedures, which the tests run as written (the
# variables the operator sets before them are not assigned there: SC2153)
procedures=$(mktemp -d)
for runbook in ops/runbooks/*.md; do
    grep -q 'procedure: begin' "$runbook" || continue
    out=$procedures/$(basename "$runbook" .md).sh
    printf '#!/usr/bin/env bash\n' >"$out"
    awk '/<!-- procedure: begin -->/ { on = 1; next }
         /<!-- procedure: end -->/ { on = 0 }
         on && /^```sh$/ { code = 1; next }
         on && /^```$/ { code = 0; next }
         on && code' "$runbook" >>"$out"
    shellcheck -e SC2153 "$out" || { echo "$runbook: its procedure's shell is not clean" >&2; exit 1; }
done
echo "$(find "$procedures" -name '*.sh' | wc -l) runbook procedures clean"
rm -rf "$procedures"

step "build (warnings are errors)"
cmake -S . -B build -DLB_WERROR=ON >/dev/null
cmake --build build -j "$jobs"

step "install layout (cmake --install, as the Dockerfile uses it)"
staged=$(mktemp -d)
trap 'rm -rf "$staged"' EXIT
cmake --install build --prefix "$staged" >/dev/null
for f in bin/projector bin/replay bin/lbread bin/lbadmin \
    share/leaderboard-projector/schemas/score_event.avsc \
    share/leaderboard-projector/config/projector.example.yaml \
    share/man/man1/projector.1 share/man/man1/replay.1 share/man/man1/lbread.1 \
    share/man/man1/lbadmin.1; do
    [[ -f $staged/$f ]] || { echo "cmake --install did not install $f" >&2; exit 1; }
done
echo "installed: $(cd "$staged" && find . -type f | wc -l) files"

step "unit tests"
# three at a time per core: they mostly wait (redis-servers starting,
# sleeps and timeouts under test): 83 s one per core, 26 s three per core
# on 2 cores (the ASan build 80 s and 34 s)
ctest --test-dir build -L "unit|redis" -j "$((jobs * 3))" --output-on-failure

step "unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -DLB_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir build-asan -L "unit|redis" -j "$((jobs * 3))" --output-on-failure

step "fuzz targets, 6 s each (libFuzzer, ASan + UBSan)"
ops/fuzz.sh --seconds 6 --jobs "$jobs"

step "integration tests (real Redis Cluster, real Kafka, sanitizer build)"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    LB_BIN=$repo/build-asan/bin tests/integration/run.sh --lanes 2

step "chaos soak, short (release build): pods, masters, Kafka and a whole shard lost under load"
LB_BIN=$repo/build/bin ops/chaos.sh --duration 120 --seed 1

step "all tests passed"

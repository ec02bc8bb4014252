#!/usr/bin/env bash
# Builds the projector of an earlier release (a commit of this repository)
# once into the cache and prints the directory holding it:
#
#   ops/build-release.sh COMMIT
#
# Used by the rolling-deploy test (a pod of the previous release beside one
# of this release on the same boards); also handy to compare releases by hand.
# Cache: $LB_CACHE_DIR/releases/<commit> (see ops/services.sh).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ $# == 1 ]] || {
    echo "usage: ops/build-release.sh COMMIT" >&2
    exit 2
}
commit=$(git -C "$repo" rev-parse --verify --quiet "$1^{commit}") || {
    echo "build-release: $1 is not a commit of this repository (a shallow clone? run git fetch --unshallow)" >&2
    exit 2
}
cache=${LB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/leaderboard-projector}/releases/$commit
if [[ -x $cache/bin/projector ]]; then
    echo "$cache/bin"
    exit 0
fi
mkdir -p "$(dirname "$cache")"
work=$(mktemp -d "$cache.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
git -C "$repo" archive "$commit" | tar -x -C "$work/src"
echo "build-release: building the projector of ${commit:0:12} (once; cached in $cache)" >&2
# its own default build type; warnings of a newer compiler are not errors here
cmake -S "$work/src" -B "$work/build" -DLB_WERROR=OFF >"$work/cmake.log" 2>&1 ||
    { cat "$work/cmake.log" >&2; exit 1; }
cmake --build "$work/build" -j "$(nproc)" --target projector >"$work/build.log" 2>&1 ||
    { tail -n 30 "$work/build.log" >&2; exit 1; }
mkdir -p "$work/bin"
cp "$work/build/bin/projector" "$work/bin/"
rm -rf "$work/src" "$work/build" "$work"/*.log
mv "$work" "$cache"
trap - EXIT
echo "$cache/bin"

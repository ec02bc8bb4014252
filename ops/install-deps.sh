#!/usr/bin/env bash
# Install what building and testing the project needs, skipping whatever is
# already there: Debian packages (apt) and the Kafka broker jars (Maven, into
# the cache dir, see lb_fetch_kafka_jars in ops/services.sh). Safe to run
# again; takes well under 2 s when nothing is missing.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

packages=(
    build-essential cmake pkg-config git
    librdkafka-dev libavro-dev libyaml-dev libhiredis-dev libcmocka-dev libmicrohttpd-dev
    libssl-dev libcurl4-openssl-dev libjansson-dev
    redis-server redis-tools
    clang clang-format shellcheck libclang-rt-14-dev
    help2man # the man pages, generated from each tool's --help at build time
    curl openssl
    maven
)
# Any Java will do for the broker; only pull one in if there is none.
command -v java >/dev/null 2>&1 || packages+=(default-jre-headless)

installed() {
    local status
    status=$(dpkg -s "$1" 2>/dev/null) || return 1
    [[ $status == *$'\nStatus: install ok installed'* || $status == 'Status: install ok installed'* ]]
}

missing=()
for p in "${packages[@]}"; do
    installed "$p" || missing+=("$p")
done

if ((${#missing[@]} > 0)); then
    sudo=()
    if ((EUID != 0)); then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "install-deps: missing packages (${missing[*]}) and not root, no sudo" >&2
            exit 1
        fi
        sudo=(sudo)
    fi
    echo "install-deps: installing ${missing[*]}" >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${missing[@]}" >&2
fi

# shellcheck source=ops/services.sh
. "$here/services.sh"
lib=$(lb_fetch_kafka_jars)
jars=$(find "$lib" -maxdepth 1 -name '*.jar' | wc -l)
promtool=$(lb_fetch_promtool)

if ((${#missing[@]} > 0)); then
    got="installed: ${missing[*]}"
else
    got="nothing to install"
fi
echo "install-deps: ${#packages[@]} packages ok ($got); kafka $_lb_kafka_version: $jars jars in $lib; $promtool"

#!/usr/bin/env bash
# projector --check-config against the start it stands for, no services:
#  - every file in the table below is refused by --check-config and by
#    --config alike: exit 3, one line "file:line: what is wrong" (the same
#    line both ways), before anything connects (the brokers and nodes named
#    are 127.0.0.1:1, where nothing listens);
#  - the effective configuration it prints loads as is and prints the same
#    again, for config/projector.example.yaml and config/local.yaml;
#  - the command line: both --config and --check-config, a stray argument,
#    an unknown option each exit 2 naming it.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${LB_BIN:-$repo/build/bin}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
    echo "test_check_config: FAIL: $*" >&2
    exit 1
}
checked=0

cp "$repo/schemas/score_event.avsc" "$dir/"
kafka='kafka:
  brokers: 127.0.0.1:1
  topics: [scores]'
rest='input:
  schemas: {1: score_event.avsc}
redis:
  nodes: ["127.0.0.1:1"]'

# name | line | what the message must say | the file
cases=(
    "auto-commit|4|enable.auto.commit must stay false|$kafka
  enable.auto.commit: \"true\"
$rest"
    "auto-store|4|enable.auto.offset.store must stay false|$kafka
  enable.auto.offset.store: \"true\"
$rest"
    "cooperative|4|cooperative-sticky is not supported|$kafka
  partition.assignment.strategy: cooperative-sticky
$rest"
    "unknown-property|4|'foo.bar' is not a librdkafka property|$kafka
  foo.bar: x
$rest"
    "refused-value|4|session.timeout.ms: Invalid value|$kafka
  session.timeout.ms: soon
$rest"
    "producer-without-producer|4|kafka.dlq_topic is not set|$kafka
  linger.ms: 5
$rest"
    "empty-brokers|1|brokers is empty|kafka: {brokers, topics}
$rest"
    "missing-brokers|1|kafka: 'brokers' is required|kafka:
  topics: [scores]
$rest"
    "schema-id-without-file|4|schemas: give schema id 1's .avsc file|$kafka
input: {schemas: {1}}
redis: {nodes: [\"127.0.0.1:1\"]}"
    "bare-without-writer-schema|5|bare input needs exactly one 'writer_schema'|$kafka

input:
  format: bare
redis: {nodes: [\"127.0.0.1:1\"]}"
    "nameless-profile|9|name is empty|$kafka
$rest
profiles:
  - name:
    match: \"*\""
    "schema-file-missing|5|nothing.avsc|$kafka
input:
  schemas: {1: nothing.avsc}
redis: {nodes: [\"127.0.0.1:1\"]}"
    "redacted-secret|8|password: \"<redacted>\" stands for a secret|$kafka
$rest
  password: <redacted>"
    "registry-password-file-missing|5|input.registry.password_file /nonexistent/pw: No such file|$kafka
input:
  registry: {url: \"http://127.0.0.1:1\", user: u, password_file: /nonexistent/pw}
redis: {nodes: [\"127.0.0.1:1\"]}"
    "kafka-ca-file-missing|4|ssl.ca.location: /nonexistent/ca.pem: No such file|$kafka
  ssl.ca.location: /nonexistent/ca.pem
$rest"
    "unknown-key|4|unknown key 'topic' in kafka|$kafka
  topic: scores
$rest"
)
for c in "${cases[@]}"; do
    IFS='|' read -r name line needle text <<<"$c"
    text=${c#*|*|*|}
    file=$dir/$name.yaml
    printf '%s\n' "$text" >"$file"
    for mode in --check-config --config; do
        status=0
        # a start that got past the check would run: it is stopped at 20 s
        timeout 20 "$BIN/projector" "$mode" "$file" >"$dir/out" 2>"$dir/err" || status=$?
        [[ $status == 3 ]] || fail "$name: projector $mode exited $status: $(head -n 3 "$dir/err")"
        [[ $(wc -l <"$dir/err") == 1 ]] || fail "$name: $mode said more than one line: $(cat "$dir/err")"
        grep -qF "$file:$line: " "$dir/err" || fail "$name: $mode does not point at line $line: $(cat "$dir/err")"
        grep -qF -- "$needle" "$dir/err" || fail "$name: $mode does not say '$needle': $(cat "$dir/err")"
        [[ ! -s $dir/out ]] || fail "$name: $mode printed to stdout: $(head -n 3 "$dir/out")"
    done
    checked=$((checked + 1))
done
echo "test_check_config: ${#cases[@]} invalid files refused alike by --check-config and --config (exit 3, file:line)"

for f in config/projector.example.yaml config/local.yaml; do
    "$BIN/projector" --check-config "$repo/$f" >"$dir/first.yaml" 2>"$dir/err" ||
        fail "$f: --check-config refused it: $(cat "$dir/err")"
    "$BIN/projector" --check-config "$dir/first.yaml" >"$dir/second.yaml" 2>"$dir/err" ||
        fail "$f: its printed configuration does not load: $(cat "$dir/err")"
    diff -u "$dir/first.yaml" "$dir/second.yaml" >"$dir/diff" ||
        fail "$f: printed, loaded and printed again, it differs: $(head -n 20 "$dir/diff")"
    if ! grep -q '^kafka:$' "$dir/first.yaml" || ! grep -q '^      daily: {ttl: 7d}$' "$dir/first.yaml"; then
        fail "$f: the output is not in the file's structure and units: $(head -n 20 "$dir/first.yaml")"
    fi
    checked=$((checked + 1))
done
echo "test_check_config: the effective configuration of both shipped files loads back and prints the same"

usage() { # NEEDLE ARGS...: projector ARGS exits 2 saying NEEDLE
    local needle=$1 status=0
    shift
    "$BIN/projector" "$@" >/dev/null 2>"$dir/err" || status=$?
    [[ $status == 2 ]] || fail "projector $*: exit $status, $(cat "$dir/err")"
    grep -qF -- "$needle" "$dir/err" || fail "projector $*: does not say '$needle': $(cat "$dir/err")"
    checked=$((checked + 1))
}
usage "not both" --config "$repo/config/local.yaml" --check-config "$repo/config/local.yaml"
usage "unexpected argument 'extra'" --check-config "$repo/config/local.yaml" extra
usage "unknown option '--bogus'" --bogus
usage "option '--config' needs a value" --config
usage "--config FILE is required"
echo "test_check_config: ok ($checked checks)"

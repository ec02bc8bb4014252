#!/usr/bin/env bash
# The command line of every tool, without services: each invocation in the
# table below ends with the exit code of the project's table (README, "Exit
# codes": 0 ok, 1 runtime, 2 usage, 3 configuration), within its time bound,
# with one line on the stream named that matches the regex (the bad argument
# named). Kafka and Redis are "unreachable" at 127.0.0.1:1, where nothing
# listens: lbadmin and loadgen must give up within --timeout + 2 s (the
# cases start at once, ASan builds included, on as few as 2 cores), saying
# so once; librdkafka's own lines may only come through the project's logger
# (logfmt, component=kafka), never raw. Cases run in parallel. The rows
# that need services are staged with real ones: 4 (retention gap) and 5
# (verify differs) in tests/integration/test_replay.sh, 6 (drain) in
# tests/integration/test_stalls.sh.
#
#   LB_BIN  the programs (default: build/bin)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${LB_BIN:-$repo/build/bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for program in projector replay lbread lbadmin loadgen lbbench; do
    [[ -x $bin/$program ]] || {
        echo "FAIL $bin/$program is not there: build first, or set LB_BIN" >&2
        exit 1
    }
done

# A valid configuration whose services are unreachable, one that is not
# YAML, and a path to no file.
cat >"$tmp/ok.yaml" <<YAML
kafka:
  brokers: 127.0.0.1:1
  group: lb-cli
  topics: [scores]
input:
  format: confluent
  schemas:
    1: $repo/schemas/score_event.avsc
redis:
  nodes: ["127.0.0.1:1"]
  command_timeout: 1s
profiles:
  - name: runs
    match: ["run:*"]
    order: asc
    retractions: reject
    score_max: 10000
    windows:
      alltime: {}
      custom:
        - {dim: patch}
    decay: {dim: patch, tax: 0.1}
  - name: points
    match: ["ach:*"]
    aggregation: sum
    windows:
      alltime: {}
      custom:
        - {dim: season}
  - name: default
    match: "*"
    windows:
      alltime: {}
      daily: {ttl: 7d}
      weekly: {ttl: 28d}
YAML
printf 'kafka:\n  brokers: [127.0.0.1:1\n  group: lb-cli\n' >"$tmp/bad.yaml"
# a kafka: section lbread never uses: its secret file unreadable to lbread
sed 's|^  group: lb-cli$|&\n  sasl.password_file: /nonexistent/kafka-password|' "$tmp/ok.yaml" >"$tmp/kafka.yaml"

K=127.0.0.1:1
unreachable="cannot reach the Kafka brokers 127\\.0\\.0\\.1:1 within"

# exit | at most (s) | stream | regex one line of the stream must match | command
# (@ok@, @bad@, @kafka@, @missing@: the files above; $K: brokers where nothing listens)
table=$(
    cat <<TABLE
0|3|out|^Exit status: 0 stopped cleanly, 1 fatal runtime error, 2 usage error,|projector --help
0|3|out|^Exit status: 0 done \(or --verify found no difference\); 1 failure|replay --help
0|3|out|^Exit status: 0 ok; 1 failure \(Redis unreachable or refusing\); 2 usage error|lbread --help
0|3|out|^Exit status: 0 ok; 1 failure \(the brokers not reached within the timeout,|lbadmin --help
0|3|out|^Exit status: 0 every event produced was delivered; 1 failure|loadgen --help
0|3|out|^SIGTERM or SIGINT stops it early|loadgen --help
0|3|out|^Exit status: 0 ok; 1 failure \(Kafka or Redis unreachable or refusing, no probe|lbbench --help
0|3|out|^e1-0[[:space:]]g[0-9]+[[:space:]]p[0-9]+[[:space:]]|loadgen --dry-run -n 3
1|5|err|^lbadmin: $unreachable 3 s|lbadmin offsets --brokers $K --topic scores --group g --timeout 3
1|12|err|^lbadmin: $unreachable 10 s|lbadmin offsets --brokers $K --topic scores --group g
1|5|err|^lbadmin: $unreachable 3 s|lbadmin dump --brokers $K --topic scores-dlq --timeout 3
1|5|err|^lbadmin: $unreachable 3 s|lbadmin results --brokers $K --topic scores-results --board b --window daily:2026-11-23 --timeout 3
1|4|err|^lbadmin: $unreachable 2 s|lbadmin wait-caught-up --brokers $K --topic scores --group g --timeout 2
1|4|err|^lbadmin: $unreachable 2 s|lbadmin create-topic --brokers $K --topic scores --timeout 2
1|4|err|^lbadmin: $unreachable 2 s|lbadmin redrive --brokers $K --topic scores-dlq --timeout 2
1|5|err|^loadgen: $unreachable 3 s|loadgen -n 1 --brokers $K --timeout 3
1|12|err|^loadgen: $unreachable 10 s|loadgen -n 1 --brokers $K
1|5|err|^replay: cannot reach Redis: .*127\.0\.0\.1:1|replay --config @ok@ --board g1
1|5|err|^lbread: .*cannot connect to Redis 127\.0\.0\.1:1|lbread --config @ok@ --board g1
1|5|err|^lbread: .*cannot connect to Redis 127\.0\.0\.1:1|lbread --config @kafka@ --board g1
3|3|err|kafka\.yaml:4: kafka property sasl\.password_file: /nonexistent/kafka-password: No such file|replay --config @kafka@ --board g1
2|3|err|^projector: unknown option '--bogus' \(see projector --help\)$|projector --bogus
2|3|err|^lbadmin: unknown option '--bogus' \(see lbadmin --help\)$|lbadmin --bogus
2|3|err|^lbadmin: unknown option '-Z' \(see lbadmin --help\)$|lbadmin dump --topic t -Z
2|3|err|^lbadmin: unknown subcommand 'frob'; the subcommands are create-topic, offsets, wait-caught-up, dump, results or redrive|lbadmin frob --topic t
2|3|err|^lbadmin: say what to do: create-topic, offsets, wait-caught-up, dump, results or redrive|lbadmin
2|3|err|^lbadmin: offsets needs --topic and --group \(see lbadmin --help\)$|lbadmin offsets
2|3|err|^lbadmin: wait-caught-up needs --group|lbadmin wait-caught-up --topic scores
2|3|err|^lbadmin: option '--topic' needs a value|lbadmin dump --topic
2|3|err|^lbadmin: --timeout wants seconds from 1 to 86400, not 'soon'|lbadmin dump --topic t --timeout soon
2|3|err|^lbadmin: --timeout wants seconds from 1 to 86400, not '1.5'|lbadmin dump --topic t --timeout 1.5
2|3|err|^lbadmin: --partitions wants a number from 1 to 100000, not '0'|lbadmin create-topic --topic t --partitions 0
2|3|err|^lbadmin: unexpected argument 'extra'|lbadmin dump --topic t extra
2|3|err|^lbadmin: results needs --board and --window|lbadmin results --topic r --board b
2|3|err|^lbadmin: --board and --window are for results, not dump|lbadmin dump --topic t --window daily:2026-11-23
2|3|err|^lbadmin: -X: kafka property no.such.property: |lbadmin dump --brokers $K --topic t -X no.such.property=1
2|3|err|^lbread: --board ID is required \(see lbread --help\)$|lbread --config @ok@
2|3|err|^lbread: --window 'daily:9223372036854775807-01-01': daily windows are written daily:YYYY-MM-DD|lbread --config @ok@ --board g1 --window daily:9223372036854775807-01-01
2|3|err|^lbread: --config FILE is required|lbread --board g1
2|3|err|^lbread: unknown option '--bogus'|lbread --config @ok@ --board g1 --bogus
2|3|err|^lbread: --top wants a number from 1 to 100000, not 'all'|lbread --config @ok@ --board g1 --top all
2|3|err|^lbread: --shards lists where the board lives: it takes no --around \(see lbread --help\)$|lbread --config @ok@ --board g1 --shards --around p1
2|3|err|^lbread: --shards lists where the board lives: it takes no --window \(see lbread --help\)$|lbread --config @ok@ --board g1 --window alltime --shards
2|3|err|^lbread: --window 'hourly': there is no window kind 'hourly'; the kinds are alltime, daily, weekly, monthly and custom .*windows of board 'g1' \(profile 'default'\) are alltime, daily:YYYY-MM-DD, weekly:YYYY-Www$|lbread --config @ok@ --board g1 --window hourly
2|3|err|^lbread: --window 'daily:2026-05-04': board 'ach:1' \(profile 'points'\) has no daily windows; it has alltime, season:VALUE$|lbread --config @ok@ --board ach:1 --window daily:2026-05-04
2|3|err|^lbread: --window 'weekly:2025-W53': weekly windows are written weekly:YYYY-Www|lbread --config @ok@ --board g1 --window weekly:2025-W53
2|3|err|^loadgen: unknown option '--bogus' \(see loadgen --help\)$|loadgen --bogus
2|3|err|^loadgen: --boards wants a number from 1 to 10000000, not 'none'|loadgen --dry-run --boards none
2|3|err|^loadgen: option '--count' needs a value|loadgen --count
2|3|err|^loadgen: --start wants an RFC 3339 time like .*, not 'yesterday'|loadgen --dry-run --start yesterday
2|3|err|^loadgen: --timeout wants a number from 1 to 86400, not '0'|loadgen --timeout 0
2|3|err|^loadgen: --evolve needs --registry URL or --schema-ids A,B,C|loadgen --dry-run --evolve
2|3|err|^loadgen: -X: kafka property no.such.property: |loadgen -n 1 --brokers $K -X no.such.property=1
2|3|err|^replay: unknown option '--bogus' \(see replay --help\)$|replay --config @ok@ --board g1 --bogus
2|3|err|^replay: --config FILE is required|replay --board g1
2|3|err|^replay: say what to rebuild: --slots, --node or --board|replay --config @ok@
2|3|err|^replay: --from wants earliest, latest, committed, an offset or an RFC 3339 time.*not 'yesterday'|replay --config @ok@ --board g1 --from yesterday
2|3|err|^replay: --to wants earliest, latest, committed, .*not 'soon'|replay --config @ok@ --board g1 --to soon
2|3|err|^replay: --node wants the HOST:PORT of a master, .*not 'nohost'|replay --config @ok@ --node nohost
2|3|err|^replay: --node wants the HOST:PORT of a master, .*not 'nohost'|replay --config @missing@ --node nohost
2|3|err|^replay: --republish rebuilds closed windows from every event: it takes no --verify and no --from|replay --config @ok@ --board g1 --republish --verify
2|3|err|^replay: --republish rebuilds closed windows from every event: it takes no --verify and no --from|replay --config @ok@ --board g1 --republish --from latest
2|3|err|^replay: --republish: .* names no results topic|replay --config @ok@ --board g1 --republish
2|3|err|^replay: --slots wants slots 0\.\.16383 .*not '0-99999'|replay --config @ok@ --slots 0-99999
2|3|err|^replay: --window 'hourly': there is no window kind 'hourly'; the kinds are alltime, daily, weekly, monthly and custom .* are alltime, patch:VALUE, decayed, season:VALUE, daily:YYYY-MM-DD, weekly:YYYY-Www|replay --config @ok@ --board g1 --window hourly
2|3|err|^replay: --window patch:1.9: profile 'runs' decays; its patch windows and overall board 'decayed' are replayed with the whole board|replay --config @ok@ --board run:1 --window patch:1.9
2|3|err|^replay: --window decayed: profile 'runs' decays|replay --config @ok@ --window decayed --slots 0-100
1|5|err|^lbread: .*cannot connect to Redis 127\.0\.0\.1:1|lbread --config @ok@ --board run:1 --window decayed
2|3|err|^lbread: --window 'decayed': .*|lbread --config @ok@ --board g1 --window decayed
2|3|err|^replay: --window 'monthly:2026-05': .*ok.yaml has no monthly windows; it has alltime|replay --config @ok@ --board g1 --window monthly:2026-05
2|3|err|^replay: --max-rate wants events per second, not 'fast'|replay --config @ok@ --board g1 --max-rate fast
2|3|err|^lbbench: unknown option '--bogus'|lbbench ceiling --config @ok@ --bogus
2|3|err|^lbbench: unknown subcommand 'frob'|lbbench frob
2|3|err|^lbbench: freshness needs --topic|lbbench freshness --config @ok@
1|3|err|^lbbench: cannot write /nonexistent/p\.txt: No such file or directory|lbbench freshness --config @ok@ --topic t --probes /nonexistent/p.txt
3|3|err|missing\.yaml: cannot open|projector --config @missing@
3|3|err|missing\.yaml: cannot open|replay --config @missing@ --board g1
3|3|err|bad\.yaml:[0-9]+: YAML syntax error|replay --config @bad@ --board g1
3|3|err|missing\.yaml: cannot open|lbread --config @missing@ --board g1
3|3|err|bad\.yaml:[0-9]+: YAML syntax error|lbread --config @bad@ --board g1
3|3|err|bad\.yaml:[0-9]+: YAML syntax error|lbbench ceiling --config @bad@
TABLE
)

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# run N COMMAND... - runs case N in the background: its stdout, stderr,
# exit status and milliseconds in $tmp/N.*.
run() {
    local n=$1 start rc=0
    shift
    start=$(now_ms)
    timeout 60 "$@" </dev/null >"$tmp/$n.out" 2>"$tmp/$n.err" || rc=$?
    echo "$rc $(($(now_ms) - start))" >"$tmp/$n.result"
}

mapfile -t rows <<<"$table"
pids=()
for n in "${!rows[@]}"; do
    IFS='|' read -r _ _ _ _ command <<<"${rows[n]}"
    read -ra words <<<"$command"
    args=()
    for w in "${words[@]}"; do
        case $w in
        @ok@) args+=("$tmp/ok.yaml") ;;
        @bad@) args+=("$tmp/bad.yaml") ;;
        @kafka@) args+=("$tmp/kafka.yaml") ;;
        @missing@) args+=("$tmp/missing.yaml") ;;
        *) args+=("$w") ;;
        esac
    done
    args[0]=$bin/${args[0]}
    run "$n" "${args[@]}" &
    pids+=($!)
done
for pid in "${pids[@]}"; do
    wait "$pid"
done

failures=0
fail() {
    echo "FAIL $*"
    failures=$((failures + 1))
}
# Lines that are neither the tool's own ("tool: ..."), nor about a
# configuration file ("file:line: ..."), nor the project's logger's
# (logfmt): librdkafka printing by itself, say.
foreign_lines() {
    grep -Ev "^$1: |^$tmp/[a-z]+\.yaml:|^ts=[^ ]+ level=(error|warn|info|debug) component=[a-z]+ msg=" \
        "$2" || true
}

for n in "${!rows[@]}"; do
    IFS='|' read -r code limit stream regex command <<<"${rows[n]}"
    program=${command%% *}
    read -r rc ms <"$tmp/$n.result"
    file=$tmp/$n.$stream
    what="'$command' (exit $code within $limit s, $stream =~ /$regex/)"
    shown=$(head -c 600 "$tmp/$n.err")
    if [[ $rc != "$code" ]]; then
        fail "$what: exit $rc; stderr: $shown"
        continue
    fi
    if ((ms > limit * 1000)); then
        fail "$what: took $ms ms"
        continue
    fi
    matched=$(grep -cE -- "$regex" "$file" || true)
    if ((matched != 1)); then
        fail "$what: $matched matching line(s) in $stream, want 1; it was: $(head -c 600 "$file")"
        continue
    fi
    if ((code == 2 || code == 3)) && (($(wc -l <"$tmp/$n.err") != 1)); then
        fail "$what: a usage or configuration error must be one line on stderr; it was: $shown"
        continue
    fi
    foreign=$(foreign_lines "$program" "$tmp/$n.err")
    if [[ -n $foreign ]]; then
        fail "$what: lines on stderr not through the logger: $(head -c 300 <<<"$foreign")"
        continue
    fi
    printf 'ok   exit %s in %5d ms  %s\n' "$rc" "$ms" "$command"
done

# loadgen's default span ends before now: no event time in the future
now=$(now_ms)
future=$(timeout 60 "$bin/loadgen" --dry-run -n 20000 --days 3 |
    awk -F'\t' -v now="$now" '$5 > now { n++ } END { print n + 0 }')
if ((future > 0)); then
    fail "loadgen --dry-run by default made $future of 20000 events after now ($now ms)"
else
    echo "ok   loadgen's default events are all before now (20000 checked)"
fi

if ((failures > 0)); then
    echo "$failures of $((${#rows[@]} + 1)) command-line check(s) failed"
    exit 1
fi
echo "all $((${#rows[@]} + 1)) command-line checks passed (exit codes 0-3, timing, messages)"

#!/usr/bin/env bash
# A Redis Cluster that speaks TLS only (port 0, tls-port, cluster bus and
# replication over TLS, tls-auth-clients yes: mutual TLS) and a Kafka broker
# that speaks SASL_SSL only (SCRAM-SHA-512, ACLs on), the way managed
# services run. The projector and replay each connect as their own Kafka
# user with exactly the ACLs the README gives (projector: Read on the topic
# and the group, Write on the dead-letter topic; replay: Read on the topic,
# Describe on the group, never Read on it), the password from a file:
#
#  1. the projector (redis.tls with the CA and a client certificate) projects
#     boards of every mode while a board's slot and those before it move to
#     another master (the MOVED that follows must carry a TLS port); the
#     oracle, reading over its own TLS connections, finds the state exact;
#     then a master is SIGKILLed under load (failover over TLS): exact;
#     lbadmin offsets and wait-caught-up work as replay's Kafka user;
#  2. a lost board is rebuilt by replay over TLS, also while the nodes close
#     its connections mid-write (CLIENT KILL in a loop), and lbread reads
#     the top over TLS, the same as redis-cli --tls;
#  3. a wrong CA, a missing client certificate, plain TCP, an expired node
#     certificate, a wrong Redis password and a wrong Kafka password each
#     fail with one line naming the reason (replay: exit 1, nothing
#     written); so does replay with final standings configured when its
#     user lacks Read on the results topic (then, granted it, it rebuilds
#     the board exactly); the projector holds instead of dropping anything
#     and says why;
#  4. final standings under the runbook's Kafka ACLs: without DescribeConfigs
#     on the results topic no window closes and the log says what to grant;
#     granted, the projector closes and publishes them, exactly.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export REDIS_TLS=1 REDIS_TLS_AUTH_CLIENTS=yes KAFKA_SASL=1
start_services scores:6,scores-dlq:1,scores-results:1
certs=$(lb_tls_dir)
export GROUP=lb-tls DLQ_TOPIC=scores-dlq
# the Kafka ACLs of ops/runbooks/kafka-acl.md, by Kafka's own AclCommand
# (a JVM each: run side by side)
acl() {
    lb_kafka_admin kafka.admin.AclCommand --bootstrap-server "$BROKERS" \
        --command-config "$(lb_kafka_admin_props)" --add --force "$@" >>"$T_DIR/acl.log" 2>&1
}
acl --allow-principal User:projector --operation Read --topic scores --group "$GROUP" &
a1=$!
acl --allow-principal User:projector --operation Write --topic scores-dlq &
a2=$!
acl --allow-principal User:replay --operation Read --topic scores &
a3=$!
acl --allow-principal User:replay --operation Describe --group "$GROUP" &
a4=$!
for a in $a1 $a2 $a3 $a4; do wait "$a" || fail "AclCommand failed: $(tail -n 5 "$T_DIR/acl.log")"; done
tls_yaml() { # CA [CERT KEY]: the redis.tls lines
    printf '  tls:\n    enabled: true\n    ca_file: %s\n' "$1"
    [[ -z ${2-} ]] || printf '    cert_file: %s\n    key_file: %s\n' "$2" "$3"
}
write_config "$T_DIR/projector.yaml" "$MODE_PROFILES" # redis.tls: lib.sh's, as REDIS_TLS=1
KAFKA_USER=replay write_config "$T_DIR/replay.yaml" "$MODE_PROFILES"
for want in 'sasl.password_file' 'tls: {enabled: true'; do
    grep -q "$want" "$T_DIR/projector.yaml" || fail "no '$want' in the configuration"
done
gen=("${MODE_GEN[@]}")

# 1. the projector over TLS, slots moving under it
start_projector projector "$T_DIR/projector.yaml"
produce -n 10000 --seed 181 "${gen[@]}" --rate 20000
wait_caught_up 60
# an on-call's lbadmin offsets and wait-caught-up under replay's user (Read
# on the topic, Describe on the group), not the admin's
admin_x=("${KAFKA_X[@]}")
KAFKA_X=()
for p in $(lb_kafka_client_props replay); do KAFKA_X+=(-X "$p"); done
wait_caught_up 30
assert_committed_at_end
KAFKA_X=("${admin_x[@]}")
ok "lbadmin offsets and wait-caught-up under replay's Kafka user"
mapfile -t masters < <(slot_masters)
((${#masters[@]} == 3)) || fail "expected 3 masters, found ${#masters[@]}"
# the board whose slot is nearest the start of its master's range: moving
# that many slots from there moves it (redis-cli moves a range's first slots);
# not a split board, whose own slot holds only its merged tops
nodes=$(redis_cli "${masters[0]}" CLUSTER NODES)
read -r count from board < <(cut -f2 "$T_DIR/events.tsv" | sort -u | grep -v '^spl-' | while read -r b; do
    slot=$(redis_cli "${masters[0]}" CLUSTER KEYSLOT "{$b}")
    awk -v s="$slot" -v b="$b" '$3 ~ /master/ { split($2, a, "[:@]");
        for (i = 9; i <= NF; i++) { n = split($i, r, "-"); hi = n > 1 ? r[2] : r[1];
            if ($i !~ /^\[/ && s >= r[1] && s <= hi) print s - r[1] + 1, a[2], b } }' <<<"$nodes"
done | sort -n | first)
[[ -n $board ]] || fail "no board found in the slot map"
to=${masters[0]}
[[ $to == "$from" ]] && to=${masters[1]}
produce -n 20000 --seed 182 "${gen[@]}" --rate 4000 &
producer=$!
T_PIDS+=("$producer")
_lb_redis_cli_auth 120 --cluster reshard "127.0.0.1:$from" \
    --cluster-from "$(redis_cli "$from" CLUSTER MYID)" --cluster-to "$(redis_cli "$to" CLUSTER MYID)" \
    --cluster-slots "$count" --cluster-yes >"$T_DIR/reshard.log" 2>&1 ||
    fail "resharding over TLS failed: $(tail -n 3 "$T_DIR/reshard.log")"
log "moved $count slots ($board's among them) from $from to $to over TLS"
wait "$producer" || fail "producer failed"
# the projector's slot map is the old one: these writes meet MOVED, which
# must name the TLS port
produce -n 3000 --seed 184 "${gen[@]}"
wait_caught_up 120
verify "${MODE_ORACLE[@]}" --expiry-slack-ms 1000 # MIGRATE moves TTLs as relative times
ok "projected over mutual TLS and SASL_SSL while $count slots moved: exact"

# a failover over TLS: a master SIGKILLed while events flow
victim=${masters[2]}
kill_master_under_load "$victim" 2 -n 20000 --seed 185 "${gen[@]}" --rate 5000
wait_caught_up 120
verify "${MODE_ORACLE[@]}" --expiry-slack-ms 1000
log "master $victim killed, its replica promoted over TLS"
stop_projector "$PROJECTOR_PID"
[[ $STOP_STATUS == 0 ]] || fail "projector exited $STOP_STATUS"
moved=$(grep -o 'totals: .*' "$T_DIR/projector.log" | tail -n 1 | grep -o ' moved=[0-9]*' | cut -d= -f2)
((${moved:-0} > 0)) || fail "no MOVED followed: the resharding did not reach the projector"
ok "the projector followed MOVED (moved=$moved) and a failover over TLS: exact"

# 2. replay and lbread over TLS
board=$(redis_cli "${masters[1]}" --scan --pattern 'lb:{sum-*}:alltime' | first)
board=${board#lb:\{}
board=${board%%\}*}
[[ -n $board ]] || fail "no sum board on ${masters[1]}"
# MIGRATE moved TTLs as relative times: an expiry may be off by a little
rebuild_board "$T_DIR/replay.yaml" "$board" "${MODE_ORACLE[@]}" --expiry-slack-ms 1000
if grep -i 'authoriz' "$T_DIR/replay.out"; then
    fail "replay met an authorization failure under its ACLs: $(grep -i -m 1 'authoriz' "$T_DIR/replay.out")"
fi
ok "replay --board $board over TLS, as Kafka user replay, rebuilt it exactly, no authorization failure"
# the nodes close replay's connections while it writes
lose_board "$board"
mapfile -t masters < <(slot_masters)
hang_up_on_clients 0.2 "${masters[@]}"
status=0
"$BIN/replay" --config "$T_DIR/replay.yaml" --board "$board" --max-rate 6000 >"$T_DIR/hangup.out" \
    2>"$T_DIR/hangup.err" || status=$?
stop_hanging_up
[[ $status == 0 ]] || fail "replay exited $status while TLS nodes hung up: $(tail -n 3 "$T_DIR/hangup.err")"
grep -Eq 'failed \(attempt [0-9]+.*127.0.0.1:[0-9]+' "$T_DIR/hangup.err" ||
    fail "replay was never cut off mid-write: $(tail -n 3 "$T_DIR/hangup.err")"
verify "${MODE_ORACLE[@]}" --expiry-slack-ms 1000
ok "TLS nodes closing replay's connections mid-write: it retried and the board is exact"
"$BIN/lbread" --config "$T_DIR/projector.yaml" --board "$board" --window alltime --top 5 >"$T_DIR/top.out" ||
    fail "lbread over TLS failed: $(cat "$T_DIR/top.out")"
got=$(awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print $4 }' "$T_DIR/top.out")
want=$(redis_cli "${masters[0]}" -c ZREVRANGE "lb:{$board}:alltime" 0 4)
[[ -n $got && $got == "$want" ]] || fail "lbread's top 5 ($got) is not redis-cli's ($want)"
ok "lbread over TLS reads the same top 5 as redis-cli --tls"

# 3. refusals: one line each, naming the node and the reason
refused() { # NAME REASON CA [CERT KEY]: replay with this redis.tls exits 1 saying REASON
    local name=$1 reason=$2
    shift 2
    write_config "$T_DIR/$name.yaml" "$MODE_PROFILES" "$(tls_yaml "$@")"
    local status=0
    "$BIN/replay" --config "$T_DIR/$name.yaml" --board "$board" >"$T_DIR/$name.out" \
        2>"$T_DIR/$name.err" || status=$?
    [[ $status == 1 ]] || fail "$name: replay exited $status: $(cat "$T_DIR/$name.err")"
    [[ $(wc -l <"$T_DIR/$name.err") == 1 ]] || fail "$name: not one line: $(cat "$T_DIR/$name.err")"
    grep -q "127.0.0.1:[0-9]*.*$reason" "$T_DIR/$name.err" ||
        fail "$name: the error does not name a node and '$reason': $(cat "$T_DIR/$name.err")"
    log "$name: $(cat "$T_DIR/$name.err")"
}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=other \
    -keyout "$T_DIR/other.key" -out "$T_DIR/other-ca.crt" >/dev/null 2>&1 || fail "openssl failed"
refused wrong-ca 'certificate verify failed' "$T_DIR/other-ca.crt" "$certs/client.crt" "$certs/client.key"
refused no-client-cert 'redis.tls.cert_file' "$certs/ca.crt"
write_config "$T_DIR/plain.yaml" "$MODE_PROFILES" "  tls: {enabled: false}"
status=0
"$BIN/replay" --config "$T_DIR/plain.yaml" --board "$board" >/dev/null 2>"$T_DIR/plain.err" || status=$?
if [[ $status != 1 ]] || ! grep -q '127.0.0.1:[0-9]*.*a TLS port? see redis.tls' "$T_DIR/plain.err"; then
    fail "plain TCP to the TLS ports: exit $status, $(cat "$T_DIR/plain.err")"
fi
ok "wrong CA, no client certificate, plain TCP: exit 1, one line naming the node and the reason"
# every node serves an expired certificate for a moment (redis-cli, which
# verifies too, needs --insecure to put the good one back)
if ! openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=expired \
    -keyout "$T_DIR/expired.key" -out "$T_DIR/expired.csr" >/dev/null 2>&1 ||
    ! openssl x509 -req -in "$T_DIR/expired.csr" -CA "$certs/ca.crt" -CAkey "$certs/ca.key" \
        -CAcreateserial -CAserial "$T_DIR/ca.srl" -days -1 -extfile "$certs/leaf.ext" \
        -out "$T_DIR/expired.crt" >/dev/null 2>&1; then
    fail "openssl failed"
fi
mapfile -t cert_ports < <(live_ports) # (found by redis-cli: not while they serve it)
serve_certificate() { # CRT KEY [REDIS-CLI OPTIONS]
    local p
    for p in "${cert_ports[@]}"; do
        redis_cli "$p" "${@:3}" CONFIG SET tls-cert-file "$1" tls-key-file "$2" >/dev/null ||
            fail "CONFIG SET tls-cert-file on $p"
    done
}
serve_certificate "$T_DIR/expired.crt" "$T_DIR/expired.key"
refused expired 'certificate has expired' "$certs/ca.crt" "$certs/client.crt" "$certs/client.key"
serve_certificate "$certs/server.crt" "$certs/server.key" --insecure
ok "an expired node certificate: exit 1, one line naming the node and 'certificate has expired'"
# a wrong Redis password over TLS (a user of its own on every node)
export LB_TEST_TLS_PASSWORD=pw-$RANDOM$RANDOM-wrong
for p in $(live_ports); do
    redis_cli "$p" ACL SETUSER lb-tls on ">pw-$RANDOM-right" '~*' +@all >/dev/null || fail "ACL SETUSER on $p"
done
# shellcheck disable=SC2016 # ${...} is for the projector's configuration
write_config "$T_DIR/wrong-redis-password.yaml" "$MODE_PROFILES" '  user: lb-tls
  password: ${LB_TEST_TLS_PASSWORD}'
status=0
"$BIN/replay" --config "$T_DIR/wrong-redis-password.yaml" --board "$board" >/dev/null \
    2>"$T_DIR/wrong-redis-password.err" || status=$?
[[ $status == 1 && $(wc -l <"$T_DIR/wrong-redis-password.err") == 1 ]] ||
    fail "a wrong Redis password: exit $status, $(cat "$T_DIR/wrong-redis-password.err")"
grep -q '127.0.0.1:[0-9]*.*WRONGPASS' "$T_DIR/wrong-redis-password.err" ||
    fail "a wrong Redis password is not named: $(cat "$T_DIR/wrong-redis-password.err")"
grep -q -e "$LB_TEST_TLS_PASSWORD" "$T_DIR"/*.err && fail "the Redis password was logged"
log "wrong-redis-password: $(cat "$T_DIR/wrong-redis-password.err")"
ok "a wrong Redis password over TLS: exit 1, one line naming the node and WRONGPASS"
printf 'not-the-password\n' >"$T_DIR/wrong.password"
sed "s|sasl.password_file: .*|sasl.password_file: $T_DIR/wrong.password|" "$T_DIR/replay.yaml" \
    >"$T_DIR/wrong-password.yaml"
status=0
"$BIN/replay" --config "$T_DIR/wrong-password.yaml" --board "$board" >/dev/null \
    2>"$T_DIR/wrong-password.err" || status=$?
[[ $status == 1 && $(wc -l <"$T_DIR/wrong-password.err") == 1 ]] ||
    fail "a wrong Kafka password: exit $status, $(cat "$T_DIR/wrong-password.err")"
grep -qi 'authentication' "$T_DIR/wrong-password.err" ||
    fail "a wrong Kafka password is not named: $(cat "$T_DIR/wrong-password.err")"
grep -q 'not-the-password' "$T_DIR"/*.err "$T_DIR"/*.log && fail "a password was logged"
log "wrong-password: $(cat "$T_DIR/wrong-password.err")"
ok "a wrong Kafka password: exit 1, one line saying authentication failed, the password not logged"

# replay for a configuration with final standings, run by an operator whose
# Kafka user lacks the results topic's Read (ops/runbooks/kafka-acl.md):
# refused before anything is written (a lost board's closed windows would
# otherwise be rebuilt open), the topic and the reason named, the lease let
# go; with the ACL granted the same run rebuilds the board exactly
KAFKA_USER=replay write_config "$T_DIR/replay-results.yaml" "$MODE_PROFILES$MODE_RESULTS"
lose_board "$board"
status=0
started=$SECONDS
"$BIN/replay" --config "$T_DIR/replay-results.yaml" --board "$board" >/dev/null \
    2>"$T_DIR/results-denied.err" || status=$?
took=$((SECONDS - started))
[[ $status == 1 ]] || fail "replay without Read on the results topic exited $status: $(cat "$T_DIR/results-denied.err")"
grep -q 'results topic scores-results: .*[Aa]uthorization' "$T_DIR/results-denied.err" ||
    fail "the results topic's denied Read is not named: $(cat "$T_DIR/results-denied.err")"
((took < 30)) || fail "replay took ${took}s to give up on a denied results topic"
left=$(for port in $(live_ports); do redis_cli "$port" --scan --pattern "lb:{$board}:*"; done)
[[ -z $left ]] || fail "replay refused but wrote: $(head -n 3 <<<"$left")"
log "results-denied (${took}s): $(head -n 1 "$T_DIR/results-denied.err")"
acl --allow-principal User:replay --operation Read --topic scores-results ||
    fail "AclCommand failed: $(tail -n 5 "$T_DIR/acl.log")"
"$BIN/replay" --config "$T_DIR/replay-results.yaml" --board "$board" >"$T_DIR/replay.out" 2>&1 ||
    fail "replay with Read on the results topic failed: $(tail -n 5 "$T_DIR/replay.out")"
verify "${MODE_ORACLE[@]}" --expiry-slack-ms 1000
ok "replay without Read on the results topic: exit 1 in ${took}s naming it, nothing written; granted, exact"

# the projector with a wrong CA holds (nothing dropped) and says why
write_config "$T_DIR/wrong-ca.yaml" "$MODE_PROFILES" \
    "$(tls_yaml "$T_DIR/other-ca.crt" "$certs/client.crt" "$certs/client.key")"
produce -n 500 --seed 183 "${gen[@]}"
before=$(committed_offsets)
start_projector wrong-ca "$T_DIR/wrong-ca.yaml"
wait_log "$T_DIR/wrong-ca.log" 'TLS handshake with Redis 127.0.0.1:[0-9]* failed: certificate verify failed' 30
stop_projector "$PROJECTOR_PID"
[[ $(committed_offsets) == "$before" ]] || fail "the projector with the wrong CA committed offsets"
start_projector projector "$T_DIR/projector.yaml"
wait_caught_up 60
verify "${MODE_ORACLE[@]}" --expiry-slack-ms 1000 # MIGRATE moves TTLs as relative times
ok "a projector with the wrong CA said why and committed nothing; the right one then caught up exactly"

# 4. final standings under the runbook's Kafka ACLs. First as an operator
#    who forgot DescribeConfigs and Write on the results topic (the runbook
#    before it named DescribeConfigs): the projector projects, closes no
#    window, and says what to grant; with DescribeConfigs it claims the
#    res-* boards' past days and the broker refuses their records; with
#    Write the same pod publishes them, exactly
stop_projector "$PROJECTOR_PID"
acl --allow-principal User:projector --operation Read --topic scores-results ||
    fail "AclCommand failed: $(tail -n 5 "$T_DIR/acl.log")"
write_config "$T_DIR/results.yaml" "$MODE_PROFILES$MODE_RESULTS"
produce -n 900 --seed 185 "${gen[@]}" --boards 3 --board-prefix res-
start_projector results "$T_DIR/results.yaml"
wait_caught_up 60
wait_log "$T_DIR/results.log" 'describing topic scores-results: .*needs DescribeConfigs on the topic: ops/runbooks/kafka-acl.md.*no window closes' 30
sleep 4 # two closer checks (2 s) at least, caught up: the day would have closed by now
first_day=$(date -u -d "$START" +daily:%Y-%m-%d)
[[ -z $(final_state res-0 "$first_day") ]] ||
    fail "res-0 $first_day closed without the topic's size: $(final_state res-0 "$first_day")"
log "without DescribeConfigs: $(grep -m 1 'needs DescribeConfigs' "$T_DIR/results.log" | sed 's/.*msg=//')"
acl --allow-principal User:projector --operation DescribeConfigs --topic scores-results ||
    fail "AclCommand failed: $(tail -n 5 "$T_DIR/acl.log")"
wait_log "$T_DIR/results.log" "final standings of board 'res-.*: .*[Aa]uthorization failed; trying again" 30
# the first refused may be another board's or window's: res-0's day is
# claimed within a check or two (each starts windows for 50 ms)
lb_wait_for 10 window_claimed res-0 "$first_day" ||
    fail "res-0 $first_day without Write on the topic: '$(final_state res-0 "$first_day")', not claimed"
log "without Write: $(grep -m 1 '[Aa]uthorization failed; trying again' "$T_DIR/results.log" | sed 's/.*msg=//')"
acl --allow-principal User:projector --operation Write --topic scores-results ||
    fail "AclCommand failed: $(tail -n 5 "$T_DIR/acl.log")"
lb_wait_for 30 window_published res-0 "$first_day" ||
    fail "res-0 $first_day was not published: $(grep 'component=results' "$T_DIR/results.log" | tail -n 1)"
verify "${MODE_ORACLE[@]}" "${MODE_RESULTS_ORACLE[@]}" --expiry-slack-ms 1000
grep -q "^verify_state: [1-9][0-9]* closed windows checked" "$T_DIR/verify.out" ||
    fail "no closed window checked: $(head -n 1 "$T_DIR/verify.out")"
ok "final standings: without DescribeConfigs none closed and the log said what to grant; without Write claimed, the broker's refusal logged; granted, the same pod published, exact"

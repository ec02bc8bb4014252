#!/usr/bin/env bash
# Writer schemas from a schema registry (the project's test registry,
# tests/integration/schema_registry.c, behind a base path and basic auth):
#
#  1. a producer registers three writer versions (v1; v2 with an optional
#     field more; v3 without dims, where the reader's default {} applies)
#     under scores-value and produces with their ids, interleaved, with
#     poison events among them: the projector fetches each schema once and
#     projects everything exactly; an id the registry does not know (404,
#     40403) is dead-lettered as unknown_schema_id, and the locally mapped
#     id 2 still works (its BAN events dead-lettered as unknown_op);
#  2. the registry goes down (killed): the schemas fetched before still
#     serve, events keep flowing;
#  3. a fresh projector (nothing cached) while the registry is still down:
#     partitions wait at their first record (held "registry", nothing
#     dead-lettered, nothing committed past it); the registry comes back
#     and every event is projected exactly.
#  4. replay rebuilds a lost board through the registry.
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_services
export GROUP=lb-registry
pick_metrics_port
"$BIN/lbadmin" create-topic --brokers "$BROKERS" --topic scores-dlq --partitions 1 \
    >>"$T_DIR/lbadmin.log" 2>&1 || fail "cannot create the DLQ topic"

reg_port=$(lb_free_port_base 1 32000 32700) || fail "no free port for the registry"
base=/apis/ccompat/v7
registry_url=http://127.0.0.1:$reg_port$base
start_registry() {
    "$BIN/test_schema_registry" --listen "127.0.0.1:$reg_port" --base-path "$base" \
        --user lb --password s3cret --first-id 100 --state "$T_DIR/registry.state" \
        >>"$T_DIR/registry.log" 2>&1 &
    REGISTRY_PID=$!
    T_PIDS+=("$REGISTRY_PID")
    wait_log "$T_DIR/registry.log" "listening on 127.0.0.1:$reg_port" 10
}
fetches() { grep -c "^GET $base/schemas/ids/$1 " "$T_DIR/registry.log" || true; }
dlq_reasons() {
    "$BIN/lbadmin" dump --brokers "$BROKERS" --topic scores-dlq >"$T_DIR/dlq.dump" \
        2>>"$T_DIR/lbadmin.log" || fail "cannot read the DLQ"
    wc -l <"$T_DIR/dlq.dump"
}

printf 's3cret\n' >"$T_DIR/registry.password"
export REGISTRY_YAML="  registry:
    url: $registry_url
    user: lb
    password_file: $T_DIR/registry.password
    timeout: 2s"
DLQ_TOPIC=scores-dlq write_config "$T_DIR/projector.yaml" "$MODE_PROFILES
$METRICS_YAML"
gen=("${MODE_GEN[@]}" --evolve)

# 1. evolution through the registry, poison among it
start_registry
start_projector projector "$T_DIR/projector.yaml"
produce -n 12000 --seed 91 "${gen[@]}" --poison-every 97 \
    --registry "http://lb:s3cret@127.0.0.1:$reg_port$base"
grep -q 'writer v3 is schema id 102 under scores-value' "$T_DIR/loadgen.log" ||
    fail "loadgen did not register the three writers: $(tail -n 3 "$T_DIR/loadgen.log")"
wait_caught_up 120
verify "${MODE_ORACLE[@]}"
assert_committed_at_end
for id in 100 101 102; do
    [[ $(fetches "$id") == 1 ]] || fail "schema id $id fetched $(fetches "$id") times, not once"
done
v3=$(awk '$6 !~ /^POISON/ && $7 == "-"' "$T_DIR/events.tsv" | wc -l)
((v3 > 3000)) || fail "only $v3 events without dims"
ok "v1, v2 and v3 writers interleaved are projected exactly, each schema fetched once"

unknown=$(grep -c 'POISON:unknown_schema_id' "$T_DIR/events.tsv")
ban=$(grep -c 'POISON:unknown_op' "$T_DIR/events.tsv")
dlq_reasons >/dev/null
got_unknown=$(grep -c 'lb\.reason=unknown_schema_id' "$T_DIR/dlq.dump" || true)
got_ban=$(grep -c 'lb\.reason=unknown_op' "$T_DIR/dlq.dump" || true)
((unknown > 0 && ban > 0)) || fail "no unknown-id or BAN poison produced"
[[ $got_unknown == "$unknown" && $got_ban == "$ban" ]] ||
    fail "DLQ holds $got_unknown unknown_schema_id (expected $unknown), $got_ban unknown_op (expected $ban)"
grep 'lb\.reason=unknown_schema_id' "$T_DIR/dlq.dump" | grep 'schema.x20registry.x20does.x20not.x20know.x20it' >/dev/null ||
    fail "the unknown_schema_id detail does not name the registry"
[[ $(fetches 99) -ge 1 ]] || fail "the unknown id 99 was not asked for"
ok "id 99 unknown to the registry: $unknown record(s) dead-lettered; local id 2 still decodes ($ban unknown_op)"
# the page is published at most once a second: the fetches show on the next
lb_wait_for 5 metrics_series_is "$METRICS_URL" 'lb_schema_registry_requests_total{result="fetched"}' 3 ||
    fail "lb_schema_registry_requests_total{result=\"fetched\"} is not 3"
metrics_scrape "$METRICS_URL" "$T_DIR/m1"

# 2. the registry goes down: what was fetched still serves
kill -9 "$REGISTRY_PID"
wait "$REGISTRY_PID" 2>/dev/null || true
produce -n 4000 --seed 92 "${gen[@]}" --schema-ids 100,101,102
wait_caught_up 60
verify "${MODE_ORACLE[@]}"
ok "with the registry down, the cached schemas keep events flowing"
stop_projector "$PROJECTOR_PID"
dlq_before=$(dlq_reasons)

# 3. a fresh projector, the registry still down: partitions wait
start_projector fresh "$T_DIR/projector.yaml"
produce -n 4000 --seed 93 "${gen[@]}" --schema-ids 100,101,102
wait_log "$T_DIR/fresh.log" 'records of schema id 10[0-2] wait' 30
alerts_scrape registry 2
lag=$(group_lag)
((lag > 0)) || fail "offsets moved past records whose schema could not be fetched"
metrics_scrape "$METRICS_URL" "$T_DIR/m2"
[[ $(metrics_value "$T_DIR/m2" 'lb_schema_registry_up{}') == 0 ]] || fail "lb_schema_registry_up is not 0"
held=$(awk '/^lb_partition_held\{.*reason="registry"\} 1$/' "$T_DIR/m2" | wc -l)
((held > 0)) || fail "no partition held for the registry"
failed=$(metrics_value "$T_DIR/m2" 'lb_schema_registry_requests_total{result="failed"}')
[[ $(dlq_reasons) == "$dlq_before" ]] || fail "records were dead-lettered while the registry was down"
ok "registry down: $held partition(s) wait (lag $lag, $failed failed requests), nothing dead-lettered"
alerts_test registry ProjectorHeldForSchemaRegistry ProjectorCommitsStalled
start_registry
wait_caught_up 90
verify "${MODE_ORACLE[@]}"
assert_committed_at_end
dlq_reasons >/dev/null
[[ $(grep -c 'lb\.reason=unknown_schema_id' "$T_DIR/dlq.dump") == "$unknown" ]] ||
    fail "records were dead-lettered as unknown_schema_id after the outage"
grep -q 'answers again' "$T_DIR/fresh.log" || fail "the registry's return is not logged"
ok "the registry back: the waiting partitions resumed and every event is projected exactly"
stop_projector "$PROJECTOR_PID"

# 4. replay fetches the schemas too (a lost board rebuilt)
board=sum-3
rebuild_board "$T_DIR/projector.yaml" "$board" "${MODE_ORACLE[@]}"
ok "replay rebuilt $board through the registry"

# 5. https: the registry's CA from ca_file; a wrong CA makes records wait
tls=$T_DIR/tls
mkdir -p "$tls"
make_ca() {
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tls/$1.key" -out "$tls/$1.pem" -days 2 \
        -subj "/CN=lb test $1" 2>>"$T_DIR/openssl.log" || fail "openssl: cannot make $1"
}
make_ca ca
make_ca other-ca
openssl req -newkey rsa:2048 -nodes -keyout "$tls/server.key" -out "$tls/server.csr" \
    -subj "/CN=localhost" 2>>"$T_DIR/openssl.log" || fail "openssl: no CSR"
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$tls/san.ext"
openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
    -out "$tls/server.pem" -days 2 -extfile "$tls/san.ext" 2>>"$T_DIR/openssl.log" ||
    fail "openssl: cannot sign the server certificate"
kill -TERM "$REGISTRY_PID"
wait "$REGISTRY_PID" 2>/dev/null || true
"$BIN/test_schema_registry" --listen "127.0.0.1:$reg_port" --base-path "$base" --user lb \
    --password s3cret --state "$T_DIR/registry.state" --tls-cert "$tls/server.pem" \
    --tls-key "$tls/server.key" >"$T_DIR/registry-tls.log" 2>&1 &
REGISTRY_PID=$!
T_PIDS+=("$REGISTRY_PID")
wait_log "$T_DIR/registry-tls.log" "listening on 127.0.0.1:$reg_port" 10
tls_config() {
    REGISTRY_YAML="  registry:
    url: https://127.0.0.1:$reg_port$base
    user: lb
    password_file: $T_DIR/registry.password
    ca_file: $tls/$1.pem" DLQ_TOPIC=scores-dlq write_config "$T_DIR/tls.yaml" "$MODE_PROFILES
$METRICS_YAML"
}
export GROUP=lb-registry-tls
tls_config other-ca
start_projector tls-wrong-ca "$T_DIR/tls.yaml"
wait_log "$T_DIR/tls-wrong-ca.log" 'records of schema id 10[0-2] wait' 30
grep -q 'SSL certificate problem' "$T_DIR/tls-wrong-ca.log" ||
    fail "the certificate failure is not named: $(grep registry "$T_DIR/tls-wrong-ca.log" | tail -n 1)"
[[ $(committed_offsets | awk '$2 != "-"' | wc -l) == 0 ]] ||
    fail "offsets were committed with the registry's certificate refused"
stop_projector "$PROJECTOR_PID"
ok "a registry certificate from another CA: records wait, the reason is logged"
tls_config ca
start_projector tls "$T_DIR/tls.yaml"
wait_caught_up 90
for id in 100 101 102; do
    grep -q "schema id $id fetched from https://127.0.0.1:$reg_port$base" "$T_DIR/tls.log" ||
        fail "schema id $id not fetched over https"
done
verify "${MODE_ORACLE[@]}"
assert_committed_at_end
ok "over https with input.registry.ca_file, a new group reads every event again"

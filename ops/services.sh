# shellcheck shell=bash
#
# ops/services.sh - local Redis Cluster and single-node Kafka (KRaft) for
# development and the integration tests.
#
# This file is a library: source it, then call the lb_* functions.
#
#     . ops/services.sh
#     lb_redis_cluster_start && lb_kafka_start
#     ...
#     lb_kafka_stop; lb_redis_cluster_stop
#
# Sourcing it only defines functions and the variable _lb_repo. The public
# functions run their bodies in a subshell with errexit, nounset, errtrace,
# pipefail and the ERR trap switched off, so a caller running under
# `set -euo pipefail` is neither affected nor aborted half-way; they report
# failure through their return status. Only lb_die calls exit.
#
# Progress and error messages go to stderr; stdout carries only results
# (seed list, bootstrap address, paths, status lines).
#
# Everything started here is recorded in a pid file and stopped through it:
#     $(lb_state_dir)/redis/<port>/redis.pid
#     $(lb_state_dir)/kafka/kafka.pid
# A pid is only ever signalled if it still is the process we started
# (checked through /proc/<pid>/comm and /proc/<pid>/cmdline).
#
# Settings (environment variables; defaults in brackets):
#   LB_STATE_DIR            [${TMPDIR:-/tmp}/leaderboard-projector]
#   LB_CACHE_DIR            [${XDG_CACHE_HOME:-$HOME/.cache}/leaderboard-projector]
#   LB_BIN                  [<repo>/build/bin]  where lbadmin lives
#   LB_WIPE                 [0]  1: the stop functions also delete the data
#   LB_PORT_RESERVATIONS    [/tmp/lb-ports.<uid>]  the ports lb_free_port_base
#                                gave shells still running (one /tmp for
#                                every test, whatever its TMPDIR)
#   REDIS_MASTERS           [3]  at least 3
#   REDIS_REPLICAS          [1]  replicas per master, 0 allowed
#   REDIS_PORT_BASE         [7000]  nodes use ports BASE .. BASE+n-1
#                                   (and BASE+10000 .. for the cluster bus)
#   REDIS_NODE_TIMEOUT_MS   [2000]
#   REDIS_PERSIST           [0]  1: nodes keep their data on disk (AOF, fsync
#                                every second, and RDB snapshots), so
#                                lb_redis_cluster_resume brings the cluster
#                                back with it after lb_redis_cluster_stop
#   REDIS_PASSWORD          []  set: every node requires it (requirepass and
#                               masterauth); the redis-cli calls here use it
#   REDIS_MASTERAUTH        [$REDIS_PASSWORD]  the password the replicas
#                               give their masters: another one and they never
#                               sync (a rotation that forgot them, which tests
#                               stage); the cluster then forms without their
#                               links (each retries once a second)
#   REDIS_CONF_EXTRA        []  more lines for every node's redis.conf
#   REDIS_USER              []  with REDIS_PASSWORD: an ACL user with every
#                               permission, also used for replication
#   REDIS_ACL_FILE          []  with REDIS_PASSWORD: more users, the `user`
#                               lines of this file (ops/deploy/redis-acl.conf)
#                               with CHANGE_ME replaced by REDIS_ACL_PASSWORD
#   REDIS_TLS               [0]  1: every node listens for TLS only (port 0,
#                                tls-port on its port; cluster bus and
#                                replication over TLS too), with certificates
#                                made by openssl into $(lb_tls_dir) once:
#                                ca.crt, server.crt/.key (SAN IP:127.0.0.1,
#                                DNS:localhost), client.crt/.key; the nodes
#                                announce the hostname localhost, which clients
#                                verify their certificates against
#   REDIS_TLS_AUTH_CLIENTS  [yes]  the nodes' tls-auth-clients: yes (mutual
#                                TLS), optional or no; the redis-cli calls here
#                                present client.crt
#   KAFKA_SASL              [0]  1: the broker's client listener is SASL_SSL
#                                with SCRAM-SHA-512 (certificate from
#                                $(lb_tls_dir), as for REDIS_TLS), ACLs on
#                                (StandardAuthorizer; the users admin and
#                                ANONYMOUS, i.e. the broker itself on the
#                                loopback controller listener, are super users)
#   KAFKA_SASL_USERS        [admin projector replay]  SCRAM users made at format
#   KAFKA_SASL_PASSWORD     [lb-local-secret]  their password (local use only);
#                                lb_kafka_client_props prints the admin's
#                                librdkafka properties (the password from a file)
#   KAFKA_PORT              [9092]
#   KAFKA_CONTROLLER_PORT   [9093]
#   KAFKA_HEAP_OPTS         [-Xms256m -Xmx768m]
#   KAFKA_JVM_OPTS          []  extra JVM options
#   KAFKA_TOPICS            [scores:6,scores-dlq:1]  name:partitions[,name:partitions...];
#                                       set it empty to create no topic
#   KAFKA_START_TIMEOUT     [60]  seconds

_lb_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_lb_kafka_version=3.9.1

# ---------------------------------------------------------------------------
# Generic helpers
# ---------------------------------------------------------------------------

# Run at the top of every subshell-bodied function: undo whatever shell
# options the caller has that would change how this code behaves.
_lb_isolate() {
    set +e +u +E
    set +o pipefail
    trap - ERR
}

_lb_msg() { printf '%s\n' "$*" >&2; }

# lb_die MESSAGE... - print an error and exit the current shell (fatal).
lb_die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

# For a script whose EXIT trap stops what it started (the demo, the bench,
# each integration test). lb_trap_signals: SIGINT and SIGTERM end the
# script through that trap. The trap begins with lb_cleanup_begin (a second
# Ctrl-C does not cut the cleanup short) and ends with lb_cleanup_end
# STATUS, which ends the script by the signal that interrupted it, so
# whatever runs the script (a loop over tests, ctest, a shell) sees a child
# killed by SIGINT or SIGTERM, not an exit status, and stops too.
lb_trap_signals() {
    trap '_lb_signal=INT; exit 130' INT
    trap '_lb_signal=TERM; exit 143' TERM
}
lb_cleanup_begin() {
    trap - EXIT
    trap '' INT TERM
}
lb_cleanup_end() {
    if [[ -n ${_lb_signal-} ]]; then
        trap - "$_lb_signal"
        kill -s "$_lb_signal" "$$"
    fi
    exit "$1"
}

# lb_state_dir - where pid files, configs, logs and data of the services live.
lb_state_dir() {
    printf '%s\n' "${LB_STATE_DIR:-${TMPDIR:-/tmp}/leaderboard-projector}"
}

# Milliseconds since the epoch.
_lb_now_ms() {
    local t=${EPOCHREALTIME-}
    t=${t//[.,]/}
    if [[ -n $t ]]; then
        printf '%s\n' "$((10#$t / 1000))"
    else
        date +%s%3N
    fi
}

# "12.3" from a start time in ms.
_lb_elapsed() {
    local d=$(($(_lb_now_ms) - $1))
    printf '%d.%d\n' "$((d / 1000))" "$((d % 1000 / 100))"
}

# lb_wait_for TIMEOUT_SECONDS CMD [ARG...]
# Run CMD every 0.2 s until it succeeds (return 0) or TIMEOUT_SECONDS have
# passed (return 1). CMD's output is not touched.
lb_wait_for() (
    _lb_isolate
    local timeout=$1 deadline
    shift
    if [[ ! $timeout =~ ^[0-9]+$ ]] || (($# == 0)); then
        _lb_msg "usage: lb_wait_for TIMEOUT_SECONDS CMD [ARG...]"
        return 2
    fi
    deadline=$(($(_lb_now_ms) + timeout * 1000))
    while :; do
        "$@" && return 0
        (($(_lb_now_ms) >= deadline)) && return 1
        sleep 0.2
    done
)

# Print the last lines of each existing file, framed, on stderr.
_lb_tail_logs() {
    local lines=$1 f shown=0
    shift
    for f in "$@"; do
        [[ -s $f ]] || continue
        shown=1
        printf -- '----- last %d lines of %s -----\n' "$lines" "$f" >&2
        tail -n "$lines" "$f" >&2
    done
    ((shown)) && printf -- '----- end of logs -----\n' >&2
    return 0
}

# _lb_pid_alive_as PID COMM [CMDLINE_SUBSTRING]
# True if PID is a live (not zombie) process whose command name is COMM and,
# if given, whose command line contains CMDLINE_SUBSTRING.
_lb_pid_alive_as() {
    local pid=$1 comm=$2 pat=${3-} c stat cmd
    [[ $pid =~ ^[1-9][0-9]*$ ]] || return 1
    if [[ -d /proc/$pid ]]; then
        { read -r c <"/proc/$pid/comm"; } 2>/dev/null || return 1
        [[ $c == "$comm" ]] || return 1
        { read -r stat <"/proc/$pid/stat"; } 2>/dev/null || return 1
        stat=${stat##*) }
        [[ ${stat%% *} == Z ]] && return 1
        if [[ -n $pat ]]; then
            cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)
            [[ $cmd == *"$pat"* ]] || return 1
        fi
        return 0
    fi
    [[ -e /proc/self ]] && return 1 # Linux, and the pid is gone
    # Without /proc: ask ps.
    c=$(ps -p "$pid" -o stat= -o comm= 2>/dev/null) || return 1
    [[ $c == Z* ]] && return 1
    [[ ${c##* } == "$comm" ]] || return 1
    if [[ -n $pat ]]; then
        cmd=$(ps -p "$pid" -o args= 2>/dev/null)
        [[ $cmd == *"$pat"* ]] || return 1
    fi
    return 0
}

# Read a pid file; prints the pid or nothing.
_lb_read_pid() {
    local pid=
    [[ -f $1 ]] && { read -r pid <"$1"; } 2>/dev/null
    [[ $pid =~ ^[0-9]+$ ]] && printf '%s\n' "$pid"
    return 0
}

# _lb_spawn LOGFILE CMD [ARG...] - start CMD in the background with stdin
# from /dev/null, stdout+stderr appended to LOGFILE and every other inherited
# file descriptor closed (so e.g. a test runner waiting on its fd 3 or a
# command substitution is not held open by the daemon). Sets _lb_spawned_pid.
# _lb_still_there PID - the process exists and is not a zombie, whatever
# it runs (a child of ours that has not exec'd yet, say).
_lb_still_there() {
    local stat
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

_lb_spawn() {
    local log=$1
    shift
    (
        local fd
        # (no redirection on this loop: bash would keep a saved copy of fd 2
        # above 2 while it runs, close it here and lose stderr.)
        for fd in /proc/"$BASHPID"/fd/*; do
            fd=${fd##*/}
            [[ $fd =~ ^[0-9]+$ ]] && ((fd > 2)) && [[ -e /proc/$BASHPID/fd/$fd ]] &&
                exec {fd}>&-
        done
        exec "$@"
    ) </dev/null >>"$log" 2>&1 &
    _lb_spawned_pid=$!
    # Until the subshell has exec'd, /proc/<pid>/comm still shows this
    # shell's name and the pid would not be recognised as the service (and
    # a stop at that moment would miss it). Wait for the exec, up to 2 s.
    local me='' c='' i
    { read -r me <"/proc/$BASHPID/comm"; } 2>/dev/null
    for ((i = 0; i < 100; i++)); do
        c=''
        { read -r c <"/proc/$_lb_spawned_pid/comm"; } 2>/dev/null
        [[ -n $c && $c != "$me" ]] && break
        [[ -z $c ]] && break # already gone; the caller notices
        sleep 0.02
    done
    return 0
}

# _lb_terminate TIMEOUT COMM PID|CMDLINE_SUBSTRING...
# Send TERM to every given pid, wait up to TIMEOUT seconds for all of them to
# be gone, then KILL the rest and wait up to 3 more seconds. A pid is only
# counted (and killed) while it is alive as COMM with that command line.
# Returns 1 if something survived SIGKILL.
_lb_terminate() {
    local timeout=$1 comm=$2 item pid pat deadline left=0 pass
    shift 2
    local -a items=("$@")
    for item in "${items[@]}"; do
        kill -TERM "${item%%|*}" 2>/dev/null
    done
    for pass in term kill; do
        if [[ $pass == kill ]]; then
            timeout=3
            for item in "${items[@]}"; do
                pid=${item%%|*} pat=${item#*|}
                if _lb_pid_alive_as "$pid" "$comm" "$pat"; then
                    _lb_msg "  pid $pid did not stop after SIGTERM; sending SIGKILL"
                    kill -KILL "$pid" 2>/dev/null
                fi
            done
        fi
        deadline=$(($(_lb_now_ms) + timeout * 1000))
        while :; do
            left=0
            for item in "${items[@]}"; do
                pid=${item%%|*} pat=${item#*|}
                _lb_pid_alive_as "$pid" "$comm" "$pat" && left=$((left + 1))
            done
            ((left == 0)) && return 0
            (($(_lb_now_ms) >= deadline)) && break
            sleep 0.1
        done
    done
    _lb_msg "  $left process(es) still alive after SIGKILL"
    return 1
}

# ---------------------------------------------------------------------------
# Ports
# ---------------------------------------------------------------------------

# Fill the associative array _lb_busy with every local TCP port that has a
# socket in any state (listening, connected, time-wait). Returns 1 if ss is
# missing (callers then probe with /dev/tcp).
_lb_collect_busy_ports() {
    declare -gA _lb_busy=()
    command -v ss >/dev/null 2>&1 || return 1
    local port
    while read -r port; do
        [[ $port =~ ^[0-9]+$ ]] && _lb_busy[$port]=1
    done < <(ss -Htan 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }')
    return 0
}

# _lb_read_reservations TABLE - fill _lb_reserved (port -> 1) with the ports
# TABLE reserves for shells still running, and _lb_kept with their lines
# (those of shells that ended are dropped when the table is written again).
_lb_read_reservations() {
    declare -gA _lb_reserved=()
    _lb_kept=()
    [[ -n $1 && -r $1 ]] || return 0
    local port pid
    while read -r port pid; do
        [[ $port =~ ^[0-9]+$ && $pid =~ ^[0-9]+$ ]] || continue
        [[ -d /proc/$pid ]] || continue # ended (any user's: kill -0 is refused for those)
        _lb_reserved[$port]=1
        _lb_kept+=("$port $pid")
    done <"$1"
}

# lb_port_in_use PORT - true if something listens on PORT (any local address).
lb_port_in_use() (
    _lb_isolate
    local port=$1
    if command -v ss >/dev/null 2>&1; then
        [[ -n $(ss -Hltn "sport = :$port" 2>/dev/null) ]]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
    fi
)

# True if PORT is free by the information gathered in _lb_busy (or by probing).
_lb_port_free() {
    if [[ $_lb_have_ss == 1 ]]; then
        [[ -z ${_lb_busy[$1]-} ]]
    else
        ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

# lb_free_port_base N [LOW] [HIGH]
# Print a port B in [LOW, HIGH) (default 15000..21000, for Redis nodes) such
# that B .. B+N-1 and B+10000 .. B+10000+N-1 are all unused on this machine.
# Each role picks from its own range, and no range meets another's ports or
# a Redis node's cluster bus port (its port + 10000): a service stopped and
# started again on the same port (a projector's /metrics across a restart)
# must not find it taken meanwhile by a node added on another role's pick.
#   Redis nodes   15000..21000, bus 25000..31000 (the default)
#   Kafka         21000..25000 (a broker and its controller)
#   HTTP          31000..32000 (/metrics listeners)
#   registry      32000..32700 (below 32768, where Linux's ephemeral ports start)
# Candidates (blocks of N rounded up to 10, single ports one by one) are
# tried from a random starting point. A block picked is reserved for the
# calling shell ($$) until it ends (a line "PORT PID" per port in
# $LB_PORT_RESERVATIONS, default /tmp/lb-ports.UID, written under flock):
# two tests started at the same time must not pick the same block between a
# pick and their service's bind (a broker takes seconds to bind). Start the
# service right away all the same: programs outside the project do not read
# the reservations.
lb_free_port_base() (
    _lb_isolate
    local n=${1-} lo=${2:-15000} hi=${3:-21000}
    if [[ ! $n =~ ^[1-9][0-9]*$ || ! $lo =~ ^[0-9]+$ || ! $hi =~ ^[0-9]+$ ]]; then
        _lb_msg "usage: lb_free_port_base N [LOW] [HIGH]"
        return 2
    fi
    ((hi + n + 10000 > 65536)) && hi=$((65536 - 10000 - n))
    local step=$(((n + 9) / 10 * 10))
    ((n == 1)) && step=1
    local slots=$(((hi - lo) / step))
    if ((slots < 1)); then
        _lb_msg "lb_free_port_base: range $lo..$hi too small for $n ports"
        return 2
    fi
    local table=${LB_PORT_RESERVATIONS:-/tmp/lb-ports.$(id -u)}
    if ! command -v flock >/dev/null 2>&1; then
        _lb_msg "lb_free_port_base: no flock (util-linux): ports are not reserved, two tests at once may pick the same"
        table=
    elif [[ -e $table.lock && ! -O $table.lock ]] || ! { exec 9>>"$table.lock"; } 2>/dev/null; then
        _lb_msg "lb_free_port_base: $table.lock is not this user's or not writable: ports are not reserved (set LB_PORT_RESERVATIONS)"
        table=
    elif ! flock -w 30 9; then
        _lb_msg "lb_free_port_base: $table.lock held for 30 s by another shell; is one stopped (SIGSTOP)?"
        return 1
    fi
    _lb_have_ss=0
    _lb_collect_busy_ports && _lb_have_ss=1
    _lb_read_reservations "$table"
    local start=$((RANDOM % slots)) k base i ok
    for ((k = 0; k < slots; k++)); do
        base=$((lo + ((start + k) % slots) * step))
        ok=1
        for ((i = 0; i < n; i++)); do
            if [[ -n ${_lb_reserved[$((base + i))]-} ]] ||
                ! _lb_port_free $((base + i)) || ! _lb_port_free $((base + i + 10000)); then
                ok=0
                break
            fi
        done
        if ((ok)); then
            if [[ -n $table ]]; then
                for ((i = 0; i < n; i++)); do
                    _lb_kept+=("$((base + i)) $$")
                done
                { printf '%s\n' "${_lb_kept[@]}" >"$table.new" && mv -f "$table.new" "$table"; } 2>/dev/null ||
                    _lb_msg "lb_free_port_base: could not write $table: ports $base.. are not reserved"
            fi
            printf '%s\n' "$base"
            return 0
        fi
    done
    _lb_msg "lb_free_port_base: no block of $n free ports in $lo..$hi"
    return 1
)

# ---------------------------------------------------------------------------
# Redis Cluster
# ---------------------------------------------------------------------------

# _lb_redis_cli_auth SECONDS ARGS... - redis-cli with the cluster's
# credentials, if any (the password travels in REDISCLI_AUTH, never on a
# command line), killed after SECONDS.
_lb_redis_cli_auth() {
    local seconds=$1
    shift
    local -a env=() user=() tls_opts=()
    if [[ -n ${REDIS_PASSWORD-} ]]; then
        env=("REDISCLI_AUTH=$REDIS_PASSWORD")
        [[ -n ${REDIS_USER-} ]] && user=(--user "$REDIS_USER")
    fi
    if [[ ${REDIS_TLS:-0} == 1 ]]; then
        local d
        d=$(lb_tls_dir)
        tls_opts=(--tls --cacert "$d/ca.crt" --cert "$d/client.crt" --key "$d/client.key")
    fi
    env "${env[@]}" timeout "$seconds" redis-cli "${tls_opts[@]}" "${user[@]}" "$@"
}

# lb_tls_dir - where REDIS_TLS=1 and KAFKA_SASL=1 keep their certificates.
lb_tls_dir() { printf '%s\n' "$(lb_state_dir)/tls"; }

# _lb_tls_files - make the test CA and the node and client
# certificates (EC P-256, 30 days) unless they are there and valid for a
# day more.
_lb_tls_files() {
    local d
    d=$(lb_tls_dir)
    if [[ -f $d/server.pem ]] &&
        openssl x509 -checkend 86400 -noout -in "$d/server.crt" >/dev/null 2>&1; then
        return 0
    fi
    if ! command -v openssl >/dev/null 2>&1; then
        _lb_msg "tls: 'openssl' not found (REDIS_TLS=1 and KAFKA_SASL=1 make their certificates with it); run ops/install-deps.sh"
        return 1
    fi
    mkdir -p "$d" && chmod 700 "$d" || return 1
    local name ok=1
    {
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
            -subj "/CN=leaderboard-projector test CA" -keyout "$d/ca.key" -out "$d/ca.crt" || ok=0
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' \
            >"$d/leaf.ext"
        for name in server client; do
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                -subj "/CN=leaderboard-projector test $name" -keyout "$d/$name.key" \
                -out "$d/$name.csr" &&
                openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" \
                    -CAcreateserial -days 30 -sha256 -extfile "$d/leaf.ext" -out "$d/$name.crt" ||
                ok=0
            rm -f "$d/$name.csr"
        done
        # Kafka's PEM keystore: the key and its certificate in one file
        cat "$d/server.key" "$d/server.crt" >"$d/server.pem" || ok=0
    } >"$d/openssl.log" 2>&1
    ((ok)) || {
        _lb_msg "tls: making the test certificates in $d failed"
        _lb_tail_logs 10 "$d/openssl.log"
        return 1
    }
}

_lb_redis_cli() {
    local port=$1
    shift
    _lb_redis_cli_auth 5 -h 127.0.0.1 -p "$port" "$@"
}

# Read the configuration into _rm (masters), _rr (replicas per master),
# _rbase, _rn (node count), _rports (array), _rdir.
_lb_redis_cfg() {
    _rm=${REDIS_MASTERS:-3}
    _rr=${REDIS_REPLICAS:-1}
    _rbase=${REDIS_PORT_BASE:-7000}
    _rdir=$(lb_state_dir)/redis
    local v
    for v in _rm _rr _rbase; do
        if [[ ! ${!v} =~ ^[0-9]+$ ]]; then
            _lb_msg "redis-cluster: REDIS_MASTERS, REDIS_REPLICAS and REDIS_PORT_BASE must be numbers (got '${!v}')"
            return 1
        fi
    done
    if [[ ! ${REDIS_NODE_TIMEOUT_MS:-2000} =~ ^[1-9][0-9]*$ ]]; then
        _lb_msg "redis-cluster: REDIS_NODE_TIMEOUT_MS must be a number of milliseconds (got '$REDIS_NODE_TIMEOUT_MS')"
        return 1
    fi
    _rm=$((10#$_rm)) _rr=$((10#$_rr)) _rbase=$((10#$_rbase))
    _rn=$((_rm * (1 + _rr)))
    if ((_rbase < 1 || _rbase + _rn - 1 + 10000 > 65535)); then
        _lb_msg "redis-cluster: REDIS_PORT_BASE=$_rbase leaves no room for $_rn nodes and their bus ports (+10000)"
        return 1
    fi
    _rports=()
    local i
    for ((i = 0; i < _rn; i++)); do
        _rports+=("$((_rbase + i))")
    done
    # A cluster started earlier with other REDIS_MASTERS/REDIS_REPLICAS on
    # the same base is remembered in a manifest; stop/status use it.
    _rmanifest=$_rdir/cluster-$_rbase.ports
}

# Ports of the cluster on _rbase as started (manifest), else as configured.
_lb_redis_known_ports() {
    local -a p=()
    if [[ -f $_rmanifest ]]; then
        read -r -a p <"$_rmanifest"
    fi
    if ((${#p[@]} > 0)); then
        printf '%s\n' "${p[@]}"
    else
        printf '%s\n' "${_rports[@]}"
    fi
}

# lb_redis_seeds - comma-separated seed list for the current configuration.
lb_redis_seeds() (
    _lb_isolate
    _lb_redis_cfg || return 1
    local IFS=,
    local -a a=("${_rports[@]/#/127.0.0.1:}")
    printf '%s\n' "${a[*]}"
)

# _lb_redis_alive PID PORT - PID is the node of PORT: redis-server with
# ":PORT" in its title, or, before it has initialised and set that title,
# with its own redis.conf on the command line. While Redis rewrites its
# title the command line shows neither for a moment: a redis-server seen so
# is looked at again.
_lb_redis_alive() {
    local i
    for i in 1 2 3 4; do
        _lb_pid_alive_as "$1" redis-server ":$2" && return 0
        _lb_pid_alive_as "$1" redis-server "$(lb_state_dir)/redis/$2/redis.conf" && return 0
        _lb_pid_alive_as "$1" redis-server || return 1
        sleep 0.05
    done
    return 1
}

# lb_redis_pid PORT - pid of the node on PORT if it is running.
lb_redis_pid() (
    _lb_isolate
    local port=$1 pid
    pid=$(_lb_read_pid "$(lb_state_dir)/redis/$port/redis.pid")
    _lb_redis_alive "$pid" "$port" || return 1
    printf '%s\n' "$pid"
)

_lb_redis_write_conf() {
    local port=$1 dir=$2
    local listen="port $port"
    if [[ ${REDIS_TLS:-0} == 1 ]]; then
        local d
        d=$(lb_tls_dir)
        listen="port 0
tls-port $port
tls-cert-file $d/server.crt
tls-key-file $d/server.key
tls-ca-cert-file $d/ca.crt
tls-auth-clients ${REDIS_TLS_AUTH_CLIENTS:-yes}
tls-cluster yes
tls-replication yes
cluster-announce-hostname localhost"
    fi
    cat >"$dir/redis.conf" <<EOF
# Generated by ops/services.sh (lb_redis_cluster_start); rewritten on every start.
$listen
bind 127.0.0.1
protected-mode yes
daemonize no
dir $dir
logfile $dir/redis.log
loglevel notice
cluster-enabled yes
cluster-config-file $dir/nodes.conf
cluster-node-timeout ${REDIS_NODE_TIMEOUT_MS:-2000}
$(if [[ ${REDIS_PERSIST:-0} == 1 ]]; then
        printf 'save 60 1\nappendonly yes\nappendfsync everysec\n'
    else
        printf 'save ""\nappendonly no\n'
    fi)
repl-diskless-sync yes
repl-diskless-sync-delay 0
${REDIS_CONF_EXTRA-}
EOF
    if [[ -n ${REDIS_PASSWORD-} ]]; then
        {
            echo "requirepass $REDIS_PASSWORD"
            echo "masterauth ${REDIS_MASTERAUTH:-$REDIS_PASSWORD}"
            if [[ -n ${REDIS_USER-} ]]; then
                echo "user $REDIS_USER on >$REDIS_PASSWORD ~* &* +@all"
                echo "masteruser $REDIS_USER"
            fi
            if [[ -n ${REDIS_ACL_FILE-} ]]; then
                sed -n "s/>CHANGE_ME/>${REDIS_ACL_PASSWORD:?REDIS_ACL_FILE needs REDIS_ACL_PASSWORD}/p" \
                    "$REDIS_ACL_FILE" | grep '^user '
            fi
        } >>"$dir/redis.conf"
        chmod 600 "$dir/redis.conf"
    fi
}

# Every node answers PING. Fails fast (return 2) if a node process died.
_lb_redis_check_up() {
    local p pid
    for p in "${_rports[@]}"; do
        pid=$(_lb_read_pid "$_rdir/$p/redis.pid")
        if ! _lb_redis_alive "$pid" "$p"; then
            _lb_bad_port=$p
            return 2
        fi
    done
    for p in "${_rports[@]}"; do
        if [[ $(_lb_redis_cli "$p" ping 2>/dev/null) != PONG ]]; then
            _lb_bad_port=$p
            return 1
        fi
    done
    return 0
}

# Every node on the given ports has cluster_state:ok, knows every one of
# them, and, if a replica, has its link to its master up. Counts the roles
# in _lb_masters and _lb_replicas.
_lb_redis_check_nodes() {
    local p info repl known
    _lb_masters=0 _lb_replicas=0
    for p in "$@"; do
        info=$(_lb_redis_cli "$p" cluster info 2>/dev/null)
        info=${info//$'\r'/}
        _lb_bad_port=$p
        _lb_bad_why="no cluster_state:ok"
        [[ $info == *cluster_state:ok* ]] || return 1
        known=
        [[ $info =~ cluster_known_nodes:([0-9]+) ]] && known=${BASH_REMATCH[1]}
        _lb_bad_why="knows ${known:-?} of $# nodes"
        [[ $known == "$#" ]] || return 1
        repl=$(_lb_redis_cli "$p" info replication 2>/dev/null)
        repl=${repl//$'\r'/}
        if [[ $repl == *role:master* ]]; then
            _lb_masters=$((_lb_masters + 1))
        elif [[ $repl == *role:slave* ]]; then
            _lb_bad_why="replica link to master not up"
            [[ $repl == *master_link_status:up* || (-n ${REDIS_PASSWORD-} &&
                ${REDIS_MASTERAUTH:-$REDIS_PASSWORD} != "$REDIS_PASSWORD") ]] || return 1
            _lb_replicas=$((_lb_replicas + 1))
        else
            _lb_bad_why="no role"
            return 1
        fi
    done
}

# Cluster fully formed as configured: every node agrees (above) and the
# roles add up.
_lb_redis_check_formed() {
    _lb_redis_check_nodes "${_rports[@]}" || return 1
    _lb_bad_port=all
    _lb_bad_why="$_lb_masters masters/$_lb_replicas replicas, want $_rm/$((_rm * _rr))"
    ((_lb_masters == _rm && _lb_replicas == _rm * _rr))
}

_lb_redis_node_logs() {
    local p
    for p in "${_rports[@]}"; do
        printf '%s\n' "$_rdir/$p/redis.out" "$_rdir/$p/redis.log"
    done
}

# Stop the nodes on the given ports (pid file based). Idempotent.
_lb_redis_stop_ports() {
    local p pid pidf stopped=0 stale=0
    local -a items=() files=()
    for p in "$@"; do
        pidf=$_rdir/$p/redis.pid
        [[ -f $pidf ]] || continue
        files+=("$pidf")
        pid=$(_lb_read_pid "$pidf")
        if _lb_pid_alive_as "$pid" redis-server ":$p"; then
            items+=("$pid|:$p")
        elif _lb_pid_alive_as "$pid" redis-server "$_rdir/$p/redis.conf"; then
            items+=("$pid|$_rdir/$p/redis.conf")
        else
            stale=$((stale + 1))
        fi
    done
    local rc=0
    if ((${#items[@]} > 0)); then
        _lb_terminate 5 redis-server "${items[@]}" || rc=1
        stopped=${#items[@]}
    fi
    ((${#files[@]} > 0)) && rm -f "${files[@]}"
    _lb_stop_summary="$stopped stopped, $stale already dead"
    return $rc
}

_lb_redis_cluster_start() {
    local t0
    t0=$(_lb_now_ms)
    _lb_redis_cfg || return 1
    local cmd
    for cmd in redis-server redis-cli timeout; do
        if ! command -v "$cmd" >/dev/null 2>&1; then
            _lb_msg "redis-cluster: '$cmd' not found; run ops/install-deps.sh"
            return 1
        fi
    done
    if ((_rm < 3)); then
        _lb_msg "redis-cluster: Redis Cluster needs at least 3 masters (REDIS_MASTERS=$_rm)"
        return 1
    fi
    local p pid q
    # Ours already running?
    for p in $(_lb_redis_known_ports) "${_rports[@]}"; do
        pid=$(_lb_read_pid "$_rdir/$p/redis.pid")
        if _lb_redis_alive "$pid" "$p"; then
            _lb_msg "redis-cluster: already running: node on port $p (pid $pid, state $_rdir)."
            _lb_msg "  Stop it first: REDIS_PORT_BASE=$_rbase LB_STATE_DIR=$(lb_state_dir) $_lb_repo/ops/redis-cluster.sh stop"
            return 1
        fi
    done
    # Someone else's process on our ports?
    for p in "${_rports[@]}"; do
        for q in "$p" $((p + 10000)); do
            if lb_port_in_use "$q"; then
                _lb_msg "redis-cluster: port $q is already in use by another process (not started from $(lb_state_dir))."
                _lb_msg "  See what holds it with: ss -ltnp 'sport = :$q'"
                _lb_msg "  Stop that process (if it is an old cluster of ours: REDIS_PORT_BASE=$_rbase ops/redis-cluster.sh stop, with its LB_STATE_DIR),"
                _lb_msg "  or choose other ports: REDIS_PORT_BASE=\$(lb_free_port_base $_rn)."
                return 1
            fi
        done
    done

    mkdir -p "$_rdir" || return 1
    if [[ ${REDIS_TLS:-0} == 1 ]]; then
        _lb_tls_files || return 1
    fi
    printf '%s\n' "${_rports[*]}" >"$_rmanifest"
    _lb_msg "redis-cluster: starting $_rn nodes on 127.0.0.1:${_rports[0]}-${_rports[-1]} ($_rm masters, $_rr replica(s) each)"
    local dir
    for p in "${_rports[@]}"; do
        dir=$_rdir/$p
        rm -rf "$dir"
        mkdir -p "$dir" || return 1
        _lb_redis_write_conf "$p" "$dir"
        _lb_spawn "$dir/redis.out" redis-server "$dir/redis.conf"
        printf '%s\n' "$_lb_spawned_pid" >"$dir/redis.pid"
    done

    # 1. every node answers PING
    local deadline st
    deadline=$(($(_lb_now_ms) + 10000))
    while :; do
        _lb_redis_check_up
        st=$?
        ((st == 0)) && break
        if ((st == 2)) || (($(_lb_now_ms) >= deadline)); then
            if ((st == 2)); then
                _lb_msg "redis-cluster: node on port $_lb_bad_port exited during startup"
            else
                _lb_msg "redis-cluster: node on port $_lb_bad_port does not answer PING after 10 s"
            fi
            _lb_tail_logs 15 "$_rdir/$_lb_bad_port/redis.out" "$_rdir/$_lb_bad_port/redis.log"
            _lb_redis_stop_ports "${_rports[@]}"
            rm -f "$_rmanifest"
            return 1
        fi
        sleep 0.1
    done

    # 2. create the cluster
    local -a addrs=("${_rports[@]/#/127.0.0.1:}")
    local clog=$_rdir/cluster-create-$_rbase.log
    if ! _lb_redis_cli_auth 60 --cluster create "${addrs[@]}" \
        --cluster-replicas "$_rr" --cluster-yes </dev/null >"$clog" 2>&1; then
        _lb_msg "redis-cluster: 'redis-cli --cluster create' failed"
        local -a logs
        mapfile -t logs < <(_lb_redis_node_logs)
        _lb_tail_logs 25 "$clog"
        _lb_tail_logs 5 "${logs[@]}"
        _lb_redis_stop_ports "${_rports[@]}"
        rm -f "$_rmanifest"
        return 1
    fi

    # 3. wait until every node agrees the cluster is complete
    deadline=$(($(_lb_now_ms) + 30000))
    until _lb_redis_check_formed; do
        if (($(_lb_now_ms) >= deadline)); then
            _lb_msg "redis-cluster: cluster not ready after 30 s (node $_lb_bad_port: $_lb_bad_why)"
            local -a logs
            mapfile -t logs < <(_lb_redis_node_logs)
            _lb_tail_logs 25 "$clog"
            _lb_tail_logs 8 "${logs[@]}"
            _lb_redis_stop_ports "${_rports[@]}"
            rm -f "$_rmanifest"
            return 1
        fi
        sleep 0.2
    done

    _lb_msg "redis-cluster: ready in $(_lb_elapsed "$t0") s"
    printf 'seeds: %s\n' "$(lb_redis_seeds)"
    printf 'state: %s\n' "$_rdir"
    return 0
}

# lb_redis_cluster_start - start and form the cluster (see top of file).
lb_redis_cluster_start() (
    _lb_isolate
    _lb_redis_cluster_start
)

# lb_redis_cluster_stop - stop every node of the cluster on REDIS_PORT_BASE
# (SIGTERM: with REDIS_PERSIST=1 each node writes its data first). Data and
# the list of nodes are kept for lb_redis_cluster_resume; LB_WIPE=1 removes
# them (node directories, logs, nodes.conf).
lb_redis_cluster_stop() (
    _lb_isolate
    local t0 rc=0
    t0=$(_lb_now_ms)
    _lb_redis_cfg || return 1
    local -a ports
    mapfile -t ports < <(_lb_redis_known_ports)
    _lb_redis_stop_ports "${ports[@]}" || rc=1
    if [[ ${LB_WIPE:-0} == 1 ]]; then
        rm -f "$_rmanifest"
        local p
        for p in "${ports[@]}"; do
            rm -rf "${_rdir:?}/$p"
        done
        rm -f "$_rdir/cluster-create-$_rbase.log"
        rmdir "$_rdir" 2>/dev/null
    fi
    _lb_msg "redis-cluster: ports ${ports[0]}-${ports[-1]}: $_lb_stop_summary ($(_lb_elapsed "$t0") s)"
    return $rc
)

# Every node of the manifest agrees the cluster is whole. (After failovers
# and replaced shards the roles no longer follow the configuration, so they
# are not counted here.)
_lb_redis_check_whole() {
    local -a ports
    mapfile -t ports < <(_lb_redis_known_ports)
    _lb_redis_check_nodes "${ports[@]}"
}

# lb_redis_cluster_resume - start again every node of a cluster stopped with
# lb_redis_cluster_stop, from the data it kept (nodes.conf, and the AOF/RDB
# files with REDIS_PERSIST=1), and wait until the cluster is whole again.
lb_redis_cluster_resume() (
    _lb_isolate
    local t0 p dir pid
    t0=$(_lb_now_ms)
    _lb_redis_cfg || return 1
    local -a ports
    mapfile -t ports < <(_lb_redis_known_ports)
    for p in "${ports[@]}"; do
        dir=$_rdir/$p
        if [[ ! -f $dir/nodes.conf ]]; then
            _lb_msg "redis-cluster: $dir/nodes.conf is missing: nothing to resume on port $p"
            return 1
        fi
        pid=$(_lb_read_pid "$dir/redis.pid")
        _lb_redis_alive "$pid" "$p" && continue
        _lb_redis_write_conf "$p" "$dir"
        _lb_spawn "$dir/redis.out" redis-server "$dir/redis.conf"
        printf '%s\n' "$_lb_spawned_pid" >"$dir/redis.pid"
    done
    local deadline=$(($(_lb_now_ms) + 60000))
    until _lb_redis_check_whole; do
        if (($(_lb_now_ms) >= deadline)); then
            _lb_msg "redis-cluster: not whole 60 s after resuming (node $_lb_bad_port: $_lb_bad_why)"
            return 1
        fi
        sleep 0.2
    done
    _lb_msg "redis-cluster: resumed ${#ports[@]} nodes in $(_lb_elapsed "$t0") s"
    return 0
)

# lb_redis_node_add PORT - start a new, empty cluster node on PORT (not yet
# part of any cluster: CLUSTER MEET it) and record it with the cluster, so
# stop and status include it. Returns once it answers PING.
lb_redis_node_add() (
    _lb_isolate
    local port=$1 dir
    _lb_redis_cfg || return 1
    dir=$_rdir/$port
    if lb_port_in_use "$port" || lb_port_in_use $((port + 10000)); then
        _lb_msg "redis-cluster: port $port or its bus port is in use"
        return 1
    fi
    rm -rf "$dir"
    mkdir -p "$dir" || return 1
    _lb_redis_write_conf "$port" "$dir"
    _lb_spawn "$dir/redis.out" redis-server "$dir/redis.conf"
    printf '%s\n' "$_lb_spawned_pid" >"$dir/redis.pid"
    local -a ports
    mapfile -t ports < <(_lb_redis_known_ports)
    printf '%s\n' "${ports[*]} $port" >"$_rmanifest"
    local deadline=$(($(_lb_now_ms) + 10000))
    until [[ $(_lb_redis_cli "$port" ping 2>/dev/null) == PONG ]]; do
        if ! _lb_redis_alive "$_lb_spawned_pid" "$port" || (($(_lb_now_ms) >= deadline)); then
            _lb_msg "redis-cluster: the new node on port $port did not start"
            _lb_tail_logs 15 "$dir/redis.out" "$dir/redis.log"
            return 1
        fi
        sleep 0.1
    done
    return 0
)

# lb_redis_node_destroy PORT - SIGKILL the node on PORT and delete its data
# directory: a machine lost with its disk. It leaves the manifest.
lb_redis_node_destroy() (
    _lb_isolate
    local port=$1 pid
    _lb_redis_cfg || return 1
    pid=$(_lb_read_pid "$_rdir/$port/redis.pid")
    if _lb_redis_alive "$pid" "$port"; then
        kill -KILL "$pid" 2>/dev/null
        local i
        for ((i = 0; i < 50; i++)); do
            _lb_redis_alive "$pid" "$port" || break
            sleep 0.1
        done
    fi
    rm -rf "${_rdir:?}/$port"
    local -a ports others=()
    mapfile -t ports < <(_lb_redis_known_ports)
    for p in "${ports[@]}"; do
        [[ $p == "$port" ]] || others+=("$p")
    done
    printf '%s\n' "${others[*]}" >"$_rmanifest"
    return 0
)

# lb_redis_cluster_status - one line per node: port, pid, alive|dead, role.
# Returns 0 if every node is alive.
lb_redis_cluster_status() (
    _lb_isolate
    _lb_redis_cfg || return 1
    local p pid state role rc=0 r
    for p in $(_lb_redis_known_ports); do
        pid=$(_lb_read_pid "$_rdir/$p/redis.pid")
        role=-
        if _lb_redis_alive "$pid" "$p"; then
            state=alive
            r=$(_lb_redis_cli "$p" role 2>/dev/null | head -n 1)
            r=${r//$'\r'/}
            [[ -n $r ]] && role=$r
        else
            state=dead
            rc=1
        fi
        printf '%-5s pid=%-7s %-5s %s\n' "$p" "${pid:--}" "$state" "$role"
    done
    return $rc
)

# ---------------------------------------------------------------------------
# Kafka
# ---------------------------------------------------------------------------

_lb_kafka_cache_dir() {
    # "-2": the jar set of ops/kafka/pom.xml changed (admin tools added)
    printf '%s\n' "${LB_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/leaderboard-projector}/kafka-$_lb_kafka_version-2"
}

# lb_fetch_kafka_jars - make sure the Kafka broker jars are in the cache and
# print the lib directory. Uses Maven (ops/kafka/pom.xml); does nothing when
# the cache is already complete. The cache is filled in a temporary
# directory that is renamed into place, so it is never seen half written.
lb_fetch_kafka_jars() (
    _lb_isolate
    local dest parent tmp n
    dest=$(_lb_kafka_cache_dir)
    if [[ -f $dest/.complete ]]; then
        printf '%s\n' "$dest/lib"
        return 0
    fi
    if ! command -v mvn >/dev/null 2>&1; then
        _lb_msg "kafka: 'mvn' not found; run ops/install-deps.sh"
        return 1
    fi
    parent=${dest%/*}
    mkdir -p "$parent" || return 1
    tmp=$(mktemp -d "$parent/.kafka-$_lb_kafka_version.tmp.XXXXXX") || return 1
    chmod 755 "$tmp"
    _lb_msg "kafka: fetching Kafka $_lb_kafka_version jars with Maven into $dest"
    if ! (cd "$tmp" && mvn -q -B -f "$_lb_repo/ops/kafka/pom.xml" \
        dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="$tmp/lib") </dev/null >"$tmp/mvn.log" 2>&1; then
        _lb_msg "kafka: Maven could not fetch the Kafka jars"
        _lb_tail_logs 30 "$tmp/mvn.log"
        rm -rf "$tmp"
        return 1
    fi
    n=$(find "$tmp/lib" -name '*.jar' | wc -l)
    if [[ ! -f $tmp/lib/kafka_2.13-$_lb_kafka_version.jar || ! -f $tmp/lib/slf4j-reload4j-1.7.36.jar ||
        ! -f $tmp/lib/kafka-tools-$_lb_kafka_version.jar ]]; then
        _lb_msg "kafka: Maven finished but the Kafka jars are missing in $tmp/lib"
        rm -rf "$tmp"
        return 1
    fi
    rm -f "$tmp/mvn.log"
    printf 'kafka %s: %s jars\n' "$_lb_kafka_version" "$n" >"$tmp/.complete"
    # An incomplete leftover from an interrupted run is replaced; a complete
    # one (another fetch finished first) is kept.
    if [[ -e $dest && ! -f $dest/.complete ]]; then
        rm -rf "$dest"
    fi
    if ! mv -T "$tmp" "$dest" 2>/dev/null; then
        rm -rf "$tmp"
        if [[ ! -f $dest/.complete ]]; then
            _lb_msg "kafka: could not move the jars into $dest"
            return 1
        fi
    fi
    printf '%s\n' "$dest/lib"
)

# lb_fetch_promtool - make sure Prometheus' promtool (for testing the alert
# rules) is in the cache and print its path. It comes from Debian's
# prometheus package, unpacked without installing it (no service started).
lb_fetch_promtool() (
    _lb_isolate
    local dest tmp
    dest=${LB_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/leaderboard-projector}/promtool
    if [[ -x $dest/promtool ]]; then
        printf '%s\n' "$dest/promtool"
        return 0
    fi
    mkdir -p "${dest%/*}" || return 1
    tmp=$(mktemp -d "${dest%/*}/.promtool.XXXXXX") || return 1
    chmod 755 "$tmp"
    _lb_msg "promtool: fetching Debian's prometheus package for its promtool"
    if ! (cd "$tmp" && apt-get download prometheus) >"$tmp/apt.log" 2>&1 ||
        ! dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x" >>"$tmp/apt.log" 2>&1 ||
        [[ ! -x $tmp/x/usr/bin/promtool ]]; then
        _lb_msg "promtool: could not get it from the prometheus package"
        _lb_tail_logs 10 "$tmp/apt.log"
        rm -rf "$tmp"
        return 1
    fi
    mkdir -p "$tmp/bin" && mv "$tmp/x/usr/bin/promtool" "$tmp/bin/promtool"
    rm -rf "$tmp/x" "$tmp"/*.deb "$tmp/apt.log"
    if ! mv -T "$tmp/bin" "$dest" 2>/dev/null; then
        rm -rf "$tmp"
        [[ -x $dest/promtool ]] || return 1
    fi
    rm -rf "$tmp"
    printf '%s\n' "$dest/promtool"
)

_lb_kafka_cfg() {
    _kport=${KAFKA_PORT:-9092}
    _kcport=${KAFKA_CONTROLLER_PORT:-9093}
    if [[ ! $_kport =~ ^[1-9][0-9]*$ || ! $_kcport =~ ^[1-9][0-9]*$ ]] ||
        ((_kport > 65535 || _kcport > 65535 || _kport == _kcport)); then
        _lb_msg "kafka: KAFKA_PORT and KAFKA_CONTROLLER_PORT must be two different port numbers (got '$_kport', '$_kcport')"
        return 1
    fi
    _kdir=$(lb_state_dir)/kafka
    _kpidf=$_kdir/kafka.pid
    _kprops=$_kdir/server.properties
    _klogs=$_kdir/logs
    _kdata=$_kdir/data
    _kout=$_kdir/kafka.out
    _kjava=java
    [[ -n ${JAVA_HOME-} && -x $JAVA_HOME/bin/java ]] && _kjava=$JAVA_HOME/bin/java
    return 0
}

# lb_kafka_admin CLASS ARGS... - runs one of Kafka's own admin tools (e.g.
# org.apache.kafka.tools.DeleteRecordsCommand) from the cached jars.
lb_kafka_admin() (
    _lb_isolate
    _lb_kafka_cfg || return 1
    local lib
    lib=$(lb_fetch_kafka_jars) || return 1
    "$_kjava" -Xmx256m -Dlog4j.configuration="file:$_lb_repo/ops/kafka/log4j.properties" \
        -cp "$lib/*" "$@" </dev/null
)

# lb_kafka_bootstrap - bootstrap address of the local broker.
lb_kafka_bootstrap() {
    printf '127.0.0.1:%s\n' "${KAFKA_PORT:-9092}"
}

# Parse KAFKA_TOPICS into _ktopic_names / _ktopic_parts.
_lb_kafka_topics_parse() {
    local spec=${KAFKA_TOPICS-scores:6,scores-dlq:1} item name parts
    _ktopic_names=() _ktopic_parts=()
    local -a items
    IFS=, read -r -a items <<<"$spec"
    for item in "${items[@]}"; do
        item=${item//[[:space:]]/}
        [[ -z $item ]] && continue
        name=${item%%:*} parts=${item#*:}
        if [[ $item != *:* || ! $name =~ ^[A-Za-z0-9._-]+$ || ! $parts =~ ^[1-9][0-9]*$ ]]; then
            _lb_msg "kafka: bad KAFKA_TOPICS entry '$item' (want name:partitions[,name:partitions...])"
            return 1
        fi
        _ktopic_names+=("$name")
        _ktopic_parts+=("$parts")
    done
    return 0
}

_lb_kafka_pid_if_running() {
    local pid
    pid=$(_lb_read_pid "$_kpidf")
    _lb_pid_alive_as "$pid" java "kafka.Kafka $_kprops" && printf '%s\n' "$pid"
}

# The SASL_SSL listener's lines of server.properties (KAFKA_SASL=1).
_lb_kafka_sasl_props() {
    local d
    d=$(lb_tls_dir)
    cat <<EOF
listeners=SASL_SSL://127.0.0.1:$_kport,CONTROLLER://127.0.0.1:$_kcport
advertised.listeners=SASL_SSL://127.0.0.1:$_kport
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(_lb_kafka_sasl_password)";
ssl.keystore.type=PEM
ssl.keystore.location=$d/server.pem
ssl.truststore.type=PEM
ssl.truststore.location=$d/ca.crt
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:ANONYMOUS
allow.everyone.if.no.acl.found=false
EOF
}

_lb_kafka_sasl_password() { printf '%s\n' "${KAFKA_SASL_PASSWORD:-lb-local-secret}"; }

# lb_kafka_client_props [USER] - with KAFKA_SASL=1, the librdkafka
# properties (one key=value per line) of USER (default admin): SASL_SSL,
# SCRAM-SHA-512, the test CA, the password from a file (written here, mode
# 600); nothing otherwise.
lb_kafka_client_props() (
    _lb_isolate
    [[ ${KAFKA_SASL:-0} == 1 ]] || return 0
    local name=${1:-admin} d f
    d=$(lb_tls_dir)
    f=$d/kafka-$name.password
    (umask 077 && _lb_kafka_sasl_password >"$f") || return 1
    printf '%s\n' security.protocol=SASL_SSL sasl.mechanism=SCRAM-SHA-512 \
        "sasl.username=$name" "sasl.password_file=$f" "ssl.ca.location=$d/ca.crt"
)

# lb_kafka_admin_props - the same as a Java client's properties file, for
# Kafka's own tools (--command-config); prints its path.
lb_kafka_admin_props() (
    _lb_isolate
    _lb_kafka_cfg || return 1
    local f=$_kdir/admin-client.properties
    (
        umask 077
        printf 'security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n'
        printf 'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="%s";\n' \
            "$(_lb_kafka_sasl_password)"
        printf 'ssl.truststore.type=PEM\nssl.truststore.location=%s/ca.crt\n' "$(lb_tls_dir)"
    ) >"$f" || return 1
    printf '%s\n' "$f"
)

_lb_kafka_write_props() {
    local listen
    listen="listeners=PLAINTEXT://127.0.0.1:$_kport,CONTROLLER://127.0.0.1:$_kcport
advertised.listeners=PLAINTEXT://127.0.0.1:$_kport
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT"
    [[ ${KAFKA_SASL:-0} == 1 ]] && listen=$(_lb_kafka_sasl_props)
    cat >"$_kprops" <<EOF
# Generated by ops/services.sh (lb_kafka_start); rewritten on every start.
# Single-node KRaft broker+controller for local development and tests.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$_kcport
$listen
controller.listener.names=CONTROLLER
log.dirs=$_kdata
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=10
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
# A restart after kill -9 must wait for the old broker registration to
# expire (DUPLICATE_BROKER_REGISTRATION): 3 s instead of the default 9 s.
broker.session.timeout.ms=3000
broker.heartbeat.interval.ms=500
log.retention.check.interval.ms=5000
EOF
}

# A 22-character URL-safe base64 UUID, not starting with '-' (it would look
# like an option on the storage tool's command line).
_lb_kafka_cluster_id() {
    local id
    while :; do
        id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
        [[ ${#id} == 22 && $id != -* ]] && break
    done
    printf '%s\n' "$id"
}

# Broker accepts TCP connections and has logged that it started.
_lb_kafka_check_ready() {
    (exec 3<>"/dev/tcp/127.0.0.1/$_kport") 2>/dev/null || return 1
    grep -qs 'Kafka Server started' "$_klogs/server.log" "$_kout"
}

_lb_kafka_stop() {
    local pid rc=0
    pid=$(_lb_kafka_pid_if_running)
    if [[ -n $pid ]]; then
        _lb_terminate 20 java "$pid|kafka.Kafka $_kprops" || rc=1
        _lb_stop_summary="stopped pid $pid"
    elif [[ -f $_kpidf ]]; then
        _lb_stop_summary="was not running (stale pid file removed)"
    else
        _lb_stop_summary="was not running"
    fi
    rm -f "$_kpidf"
    return $rc
}

# _lb_kafka_format LIB JVM_ARGS... - give the empty $_kdata a formatted
# storage. The storage tool is a JVM start of its own (3 to 7 s on a 2-core
# machine, paid by every test broker), so its output is formatted once into
# the jar cache and copied: a fresh cluster id and directory id per cache
# entry is enough, as no two brokers of ours ever join one cluster.
_lb_kafka_format() {
    local lib=$1
    shift
    local cache tmp key u
    local -a scram=()
    if [[ ${KAFKA_SASL:-0} == 1 ]]; then
        for u in ${KAFKA_SASL_USERS:-admin projector replay}; do
            scram+=(--add-scram "SCRAM-SHA-512=[name=$u,password=$(_lb_kafka_sasl_password)]")
        done
    fi
    # one formatted storage per set of SCRAM users (salted in it)
    key=$(printf '%s\n' "${scram[@]}" | sha256sum | cut -c1-12)
    cache=$(_lb_kafka_cache_dir)/storage-1-$key
    if [[ ! -f $cache/meta.properties ]]; then
        tmp=$(mktemp -d "$(_lb_kafka_cache_dir)/storage.XXXXXX") || return 1
        sed "s|^log.dirs=.*|log.dirs=$tmp/data|" "$_kprops" >"$tmp/format.properties"
        if ! "$_kjava" -Xmx256m "$@" -cp "$lib/*" kafka.tools.StorageTool \
            format -t "$(_lb_kafka_cluster_id)" -c "$tmp/format.properties" "${scram[@]}" \
            </dev/null >"$_kdir/format.log" 2>&1; then
            _lb_msg "kafka: formatting the storage failed"
            _lb_tail_logs 30 "$_kdir/format.log"
            rm -rf "$tmp"
            return 1
        fi
        # renamed into place: a concurrent start sees all of it or none
        mv -T "$tmp/data" "$cache" 2>/dev/null || [[ -f $cache/meta.properties ]] || {
            _lb_msg "kafka: cannot keep the formatted storage in $cache"
            rm -rf "$tmp"
            return 1
        }
        rm -rf "$tmp"
    fi
    cp -p "$cache"/* "$_kdata"/
}

_lb_kafka_start() {
    local t0
    t0=$(_lb_now_ms)
    _lb_kafka_cfg || return 1
    _lb_kafka_topics_parse || return 1
    local lbadmin=${LB_BIN:-$_lb_repo/build/bin}/lbadmin
    if ((${#_ktopic_names[@]} > 0)) && [[ ! -x $lbadmin ]]; then
        _lb_msg "kafka: $lbadmin not found; it is needed to create the topics in KAFKA_TOPICS (${KAFKA_TOPICS-scores:6,scores-dlq:1})."
        _lb_msg "  Build first:  cmake -S . -B build && cmake --build build   (or set LB_BIN, or KAFKA_TOPICS= to create none)"
        return 1
    fi
    if ! command -v "$_kjava" >/dev/null 2>&1; then
        _lb_msg "kafka: 'java' not found; run ops/install-deps.sh"
        return 1
    fi
    local pid
    pid=$(_lb_kafka_pid_if_running)
    if [[ -n $pid ]]; then
        _lb_msg "kafka: already running (pid $pid, state $_kdir)."
        _lb_msg "  Stop it first: KAFKA_PORT=$_kport LB_STATE_DIR=$(lb_state_dir) $_lb_repo/ops/kafka.sh stop"
        return 1
    fi
    local p
    for p in "$_kport" "$_kcport"; do
        if lb_port_in_use "$p"; then
            _lb_msg "kafka: port $p is already in use by another process (not started from $(lb_state_dir))."
            _lb_msg "  See what holds it with: ss -ltnp 'sport = :$p'"
            _lb_msg "  Stop that process (if it is an old broker of ours: ops/kafka.sh stop, with its LB_STATE_DIR and KAFKA_PORT),"
            _lb_msg "  or choose other ports: KAFKA_PORT / KAFKA_CONTROLLER_PORT (see lb_free_port_base 2 21000 25000)."
            return 1
        fi
    done

    local lib
    lib=$(lb_fetch_kafka_jars) || return 1
    mkdir -p "$_kdir" "$_klogs" "$_kdata" || return 1
    if [[ ${KAFKA_SASL:-0} == 1 ]]; then
        _lb_tls_files || return 1
    fi
    _lb_kafka_write_props
    # Keep the previous run's logs next to the new ones.
    [[ -f $_kout ]] && mv -f "$_kout" "$_kout.prev"
    [[ -f $_klogs/server.log ]] && mv -f "$_klogs/server.log" "$_klogs/server.log.prev"

    local log4j=$_lb_repo/ops/kafka/log4j.properties
    local -a jvm=(-Dlog4j.configuration="file:$log4j" -Dkafka.logs.dir="$_klogs"
        -Djava.awt.headless=true)
    if [[ ! -f $_kdata/meta.properties ]]; then
        _lb_kafka_format "$lib" "${jvm[@]}" || return 1
    fi

    _lb_msg "kafka: starting broker on $(lb_kafka_bootstrap) (controller 127.0.0.1:$_kcport)"
    local -a heap extra
    read -r -a heap <<<"${KAFKA_HEAP_OPTS:--Xms256m -Xmx768m}"
    read -r -a extra <<<"${KAFKA_JVM_OPTS-}"
    _lb_spawn "$_kout" "$_kjava" "${heap[@]}" "${extra[@]}" "${jvm[@]}" \
        -cp "$lib/*" kafka.Kafka "$_kprops"
    pid=$_lb_spawned_pid
    printf '%s\n' "$pid" >"$_kpidf"

    local limit=${KAFKA_START_TIMEOUT:-60} deadline
    deadline=$(($(_lb_now_ms) + limit * 1000))
    until _lb_kafka_check_ready; do
        # on a loaded machine the spawned shell may take longer than
        # _lb_spawn waits to exec java: still there is still starting
        if ! _lb_pid_alive_as "$pid" java "kafka.Kafka $_kprops" && ! _lb_still_there "$pid"; then
            _lb_msg "kafka: broker exited during startup"
            _lb_tail_logs 40 "$_kout" "$_klogs/server.log"
            rm -f "$_kpidf"
            return 1
        fi
        if (($(_lb_now_ms) >= deadline)); then
            _lb_msg "kafka: broker not ready after $limit s"
            _lb_tail_logs 40 "$_kout" "$_klogs/server.log"
            _lb_kafka_stop
            return 1
        fi
        sleep 0.2
    done
    _lb_msg "kafka: broker up in $(_lb_elapsed "$t0") s"

    local i p
    local -a admin=()
    for p in $(lb_kafka_client_props); do admin+=(-X "$p"); done
    for i in "${!_ktopic_names[@]}"; do
        if ! timeout 120 "$lbadmin" create-topic --brokers "$(lb_kafka_bootstrap)" "${admin[@]}" \
            --topic "${_ktopic_names[i]}" --partitions "${_ktopic_parts[i]}" </dev/null >&2; then
            _lb_msg "kafka: creating topic ${_ktopic_names[i]} (${_ktopic_parts[i]} partitions) failed; stopping the broker"
            _lb_kafka_stop
            return 1
        fi
    done
    ((${#_ktopic_names[@]} > 0)) &&
        _lb_msg "kafka: topics ready: ${KAFKA_TOPICS-scores:6,scores-dlq:1}"

    printf 'bootstrap: %s\n' "$(lb_kafka_bootstrap)"
    printf 'log: %s\n' "$_klogs/server.log"
    return 0
}

# lb_kafka_start - fetch the jars if needed, format the storage once, start
# the broker, wait until it serves, create KAFKA_TOPICS.
lb_kafka_start() (
    _lb_isolate
    _lb_kafka_start
)

# lb_kafka_stop - stop the broker (TERM, up to 20 s, then KILL). Data is kept
# unless LB_WIPE=1.
lb_kafka_stop() (
    _lb_isolate
    local t0 rc=0
    t0=$(_lb_now_ms)
    _lb_kafka_cfg || return 1
    _lb_kafka_stop || rc=1
    if [[ ${LB_WIPE:-0} == 1 ]]; then
        rm -rf "${_kdir:?}"
        _lb_stop_summary+=", data wiped"
    fi
    _lb_msg "kafka: $_lb_stop_summary ($(_lb_elapsed "$t0") s)"
    return $rc
)

# lb_kafka_status - one line; returns 0 if the broker is running.
lb_kafka_status() (
    _lb_isolate
    _lb_kafka_cfg || return 1
    local pid listen=no
    pid=$(_lb_kafka_pid_if_running)
    if [[ -n $pid ]]; then
        (exec 3<>"/dev/tcp/127.0.0.1/$_kport") 2>/dev/null && listen=yes
        printf 'kafka: running pid=%s bootstrap=%s accepting=%s state=%s log=%s\n' \
            "$pid" "$(lb_kafka_bootstrap)" "$listen" "$_kdir" "$_klogs/server.log"
        return 0
    fi
    printf 'kafka: stopped state=%s\n' "$_kdir"
    return 1
)

# ---------------------------------------------------------------------------
# Both
# ---------------------------------------------------------------------------

# lb_services_wipe - stop the broker and every Redis node recorded under
# $(lb_state_dir), then delete their directories and the state dir itself
# (the state dir is only removed if nothing else is left in it).
lb_services_wipe() (
    _lb_isolate
    local sd rc=0
    sd=$(lb_state_dir)
    case ${sd%/} in
    "" | / | "${HOME%/}" | /tmp | /var/tmp | "${TMPDIR%/}")
        _lb_msg "lb_services_wipe: refusing to wipe state dir '$sd'"
        return 1
        ;;
    esac
    _lb_kafka_cfg || return 1
    _lb_kafka_stop || rc=1
    _rdir=$sd/redis
    local -a ports=()
    local d
    for d in "$_rdir"/*/; do
        d=${d%/}
        d=${d##*/}
        [[ $d =~ ^[0-9]+$ ]] && ports+=("$d")
    done
    ((${#ports[@]} > 0)) && { _lb_redis_stop_ports "${ports[@]}" || rc=1; }
    rm -rf "${sd:?}/redis" "${sd:?}/kafka"
    rmdir "$sd" 2>/dev/null
    _lb_msg "services: wiped $sd"
    return $rc
)

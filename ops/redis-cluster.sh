#!/usr/bin/env bash
# Local Redis Cluster for development and tests (see ops/services.sh).
#
#   ops/redis-cluster.sh start|stop|status|seeds|wipe
#
# Settings come from the environment: REDIS_MASTERS (3), REDIS_REPLICAS (1),
# REDIS_PORT_BASE (7000), REDIS_NODE_TIMEOUT_MS (2000), LB_STATE_DIR.
set -u

# shellcheck source=ops/services.sh
. "$(dirname "${BASH_SOURCE[0]}")/services.sh"

usage() {
    cat <<USAGE
usage: ${0##*/} start|stop|status|seeds|wipe
  start   start ${REDIS_MASTERS:-3} masters with ${REDIS_REPLICAS:-1} replica(s) each from port ${REDIS_PORT_BASE:-7000} and form the cluster
  stop    stop the nodes (pid files under \$(lb_state_dir)/redis)
  status  one line per node: port, pid, alive|dead, role
  seeds   print the seed list (host:port,...)
  wipe    stop, then delete the node directories (logs, nodes.conf)
state dir: $(lb_state_dir)
USAGE
}

case ${1-} in
start) lb_redis_cluster_start ;;
stop) lb_redis_cluster_stop ;;
status) lb_redis_cluster_status ;;
seeds) lb_redis_seeds ;;
wipe) LB_WIPE=1 lb_redis_cluster_stop ;;
-h | --help | help)
    usage
    exit 0
    ;;
*)
    usage >&2
    exit 2
    ;;
esac

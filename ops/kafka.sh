#!/usr/bin/env bash
# Local single-node Kafka (KRaft) for development and tests (see ops/services.sh).
#
#   ops/kafka.sh start|stop|status|bootstrap|wipe
#
# Settings come from the environment: KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT
# (9093), KAFKA_TOPICS (scores:6,scores-dlq:1; empty = none), KAFKA_HEAP_OPTS, LB_BIN,
# LB_STATE_DIR, LB_CACHE_DIR.
set -u

# shellcheck source=ops/services.sh
. "$(dirname "${BASH_SOURCE[0]}")/services.sh"

usage() {
    cat <<USAGE
usage: ${0##*/} start|stop|status|bootstrap|wipe
  start      fetch the jars if needed, start the broker on $(lb_kafka_bootstrap), create KAFKA_TOPICS (${KAFKA_TOPICS-scores:6,scores-dlq:1})
  stop       stop the broker, keep its data (LB_WIPE=1 deletes it)
  status     is the broker running
  bootstrap  print the bootstrap address
  wipe       stop, then delete the broker's data and logs
state dir: $(lb_state_dir)/kafka
USAGE
}

case ${1-} in
start) lb_kafka_start ;;
stop) lb_kafka_stop ;;
status) lb_kafka_status ;;
bootstrap) lb_kafka_bootstrap ;;
wipe) LB_WIPE=1 lb_kafka_stop ;;
-h | --help | help)
    usage
    exit 0
    ;;
*)
    usage >&2
    exit 2
    ;;
esac

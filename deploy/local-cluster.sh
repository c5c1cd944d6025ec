#!/usr/bin/env bash
# Starts a troupe cluster on this machine: a scheduler, S servers and W
# workers, each a troupe-node process on loopback with its own log, named
# by the rank the scheduler gave it (server-0.log is server 0). Prints
# every pid, shows the workers' output, and stops every process it started
# on exit or Ctrl-C: workers, then servers, then the scheduler. Exits
# non-zero if a worker failed.
#
# usage: deploy/local-cluster.sh CONFIG.ini NUM_SERVERS NUM_WORKERS [FLAG...]
#   FLAGs go to every node, e.g. --server.mode=async --worker.steps=100;
#   --resume continues the job from its last checkpoint
# env:   TROUPE_BIN  troupe-node to run (default: build/troupe-node)
#        TROUPE_LOGS folder for the logs (default: logs/<date-time>)
#        TROUPE_CHECKPOINTS checkpoint folder (default: checkpoints/; "" = off)
#        TROUPE_TLS  on (default): mutual TLS with the certificates in
#                    TROUPE_CERTS (default certs/, made if missing); off
#        TROUPE_CERTS folder of ca.pem, node.pem, node.key
set -euo pipefail

if [ $# -lt 3 ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
conf=$1 servers=$2 workers=$3
shift 3
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${TROUPE_BIN:-$here/build/troupe-node}
logs=${TROUPE_LOGS:-$here/logs/$(date +%Y%m%d-%H%M%S)}
[ -f "$conf" ] || { echo "*** no config file $conf" >&2; exit 2; }
[ -x "$bin" ] || { echo "*** no troupe-node at $bin: build first" >&2; exit 2; }
# A process each, on this machine: a count in 1..256.
count_re='^([1-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-6])$'
[[ $servers =~ $count_re ]] ||
  { echo "*** NUM_SERVERS must be a count in 1..256, got '$servers'" >&2; exit 2; }
[[ $workers =~ $count_re ]] ||
  { echo "*** NUM_WORKERS must be a count in 1..256, got '$workers'" >&2; exit 2; }
# Two jobs started in the same second get a folder each.
if [ -z "${TROUPE_LOGS:-}" ]; then
  mkdir -p "$(dirname "$logs")"
  mkdir "$logs" 2>/dev/null || logs+="-$$"
fi
mkdir -p "$logs"
echo "logs in $logs"

sched_pid=
server_pids=()
worker_pids=()
declare -A log_of # pid -> its log
# stop PID...: SIGTERM to each, then waits for all of them.
stop() {
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}
# The reverse of the start: a server stopped after the scheduler would
# report the scheduler's end as a failure.
stop_all() {
  stop "${worker_pids[@]}"
  stop "${server_pids[@]}"
  [ -z "$sched_pid" ] || stop "$sched_pid"
}
trap stop_all EXIT
trap 'echo "interrupted: stopping the cluster"; exit 130' INT TERM

# name_by_rank ROLE PID...: renames each PID's log to ROLE-RANK.log once the
# process says "ROLE RANK: joined" (it keeps writing to it), up to 30 s.
name_by_rank() {
  local role=$1 pid rank
  shift
  for pid in "$@"; do
    rank=
    for _ in $(seq 300); do
      rank=$(sed -n "s/.* $role \([0-9]*\): joined.*/\1/p" "${log_of[$pid]}" |
        head -n 1)
      [ -n "$rank" ] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if [ -z "$rank" ]; then
      echo "$role pid $pid has not joined (log ${log_of[$pid]})"
      continue
    fi
    mv "${log_of[$pid]}" "$logs/$role-$rank.log"
    log_of[$pid]=$logs/$role-$rank.log
    echo "$role pid $pid is $role $rank (log ${log_of[$pid]})"
  done
}

checkpoints=${TROUPE_CHECKPOINTS-$here/checkpoints}
common=(--config-file="$conf" "--cluster.servers=$servers"
        "--cluster.workers=$workers" "--train.metrics-file=$logs/metrics.jsonl")
[ -z "$checkpoints" ] || common+=("--checkpoint.dir=$checkpoints")
# shellcheck source=deploy/tls.sh
. "$here/deploy/tls.sh"
tls_flags "$here" "$@" || exit 2
[ ${#tls[@]} -eq 0 ] || echo "mutual TLS with the certificates of ${tls[2]#*=}"
common+=("${tls[@]}" "$@")

# shellcheck source=deploy/scheduler.sh
. "$here/deploy/scheduler.sh"
if ! start_scheduler "$bin" "$logs/scheduler.log" "${common[@]}" \
     "--cluster.events-file=$logs/events.jsonl"; then
  kill "$sched_pid" 2>/dev/null || true
  exit 1
fi

# Each log is named by start order until its process has a rank.
for i in $(seq 0 $((servers - 1))); do
  log="$logs/starting-server-$i.log"
  "$bin" --role=server --scheduler-port="$port" "${common[@]}" >"$log" 2>&1 &
  server_pids+=($!)
  log_of[$!]=$log
  echo "server pid $!"
done

# Workers' output (progress; rank 0 reports) goes to the terminal and to
# their log; their log lines go to the log only.
for i in $(seq 0 $((workers - 1))); do
  log="$logs/starting-worker-$i.log"
  "$bin" --role=worker --scheduler-port="$port" "${common[@]}" \
    > >(tee -a "$log") 2>>"$log" &
  worker_pids+=($!)
  log_of[$!]=$log
  echo "worker pid $!"
done
name_by_rank server "${server_pids[@]}"
name_by_rank worker "${worker_pids[@]}"

failed=0
for pid in "${worker_pids[@]}"; do
  if ! wait "$pid"; then
    echo "*** worker pid $pid failed; its log ${log_of[$pid]}:" >&2
    tail -n 20 "${log_of[$pid]}" >&2
    failed=1
  fi
done
exit $failed

#!/usr/bin/env bash
# Starts a troupe cluster on this machine: a scheduler, S servers and W
# workers, each a troupe-node process on loopback with its own log. Prints
# every pid, shows the workers' output, and stops every process it started
# on exit or Ctrl-C. Exits non-zero if a worker failed.
#
# usage: deploy/local-cluster.sh CONFIG.ini NUM_SERVERS NUM_WORKERS [FLAG...]
#   FLAGs go to every node, e.g. --server.mode=async --worker.steps=100;
#   --resume continues the job from its last checkpoint
# env:   TROUPE_BIN  troupe-node to run (default: build/troupe-node)
#        TROUPE_LOGS folder for the logs (default: logs/<date-time>)
#        TROUPE_CHECKPOINTS checkpoint folder (default: checkpoints/; "" = off)
set -euo pipefail

if [ $# -lt 3 ]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
conf=$1 servers=$2 workers=$3
shift 3
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${TROUPE_BIN:-$here/build/troupe-node}
logs=${TROUPE_LOGS:-$here/logs/$(date +%Y%m%d-%H%M%S)}
[ -f "$conf" ] || { echo "*** no config file $conf" >&2; exit 2; }
[ -x "$bin" ] || { echo "*** no troupe-node at $bin: build first" >&2; exit 2; }
[[ $servers =~ ^[1-9][0-9]*$ ]] || { echo "*** NUM_SERVERS must be >= 1" >&2; exit 2; }
[[ $workers =~ ^[1-9][0-9]*$ ]] || { echo "*** NUM_WORKERS must be >= 1" >&2; exit 2; }
mkdir -p "$logs"
echo "logs in $logs"

pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_all EXIT
trap 'echo "interrupted: stopping the cluster"; exit 130' INT TERM

checkpoints=${TROUPE_CHECKPOINTS-$here/checkpoints}
common=(--config-file="$conf" "--cluster.servers=$servers"
        "--cluster.workers=$workers" "--train.metrics-file=$logs/metrics.jsonl")
[ -z "$checkpoints" ] || common+=("--checkpoint.dir=$checkpoints")
common+=("$@")

# shellcheck source=deploy/scheduler.sh
. "$here/deploy/scheduler.sh"
sched_pid=
if ! start_scheduler "$bin" "$logs/scheduler.log" "${common[@]}"; then
  kill "$sched_pid" 2>/dev/null || true
  exit 1
fi
pids+=("$sched_pid")

for i in $(seq 0 $((servers - 1))); do
  "$bin" --role=server --scheduler-port="$port" "${common[@]}" \
    >"$logs/server-$i.log" 2>&1 &
  pids+=($!)
  echo "server pid $! (log $logs/server-$i.log)"
done

# Workers' output (progress; rank 0 reports) goes to the terminal and to
# their log; their log lines go to the log only.
worker_pids=()
for i in $(seq 0 $((workers - 1))); do
  log="$logs/worker-$i.log"
  "$bin" --role=worker --scheduler-port="$port" "${common[@]}" \
    > >(tee -a "$log") 2>>"$log" &
  pids+=($!)
  worker_pids+=($!)
  echo "worker pid $! (log $log)"
done

failed=0
for i in "${!worker_pids[@]}"; do
  if ! wait "${worker_pids[$i]}"; then
    echo "*** worker $i failed; its log:" >&2
    tail -n 20 "$logs/worker-$i.log" >&2
    failed=1
  fi
done
exit $failed

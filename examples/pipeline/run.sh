#!/usr/bin/env bash
# Model-parallel pipeline example: a deeper MLP (mlp:784-512-256-128-64-10)
# cut into 3 stages, each a troupe-node process of its own under one node
# agent, trains Fashion-MNIST with the 1f1b schedule (4 micro-batches per
# mini-batch of 64). Activations go forward and gradients backward between
# the stages; every stage applies a mini-batch once all are through it.
# Prints a line per epoch and, last, "final test accuracy: 0.XXXX".
# With --pipeline.replicas=2 it runs 2 replicas x 3 stages (6 processes)
# and 2 shard servers: each replica trains on half the data, and each
# stage keeps its weights in sync with its twin through the servers (sync
# mode: as 2 data-parallel workers on the same global batches).
#
# usage: examples/pipeline/run.sh [FLAG...]
#   FLAGs go to every node, e.g. --pipeline.schedule=zb-h1,
#   --pipeline.micro-batches=8, --train.epochs=3,
#   --pipeline.fault-kill=1@500 (stage 1 kills its process in mini-batch
#   500; its agent restarts it and the pipeline carries on from the last
#   checkpoint), --pipeline.cut=2,3 (layer boundaries), --pipeline.stages=4
#   (2 to 5: the model has 5 layers)
# env:   TROUPE_BUILD  folder of the build (default: build)
#        TROUPE_LOGS   folder for the logs (default: logs/pipeline-<time>)
#        TROUPE_TLS    on (default; certificates in TROUPE_CERTS, default
#                      certs/, made if missing) or off
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
build=${TROUPE_BUILD:-$here/build}
bin=$build/troupe-node
logs=${TROUPE_LOGS:-$here/logs/pipeline-$(date +%Y%m%d-%H%M%S)}
[ -x "$bin" ] || { echo "*** no $bin: run deploy/build.sh first" >&2; exit 2; }
# --pipeline.stages and --pipeline.replicas size the cluster here (the
# last of each wins, as in troupe-node): whole numbers, whose bounds
# troupe-node checks.
stages=3
replicas=1
for a in "$@"; do
  case $a in
  --pipeline.stages=* | --pipeline.replicas=*)
    v=${a#*=}
    [[ $v =~ ^(0|[1-9][0-9]{0,3})$ ]] || {
      echo "*** ${a%%=*} must be a whole number, got '$v'" >&2
      exit 2
    }
    if [[ $a == --pipeline.stages=* ]]; then
      stages=$v
    else
      replicas=$v
    fi
    ;;
  esac
done
mkdir -p "$logs"
echo "logs in $logs"

# shellcheck source=deploy/tls.sh
. "$here/deploy/tls.sh"
tls_flags "$here" "$@" || exit 2 # TROUPE_TLS=off: plain text
servers=0 # stages alone: each keeps its weights, with checkpoints
atomic=()
if [ "$replicas" -gt 1 ]; then
  servers=2 # the replicas' stages in sync through 2 shard servers
  # A replica's mini-batch on every stage's keys or on none, even when a
  # stage dies in its push (docs/pipelines.md).
  atomic=(--server.atomic-pushes=on)
fi
# SGD at lr 0.1, halved every 3 epochs: a replica's mini-batches of 64
# (each stage's updates, or the servers' with replicas); 0 replicas are
# troupe-node's to refuse. With another --train.batch, give
# --optimizer.lr-decay-steps too (3 epochs in mini-batches).
decay_steps=$((3 * (60000 / 64 / (replicas > 0 ? replicas : 1))))
common=(--config-file="$here/deploy/local.ini"
        "--cluster.servers=$servers" "--cluster.workers=$((stages * replicas))"
        "--pipeline.stages=$stages" "--optimizer.name=sgd" "--optimizer.lr=0.1"
        "--optimizer.lr-decay-steps=$decay_steps" "--optimizer.lr-decay=0.5"
        "${atomic[@]}" "${tls[@]}")
# shellcheck source=deploy/scheduler.sh
. "$here/deploy/scheduler.sh" # start_scheduler, stop_scheduler
sched_pid=
trap stop_scheduler EXIT
trap 'echo "interrupted"; exit 130' INT TERM

start_scheduler "$bin" "$logs/scheduler.log" "${common[@]}" \
  "--cluster.events-file=$logs/events.jsonl" "$@" || exit 1

# One agent runs the stage processes (and servers) and restarts one that
# dies; their output goes to the agent's, kept whole in agent.log.
set +e
"$bin" --role=agent --scheduler-port="$port" "${common[@]}" \
  --agent.servers=$servers --agent.workers=$((stages * replicas)) \
  --worker.task=stage --pipeline.schedule=1f1b \
  --pipeline.micro-batches=4 --train.model=mlp:784-512-256-128-64-10 \
  --train.batch=64 --train.epochs=10 \
  --pipeline.checkpoint-dir="$logs/checkpoints" "$@" \
  2>&1 | tee "$logs/agent.log" |
  grep --line-buffered -E '^epoch [0-9]|stage [0-9]+ of|pipeline: |agent: |\*\*\*'
agent_rc=${PIPESTATUS[0]}
set -e
final=$(grep -E '^final test accuracy: ' "$logs/agent.log" | tail -n 1 || true)
if [ "$agent_rc" -ne 0 ] || [ -z "$final" ]; then
  echo "*** the pipeline failed (agent exit code $agent_rc); see $logs" >&2
  exit 1
fi
echo "$final"

#!/usr/bin/env bash
# The deploy scripts' answers to arguments that are not theirs, before they
# install, build or start anything: deploy/build.sh (at 2b8c60c `--help`
# went to cmake, which printed its help into build.log, and the whole
# build ran after it), deploy/local-cluster.sh's counts (`08` was "must be
# >= 1", and no count was too large) and deploy/slurm/troupe.sbatch's
# (`08` and a SLURM_JOB_NUM_NODES that is no count died in bash).
set -uo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/deploy/checks.sh
. "$src/tests/deploy/checks.sh"
build=$src/deploy/build.sh
expect "build.sh --help" 0 "usage: deploy/build.sh [--slurm] [--k8s]" \
  "$build" --help
expect "build.sh: a word" 2 "'foo' is no option here" "$build" foo
expect "build.sh: --k8s after a -D flag" 2 "'--k8s' is no option here" \
  "$build" --slurm -DX=1 --k8s
expect "build.sh: a bare -D at the end" 2 "-D without NAME=VALUE" "$build" -D

# local-cluster.sh: troupe-node is never reached (TROUPE_BIN is true).
local=$src/deploy/local-cluster.sh
for n in 0 08 abc 257 100000 ''; do
  expect "local-cluster.sh: $n servers" 2 \
    "NUM_SERVERS must be a count in 1..256, got '$n'" \
    env TROUPE_BIN=/bin/true TROUPE_LOGS="$work/logs" \
    "$local" "$src/deploy/local.ini" "$n" 1
done
expect "local-cluster.sh: 08 workers" 2 \
  "NUM_WORKERS must be a count in 1..256, got '08'" \
  env TROUPE_BIN=/bin/true TROUPE_LOGS="$work/logs" \
  "$local" "$src/deploy/local.ini" 1 08
check "local-cluster.sh: no logs made" [ ! -e "$work/logs" ]

# troupe.sbatch as Slurm would start it, up to its checks.
sbatch=$src/deploy/slurm/troupe.sbatch
expect "sbatch: 08 servers a node" 2 "are counts (0..9999), got '08' and '1'" \
  env SLURM_JOB_ID=1 TROUPE_BIN=/bin/true TROUPE_SERVERS_PER_NODE=08 \
  bash "$sbatch"
expect "sbatch: nodes that are no count" 2 \
  "SLURM_JOB_NUM_NODES is 'x', not a count" \
  env SLURM_JOB_ID=1 TROUPE_BIN=/bin/true SLURM_JOB_NUM_NODES=x bash "$sbatch"
exit $status

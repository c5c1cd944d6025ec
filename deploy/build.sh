#!/usr/bin/env bash
# Installs what is missing (as root), then configures and builds troupe in
# build/ with every target: library, troupe-node, tests, benchmarks.
# usage: deploy/build.sh [--slurm] [--k8s] [extra cmake -D flags...]
#   --slurm, --k8s: install those too (deploy/install-deps.sh), for the
#   tests that use them (the README's test command passes both)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
extras=()
while [ $# -gt 0 ] && { [ "$1" = --slurm ] || [ "$1" = --k8s ]; }; do
  extras+=("$1")
  shift
done
if [ "$(id -u)" -eq 0 ]; then
  deploy/install-deps.sh ${extras[@]+"${extras[@]}"}
else
  deploy/install-deps.sh ${extras[@]+"${extras[@]}"} ||
    echo "install-deps: not root, using what is installed"
fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >build.log 2>&1 \
  || { cat build.log >&2; echo "*** cmake failed (log: build.log)" >&2; exit 1; }
echo "build: compiling with $jobs jobs (log: build.log)"
cmake --build build -j "$jobs" >>build.log 2>&1 \
  || { grep -E -A5 'error|Error' build.log | head -60 >&2
       echo "*** build failed (log: build.log)" >&2; exit 1; }
echo "build: done"

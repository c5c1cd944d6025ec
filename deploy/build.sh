#!/usr/bin/env bash
# Installs what is missing (as root), then configures and builds troupe in
# build/ with every target: library, troupe-node, tests, benchmarks.
# usage: deploy/build.sh [--slurm] [--k8s] [-DNAME=VALUE...] (cmake's)
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
# Only -D flags go on to cmake: anything else (--help, a typo) would be
# cmake's to read, and cmake --help ran the whole build after it.
dash_d=0 # the word after a bare -D is its NAME=VALUE
for a in "$@"; do
  if [ "$dash_d" = 1 ]; then
    dash_d=0
    continue
  fi
  case $a in
  -D) dash_d=1 ;;
  -h | --help)
    sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  -D?*) ;;
  *)
    echo "*** build.sh: '$a' is no option here (usage: deploy/build.sh" \
      "[--slurm] [--k8s] [-DNAME=VALUE...])" >&2
    exit 2
    ;;
  esac
done
if [ "$dash_d" = 1 ]; then
  echo "*** build.sh: -D without NAME=VALUE" >&2
  exit 2
fi
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

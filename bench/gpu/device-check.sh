#!/usr/bin/env bash
# The GPU checks of issue 38 in one go, for a session lent a GPU machine
# (../shared/device/README.md). After deploy/build.sh (nvcc found):
#   here:   bench/gpu/device-check.sh pack   packs the gpu tests in .devbundle
#   there:  bench/gpu/device-check.sh run    through the device tool's run,
#           with carry [".devbundle"]
# "run" runs each packed gpu test, then compute-sanitizer's memcheck and
# racecheck over it; full logs go to $OUT (else logs/gpu), a table last.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tests=(cuda_kernels_test)
case ${1:-} in
pack)
  exclude=$here/.git/info/exclude
  grep -qx '/.devbundle/' "$exclude" 2>/dev/null ||
    echo '/.devbundle/' >>"$exclude"
  progs=()
  for t in "${tests[@]}"; do
    [ -x "$here/build/kernels/$t" ] ||
      { echo "*** no build/kernels/$t: build with nvcc first" >&2; exit 1; }
    progs+=("$here/build/kernels/$t")
  done
  "$here/../shared/device/bundle.sh" "$here/.devbundle" "${progs[@]}"
  ;;
run)
  out=${OUT:-$here/logs/gpu}
  mkdir -p "$out"
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
  san=$(command -v compute-sanitizer ||
        echo /usr/local/cuda/bin/compute-sanitizer)
  table=()
  for t in "${tests[@]}"; do
    bin=$here/.devbundle/bin/$t
    rc=0
    "$here/.devbundle/run" "$bin" --color_output=no --log_level=message \
      >"$out/$t.log" 2>&1 || rc=$?
    table+=("$t: rc $rc")
    for tool in memcheck racecheck; do
      rc=0
      "$here/.devbundle/run" "$san" --tool "$tool" --error-exitcode 9 \
        "$bin" --color_output=no >"$out/$t.$tool.log" 2>&1 || rc=$?
      table+=("$t under $tool: rc $rc ($(grep -c 'ERROR SUMMARY' \
        "$out/$t.$tool.log" || true) summaries)")
    done
    grep -h 'relative' "$out/$t.log" | tail -n 40 || true
  done
  printf '%s\n' "${table[@]}"
  ;;
*)
  sed -n 2,8p "$0"
  exit 2
  ;;
esac

#!/usr/bin/env bash
# The GPU checks of issue 38 in one go, for a session lent a GPU machine
# (../shared/device/README.md). After deploy/build.sh (nvcc found):
#   here:   bench/gpu/device-check.sh pack   packs the gpu tests and
#           gpu_step in .devbundle
#   there:  bench/gpu/device-check.sh run    through the device tool's run,
#           with carry [".devbundle"]
# "run" runs each packed test, plain and under compute-sanitizer's memcheck
# and racecheck, then gpu_step and the PyTorch script
# (bench/gpu/gpu_step.py), every step bounded in time; full logs go to $OUT
# (else logs/gpu), a table last (rc 124: cut at its bound).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
# Tests that check GPU code where a GPU is found (their paths in build/).
tests=(kernels/cuda_kernels_test tests/device_team_test)
case ${1:-} in
pack)
  exclude=$here/.git/info/exclude
  grep -qx '/.devbundle/' "$exclude" 2>/dev/null ||
    echo '/.devbundle/' >>"$exclude"
  progs=()
  for t in "${tests[@]}" gpu_step; do
    [ -x "$here/build/$t" ] ||
      { echo "*** no build/$t: build with nvcc first" >&2; exit 1; }
    progs+=("$here/build/$t")
  done
  plugin=$here/build/kernels/libtroupe_cuda_plugin.so
  [ -f "$plugin" ] || { echo "*** no $plugin: build with nvcc first" >&2; exit 1; }
  rm -rf "$here/.devbundle"
  "$here/../shared/device/bundle.sh" "$here/.devbundle" "${progs[@]}"
  # The GPU plugin, loaded by device_team_test from beside the program.
  cp "$plugin" "$here/.devbundle/bin/"
  strip --strip-debug "$here"/.devbundle/bin/* # under the 64 MiB carry
  du -sh "$here/.devbundle"
  ;;
run)
  # One device call, about 300 s at most: the tests plain and, at the same
  # time, under compute-sanitizer's memcheck and racecheck; then gpu_step
  # alone on the GPU; then the PyTorch script. Each step is bounded.
  # At most 8 files come back from $OUT: the sanitizers' logs are joined.
  out=${OUT:-$here/logs/gpu}
  mkdir -p "$out"
  scratch=$(mktemp -d)
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
  san=$(command -v compute-sanitizer ||
        echo /usr/local/cuda/bin/compute-sanitizer)
  pids=()
  for t in "${tests[@]}"; do
    t=$(basename "$t")
    for tool in memcheck racecheck; do
      # NCCL probes kernels its build lacks for this GPU and handles the
      # errors (cudaErrorNoKernelImageForDevice in ncclInitKernelsForDevice):
      # API errors are not reported, memory errors and hazards are.
      extra=()
      [ "$tool" = memcheck ] && extra=(--report-api-errors no)
      timeout 100 "$here/.devbundle/run" "$san" --tool "$tool" "${extra[@]}" \
        --error-exitcode 9 "$here/.devbundle/bin/$t" --color_output=no \
        >"$scratch/$t.$tool.log" 2>&1 &
      pids+=("$!:$t under $tool")
    done
  done
  table=()
  for t in "${tests[@]}"; do
    t=$(basename "$t")
    rc=0
    timeout 60 "$here/.devbundle/run" "$here/.devbundle/bin/$t" \
      --color_output=no --log_level=message >"$out/$t.log" 2>&1 || rc=$?
    table+=("$t: rc $rc")
    grep -h -E 'relative|skipped|error|fail' "$out/$t.log" | tail -n 30 || true
  done
  for p in "${pids[@]}"; do
    rc=0
    wait "${p%%:*}" || rc=$?
    name=${p#*:}
    log=$scratch/${name/ under /.}.log
    table+=("$name: rc $rc ($(grep -h 'ERROR SUMMARY' "$log" | tail -n 1 ||
      true))")
    { echo "=== $name: rc $rc"; head -c 200000 "$log"; } >>"$out/sanitizers.log"
  done
  grep -h -m 20 -E '=+ (Invalid|Race|Error|Program hit)|not supported' \
    "$scratch"/*.log || true
  rc=0
  timeout 90 "$here/.devbundle/run" "$here/.devbundle/bin/gpu_step" \
    >"$out/gpu_step.log" 2>&1 || rc=$?
  table+=("gpu_step: rc $rc")
  cat "$out/gpu_step.log"
  if [ "$rc" -ge 128 ] && [ "$rc" != 137 ]; then # a crash: where?
    gdb=$(command -v cuda-gdb || command -v gdb || echo gdb)
    timeout 90 "$here/.devbundle/run" "$gdb" -q -batch -ex run -ex bt \
      -ex 'thread apply all bt 12' --args "$here/.devbundle/bin/gpu_step" \
      2>&1 | tail -n 60 || true
  fi
  # PyTorch: the machine's python with torch (its own venv, if any).
  # Compiling takes minutes: bounded, and each figure is printed as made.
  py=python3
  python3 -c 'import torch' 2>/dev/null ||
    py=$(ls /opt/torch/.venv/bin/python3 2>/dev/null || echo python3)
  rc=0
  PYTHONUNBUFFERED=1 timeout 150 "$py" "$here/bench/gpu/gpu_step.py" \
    >"$out/gpu_step_py.log" 2>&1 || rc=$?
  table+=("gpu_step.py ($py): rc $rc")
  cat "$out/gpu_step_py.log"
  printf '%s\n' "${table[@]}"
  ;;
*)
  sed -n 2,11p "$0"
  exit 2
  ;;
esac

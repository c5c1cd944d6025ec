#!/usr/bin/env bash
# The GPU checks of issue 38 in one go, for a session lent a GPU machine
# (../shared/device/README.md). After deploy/build.sh (nvcc found):
#   here:   bench/gpu/device-check.sh pack   packs the gpu tests and
#           gpu_step in .devbundle
#   there:  bench/gpu/device-check.sh run    through the device tool's run,
#           with carry [".devbundle"]
#   pack-e2e, run-e2e (carry [".devpack"]): cuda_kernels_test and whole
#           jobs on the GPU (a cluster, a pipeline) with Fashion-MNIST
# "run" runs each packed test, plain and under compute-sanitizer's memcheck
# and racecheck, then gpu_step and the PyTorch script
# (bench/gpu/gpu_step.py), every step bounded in time; full logs go to $OUT
# (else logs/gpu), a table last (rc 124: cut at its bound).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
# Tests that check GPU code where a GPU is found (their paths in build/).
tests=(kernels/cuda_kernels_test tests/device_team_test)

# ignore NAME: git ignores /NAME/ here (what the device tool carries).
ignore() {
  local exclude=$here/.git/info/exclude
  grep -qx "/$1/" "$exclude" 2>/dev/null || echo "/$1/" >>"$exclude"
}

# bundle DIR PROG...: build/PROG... and the GPU plugin (loaded from beside
# the program) packed into DIR with the libraries they need, debug info
# stripped to fit the 64 MiB carry.
bundle() {
  local dir=$1 progs=() p
  shift
  for p in "$@" kernels/libtroupe_cuda_plugin.so; do
    [ -e "$here/build/$p" ] ||
      { echo "*** no build/$p: build with nvcc first" >&2; exit 1; }
  done
  for p in "$@"; do progs+=("$here/build/$p"); done
  rm -rf "$dir"
  "$here/../shared/device/bundle.sh" "$dir" "${progs[@]}"
  cp "$here/build/kernels/libtroupe_cuda_plugin.so" "$dir/bin/"
  strip --strip-debug "$dir"/bin/*
}

# cpu_math: the GPU machines are VMs that hide the CPU's model, and the
# bundled OpenBLAS then runs its Prescott kernels (troupe-node warns so):
# where the CPU has AVX2, take Haswell's, unless one is chosen already.
cpu_math() {
  if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx2 /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=Haswell
  fi
}

# crashed RC LOG: a test module ended by a signal. Boost names one it
# catches in LOG and exits 201, as for any failed check; one it does not
# catch gives 128 + its number (137: timeout's kill, not a crash).
crashed() {
  if [ "$1" -gt 128 ] && [ "$1" -lt 200 ]; then
    [ "$1" != 137 ]
  else
    [ "$1" -ge 200 ] &&
      grep -qE 'fatal error: in "[^"]*": (signal: |memory access violation)' \
        "$2"
  fi
}

# left RESERVE MOST: the seconds a step may take: MOST at most, and
# RESERVE kept for the steps after it before $deadline (1 where none is
# left: `timeout 0` would not bound it at all).
left() {
  local n=$((deadline - SECONDS - $1))
  [ "$n" -le "$2" ] || n=$2
  [ "$n" -gt 0 ] || n=1
  echo "$n"
}

case ${1:-} in
pack)
  ignore .devbundle
  bundle "$here/.devbundle" "${tests[@]}" gpu_step
  du -sh "$here/.devbundle"
  ;;
run)
  # One device call: the tests plain and, at the same time, under
  # compute-sanitizer's memcheck and racecheck; then gpu_step alone on the
  # GPU; then the PyTorch script. Each step is bounded, and all of them by
  # one deadline, 540 s (CHECK_SECONDS), inside the device tool's 600 s, so
  # that the table is always printed: about 360 s where nothing crashes or
  # hangs; what a crash or a hang costs (each case run alone) comes out of
  # the PyTorch script's time first, then gpu_step's. (The first steps,
  # the plain tests' 60 s and the sanitizers' 100 s, are fixed: a deadline
  # below about 200 s leaves the later steps nothing.)
  # At most 8 files come back from $OUT: the sanitizers' logs are joined.
  deadline=$((SECONDS + ${CHECK_SECONDS:-540}))
  out=${OUT:-$here/logs/gpu}
  mkdir -p "$out"
  cpu_math
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
      # memcheck times cuBLASLt's candidates as the plain run does (so
      # that their memory is checked); racecheck, far slower, keeps the
      # heuristic's first (TROUPE_LT_TUNE=0): timing means nothing there.
      extra=() tune=1
      [ "$tool" = memcheck ] && extra=(--report-api-errors no)
      [ "$tool" = racecheck ] && tune=0
      TROUPE_LT_TUNE=$tune timeout 100 "$here/.devbundle/run" "$san" \
        --tool "$tool" "${extra[@]}" --error-exitcode 9 \
        "$here/.devbundle/bin/$t" --color_output=no \
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
    # A crash or a hang ends the module: each case alone then (120 s in
    # all, 90 s kept for gpu_step), so that one case hides no other.
    if crashed "$rc" "$out/$t.log" || [ "$rc" = 124 ]; then
      cases=$({ "$here/.devbundle/run" "$here/.devbundle/bin/$t" \
        --list_content 2>&1 || true; } |
        sed -n 's/^ \{4\}\([a-z_0-9]*\)\*$/\1/p')
      [ -n "$cases" ] || table+=("  $t: crashed, and lists no cases")
      until=$((SECONDS + 120))
      for c in $cases; do
        bound=$(left 90 20)
        if [ "$SECONDS" -ge "$until" ] || [ "$bound" -lt 5 ]; then
          table+=("  $t/$c: not run (its 120 s, or the deadline, spent)")
          continue
        fi
        crc=0
        timeout "$bound" "$here/.devbundle/run" "$here/.devbundle/bin/$t" \
          --run_test="*/$c" --color_output=no >>"$out/$t.cases.log" 2>&1 ||
          crc=$?
        table+=("  $t/$c: rc $crc")
      done
    fi
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
  bound=$(left 0 90)
  if [ "$bound" -ge 5 ]; then
    timeout "$bound" "$here/.devbundle/run" "$here/.devbundle/bin/gpu_step" \
      >"$out/gpu_step.log" 2>&1 || rc=$?
    table+=("gpu_step: rc $rc")
    cat "$out/gpu_step.log"
  else
    table+=("gpu_step: not run (${bound} s left of the deadline)")
  fi
  if [ "$rc" -ge 128 ] && [ "$rc" != 137 ]; then # a crash: where?
    gdb=$(command -v cuda-gdb || command -v gdb || echo gdb)
    timeout "$(left 0 90)" "$here/.devbundle/run" "$gdb" -q -batch -ex run -ex bt \
      -ex 'thread apply all bt 12' --args "$here/.devbundle/bin/gpu_step" \
      2>&1 | tail -n 60 || true
  fi
  # PyTorch: the machine's python with torch (its own venv, if any).
  # Compiling takes minutes: bounded, and each figure is printed as made.
  py=python3
  python3 -c 'import torch' 2>/dev/null ||
    py=$(ls /opt/torch/.venv/bin/python3 2>/dev/null || echo python3)
  rc=0
  bound=$(left 0 150)
  if [ "$bound" -ge 30 ]; then
    PYTHONUNBUFFERED=1 timeout "$bound" "$py" "$here/bench/gpu/gpu_step.py" \
      >"$out/gpu_step_py.log" 2>&1 || rc=$?
    table+=("gpu_step.py ($py): rc $rc")
    cat "$out/gpu_step_py.log"
  else
    table+=("gpu_step.py: not run (${bound} s left of the deadline)")
  fi
  printf '%s\n' "${table[@]}"
  ;;
pack-e2e)
  # cuda_kernels_test, troupe-node and the plugin, with the Fashion-MNIST
  # files, xz-packed to fit the 64 MiB carry (OpenBLAS packs well).
  ignore .devpack
  tmp=$(mktemp -d)
  bundle "$tmp/.devbundle" kernels/cuda_kernels_test troupe-node
  # The examples' scripts take troupe-node from a build folder.
  mkdir -p "$tmp/.devbundle/build" "$tmp/.devbundle/data"
  # shellcheck disable=SC2016 # expanded there, when it runs
  printf '%s\n' '#!/usr/bin/env bash' \
    'b=$(cd "$(dirname "$0")/.." && pwd)' \
    'exec "$b/run" "$b/bin/troupe-node" "$@"' \
    >"$tmp/.devbundle/build/troupe-node"
  chmod +x "$tmp/.devbundle/build/troupe-node"
  cp /usr/share/datasets/fashion-mnist/*.gz "$tmp/.devbundle/data/"
  rm -rf "$here/.devpack"
  mkdir -p "$here/.devpack"
  tar -C "$tmp" -cJf "$here/.devpack/bundle.tar.xz" .devbundle
  rm -rf "$tmp"
  du -sh "$here/.devpack"
  ;;
run-e2e)
  # There, about 150 s: cuda_kernels_test plain and under memcheck, then a
  # local cluster (1 server, 2 workers on cuda:0), one in sync_device (NCCL
  # as one rank) and a 3-stage pipeline on cuda:0, one epoch each, on
  # Fashion-MNIST.
  out=${OUT:-$here/logs/gpu}
  mkdir -p "$out"
  cpu_math
  tar -C "$here" -xJf "$here/.devpack/bundle.tar.xz"
  b=$here/.devbundle
  san=$(command -v compute-sanitizer ||
        echo /usr/local/cuda/bin/compute-sanitizer)
  TROUPE_LT_TUNE=0 timeout 100 "$b/run" "$san" --tool memcheck \
    --report-api-errors no --error-exitcode 9 "$b/bin/cuda_kernels_test" --color_output=no \
    >"$out/memcheck.log" 2>&1 &
  san_pid=$!
  table=()
  rc=0
  timeout 60 "$b/run" "$b/bin/cuda_kernels_test" --color_output=no \
    --log_level=message >"$out/cuda_kernels_test.log" 2>&1 || rc=$?
  table+=("cuda_kernels_test: rc $rc")
  grep -h -E 'stage|error|fail' "$out/cuda_kernels_test.log" | tail -n 40 || true
  rc=0
  wait "$san_pid" || rc=$?
  table+=("cuda_kernels_test under memcheck: rc $rc ($(grep -h \
    'ERROR SUMMARY' "$out/memcheck.log" | tail -n 1 || true))")
  export TROUPE_TLS=off
  data=(--train.data-dir="$b/data" --train.epochs=1
        --device="${E2E_DEVICE:-cuda:0}") # E2E_DEVICE=cpu: a dry run here
  show='^epoch|final|computing on|computes on|\*\*\*|samples/s'
  rc=0
  TROUPE_BIN=$b/build/troupe-node TROUPE_LOGS=/tmp/e2e-cluster timeout 100 \
    "$here/deploy/local-cluster.sh" "$here/deploy/local.ini" 1 2 "${data[@]}" \
    >"$out/cluster.log" 2>&1 || rc=$?
  table+=("cluster, 2 workers on cuda:0: rc $rc")
  grep -h -E "$show" "$out/cluster.log" | tail -n 20 || true
  rc=0
  TROUPE_BIN=$b/build/troupe-node TROUPE_LOGS=/tmp/e2e-device timeout 100 \
    "$here/deploy/local-cluster.sh" "$here/deploy/local.ini" 1 1 "${data[@]}" \
    --server.mode=sync_device >"$out/sync_device.log" 2>&1 || rc=$?
  table+=("cluster, sync_device (NCCL as one rank): rc $rc")
  grep -h -E "$show" "$out/sync_device.log" | tail -n 20 || true
  rc=0
  TROUPE_BUILD=$b/build TROUPE_LOGS=/tmp/e2e-pipeline timeout 100 \
    "$here/examples/pipeline/run.sh" "${data[@]}" >"$out/pipeline.log" 2>&1 ||
    rc=$?
  table+=("pipeline, 3 stages on cuda:0: rc $rc")
  grep -h -E "$show" "$out/pipeline.log" | tail -n 20 || true
  # Where each process computed, from its own log.
  grep -rhoE '(computing on|computes on) .*' /tmp/e2e-cluster /tmp/e2e-device \
    /tmp/e2e-pipeline 2>/dev/null | sort | uniq -c || true
  printf '%s\n' "${table[@]}"
  ;;
*)
  sed -n 2,13p "$0"
  exit 2
  ;;
esac

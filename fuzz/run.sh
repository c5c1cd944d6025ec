#!/usr/bin/env bash
# usage: fuzz/run.sh [SECONDS_PER_HARNESS] [HARNESS...]
# Builds the libFuzzer harnesses of fuzz/ with clang-16 into
# ${TROUPE_FUZZ_BUILD:-build-fuzz}, then runs each harness (default: all)
# for SECONDS (default 10) on a copy of its seed corpus,
# fuzz/corpus/<harness>/. TROUPE_FUZZ_JOBS (default: all cores) is both the
# compile jobs and how many harnesses run at once (each takes one core).
# Prints one line per harness, in the order given; exits 1 on any finding,
# whose input and log it keeps in the run folder, and 77 (skipped) without
# clang-16 or libFuzzer.
set -euo pipefail

seconds="${1:-10}"
shift || true
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TROUPE_FUZZ_BUILD:-build-fuzz}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
harnesses=("$@")
if [ "${#harnesses[@]}" -eq 0 ]; then
  harnesses=(frame kv membership checkpoint idx ini)
fi

# -- what it needs --------------------------------------------------------------
runtime=/usr/lib/llvm-16/lib/clang/16/lib/linux/libclang_rt.fuzzer-x86_64.a
if ! command -v clang++-16 >/dev/null; then
  echo "SKIPPED: clang++-16 not found (apt-get install clang-16)"
  exit 77
fi
if [ ! -f "$runtime" ]; then
  echo "SKIPPED: libFuzzer runtime $runtime not found" \
    "(apt-get install libfuzzer-16-dev libclang-rt-16-dev)"
  exit 77
fi

# -- build --------------------------------------------------------------------
# capnp warns when PWD is not the real current folder.
cd "$root" && export PWD="$root"
mkdir -p "$build"
cmake -S "$root/fuzz" -B "$build" -DCMAKE_CXX_COMPILER=clang++-16 \
  -DCMAKE_C_COMPILER=clang-16 >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
targets=()
for h in "${harnesses[@]}"; do
  [ -d "$root/fuzz/corpus/$h" ] ||
    { echo "*** no harness $h: no seed corpus fuzz/corpus/$h" >&2; exit 2; }
  targets+=("fuzz_$h")
done
jobs="${TROUPE_FUZZ_JOBS:-$(nproc)}"
if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "*** TROUPE_FUZZ_JOBS=$jobs: give a whole number of at least 1" >&2
  exit 2
fi
cmake --build "$build" -j "$jobs" \
  --target "${targets[@]}" >"$build/build.log" 2>&1 ||
  { tail -50 "$build/build.log"; exit 1; }

# -- run ----------------------------------------------------------------------
# Stacks name functions and lines where a symbolizer is installed.
if symbolizer="$(command -v llvm-symbolizer-16 || command -v llvm-symbolizer)"
then
  export ASAN_SYMBOLIZER_PATH="$symbolizer"
fi
# A crash, a sanitizer report, a leak, a run past 10 s on one input or past
# 2 GiB of memory is a finding; a decoder's error is the expected answer.
failed=0
pids=()
# Each harness runs in the background, so that its pid is known: its
# scratch files are removed after it, and a stop is passed on to it.
scratch_gone() { rm -rf "/dev/shm/troupe-fuzz-$1" "/tmp/troupe-fuzz-$1"; }
# shellcheck disable=SC2317 # called from the INT and TERM trap
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    wait "$p" || true
    scratch_gone "$p"
  done
  exit 130
}
trap stop INT TERM

start() { # harness: runs it in the background; its pid in pids
  local h=$1 work="$build/runs/$1"
  rm -rf "$work" && mkdir -p "$work/corpus"
  cp "$root/fuzz/corpus/$h/"* "$work/corpus/"
  "$build/fuzz_$h" "$work/corpus" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$work/" -print_final_stats=1 \
    >"$work/log" 2>&1 &
  pids+=($!)
}

report() { # harness pid: waits for it, prints its line
  local h=$1 pid=$2 work="$build/runs/$1" rc=0
  wait "$pid" || rc=$?
  scratch_gone "$pid" # a harness that died left them
  execs=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log")
  status=$({ grep -E '^#[0-9]+' "$work/log" || true; } | tail -1 |
    sed -E 's/.*(cov: [0-9]+ ft: [0-9]+ corp: [0-9]+).*/\1/')
  if [ "$rc" -eq 0 ]; then
    result="ok"
  else
    failed=1
    artifact=
    for a in "$work"/{crash,leak,timeout,oom,slow-unit}-*; do
      [ -e "$a" ] && { artifact=${a##*/}; break; }
    done
    result="FINDING (exit $rc): $work/${artifact:-log}"
  fi
  printf 'fuzz_%-11s %6s execs/s  %s  %s\n' "$h" "${execs:-?}" \
    "${status:-no status}" "$result"
  if [ "$rc" -ne 0 ]; then
    { grep -E 'ERROR|runtime error|^ +#[0-9]+ .* in (troupe|LLVMFuzzer)' \
      "$work/log" || true; } | head -12
  fi
}

# $jobs harnesses at a time; each batch reported in order once it ends.
for ((i = 0; i < ${#harnesses[@]}; i += jobs)); do
  batch=("${harnesses[@]:i:jobs}")
  pids=()
  for h in "${batch[@]}"; do start "$h"; done
  for k in "${!batch[@]}"; do
    report "${batch[k]}" "${pids[k]}"
    unset 'pids[k]' # reaped: a stop must not signal its pid, maybe reused
  done
done
exit "$failed"

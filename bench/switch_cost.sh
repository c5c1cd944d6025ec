#!/bin/bash
# What a switch costs in training throughput: runs build/time_to_accuracy
# in pairs, off and on (a flag on every node for each; alternating, so that
# a machine that slows down slows both), and prints each run's samples/s
# and its ratio to the compute-only floor measured in the same run, then
# the means, the ratio of the means, and the paired difference with its
# 95% interval; the same for the CPU time of every node (user + system),
# which is far less noisy. Ends with one line of JSON.
#
#   bench/switch_cost.sh [--runs=N] [--flag=ON] [--off=OFF]
#                        [time_to_accuracy flags]
#
# Defaults: 10 pairs, --flag=--server.atomic-pushes=on with
# --off=--server.atomic-pushes=off (another --flag alone: off = without it),
# and --modes=sync --workers=2 --servers=2 --epochs=3 (each given flag of
# time_to_accuracy replaces its default). The switch's cost is "within
# noise" when the interval of the difference holds 0.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
bin=${TROUPE_BUILD:-$here/build}/time_to_accuracy
node=${TROUPE_BUILD:-$here/build}/troupe-node
runs=10
flag=
off_flag=
declare -A args=([--modes]=sync [--workers]=2 [--servers]=2 [--epochs]=3)
extra=()
for a in "$@"; do
  case $a in
  --runs=*) runs=${a#--runs=} ;;
  --flag=*) flag=${a#--flag=} ;;
  --off=*) off_flag=${a#--off=} ;;
  --modes=* | --workers=* | --servers=* | --epochs=*) args[${a%%=*}]=${a#*=} ;;
  -h | --help)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *) extra+=("$a") ;;
  esac
done
if ! [[ $runs =~ ^[0-9]+$ ]] || ((runs < 2 || runs > 100)); then
  echo "switch_cost: --runs must be 2..100, not '$runs'" >&2
  exit 2
fi
if [[ ! -x $bin ]]; then
  echo "switch_cost: $bin not found: build first (deploy/build.sh)" >&2
  exit 2
fi
if [[ -z $flag ]]; then
  flag=--server.atomic-pushes=on
  off_flag=${off_flag:---server.atomic-pushes=off}
fi
fixed=()
for k in "${!args[@]}"; do
  fixed+=("$k=${args[$k]}")
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/runs
# Each node runs under this: it adds its CPU seconds to $SWITCH_COST_CPU.
cat >"$work/node" <<'NODE'
#!/usr/bin/env python3
import ctypes, os, signal, sys
pid = os.fork()
if pid == 0:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    os.execv(os.environ["SWITCH_COST_NODE"], ["troupe-node"] + sys.argv[1:])
def forward(sig, _):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, forward)
_, status, ru = os.wait4(pid, 0)
with open(os.environ["SWITCH_COST_CPU"], "a") as f:
    f.write(f"{ru.ru_utime + ru.ru_stime:.4f}\n")
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
sys.exit(os.WEXITSTATUS(status))
NODE
chmod +x "$work/node"
for ((i = 1; i <= runs; ++i)); do
  for side in off on; do
    with=()
    [[ $side == on ]] && with=("--node-arg=$flag")
    [[ $side == off && -n $off_flag ]] && with=("--node-arg=$off_flag")
    : >"$work/cpu"
    line=$(SWITCH_COST_NODE=$node SWITCH_COST_CPU=$work/cpu \
      "$bin" "${fixed[@]}" "${extra[@]}" "${with[@]}" --node="$work/node" \
      2>/dev/null | grep '^{' | tail -1) || true
    if [[ -z $line ]]; then
      echo "switch_cost: run $i ($side) printed no result; rerun it alone:" \
        "$bin ${fixed[*]} ${extra[*]} ${with[*]}" >&2
      exit 1
    fi
    cpu=$(awk '{ s += $1 } END { printf "%.3f", s }' "$work/cpu")
    echo "$side $cpu $line" >>"$out"
  done
  echo "pair $i of $runs done" >&2
done

python3 - "$out" "$flag" <<'EOF'
import json, math, statistics as st, sys

rows = {"off": [], "on": []}
for line in open(sys.argv[1]):
    side, cpu, j = line.split(" ", 2)
    d = json.loads(j)
    r = d["rows"][0]
    if r.get("error"):
        sys.exit(f"switch_cost: a run failed: {r['error']}")
    rows[side].append((r["samples_per_s"], d["floor_samples_per_s"], float(cpu)))
n = len(rows["off"])
print(f"{'pair':>4} {'off samples/s':>14} {'/floor':>7} {'cpu s':>6}"
      f" {'on samples/s':>13} {'/floor':>7} {'cpu s':>6}")
for i in range(n):
    (a, fa, ca), (b, fb, cb) = rows["off"][i], rows["on"][i]
    print(f"{i + 1:>4} {a:>14.0f} {a / fa:>7.3f} {ca:>6.2f}"
          f" {b:>13.0f} {b / fb:>7.3f} {cb:>6.2f}")
# Student's t, two-sided 95%, for n - 1 degrees of freedom.
t = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36,
     8: 2.31, 9: 2.26, 10: 2.23, 11: 2.20, 12: 2.18, 13: 2.16, 14: 2.14,
     15: 2.13, 19: 2.09, 24: 2.06, 29: 2.05}
tv = t.get(n - 1) or min((v for k, v in t.items() if k <= n - 1), default=1.96)


def compare(k, what, fmt):
    """Prints off against on for field k of the runs; returns the figures."""
    off = [r[k] for r in rows["off"]]
    on = [r[k] for r in rows["on"]]
    diff = [b - a for a, b in zip(off, on)]
    half = tv * st.stdev(diff) / math.sqrt(n)
    mo, mn, d = st.mean(off), st.mean(on), st.mean(diff)
    print(f"{what}:")
    for side, xs, m in (("off", off, mo), ("on", on, mn)):
        print(f"  {side + ':':<4} mean {m:{fmt}}, sd {st.stdev(xs):{fmt}}"
              f" ({st.stdev(xs) / m:.1%})")
    print(f"  on / off (means): {mn / mo:.3f};"
          f" medians: {st.median(on) / st.median(off):.3f}")
    print(f"  on - off, paired: {d:+{fmt}}, 95% interval [{d - half:+{fmt}},"
          f" {d + half:+{fmt}}] ({(d - half) / mo:+.1%} to {(d + half) / mo:+.1%})")
    within = d - half <= 0 <= d + half
    print("  within noise (the interval holds 0)" if within else
          "  NOT within noise (the interval excludes 0)")
    return {"off_mean": round(mo, 3), "on_mean": round(mn, 3),
            "ratio": round(mn / mo, 4), "diff_mean": round(d, 3),
            "diff_low": round(d - half, 3), "diff_high": round(d + half, 3),
            "within_noise": within}


speed = compare(0, "samples/s (the cost: on below off)", ".0f")
cpu = compare(2, "CPU seconds of all nodes per run (the cost: on above off)", ".2f")
print(json.dumps({"flag": sys.argv[2], "pairs": n, **speed,
                  "cpu": cpu}))
EOF

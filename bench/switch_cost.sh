#!/bin/bash
# What a switch costs in training throughput: runs build/time_to_accuracy
# in pairs, off and on (a flag on every node for each; alternating, so that
# a machine that slows down slows both), and prints each run's samples/s
# and its ratio to the compute-only floor measured in the same run, then
# the means, the ratio of the means, and the paired difference with its
# 95% interval. Ends with one line of JSON.
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
runs=10
flag=--server.atomic-pushes=on
off_flag=--server.atomic-pushes=off
declare -A args=([--modes]=sync [--workers]=2 [--servers]=2 [--epochs]=3)
extra=()
for a in "$@"; do
  case $a in
  --runs=*) runs=${a#--runs=} ;;
  --flag=*)
    flag=${a#--flag=}
    [[ $off_flag == --server.atomic-pushes=off ]] && off_flag=
    ;;
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
fixed=()
for k in "${!args[@]}"; do
  fixed+=("$k=${args[$k]}")
done

out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((i = 1; i <= runs; ++i)); do
  for side in off on; do
    with=()
    [[ $side == on ]] && with=("--node-arg=$flag")
    [[ $side == off && -n $off_flag ]] && with=("--node-arg=$off_flag")
    line=$("$bin" "${fixed[@]}" "${extra[@]}" "${with[@]}" 2>/dev/null |
      grep '^{' | tail -1) || true
    if [[ -z $line ]]; then
      echo "switch_cost: run $i ($side) printed no result; rerun it alone:" \
        "$bin ${fixed[*]} ${extra[*]} ${with[*]}" >&2
      exit 1
    fi
    echo "$side $line" >>"$out"
  done
  echo "pair $i of $runs done" >&2
done

python3 - "$out" "$flag" <<'EOF'
import json, math, statistics as st, sys

rows = {"off": [], "on": []}
for line in open(sys.argv[1]):
    side, j = line.split(" ", 1)
    d = json.loads(j)
    r = d["rows"][0]
    if r.get("error"):
        sys.exit(f"switch_cost: a run failed: {r['error']}")
    rows[side].append((r["samples_per_s"], d["floor_samples_per_s"]))
off = [s for s, _ in rows["off"]]
on = [s for s, _ in rows["on"]]
n = len(off)
print(f"{'pair':>4} {'off samples/s':>14} {'/floor':>7} {'on samples/s':>13} {'/floor':>7}")
for i in range(n):
    (a, fa), (b, fb) = rows["off"][i], rows["on"][i]
    print(f"{i + 1:>4} {a:>14.0f} {a / fa:>7.3f} {b:>13.0f} {b / fb:>7.3f}")
diff = [b - a for a, b in zip(off, on)]
# Student's t, two-sided 95%, for n - 1 degrees of freedom.
t = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36,
     8: 2.31, 9: 2.26, 10: 2.23, 11: 2.20, 12: 2.18, 13: 2.16, 14: 2.14,
     15: 2.13, 19: 2.09, 24: 2.06, 29: 2.05}
df = n - 1
tv = t.get(df) or min((v for k, v in t.items() if k <= df), default=1.96)
half = tv * st.stdev(diff) / math.sqrt(n)
mo, mn = st.mean(off), st.mean(on)
print(f"off: mean {mo:.0f} samples/s, sd {st.stdev(off):.0f} ({st.stdev(off) / mo:.1%})")
print(f"on:  mean {mn:.0f} samples/s, sd {st.stdev(on):.0f} ({st.stdev(on) / mn:.1%})")
print(f"on / off (means): {mn / mo:.3f}; medians: {st.median(on) / st.median(off):.3f}")
d = st.mean(diff)
print(f"on - off, paired: {d:+.0f} samples/s, 95% interval "
      f"[{d - half:+.0f}, {d + half:+.0f}] ({(d - half) / mo:+.1%} to {(d + half) / mo:+.1%})")
within = d - half <= 0 <= d + half
print("the cost is within noise (the interval holds 0)" if within else
      "the cost is NOT within noise (the interval excludes 0)")
print(json.dumps({"flag": sys.argv[2], "pairs": n, "off_mean": round(mo),
                  "on_mean": round(mn), "ratio": round(mn / mo, 4),
                  "diff_mean": round(d), "diff_low": round(d - half),
                  "diff_high": round(d + half), "within_noise": within}))
EOF

#!/usr/bin/env bash
# The scheduler's status page in a real browser (Debian's chromium,
# headless) during a running job under a node agent: it shows the
# workers, a test-accuracy curve that grows, and a worker's crash and
# rejoin (the agent kills worker-1 once). Exits 77 (CTest: skipped),
# saying why, where chromium is missing.
#
# usage: status_page_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1 build=$2
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "SKIPPED: no chromium (Debian's chromium package)"; exit 77; }
node=$build/troupe-node
work=$(mktemp -d)
pids=()
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*" >&2
  for f in "$work"/*.out; do
    echo "--- $f"
    tail -n 25 "$f"
  done
  exit 1
}
# wait_line FILE TEXT SECONDS: until FILE has a line with TEXT (the output
# of a process is the event waited for).
wait_line() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    grep -qF -- "$2" "$1" && return 0
    sleep 0.1
  done
  return 1
}
# A free port for the page: the kernel picks one, we let it go.
page_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$page_port/
dump() { # the page's DOM once its script has run a while
  timeout 60 "$browser" --headless --no-sandbox --disable-gpu \
    --no-first-run --user-data-dir="$work/profile" \
    --virtual-time-budget=1500 --dump-dom "$url" 2>/dev/null
}
points() { sed -n 's/.*id="curve-accuracy"[^>]*data-points="\([0-9]*\)".*/\1/p' | head -n 1; }

flags=(--config-file="$src/deploy/local.ini" --cluster.servers=1
  --cluster.workers=2 --middleman.heartbeat-interval=100ms
  --middleman.connection-timeout=1s)
"$node" --role=scheduler --scheduler-port=0 "${flags[@]}" \
  --cluster.status-port="$page_port" >"$work/scheduler.out" 2>&1 &
pids+=($!)
wait_line "$work/scheduler.out" "scheduler listening on" 20 || fail "no scheduler"
port=$(sed -n 's/.*scheduler listening on [^:]*:\([0-9]*\).*/\1/p' "$work/scheduler.out")
"$node" --role=agent --scheduler-port="$port" "${flags[@]}" \
  --agent.servers=1 --agent.workers=2 --train.epochs=12 \
  --train.evals-per-epoch=2 --train.eval-samples=1000 \
  --fault.plan=kill:worker-1@2500 >"$work/agent.out" 2>&1 &
pids=($! "${pids[@]}") # the agent stops before the scheduler

# wait_progress FILE FROM SECONDS: until rank 0 printed a progress line of
# epoch FROM or later (a restarted rank 0 skips the lines it missed).
wait_progress() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    if sed -n 's|^epoch \([0-9.]*\)/12 .*|\1|p' "$1" |
      awk -v from="$2" '$1 >= from { found = 1 } END { exit !found }'; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}
# last_epoch: the epoch of rank 0's latest progress line (0 before any).
last_epoch() {
  sed -n 's|^epoch \([0-9.]*\)/12 .*|\1|p' "$work/agent.out" | tail -n 1 | grep . || echo 0
}
wait_progress "$work/agent.out" 0.5 60 || fail "no progress line"
# Both workers on the page at once, with a point of the curve. The view
# lists live members only, so a load that falls between the kill of the
# agent's worker-1 and its rejoin (the kill is timed, the browser's start
# is not) lacks one of them: rank 0 or 1, whichever that process got by
# joining first or second. Load again, as a user would, until both are
# there.
shown=
for _ in $(seq 10); do
  first=$(dump)
  after=$(last_epoch) # the page cannot show a point later than this
  missing=
  for w in 0 1; do
    grep -q "id=\"member-worker-$w\"" <<<"$first" || missing+=" $w"
  done
  n1=$(points <<<"$first")
  if [ -z "$missing" ] && [ "${n1:-0}" -ge 1 ]; then
    shown=1
    break
  fi
  echo "$(date +%T.%3N) a load without worker(s)$missing or without a point (${n1:-0}); members:" \
    "$(grep -o 'id="member-[a-z]*-[0-9]*"' <<<"$first" | tr '\n' ' '); again"
  sleep 0.5 # a browser that failed at once does not spend every try at once
done
[ -n "$shown" ] || fail "workers 0 and 1 and a point of the curve never on the page at once (last load: workers$missing missing, ${n1:-0} points)"
echo "the page shows workers 0 and 1 and $n1 points of the accuracy curve (epoch $after printed by then)"

wait_line "$work/agent.out" "rejoined" 60 || fail "worker-1 did not come back"
echo "$(date +%T.%3N) worker-1 back (agent: $(grep -m1 'injected: kill' "$work/agent.out"))"
seen=
for _ in $(seq 10); do # the page polls twice a second
  page=$(dump)
  if grep -q "crashed" <<<"$page" && grep -q "rejoined" <<<"$page"; then
    seen=1
    break
  fi
done
[ -n "$seen" ] || fail "the page does not show the crash and the rejoin"
# Each event line names its role ("crashed worker 1: ..."; it read
# "crashed undefined 1" while the page asked the JSON for another field).
grep -qE '(crashed|rejoined) worker [0-9]+:' <<<"$page" ||
  fail "the events do not name their role: $(grep -oE '(crashed|rejoined) [^<]*' <<<"$page" | head -n 3)"
! grep -q undefined <<<"$page" || fail "the page shows 'undefined'"
echo "$(date +%T.%3N) the page shows worker-1's crash and rejoin"

# A progress line later than any the first load could have shown, and
# at least the sixth epoch: the curve must have grown by then.
next=$(awk -v e="$after" 'BEGIN { n = e + 0.5; n = (n > 6 ? n : 6); print (n < 12 ? n : 12) }')
wait_progress "$work/agent.out" "$next" 120 || fail "no progress line of epoch $next"
n2=$(points <<<"$(dump)")
[ "${n2:-0}" -gt "$n1" ] || fail "the curve did not grow: $n1 then ${n2:-0} points"
echo "the accuracy curve grew from $n1 to $n2 points"
wait_line "$work/agent.out" "final test accuracy" 240 || fail "the job did not end"
echo "passed"

# Sourced by the deploy and demo scripts: starts a troupe scheduler.
# shellcheck shell=bash
#
# start_scheduler BIN LOG FLAG...
#   starts `BIN --role=scheduler FLAG...` in the background with its output
#   in LOG, waits (up to 10 s) for it to listen, and sets `sched_pid` and
#   `port`; prints the log and returns 1 if it did not start.
start_scheduler() {
  local bin=$1 log=$2
  shift 2
  "$bin" --role=scheduler "$@" >"$log" 2>&1 &
  sched_pid=$!
  echo "scheduler pid $sched_pid (log $log)"
  scheduler_port "$log" "$sched_pid" 100
  if [ -z "$port" ]; then
    echo "*** the scheduler did not start:" >&2
    cat "$log" >&2
    return 1
  fi
  echo "scheduler listening on port $port"
}

# scheduler_port LOG PID TENTHS: sets `port` to the port the scheduler
# whose output is LOG says it listens on, waiting up to TENTHS tenths of a
# second while PID (whatever writes LOG) runs; empty if it did not say.
scheduler_port() {
  local log=$1 pid=$2 tenths=$3
  port=
  for _ in $(seq "$tenths"); do
    port=$(sed -n 's/.*scheduler listening on [^:]*:\([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
}

# stop_scheduler: stops the scheduler start_scheduler started (`sched_pid`),
# if any, and waits for it. For an EXIT trap.
stop_scheduler() {
  if [ -n "${sched_pid:-}" ]; then
    kill "$sched_pid" 2>/dev/null || true
    wait "$sched_pid" 2>/dev/null || true
  fi
}

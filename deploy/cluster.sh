#!/usr/bin/env bash
# Starts a troupe job on several machines over ssh, as horovodrun -H or
# ps-lite's ssh tracker do: the scheduler on one host, and on every host a
# node agent that starts (and restarts) its servers and workers. Each node
# publishes the address of its own route to the scheduler. Every host's
# output is gathered into the log folder here; rank 0's progress shows on
# the terminal. Everything it started is stopped on exit, on Ctrl-C, or as
# soon as one agent fails. Exits non-zero if an agent failed.
#
# usage: deploy/cluster.sh HOSTFILE [FLAG...]
#   HOSTFILE  one host per line: HOST [scheduler] [servers=N] [workers=N]
#             (# starts a comment). HOST is what ssh reaches (user@host
#             works); the scheduler runs on the host marked `scheduler`,
#             else on the first. At least one server and one worker.
#   FLAGs go to every node, e.g. --server.mode=async --train.epochs=4
# env: TROUPE_SSH      ssh command (default: ssh -o BatchMode=yes
#                      -o ConnectTimeout=10)
#      TROUPE_ROOT     troupe's folder on the hosts, the same path on each
#                      (default: this one; shared, or copied alike)
#      TROUPE_CONFIG   config file under it (default: deploy/local.ini)
#      TROUPE_BIN      troupe-node on the hosts (default: build/troupe-node
#                      under TROUPE_ROOT)
#      TROUPE_LOGS     folder for the gathered logs (default:
#                      logs/<date-time>); metrics.jsonl and events.jsonl
#                      are written on the host of rank 0 and of the
#                      scheduler, at the same path
#      TROUPE_TLS, TROUPE_CERTS  as deploy/local-cluster.sh (the
#                      certificates must be at the same path on each host)
set -euo pipefail

if [ $# -lt 1 ]; then
  sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
hostfile=$1
shift
here=$(cd "$(dirname "$0")/.." && pwd)
root=${TROUPE_ROOT:-$here}
conf=${TROUPE_CONFIG:-deploy/local.ini}
bin=${TROUPE_BIN:-build/troupe-node}
logs=${TROUPE_LOGS:-$here/logs/$(date +%Y%m%d-%H%M%S)}
read -r -a ssh <<<"${TROUPE_SSH:-ssh -o BatchMode=yes -o ConnectTimeout=10}"
job=troupe-$(date +%s)-$$ # names the nodes' pid files on the hosts
[ -f "$hostfile" ] || { echo "*** no host file $hostfile" >&2; exit 2; }

# -- the host file --------------------------------------------------------
hosts=() servers=() workers=() sched=-1
n=0
# The last line counts without its newline, and a line of a Windows file
# without its carriage return.
while IFS= read -r line || [ -n "$line" ]; do
  line=${line//$'\r'/}
  line=${line%%#*}
  read -r -a words <<<"$line"
  [ ${#words[@]} -gt 0 ] || continue
  hosts+=("${words[0]}") servers+=(0) workers+=(0)
  for w in "${words[@]:1}"; do
    if [ "$w" = scheduler ]; then
      if [ "$sched" -ge 0 ]; then
        echo "*** $hostfile: 'scheduler' marks ${hosts[sched]} and" \
          "${words[0]}: mark one host" >&2
        exit 2
      fi
      sched=$n
    elif [[ $w =~ ^servers=([0-9]{1,4})$ ]]; then
      servers[n]=$((10#${BASH_REMATCH[1]}))
    elif [[ $w =~ ^workers=([0-9]{1,4})$ ]]; then
      workers[n]=$((10#${BASH_REMATCH[1]}))
    else
      echo "*** $hostfile: '$w' for host ${words[0]}: expected scheduler," \
        "servers=N or workers=N" >&2
      exit 2
    fi
  done
  n=$((n + 1))
done <"$hostfile"
[ "$n" -gt 0 ] || { echo "*** $hostfile names no host" >&2; exit 2; }
[ "$sched" -ge 0 ] || sched=0
total_servers=0 total_workers=0
for i in $(seq 0 $((n - 1))); do
  total_servers=$((total_servers + servers[i]))
  total_workers=$((total_workers + workers[i]))
done
if [ "$total_servers" -lt 1 ] || [ "$total_workers" -lt 1 ]; then
  echo "*** $hostfile: $total_servers servers and $total_workers workers;" \
    "a job needs at least one of each" >&2
  exit 2
fi
# The address the agents reach the scheduler at: its host (user@ dropped),
# each host taking its own route to it.
sched_host=${hosts[sched]}
sched_addr=${sched_host#*@}
# A name: its address here, for every node alike. Debian maps a machine's
# own name to 127.0.1.1 in /etc/hosts, which no other host reaches: such an
# answer is passed over where the job has other hosts.
declare -A machines
for h in "${hosts[@]}"; do machines[${h#*@}]=1; done
if ! [[ $sched_addr =~ ^[0-9.]+$ || $sched_addr == *:* ]]; then
  answers=$(getent ahostsv4 "$sched_addr" | awk '{ print $1 }' | uniq)
  addr=$(grep -v -m 1 '^127\.' <<<"$answers" || true)
  [ -n "$addr" ] || [ ${#machines[@]} -gt 1 ] || addr=$(head -n 1 <<<"$answers")
  if [ -z "$addr" ]; then
    echo "*** $hostfile: the scheduler's host $sched_addr resolves here to" \
      "${answers:-no address}${answers:+ only (loopback: /etc/hosts)}," \
      "which the other hosts cannot reach: give its address" >&2
    exit 2
  fi
  sched_addr=$addr
fi
mkdir -p "$logs"
echo "logs in $logs; scheduler on $sched_host;" \
  "$total_servers servers and $total_workers workers on $n hosts"

# -- remote nodes ---------------------------------------------------------
pids=()       # local ssh processes, one per node
declare -A where # local ssh pid -> "host name"
# remote_command NAME FLAG...: the shell lines a host runs for node NAME:
# it finds its address on its route to the scheduler, runs troupe-node,
# and keeps its pid in a file while it runs (stop_node reads it).
remote_command() {
  local name=$1 q f
  local pidfile=/tmp/$job-$name.pid
  shift
  q=""
  for f in "$@"; do q+=" $(printf '%q' "$f")"; done
  cat <<EOF
cd $(printf '%q' "$root") || exit 2
addr=\$(ip -o route get $(printf '%q' "$sched_addr") 2>/dev/null |
  sed -n 's/.* src \\([^ ]*\\).*/\\1/p')
[ -n "\$addr" ] || { echo "*** \$(hostname): no route to $sched_addr" >&2; exit 2; }
mkdir -p $(printf '%q' "$logs") || exit 2
$(printf '%q' "$bin") --host="\$addr" $q &
node=\$!
echo \$node > $pidfile
wait \$node
rc=\$?
rm -f $pidfile
exit \$rc
EOF
}
# start_node HOST NAME LOG FLAG...: runs NAME on HOST in the background.
start_node() {
  local host=$1 name=$2 log=$3
  shift 3
  : >"$log" # there before anyone reads it
  "${ssh[@]}" "$host" "$(remote_command "$name" "$@")" >"$log" 2>&1 &
  pids+=($!)
  where[$!]="$host $name"
}
# shellcheck disable=SC2317 # called from the EXIT trap
# stop_node PID: asks the node behind local ssh PID to stop (SIGTERM: an
# agent stops its children first), then waits for the ssh.
stop_node() {
  local pid=$1 host name
  read -r host name <<<"${where[$pid]}"
  "${ssh[@]}" "$host" "f=/tmp/$job-$name.pid; [ -f \$f ] &&" \
    "kill \$(cat \$f) 2>/dev/null; rm -f \$f" </dev/null >/dev/null 2>&1 ||
    true
  wait "$pid" 2>/dev/null || true
}
stopped=0
# shellcheck disable=SC2317 # called from the EXIT trap
stop_all() { # agents first, the scheduler last
  [ "$stopped" = 0 ] || return 0
  stopped=1
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop_node "${pids[i]}"; done
}
trap stop_all EXIT
trap 'echo "interrupted: stopping every host"; exit 130' INT TERM

common=("--config-file=$conf" "--scheduler-host=$sched_addr"
  "--cluster.servers=$total_servers" "--cluster.workers=$total_workers"
  "--train.metrics-file=$logs/metrics.jsonl")
# shellcheck source=deploy/tls.sh
. "$here/deploy/tls.sh"
tls_flags "$here" "$@" || exit 2
[ ${#tls[@]} -eq 0 ] || echo "mutual TLS with the certificates of ${tls[2]#*=}"
common+=("${tls[@]}" "$@")

start_node "$sched_host" scheduler "$logs/scheduler.log" --role=scheduler \
  --scheduler-port=0 "${common[@]}" "--cluster.events-file=$logs/events.jsonl"
# shellcheck source=deploy/scheduler.sh
. "$here/deploy/scheduler.sh"
scheduler_port "$logs/scheduler.log" "${pids[0]}" 300
if [ -z "$port" ]; then
  echo "*** the scheduler did not start on $sched_host:" >&2
  cat "$logs/scheduler.log" >&2
  exit 1
fi
echo "scheduler listening on $sched_addr:$port"

# The agents with workers end with the job; those with servers alone run
# until stopped, after them (stop_all), as the scheduler does.
agents=()
declare -A logged # the agents' log names so far
for i in $(seq 0 $((n - 1))); do
  [ $((servers[i] + workers[i])) -gt 0 ] || continue
  h=${hosts[i]}
  log="agent-${h//[^A-Za-z0-9._-]/_}"
  # A host on two lines: a log each (agent-HOST-INDEX, INDEX its line's
  # among the hosts', from 0).
  while [ -n "${logged[$log]:-}" ]; do log+="-$i"; done
  logged[$log]=1
  log="$logs/$log.log"
  start_node "$h" "agent-$i" "$log" --role=agent --scheduler-port="$port" \
    "--agent.servers=${servers[i]}" "--agent.workers=${workers[i]}" \
    "${common[@]}"
  [ "${workers[i]}" -eq 0 ] || agents+=("${pids[-1]}")
  echo "agent on $h: ${servers[i]} servers, ${workers[i]} workers (log $log)"
done
# Rank 0's progress as it comes, from whichever agent runs it.
tail -q -n +1 -F "$logs"/agent-*.log 2>/dev/null |
  grep --line-buffered -E '^(epoch |final test accuracy|\*\*\* )' &
shower=$!
trap 'kill $shower 2>/dev/null || true; stop_all' EXIT

# Wait for the workers' agents; the first to fail stops everything.
failed=0
left=("${agents[@]}")
while [ ${#left[@]} -gt 0 ]; do
  set +e
  wait -n -p done_pid "${left[@]}"
  rc=$?
  set -e
  next=()
  for p in "${left[@]}"; do [ "$p" = "$done_pid" ] || next+=("$p"); done
  left=("${next[@]}")
  if [ "$rc" -ne 0 ]; then
    read -r h _ <<<"${where[$done_pid]}"
    echo "*** the agent on $h failed (exit $rc); stopping every host" >&2
    failed=1
    break
  fi
done
sleep 0.5 # the last progress lines reach the terminal
exit $failed

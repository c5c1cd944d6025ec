#!/usr/bin/env bash
# deploy/slurm/troupe.sbatch against a real single-node Slurm (Debian's
# slurm-wlm and munge), started here with a configuration of its own:
# munged, slurmctld and slurmd on private sockets, ports and folders. The
# main job (1 server and 2 workers on the node) must complete and reach
# 0.88, and leave no process behind. Exits 77 (CTest: skipped), saying
# why, without root or Slurm (deploy/install-deps.sh --slurm installs it).
#
# usage: slurm_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1 build=$2
skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (slurmd starts jobs as their user)"
for t in /usr/sbin/munged /usr/sbin/slurmctld /usr/sbin/slurmd sbatch sinfo; do
  command -v "$t" >/dev/null ||
    skip "no $t: Slurm is not installed (deploy/install-deps.sh --slurm)"
done
work=$(mktemp -d)
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
  local f
  scancel --quiet --full "${job:-0}" 2>/dev/null
  for f in slurmd slurmctld munged; do
    [ -f "$work/$f.pid" ] && kill "$(cat "$work/$f.pid")" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*" >&2
  for f in "$work"/out-*.txt "$work"/log/*.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 25 "$f"; }
  done
  exit 1
}
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
mkdir -p "$work/state" "$work/spool" "$work/log"
head -c 1024 /dev/urandom >"$work/munge.key"
chmod 400 "$work/munge.key"
/usr/sbin/munged --force --socket="$work/munge.sock" \
  --key-file="$work/munge.key" --pid-file="$work/munged.pid" \
  --log-file="$work/log/munged.log" --seed-file="$work/munge.seed" ||
  fail "munged did not start"
node=$(hostname -s)
cat >"$work/slurm.conf" <<CONF
ClusterName=troupetest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$work/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=troupe Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf
/usr/sbin/slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
/usr/sbin/slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
# The node reports idle once slurmd registered: the event waited for.
for _ in $(seq 100); do
  [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break
  sleep 0.2
done
[ "$(sinfo -h -o %T 2>/dev/null)" = idle ] || fail "the node is not idle: $(sinfo 2>&1)"
echo "single-node Slurm up: $(sinfo -h -o '%P %D %T %N')"

out=$(cd "$work" && TROUPE_ROOT=$src TROUPE_BIN=$build/troupe-node \
  TROUPE_LOGS=$work/job TROUPE_CERTS=$work/certs TROUPE_WORKERS_PER_NODE=2 \
  sbatch --parsable --output="$work/out-%j.txt" \
  "$src/deploy/slurm/troupe.sbatch")
job=${out%%;*}
[ -n "$job" ] || fail "sbatch gave no job id: $out"
state=
for _ in $(seq 1500); do # up to 5 minutes
  state=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
  sleep 0.2
done
cat "$work/out-$job.txt"
[ "$state" = COMPLETED ] || fail "job $job ended $state"
acc=$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$work/out-$job.txt" | tail -n 1)
if [ -z "$acc" ] || ! awk -v a="$acc" 'BEGIN { exit !(a >= 0.88) }'; then
  fail "final test accuracy '${acc:-none}', not >= 0.88"
fi
left=$(pgrep -f -- "--train.metrics-file=$work/job/" || true)
[ -z "$left" ] || fail "the job left processes: $left"
echo "job $job COMPLETED, final test accuracy $acc, nothing left behind"

#!/usr/bin/env bash
# deploy/cluster.sh for real: three hosts, each a network namespace with an
# address on a bridge and its own sshd (Debian's openssh-server), key login
# as root. The main job across them must reach 0.88 and leave no process
# behind on any host. Exits 77 (CTest: skipped), saying why, where it
# cannot run: not root, or sshd, ssh or ip missing.
#
# usage: cluster_ssh_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, sshd)"
[ -x /usr/sbin/sshd ] || skip "no /usr/sbin/sshd (Debian's openssh-server)"
command -v ssh >/dev/null || skip "no ssh (openssh-client)"
command -v ip >/dev/null || skip "no ip (iproute2)"
ip netns list >/dev/null 2>&1 || skip "network namespaces unavailable"
[ -x "$build/troupe-node" ] || { echo "no $build/troupe-node" >&2; exit 1; }

tag=t$$ # short: interface names have at most 15 characters
net=10.$((100 + $$ % 100)).$(($$ % 250 + 1))
work=$(mktemp -d)
hosts=(1 2 3)
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
  local i pid
  for i in "${hosts[@]}"; do
    # Whatever still runs there (sshd, and a job's remains after a
    # failure) goes with its host: a deleted namespace would not stop it.
    for pid in $(ip netns pids "$tag-h$i" 2>/dev/null); do
      kill -9 "$pid" 2>/dev/null || true
    done
    ip netns del "$tag-h$i" 2>/dev/null || true
  done
  ip link del "${tag}br" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Three hosts on a bridge: $net.11, .12, .13.
ip link add "${tag}br" type bridge
ip addr add "$net.1/24" dev "${tag}br"
ip link set "${tag}br" up
for i in "${hosts[@]}"; do
  ns=$tag-h$i
  ip netns add "$ns"
  ip link add "${tag}v$i" type veth peer name eth0 netns "$ns"
  ip link set "${tag}v$i" master "${tag}br" up
  ip -n "$ns" addr add "$net.1$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done

# sshd in each, root logs in with a key made here.
ssh-keygen -q -t ed25519 -N '' -f "$work/key"
ssh-keygen -q -t ed25519 -N '' -f "$work/hostkey"
cp "$work/key.pub" "$work/authorized_keys"
mkdir -p /run/sshd
for i in "${hosts[@]}"; do
  cat >"$work/sshd-$i.conf" <<EOF
ListenAddress $net.1$i
Port 22
HostKey $work/hostkey
PidFile $work/sshd-$i.pid
PermitRootLogin prohibit-password
AuthorizedKeysFile $work/authorized_keys
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
EOF
  ip netns exec "$tag-h$i" /usr/sbin/sshd -f "$work/sshd-$i.conf"
done
ssh_cmd="ssh -i $work/key -o BatchMode=yes -o StrictHostKeyChecking=no"
ssh_cmd+=" -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
ssh_cmd+=" -o ConnectTimeout=5"
# Each sshd answers once it listens: a login is the event waited for.
for i in "${hosts[@]}"; do
  ok=
  for _ in $(seq 50); do
    if $ssh_cmd "root@$net.1$i" true 2>/dev/null; then
      ok=1
      break
    fi
    kill -0 "$(cat "$work/sshd-$i.pid" 2>/dev/null || echo 0)" 2>/dev/null ||
      break
  done
  [ -n "$ok" ] || { echo "sshd on host $i does not answer" >&2; exit 1; }
done
echo "three hosts up: $net.11-13, key login as root"

cat >"$work/hosts" <<EOF
# host         roles
root@$net.11   scheduler servers=1
root@$net.12   servers=1 workers=1
root@$net.13   workers=1
EOF
set +e
TROUPE_SSH=$ssh_cmd TROUPE_LOGS=$work/logs TROUPE_CERTS=$work/certs \
  TROUPE_BIN=$build/troupe-node \
  "$src/deploy/cluster.sh" "$work/hosts" 2>&1 | tee "$work/out"
rc=${PIPESTATUS[0]}
set -e
status=0
if [ "$rc" != 0 ]; then
  echo "FAILED: deploy/cluster.sh exited $rc" >&2
  status=1
fi
acc=$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$work/out" | tail -n 1)
if [ -z "$acc" ] || ! awk -v a="$acc" 'BEGIN { exit !(a >= 0.88) }'; then
  echo "FAILED: final test accuracy '${acc:-none}', not >= 0.88" >&2
  status=1
else
  echo "final test accuracy $acc >= 0.88"
fi
# Nothing of the job is left on any host: only sshd (the daemon, and
# the last sessions' processes on their way out).
for i in "${hosts[@]}"; do
  for pid in $(ip netns pids "$tag-h$i"); do
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != sshd ]; then
      echo "FAILED: host $i left pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" >&2
      kill -9 "$pid" 2>/dev/null || true
      status=1
    fi
  done
done
if [ $status != 0 ]; then
  for f in "$work"/logs/*.log; do
    echo "--- $f"
    tail -n 30 "$f"
  done
fi
exit $status

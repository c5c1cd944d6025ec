#!/usr/bin/env bash
# deploy/cluster.sh's answers to bad input, before it reaches any host:
# each exits 2 with one line naming what is wrong.
set -uo pipefail
src=$1
work=$(mktemp -d)
# The fake scheduler below, by its pid, should cluster.sh not stop it.
# shellcheck disable=SC2317 # the EXIT trap
cleanup() {
  local f
  for f in "$work"/flags-scheduler-*; do
    [ ! -e "$f" ] || ! grep -qs sleep "/proc/${f##*-}/cmdline" ||
      kill "${f##*-}" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=tests/deploy/checks.sh
. "$src/tests/deploy/checks.sh"
# cluster ARGS...: cluster.sh, which reaches no host.
# shellcheck disable=SC2317 # called through expect
cluster() { TROUPE_SSH=false "$src/deploy/cluster.sh" "$@"; }
expect "no arguments" 2 "usage: deploy/cluster.sh HOSTFILE" cluster
expect "no host file" 2 "*** no host file $work/none" cluster "$work/none"
printf 'h1 scheduler servers=1\nh2 workers=1x\n' >"$work/bad-word"
expect "a bad word" 2 "'workers=1x' for host h2: expected scheduler" \
  cluster "$work/bad-word"
printf '# only a comment\n\n' >"$work/empty"
expect "no host" 2 "names no host" cluster "$work/empty"
printf 'h1 scheduler servers=2\n' >"$work/no-workers"
expect "no worker" 2 "2 servers and 0 workers; a job needs at least one of each" \
  cluster "$work/no-workers"
printf 'h1 scheduler servers=1 workers=1\nh2 scheduler workers=1\n' >"$work/two"
expect "two scheduler marks" 2 "'scheduler' marks h1 and h2: mark one host" \
  cluster "$work/two"
printf 'localhost scheduler servers=1\nh2 workers=1\n' >"$work/loopback"
expect "a scheduler's name only loopback here, among other hosts" 2 \
  "the scheduler's host localhost resolves here to 127.0.0.1 only" \
  cluster "$work/loopback"

# A job on hosts named by name, not address (at 2b8c60c each host said
# "no route to localhost"), from a file with Windows line ends whose last
# line has no newline (it was dropped), one host on two lines (their agents
# shared one log). ssh runs the host's lines here, and the node records its
# flags: this checks the script, not troupe-node.
cat >"$work/ssh" <<'SSH'
#!/usr/bin/env bash
shift # the host; ssh joins the rest with spaces
exec bash -c "$*"
SSH
cat >"$work/node" <<'NODE'
#!/usr/bin/env bash
for a in "$@"; do [[ $a != --role=* ]] || role=${a#--role=}; done
printf '%s\n' "$@" >"$(dirname "$0")/flags-$role-$$"
if [ "$role" = scheduler ]; then
  echo "troupe-node: scheduler listening on 127.0.0.1:4242 (pid $$)"
  exec sleep 60 # until cluster.sh stops it
fi
echo "node $$" # into its agent's log
NODE
chmod +x "$work/ssh" "$work/node"
printf 'localhost scheduler servers=1 workers=1\r\nlocalhost workers=1' \
  >"$work/named"
out=$(TROUPE_SSH=$work/ssh TROUPE_BIN=$work/node TROUPE_TLS=off \
  TROUPE_LOGS=$work/logs timeout 60 "$src/deploy/cluster.sh" "$work/named" 2>&1)
rc=$?
# shellcheck disable=SC2317 # called through check
gone() { ! kill -0 "$1" 2>/dev/null; }
detail="cluster.sh exit $rc, output:
$out"
check "hosts by name: the job ran" [ "$rc" = 0 ]
check "both lines read" grep -qF "1 servers and 2 workers on 2 hosts" <<<"$out"
logs=$(cat "$work"/logs/agent-localhost{,-1}.log 2>/dev/null)
check "a log an agent" [ "$(grep -c '^node ' <<<"$logs")" = 2 ]
flags=$(cat "$work"/flags-* 2>/dev/null)
check "three nodes on the route's address" \
  [ "$(grep -c -x -- --host=127.0.0.1 <<<"$flags")" = 3 ]
sched_file=$(ls "$work"/flags-scheduler-* 2>/dev/null)
check "the scheduler stopped" [ -n "$sched_file" ] &&
  check "... by its pid" gone "${sched_file##*-}"
exit $status

#!/usr/bin/env bash
# deploy/cluster.sh's answers to bad input, before it reaches any host:
# each exits 2 with one line naming what is wrong.
set -uo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
# expect NAME WANTED_TEXT ARGS...: cluster.sh ARGS exits 2 saying WANTED_TEXT.
expect() {
  local name=$1 want=$2 out rc
  shift 2
  out=$(TROUPE_SSH=false "$src/deploy/cluster.sh" "$@" 2>&1)
  rc=$?
  if [ "$rc" != 2 ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAILED: $name: exit $rc, output:"
    echo "$out"
    status=1
  else
    echo "ok: $name"
  fi
}
expect "no arguments" "usage: deploy/cluster.sh HOSTFILE"
expect "no host file" "*** no host file $work/none" "$work/none"
printf 'h1 scheduler servers=1\nh2 workers=1x\n' >"$work/bad-word"
expect "a bad word" "'workers=1x' for host h2: expected scheduler" "$work/bad-word"
printf '# only a comment\n\n' >"$work/empty"
expect "no host" "names no host" "$work/empty"
printf 'h1 scheduler servers=2\n' >"$work/no-workers"
expect "no worker" "2 servers and 0 workers; a job needs at least one of each" \
  "$work/no-workers"
exit $status

#!/usr/bin/env bash
# deploy/build.sh's answers to arguments that are not its own, before it
# installs or builds anything (at 2b8c60c `--help` went to cmake, which
# printed its help into build.log, and the whole build ran after it).
set -uo pipefail
src=$1
status=0
# expect NAME RC WANTED_TEXT ARGS...: build.sh ARGS exits RC saying it.
expect() {
  local name=$1 want_rc=$2 want=$3 out rc
  shift 3
  out=$("$src/deploy/build.sh" "$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want_rc" ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAILED: $name: exit $rc, output:"
    echo "$out"
    status=1
  else
    echo "ok: $name"
  fi
}
expect "--help" 0 "usage: deploy/build.sh [--slurm] [--k8s]" --help
expect "a word" 2 "'foo' is no option here" foo
expect "--k8s after a -D flag" 2 "'--k8s' is no option here" \
  --slurm -DX=1 --k8s
expect "a bare -D" 2 "'-D' is no option here" -D
exit $status

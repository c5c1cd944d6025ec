# Sourced by the deploy scripts' tests: a line "ok: NAME" or "FAILED: NAME"
# per check, and `status` 1 (the test's exit code) once one failed.
# shellcheck shell=bash disable=SC2034 # status: the sourcing test exits with it
status=0

# check NAME COMMAND...: COMMAND succeeds; on failure `detail`, if set,
# is printed too.
check() {
  local name=$1
  shift
  if "$@"; then
    echo "ok: $name"
  else
    echo "FAILED: $name"
    [ -z "${detail:-}" ] || echo "$detail"
    status=1
  fi
}

# expect NAME RC WANTED_TEXT COMMAND...: COMMAND exits RC and its output
# holds WANTED_TEXT.
expect() {
  local name=$1 want_rc=$2 want=$3 out rc
  shift 3
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want_rc" ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAILED: $name: exit $rc, output:"
    echo "$out"
    status=1
  else
    echo "ok: $name"
  fi
}

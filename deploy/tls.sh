# Sourced by the deploy and demo scripts: the flags of mutual TLS.
# shellcheck shell=bash
#
# tls_flags ROOT FLAG...
#   sets the array `tls` to the --openssl.* flags for every node of the
#   job: the certificates in TROUPE_CERTS (default ROOT/certs), made by
#   deploy/make-certs.sh where missing. None if FLAG... names --openssl.*
#   itself, or if TROUPE_TLS=off (plain text: a trusted network only, see
#   docs/trust.md). Returns 2 on a bad TROUPE_TLS or no certificates.
tls_flags() {
  local root=$1 f out
  shift
  tls=()
  case ${TROUPE_TLS:-on} in
  off) return 0 ;;
  on) ;;
  *)
    echo "*** TROUPE_TLS must be on or off, got '$TROUPE_TLS'" >&2
    return 2
    ;;
  esac
  for f in "$@"; do
    [[ $f == --openssl.* ]] && return 0
  done
  out=$("$root/deploy/make-certs.sh" "${TROUPE_CERTS:-$root/certs}") ||
    return 2
  # shellcheck disable=SC2034 # the caller reads it
  mapfile -t tls <<<"$out" # a line a flag: paths may hold spaces
}

#!/usr/bin/env bash
# deploy/make-certs.sh keeps a cluster's CA: a folder with the public files
# only (a node's copy) keeps its ca.pem, and what would need the CA's key
# is refused in one line; flags come one a line, so that deploy/tls.sh
# keeps a path with a space as one flag.
set -uo pipefail
src=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/make certs.XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/deploy/checks.sh
. "$src/tests/deploy/checks.sh"
make=$src/deploy/make-certs.sh

"$make" "$work/ca" >/dev/null || exit 1
mkdir "$work/node" "$work/key-only"
cp "$work"/ca/{ca.pem,node.pem,node.key} "$work/node/"
before=$(md5sum <"$work/node/ca.pem")
out=$("$make" "$work/node")
check "the public files alone: accepted" [ $? = 0 ]
check "... and ca.pem kept (at 2b8c60c a new CA replaced it)" \
  [ "$before" = "$(md5sum <"$work/node/ca.pem")" ]
check "... and no ca.key made" [ ! -e "$work/node/ca.key" ]
check "... the kept files still verify" \
  openssl verify -CAfile "$work/node/ca.pem" "$work/node/node.pem"
expect "a certificate to sign without ca.key" 2 \
  "has ca.pem but not ca.key, which signs other.pem" "$make" "$work/node" other
check "... nothing made" [ ! -e "$work/node/other.pem" ]
cp "$work/ca/ca.key" "$work/key-only/"
expect "ca.key without ca.pem" 2 "ca.key but no ca.pem" "$make" "$work/key-only"
check "... ca.key kept" cmp -s "$work/ca/ca.key" "$work/key-only/ca.key"

# ECDSA P-256 keys (cheaper handshakes); a folder with RSA keys (made
# before) keeps them, and a certificate added there verifies against them.
check "new keys are P-256" \
  grep -q "ASN1 OID: prime256v1" <(openssl pkey -in "$work/ca/node.key" -noout -text)
mkdir "$work/rsa"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=old CA" \
  -keyout "$work/rsa/ca.key" -out "$work/rsa/ca.pem" 2>/dev/null
before=$(md5sum <"$work/rsa/ca.key")
"$make" "$work/rsa" added >/dev/null
check "an RSA CA: kept" [ "$before" = "$(md5sum <"$work/rsa/ca.key")" ]
check "... and an EC certificate it signed verifies" \
  openssl verify -CAfile "$work/rsa/ca.pem" "$work/rsa/added.pem"

# A path with a space: one flag a line, and three flags in tls_flags.
mapfile -t flags <<<"$out"
check "three flags, one a line" [ "${#flags[@]}" = 3 ]
check "the cafile flag whole" \
  [ "${flags[2]}" = "--openssl.cafile=$work/node/ca.pem" ]
# shellcheck source=deploy/tls.sh
source "$src/deploy/tls.sh"
TROUPE_CERTS=$work/node tls_flags "$src"
check "tls_flags: three flags" [ "${#tls[@]}" = 3 ]
check "tls_flags: the key flag whole" \
  [ "${tls[1]}" = "--openssl.key=$work/node/node.key" ]
exit $status

#!/usr/bin/env bash
# Makes a private certificate authority for one troupe cluster and a
# certificate for its nodes, with the openssl command line: the files that
# --openssl.certificate, --openssl.key and --openssl.cafile name. Nodes
# with them speak mutual TLS and refuse peers without a certificate of
# this CA (docs/trust.md). Keeps what DIR already holds; keys are 0600.
#
# usage: deploy/make-certs.sh DIR [NAME...]
#   DIR   where ca.pem, ca.key and NAME.pem, NAME.key go (made if missing;
#         a CA only where neither ca.pem nor ca.key is there)
#   NAME  a node certificate to make (default: node); every node may use
#         the same one, as CAF checks the CA, not the host name
# prints the three flags for the first NAME, one a line.
set -euo pipefail

if [ $# -lt 1 ] || [[ $1 == -* ]]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
dir=$1
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(node)
command -v openssl >/dev/null || {
  echo "*** make-certs: no openssl command (apt-get install openssl)" >&2
  exit 2
}
mkdir -p "$dir"
umask 077
days=3650
# ECDSA P-256 keys: a TLS handshake signs with the node's key, which took
# 1 ms with RSA-2048 and takes 0.03 ms so (openssl speed here), and CAF
# loads the key again for every connection it accepts (docs/trust.md).
# Folders made with RSA keys keep them; the two kinds work together.
key=(-newkey ec -pkeyopt ec_paramgen_curve:P-256)
# A CA only where neither of its files is there: one alone (a node's copy
# of the public files, a key restored without its certificate) is kept,
# since a new CA would make every certificate of the cluster a stranger's.
if [ ! -s "$dir/ca.pem" ] && [ ! -s "$dir/ca.key" ]; then
  openssl req -x509 "${key[@]}" -nodes -sha256 -days "$days" \
    -subj "/CN=troupe cluster CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" \
    2>/dev/null
elif [ ! -s "$dir/ca.pem" ]; then
  echo "*** make-certs: $dir/ca.key but no ca.pem: copy the CA's certificate" \
    "there (a new CA would not know the cluster's certificates)" >&2
  exit 2
fi
for name in "${names[@]}"; do
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || {
    echo "*** make-certs: bad NAME '$name' (letters, digits, . _ -)" >&2
    exit 2
  }
  [ -s "$dir/$name.pem" ] && [ -s "$dir/$name.key" ] && continue
  [ -s "$dir/ca.key" ] || {
    echo "*** make-certs: $dir has ca.pem but not ca.key, which signs" \
      "$name.pem: make it where the CA's key is, and copy $name.pem and" \
      "$name.key here" >&2
    exit 2
  }
  openssl req "${key[@]}" -nodes -sha256 -subj "/CN=troupe $name" \
    -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" \
    -CAkey "$dir/ca.key" -CAcreateserial -days "$days" -sha256 \
    -out "$dir/$name.pem" 2>/dev/null
  rm -f "$dir/$name.csr"
done
chmod 0644 "$dir"/*.pem
abs=$(cd "$dir" && pwd)
# One a line: a folder whose path holds a space stays one flag.
printf '%s\n' "--openssl.certificate=$abs/${names[0]}.pem" \
  "--openssl.key=$abs/${names[0]}.key" "--openssl.cafile=$abs/ca.pem"

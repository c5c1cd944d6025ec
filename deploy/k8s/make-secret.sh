#!/usr/bin/env bash
# Prints the Secret troupe-certs (deploy/k8s/troupe.yaml mounts it) made
# of the certificates deploy/make-certs.sh wrote to DIR: node.pem,
# node.key and ca.pem.
#
# usage: deploy/k8s/make-secret.sh DIR | kubectl apply -f -
set -euo pipefail
dir=${1:?usage: make-secret.sh CERTS_DIR}
for f in node.pem node.key ca.pem; do
  [ -r "$dir/$f" ] || {
    echo "*** make-secret: no $dir/$f: run deploy/make-certs.sh $dir first" >&2
    exit 2
  }
done
cat <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: troupe-certs
  labels: {app: troupe}
type: Opaque
data:
  node.pem: $(base64 -w0 "$dir/node.pem")
  node.key: $(base64 -w0 "$dir/node.key")
  ca.pem: $(base64 -w0 "$dir/ca.pem")
YAML

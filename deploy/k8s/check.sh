#!/usr/bin/env bash
# Checks deploy/k8s/ offline: kubectl's client-side dry run
# (kubectl create --dry-run=client) parses every manifest and maps each
# object to its kind. kubectl asks an API server which kinds exist before
# it does; api_discovery.py answers that discovery, with nothing
# else, on loopback. No cluster is contacted and no object is made. It does not
# check fields against the API's schema (--validate=false: the schema
# comes from a real server).
#
# usage: deploy/k8s/check.sh [CERTS_DIR [MANIFEST]]
#   CERTS_DIR: the Secret's certificates (default: fresh ones)
#   MANIFEST:  the file to check (default: deploy/k8s/troupe.yaml)
# Prints each object as kubectl names it; exits non-zero if one is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v kubectl >/dev/null || {
  echo "*** check: no kubectl (deploy/install-deps.sh --k8s)" >&2
  exit 2
}
work=$(mktemp -d)
discovery=
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
  [ -n "$discovery" ] && kill "$discovery" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
certs=${1:-}
manifest=${2:-$here/troupe.yaml}
if [ -z "$certs" ]; then
  certs=$work/certs
  "$here/../make-certs.sh" "$certs" >/dev/null
fi
"$here/make-secret.sh" "$certs" >"$work/secret.yaml"
python3 "$here/api_discovery.py" "$work/port" &
discovery=$!
for _ in $(seq 50); do
  [ -s "$work/port" ] && break
  sleep 0.1
done
[ -s "$work/port" ] || { echo "*** check: the discovery server did not start" >&2; exit 1; }
cat >"$work/kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
- {name: offline, cluster: {server: "http://127.0.0.1:$(cat "$work/port")"}}
users:
- {name: offline, user: {token: none}}
contexts:
- {name: offline, context: {cluster: offline, user: offline}}
current-context: offline
YAML
names=$(KUBECONFIG=$work/kubeconfig kubectl create --dry-run=client \
  --validate=false -o name -f "$manifest" -f "$work/secret.yaml")
echo "$names"
for want in configmap/troupe-config service/troupe-scheduler \
  deployment.apps/troupe-scheduler service/troupe-agents \
  statefulset.apps/troupe-agent secret/troupe-certs; do
  grep -qx "$want" <<<"$names" || {
    echo "*** check: $want is missing" >&2
    exit 1
  }
done
echo "deploy/k8s: every manifest passes kubectl's client-side dry run"

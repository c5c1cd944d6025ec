#!/usr/bin/env bash
# deploy/k8s/ against kubectl's client-side dry run (deploy/k8s/check.sh,
# offline: api_discovery.py answers kubectl's discovery): the manifests and the
# Secret of the test certificates pass, and a misspelt kind or broken YAML
# fails. Exits 77 (CTest: skipped), saying why, without kubectl
# (deploy/install-deps.sh --k8s installs Debian's kubernetes-client).
#
# usage: k8s_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1 build=$2
command -v kubectl >/dev/null ||
  { echo "SKIPPED: no kubectl (deploy/install-deps.sh --k8s)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIPPED: no python3"; exit 77; }
echo "kubectl: $(kubectl version --client 2>/dev/null | head -n 1)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
out=$("$src/deploy/k8s/check.sh" "$build/test-certs" 2>&1) ||
  fail "the manifests do not pass: $out"
echo "$out"
grep -q "statefulset.apps/troupe-agent" <<<"$out" || fail "no StatefulSet"
# The Secret carries the test certificates, whole.
"$src/deploy/k8s/make-secret.sh" "$build/test-certs" >"$work/secret.yaml" ||
  fail "make-secret.sh"
want=$(base64 -w0 "$build/test-certs/ca.pem")
grep -q "ca.pem: $want" "$work/secret.yaml" || fail "the Secret's ca.pem differs"
"$src/deploy/k8s/make-secret.sh" "$work/none" >/dev/null 2>"$work/err" &&
  fail "make-secret.sh took a folder without certificates"
grep -q "run deploy/make-certs.sh" "$work/err" || fail "no hint: $(cat "$work/err")"
# A misspelt kind and broken YAML are refused.
sed 's/^kind: StatefulSet/kind: StatefullSet/' "$src/deploy/k8s/troupe.yaml" \
  >"$work/kind.yaml"
"$src/deploy/k8s/check.sh" "$build/test-certs" "$work/kind.yaml" \
  >"$work/out" 2>&1 && fail "a misspelt kind passed: $(cat "$work/out")"
grep -qi "StatefullSet" "$work/out" || fail "the error names no kind: $(cat "$work/out")"
sed 's/^  replicas: 3/ replicas: 3/' "$src/deploy/k8s/troupe.yaml" >"$work/yaml.yaml"
"$src/deploy/k8s/check.sh" "$build/test-certs" "$work/yaml.yaml" \
  >"$work/out" 2>&1 && fail "broken YAML passed: $(cat "$work/out")"
echo "PASSED"

#!/usr/bin/env bash
# Installs every Debian package troupe needs to build, test and run.
# usage: deploy/install-deps.sh [--slurm] [--k8s] (as root; idempotent, quiet)
#   --slurm  also Slurm and munge (deploy/slurm/, tests/deploy/slurm_test.sh)
#   --k8s    also kubectl, Debian's kubernetes-client (deploy/k8s/check.sh)
set -euo pipefail

packages=(
  build-essential cmake pkg-config git ca-certificates
  libcaf-dev                 # CAF 0.17.6: actors, middleman, openssl
  libssl-dev openssl         # HMAC on roads; certificates (deploy/make-certs.sh)
  libcapnp-dev capnproto     # Cap'n Proto 0.9.2: messages
  libboost-test-dev          # Boost.Test 1.74: tests
  clang-16 libfuzzer-16-dev libclang-rt-16-dev # fuzzing (fuzz/run.sh)
  libopenblas-dev            # CPU math
  prometheus-cpp-dev         # metrics
  nlohmann-json3-dev         # JSON: events.jsonl read back (fault_timeline)
  libzip-dev                 # troupe-export's .npz
  python3-numpy              # tests: numpy reads troupe-export's .npz
  zlib1g-dev                 # gzipped IDX files
  dataset-fashion-mnist      # training data
  iproute2 procps            # ip (network cuts), ss, kill, pgrep
  util-linux                 # unshare (the demo with a network cut)
  openssh-client             # deploy/cluster.sh
  openssh-server             # tests: deploy/cluster.sh across netns hosts
  libcivetweb-dev            # the scheduler's status page
  chromium                   # tests: the status page in a headless browser
)

for option in "$@"; do
  case $option in
  --slurm) packages+=(slurm-wlm munge) ;;
  --k8s) command -v kubectl >/dev/null || packages+=(kubernetes-client) ;;
  *)
    echo "install-deps: unknown option '$option' (--slurm, --k8s, or none)" >&2
    exit 2
    ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing ${missing[*]}; run as root" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"

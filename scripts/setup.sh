#!/usr/bin/env bash
# Installs every Debian package ferry needs to build, test and benchmark, on a
# fresh machine that has only the toolchain. Idempotent: installs only what is
# missing. Needs root (or sudo).
set -euo pipefail

packages=(
  cmake ninja-build g++            # build
  ccache                           # repeated builds of the same sources (the sanitizer trees, CI after a local run)
  libssl-dev                       # HMAC-SHA256 for the handshake (libcrypto)
  libcli11-dev nlohmann-json3-dev  # the ferry CLI
  libhiredis-dev libcurl4-openssl-dev  # the directory's clients: Redis (hiredis), etcd's JSON gateway (libcurl)
  redis-server etcd-server etcd-client # directory tests start real servers (etcdctl for poking at one by hand)
  libgtest-dev                     # tests
  clang libclang-rt-dev            # fuzzing: libFuzzer and the sanitizers (scripts/fuzz.sh); lock annotations checked (scripts/thread_safety.sh)
  iperf3 sockperf                  # anchors the benchmarks compare against
  iproute2 procps                  # ip/tc for network labs, ps/pgrep for scripts
  python3-dev pybind11-dev         # the Python module
  python3-setuptools python3-wheel python3-pip python3-venv  # pip install . (offline) and its test
  python3-numpy python3-pytest python3-torch         # Python API tests (CPU tensors)
  python3-pandas python3-matplotlib                  # ferry.analysis plots
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"

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
  prometheus                       # the metrics endpoint's test scrapes it with a real server
  libgtest-dev                     # tests
  clang libclang-rt-dev            # CI builds with clang: lock annotations checked, the sanitizers, libFuzzer
  iperf3 sockperf                  # anchors the benchmarks compare against
  iproute2 procps                  # ip/tc for network labs, ps/pgrep for scripts
  python3-dev pybind11-dev         # the Python module
  python3-setuptools python3-wheel python3-pip python3-venv  # pip install . (offline) and its test
  python3-numpy python3-pytest python3-torch         # Python API tests (CPU tensors)
  python3-pandas python3-matplotlib                  # ferry.analysis plots
  meson pkg-config                 # NIXL, built from its offline kit for the FERRY plugin (below)
)

# NIXL is in no package registry: its offline kit (sources and
# build-nixl.sh) lives beside the checkout, in shared/third_party/nixl, or
# where FERRY_NIXL_KIT says. It installs into .deps/nixl, where the build
# finds it (plugins/nixl); a second run returns at once.
root=$(cd "$(dirname "$0")/.." && pwd)
nixl_kit=${FERRY_NIXL_KIT:-$root/../shared/third_party/nixl}
nixl_prefix=$root/.deps/nixl
build_nixl() {
  if [ ! -x "$nixl_kit/build-nixl.sh" ]; then
    echo "setup: no NIXL kit at $nixl_kit; the FERRY NIXL plugin will not be built"
    return 0
  fi
  mkdir -p "$root/.deps"
  "$nixl_kit/build-nixl.sh" "$nixl_prefix"
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  build_nixl
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
build_nixl

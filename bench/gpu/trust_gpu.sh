#!/usr/bin/env bash
# The promises a peer cannot break, on a GPU host (one GPU is enough: both
# processes use GPU 0). NIXL travels built in .deps/nixl (carry .deps).
#   1. NIXL notifications with both agents' pools in VRAM: 200 rounds of
#      vLLM's two-way metadata handshake, over TCP and over the local
#      transport (ferry_nixl_race_tests, FERRY_NIXL_RACE_VRAM=1);
#   2. the impersonation test: a local peer naming another engine's id is
#      refused at the handshake;
#   3. the local transport's GPU test and the NIXL plugin's tests;
#   4. the hostile-time unit tests on this host's cores.
# A table last.
#
#   bash bench/gpu/trust_gpu.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-/tmp/ferry-trust}}
mkdir -p "$out"
source bench/gpu/configure.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=$PWD/.deps/nixl/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
t0=$(date +%s)
gpu_configure "$out/cmake.log" -DFERRY_NIXL_PREFIX="$PWD/.deps/nixl" || exit 1
if ! ninja -C build-gpu plugin_FERRY nixl_agent_peer ferry_nixl_race_tests ferry_nixl_plugin_tests \
    ferry_local_gpu_impersonation_test ferry_local_gpu_test ferry_unit_tests >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
export NIXL_PLUGIN_DIR=$PWD/build-gpu/lib/nixl_plugins
summary=()
run() {  # name, limit, command...
  local name=$1 limit=$2 rc
  shift 2
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  local extra
  extra=$(grep -hE "rounds without a lost note|PASSED|FAILED|refused at the handshake" "$out/$name.log" | tail -2 | tr '\n' ' ')
  summary+=("$(printf '%-30s %-8s %s' "$name" "$([[ $rc == 0 ]] && echo passed || echo "rc $rc")" "$extra")")
}
for t in tcp local; do
  run "nixl_race_vram_$t" 400 env FERRY_TRANSPORT=$t FERRY_NIXL_RACE_VRAM=1 FERRY_NIXL_ROUNDS=200 \
    build-gpu/bin/ferry_nixl_race_tests
done
run local_gpu_impersonation 120 build-gpu/bin/ferry_local_gpu_impersonation_test
run local_gpu_test 300 build-gpu/bin/ferry_local_gpu_test
for t in tcp local; do
  run "nixl_plugin_$t" 300 env FERRY_TRANSPORT=$t build-gpu/bin/ferry_nixl_plugin_tests
done
run hostile_time 200 build-gpu/bin/ferry_unit_tests --gtest_filter='TcpHostileTime.*:TcpHostileLimits.*:LocalTrust.*'
echo
printf '%s\n' "${summary[@]}"

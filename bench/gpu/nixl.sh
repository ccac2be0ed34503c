#!/usr/bin/env bash
# The FERRY NIXL plugin on a GPU host. NIXL itself travels built, in .deps/nixl
# (scripts/setup.sh builds it on the build machine; carry .deps). Builds the
# plugin, its tests and ferry_nixl_bench against it (build-gpu), runs the
# plugin's tests (host memory between two processes, VRAM between GPUs 0 and
# 1, and one agent's own host memory and VRAM on GPU 0, each over the local
# transport and TCP), then the benchmark: host
# memory over loopback TCP, and GPU 0 -> GPU 1 over the local transport and
# TCP, each against ferry's own API in the same run. A table last.
#
#   bench/gpu/nixl.sh [OUT]
set -uo pipefail
out=${1:-${OUT:-/tmp/ferry-nixl}}
mkdir -p "$out"
source "$(dirname "$0")/configure.sh"
nvidia-smi --query-gpu=index,name --format=csv,noheader
# NIXL's libraries name the build machine's path as their RUNPATH.
export LD_LIBRARY_PATH=$PWD/.deps/nixl/lib:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
gpu_configure "$out/cmake.log" -DFERRY_NIXL_PREFIX="$PWD/.deps/nixl" || exit 1
if ! ninja -C build-gpu plugin_FERRY ferry_nixl_unit_tests ferry_nixl_plugin_tests ferry_nixl_gpu_tests \
    ferry_nixl_local_tests ferry_nixl_bench nixl_agent_peer ferry_block_gpu_tests >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"

# NIXL's Python bindings are built for the build machine's interpreter; the
# Python test runs there (CI).
ctest --test-dir build-gpu -R "Nixl|AgentNote|MemoryMetadata|BackendParams|GpuBlocks" --output-on-failure --timeout 300 >"$out/ctest.log" 2>&1
ctest_rc=$?
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Skipped|Not Run" "$out/ctest.log" | head -20

export NIXL_PLUGIN_DIR=$PWD/build-gpu/lib/nixl_plugins
rows=()
run() {  # LABEL ENV... -- ARGS...
  local label=$1 env=()
  shift
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  env "${env[@]}" timeout 300 build-gpu/bin/ferry_nixl_bench "$@" >"$out/bench-$label.log" 2>&1
  local rc=$?
  while read -r line; do rows+=("$label rc=$rc $line"); done < <(grep -E "^(64MiB|16KiB)" "$out/bench-$label.log")
}
# Every path on both connections: the adaptive policy settles each
# connection's path count on its own, which would compare unlike things.
# Host memory three times: runs of a few hundred microseconds vary by some
# percent from run to run.
for i in 1 2 3; do
  run host-tcp-$i FERRY_TRANSPORT=tcp FERRY_PATH_POLICY=all -- --memory host --rounds 31
done
run host-tcp-pause20 FERRY_TRANSPORT=tcp FERRY_PATH_POLICY=all -- --memory host --rounds 31 --poll-pause-us 20
run gpu-local FERRY_TRANSPORT=local -- --memory gpu --rounds 31
run gpu-tcp FERRY_TRANSPORT=tcp FERRY_PATH_POLICY=all -- --memory gpu --rounds 31

echo "== summary (ctest rc=$ctest_rc)"
printf '%-18s %-4s %-12s %12s %12s %12s %12s %8s\n' run rc shape "ferry GB/s" "nixl GB/s" "ferry us" "nixl us" ratio
for r in "${rows[@]}"; do printf '%s\n' "$r"; done
exit $ctest_rc

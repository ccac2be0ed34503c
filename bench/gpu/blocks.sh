#!/usr/bin/env bash
# A KV cache's block writes on a GPU host: builds build-gpu, runs the GPU
# block tests and the GPU regression tests the batched paths touch, then
# `ferry bench --blocks` GPU->GPU over TCP and the local transport, each
# against one contiguous write of the same bytes in the same session.
#
#   bench/gpu/blocks.sh [OUT]
set -uo pipefail
out=${1:-${OUT:-/tmp/ferry-blocks}}
mkdir -p "$out"
source "$(dirname "$0")/configure.sh"
nvidia-smi --query-gpu=index,name --format=csv,noheader
t0=$(date +%s)
gpu_configure "$out/cmake.log" || exit 1
if ! ninja -C build-gpu ferry_block_gpu_tests ferry_tcp_gpu_tests ferry_tcp_gpu_peer ferry_local_multi_gpu_test \
    ferry_cli >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"

timeout 300 build-gpu/bin/ferry_block_gpu_tests >"$out/block_gpu.log" 2>&1
block_rc=$?
grep -E "OK \]|FAILED|Failure|differs" "$out/block_gpu.log" | head -20
FERRY_TRANSPORT=tcp timeout 400 build-gpu/bin/ferry_tcp_gpu_tests --gtest_filter='-*OneGiB*' >"$out/tcp_gpu.log" 2>&1
tcp_rc=$?
tail -3 "$out/tcp_gpu.log"
timeout 200 build-gpu/bin/ferry_local_multi_gpu_test >"$out/multi_local.log" 2>&1
multi_rc=$?
tail -2 "$out/multi_local.log"

peer=$(( $(nvidia-smi -L | wc -l) > 1 ? 1 : 0 ))
rows=()
for transport in tcp local; do
  for nb in "256 16K" "1024 4K"; do
    set -- $nb
    for layout in --scatter ""; do
      line=$(FERRY_TRANSPORT=$transport timeout 120 build-gpu/bin/ferry bench --local --gpus 0 --peer-gpus $peer \
        --blocks "$1" --block-size "$2" $layout --iters 100 --warmup 10 --verify 2>>"$out/bench.err" | tail -1)
      rows+=("$transport  $line")
    done
  done
done
echo
echo "== results ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$(nvidia-smi -L | wc -l))"
echo "block gpu tests rc=$block_rc  tcp gpu tests rc=$tcp_rc  local multi-GPU rc=$multi_rc"
echo "transport  blocks  GB/s  p50_us  contig_GB/s  contig_p50_us  ratio  verify"
printf '%s\n' "${rows[@]}"
bad=$(printf '%s\n' "${rows[@]}" | grep -c -v " ok$")
[ "$block_rc$tcp_rc$multi_rc" = 000 ] && [ "$bad" = 0 ] || { echo "FAILED: a test failed or a row did not verify"; exit 1; }

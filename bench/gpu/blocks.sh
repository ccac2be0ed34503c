#!/usr/bin/env bash
# A KV cache's block writes on a GPU host: builds build-gpu, runs the GPU
# block tests and the GPU regression tests the batched paths touch, then
# `ferry bench --blocks` GPU->GPU over TCP and the local transport, each
# against one contiguous write of the same bytes in the same session; then
# the same shapes in one process as anchors (bench/gpu/nccl_blocks.cu: one
# contiguous copy, a copy a block, one gather kernel, NCCL's grouped
# send/recv when python3's nvidia.nccl is installed). On a host with one
# GPU everything runs GPU 0 to GPU 0 without NCCL: a stand-in that judges no
# target.
#
#   bench/gpu/blocks.sh [OUT]
#   TESTS=0       skip the tests (rows and anchors only)
#   TRANSPORTS=.. the transports of the ferry rows (default "tcp local")
set -uo pipefail
out=${1:-${OUT:-/tmp/ferry-blocks}}
mkdir -p "$out"
source "$(dirname "$0")/configure.sh"
nvidia-smi --query-gpu=index,name --format=csv,noheader
t0=$(date +%s)
gpu_configure "$out/cmake.log" || exit 1
if ! ninja -C build-gpu ferry_block_gpu_tests ferry_tcp_gpu_tests ferry_tcp_gpu_peer ferry_local_multi_gpu_test \
    ferry_local_gpu_test ferry_cli >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"

block_rc=0 tcp_rc=0 multi_rc=0 local_rc=0
if [ "${TESTS:-1}" != 0 ]; then
  timeout 300 build-gpu/bin/ferry_block_gpu_tests >"$out/block_gpu.log" 2>&1
  block_rc=$?
  grep -E "OK \]|FAILED|Failure|differs" "$out/block_gpu.log" | head -20
  FERRY_TRANSPORT=tcp timeout 400 build-gpu/bin/ferry_tcp_gpu_tests --gtest_filter='-*OneGiB*' >"$out/tcp_gpu.log" 2>&1
  tcp_rc=$?
  tail -3 "$out/tcp_gpu.log"
  timeout 200 build-gpu/bin/ferry_local_multi_gpu_test >"$out/multi_local.log" 2>&1
  multi_rc=$?
  [ "$multi_rc" = 77 ] && multi_rc=skipped  # it needs two GPUs
  tail -2 "$out/multi_local.log"
  timeout 300 build-gpu/bin/ferry_local_gpu_test >"$out/local_gpu.log" 2>&1
  local_rc=$?
  grep -E "FAIL|block write" "$out/local_gpu.log" | head -10
  tail -1 "$out/local_gpu.log"
fi

peer=$(( $(nvidia-smi -L | wc -l) > 1 ? 1 : 0 ))
rows=()
for transport in ${TRANSPORTS:-tcp local}; do
  for nb in "256 16K" "1024 4K"; do
    set -- $nb
    for layout in --scatter ""; do
      line=$(FERRY_TRANSPORT=$transport timeout 120 build-gpu/bin/ferry bench --local --gpus 0 --peer-gpus $peer \
        --blocks "$1" --block-size "$2" $layout --iters 100 --warmup 10 --verify 2>>"$out/bench.err" | tail -1)
      rows+=("$transport  $line")
    done
  done
done

# Anchors, one process on GPUs 0 and 1 (0 and 0 on a host with one GPU): nccl_blocks prints
# "METHOD BLOCKS BLOCK_SIZE p50_us GB/s verify=ok"; NCCL is dlopened, so it
# builds without it and only its nccl_group row needs it.
anchors=()
ratios=()
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
NCCL_DIR=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null || true)
if [[ -n "$NCCL_DIR" && -e "$NCCL_DIR/lib/libnccl.so.2" ]]; then
  export FERRY_NCCL_LIBRARY="$NCCL_DIR/lib/libnccl.so.2"
elif [[ ! -e "${FERRY_NCCL_LIBRARY:-}" ]]; then
  unset FERRY_NCCL_LIBRARY
  anchors+=("nccl: not found")
fi
[ "$peer" = 1 ] || anchors+=("one GPU: both pools on GPU 0, no NCCL row; no target is judged by these")
if ! timeout 120 "$NVCC" -O2 -std=c++17 -arch=sm_90 bench/gpu/nccl_blocks.cu -o build-gpu/nccl_blocks -ldl \
    >"$out/nvcc_blocks.log" 2>&1; then
  anchors+=("nccl_blocks: nvcc failed (see $out/nvcc_blocks.log)")
else
  # BLOCKS, BLOCK_SIZE in bytes, and BLOCK_SIZE as the ferry rows above name it.
  for shape in "256 16384 16K" "1024 4096 4K"; do
    set -- $shape
    lines=$(NCCL_NVLS_ENABLE=0 timeout 300 build-gpu/nccl_blocks "$1" "$2" 100 2>>"$out/nccl_blocks.err")
    rc=$?
    [ -n "$lines" ] && while IFS= read -r l; do anchors+=("$l"); done <<<"$lines"
    [ "$rc" = 0 ] || anchors+=("nccl_blocks $1 $2: rc=$rc (see $out/nccl_blocks.err)")
    # The ferry rows read "local  256 x 16K scattered  GB/s  p50_us ...": p50 is field 7.
    ferry_p50=$(printf '%s\n' "${rows[@]}" | awk -v b="$1" -v s="$3" \
      '$1 == "local" && $2 == b && $3 == "x" && $4 == s && $5 == "scattered" { print $7; exit }')
    nccl_p50=$(awk '$1 == "nccl_group" { print $4; exit }' <<<"$lines")
    if [ -n "$ferry_p50" ] && [ -n "$nccl_p50" ]; then
      ratio=$(awk -v a="$nccl_p50" -v b="$ferry_p50" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
    else
      ratio=n/a
    fi
    [ -z "${FERRY_NCCL_LIBRARY:-}" ] || [ "$peer" = 0 ] || ratios+=("$1 x $3: nccl_group p50 ${nccl_p50:-?} us / ferry local scatter p50 ${ferry_p50:-?} us = $ratio")
  done
fi

# One block, posting to completion, local GPU->GPU: ferry's write against
# the copy engine's own peer copy of the same size (nccl_blocks' contiguous
# row), in three rounds that alternate which of the two goes first (the
# first timed run on a fresh machine reads slower, whichever it is). Each
# round's difference is listed; the verdict is their median.
latency=()
if [ -x build-gpu/nccl_blocks ]; then
  for size in 4K 64K 1M; do
    case $size in *K) bytes=$(( ${size%K} * 1024 )) ;; *M) bytes=$(( ${size%M} * 1048576 )) ;; esac
    ferry_p50() {
      FERRY_TRANSPORT=local timeout 120 build-gpu/bin/ferry bench --local --op write --sizes $size --gpus 0 \
        --peer-gpus $peer --iters 3000 --warmup 300 2>&1 >/dev/null | tee -a "$out/bench.err" |
        sed -n 's/.*\] write .*p50 \([0-9.]*\) us.*/\1/p' | tail -1
    }
    ce_p50() {
      FERRY_NCCL_LIBRARY= timeout 120 build-gpu/nccl_blocks 1 $bytes 3000 2>>"$out/nccl_blocks.err" |
        awk '$1 == "contiguous" { print $4; exit }'
    }
    rounds=() above=()
    for round in 1 2 3; do
      if [ $((round % 2)) = 1 ]; then f=$(ferry_p50); ce=$(ce_p50); else ce=$(ce_p50); f=$(ferry_p50); fi
      d=$(awk -v a="${f:-0}" -v b="${ce:-0}" 'BEGIN { printf "%.1f", a - b }')
      rounds+=("${f:-?}/${ce:-?}") above+=("$d")
    done
    median=$(printf '%s\n' "${above[@]}" | sort -g | sed -n 2p)
    latency+=("$size  ferry/copy engine p50 us: ${rounds[*]}  above: ${above[*]}  median above: $median us")
  done
fi

echo
echo "== results ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$(nvidia-smi -L | wc -l))"
if [ "${TESTS:-1}" != 0 ]; then
  echo "block gpu tests rc=$block_rc  tcp gpu tests rc=$tcp_rc  local multi-GPU rc=$multi_rc  local GPU rc=$local_rc"
else
  echo "tests skipped (TESTS=0)"
fi
echo "transport  blocks  GB/s  p50_us  contig_GB/s  contig_p50_us  ratio  verify"
printf '%s\n' "${rows[@]}"
echo
echo "== anchors (one process, 2 GPUs)"
echo "method  blocks  block_size  p50_us  GB/s  verify"
[ "${#anchors[@]}" = 0 ] || printf '%s\n' "${anchors[@]}"
if [ "${#ratios[@]}" -gt 0 ]; then
  echo "ferry local vs NCCL group (target >= 20):"
  printf '  %s\n' "${ratios[@]}"
fi
if [ "${#latency[@]}" -gt 0 ]; then
  echo "one block written, posting to completion (target: at most 2 us above the copy engine):"
  printf '  %s\n' "${latency[@]}"
fi
bad=$(printf '%s\n' "${rows[@]}" | grep -c -v " ok$")
[ "$block_rc$tcp_rc${multi_rc/skipped/0}$local_rc" = 0000 ] && [ "$bad" = 0 ] || { echo "FAILED: a test failed or a row did not verify"; exit 1; }

#!/usr/bin/env bash
# UCCL's own GPU tests and benchmarks, unchanged, against ferry.p2p on a GPU
# host: the GPU half of scripts/uccl_conformance.sh, which runs their CPU
# forms everywhere. `uccl.p2p` is ferry.p2p through tests/uccl_shim.
#   1. the seed's test_engine_nvlink.py under torchrun, two processes, both on
#      GPU 0 (the test puts both ranks' tensors on cuda:0);
#   2. benchmark_uccl.py (plain, --async-transfer, --num-kvblocks 4),
#      benchmark_uccl_dual.py and benchmark_uccl_read.py with --device gpu
#      under torchrun: their --local-gpu-idx is 0 on both ranks, so both on
#      GPU 0 too, and between the two processes ferry takes its local
#      transport (CUDA IPC);
#   3. the same benchmarks with FERRY_TRANSPORT=tcp (GPU memory staged
#      through host memory over loopback TCP).
# Builds the Python module for this host's python3 into build-gpu. Exits 77,
# saying why, when python3 has no torch or torch sees no GPU. Every log goes
# under OUT; a table last. Exit status 1 if anything failed.
#
#   bash bench/gpu/uccl.sh OUT
#
# ONLY, a regular expression, runs only the items whose name matches it (for
# a rerun of some).
# UCCL_P2P_SEED names the seed's upstream folder (default: the one
# scripts/uccl_conformance.sh uses, ../shared/third_party/uccl_p2p/seed-a1184318
# from the repository root).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
root=$PWD
out=${1:-${OUT:-/tmp/ferry-uccl-gpu}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
upstream=${UCCL_P2P_SEED:-$root/../shared/third_party/uccl_p2p/seed-a1184318}
ITEM_TIMEOUT=${UCCL_GPU_TIMEOUT:-300}
SIZES=256,4099,65536,1048576,10485760,104857600
ITERS=50

skip() {
  echo "uccl gpu: skipped: $*"
  exit 77
}
if [ ! -d "$upstream/tests" ] || [ ! -d "$upstream/benchmarks" ]; then
  skip "no UCCL upstream files at $upstream (set UCCL_P2P_SEED)"
fi
command -v python3 >/dev/null || skip "no python3 on PATH"
if ! python3 -c "import torch" >"$out/torch.log" 2>&1; then
  skip "$(python3 -V 2>&1) has no torch ($(tail -1 "$out/torch.log"))"
fi
gpus=$(python3 -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)" 2>/dev/null)
if [ "${gpus:-0}" -lt 1 ]; then
  skip "torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null) sees no GPU"
fi
if command -v torchrun >/dev/null; then
  torchrun=(torchrun)
else
  torchrun=(python3 -m torch.distributed.run)
fi
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null
echo "uccl gpu: $(python3 -V 2>&1), torch $(python3 -c 'import torch; print(torch.__version__)'), $gpus GPU(s);" \
  "every run puts both ranks on GPU 0"

source bench/gpu/configure.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
gpu_configure "$out/cmake.log" || exit 1
if ! ninja -C build-gpu _ferry >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$root/tests/uccl_shim:$root/build-gpu/python
export PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=4
if ! python3 -c "import ferry.p2p, uccl.p2p" >"$out/import.log" 2>&1; then
  echo "uccl gpu: cannot import ferry.p2p through the shim with python3 (PYTHONPATH=$PYTHONPATH):"
  cat "$out/import.log"
  exit 1
fi

rows=()
failed=0
log_name() { printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_'; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# NAME ENV... -- FILE ARGS...: two ranks under torchrun, from the file's folder.
run() {
  local name=$1 env=() file log rc note
  shift
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  file=$1
  shift
  if [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]]; then return; fi
  log="$out/$(log_name "$name").log"
  (cd "$(dirname "$file")" && env "${env[@]}" timeout "$ITEM_TIMEOUT" "${torchrun[@]}" --nnodes=1 --nproc_per_node=2 \
    --master_addr=127.0.0.1 --master_port="$(free_port)" "$file" "$@" >"$log" 2>&1)
  rc=$?
  # The client's line at the largest size: "[Client]  100 MB :  x Gbps |  y GB/s | t s".
  note=$(grep -E '^\[Client\] .* GB/s' "$log" | tail -1 | sed -E 's/^\[Client\] +//; s/ +/ /g')
  if [ $rc -eq 0 ]; then
    rows+=("$(printf '%-46s %-7s %s' "$name" passed "$note")")
  else
    rows+=("$(printf '%-46s %-7s %s' "$name" failed "exit $rc, see $log")")
    failed=1
  fi
  printf '%-46s rc=%s %s\n' "$name" "$rc" "$note"
}

tests=$upstream/tests
bench=$upstream/benchmarks
args=(--device gpu --sizes "$SIZES" --iters "$ITERS")
run test_engine_nvlink.py -- "$tests/test_engine_nvlink.py"
for transport in auto tcp; do
  with=("FERRY_TRANSPORT=$transport")
  run "benchmark_uccl.py --device gpu [$transport]" "${with[@]}" -- "$bench/benchmark_uccl.py" "${args[@]}"
  run "benchmark_uccl.py --async-transfer [$transport]" "${with[@]}" -- "$bench/benchmark_uccl.py" "${args[@]}" \
    --async-transfer
  run "benchmark_uccl.py --num-kvblocks 4 [$transport]" "${with[@]}" -- "$bench/benchmark_uccl.py" "${args[@]}" \
    --num-kvblocks 4
  run "benchmark_uccl_dual.py --device gpu [$transport]" "${with[@]}" -- "$bench/benchmark_uccl_dual.py" "${args[@]}"
  run "benchmark_uccl_read.py --device gpu [$transport]" "${with[@]}" -- "$bench/benchmark_uccl_read.py" "${args[@]}"
done

echo
echo "== UCCL's GPU tests and benchmarks on ferry.p2p, both ranks on GPU 0 (logs in $out)"
printf '%-46s %-7s %s\n' "test / benchmark [transport]" result "client at the largest size"
printf '%s\n' "${rows[@]}"
exit $failed

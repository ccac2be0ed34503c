#!/usr/bin/env bash
# ferry.mooncake and the seed's benchmark commands on a GPU host: builds the
# Python module (build-gpu), runs the facade's tests on CUDA and host memory,
# measures what the facade costs over ferry's own block write (SGLang's 256
# scattered 16 KiB blocks; host and GPU memory; local transport and TCP),
# then python/benchmarks' scripts on GPUs 0 and 1 under torchrun (ferry
# send/recv and one-sided read, NCCL through torch). A table last.
#
#   bench/gpu/mooncake.sh [OUT]       (SEED_BENCHMARKS=0 leaves out the torchrun runs)
set -uo pipefail
out=${1:-${OUT:-/tmp/ferry-mooncake}}
mkdir -p "$out"
source "$(dirname "$0")/configure.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=index,name --format=csv,noheader
t0=$(date +%s)
gpu_configure "$out/cmake.log" || exit 1
if ! ninja -C build-gpu _ferry ferry_cli >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$PWD/build-gpu/python

timeout 400 python3 -m pytest -q -p no:cacheprovider tests/python/test_mooncake_cuda.py tests/python/test_mooncake.py \
  >"$out/pytest.log" 2>&1
pytest_rc=$?
grep -E "passed|failed|FAILED|Error" "$out/pytest.log" | tail -15

peer=$(( $(nvidia-smi -L | wc -l) > 1 ? 1 : 0 ))
facade=()
for device in cpu gpu; do
  for transport in auto tcp; do
    line=$(FERRY_TRANSPORT=$transport timeout 200 python3 bench/mooncake_facade.py --device "$device" --gpu 0 \
      --peer-gpu "$peer" --rounds 20 --iters 50 2>>"$out/facade.err" | tail -1)
    facade+=("$line")
  done
done

bench=()
run_bench() {  # NAME ENV... -- SCRIPT FLAGS...
  local name=$1 env=()
  shift
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  env "${env[@]}" timeout 300 torchrun --nnodes=1 --nproc_per_node=2 --master_addr=127.0.0.1 --master_port=29511 \
    "$@" >"$out/$name.log" 2>&1
  local rc=$?
  bench+=("$name rc=$rc: $(grep -E '\] +(256\.0 MB|100\.0 MB|64\.0 MB) :' "$out/$name.log" | head -2 | tr -s ' ' | tr '\n' ';')")
}
if [ "${SEED_BENCHMARKS:-1}" = 1 ]; then
run_bench ferry_gpu FERRY_TRANSPORT=auto -- python/benchmarks/benchmark_ferry.py --device gpu --local-gpu-idx 0 --num-cpus 4
run_bench ferry_gpu_tcp FERRY_TRANSPORT=tcp -- python/benchmarks/benchmark_ferry.py --device gpu --local-gpu-idx 0 --num-cpus 8
run_bench ferry_read_gpu FERRY_TRANSPORT=auto -- python/benchmarks/benchmark_ferry_read.py --device gpu --local-gpu-idx 0 --num-cpus 4
run_bench ferry_dual_gpu FERRY_TRANSPORT=auto -- python/benchmarks/benchmark_ferry_dual.py --device gpu --local-gpu-idx 0 --num-cpus 4 --iters 100
run_bench nccl_gpu FERRY_TRANSPORT=auto -- python/benchmarks/benchmark_nccl.py --device gpu --local-gpu-idx 0
fi

echo "== tests: pytest rc=$pytest_rc ($(grep -oE '[0-9]+ passed[^=]*' "$out/pytest.log" | tail -1))"
echo "== facade cost (p50 per batch of 256 x 16 KiB; against ferry's write_blocks and writev)"
printf '%s\n' "${facade[@]}"
echo "== python/benchmarks under torchrun, GPUs 0 and $peer (largest sizes)"
printf '%s\n' "${bench[@]}"

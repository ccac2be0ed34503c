#!/usr/bin/env bash
# The GPU suite, repeated, on one host: one build, then one_gpu.sh's tests
# (PART=local REPEAT) as two instances at once where the host has two GPUs:
# one with both processes of every test on GPU 1 (CUDA_VISIBLE_DEVICES=1,
# what a one-GPU host runs) and one across GPU 0 and GPU 1. With one GPU, the
# one-GPU instance alone. The tests of a run start together (CONCURRENT=1,
# default here), so a run takes as long as its longest test.
#
#   SERIES=one   with two GPUs, two one-GPU instances instead (GPU 0 alone and
#                GPU 1 alone): twice the one-GPU runs in the same time.
#   SERIES=two   with two GPUs, two instances across GPU 0 and GPU 1 at once.
#   LATENCY=1    first, after the build, the posting latency of a 4 KiB CUDA
#                write with the stream order on and off, both transports
#                (stream_order_latency.py), into OUTDIR/latency_*.txt.
#
# Usage (repository root): REPEAT=20 BUDGET=480 bash bench/gpu/gpu_suite_repeat.sh OUTDIR
# Prints each instance's table last; logs under OUTDIR/one and OUTDIR/two.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-gpu/suite_repeat}
mkdir -p "$out"
PART=build bash bench/gpu/one_gpu.sh "$out/build" >"$out/build.txt" 2>&1 || { cat "$out/build.txt"; exit 1; }
# A GPU pytest run takes about 45 s: at 90 s a hung one has its stacks taken
# well inside a device call's limit.
export PART=local SKIP_BUILD=1 CONCURRENT=${CONCURRENT:-1} REPEAT=${REPEAT:-20} BUDGET=${BUDGET:-480}
export PYTEST_LIMIT=${PYTEST_LIMIT:-90}
if [[ ${LATENCY:-0} == 1 ]]; then
  for t in local tcp; do
    PYTHONPATH=build-gpu/python timeout 120 python3 bench/gpu/stream_order_latency.py --transport "$t" --iters 2000 \
      >"$out/latency_$t.txt" 2>&1
    echo "== posting latency, $t (rc $?)"
    tail -8 "$out/latency_$t.txt"
  done
fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if ((gpus >= 2)) && [[ ${SERIES:-} == one ]]; then
  CUDA_VISIBLE_DEVICES=0 bash bench/gpu/one_gpu.sh "$out/gpu0" >"$out/gpu0.txt" 2>"$out/gpu0.err" &
  CUDA_VISIBLE_DEVICES=1 bash bench/gpu/one_gpu.sh "$out/one" >"$out/one.txt" 2>"$out/one.err" &
  wait
  echo "== both processes of every test on GPU 0 (one GPU)"
  sed -n '/^runs:/,$p' "$out/gpu0.txt"
  echo "== both processes of every test on GPU 1 (one GPU)"
  sed -n '/^runs:/,$p' "$out/one.txt"
elif ((gpus >= 2)) && [[ ${SERIES:-} == two ]]; then
  bash bench/gpu/one_gpu.sh "$out/two" >"$out/two.txt" 2>"$out/two.err" &
  bash bench/gpu/one_gpu.sh "$out/two_b" >"$out/two_b.txt" 2>"$out/two_b.err" &
  wait
  for d in two two_b; do
    echo "== GPU 0 <-> GPU 1 (two GPUs), instance $d"
    sed -n '/^runs:/,$p' "$out/$d.txt"
  done
elif ((gpus >= 2)); then
  CUDA_VISIBLE_DEVICES=1 bash bench/gpu/one_gpu.sh "$out/one" >"$out/one.txt" 2>"$out/one.err" &
  bash bench/gpu/one_gpu.sh "$out/two" >"$out/two.txt" 2>"$out/two.err" &
  wait
  echo "== both processes of every test on GPU 1 (one GPU)"
  sed -n '/^runs:/,$p' "$out/one.txt"
  echo "== GPU 0 <-> GPU 1 (two GPUs)"
  sed -n '/^runs:/,$p' "$out/two.txt"
else
  bash bench/gpu/one_gpu.sh "$out/one" >"$out/one.txt" 2>"$out/one.err"
  echo "== one GPU"
  sed -n '/^runs:/,$p' "$out/one.txt"
fi

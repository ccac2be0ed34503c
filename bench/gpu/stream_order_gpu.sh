#!/usr/bin/env bash
# CUDA stream order on a one-GPU host, in one call: one_gpu.sh PART=local
# (build, the C++ GPU tests, the GPU pytest over both transports with the
# stream-order tests), the posting latency of a 4 KiB CUDA write with the
# order on and off (both transports), ferry.mooncake's *_on_cuda tests, then
# the stream-order tests again while time allows (at most REPEAT runs per
# transport; stops starting runs after BUDGET seconds).
#
# Usage (repository root): [REPEAT=19] [BUDGET=480] bash bench/gpu/stream_order_gpu.sh [OUTDIR]
# Prints a short table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-gpu/stream_order}
repeat=${REPEAT:-19}
budget=${BUDGET:-480}
mkdir -p "$out"
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }

PART=local bash bench/gpu/one_gpu.sh "$out/one_gpu" >"$out/one_gpu.txt" 2>"$out/one_gpu.err"
py=$(command -v python3)
export PYTHONPATH=build-gpu/python
rows=()
for t in local tcp; do
  timeout 120 "$py" bench/gpu/stream_order_latency.py --transport "$t" --iters 2000 >"$out/latency_$t.txt" 2>&1
  rows+=("latency $t: rc $?")
done
timeout 200 "$py" -m pytest -q -p no:cacheprovider tests/python/test_mooncake_cuda.py >"$out/mooncake_cuda.txt" 2>&1
rows+=("mooncake *_on_cuda pytest: rc $? ($(tail -1 "$out/mooncake_cuda.txt"))")
declare -A runs=([local]=0 [tcp]=0) green=([local]=0 [tcp]=0)
for ((i = 1; i <= repeat; i++)); do
  for t in local tcp; do
    (($(elapsed) > budget)) && break 2
    FERRY_TRANSPORT=$t timeout 120 "$py" -m pytest -q -x -s -p no:cacheprovider tests/python/test_gpu_stream_order.py \
      >"$out/repeat_${t}_$i.txt" 2>&1 && green[$t]=$((green[$t] + 1))
    runs[$t]=$((runs[$t] + 1))
  done
done

echo
echo "== CUDA stream order ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(elapsed) s)"
sed -n '/^== one GPU/,/^$/p' "$out/one_gpu.txt" | grep -v "^$"
grep -h "rounds wrong" "$out"/one_gpu/pytest_gpu_*.log 2>/dev/null | sed 's/^/  /'
printf '%s\n' "${rows[@]}"
for t in local tcp; do echo "stream-order tests again, $t: ${green[$t]} of ${runs[$t]} runs green"; done
grep -h "rounds wrong" "$out"/repeat_*.txt 2>/dev/null | sort | uniq -c | sed 's/^/  /'
cat "$out"/latency_*.txt

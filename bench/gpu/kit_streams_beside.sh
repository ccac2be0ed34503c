#!/usr/bin/env bash
# The copier tests of tests/gpu/gpu_kit_streams_test.cc and the Python
# stream-wait tests over both transports (tests/python/test_gpu_stream_order.py
# -k waits), alone on the GPU and beside another process whose stream waits
# on the host (aliased_stream_probe): with a second process on the GPU, copies queued in
# the application's context after a stream wait were held (every 8th), so
# this is the case that shows whether the copier keeps out of that context
# while a stream waits. Needs build-gpu/ (one_gpu.sh PART=build).
#
# Usage (repository root): RUNS=5 bash bench/gpu/kit_streams_beside.sh OUTDIR
# Prints one line a run, then the counts.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-gpu/kit_streams}
runs=${RUNS:-5}
mkdir -p "$out"
nvcc -O2 -std=c++17 bench/gpu/aliased_stream_probe.cu -o "$out/aliased_stream_probe" -lcuda || exit 1
filter='FerryContext.*:GpuKitStreams.*'
declare -A passed=([alone]=0 [beside]=0)
for mode in alone beside; do
  for ((i = 1; i <= runs; i++)); do
    probe=
    if [[ $mode == beside ]]; then
      (while true; do "$out/aliased_stream_probe" 40 400 >/dev/null 2>&1 || sleep 0.1; done) &
      probe=$!
      sleep 2
    fi
    log="$out/${mode}_$i.txt"
    timeout 120 build-gpu/bin/ferry_block_gpu_tests --gtest_filter="$filter" >"$log" 2>&1
    rc=$?
    for t in local tcp; do
      timeout 120 env $([[ $t == tcp ]] && echo FERRY_TRANSPORT=tcp) PYTHONPATH=build-gpu/python python3 -m pytest -q -x -p no:cacheprovider \
        tests/python/test_gpu_stream_order.py -k waits >"$out/${mode}_${i}_$t.txt" 2>&1
      r=$?
      ((r != 0)) && rc=$r
      echo "  pytest $t: rc $r $(tail -1 "$out/${mode}_${i}_$t.txt")"
    done
    if [[ -n $probe ]]; then
      kill "$probe" 2>/dev/null
      pkill -f aliased_stream_probe 2>/dev/null
      wait "$probe" 2>/dev/null
    fi
    ((rc == 0)) && passed[$mode]=$((passed[$mode] + 1))
    echo "$mode run $i: rc $rc; $(grep -h 'took\|kit streams whose' "$log" | tr '\n' ' ')$(grep -h 'FAILED  \]' "$log" | head -3 | tr '\n' ' ')"
  done
done
echo "passed alone ${passed[alone]} of $runs, beside another process ${passed[beside]} of $runs"

#!/usr/bin/env bash
# The stream-wait tests of tests/python/test_gpu_stream_order.py over TCP,
# again and again on one GPU (both processes of a test on it), LOOPS of them
# at once, for BUDGET seconds after the build: a run still going after LIMIT
# seconds has every thread's stack of each of its processes written to its
# log, with the GPU's state, before it is killed.
#
# TESTS="" runs the whole module instead (a pytest -k expression otherwise);
# FERRY_WORKERS and other FERRY_ settings pass through; NOSTACKS=1 kills a
# hung run without taking its stacks; SKIP_BUILD=1 uses build-gpu as it is.
#
# Usage (repository root): [LOOPS=2] [BUDGET=300] [LIMIT=45] [TESTS=...] bash bench/gpu/stream_wait_soak.sh OUTDIR
# Prints how many runs passed, failed and hung last.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-gpu/stream_wait_soak}
mkdir -p "$out"
if [[ -z ${SKIP_BUILD:-} ]]; then
  PART=build bash bench/gpu/one_gpu.sh "$out/build" >"$out/build.txt" 2>&1 || { tail -20 "$out/build.txt"; exit 1; }
fi
py=$(command -v python3)
gdb=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
[[ -n ${NOSTACKS:-} ]] && gdb=""
budget=${BUDGET:-300} limit=${LIMIT:-45} loops=${LOOPS:-2}
tests=${TESTS-"transfers_follow_the_work or stream_waits_on_the_gpu or new_engine_whose_first or revoking_its_memory"}
select=()
[[ -n $tests ]] && select=(-k "$tests")
start=$(date +%s)

loop() {  # n: runs until the budget is spent; a line per run in $out/loop_n.txt
  local n=$1 i=0 rc pid waited
  while (($(date +%s) - start < budget)); do
    i=$((i + 1))
    local log="$out/l${n}_r$i.log"
    setsid env FERRY_TRANSPORT=tcp PYTHONPATH=build-gpu/python "$py" -m pytest -q -x -s -p no:cacheprovider \
      tests/python/test_gpu_stream_order.py "${select[@]}" >"$log" 2>&1 &
    pid=$! waited=0
    while kill -0 "$pid" 2>/dev/null && ((waited < limit)); do sleep 1; waited=$((waited + 1)); done
    if kill -0 "$pid" 2>/dev/null; then
      {
        nvidia-smi
        for p in $(pgrep -s "$pid"); do
          echo "=== stacks of $p: $(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-160)"
          [[ -n $gdb ]] && timeout 60 "$gdb" -p "$p" -batch -ex "thread apply all bt 40" 2>&1 |
            grep -E "^(Thread|#)" | grep -vE "^#[0-9]+ +0x[0-9a-f]+ in \?\? \(\) from /lib" | head -800
        done
      } >>"$log" 2>&1
      kill -9 -- "-$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      echo "run $i hung" >>"$out/loop_$n.txt"
    else
      wait "$pid"
      rc=$?
      echo "run $i rc $rc" >>"$out/loop_$n.txt"
    fi
  done
}

for ((n = 1; n <= loops; n++)); do loop "$n" & done
wait
echo "== stream-wait tests over TCP, one GPU, $loops at once, ${budget}s"
cat "$out"/loop_*.txt | awk '{k = ($3 == "hung") ? "hung" : ($4 == 0 ? "passed" : "failed rc " $4); c[k]++}
  END {for (k in c) print k ": " c[k]}'

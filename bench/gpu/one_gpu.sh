#!/usr/bin/env bash
# What a host with a single GPU can check, for when no two-GPU host is at
# hand. Both processes of every test use GPU 0, so CUDA IPC and the TCP
# staging pipeline run for real, but nothing crosses NVLink and NCCL cannot
# pair two ranks on one device: the NVLink and NCCL targets need
# bench/gpu/local.sh and bench/gpu/tcp_gpu.sh on two GPUs.
#
#   PART=local  builds, then the local transport's GPU tests: the two-process
#               C++ test, the impersonation test (a peer naming another
#               peer's engine id), the integration suite over the local transport and
#               the GPU pytest (local, then FERRY_TRANSPORT=tcp);
#   PART=tcp    bench/gpu/tcp_gpu.sh: the GPU-over-TCP tests (kernel and copy
#               engine staging) and GPU 0 -> GPU 0 staged over loopback TCP
#               against host -> host and parallel iperf3 (STREAMS, INFLIGHTS);
#   PART=sanitize  compute-sanitizer's memcheck and racecheck over the
#               GPU-over-TCP tests (both processes; the 1 GiB and the killed-
#               peer cases left out, as they take minutes under the tool) and
#               memcheck over the local transport's GPU test. The driver's
#               answers to the engine's pointer probes (cuPointerGetAttribute
#               on host memory says "invalid value" by design) are not counted;
#   PART=all    local and tcp (the default; sanitize only when asked).
#   PART=build  the build alone (for instances started after it with SKIP_BUILD=1).
#   REPEAT=N    PART=local: the tests N times after the one build, and with
#               them the other GPU test binaries (GPU over TCP, blocks, the
#               two-GPU local test, which skips on one); stops starting runs
#               once BUDGET seconds, default 540, have passed, with a line per
#               test saying whether it passed in each run. A test
#               still running at its limit has every thread's stack of its
#               processes written to its log (cuda-gdb) before it is killed.
#   PYTEST_LIMIT=S  the GPU pytest runs' limit (default 300 s; a run takes
#               about 45 s, so a repeat that wants the stacks of a hang sets less).
#   CONCURRENT=1  the tests of a run start together (each its own processes)
#               and the run ends when the last one does.
#   SKIP_BUILD=1  uses build-gpu as it is (bench/gpu/gpu_suite_repeat.sh runs
#               a one-GPU and a two-GPU instance at once after one build).
#   MPS=1       PART=tcp under an MPS daemon started for it (and stopped
#               after). Two processes' CUDA contexts on one GPU otherwise
#               take turns on it: GPU 0 -> GPU 0 over TCP then stops at a rate
#               of its own (13-14 GB/s on an H200 over 8 streams, and a
#               256 KiB message took 500 us), which says nothing of two GPUs.
#               Under MPS it moved 26-27 GB/s from 64 MiB, as host memory
#               did (docs/benchmarks/2026-11-28.md, fourth night). MPS adds about
#               10 us to a small staged message, so small-message latency is
#               measured without it (one side on the GPU: --peer-gpus host).
#
# Usage (repository root): [PART=local|tcp|all] bash bench/gpu/one_gpu.sh [OUTDIR]
# Prints a short table last; logs go to OUTDIR (default build-gpu/one_gpu).
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
part=${PART:-all}
out=${1:-build-gpu/one_gpu}
mkdir -p "$out"
start=$(date +%s)
say() { echo "[one_gpu $(($(date +%s) - start))s] $*" >&2; }
summary=()
results=()

{
  nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader
  lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L2|L3)"
} | tee "$out/host.txt" >&2

if [[ $part == local || $part == all || $part == sanitize || $part == build ]]; then
  py=$(command -v python3)
  # SKIP_BUILD=1: a second instance beside one that built (one configure at a time).
  if [[ ${SKIP_BUILD:-0} != 1 ]]; then
    extra=()
    # Headers this host may lack travel as Debian packages in .deps.
    if ! [ -e /usr/include/openssl/hmac.h ] && ls .deps/*.deb >/dev/null 2>&1; then
      mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
      extra+=(-DOPENSSL_INCLUDE_DIR=/tmp/deps/usr/include
        -DOPENSSL_CRYPTO_LIBRARY="$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so.3)")
      cp -r /tmp/deps/usr/include/x86_64-linux-gnu/openssl/* /tmp/deps/usr/include/openssl/ 2>/dev/null
    fi
    say "configure and build (build-gpu)"
    if ! timeout 150 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$py" \
        -Dpybind11_DIR="$($py -m pybind11 --cmakedir 2>/dev/null)" "${extra[@]}" >"$out/cmake.log" 2>&1; then
      tail -30 "$out/cmake.log"; exit 1
    fi
    if ! timeout 360 ninja -C build-gpu ferry_cli ferry_local_gpu_test ferry_local_gpu_impersonation_test \
        ferry_integration_tests ferry_test_peer ferry_tcp_gpu_tests ferry_tcp_gpu_peer ferry_block_gpu_tests \
        ferry_local_multi_gpu_test _ferry >"$out/build.log" 2>&1; then
      grep -E "error|Error" "$out/build.log" | head -30; exit 1
    fi
    say "built"
  fi
  # Every thread's stack of the processes of session `sid` (a test at its limit).
  dump_stacks() {
    local gdb
    gdb=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
    [[ -n $gdb ]] || { echo "(no cuda-gdb: no stacks)"; return; }
    for p in $(pgrep -s "$1"); do
      echo "=== stacks of $p: $(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-160)"
      timeout 90 "$gdb" -p "$p" -batch -ex "thread apply all bt 40" 2>&1 | grep -E "^(Thread|#)" | head -600
    done
  }
  run_test() {  # name, timeout, command...
    local name=$1 limit=$2 rc pid waited=0
    shift 2
    setsid "$@" >"$out/$name.log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null && ((waited < limit)); do sleep 1; waited=$((waited + 1)); done
    if kill -0 "$pid" 2>/dev/null; then
      say "$name: still running after ${limit}s: stacks, then killed"
      dump_stacks "$pid" >>"$out/$name.log" 2>&1
      kill -9 -- "-$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      rc=124
    else
      wait "$pid"
      rc=$?
    fi
    say "$name: rc $rc"
    tail -4 "$out/$name.log" | sed 's/^/  /' >&2
    echo "$rc" >"$out/$name.rc"
  }
  record() {  # name: its verdict into the summary (run_test wrote its exit status)
    local name=$1 rc
    rc=$(cat "$out/$name.rc" 2>/dev/null || echo missing)
    local verdict="FAILED (rc $rc)"
    [[ $rc == 0 ]] && verdict=passed
    [[ $rc == 77 ]] && verdict="skipped ($(grep -m1 -iE 'skip' "$out/$name.log" | cut -c1-60))"
    summary+=("$(printf '%-28s %s' "$name" "$verdict")")
    results+=("$name $rc")
  }
  check_test() {  # name, timeout, command...: run it (in the background when CONCURRENT=1)
    if [[ ${CONCURRENT:-0} == 1 ]]; then
      run_test "$@" &
    else
      run_test "$@"
    fi
    started+=("$1")
  }
  collect() {  # waits for the tests started, then records them in order
    wait
    local name
    for name in "${started[@]}"; do record "$name"; done
    started=()
  }
  started=()
  if [[ $part == sanitize ]]; then
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
    sanitize() {  # name, timeout, tool, command...
      local name=$1 limit=$2 tool=$3
      shift 3
      run_test "$name" "$limit" "$cs" --tool "$tool" --target-processes all --report-api-errors no \
        --error-exitcode 9 --print-limit 20 "$@"
      record "$name"
      grep -h "ERROR SUMMARY" "$out/$name.log" | sed 's/^/  /' >&2
    }
    sanitize memcheck_tcp_gpu 240 memcheck build-gpu/bin/ferry_tcp_gpu_tests --gtest_filter=-*OneGiB*:*Killed*
    sanitize racecheck_tcp_gpu 240 racecheck build-gpu/bin/ferry_tcp_gpu_tests --gtest_filter=-*OneGiB*:*Killed*
    sanitize memcheck_local_gpu 300 memcheck build-gpu/bin/ferry_local_gpu_test
  fi
fi

if [[ $part == local || $part == all ]]; then
  local_tests() {  # prefix
    check_test "${1}local_gpu_test" 300 build-gpu/bin/ferry_local_gpu_test
    check_test "${1}local_gpu_impersonation" 120 build-gpu/bin/ferry_local_gpu_impersonation_test
    check_test "${1}integration_local" 200 env FERRY_TRANSPORT=local build-gpu/bin/ferry_integration_tests
    check_test "${1}pytest_gpu_local" "${PYTEST_LIMIT:-300}" env PYTHONPATH=build-gpu/python "$py" -m pytest -q -x -s -p no:cacheprovider \
      tests/python/test_gpu.py tests/python/test_gpu_stream_order.py
    check_test "${1}pytest_gpu_tcp" "${PYTEST_LIMIT:-300}" env FERRY_TRANSPORT=tcp PYTHONPATH=build-gpu/python "$py" -m pytest -q -x -s \
      -p no:cacheprovider tests/python/test_gpu.py tests/python/test_gpu_stream_order.py
    if ((${REPEAT:-1} > 1)); then  # the rest of the GPU test binaries, when repeating
      check_test "${1}tcp_gpu_tests" 300 build-gpu/bin/ferry_tcp_gpu_tests
      check_test "${1}block_gpu_tests" 200 build-gpu/bin/ferry_block_gpu_tests
      check_test "${1}local_multi_gpu" 200 build-gpu/bin/ferry_local_multi_gpu_test
    fi
    collect
  }
  repeat=${REPEAT:-1}
  if ((repeat <= 1)); then
    local_tests ""
  else
    runs=0 green=0
    for ((i = 1; i <= repeat; i++)); do
      (($(date +%s) - start > ${BUDGET:-540})) && break
      results=()
      local_tests "r${i}_"
      runs=$((runs + 1))
      bad=$(printf '%s\n' "${results[@]}" | awk '$2 != 0 && $2 != 77' | wc -l)
      ((bad == 0)) && green=$((green + 1))
      say "run $i: $((${#results[@]} - bad)) of ${#results[@]} tests passed or skipped"
    done
    # One line per test: in how many runs it passed (or skipped with 77), and its exit statuses.
    lines=()
    for f in "$out"/r1_*.rc; do
      [[ -e $f ]] || continue
      base=$(basename "$f" .rc)
      base=${base#r1_}
      ok=0 codes=""
      for ((i = 1; i <= runs; i++)); do
        rc=$(cat "$out/r${i}_$base.rc" 2>/dev/null || echo -)
        [[ $rc == 0 || $rc == 77 ]] && ok=$((ok + 1))
        codes+="$rc "
      done
      lines+=("$(printf '%-26s %2d of %d  (exit: %s)' "$base" "$ok" "$runs" "$codes")")
    done
    summary=("runs: $runs, all tests passed (or skipped with 77) in $green" "${lines[@]}")
  fi
fi

if [[ $part == tcp || $part == all ]]; then
  say "bench/gpu/tcp_gpu.sh (STREAMS=${STREAMS:-4 8}, INFLIGHTS=${INFLIGHTS:-1 2})"
  mps=0
  if [[ ${MPS:-0} == 1 ]]; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/ferry-mps CUDA_MPS_LOG_DIRECTORY=/tmp/ferry-mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d; then mps=1; else say "MPS did not start: running without it"; fi
  fi
  SWEEP=0 STREAMS="${STREAMS:-4 8}" INFLIGHTS="${INFLIGHTS:-1 2}" timeout 560 bash bench/gpu/tcp_gpu.sh \
    >"$out/tcp_gpu.txt" 2>"$out/tcp_gpu.err"
  rc=$?
  summary+=("$(printf '%-28s rc %s' tcp_gpu.sh $rc)$([[ $mps == 1 ]] && echo ' (under MPS)')")
  if [[ $mps == 1 ]]; then
    echo quit | nvidia-cuda-mps-control
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
fi

echo
echo "== one GPU ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) CPUs)"
printf '%s\n' "${summary[@]}"
[[ -s $out/tcp_gpu.txt ]] && sed -n '/=== GPU memory over loopback TCP/,$p' "$out/tcp_gpu.txt"
exit 0

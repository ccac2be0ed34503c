#!/usr/bin/env bash
# The local transport on two GPUs, an earlier build against this one in one
# invocation: bench/gpu/local.sh for this tree (build, GPU tests, bench), the
# TCP transport's GPU tests, then ferry_local_bench of the tree at BEFORE_SRC
# built the same way, and the two tables, this tree's first each time.
#
# Usage (repository root): bash bench/gpu/compare_local.sh BEFORE_SRC [OUTDIR]
# BEFORE_SRC is a source tree of the earlier commit (git archive of it).
set -uo pipefail
before=$1
out=${2:-${OUT:-/tmp/ferry-compare}}
mkdir -p "$out"
bash bench/gpu/local.sh "$out/after" >"$out/after.txt" 2>&1
tcp_rc=skipped
if [ -x build-gpu/bin/ferry_tcp_gpu_tests ]; then
  timeout 300 build-gpu/bin/ferry_tcp_gpu_tests >"$out/tcp_gpu_test.log" 2>&1
  tcp_rc=$?
fi
extra=()
if ! [ -e /usr/include/openssl/hmac.h ] && [ -d /tmp/deps/usr/include ]; then
  extra+=(-DOPENSSL_INCLUDE_DIR=/tmp/deps/usr/include -DOPENSSL_CRYPTO_LIBRARY=$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so.3))
fi
py=$(command -v python3)
pybind=$($py -m pybind11 --cmakedir 2>/dev/null)
nccl=${FERRY_NCCL_LIBRARY:-}
if [ -z "$nccl" ]; then
  d=$($py -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
  [ -n "$d" ] && [ -e "$d/lib/libnccl.so.2" ] && nccl="$d/lib/libnccl.so.2"
fi
if cmake -S "$before" -B build-gpu-before -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$py" \
     -Dpybind11_DIR="$pybind" "${extra[@]}" >"$out/before_cmake.log" 2>&1 &&
   ninja -C build-gpu-before ferry_local_bench >"$out/before_build.log" 2>&1; then
  # The earlier build's figures, then this build's once more: the same host state for both.
  timeout 300 build-gpu-before/bin/ferry_local_bench "${nccl:-libnccl.so.2}" >"$out/before_bench.log" 2>&1
  timeout 300 build-gpu/bin/ferry_local_bench "${nccl:-libnccl.so.2}" >"$out/after_bench2.log" 2>&1
else
  tail -20 "$out/before_build.log" "$out/before_cmake.log"
fi
tail -22 "$out/after.txt"
echo "tcp GPU tests rc=$tcp_rc: $(tail -1 "$out/tcp_gpu_test.log" 2>/dev/null)"
echo "== before (BEFORE_SRC)"
tail -14 "$out/before_bench.log"
echo "== after, second run"
tail -14 "$out/after_bench2.log"

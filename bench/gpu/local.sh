#!/usr/bin/env bash
# The local transport on a host with two GPUs, in one invocation: build, the
# GPU tests (C++ and Python), then bench ferry_local_bench (ferry against
# peer copies, NCCL and memcpy). Prints a short table last.
#
# Usage (repository root): bash bench/gpu/local.sh [OUTDIR]
# NCCL is taken from FERRY_NCCL_LIBRARY, else the Python environment's
# nvidia.nccl package, else the system's libnccl.so.2.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${1:-${OUT:-/tmp/ferry-local}}
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,memory.used,temperature.gpu --format=csv,noheader

extra=()
# Headers this host may lack travel as Debian packages in .deps.
if ! [ -e /usr/include/openssl/hmac.h ] && ls .deps/*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  extra+=(-DOPENSSL_INCLUDE_DIR=/tmp/deps/usr/include -DOPENSSL_CRYPTO_LIBRARY=$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so.3))
  cp -r /tmp/deps/usr/include/x86_64-linux-gnu/openssl/* /tmp/deps/usr/include/openssl/ 2>/dev/null
fi
py=$(command -v python3)
pybind=$($py -m pybind11 --cmakedir 2>/dev/null)
t0=$(date +%s)
if ! cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$py" -Dpybind11_DIR="$pybind" \
    "${extra[@]}" >"$out/cmake.log" 2>&1; then
  tail -30 "$out/cmake.log"; exit 1
fi
if ! ninja -C build-gpu ferry_local_gpu_test ferry_local_multi_gpu_test ferry_local_bench ferry_integration_tests ferry_test_peer _ferry >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30; exit 1
fi
# The Python package is assembled by the module's post-build steps.
ninja -C build-gpu >>"$out/build.log" 2>&1 || true
echo "build: $(( $(date +%s) - t0 )) s"

timeout 400 build-gpu/bin/ferry_local_gpu_test >"$out/gpu_test.log" 2>&1
gpu_rc=$?
tail -5 "$out/gpu_test.log"; grep FAIL "$out/gpu_test.log" | head -20

timeout 200 build-gpu/bin/ferry_local_multi_gpu_test >"$out/multi_gpu_test.log" 2>&1
multi_rc=$?
tail -3 "$out/multi_gpu_test.log"; grep FAIL "$out/multi_gpu_test.log" | head -10

FERRY_TRANSPORT=local timeout 200 build-gpu/bin/ferry_integration_tests >"$out/integration_local.log" 2>&1
int_rc=$?
tail -3 "$out/integration_local.log"

PYTHONPATH=build-gpu/python timeout 300 $py -m pytest -q -x tests/python/test_gpu.py >"$out/pytest_gpu.log" 2>&1
py_rc=$?
tail -5 "$out/pytest_gpu.log"

nccl=${FERRY_NCCL_LIBRARY:-}
if [ -z "$nccl" ]; then
  d=$($py -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
  [ -n "$d" ] && [ -e "$d/lib/libnccl.so.2" ] && nccl="$d/lib/libnccl.so.2"
fi
timeout 300 build-gpu/bin/ferry_local_bench "${nccl:-libnccl.so.2}" >"$out/bench.log" 2>&1
bench_rc=$?
echo
echo "== results ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$(nvidia-smi -L | wc -l))"
echo "gpu test rc=$gpu_rc  multi-GPU rc=$multi_rc  integration(local) rc=$int_rc  pytest gpu rc=$py_rc  bench rc=$bench_rc"
tail -14 "$out/bench.log"

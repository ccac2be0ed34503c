# shellcheck shell=bash
# Sourced by the GPU scripts (node.sh, soak_gpu.sh): configures build-gpu on a
# bare GPU host. Headers the host may lack (OpenSSL's) travel as Debian
# packages in .deps and are unpacked into /tmp/deps.
#
#   gpu_configure LOG [CMAKE ARGS...]
#                       configure build-gpu (Release, Ninja, sm_90, the Python
#                       module when pybind11 is found); 1 on failure, with
#                       the log's tail printed
gpu_configure() {
  local log=$1 extra=() py pybind
  shift
  extra+=("$@")
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  if ! [ -e /usr/include/openssl/hmac.h ] && ls .deps/libssl-dev*.deb >/dev/null 2>&1; then
    mkdir -p /tmp/deps && dpkg -x .deps/libssl-dev*.deb /tmp/deps
    cp -r /tmp/deps/usr/include/x86_64-linux-gnu/openssl/* /tmp/deps/usr/include/openssl/ 2>/dev/null
    extra+=(-DOPENSSL_INCLUDE_DIR=/tmp/deps/usr/include
      -DOPENSSL_CRYPTO_LIBRARY="$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so.3)")
  fi
  py=$(command -v python3)
  pybind=$($py -m pybind11 --cmakedir 2>/dev/null) && extra+=(-Dpybind11_DIR="$pybind")
  if ! timeout 150 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DPython_EXECUTABLE="$py" "${extra[@]}" >"$log" 2>&1; then
    tail -30 "$log"
    return 1
  fi
}

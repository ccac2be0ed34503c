#!/usr/bin/env bash
# How `ferry profile` should post each timed operation: short ce runs (and
# nccl runs) with every --launch mode in one invocation, and the coefficient
# of variation each gives per configuration at 1 MiB and above. The mode with
# the steadiest device times is the default (docs/profile.md).
# Usage (repository root, GPU host): bash bench/gpu/profile_launch.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-/tmp/profile-launch}}
runs=${RUNS:-/tmp/profile-launch-runs}  # run directories (large); only logs go to OUT
mkdir -p "$out" "$runs"
export NCCL_NVLS_ENABLE=0
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90)
if [ ! -f /usr/include/openssl/hmac.h ] && ls .deps/*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  cmake_args+=(-DOPENSSL_INCLUDE_DIR=/tmp/deps/usr/include -DOPENSSL_CRYPTO_LIBRARY=$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so.3))
  cp -r /tmp/deps/usr/include/x86_64-linux-gnu/openssl/* /tmp/deps/usr/include/openssl/ 2>/dev/null
fi
py=$(command -v python3)
cmake_args+=(-DPython_EXECUTABLE="$py")
pbdir=$($py -m pybind11 --cmakedir 2>/dev/null) && cmake_args+=(-Dpybind11_DIR="$pbdir")
cmake -S . -B build-gpu "${cmake_args[@]}" >"$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
ninja -C build-gpu ferry_cli >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
ferry=build-gpu/bin/ferry
common=(--gpus 0,1 --sizes 1M:1G:x2 --warmup 5 --reps 10 --drift-seconds 1 --no-reference)
for run in ${LAUNCH_RUNS:-ce:direct ce:gated ce:graph nccl:direct nccl:gated}; do
  b=${run%%:*} m=${run##*:}
  "$ferry" profile --backend "$b" --launch "$m" "${common[@]}" --out "$runs/$b-$m" >/dev/null 2>"$out/$b-$m.log" ||
    { echo "$b --launch $m failed:"; tail -5 "$out/$b-$m.log"; }
done
python3 - "$runs" <<'PY' | tee "$out/launch_cv.txt"
import sys, os, pandas as pd
out = sys.argv[1]
print(f"{'run':14} {'configs':>7} {'CV<5%':>6} {'median CV':>9} {'max CV':>7}   worst (pair size CV)")
for run in ("ce-direct", "ce-gated", "ce-graph", "nccl-direct", "nccl-gated"):
    p = os.path.join(out, run, "execution_log.csv")
    if not os.path.exists(p):
        print(f"{run:14} no data"); continue
    log = pd.read_csv(p)
    ops = log[log.role.isin(["recv", "copy"])]
    g = ops.groupby(["src", "dst", "size"]).device_ns
    cv = (g.std() / g.mean()).reset_index(name="cv")
    w = cv.loc[cv.cv.idxmax()]
    print(f"{run:14} {len(cv):7d} {int((cv.cv < 0.05).sum()):6d} {100 * cv.cv.median():8.2f}% {100 * cv.cv.max():6.2f}%"
          f"   {int(w.src)}->{int(w.dst)} {int(w['size']) >> 20} MiB {100 * w.cv:.1f}%")
PY

#!/usr/bin/env bash
# `ferry profile` on a GPU host, start to finish, on a bare machine: configure
# and build, run the GPU tests, a full ce run (with the spin-gated
# cudaMemcpyPeerAsync reference loop, nvbandwidth's method, in the same
# invocation), a full nccl run and a full ferry run (this engine's local
# transport; 2 GPUs, 31 sizes, 10 repetitions each), analyse all three, pack
# the run directories, and print a short table last.
#
# Usage: bench/gpu/profile.sh [OUT_DIR]   (default: $OUT, else ./profile-out)
# Env:   FERRY_PROFILE_ARGS  extra flags for every full run
#        PROFILE_GPUS        the GPUs to profile (default 0,1; "all": every GPU
#                            of the host, every directed pair)
#        TESTS=0             skip building and running the tests
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
out=${1:-${OUT:-$root/profile-out}}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
log() { echo "== $*"; }
extra=${FERRY_PROFILE_ARGS:-}

command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
log "machine"
nvidia-smi -L
nvidia-smi topo -m 2>/dev/null | head -8
nvcc --version | tail -1
python3 -c "import nvidia.nccl as n; print('nccl wheel:', list(n.__path__)[0])" 2>/dev/null || echo "no nccl wheel"

log "configure"
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90)
# Headers this host may lack travel as Debian packages in .deps (the same
# configuration as bench/gpu/local.sh, so the two scripts share build-gpu).
if [ ! -f /usr/include/openssl/hmac.h ] && ls .deps/*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  cmake_args+=(-DOPENSSL_INCLUDE_DIR=/tmp/deps/usr/include -DOPENSSL_CRYPTO_LIBRARY=$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so.3))
  cp -r /tmp/deps/usr/include/x86_64-linux-gnu/openssl/* /tmp/deps/usr/include/openssl/ 2>/dev/null
fi
py=$(command -v python3)
pyargs=(-DPython_EXECUTABLE="$py")
pbdir=$(python3 -m pybind11 --cmakedir 2>/dev/null) && pyargs+=(-Dpybind11_DIR="$pbdir")
src=$root
if ! cmake -S "$src" -B build-gpu "${cmake_args[@]}" "${pyargs[@]}" >/tmp/configure.log 2>&1; then
  tail -15 /tmp/configure.log
  echo "configure failed with the Python module; trying without it"
  rm -rf /tmp/ferry-src build-gpu
  mkdir -p /tmp/ferry-src
  tar -C "$root" --exclude=./build --exclude=./build-gpu --exclude=./.git -cf - . | tar -C /tmp/ferry-src -xf -
  rm -f /tmp/ferry-src/python/CMakeLists.txt
  src=/tmp/ferry-src
  cmake -S "$src" -B build-gpu "${cmake_args[@]}" >/tmp/configure.log 2>&1 || { tail -30 /tmp/configure.log; exit 1; }
fi
grep -E "ferry profile" /tmp/configure.log

log "build"
t=$(date +%s)
ninja -C build-gpu ferry_cli >/tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
echo "ferry built in $(( $(date +%s) - t )) s"
tests=${TESTS:-1}
[ "$tests" = 1 ] && { ninja -C build-gpu ferry_unit_tests >/tmp/build-tests.log 2>&1 || { tail -20 /tmp/build-tests.log; echo "unit tests did not build"; }; }
ferry=$root/build-gpu/bin/ferry

# The pure-Python analysis, without the compiled module: a package shell.
shim=/tmp/ferry-py
mkdir -p $shim/ferry && : >$shim/ferry/__init__.py && cp -r "$root/python/ferry/analysis" $shim/ferry/

if [ "$tests" = 1 ]; then
  log "GPU tests"
  build-gpu/bin/ferry_unit_tests --gtest_filter='Profile*' 2>&1 | tail -2
  bash tests/gpu/profile_gpu_test.sh "$ferry" $shim 2>&1 | tail -25
  echo "gpu_profile_backends exit: ${PIPESTATUS[0]}"
fi

runs=/tmp/runs
rm -rf $runs && mkdir -p $runs
declare -A wall
for backend in ce nccl ferry; do
  log "full $backend run"
  t0=$(date +%s.%N)
  gpus=${PROFILE_GPUS:-0,1}
  gpu_args=(--gpus "$gpus")
  [ "$gpus" = all ] && gpu_args=()
  # shellcheck disable=SC2086
  timeout 600 "$ferry" profile --backend $backend "${gpu_args[@]}" --out $runs/$backend $extra >$runs/$backend.table 2>$runs/$backend.log
  rc=$?
  wall[$backend]=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  grep -v "ETA" $runs/$backend.log | tail -12
  echo "exit $rc, wall ${wall[$backend]} s"
  PYTHONPATH=$shim python3 -m ferry.analysis $runs/$backend >/dev/null 2>$runs/$backend.analysis.log ||
    cat $runs/$backend.analysis.log
  cp $runs/$backend/analysis/pair_matrix.png "$out/pair_matrix-$backend.png" 2>/dev/null
  awk -v b="$backend" '/^Weak links/ {on = 1; print b ": " $0; next}
    on && /^\|/ {print b ": " $0; next}
    on && !/^$/ {exit}' $runs/$backend/analysis/summary.md 2>/dev/null
  cp $runs/$backend.table $runs/$backend.log $runs/$backend/ 2>/dev/null
  tar -C $runs -czf "$out/profile-$backend.tar.gz" $backend
done

log "summary"
python3 - "$runs" "${wall[ce]}" "${wall[nccl]}" "${wall[ferry]}" <<'PY' | tee "$out/summary.txt"
import sys, pandas as pd
runs, wall_ce, wall_nccl, wall_ferry = sys.argv[1:5]
def stats(backend):
    log = pd.read_csv(f"{runs}/{backend}/execution_log.csv")
    ops = log[log.role.isin(["recv", "copy"])]
    g = ops.groupby(["src", "dst", "size"]).device_ns
    s = pd.DataFrame({"med": g.median(), "cv": g.std() / g.mean()}).reset_index()
    s["gbps"] = s["size"] / s["med"]
    return s
print(f"wall time: ce {wall_ce} s, nccl {wall_nccl} s, ferry {wall_ferry} s (target < 600 s each)")
table = {}
try:
    ce = stats("ce")
    table["ce"] = ce
    ref = pd.read_csv(f"{runs}/ce/reference.csv")
    ref["gbps"] = ref["size"] * ref["copies"] / ref["device_ns"]
    r = ref.groupby(["src", "dst", "size"]).gbps.median().reset_index(name="ref")
    m = ce.merge(r, on=["src", "dst", "size"])
    print("ce vs spin-gated reference (target ratio >= 0.97):")
    for x in m.itertuples():
        print(f"  {x.src}->{x.dst} {x.size >> 20:5d} MiB  ce {x.gbps:7.1f}  ref {x.ref:7.1f}  ratio {x.gbps / x.ref:.4f}")
    big = ce[ce["size"] >= 1 << 20]
    print(f"ce CV at >= 1 MiB: max {100 * big.cv.max():.2f}%  median {100 * big.cv.median():.2f}%, "
          f"{(big.cv < 0.05).sum()} of {len(big)} under 5% (target: all)")
except Exception as e:
    print("ce: no numbers:", e)
for backend in ("nccl", "ferry"):
    try:
        st = stats(backend)
        table[backend] = st
        big = st[st["size"] >= 1 << 20]
        print(f"{backend} CV at >= 1 MiB: max {100 * big.cv.max():.2f}%  median {100 * big.cv.median():.2f}%, "
              f"{(big.cv < 0.05).sum()} of {len(big)} under 5%")
    except Exception as e:
        print(f"{backend}: no numbers:", e)
# The short table: receiver's median time and bandwidth per backend. ferry's
# device time includes the host's post and completion path (docs/profile.md).
sizes = (4096, 1 << 20, 16 << 20, 1 << 30)
names = [b for b in ("ce", "nccl", "ferry") if b in table]
print(("pair  size(B)     " + "".join(f"{b + ' us':>11} {b + ' GB/s':>11} " for b in names)).rstrip())
pairs = sorted({(x.src, x.dst) for st in table.values() for x in st.itertuples()})
for src, dst in pairs:
    for size in sizes:
        cells = ""
        for b in names:
            row = table[b][(table[b].src == src) & (table[b].dst == dst) & (table[b]["size"] == size)]
            cells += f"{row.med.iloc[0] / 1e3:11.2f} {row.gbps.iloc[0]:11.2f} " if len(row) else f"{'-':>11} {'-':>11} "
        print(f"{src}->{dst}  {size:<11d} {cells}".rstrip())
PY

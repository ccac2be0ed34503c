#!/usr/bin/env bash
# GPU memory over TCP on a two-GPU host, in one run (about 8 minutes before
# the hostcold runs were added; STREAMS=... splits it over several calls):
#   1. builds ferry, its GPU tests and two anchors (a parallel-TCP-streams
#      blaster, and an NCCL send/recv timer); finds iperf3 (on PATH, or
#      unpacked from the Debian packages in .deps);
#   2. runs the GPU-over-TCP tests (two processes, FERRY_TRANSPORT=tcp), with
#      the staging copy kernel and again with the copy engines;
#   3. measures, over loopback TCP between two processes:
#        ferry GPU0 -> GPU1 (staged)        at several stream counts, and at
#          16 streams once more with the copy engines staging,
#        ferry host -> host (same paths)    at the same stream counts,
#          each with one transfer in flight and with more (INFLIGHTS), and
#          at 16 and 64 MiB again with --footprint 1G (hostcold: buffers
#          that do not stay in the CPU's caches from one transfer to the
#          next, as GPU memory staged through pinned slots never does),
#        the same number of raw TCP streams: as many parallel iperf3
#          processes (the target's anchor; each one stream, 3 s after 1 s of
#          warm-up), the blaster as iperf3 runs them (each thread one 128 KiB
#          buffer, which stays in the CPU's cache) and the blaster over
#          memory-resident buffers (1 GiB over the streams on each side, the
#          footprint of ferry's largest transfer),
#        NCCL's socket transport, defaults and NSOCKS_PERTHREAD=4 SOCKET_NTHREADS=4,
#        a small staging sweep (FERRY_STAGING_CHUNK x FERRY_STAGING_DEPTH) and
#        the full mesh `ferry bench --gpus 0,1`,
#        ferry GPU0->GPU1 at its defaults (no --streams: the automatic count),
#        small messages (4 KiB-1 MiB, one in flight): GPU memory against host
#          memory on both ends, posting to completion (p50),
#        the ceilings beneath the targets: the PCIe links between GPU and
#          pinned host memory (pcie_ceiling.cu), and a staged stream without
#          ferry (staged_blast.cu: sockets from pinned slots alone, and with
#          the copies of a staged GPU0->GPU1 stream);
#   4. prints a table last with the ratios the targets are stated in.
# Run from the repository root on a bare GPU host: bash bench/gpu/tcp_gpu.sh
# Results (raw outputs and the table) go to build-gpu/tcp_gpu/.
set -euo pipefail
cd "$(dirname "$0")/../.."

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export FERRY_TRANSPORT=tcp  # same-host engines would otherwise pick the local transport
export FERRY_LOG=error
START=$(date +%s)
OUT=build-gpu/tcp_gpu
mkdir -p "$OUT"
STREAMS="${STREAMS:-4 8 16}"
# Operations in flight: 1 waits for each transfer before posting the next;
# 2 posts ahead, as NCCL's timing loop enqueues its iterations on a stream.
INFLIGHTS="${INFLIGHTS:-1 2}"
ITERS=8
# Sizes and transfers a size, run by run: small sizes take more, as 8
# transfers of 16 MiB last a few ms.
PARTS=("16M,64M 40" "256M,1G $ITERS")
say() { echo "[tcp_gpu $(($(date +%s) - START))s] $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

# ---- 1. build -------------------------------------------------------------------
say "configure and build (build-gpu)"
PY=$(command -v python3)
PYARGS=(-DPython_EXECUTABLE="$PY")
PBDIR=$("$PY" -m pybind11 --cmakedir 2>/dev/null) && PYARGS+=(-Dpybind11_DIR="$PBDIR")
# Headers this host may lack travel as Debian packages in .deps.
if [ ! -f /usr/include/openssl/hmac.h ] && ls .deps/*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  PYARGS+=(-DOPENSSL_INCLUDE_DIR=/tmp/deps/usr/include -DOPENSSL_CRYPTO_LIBRARY="$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so.3)")
  cp -r /tmp/deps/usr/include/x86_64-linux-gnu/openssl/* /tmp/deps/usr/include/openssl/ 2>/dev/null || true
fi
IPERF3=$(command -v iperf3 || true)
if [[ -z "$IPERF3" ]] && ls .deps/iperf3_*.deb .deps/libiperf0_*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/deps && for f in .deps/iperf3_*.deb .deps/libiperf0_*.deb .deps/libsctp1_*.deb; do dpkg -x "$f" /tmp/deps; done
  export LD_LIBRARY_PATH="/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  IPERF3=/tmp/deps/usr/bin/iperf3
fi
timeout 150 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release "${PYARGS[@]}" >"$OUT/cmake.log" 2>&1 ||
  { tail -20 "$OUT/cmake.log"; fail "cmake"; }
timeout 300 ninja -C build-gpu ferry_cli ferry_tcp_gpu_tests ferry_tcp_gpu_peer >"$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; fail "build"; }
timeout 60 g++ -O2 -std=c++17 -pthread bench/gpu/tcp_blast.cc -o build-gpu/tcp_blast || fail "build tcp_blast"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
timeout 120 "$NVCC" -O2 -std=c++17 bench/gpu/pcie_ceiling.cu -o build-gpu/pcie_ceiling >>"$OUT/nvcc.log" 2>&1 ||
  say "pcie_ceiling did not build (see $OUT/nvcc.log)"
timeout 120 "$NVCC" -O2 -arch=sm_90 -std=c++17 bench/gpu/staged_blast.cu -o build-gpu/staged_blast >>"$OUT/nvcc.log" 2>&1 ||
  say "staged_blast did not build (see $OUT/nvcc.log)"
NCCL_DIR=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null || true)
HAVE_NCCL=0
if [[ -n "$NCCL_DIR" && -e "$NCCL_DIR/lib/libnccl.so.2" ]] &&
  timeout 120 "$NVCC" -O2 -std=c++17 bench/gpu/nccl_sendrecv.cu -o build-gpu/nccl_sendrecv -ldl >"$OUT/nvcc.log" 2>&1; then
  HAVE_NCCL=1
  export FERRY_NCCL_LIBRARY="$NCCL_DIR/lib/libnccl.so.2"
else
  say "NCCL not found or nvcc failed: the NCCL columns stay empty (see $OUT/nvcc.log)"
fi
FERRY=build-gpu/bin/ferry
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
say "GPUs: $GPUS; NCCL: $HAVE_NCCL"
[[ "$GPUS" -ge 1 ]] || fail "no GPU visible"
PEER_GPU=$((GPUS > 1 ? 1 : 0))

# ---- 2. GPU tests ---------------------------------------------------------------------
say "GPU tests (ferry_tcp_gpu_tests, two processes, FERRY_TRANSPORT=tcp)"
TESTS_RC=0
timeout 240 build-gpu/bin/ferry_tcp_gpu_tests >"$OUT/gpu_tests.log" 2>&1 || TESTS_RC=$?
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|PASSED|FAILED TEST" "$OUT/gpu_tests.log" | sed 's/^/  /' >&2 || true
[[ $TESTS_RC -eq 0 ]] && TESTS="passed" || TESTS="FAILED (rc $TESTS_RC, see $OUT/gpu_tests.log)"
say "GPU tests again with the copy engines staging (FERRY_STAGING_COPY=engine)"
ENGINE_RC=0
FERRY_STAGING_COPY=engine timeout 240 build-gpu/bin/ferry_tcp_gpu_tests >"$OUT/gpu_tests_engine.log" 2>&1 || ENGINE_RC=$?
grep -E "PASSED|FAILED TEST" "$OUT/gpu_tests_engine.log" | sed 's/^/  /' >&2 || true
[[ $ENGINE_RC -eq 0 ]] && TESTS="$TESTS; with engine staging passed" ||
  TESTS="$TESTS; with engine staging FAILED (rc $ENGINE_RC, see $OUT/gpu_tests_engine.log)"

# ---- 3. performance -------------------------------------------------------------------
iperf_parallel() {  # streams: one iperf3 client and server pair a stream, prints "STREAMS GB/s"
  [[ -n "$IPERF3" ]] || { echo "iperf3 not found"; return 1; }
  local n=$1 i pids=()
  for ((i = 0; i < n; i++)); do timeout 20 "$IPERF3" -s -1 -p $((5300 + i)) >/dev/null 2>&1 & done
  sleep 1
  for ((i = 0; i < n; i++)); do
    timeout 20 "$IPERF3" -c 127.0.0.1 -p $((5300 + i)) -t 3 -O 1 -J >"$OUT/iperf_${n}_$i.json" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  wait
  python3 - "$n" "$OUT" <<'PY'
import json, sys
n, out = int(sys.argv[1]), sys.argv[2]
total = sum(json.load(open(f"{out}/iperf_{n}_{i}.json"))["end"]["sum_received"]["bits_per_second"] for i in range(n))
print(n, total / 8e9)
PY
}
: >"$OUT/ferry.jsonl"
: >"$OUT/host.jsonl"
: >"$OUT/host_cold.jsonl"
for s in $STREAMS; do
  for q in $INFLIGHTS; do
    for part in "${PARTS[@]}"; do
      set -- $part
      say "ferry GPU0->GPU$PEER_GPU, $s streams, $q in flight, $1"
      timeout 90 $FERRY bench --local --op send --gpus 0 --peer-gpus $PEER_GPU --sizes "$1" --iters "$2" --warmup 3 \
        --streams "$s" --inflight "$q" --json - 2>>"$OUT/ferry_gpu_${s}_$q.err" |
        sed "s/^{/{\"kind\":\"gpu\",\"streams\":$s,\"inflight\":$q,/" >>"$OUT/ferry.jsonl" ||
        say "  ferry GPU run failed (see $OUT/ferry_gpu_${s}_$q.err)"
      say "ferry host->host, $s streams, $q in flight, $1"
      timeout 90 $FERRY bench --local --op send --sizes "$1" --iters "$2" --warmup 3 --streams "$s" --inflight "$q" \
        --json - 2>>"$OUT/ferry_host_${s}_$q.err" | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)))" |
        sed "s/^{/{\"streams\":$s,\"inflight\":$q,/" >>"$OUT/host.jsonl" ||
        say "  ferry host run failed (see $OUT/ferry_host_${s}_$q.err)"
      [[ $1 == 16M,64M ]] || continue
      say "ferry host->host, $s streams, $q in flight, $1, footprint 1G"
      timeout 90 $FERRY bench --local --op send --sizes "$1" --iters "$2" --warmup 3 --streams "$s" --inflight "$q" \
        --footprint 1G --json - 2>>"$OUT/ferry_host_cold_${s}_$q.err" |
        python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)))" |
        sed "s/^{/{\"streams\":$s,\"inflight\":$q,/" >>"$OUT/host_cold.jsonl" ||
        say "  ferry host run (footprint 1G) failed (see $OUT/ferry_host_cold_${s}_$q.err)"
    done
  done
  say "raw TCP, $s streams (parallel iperf3 processes; tcp_blast, cached buffers and memory-resident ones)"
  iperf_parallel "$s" >"$OUT/iperf_$s.txt" 2>&1 || say "  parallel iperf3 failed (see $OUT/iperf_$s.txt)"
  timeout 30 build-gpu/tcp_blast "$s" 3 >"$OUT/blast_$s.txt" 2>&1 || say "  tcp_blast failed"
  timeout 30 build-gpu/tcp_blast "$s" 3 $(((1 << 30) / s)) >"$OUT/blast_mem_$s.txt" 2>&1 || say "  tcp_blast (memory) failed"
done

say "ferry GPU0->GPU$PEER_GPU, 16 streams, staging on the copy engines (FERRY_STAGING_COPY=engine)"
: >"$OUT/ferry_engine.jsonl"
for part in "${PARTS[@]}"; do
  set -- $part
  FERRY_STAGING_COPY=engine timeout 90 $FERRY bench --local --op send --gpus 0 --peer-gpus $PEER_GPU --sizes "$1" \
    --iters "$2" --warmup 3 --streams 16 --json - 2>>"$OUT/ferry_engine.err" >>"$OUT/ferry_engine.jsonl" ||
    say "  ferry engine run failed (see $OUT/ferry_engine.err)"
done

say "ferry GPU0->GPU$PEER_GPU at its defaults (automatic streams)"
: >"$OUT/ferry_auto.jsonl"
for q in $INFLIGHTS; do
  for part in "${PARTS[@]}"; do
    set -- $part
    timeout 90 $FERRY bench --local --op send --gpus 0 --peer-gpus $PEER_GPU --sizes "$1" --iters "$2" --warmup 3 \
      --inflight "$q" --json - 2>>"$OUT/ferry_auto.err" | sed "s/^{/{\"inflight\":$q,/" >>"$OUT/ferry_auto.jsonl" ||
      say "  ferry run at defaults failed (see $OUT/ferry_auto.err)"
  done
done
say "small messages, one in flight: GPU memory and host memory on both ends"
: >"$OUT/small.jsonl"
for round in 1 2 3; do
  for mem in "0 $PEER_GPU" "host host"; do
    set -- $mem
    timeout 60 $FERRY bench --local --op send --gpus "$1" --peer-gpus "$2" --sizes 4K,16K,64K,256K,1M --iters 300 \
      --warmup 20 --json - 2>>"$OUT/small.err" | sed "s/^{/{\"memory\":\"$1\",\"round\":$round,/" >>"$OUT/small.jsonl" ||
      say "  small-message run failed (see $OUT/small.err)"
  done
done
say "ceilings: PCIe between GPU and pinned host memory; a staged stream without ferry"
[[ -x build-gpu/pcie_ceiling ]] && timeout 60 build-gpu/pcie_ceiling 0 $PEER_GPU >"$OUT/pcie.txt" 2>&1
: >"$OUT/staged_floor.txt"
if [[ -x build-gpu/staged_blast ]]; then
  for s in $STREAMS; do
    for c in 262144 1048576; do
      CHUNK=$c SEND_GPU=0 RECV_GPU=$PEER_GPU timeout 60 build-gpu/staged_blast "$s" 2 plain kernel >>"$OUT/staged_floor.txt" 2>&1
    done
  done
fi

nccl_run() {  # name, extra env...
  local name=$1
  shift
  rm -f "$OUT/nccl.id"
  env "$@" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo \
    timeout 120 build-gpu/nccl_sendrecv 0 "$OUT/nccl.id" 10 16777216 67108864 268435456 1073741824 \
    >/dev/null 2>"$OUT/nccl_${name}_0.err" &
  local p0=$!
  env "$@" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo \
    timeout 120 build-gpu/nccl_sendrecv 1 "$OUT/nccl.id" 10 16777216 67108864 268435456 1073741824 \
    >"$OUT/nccl_$name.txt" 2>"$OUT/nccl_${name}_1.err" || say "  NCCL $name failed (see $OUT/nccl_${name}_1.err)"
  wait $p0 || true
}
if [[ $HAVE_NCCL -eq 1 && $GPUS -ge 2 ]]; then  # NCCL cannot pair two ranks on one GPU
  say "NCCL socket transport, defaults"
  nccl_run default NCCL_DEBUG=WARN
  say "NCCL socket transport, NSOCKS_PERTHREAD=4 SOCKET_NTHREADS=4"
  nccl_run 4x4 NCCL_DEBUG=WARN NCCL_NSOCKS_PERTHREAD=4 NCCL_SOCKET_NTHREADS=4
fi

: >"$OUT/sweep.txt"
[[ "${SWEEP:-1}" == 1 ]] && say "staging sweep at 256M, 8 streams (SWEEP=0 skips it)"
[[ "${SWEEP:-1}" == 1 ]] && for chunk in 256K 512K 1M 2M; do
  for depth in 2 4 8; do
    r=$(FERRY_STAGING_CHUNK=$chunk FERRY_STAGING_DEPTH=$depth timeout 40 $FERRY bench --local --op send --gpus 0 \
      --peer-gpus $PEER_GPU --sizes 256M --iters $ITERS --warmup 2 --streams 8 --json - 2>/dev/null |
      python3 -c "import json,sys; print('%.2f' % (json.loads(sys.stdin.readline())['aggregate_bytes_per_s']/1e9))" ||
      echo "failed")
    echo "$chunk $depth $r" >>"$OUT/sweep.txt"
  done
done

say "full mesh: ferry bench --gpus 0-$((GPUS - 1)) (each GPU to the peer's GPU of the same index), with --verify"
timeout 90 $FERRY bench --local --op send --gpus "0-$((GPUS - 1))" --sizes 64M,1G --iters $ITERS --warmup 2 \
  --streams 8 --verify >"$OUT/mesh.txt" 2>"$OUT/mesh.err" || say "  full-mesh run failed (see $OUT/mesh.err)"

# ---- 4. the table ------------------------------------------------------------------------
say "done in $(($(date +%s) - START)) s"
TESTS="$TESTS" OUT="$OUT" STREAMS="$STREAMS" INFLIGHTS="$INFLIGHTS" python3 - <<'PY'
import glob, json, os
out, streams, inflights = os.environ["OUT"], os.environ["STREAMS"].split(), os.environ["INFLIGHTS"].split()
def load_lines(path):
    try:
        return [l.split() for l in open(path) if l.strip()]
    except OSError:
        return []
def load_json(name):
    # The JSON objects of out/name, one a line; lines that do not parse are skipped.
    path = os.path.join(out, name)
    for line in open(path) if os.path.exists(path) else []:
        try:
            yield json.loads(line)
        except ValueError:
            continue
gpu = {}
for j in load_json("ferry.jsonl"):
    try:
        gpu[(str(j["inflight"]), str(j["streams"]), j["bytes"])] = j["aggregate_bytes_per_s"] / 1e9
    except KeyError:
        pass
def load_host(name):
    rates = {}
    for j in load_json(name):
        try:
            for r in j["results"]:
                rates[(str(j["inflight"]), str(j["streams"]), r["bytes"])] = r["bytes_per_s"] / 1e9
        except KeyError:
            pass
    return rates
host, host_cold = load_host("host.jsonl"), load_host("host_cold.jsonl")
blast, blast_mem, iperf = {}, {}, {}
for s in streams:
    for f in load_lines(os.path.join(out, f"iperf_{s}.txt")):
        if len(f) == 2 and f[0] == s: iperf[s] = float(f[1])
    for f in load_lines(os.path.join(out, f"blast_{s}.txt")):
        if len(f) == 2: blast[s] = float(f[1])
    for f in load_lines(os.path.join(out, f"blast_mem_{s}.txt")):
        if len(f) == 2: blast_mem[s] = float(f[1])
nccl = {}
for name in ("default", "4x4"):
    for f in load_lines(os.path.join(out, f"nccl_{name}.txt")):
        if len(f) == 2: nccl.setdefault(int(f[0]), {})[name] = float(f[1])
def fmt(x): return "-" if x is None else f"{x:.2f}"
def ratio(a, b): return None if a is None or not b else a / b
sizes = sorted({b for (_, _, b) in gpu} | {b for (_, _, b) in host})
print()
print("=== sweep (GB/s at 256M, 8 streams): chunk depth GB/s ===")
for f in load_lines(os.path.join(out, "sweep.txt")): print("  " + " ".join(f))
print()
print("=== full mesh (ferry bench --gpus) ===")
for l in open(os.path.join(out, "mesh.txt")) if os.path.exists(os.path.join(out, "mesh.txt")) else []: print("  " + l.rstrip())
print()
print("=== staging copies at 16 streams, GPU->GPU GB/s: kernel (default) / copy engines ===")
for j in load_json("ferry_engine.jsonl"):
    b = j["bytes"]
    k, e = gpu.get(("1", "16", b)), j["aggregate_bytes_per_s"] / 1e9
    print(f"  {b >> 20:>5} MiB  {fmt(k)} / {e:.2f}  ({fmt(ratio(k, e))}x)")
print()
print("=== GPU memory over loopback TCP, two processes (GB/s) ===")
print("GPU tests: " + os.environ["TESTS"])
print("targets: gpu/nccl_best >= 5.0 (16M..1G); gpu/iperf3 >= 0.9 and gpu/hostcold >= 0.9, at every listed stream count")
print("iperf3: as many parallel iperf3 processes (the target's anchor); tcp_str: the blaster as iperf3 runs (cached")
print("buffers); tcp_mem: the blaster over memory-resident buffers (no target)")
print("inflight: operations in flight (1: each waited for before the next; 2: posted ahead, as NCCL's timing loop enqueues)")
print("hostcold: host->host with --footprint 1G (buffers not in the CPU's caches; no target of its own, shown beside host)")
hdr = f"{'infl':>4} {'streams':>7} {'size':>6} {'gpu':>7} {'host':>7} {'hostcold':>8} {'iperf3':>7} {'tcp_str':>7} {'tcp_mem':>7} {'nccl_def':>8} {'nccl_4x4':>8} {'gpu/nccl':>8} {'gpu/ip3':>7} {'gpu/tcp':>7} {'gpu/mem':>7} {'gpu/host':>8} {'gpu/cold':>8}"
print(hdr)
verdict = {}
for q in inflights:
    for s in streams:
        for b in sizes:
            g, h, t, tm = gpu.get((q, s, b)), host.get((q, s, b)), blast.get(s), blast_mem.get(s)
            hc = host_cold.get((q, s, b))
            ip = iperf.get(s)
            n = nccl.get(b, {})
            best = max(n.values()) if n else None
            rn, ri, rt, rh = ratio(g, best), ratio(g, ip), ratio(g, t), ratio(g, h)
            for k, v in (("nccl", rn), ("iperf3", ri), ("tcp", rt), ("host", rh)):
                if v is not None: verdict.setdefault((q, k), []).append((v, s, b))
            label = f"{b >> 30}G" if b >= 1 << 30 else f"{b >> 20}M"
            print(f"{q:>4} {s:>7} {label:>6} {fmt(g):>7} {fmt(h):>7} {fmt(hc):>8} {fmt(ip):>7} {fmt(t):>7} {fmt(tm):>7} {fmt(n.get('default')):>8} {fmt(n.get('4x4')):>8} {fmt(rn):>8} {fmt(ri):>7} {fmt(rt):>7} {fmt(ratio(g, tm)):>7} {fmt(rh):>8} {fmt(ratio(g, hc)):>8}")
            if hc is not None and g is not None: verdict.setdefault((q, "cold"), []).append((g / hc, s, b))
print()
for q in inflights:
    for k, target, what in (("nccl", 5.0, "GPU->GPU vs best NCCL socket"),
                            ("iperf3", 0.9, "GPU->GPU vs as many parallel iperf3 processes"),
                            ("cold", 0.9, "GPU->GPU vs host->host out of the caches (hostcold)"),
                            ("host", 0.9, "GPU->GPU vs host->host, same paths (no target)")):
        rows = verdict.get((q, k))
        if not rows:
            print(f"{q} in flight, {what}: no data"); continue
        v, s, b = min(rows)
        print(f"{q} in flight, {what}: worst {v:.2f} ({s} streams, {b >> 20} MiB; target {target}) -> {'MET' if v >= target else 'MISSED'}")
print()
print("=== at the defaults (no --streams), GPU->GPU GB/s, and against the best listed stream count ===")
for j in load_json("ferry_auto.jsonl"):
    q, b, v = str(j["inflight"]), j["bytes"], j["aggregate_bytes_per_s"] / 1e9
    best = max([gpu[(q, s, b)] for s in streams if (q, s, b) in gpu] or [0])
    print(f"  {q} in flight {b >> 20:>5} MiB  {v:.2f}  best tuned {best:.2f}  ({fmt(ratio(v, best))}x, target 0.9)")
print()
print("=== small messages, p50 us posting to completion, GPU / host memory (target <= 1.2), three rounds ===")
small = {}
for j in load_json("small.jsonl"):
    try:
        small.setdefault(j["bytes"], {}).setdefault(j["memory"] == "host", []).append(j["per_gpu_p50_us"][0])
    except KeyError:
        continue
for b in sorted(small):
    g, h = small[b].get(False, []), small[b].get(True, [])
    rs = [x / y for x, y in zip(g, h)]
    print(f"  {b >> 10:>5} KiB  gpu {' '.join(f'{x:.1f}' for x in g)}  host {' '.join(f'{x:.1f}' for x in h)}  ratio {' '.join(f'{x:.2f}' for x in rs)}")
print()
print("=== ceilings: PCIe with pinned host memory (GB/s); staged stream without ferry (MODE STREAMS SLOT GB/s) ===")
for name in ("pcie.txt", "staged_floor.txt"):
    for l in open(os.path.join(out, name)) if os.path.exists(os.path.join(out, name)) else []: print("  " + l.rstrip())
PY

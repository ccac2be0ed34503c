#!/usr/bin/env bash
# The two-GPU targets, every row in one script: one call of it is one round;
# bench/gpu/two_gpu_table.py reads the rounds of several calls and judges
# each target on the worst of them. On a host with two GPUs (GPU 0 -> GPU 1),
# after building ferry and the anchors:
#   tcp      GPU memory over loopback TCP, 8 and 16 streams, 1 and 2 in flight,
#            16 MiB-1 GiB; ferry at its defaults (no --streams); the seed's
#            Endpoint(gpu, num_cpus=4) through ferry.p2p
#            anchors: the bare staged stream (staged_blast: the same slot
#            size, slots and streams, copy kernel, with and without lending
#            the slots' pages), as many parallel iperf3 processes, the PCIe
#            links with pinned host memory (pcie_ceiling), NCCL's socket
#            transport (defaults and 4 x 4 sockets)
#   small    4 KiB-1 MiB over TCP, one in flight, GPU memory and host memory
#            (p50 posting to completion); anchors: one device->host and one
#            host->device copy of the size (copy_round_trip)
#   blocks   the local transport GPU -> GPU at the defaults: 256 x 16 KiB and
#            1,024 x 4 KiB scattered, each against one contiguous write of
#            the same bytes; one block posted -> done, 4 KiB-1 MiB, against
#            the copy engine's peer copy (nccl_blocks' contiguous row)
#   nvlink   bulk GPU -> GPU over the local transport against the copy
#            engines (ferry_local_bench)
#   order    what ordering after torch's stream costs the posting thread
#            (stream_order_latency.py, both transports)
#
#   bash bench/gpu/two_gpu.sh OUT        (OUT/round.txt and the raw logs)
#   ONLY="tcp small"  runs only those parts
# Exit 77 on a host with fewer than two GPUs.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export FERRY_LOG=error
out=${1:-${OUT:-build-gpu/two_gpu}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
parts=${ONLY:-tcp small blocks nvlink order}
start=$(date +%s)
say() { echo "[two_gpu $(($(date +%s) - start))s] $*" >&2; }
wants() { [[ " $parts " == *" $1 "* ]]; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
[ "${gpus:-0}" -ge 2 ] || { echo "two_gpu: needs two GPUs, found ${gpus:-0}"; exit 77; }
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee "$out/gpus.txt" >&2
rows=$out/round.txt  # "ROW KEY VALUE..." lines two_gpu_table.py reads
: >"$rows"
row() { echo "$*" >>"$rows"; }

# ---- build -----------------------------------------------------------------------
source bench/gpu/configure.sh
gpu_configure "$out/cmake.log" || exit 1
if ! timeout 400 ninja -C build-gpu >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
for tool in staged_blast pcie_ceiling copy_round_trip nccl_sendrecv nccl_blocks; do
  [ -x "build-gpu/$tool" ] && [ "build-gpu/$tool" -nt "bench/gpu/$tool.cu" ] && continue
  timeout 120 "$NVCC" -O2 -std=c++17 -arch=sm_90 "bench/gpu/$tool.cu" -o "build-gpu/$tool" -ldl \
    >>"$out/nvcc.log" 2>&1 || say "$tool did not build (see $out/nvcc.log)"
done
if ! command -v iperf3 >/dev/null && ls .deps/iperf3_*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/deps && for f in .deps/iperf3_*.deb .deps/libiperf0_*.deb .deps/libsctp1_*.deb; do dpkg -x "$f" /tmp/deps; done
  export LD_LIBRARY_PATH="/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="/tmp/deps/usr/bin:$PATH"
fi
NCCL_DIR=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null || true)
NCCL_LIB=$NCCL_DIR/lib/libnccl.so.2
[ -e "$NCCL_LIB" ] || say "NCCL not found: its rows stay empty"
export PYTHONPATH=$PWD/build-gpu/python
FERRY=build-gpu/bin/ferry
say "built"

# ---- tcp: GPU memory over loopback TCP --------------------------------------------
iperf_parallel() {  # N: N iperf3 client/server pairs at once, 3 s after 1 s of warm-up; prints the sum in GB/s
  local n=$1 i pids=()
  for ((i = 0; i < n; i++)); do timeout 20 iperf3 -s -1 -p $((5300 + i)) >/dev/null 2>&1 & done
  sleep 1
  for ((i = 0; i < n; i++)); do
    timeout 20 iperf3 -c 127.0.0.1 -p $((5300 + i)) -t 3 -O 1 -J >"$out/iperf_${n}_$i.json" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  wait
  python3 - "$n" "$out" <<'PY'
import json, sys
n, out = int(sys.argv[1]), sys.argv[2]
print(sum(json.load(open(f"{out}/iperf_{n}_{i}.json"))["end"]["sum_received"]["bits_per_second"] for i in range(n)) / 8e9)
PY
}
gpu_bench() {  # KEY ARGS...: ferry bench GPU 0 -> 1 over TCP; a row a size: "KEY BYTES GB/s"
  local key=$1
  shift
  for part in "16M,64M 40" "256M,1G 8"; do
    local sizes=${part% *} iters=${part#* }
    FERRY_TRANSPORT=tcp timeout 120 $FERRY bench --local --op send --gpus 0 --peer-gpus 1 --sizes "$sizes" \
      --iters "$iters" --warmup 3 "$@" --json - 2>>"$out/$key.err" |
      python3 -c "
import json, sys
for l in sys.stdin:
    j = json.loads(l)
    print('$key', j['bytes'], '%.3f' % (j['aggregate_bytes_per_s'] / 1e9), 'ok' if j['verified'] else 'FAILED')" >>"$rows" ||
      say "  $key $sizes failed (see $out/$key.err)"
  done
}
if wants tcp; then
  for s in 8 16; do
    for q in 1 2; do
      say "ferry GPU0->GPU1 over TCP, $s streams, $q in flight"
      gpu_bench "gpu_s${s}_q$q" --streams "$s" --inflight "$q"
    done
    say "anchors at $s streams: the bare staged stream, parallel iperf3"
    for lend in 0 1; do
      r=$(CHUNK=1048576 SLOTS=2 SPLICE=$lend SEND_GPU=0 RECV_GPU=1 timeout 60 build-gpu/staged_blast "$s" 3 kernel 2>>"$out/staged.err")
      row "staged_s$s lend$lend $(awk '{print $4}' <<<"$r")"
    done
    row "iperf_s$s $(iperf_parallel "$s" 2>>"$out/iperf.err")"
  done
  for q in 1 2; do
    say "ferry GPU0->GPU1 over TCP at its defaults, $q in flight"
    gpu_bench "gpu_auto_q$q" --inflight "$q"
  done
  say "Endpoint(gpu, num_cpus=4), ferry.p2p over TCP"
  FERRY_TRANSPORT=tcp timeout 240 python3 bench/gpu/p2p_endpoint.py 0 1 4 16777216 67108864 268435456 1073741824 \
    2>"$out/p2p.err" | sed 's/^/p2p_cpus4 /' >>"$rows" || say "  p2p_endpoint failed (see $out/p2p.err)"
  say "PCIe links with pinned host memory"
  timeout 60 build-gpu/pcie_ceiling 0 1 >"$out/pcie.txt" 2>&1
  awk '$1 == "together" { print "pcie_together", $3, $5 }' "$out/pcie.txt" >>"$rows"
  if [ -e "$NCCL_LIB" ]; then
    for setting in "default" "4x4 NCCL_NSOCKS_PERTHREAD=4 NCCL_SOCKET_NTHREADS=4"; do
      set -- $setting
      name=$1
      shift
      say "NCCL socket transport, $name"
      rm -f "$out/nccl.id"
      for rank in 0 1; do
        env "$@" FERRY_NCCL_LIBRARY="$NCCL_LIB" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket \
          NCCL_SOCKET_IFNAME=lo timeout 150 build-gpu/nccl_sendrecv "$rank" "$out/nccl.id" 10 16777216 67108864 \
          268435456 1073741824 >"$out/nccl_${name}_$rank.txt" 2>"$out/nccl_${name}_$rank.err" &
      done
      wait
      sed "s/^/nccl_$name /" "$out/nccl_${name}_1.txt" >>"$rows"
    done
  fi
fi

# ---- small: 4 KiB - 1 MiB over TCP --------------------------------------------------
sizes_small="4096 16384 65536 262144 1048576"
if wants small; then
  say "small messages over TCP, GPU and host memory, one in flight"
  for mem in "0 1 gpu" "host host host"; do
    set -- $mem
    FERRY_TRANSPORT=tcp timeout 90 $FERRY bench --local --op send --gpus "$1" --peer-gpus "$2" \
      --sizes 4K,16K,64K,256K,1M --iters 400 --warmup 40 --json - 2>>"$out/small.err" |
      python3 -c "
import json, sys
for l in sys.stdin:
    j = json.loads(l)
    print('small_$3', j['bytes'], '%.2f' % j['per_gpu_p50_us'][0])" >>"$rows" || say "  small $3 failed (see $out/small.err)"
  done
  timeout 60 build-gpu/copy_round_trip 0 1 $sizes_small 2>>"$out/copy_rt.err" | sed 's/^/copy_rt /' >>"$rows"
fi

# ---- blocks: the local transport's KV blocks ----------------------------------------
if wants blocks; then
  for nb in "256 16K" "1024 4K"; do
    set -- $nb
    say "local: $1 x $2 scattered against one contiguous write"
    line=$(FERRY_TRANSPORT=local timeout 120 $FERRY bench --local --gpus 0 --peer-gpus 1 --blocks "$1" \
      --block-size "$2" --scatter --iters 200 --warmup 20 --verify 2>>"$out/blocks.err" | tail -1)
    echo "$line" >>"$out/blocks.txt"
    # "256 x 16K scattered  GB/s p50_us contig_GB/s contig_p50_us ratio ok"
    row "blocks_$1x$2 $(awk '{print $5, $6, $7, $8, $9, $10}' <<<"$line")"
  done
  for size in 4K 16K 64K 256K 1M; do
    case $size in *K) bytes=$((${size%K} * 1024)) ;; *M) bytes=$((${size%M} * 1048576)) ;; esac
    say "one block of $size posted -> done: ferry local write against the copy engine"
    f=$(FERRY_TRANSPORT=local timeout 120 $FERRY bench --local --op write --sizes "$size" --gpus 0 --peer-gpus 1 \
      --iters 3000 --warmup 300 2>&1 >/dev/null | tee -a "$out/block1.err" |
      sed -n 's/.*\] write .*p50 \([0-9.]*\) us.*/\1/p' | tail -1)
    ce=$(FERRY_NCCL_LIBRARY= timeout 120 build-gpu/nccl_blocks 1 "$bytes" 3000 2>>"$out/block1.err" |
      awk '$1 == "contiguous" { print $4; exit }')
    row "block1 $bytes ${f:-nan} ${ce:-nan}"
  done
fi

# ---- nvlink: bulk over the local transport against the copy engines -----------------
if wants nvlink; then
  say "ferry_local_bench (the local transport against the copy engines and NCCL)"
  timeout 300 build-gpu/bin/ferry_local_bench "$NCCL_LIB" >"$out/local_bench.txt" 2>"$out/local_bench.err"
  # "size ferry_us nccl_us ce_us ferry_GB/s x_nccl x_ce"
  awk '$1 ~ /^[0-9]+$/ && NF == 7 { print "nvlink", $1, $2, $4, $7 }' "$out/local_bench.txt" >>"$rows"
fi

# ---- order: what following torch's stream costs ------------------------------------
if wants order; then
  for transport in local tcp; do
    say "stream order latency, $transport"
    timeout 120 python3 bench/gpu/stream_order_latency.py --transport "$transport" >"$out/order_$transport.txt" \
      2>&1 || say "  stream_order_latency $transport failed"
  done
fi

say "round done"
python3 bench/gpu/two_gpu_table.py "$out"

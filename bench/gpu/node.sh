#!/usr/bin/env bash
# A whole node (four or eight GPUs), in two parts that each fit a 10-minute
# window:
#
#   PART=node     builds, then
#                 1. the multi-GPU test: one engine driving half of the GPUs
#                    talks to a peer engine driving the other half, every
#                    operation verified, over the local transport and over TCP,
#                    while nvidia-smi is sampled: a process may hold memory
#                    only on its own GPUs;
#                 2. the copy engines on every directed pair (ferry profile
#                    --backend ce, 256 MiB and 1 GiB), then every GPU i
#                    writing to GPU (i+1) mod N at once through the local
#                    transport, one bench process per pair (--gate starts
#                    their timed phases together), verified: the aggregate
#                    against the sum of those pairs' copy-engine figures;
#                 3. ferry bench --gpus (first half) --peer-gpus (second half):
#                    one engine per side, all pairs at once, local and TCP,
#                    against the same pairs run one at a time.
#   PART=profile  bench/gpu/profile.sh over every GPU: ce, nccl and ferry on
#                 every directed pair, full size range, pair matrices and weak
#                 links.
#
# Usage (repository root): PART=node|profile bash bench/gpu/node.sh [OUTDIR]
# Prints a short table last; logs and JSON go to OUTDIR (default
# build-gpu/node).
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
part=${PART:-node}
out=${1:-build-gpu/node}
mkdir -p "$out"
start=$(date +%s)
say() { echo "[node $(($(date +%s) - start))s] $*" >&2; }

nvidia-smi --query-gpu=index,name,uuid,memory.used --format=csv,noheader | tee "$out/gpus.txt" >&2
n=$(wc -l <"$out/gpus.txt")
[ "$n" -ge 4 ] || echo "node: $n GPUs; a node run wants four or eight (running anyway)" >&2
[ "$n" -ge 2 ] || { echo "node: needs at least two GPUs" >&2; exit 77; }
half=$((n / 2))
[ "$half" -gt 4 ] && half=4

if [[ $part == profile ]]; then
  TESTS=0 PROFILE_GPUS=all bash bench/gpu/profile.sh "$out/profile"
  exit $?
fi

say "configure and build (build-gpu)"
# shellcheck source=bench/gpu/configure.sh
source bench/gpu/configure.sh
gpu_configure "$out/cmake.log" || exit 1
if ! timeout 400 ninja -C build-gpu ferry_cli ferry_local_multi_gpu_test >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi
ferry=build-gpu/bin/ferry
say "built"
table=()
: >"$out/table.txt"
# A row of the closing table, also kept in OUTDIR/table.txt as it comes.
row() {
  table+=("$1")
  echo "$1" >>"$out/table.txt"
}

# Samples which processes hold memory on which GPU until its file is removed.
watch_gpus() {  # LOG STOPFILE
  while [ -e "$2" ]; do
    nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits >>"$1" 2>/dev/null
    sleep 0.3
  done
}
# Every sampled (pid, GPU) must be one the process was meant to use. Args: LOG,
# then PID=GPU,GPU... for each process watched. Prints a verdict line.
check_gpus() {
  python3 - "$out/gpus.txt" "$@" <<'EOF'
import sys
index = {line.split(",")[2].strip(): int(line.split(",")[0]) for line in open(sys.argv[1]) if line.strip()}
log = sys.argv[2]
allowed = {}
for spec in sys.argv[3:]:
    pid, gpus = spec.split("=")
    allowed[pid] = {int(g) for g in gpus.split(",")}
seen, bad = {}, []
for line in open(log):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 3 or parts[0] not in allowed:
        continue
    gpu = index.get(parts[1], -1)
    seen.setdefault(parts[0], set()).add(gpu)
    if gpu not in allowed[parts[0]]:
        bad.append(f"pid {parts[0]} holds {parts[2]} MiB on GPU {gpu}")
watched = ", ".join(f"{p} on {sorted(seen.get(p, set()))}" for p in allowed)
if bad:
    print("FAILED: " + "; ".join(sorted(set(bad))) + f" (seen: {watched})")
elif not seen:
    print("NOT CHECKED: no sample caught the processes")
else:
    print(f"ok: memory only on their own GPUs (seen: {watched})")
EOF
}

# Prints "CHILD GRANDCHILD" of PID (timeout(1) -> the program -> the process
# it starts), waiting up to 10 s for the grandchild to appear.
child_and_grandchild() {
  local child="" grandchild=""
  for _ in $(seq 1 200); do
    child=$(pgrep -P "$1" | head -1)
    [ -n "$child" ] && grandchild=$(pgrep -P "$child" | head -1)
    [ -n "$grandchild" ] && break
    sleep 0.05
  done
  echo "$child $grandchild"
}

# 1. One engine per half, every operation, local and TCP; memory on own GPUs only.
a_gpus=$(seq -s, 0 $((half - 1)))
b_gpus=$(if [ "$n" -ge 4 ]; then seq -s, "$half" $((2 * half - 1)); else echo "$a_gpus"; fi)
for t in local tcp; do
  say "multi-GPU test over $t: A on $a_gpus, B on $b_gpus"
  log=$out/smi-multi-$t.csv stop=$out/.watch-$t
  : >"$log" && touch "$stop"
  watch_gpus "$log" "$stop" &
  watcher=$!
  FERRY_TRANSPORT=$t timeout 300 build-gpu/bin/ferry_local_multi_gpu_test >"$out/multi-$t.log" 2>&1 &
  test_pid=$!
  # timeout(1) runs the test (process A), which forks its peer (process B).
  read -r a_pid b_pid <<<"$(child_and_grandchild "$test_pid")"
  wait "$test_pid"
  rc=$?
  rm -f "$stop"
  wait "$watcher"
  tail -3 "$out/multi-$t.log" >&2
  grep FAIL "$out/multi-$t.log" | head -10 >&2
  gpus_verdict=$(check_gpus "$log" "$a_pid=$a_gpus" "$b_pid=$b_gpus")
  row "multi-GPU test, $t: $(tail -1 "$out/multi-$t.log" | cut -c1-160) (rc $rc); nvidia-smi: $gpus_verdict"
done

# 2. Copy engines pair by pair, then every GPU writing to the next at once.
say "copy engines on every directed pair (ferry profile --backend ce)"
rm -rf "$out/ce-pairs"
timeout 300 "$ferry" profile --backend ce --sizes 256M,1G --warmup 3 --reps 10 --no-reference --drift-seconds 0 \
  --out "$out/ce-pairs" >"$out/ce-pairs.table" 2>"$out/ce-pairs.log" || tail -5 "$out/ce-pairs.log" >&2
say "every GPU i writes to GPU (i+1) mod $n at once, one bench process per pair"
gate=$(mktemp -d)
log=$out/smi-ring.csv stop=$out/.watch-ring
: >"$log" && touch "$stop"
watch_gpus "$log" "$stop" &
watcher=$!
pids=() specs=()
for i in $(seq 0 $((n - 1))); do
  j=$(((i + 1) % n))
  FERRY_TRANSPORT=local timeout 300 "$ferry" bench --local --gpus "$i" --peer-gpus "$j" --op write --sizes 256M,1G --iters 200 --warmup 5 \
    --verify --gate "$gate:$n" --json - >"$out/ring-$i.json" 2>"$out/ring-$i.log" &
  pids+=($!)
done
for i in $(seq 0 $((n - 1))); do
  # timeout(1) -> ferry bench (GPU i) -> its target (GPU i+1)
  read -r b t <<<"$(child_and_grandchild "${pids[$i]}")"
  specs+=("$b=$i" "$t=$(((i + 1) % n))")
done
ring_rc=0
for p in "${pids[@]}"; do wait "$p" || ring_rc=$?; done
rm -f "$stop"
wait "$watcher"
rm -rf "$gate"
ring_gpus=$(check_gpus "$log" "${specs[@]}")
ring=$(python3 - "$out" "$n" <<'EOF'
import json, sys
import pandas as pd
out, n = sys.argv[1], int(sys.argv[2])
log = pd.read_csv(f"{out}/ce-pairs/execution_log.csv")
ops = log[log.role.isin(["recv", "copy"])]
ce = (ops.groupby(["src", "dst", "size"]).device_ns.median()).reset_index()
ce["gbps"] = ce["size"] / ce["device_ns"]
rows = {}
for i in range(n):
    for line in open(f"{out}/ring-{i}.json"):
        r = json.loads(line)
        rows.setdefault(r["bytes"], []).append((i, r))
for size, got in sorted(rows.items()):
    if len(got) != n:
        print(f"{size >> 20} MiB: only {len(got)} of {n} processes reported")
        continue
    first = min(r["start_ns"] for _, r in got)
    last = max(r["end_ns"] for _, r in got)
    moved = sum(r["bytes"] * r["iters"] for _, r in got)
    together = moved / (last - first)  # bytes per ns = GB/s
    summed = sum(r["per_gpu_bytes_per_s"][0] for _, r in got) / 1e9
    ce_sum = 0.0
    for i, _ in got:
        m = ce[(ce.src == i) & (ce.dst == (i + 1) % n) & (ce["size"] == size)]
        ce_sum += float(m.gbps.iloc[0]) if len(m) else float("nan")
    skew = max(r["start_ns"] for _, r in got) - first
    ok = all(r["verified"] for _, r in got)
    print(f"{size >> 20:5d} MiB: aggregate {together:7.1f} GB/s over the common window (per-process sum "
          f"{summed:7.1f}), copy engines' pair sum {ce_sum:7.1f} GB/s, ratio {together / ce_sum:.3f} "
          f"(target >= 0.95); start skew {skew / 1e3:.0f} us; verified {'ok' if ok else 'FAILED'}")
EOF
)
echo "$ring" >&2
while IFS= read -r line; do row "ring of $n, local, write: $line"; done <<<"$ring"
row "ring of $n: exit $ring_rc; nvidia-smi: $ring_gpus"

# 3. One engine per side driving half of the GPUs, against the same pairs one at a time.
for t in local tcp; do
  say "ferry bench --gpus $a_gpus --peer-gpus $b_gpus over $t"
  FERRY_TRANSPORT=$t timeout 300 "$ferry" bench --local --gpus "$a_gpus" --peer-gpus "$b_gpus" --op write \
    --sizes 64M,1G --iters 40 --verify --json - >"$out/halves-$t.json" 2>"$out/halves-$t.log" || tail -3 "$out/halves-$t.log" >&2
  IFS=, read -ra as <<<"$a_gpus"
  IFS=, read -ra bs <<<"$b_gpus"
  for k in "${!as[@]}"; do
    FERRY_TRANSPORT=$t timeout 300 "$ferry" bench --local --gpus "${as[$k]}" --peer-gpus "${bs[$k]}" --op write \
      --sizes 64M,1G --iters 40 --verify --json - >"$out/alone-$t-$k.json" 2>"$out/alone-$t-$k.log" ||
      tail -3 "$out/alone-$t-$k.log" >&2
  done
  line=$(python3 - "$out" "$t" "${#as[@]}" <<'EOF'
import json, sys
out, t, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
def load(path):
    try:
        return {r["bytes"]: r for r in map(json.loads, open(path))}
    except (OSError, ValueError) as e:
        return {}
together = load(f"{out}/halves-{t}.json")
alone = [load(f"{out}/alone-{t}-{i}.json") for i in range(k)]
cells = []
for size, r in sorted(together.items()):
    s = sum(a[size]["aggregate_bytes_per_s"] for a in alone if size in a)
    ok = r["verified"] and all(a.get(size, {}).get("verified", False) for a in alone)
    cells.append(f"{size >> 20} MiB {r['aggregate_bytes_per_s'] / 1e9:.1f} GB/s together vs {s / 1e9:.1f} "
                 f"one at a time ({r['aggregate_bytes_per_s'] / s:.3f}), verified {'ok' if ok else 'FAILED'}")
print("; ".join(cells) if cells else "no results")
EOF
)
  row "halves over $t ($a_gpus -> $b_gpus, write): $line"
done

echo "== node ($part), $(head -1 "$out/gpus.txt" | cut -d, -f2 | xargs) x$n, $(($(date +%s) - start)) s"
printf '%s\n' "${table[@]}"

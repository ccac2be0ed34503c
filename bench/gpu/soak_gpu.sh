#!/usr/bin/env bash
# The fault-injecting soak (bench/soak.sh, docs/security.md "Soak") with GPU
# memory, on a host with two GPUs: the survivor's memory on GPU 0, the
# peers' on GPU 1. Over TCP the bytes are staged through host memory; the
# local transport moves them GPU to GPU through CUDA IPC.
#
#   PART=memcheck  builds, then SECONDS (default 60) of soak on each transport
#                  with every process under compute-sanitizer's memcheck, in
#                  one report (the driver's answers to the engine's pointer
#                  probes, "invalid value" on host memory by design, are not
#                  counted)
#   PART=soak      builds, then MINUTES (default 9) of soak on both
#                  transports at once
#
# Usage (repository root): PART=memcheck|soak bash bench/gpu/soak_gpu.sh [LENGTH] [OUTDIR]
# Prints a short table last; logs and each run's JSON report go to OUTDIR
# (default build-gpu/soak).
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
part=${PART:-soak}
out=${2:-build-gpu/soak}
mkdir -p "$out"
start=$(date +%s)
say() { echo "[soak_gpu $(($(date +%s) - start))s] $*" >&2; }

nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader | tee "$out/host.txt" >&2
[ "$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)" -ge 2 ] || { echo "soak_gpu: needs two GPUs" >&2; exit 77; }

say "configure and build (build-gpu)"
# shellcheck source=bench/gpu/configure.sh
source bench/gpu/configure.sh
gpu_configure "$out/cmake.log" || exit 1
if ! timeout 300 ninja -C build-gpu ferry_soak >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi
say "built"

summary=()
row() {  # transport, json, rc
  local t=$1 json=$2 rc=$3
  if [ -s "$json" ]; then
    summary+=("$(python3 - "$t" "$json" "$rc" <<'EOF'
import json, sys
t, path, rc = sys.argv[1], sys.argv[2], sys.argv[3]
r = json.load(open(path))
faults = r.get("faults", {})
injected = ",".join(f"{k}={v}" for k, v in sorted(faults.items()) if v)
print(f"{t:6} {r.get('seconds', 0):6.0f}s {'passed' if r.get('passed') else 'FAILED'} rc {rc}: "
      f"ops {r.get('operations', 0)} GiB {r.get('bytes_verified', 0) / 2**30:.1f} corruptions {r.get('corruptions')} "
      f"hangs {r.get('hangs')} crashes {r.get('crashes')} leaked fds/threads {r.get('leaked_fds')}/{r.get('leaked_threads')} "
      f"RSS {r.get('rss_start_kib', 0) // 1024}->{r.get('rss_end_kib', 0) // 1024} MiB; faults {injected}")
EOF
)")
  else
    summary+=("$(printf '%-6s no report (rc %s), see %s' "$t" "$rc" "$out")")
  fi
}

if [[ $part == memcheck ]]; then
  seconds=${1:-60}
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  for t in tcp local; do
    say "memcheck: $seconds s on $t"
    # One report for the whole tree of processes: the survivor and the peers
    # (every restart too) run under the sanitizer and report to this one
    # front end, which prints one summary at the end. Their standard output
    # is the soak's control channel, so the report goes to a file.
    timeout $((seconds * 4 + 120)) "$cs" --tool memcheck --target-processes all --report-api-errors no \
      --error-exitcode 9 --print-limit 20 --log-file "$out/memcheck-$t.report" \
      build-gpu/bin/ferry_soak run --seconds "$seconds" --gpu --transport "$t" --json "$out/memcheck-$t.json" \
      --out "$out/memcheck-$t" >"$out/memcheck-$t.log" 2>&1
    rc=$?
    errors=$(grep -cE "^========= (Invalid|Program hit|Uninitialized|Leaked|Malloc|Cuda API failed)" "$out/memcheck-$t.report")
    summary=$(grep -h "ERROR SUMMARY" "$out/memcheck-$t.report" || echo "no summary")
    say "memcheck $t: rc $rc, $errors errors listed; ${summary#========= }"
    grep -E "^=========" "$out/memcheck-$t.report" | grep -v "ERROR SUMMARY: 0 errors\|COMPUTE-SANITIZER" | head -20 >&2
    row "$t" "$out/memcheck-$t.json" "$rc (memcheck: $errors errors listed, ${summary#========= })"
  done
else
  minutes=${1:-9}
  say "soak: $minutes min on tcp and local at once"
  pids=()
  for t in tcp local; do
    timeout $((${minutes%.*} * 60 + 240)) bash bench/soak.sh "$minutes" --transport "$t" --bin build-gpu/bin/ferry_soak \
      --json-dir "$out" -- --gpu --out "$out/soak-$t" >"$out/soak-$t.log" 2>&1 &
    pids+=($!)
  done
  rcs=()
  for p in "${pids[@]}"; do
    wait "$p"
    rcs+=($?)
  done
  row tcp "$out/soak-tcp.json" "${rcs[0]}"
  row local "$out/soak-local.json" "${rcs[1]}"
  tail -n 40 "$out/soak-tcp.log" "$out/soak-local.log" >&2
fi

echo "== soak_gpu ($part), $(head -1 "$out/host.txt" | cut -d, -f2 | xargs) x$(wc -l <"$out/host.txt")"
printf '%s\n' "${summary[@]}"

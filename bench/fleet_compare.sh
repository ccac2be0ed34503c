#!/usr/bin/env bash
# Two builds of ferry against each other as one TCP target serving N peers
# (`ferry bench --local --peers N`), in one invocation: for each N, the
# before build and then the after build, so that they share the host's
# state. Prints one row per build and N: the target's threads, fds and RSS
# (N connections, loaded), aggregate GB/s, the slowest peer's share of the
# mean, and the peers' p50 (median peer) and p99 (worst peer).
# Usage: bench/fleet_compare.sh BEFORE_FERRY AFTER_FERRY [N...]   (default 1 8 64 256)
set -euo pipefail
before=$1 after=$2
shift 2
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1 8 64 256)
out=$(mktemp -d)
printf '%-6s %5s %8s %8s %6s %8s %9s %8s %10s %10s\n' build N threads ferry_th fds RSS_MiB aggr_GB/s slowest p50_us p99_us
for n in "${counts[@]}"; do
  for which in before after; do
    bin=$before
    [ "$which" = after ] && bin=$after
    "$bin" bench --local --transport tcp --peers "$n" --op write --sizes 1M --iters 200 --json "$out/$which-$n.json" \
      >"$out/$which-$n.txt" 2>&1
    /usr/bin/python3 - "$out/$which-$n.json" "$which" "$n" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["results"][0]
t = d["target"]["load"]
print("%-6s %5s %8d %8d %6d %8.1f %9.2f %8.2f %10.0f %10.0f" % (
    sys.argv[2], sys.argv[3], t["threads"], t["engine_threads"], t["fds"], t["rss_bytes"] / 2**20,
    r["bytes_per_s"] / 1e9, r["slowest_share"], r["lat_us"]["p50_median"], r["lat_us"]["p99_max"]))
EOF
  done
done
echo "(JSON and tables of each run: $out)"

#!/usr/bin/env bash
# ferry bench --local --peers N on loopback, host memory:
#   bench_peers_cli_test.sh FERRY_BINARY
# N initiator engines against one target process must each move verified
# bytes (one JSON row per peer, positive rates), and the JSON must carry the
# setup time and the target's threads, fds and RSS for each phase; --peers 0,
# too many, and --peers without --local must fail with a message naming it.
set -uo pipefail
ferry=$1
source "$(dirname "$0")/bench_cli_lib.sh"

for op in write send; do
  run "$op" --peers 4 --op "$op" --sizes 64K,1M --iters 20 --warmup 2 --verify
  python3 - "$work/$op.json" "$op" <<'PY' || fail "$op: results not as expected"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["config"]["peers"] == 4 and j["config"]["op"] == sys.argv[2], j["config"]
assert j["setup"]["connect_s"] > 0, j["setup"]
t = j["target"]
assert t["pid"] > 0, t
for phase in ("no_peer", "one_peer", "idle", "load"):
    s = t[phase]
    assert s["threads"] >= 1 and s["fds"] >= 3 and s["rss_bytes"] > 0, (phase, s)
    assert 0 <= s["engine_threads"] <= s["threads"], (phase, s)
# Four peers hold more of the target than one does: a descriptor each at least.
assert t["idle"]["fds"] >= t["one_peer"]["fds"] + 3, t
assert t["load"]["samples"] >= 2, t["load"]
rows = j["results"]
assert [r["bytes"] for r in rows] == [65536, 1 << 20], rows
for r in rows:
    assert r["verified"] is True and r["bytes_per_s"] > 0, r
    assert 0 < r["slowest_share"] <= 1.0 + 1e-9, r
    assert len(r["peers"]) == 4, r
    for p in r["peers"]:
        assert p["verified"] is True and p["bytes_per_s"] > 0 and 0 < p["lat_us"]["p50"] <= p["lat_us"]["p99"], p
PY
done
grep -q "peers loaded" "$work/write.out" || fail "the table has no row for the target under load"
grep -q "connection setup: 4 peers" "$work/write.out" || fail "the table does not say how long 4 peers took to connect"

# JSON on stdout alone.
timeout 60 "$ferry" bench --local --peers 2 --sizes 64K --iters 5 --json - >"$work/stdout.json" 2>"$work/stdout.err" ||
  { cat "$work/stdout.err" >&2; fail "--json - exited $?"; }
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert len(j["results"][0]["peers"]) == 2' \
  "$work/stdout.json" || fail "--json - is not one JSON document with 2 peers"

for bad in 0 1025 x; do
  timeout 30 "$ferry" bench --local --peers "$bad" --sizes 64K >"$work/bad" 2>&1 && fail "--peers $bad accepted"
  grep -q -- "--peers" "$work/bad" || { cat "$work/bad" >&2; fail "--peers $bad: no message naming the flag"; }
done
timeout 30 "$ferry" bench --peer 127.0.0.1:1 --peers 4 --sizes 64K >"$work/bad" 2>&1 && fail "--peers with --peer accepted"
grep -q -- "--peers N runs against a --local target" "$work/bad" ||
  { cat "$work/bad" >&2; fail "--peers with --peer: no message saying it needs --local"; }
timeout 30 "$ferry" bench --local --peers 2 --gpus 0 --sizes 64K >"$work/bad" 2>&1 && fail "--peers with --gpus accepted"
grep -q -- "--peers does not combine" "$work/bad" || { cat "$work/bad" >&2; fail "--peers with --gpus: no message"; }
echo "PASS"

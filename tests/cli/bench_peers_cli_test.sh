#!/usr/bin/env bash
# ferry bench --local --peers N / --fan-out N on loopback, host memory:
#   bench_peers_cli_test.sh FERRY_BINARY
# N initiator engines against one target process (and one initiator engine
# against N target engines) must each move verified bytes (one JSON row per
# connection, positive rates), and the JSON must carry the setup time and the
# sampled process's threads, fds and RSS for each phase, its CPU while idle
# and (--peers) a 4 KiB round trip idle and under load; 0, too many, both
# flags, and either without --local must fail with a message naming it.
set -uo pipefail
ferry=$1
source "$(dirname "$0")/bench_cli_lib.sh"

check() {  # name, op, connections, fan_out (0/1): the JSON of one run
  python3 - "$work/$1.json" "$2" "$3" "$4" <<'PY' || fail "$1: results not as expected"
import json, sys
j = json.load(open(sys.argv[1]))
op, n, fan_out = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
c = j["config"]
assert c["peers"] == n and c["op"] == op and c["fan_out"] == fan_out and c["transport"] == "tcp", c
assert j["setup"]["connect_s"] > 0, j["setup"]
# --peers samples the target process; --fan-out this one, the initiator.
t = j["initiator" if fan_out else "target"]
assert t["pid"] > 0, t
for phase in ("no_peer", "one_peer", "idle", "load"):
    s = t[phase]
    assert s["threads"] >= 1 and s["fds"] >= 3 and s["rss_bytes"] > 0, (phase, s)
    assert 0 <= s["engine_threads"] <= s["threads"], (phase, s)
# n connections hold more than one does: a descriptor each at least.
assert t["idle"]["fds"] >= t["one_peer"]["fds"] + n - 1, t
assert t["load"]["samples"] >= 2, t["load"]
# The sampled process's CPU while every connection idled, as a share of a core.
assert 0 <= t["idle"]["cpu_share"] < 64, t["idle"]
if not fan_out:
    # --peers: the 4 KiB round trip alone and during the first size's phase.
    pr = j["results"][0]["probe"]
    for k in ("idle_lat_us", "load_lat_us"):
        assert 0 < pr[k]["p50"] <= pr[k]["p99"], pr
    assert 0 <= pr["load_covered"] <= 1, pr
rows = j["results"]
assert [r["bytes"] for r in rows] == [65536, 1 << 20], rows
for r in rows:
    assert r["verified"] is True and r["bytes_per_s"] > 0, r
    assert 0 < r["slowest_share"] <= 1.0 + 1e-9, r
    assert len(r["peers"]) == n, r
    for p in r["peers"]:
        assert p["verified"] is True and p["bytes_per_s"] > 0 and 0 < p["lat_us"]["p50"] <= p["lat_us"]["p99"], p
PY
}

for op in write send; do
  run "$op" --peers 4 --op "$op" --sizes 64K,1M --iters 20 --warmup 2 --verify
  check "$op" "$op" 4 0
done
grep -q "4 connections loaded" "$work/write.out" || fail "the table has no row for the target under load"
grep -q "connection setup: 4 connections" "$work/write.out" || fail "the table does not say how long 4 peers took to connect"
grep -q "^target (pid" "$work/write.out" || fail "--peers: the table does not name the target as the process sampled"
grep -q "^4K round trip: idle p50" "$work/write.out" || fail "--peers: the table has no 4 KiB round trip idle and under load"
grep -q "^target CPU with 4 connections idle" "$work/write.out" || fail "--peers: the table has no idle CPU of the target"
run fanout --fan-out 3 --op write --sizes 64K,1M --iters 20 --warmup 2 --verify
check fanout write 3 1
grep -q "^initiator (pid" "$work/fanout.out" || fail "--fan-out: the table does not name the initiator as the process sampled"

# JSON on stdout alone.
timeout 60 "$ferry" bench --local --peers 2 --sizes 64K --iters 5 --json - >"$work/stdout.json" 2>"$work/stdout.err" ||
  { cat "$work/stdout.err" >&2; fail "--json - exited $?"; }
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert len(j["results"][0]["peers"]) == 2' \
  "$work/stdout.json" || fail "--json - is not one JSON document with 2 peers"

for flag in --peers --fan-out; do
  for bad in 0 1025 x; do
    timeout 30 "$ferry" bench --local "$flag" "$bad" --sizes 64K >"$work/bad" 2>&1 && fail "$flag $bad accepted"
    grep -q -- "$flag" "$work/bad" || { cat "$work/bad" >&2; fail "$flag $bad: no message naming the flag"; }
  done
done
timeout 30 "$ferry" bench --local --peers 2 --fan-out 2 --sizes 64K >"$work/bad" 2>&1 && fail "--peers with --fan-out accepted"
grep -q -- "give one of --peers N and --fan-out N" "$work/bad" || { cat "$work/bad" >&2; fail "--peers with --fan-out: no message"; }
timeout 30 "$ferry" bench --peer 127.0.0.1:1 --peers 4 --sizes 64K >"$work/bad" 2>&1 && fail "--peers with --peer accepted"
grep -q -- "--peers N runs against a --local target" "$work/bad" ||
  { cat "$work/bad" >&2; fail "--peers with --peer: no message saying it needs --local"; }
timeout 30 "$ferry" bench --local --peers 2 --gpus 0 --sizes 64K >"$work/bad" 2>&1 && fail "--peers with --gpus accepted"
grep -q -- "--peers does not combine" "$work/bad" || { cat "$work/bad" >&2; fail "--peers with --gpus: no message"; }
echo "PASS"

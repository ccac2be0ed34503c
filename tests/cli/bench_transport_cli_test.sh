#!/usr/bin/env bash
# Which transport `ferry bench` measured, said wherever its numbers go: two
# engines on one host take the local transport unless told otherwise, and a
# figure set beside a TCP tool's (iperf3, sockperf) must be TCP's. The table
# header, the JSON and the sweep CSV name the transport; a flag that does
# nothing on the transport in use (--chunk, --window, --streams on the local
# transport) gets a one-line note on stderr; --transport picks one; and the
# anchor scripts in bench/ force TCP.
# Usage: bench_transport_cli_test.sh PATH/TO/ferry
set -uo pipefail
ferry=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/cli/bench_cli_lib.sh
source "$(dirname "$0")/bench_cli_lib.sh"
unset FERRY_TRANSPORT  # the default: same-host engines take the local transport

small=(--sizes 4K --iters 2 --warmup 0)

json_transport() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["transport"])' "$1"; }

expect_transport() {  # name, transport
  grep -Eq "^# .*over the $2 transport" "$work/$1.out" ||
    { cat "$work/$1.out" >&2; fail "$1: the table's header does not say the $2 transport"; }
  [ "$(json_transport "$work/$1.json")" = "$2" ] || fail "$1: JSON transport is not $2"
}

note='does nothing on the local transport'

# Without FERRY_TRANSPORT: the local transport, said in the table and JSON.
run auto "${small[@]}" >/dev/null
expect_transport auto local
grep -q "$note" "$work/auto.err" && fail "auto: a note about flags not given"

# FERRY_TRANSPORT=tcp, and --transport tcp: TCP, and no note for TCP's flags.
FERRY_TRANSPORT=tcp run tcp "${small[@]}" --chunk 64K --window 4 >/dev/null
expect_transport tcp tcp
grep -q "nothing on the" "$work/tcp.err" && { cat "$work/tcp.err" >&2; fail "tcp: a note for TCP's own flags"; }
run flag "${small[@]}" --transport tcp >/dev/null
expect_transport flag tcp
# The flag outranks the variable, for the target too.
FERRY_TRANSPORT=tcp run flag_over_env "${small[@]}" --transport local >/dev/null
expect_transport flag_over_env local
expect_usage() {  # pattern, args...
  local pattern=$1
  shift
  timeout 30 "$ferry" bench "$@" >"$work/usage.out" 2>"$work/usage.err"
  local rc=$?
  [ $rc = 2 ] || { cat "$work/usage.err" >&2; fail "bench $*: exit $rc, expected 2"; }
  grep -q -- "$pattern" "$work/usage.err" || { cat "$work/usage.err" >&2; fail "bench $*: no '$pattern'"; }
}
expect_usage "--transport" --local --transport udp

# --chunk, --window, --streams on the local transport: one line naming them.
run chunk "${small[@]}" --chunk 64K >/dev/null
expect_transport chunk local
[ "$(grep -c "$note" "$work/chunk.err")" = 1 ] || { cat "$work/chunk.err" >&2; fail "--chunk on local: no one-line note"; }
grep -q -- "--chunk $note" "$work/chunk.err" || { cat "$work/chunk.err" >&2; fail "--chunk on local: the note does not name --chunk"; }
run three "${small[@]}" --chunk 64K --window 4 --streams 2 >/dev/null
grep -q -- "--streams, --chunk and --window do nothing on the local transport" "$work/three.err" ||
  { cat "$work/three.err" >&2; fail "three TCP flags on local: no note naming them"; }

# A sweep: the CSV says the transport of every row; on local, a note that
# the combinations measure the same thing.
sweep() {  # name, args...
  local name=$1
  shift
  (cd "$work" && timeout 60 "$ferry" bench --local "${small[@]}" --sweep "$work/$name.csv" --sweep-chunk 64K,128K \
    --sweep-window 4 --sweep-streams 1 "$@" 2>"$work/$name.err") || { cat "$work/$name.err" >&2; fail "$name: exit $?"; }
  head -1 "$work/$name.csv" | grep -q ',transport$' || { cat "$work/$name.csv" >&2; fail "$name: no transport column"; }
}
sweep sweep_local
[ "$(tail -n +2 "$work/sweep_local.csv" | grep -c ',local$')" = 2 ] || { cat "$work/sweep_local.csv" >&2; fail "sweep on local: rows"; }
grep -q "do nothing on the local transport" "$work/sweep_local.err" ||
  { cat "$work/sweep_local.err" >&2; fail "sweep on local: no note"; }
sweep sweep_tcp --transport tcp
[ "$(tail -n +2 "$work/sweep_tcp.csv" | grep -c ',tcp$')" = 2 ] || { cat "$work/sweep_tcp.csv" >&2; fail "sweep on tcp: rows"; }
grep -q "nothing on the" "$work/sweep_tcp.err" && { cat "$work/sweep_tcp.err" >&2; fail "sweep on tcp: a note"; }

# --gpus host (one JSON object a size): the transport in each.
timeout 60 "$ferry" bench --local "${small[@]}" --gpus host --json - >"$work/gpus.out" 2>"$work/gpus.err" ||
  { cat "$work/gpus.err" >&2; fail "--gpus host: exit $?"; }
python3 -c 'import json,sys; assert all(json.loads(l)["transport"] == "local" for l in open(sys.argv[1])), "no transport"' \
  "$work/gpus.out" || fail "--gpus host --json -: the transport is not in every line"

# The scripts that set ferry beside iperf3 and sockperf force TCP on every
# ferry bench they run, and check that the table says TCP.
for script in bench/tcp_throughput.sh bench/pingpong_latency.sh bench/compare_builds.sh; do
  lines=$(grep -E 'bench --local' "$root/$script")
  [ -n "$lines" ] || fail "$script: no ferry bench --local"
  unforced=$(grep -v -e '--transport tcp' -e 'FERRY_TRANSPORT=tcp "\$1" bench' <<<"$lines")
  [ -z "$unforced" ] || fail "$script: ferry bench --local without --transport tcp: $unforced"
  grep -q 'tcp_table_value' "$root/$script" || fail "$script: does not check that the table says tcp"
done
source "$root/bench/common.sh"
[ "$(tcp_table_value 4K 2 <"$work/tcp.out")" = "$(awk '$1 == "4K" {print $2}' "$work/tcp.out")" ] ||
  fail "tcp_table_value: no value from a TCP table"
tcp_table_value 4K 2 <"$work/auto.out" >/dev/null 2>"$work/anchor.err" && fail "tcp_table_value: took a local table"
grep -q "measured the local transport, not tcp" "$work/anchor.err" || fail "tcp_table_value: no reason given"

echo "bench transport CLI test: passed"

#!/usr/bin/env bash
# The CLI's edges: --version, one exit code (2) for every usage error with
# the reason and the nearest command or flag, every bench flag checked before
# anything runs, `ferry config --json` with each value's source and a warning
# for FERRY_* typos, the transport named first, and Ctrl-C during a bench
# printing and writing what was measured.
# Usage: usage_cli_test.sh PATH/TO/ferry
set -uo pipefail
ferry=$1
# shellcheck source=tests/cli/bench_cli_lib.sh
source "$(dirname "$0")/bench_cli_lib.sh"

expect() {  # want_rc, pattern, args...
  local want=$1 pattern=$2
  shift 2
  timeout 30 "$ferry" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [ "$rc" = "$want" ] || { cat "$work/out" "$work/err" >&2; fail "ferry $*: exit $rc, expected $want"; }
  grep -Eq -- "$pattern" "$work/out" "$work/err" || { cat "$work/out" "$work/err" >&2; fail "ferry $*: no '$pattern'"; }
}

expect 0 '^ferry [0-9]+\.[0-9]+\.[0-9]+' --version
expect 2 "'bnech' is not a ferry command; did you mean 'bench'\?" bnech
expect 2 "is not a ferry command" frobnicate
expect 2 "subcommand is required" 
expect 2 "--streems: did you mean --streams\?" bench --local --streems 2
expect 2 "--streams: Value 0 not in range" bench --local --streams 0
expect 2 "--window: Value 0 not in range" bench --local --window 0
expect 2 "--streams: Value 1000 not in range" bench --local --streams 1000
grep -q "did not report its address" "$work/err" && fail "--streams 1000: a second, misleading error"
expect 2 "--chunk: " bench --local --chunk 12Q
expect 2 "chunk_bytes must be in 4 KiB" bench --local --chunk 1K
# An unwritable JSON path is refused before the run, not after it.
start=$(date +%s)
expect 2 "--json /nonexistent/x.json: cannot be written" bench --local --sizes 64M --iters 50 --json /nonexistent/x.json
[ $(($(date +%s) - start)) -le 5 ] || fail "--json: refused only after the run"
expect 2 "Run 'ferry bench --help'" bench --local --op fly

# ferry config: a source per value, JSON that parses, typos named.
FERRY_STREAMS=5 timeout 30 "$ferry" config --json >"$work/config.json" 2>"$work/config.err" || fail "config --json"
python3 - "$work/config.json" <<'PY' || fail "config --json: contents"
import json, sys
rows = {r["variable"]: r for r in json.load(open(sys.argv[1]))}
assert rows["FERRY_STREAMS"]["value"] == "5" and rows["FERRY_STREAMS"]["source"] == "environment", rows["FERRY_STREAMS"]
assert rows["FERRY_WINDOW"]["source"] == "default", rows["FERRY_WINDOW"]
assert all(set(r) == {"name", "variable", "default", "value", "source", "unit", "meaning"} for r in rows.values())
PY
FERRY_STREAMZ=4 timeout 30 "$ferry" config >"$work/config.txt" 2>"$work/config.err" || fail "config with a typo"
grep -q "FERRY_STREAMZ is set but is no ferry variable; did you mean FERRY_STREAMS?" "$work/config.err" ||
  { cat "$work/config.err" >&2; fail "config: no warning for FERRY_STREAMZ"; }
grep -Eq '^streams +FERRY_STREAMS +[0-9]+ +[0-9]+ +default ' "$work/config.txt" || fail "config: no source column"

# The header names the transport first; TCP's knobs only for TCP.
FERRY_TRANSPORT=tcp run tcp --sizes 4K --iters 5 >/dev/null
grep -Eq "over the tcp transport \((auto: )?[0-9]+ streams( in all)?, chunk" "$work/tcp.err" || { cat "$work/tcp.err" >&2; fail "tcp header"; }
FERRY_TRANSPORT=local run local --sizes 4K --iters 5 >/dev/null
grep -q "over the local transport, " "$work/local.err" || { cat "$work/local.err" >&2; fail "local header"; }
grep -q "streams" "$work/local.err" && fail "local header names TCP's streams"

# Ctrl-C after the first size: the table and the JSON hold what was measured, exit 130.
FERRY_TRANSPORT=tcp "$ferry" bench --local --sizes 4K,64M,64M,64M,64M,64M,64M,64M --iters 200 \
  --json "$work/int.json" >"$work/int.out" 2>"$work/int.err" &
pid=$!
for _ in $(seq 1 300); do
  grep -q "\[1/8\]" "$work/int.err" && break
  sleep 0.1
done
grep -q "\[1/8\]" "$work/int.err" || { kill -9 $pid; cat "$work/int.err" >&2; fail "the first size never finished"; }
kill -INT $pid
rc=0
for _ in $(seq 1 600); do
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
kill -0 $pid 2>/dev/null && { kill -9 $pid; fail "Ctrl-C: still running 60 s later"; }
wait $pid
rc=$?
[ $rc = 130 ] || { cat "$work/int.err" >&2; fail "Ctrl-C: exit $rc, expected 130"; }
grep -q "interrupted after [12] of 8 sizes" "$work/int.err" || { cat "$work/int.err" >&2; fail "Ctrl-C: no note"; }
grep -Eq '^4K ' "$work/int.out" || { cat "$work/int.out" >&2; fail "Ctrl-C: no partial table"; }
python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; assert 1 <= len(r) < 8, len(r)" "$work/int.json" ||
  fail "Ctrl-C: the JSON does not hold the sizes measured"
echo "usage CLI test: passed"

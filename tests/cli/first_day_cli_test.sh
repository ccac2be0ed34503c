#!/usr/bin/env bash
# What a user meets on a first day with the CLI (issue 59): usage lines that
# say `ferry`, not the binary's path; `ferry dir` commands named as typed and
# taking FERRY_DIRECTORY; sizes in every usual spelling (k/m/g/t, KB, KiB);
# exit 2 for every usage error and 1 for a run that failed; a repeated flag
# named in plain words; a port that is no ferry engine called so.
# Usage: first_day_cli_test.sh PATH/TO/ferry
set -uo pipefail
ferry=$(realpath "$1")
# shellcheck source=tests/cli/bench_cli_lib.sh
source "$(dirname "$0")/bench_cli_lib.sh"
unset FERRY_DIRECTORY

expect() {  # want_rc, pattern, args...
  local want=$1 pattern=$2
  shift 2
  timeout 30 "$ferry" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [ "$rc" = "$want" ] || { cat "$work/out" "$work/err" >&2; fail "ferry $*: exit $rc, expected $want"; }
  grep -Eq -- "$pattern" "$work/out" "$work/err" || { cat "$work/out" "$work/err" >&2; fail "ferry $*: no '$pattern'"; }
}
lacks() {  # pattern, what
  ! grep -Eq -- "$1" "$work/out" "$work/err" || { cat "$work/out" "$work/err" >&2; fail "$2"; }
}

# Usage lines name the command as typed, not /path/to/bin/ferry.
expect 0 '^Usage: ferry bench \[OPTIONS\]' bench --help
expect 0 '^Usage: ferry \[OPTIONS\] SUBCOMMAND' --help
expect 0 '^Usage: ferry dir ls ' dir ls --help
lacks "Usage: /" "--help shows the binary's path"

# ferry dir ls: the URL from FERRY_DIRECTORY; without either, the error
# names `ferry dir ls` and both ways to give it.
expect 2 '^ferry dir ls: .*FERRY_DIRECTORY' dir ls
lacks "ferry ls" "dir ls names a command that does not exist"
grep -q "Run 'ferry dir ls --help'" "$work/err" || fail "dir ls: the hint names another command"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
FERRY_DIRECTORY="redis://127.0.0.1:$port/first-day" expect 1 "redis://127.0.0.1:$port/first-day" dir ls --timeout 0.5
# dir get NAME with FERRY_DIRECTORY: NAME is the name, not a URL.
FERRY_DIRECTORY="redis://127.0.0.1:$port/first-day" expect 1 "redis://127.0.0.1:$port/first-day" dir get decode-0 --timeout 0.5
expect 2 '^ferry dir get: ' dir get decode-0
expect 2 "Run 'ferry dir watch --help'" dir watch a b c

# Sizes: k/m/g/t in either case, KB/MB/GB/TB and KiB/MiB/GiB/TiB, all 1024-based.
FERRY_TRANSPORT=tcp run sizes --sizes 1k,1m,2KB,1MiB,1Kib --iters 1 --warmup 0 --chunk 64KB >/dev/null
python3 -c 'import json,sys; r=[x["bytes"] for x in json.load(open(sys.argv[1]))["results"]]; assert r == [1024, 1048576, 2048, 1048576, 1024], r' \
  "$work/sizes.json" || fail "--sizes 1k,1m,2KB,1MiB,1Kib: not the sizes meant"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["config"]["chunk_bytes"]; assert c == 65536, c' \
  "$work/sizes.json" || fail "--chunk 64KB is not 64 KiB"
expect 0 '1KB = 1KiB = 1024' bench --help

# Exit 2 for a usage error, whichever flag it is in.
expect 2 '^ferry bench: --sizes: .*"1Q"' bench --local --sizes 1Q
expect 2 '^ferry bench: --chunk: ' bench --local --chunk 1Q
expect 2 '^ferry bench: --footprint: ' bench --local --footprint 1Q
expect 2 '^ferry bench: --max-memory: ' bench --local --max-memory lots
expect 2 '^ferry bench: --block-size: ' bench --local --blocks 4 --block-size 1Q
expect 2 '^ferry bench: --sweep-chunk: ' bench --local --sweep "$work/s.csv" --sweep-chunk 1Q
expect 2 '^ferry bench: --sweep-window: ' bench --local --sweep "$work/s.csv" --sweep-window four
expect 2 '^ferry bench: --sweep-streams: ' bench --local --sweep "$work/s.csv" --sweep-streams 1,x
expect 2 '^ferry bench: --sweep-nics: ' bench --local --sweep "$work/s.csv" --sweep-nics 0
expect 2 '^ferry bench: --gate: ' bench --local --gpus host --gate nowhere
# ...and 1 for a run that failed.
expect 1 '^ferry bench: connect to 127\.0\.0\.1:'"$port"': ' bench --peer "127.0.0.1:$port" --sizes 4K --iters 1

# A repeated flag, in plain words.
expect 2 '^ferry bench: --iters was given 2 times; give it once' bench --local --iters 2 --iters 3
lacks "At Most" "a repeated flag: CLI11's words"
expect 2 '^ferry bench: --op was given 3 times; give it once' bench --local --op send --op write --op read

# A port where something else answers: called no ferry engine, with what it said.
python3 - "$work/http.port" <<'PY' &
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
s.settimeout(30)
try:
    while True:
        # As a web server does: read the request, answer, and close once the
        # client has (closing with its bytes unread would reset the connection).
        c, _ = s.accept()
        c.settimeout(5)
        try:
            c.recv(65536)
            c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            c.shutdown(socket.SHUT_WR)
            while c.recv(65536):
                pass
        except OSError:
            pass
        c.close()
except socket.timeout:
    pass
PY
http=$!
trap 'kill $http 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 50); do [ -s "$work/http.port" ] && break; sleep 0.1; done
[ -s "$work/http.port" ] || fail "the HTTP stand-in did not start"
hport=$(cat "$work/http.port")
for transport in tcp auto; do
  FERRY_TRANSPORT=$transport expect 1 "is this a ferry engine\? \(it answered with 'HTTP'\)" \
    bench --peer "127.0.0.1:$hport" --sizes 4K --iters 1
done

echo "first-day CLI test: passed"

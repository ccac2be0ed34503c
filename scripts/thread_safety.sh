#!/usr/bin/env bash
# Checks every translation unit that compiles here (the library, the CLI,
# the soak, the Python module and every test binary; not the CUDA parts)
# with clang's -Wthread-safety, and fails on any report of the analysis: a
# member marked GUARDED_BY touched without its lock, a function marked
# REQUIRES called without it (src/platform/thread_annotations.h,
# src/platform/mutex.h). The analysis runs in clang's front end, so each
# file is only parsed and checked (-fsyntax-only, the compile commands of a
# tree configured in build-clang/): no code is generated, nothing linked,
# no test run.
#
#   scripts/thread_safety.sh [FILE-PATTERN]    (default: every file)
#
# Needs clang (scripts/setup.sh installs it). scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-clang
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -DNDEBUG" \
  -DCMAKE_CUDA_COMPILER=NOTFOUND -DPython_EXECUTABLE=/usr/bin/python3 -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
log="$build/thread_safety.log"
# One shell command a translation unit: its compile command with the output
# dropped for -fsyntax-only, run from its directory.
/usr/bin/python3 - "$build/compile_commands.json" "${1:-}" >"$build/thread_safety.commands" <<'PY'
import json, shlex, sys
pattern = sys.argv[2]
seen = set()
for c in json.load(open(sys.argv[1])):
    if pattern and pattern not in c["file"]:
        continue
    args = c.get("arguments") or shlex.split(c["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        out.append(a)
    key = (c["file"], tuple(out))
    if key in seen:
        continue
    seen.add(key)
    print("cd " + shlex.quote(c["directory"]) + " && " + shlex.join(out + ["-fsyntax-only"]))
PY
units=$(wc -l <"$build/thread_safety.commands")
[ "$units" -gt 0 ] || { echo "thread_safety: no translation unit matched" >&2; exit 1; }
status=0
tr '\n' '\0' <"$build/thread_safety.commands" | xargs -0 -P "$(nproc)" -n 1 bash -c >"$log" 2>&1 || status=$?
cat "$log"
if grep -q 'Wthread-safety' "$log"; then
  echo "thread_safety: clang's thread-safety analysis reported the lines above" >&2
  exit 1
fi
[ "$status" -eq 0 ] || { echo "thread_safety: a translation unit did not compile (above)" >&2; exit 1; }
echo "thread_safety: $units translation units checked"

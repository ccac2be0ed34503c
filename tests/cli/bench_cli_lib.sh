# Shared by the `ferry bench` CLI tests: sourced after `ferry=$1`. Gives a
# scratch folder ($work, removed on exit), fail MESSAGE, and
# run NAME ARGS...: `ferry bench --local ARGS --json $work/NAME.json` with a
# 60 s deadline, its table echoed, failing the test if it exits non-zero.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

run() {  # name, args...
  local name=$1
  shift
  timeout 60 "$ferry" bench --local "$@" --json "$work/$name.json" >"$work/$name.out" 2>"$work/$name.err" ||
    { cat "$work/$name.out" "$work/$name.err" >&2; fail "$name exited $?"; }
  cat "$work/$name.out"
}

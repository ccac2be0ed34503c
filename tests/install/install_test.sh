#!/usr/bin/env bash
# Installs the build tree into a fresh prefix, then builds the example
# program outside the tree twice — with find_package(ferry) and with
# pkg-config — and runs both, and the installed CLI.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

timeout 120 cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
  { tail -20 "$work/install.log"; fail "cmake --install"; }
[ -f "$work/prefix/include/ferry/ferry.h" ] || fail "headers not installed"
"$work/prefix/bin/ferry" --version | grep -q "^ferry " || fail "the installed CLI does not run"

timeout 300 cmake -S "$src/tests/install/example" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  >"$work/configure.log" 2>&1 || { tail -20 "$work/configure.log"; fail "configure against the installed package"; }
timeout 300 cmake --build "$work/cmake-build" >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; fail "build with find_package"; }
timeout 30 "$work/cmake-build/hello" || fail "the find_package build does not run"

pc=$(find "$work/prefix" -name ferry.pc | head -1)
[ -n "$pc" ] || fail "no ferry.pc installed"
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs ferry) || fail "pkg-config ferry"
timeout 300 g++ "$src/tests/install/example/hello.cc" $flags -o "$work/hello-pc" 2>"$work/pc.log" ||
  { cat "$work/pc.log"; fail "build with pkg-config ($flags)"; }
timeout 30 "$work/hello-pc" || fail "the pkg-config build does not run"
echo "install test: passed"

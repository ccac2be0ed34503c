#!/usr/bin/env bash
# The layers of docs/architecture.md hold: scripts/check_layers.py passes on
# this checkout, and fails on a copy of its table with one include planted
# that runs up (platform including core) or into ops/, so the check itself
# cannot be one that passes whatever the code does.
# Usage: layers_test.sh [SOURCE_ROOT]   (default: this checkout)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
py=$(command -v python3)
"$py" "$root/scripts/check_layers.py" "$root"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/docs" "$tmp/src/platform" "$tmp/src/core" "$tmp/ops/tune"
cp "$root/docs/architecture.md" "$tmp/docs/"
echo '#include "platform/a.h"' >"$tmp/src/core/b.h"
touch "$tmp/src/platform/a.h" "$tmp/ops/tune/plan.h"
"$py" "$root/scripts/check_layers.py" "$tmp" >/dev/null || { echo "FAIL: a downward include was refused" >&2; exit 1; }
for planted in '#include "core/b.h"' '#include "tune/plan.h"'; do
  echo "$planted" >"$tmp/src/platform/a.h"
  if "$py" "$root/scripts/check_layers.py" "$tmp" >"$tmp/out"; then
    echo "FAIL: src/platform/a.h with $planted passed the check" >&2
    exit 1
  fi
  grep -q 'src/platform/a.h:1' "$tmp/out" || { echo "FAIL: the report does not name the include" >&2; cat "$tmp/out" >&2; exit 1; }
done
echo "layers: the check passes here and catches an upward include and one of ops/"

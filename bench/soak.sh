#!/usr/bin/env bash
# The fault-injecting soak on both transports (bench/soak/, docs/security.md
# "Soak"): two processes exchange every operation at random sizes and offsets,
# every byte checked, while peers are killed, stopped past the peer timeout,
# cut off (TCP link down), sent garbage, robbed of regions in use and flooded
# past the limits. Prints one table a transport; exits non-zero if any fails.
#
#   bench/soak.sh MINUTES [--transport tcp|local|both] [--bin PATH] [--json-dir DIR] [-- FLAGS...]
#
# MINUTES (fractions allowed) is per transport; both run one after the other
# (default). FLAGS go to `ferry_soak run` (e.g. --gpu, --seed N, --faults
# kill,stop). TCP runs inside a network-namespace lab of its own (two
# namespaces and a veth pair, scripts/netns-lab) when root with `ip` at hand,
# so the link fault can set the link down and up; otherwise over loopback,
# with the link fault reported as skipped.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,16p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
minutes=$1
shift
[[ $minutes =~ ^[0-9]+([.][0-9]+)?$ ]] || usage
transports="tcp local"
bin=${FERRY_SOAK:-build/bin/ferry_soak}
json_dir=""
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --transport) [ "$2" = both ] && transports="tcp local" || transports=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --json-dir) json_dir=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) usage ;;
  esac
done
[ -x "$bin" ] || { echo "soak.sh: $bin not found; build it: cmake --build build --target ferry_soak" >&2; exit 2; }

lab=""
cleanup() { [ -n "$lab" ] && FERRY_LAB=$lab scripts/netns-lab down >/dev/null 2>&1; }
trap cleanup EXIT
trap 'exit 130' INT TERM

rc=0
for t in $transports; do
  args=(run --minutes "$minutes" --transport "$t")
  [ -n "$json_dir" ] && mkdir -p "$json_dir" && args+=(--json "$json_dir/soak-$t.json")
  if [ "$t" = tcp ] && [ "$(id -u)" = 0 ] && command -v ip >/dev/null; then
    lab=ferrysoak$$
    if FERRY_LAB=$lab scripts/netns-lab up 1 >/dev/null; then
      # scripts/netns-lab: side a holds fa0 (10.77.0.1), side b fb0 (10.77.0.2).
      args+=(--netns-server "$lab-a" --netns-client "$lab-b" --server-host 10.77.0.1 --link-dev fa0)
    else
      echo "soak.sh: could not build the network-namespace lab; TCP runs over loopback without link faults" >&2
      lab=""
    fi
  fi
  "$bin" "${args[@]}" "${extra[@]}" || rc=1
  cleanup
  lab=""
done
exit $rc

#!/usr/bin/env bash
# ferry tune / ferry diag end to end on copies of the fixture trees:
#   tune_diag_cli_test.sh FERRY_BINARY FIXTURES_DIR
# Exits non-zero, naming the step, on the first unexpected exit code or output.
set -uo pipefail
ferry=$1
fixtures=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
cp -a "$fixtures/a3high" "$root"

fail() { echo "FAIL: $*" >&2; exit 1; }
# run EXPECTED_RC NAME CMD...: runs CMD (10 s deadline), output in $work/NAME.out
run() {
  local want=$1 name=$2
  shift 2
  timeout 10 "$@" >"$work/$name.out" 2>&1
  local rc=$?
  [ "$rc" -eq "$want" ] || { cat "$work/$name.out" >&2; fail "$name: exit $rc, expected $want"; }
}
has() { grep -qF -- "$2" "$work/$1.out" || { cat "$work/$1.out" >&2; fail "$1: no '$2' in output"; }; }
# Files and symlink targets of a tree, without following links (sysfs loops).
snapshot_tree() { (cd "$1" && find . \( -type f -o -type l \) -printf '%p %l\n' | sort && find . -type f -print0 | sort -z | xargs -0 md5sum); }

snapshot_tree "$root" >"$work/pristine"

run 0 plan "$ferry" tune plan --root "$root"
has plan 'export FERRY_TX_BINDINGS="eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177"'
has plan 'export NCCL_GPUDIRECTTCPX_RX_BINDINGS="eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191"'
run 0 plan_json "$ferry" tune plan --root "$root" --json
cp "$work/plan_json.out" "$work/plan.json"
has plan_json '"tx_bindings": "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177"'

run 0 dry "$ferry" tune apply --root "$root" --dry-run --sysctl --backup "$work/backup.txt"
has dry 'dry run: 348 change(s) planned, 0 already in place; nothing written'
snapshot_tree "$root" | cmp -s - "$work/pristine" || fail "dry run changed the tree"
[ ! -e "$work/backup.txt" ] || fail "dry run wrote a backup"

run 1 verify_before "$ferry" tune verify --root "$root" --plan "$work/plan.json"
has verify_before '132 checks, 132 failed'

run 0 apply "$ferry" tune apply --root "$root" --plan "$work/plan.json" --backup "$work/backup.txt"
has apply 'applied 132 change(s), each read back'
[ "$(cat "$root/proc/irq/117/smp_affinity_list")" = 22 ] || fail "IRQ 117 not at 22"
run 0 verify_after "$ferry" tune verify --root "$root" --plan "$work/plan.json"
has verify_after '132 checks, 0 failed'
FERRY_TX_BINDINGS="eth1:8-21,112-125;eth3:60-73,164-177" FERRY_RX_BINDINGS="eth1:22-35,126-139" \
  run 0 verify_env "$ferry" tune verify --root "$root"
has verify_env 'ok       eth1 tx and rx sets disjoint'
NCCL_GPUDIRECTTCPX_TX_BINDINGS="eth3:8-9" run 1 verify_nccl "$ferry" tune verify --root "$root"
has verify_nccl "MISMATCH eth3 tx set on the NIC's NUMA node: expected node 1, found off-node: 8-9"

run 0 reset "$ferry" tune reset --root "$root" --backup "$work/backup.txt"
has reset 'reset: restored 132 file(s)'
snapshot_tree "$root" | cmp -s - "$work/pristine" || fail "reset did not restore every byte"
[ ! -e "$work/backup.txt" ] || fail "reset kept the backup"

# Bad input: clear messages, exit code 2, nothing changed.
run 2 bad_nic "$ferry" tune plan --root "$root" --nics eth1,eth9
has bad_nic 'unknown NIC eth9 (physical NICs on this host: eth1, eth2, eth3, eth4)'
FERRY_TX_BINDINGS="eth1:8-21;eth2:x" run 2 bad_env "$ferry" tune verify --root "$root"
has bad_env 'FERRY_TX_BINDINGS: position 16: expected a CPU number'
run 2 bad_cpu "$ferry" tune verify --root "$root" --tx "eth1:8,300"
has bad_cpu 'CPU 300 does not exist or is offline'
run 2 no_backup "$ferry" tune reset --root "$root" --backup "$work/none.txt"
has no_backup 'no backup at'
sed 's/"irq": 101,/"irq": 999,/' "$work/plan.json" >"$work/missing_irq.json"
run 2 missing_irq "$ferry" tune apply --root "$root" --plan "$work/missing_irq.json" --backup "$work/backup.txt"
has missing_irq 'IRQ 999 (eth1 tx queue 0): cannot read current value'
echo '{"version": 1' >"$work/broken.json"
run 2 broken_plan "$ferry" tune apply --root "$root" --plan "$work/broken.json"
has broken_plan 'not valid JSON'
snapshot_tree "$root" | cmp -s - "$work/pristine" || fail "a refused command changed the tree"

# diag: two snapshots around the recorded benchmark, and their diff.
run 0 snap_a "$ferry" diag snapshot --root "$root" --json "$work/a.json"
cp -a "$fixtures/a3high-after/." "$root/"
run 0 snap_b "$ferry" diag snapshot --root "$root" --json "$work/b.json" --markdown "$work/b.md"
grep -qF '| 117 | eth1 | rx | 0 | 0-207 |' "$work/b.md" || fail "snapshot markdown lacks IRQ 117"
run 0 diff "$ferry" diag diff "$work/a.json" "$work/b.json"
has diff 'Interval: 12.0 s'
has diff '| eth1 | 0 | 82500 | 0 | rx 80000, tx 2500 |'
has diff '| eth3 | 1 | 1600 | 1600 | rx 1600 | cpu0: 1600 |'
run 2 diff_backwards "$ferry" diag diff "$work/b.json" "$work/a.json"
has diff_backwards 'B was taken before A'
run 2 diff_broken "$ferry" diag diff "$work/a.json" "$work/broken.json"
has diff_broken 'broken.json: not valid JSON'

# The VM fixture and this very host (reading only).
run 0 vm_plan "$ferry" tune plan --root "$fixtures/vm"
has vm_plan 'export FERRY_TX_BINDINGS="eth0:1,5;eth1:1,5"'
run 0 live_plan "$ferry" tune plan
run 0 live_snap "$ferry" diag snapshot --json "$work/live.json"
echo "cli_tune_diag_fixtures: all passed"

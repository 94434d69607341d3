#!/usr/bin/env bash
# bench --ab MODULE.PARAM=A,B for real, inside a throw-away L1 guest whose KVM is a set of
# loadable modules (../shared/tools/l1kvm/run-in-l1, or $EXITLAB_RUN_IN_L1): a run-time
# parameter (kvm.halt_poll_ns, the interrupt tests that halt), a reload parameter
# (kvm_amd.npt), and an A/A of each. The L1's timings are emulation artefacts: what this
# shows is the switching, its records and its times, and the verdicts' shape.
#
# Usage (root, from the checkout, after `cargo build --release`):
#   tools/campaign/l1-module-knobs.sh OUTDIR [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(readlink -f "${1:?usage: l1-module-knobs.sh OUTDIR [ROUNDS]}")
rounds=${2:-6}
l1=${EXITLAB_RUN_IN_L1:-$(readlink -f ../shared/tools/l1kvm/run-in-l1)}
mkdir -p "$out"
exitlab=$(readlink -f target/release/exitlab)
cat >"$out/inside.sh" <<INSIDE
set -x
cd "$out"
cat /sys/module/kvm/parameters/halt_poll_ns /sys/module/kvm_amd/parameters/npt > params-before.txt
$exitlab bench --tests hlt_wake,ipi_halt --idle hlt --rounds $rounds --ab kvm.halt_poll_ns=0,200000 --json halt-poll.json > halt-poll.txt 2>&1; echo "exit \$?" >> halt-poll.txt
$exitlab bench --tests hlt_wake,ipi_halt --idle hlt --rounds $rounds --ab kvm.halt_poll_ns=200000,200000 --json halt-poll-aa.json > halt-poll-aa.txt 2>&1; echo "exit \$?" >> halt-poll-aa.txt
$exitlab bench --tests cpuid,inl_from_user,mmio_read_user --rounds $rounds --ab kvm_amd.npt=0,1 --json npt.json > npt.txt 2>&1; echo "exit \$?" >> npt.txt
$exitlab bench --tests cpuid,inl_from_user,mmio_read_user --rounds $rounds --ab kvm_amd.npt=1,1 --json npt-aa.json > npt-aa.txt 2>&1; echo "exit \$?" >> npt-aa.txt
cat /sys/module/kvm/parameters/halt_poll_ns /sys/module/kvm_amd/parameters/npt > params-after.txt
INSIDE
"$l1" --rw "$out" --timeout 3600 -- bash "$out/inside.sh"
for f in params-before params-after halt-poll halt-poll-aa npt npt-aa; do
    echo "== $f"; cat "$out/$f.txt"
done

#!/usr/bin/env bash
# Plays, from the outside, what a QEMU-based test runner asks of the binary it is given as
# QEMU: the probes and invocations of the public x86 unit-test suite's runner
# (kvm-unit-tests: run_tests.sh, x86/run, scripts/arch-run.bash, scripts/runtime.bash,
# scripts/vmm.bash), with the options its x86/unittests.cfg passes. Nothing of that suite
# is copied here: each step below restates one thing the runner does, and judges the
# answer the way the runner does.
#
#   QEMU=/path/to/exitlab-qemu KERNEL=/path/to/kernel [APPEND='words'] tests/qemu-runner/play.sh
#
# KERNEL is a multiboot kernel that ends through the debug-exit port with 0 when it passes
# (exitlab's conformance kernel with APPEND="fwcfg firmware" is what the tests use). Prints one
# line per check and exits 0 only if every check passed; otherwise 1, naming the checks
# that failed.
set -u
: "${QEMU:?set QEMU to the binary to test (exitlab-qemu)}"
: "${KERNEL:?set KERNEL to a multiboot kernel that passes}"
APPEND=${APPEND:-}
failures=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# x86/run's fixed options, in its order (the runner adds -kernel, -smp, -append, the
# test's options and -initrd with its environment file).
RUNNER_OPTS=(--no-reboot -nodefaults -global kvm-pit.lost_tick_policy=discard
    -device pc-testdev -device isa-debug-exit,iobase=0xf4,iosize=0x4 -display none
    -serial stdio -device pci-testdev -machine accel=kvm)

# search_qemu_binary: `$QEMU --help | grep -q QEMU`.
if "$QEMU" --help 2>/dev/null | grep -q QEMU; then pass "--help mentions QEMU"; else fail "--help does not mention QEMU (the runner then finds no QEMU)"; fi

# env_params: `$QEMU -h | head -1`, read with IFS='[ .]' as 3 words then major.minor.micro.
IFS='[ .]' read -r _ _ _ major minor micro _ <<<"$("$QEMU" -h 2>/dev/null | head -1)"
if [[ "$major" =~ ^[0-9]+$ && "$minor" =~ ^[0-9]+$ && "$micro" =~ ^[0-9]+$ ]]; then
    pass "-h's first line gives a version ($major.$minor.$micro)"
else
    fail "-h's first line gives no version: '$major' '$minor' '$micro'"
fi

# x86/run: the test devices, from `-device '?'`.
devices=$("$QEMU" -device '?' 2>&1)
for d in '"pc-testdev"' '"pci-testdev"'; do
    if grep -qF "$d" <<<"$devices"; then pass "-device '?' lists $d"; else fail "-device '?' does not list $d"; fi
done
if [ "$("$QEMU" -device help 2>&1)" = "$devices" ]; then pass "-device help = -device '?'"; else fail "-device help differs from -device '?'"; fi

# runtime.bash premature_failure: the whole command line with the kernel _NO_FILE_4Uhere_
# must fail on the kernel (vmm.bash: a line naming it and "could not load kernel"),
# else the runner skips the test with the output's last line as the reason.
probe() { "$QEMU" "${RUNNER_OPTS[@]}" -kernel _NO_FILE_4Uhere_ -smp "$1" "${@:2}" 2>&1; }
loads() { grep _NO_FILE_4Uhere_ <<<"$1" | grep -q -e "[Cc]ould not \(load\|open\) kernel"; }
# The options x86/unittests.cfg gives its tests that a KVM host can honour.
accepted=(
    ""
    "-cpu qemu64,+x2apic,+tsc-deadline"
    "-cpu qemu64,-x2apic,+tsc-deadline"
    "-cpu qemu64,+x2apic"
    "-cpu qemu64,vendor=GenuineIntel"
    "-cpu Opteron_G1,vendor=AuthenticAMD"
    "-cpu qemu64,+pcid,+invpcid"
    "-cpu qemu64,-pcid,+invpcid"
    "-cpu qemu64,-pcid,-invpcid"
    "-cpu qemu64,+umip"
    "-cpu max"
    "-cpu max,host-phys-bits"
    "-cpu max,vendor=GenuineIntel"
    "-cpu max,+vmx -m 2048"
    "-cpu max,+vmx,-pku"
    "-cpu max,+svm -m 4g"
    "-cpu max,+svm,-npt -m 4g"
    "-cpu max,+svm,-rdtscp,-xsave,-invpcid,-skinit"
    "-cpu max,host-phys-bits,+vmx,-vmx-mbec -m 2560"
    "-cpu Skylake-Server,host-phys-bits,+vmx,+vmx-mbec -m 2560"
    "-cpu IvyBridge,phys-bits=36,host-phys-bits=off"
    "-cpu IvyBridge,phys-bits=36,host-phys-bits=off,+vmx"
    "-cpu host"
    "-cpu host -m 2048"
    "-cpu host,migratable=no"
    "-cpu host,hv_passthrough"
    "-enable-kvm -m 2048 -cpu host"
    "-enable-kvm -cpu max"
    "-machine pit=off"
    "-M pc"
    "-machine accel=kvm,kernel-irqchip=split"
)
for o in "${accepted[@]}"; do
    # shellcheck disable=SC2086 # the options are words, as the runner's eval makes them
    out=$(probe 1 $o)
    if loads "$out"; then pass "premature-failure probe reaches the kernel: ${o:-(no options)}"; else fail "premature-failure probe with '${o}' did not reach the kernel: $(tail -1 <<<"$out")"; fi
done
# What exitlab refuses: the probe must fail on the option, and say which, so that the
# runner skips the test naming it.
refused=(
    "-M q35,kernel-irqchip=split -device intel-iommu,intremap=on,eim=off -device edu:q35"
    "-cpu host,hv_passthrough -device hyperv-testdev:hyperv-testdev"
    "-machine vmport=on -cpu max:vmport=on"
    "-cpu max,+svm -overcommit cpu-pm=on -m 4g:cpu-pm=on"
)
for r in "${refused[@]}"; do
    o=${r%:*}; name=${r##*:}
    # shellcheck disable=SC2086
    out=$(probe 1 $o)
    if ! loads "$out" && tail -1 <<<"$out" | grep -qF -- "$name"; then pass "refused, naming $name: $o"; else fail "'$o' not refused naming $name: $(tail -1 <<<"$out")"; fi
done

# run_tests.sh --probe-maxsmp: `-smp 1000` on the missing kernel must say "SMP CPUs ... N".
smp=$(probe 1000 |& grep 'SMP CPUs')
if [[ "${smp##* }" =~ ^\(?[0-9]+\)?$ ]]; then pass "-smp 1000 names the most vCPUs (${smp##* })"; else fail "-smp 1000: no 'SMP CPUs ... N' line"; fi

# arch-run.bash run_test: the real invocation, with an environment file as -initrd;
# vmm.bash qemu_fixup_return_code: status 1 with nothing but warnings on stderr is a pass.
env=$(mktemp)
trap 'rm -f "$env"' EXIT
printf 'TARGET=qemu\nQEMU_ACCEL=kvm\n' >"$env"
run() {
    local errors ret
    errors=$("$QEMU" "${RUNNER_OPTS[@]}" -kernel "$KERNEL" -smp 1 ${APPEND:+-append "$APPEND"} "$@" -initrd "$env" 2>&1 >/dev/null </dev/null)
    ret=$?
    if [ $ret -eq 0 ]; then
        ret=1 # ended without the debug-exit port: an error for the runner
    elif [ $ret -eq 1 ] && { [ -z "$errors" ] || ! grep -qvi warning <<<"$errors"; }; then
        ret=0
    fi
    [ $ret -eq 0 ] || echo "status $ret, stderr: $errors"
    return $ret
}
for o in "" "-cpu qemu64,+x2apic,+tsc-deadline" "-cpu max,+svm" "-cpu host,hv_passthrough" "-enable-kvm -M pc"; do
    # shellcheck disable=SC2086
    if why=$(run $o); then pass "the kernel passes under the runner's rules: ${o:-(no options)}"; else fail "the kernel with '${o}' does not pass under the runner's rules: $why"; fi
done

echo "$failures check(s) failed"
[ "$failures" -eq 0 ]

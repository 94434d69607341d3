//! Process exit codes and the one way every subcommand reports bad input.
//!
//! One scheme for every subcommand, so that no two meanings share a number. As with
//! QEMU's isa-debug-exit, a guest that writes V to the debug-exit port makes `run` exit
//! with `(V << 1) | 1`: every odd code is the guest's. exitlab's own outcomes are even,
//! each with one meaning (the classes follow sysexits: bad input, service unavailable,
//! OS error, cannot create output, internal software error). Likewise `trace -- COMMAND`
//! passes on the exit status of a traced command that failed (as `time` does): the code
//! is then the command's, not exitlab's.

/// Success: the command did what was asked (`run`: the guest reset or powered off).
pub const EXIT_OK: i32 = 0;
/// Bad input: an option, an image, an initrd or a results file was refused; nothing ran.
pub const EXIT_USAGE: i32 = 2;
/// `bench`: a test failed or an exit-count check did not hold.
pub const EXIT_TEST_FAILED: i32 = 4;
/// `compare`, `bench --ab`: the gate fired (a test is slower). The same code as a failed
/// bench test: a check on the measurements did not hold.
pub const EXIT_REGRESSION: i32 = EXIT_TEST_FAILED;
/// `compare`, `bench --ab`: no verdict can gate: a test the gate judges has none (too
/// few runs or pairs, a side missing or failed, another batch), or one run a side (a
/// screen). A gate fails closed; `--accept-no-verdict` turns this into [`EXIT_OK`].
pub const EXIT_NO_VERDICT: i32 = 12;
/// KVM cannot be used on this host (no /dev/kvm, no permission, unsupported API).
pub const EXIT_NO_KVM: i32 = 6;
/// The host refused to set up the VM (a KVM ioctl or an OS call failed, e.g. no memory).
pub const EXIT_VMM_FAILED: i32 = 8;
/// An output file (results JSON), or standard output, could not be written.
pub const EXIT_CANT_WRITE: i32 = 10;
/// exitlab itself failed (a bug: please report it with the command line).
pub const EXIT_INTERNAL: i32 = 70;
/// A host change was refused: a KVM module parameter knob cannot or must not be switched
/// here (not root, built in, in use, paravirtual host, modprobe or module missing),
/// before anything on the host changed.
pub const EXIT_HOST_REFUSED: i32 = 14;
/// A switched KVM module parameter could not be put back (the state file keeps the
/// originals; exitlab retries at its next start as root).
pub const EXIT_HOST_NOT_RESTORED: i32 = 16;
/// `run`: a vCPU triple-faulted (the machine shut down).
pub const EXIT_TRIPLE_FAULT: i32 = 120;
/// `run`: KVM could not run the guest (emulation failure, failed entry, an exit reason
/// exitlab does not know, every vCPU stopped without the guest ending the run).
pub const EXIT_KVM_FAILURE: i32 = 122;
/// `run`, `bench`: the `--timeout` expired (as `timeout(1)`).
pub const EXIT_TIMEOUT: i32 = 124;
/// Interrupted by SIGINT or SIGTERM; the VM was torn down (and results kept, for bench).
pub const EXIT_INTERRUPTED: i32 = 130;

/// Largest debug-exit value whose exit code is exact; larger values give 255.
pub const GUEST_VALUE_MAX: u32 = 127;

/// `run`'s exit code when the guest wrote `v` to the debug-exit port: `(v << 1) | 1`,
/// with values above [`GUEST_VALUE_MAX`] reported as 255.
pub fn guest_exit_code(v: u32) -> i32 {
    ((v.min(GUEST_VALUE_MAX) << 1) | 1) as i32
}

/// The line `run` prints when the guest ended the run through the debug-exit port: the
/// value written, the exit status it becomes, and why.
pub fn debug_exit_note(v: u32) -> String {
    let code = guest_exit_code(v);
    let rule = if v > GUEST_VALUE_MAX {
        format!("values above {GUEST_VALUE_MAX} give 255")
    } else {
        format!("({v} << 1) | 1")
    };
    format!(
        "the guest wrote {v} ({v:#x}) to the debug-exit port {:#x}: exit status \
         {code} = {rule}, QEMU isa-debug-exit's rule (odd statuses are the guest's)",
        exitlab_devices::pc::DEBUG_EXIT.base
    )
}

/// Every exit code with its meaning, in order; `--help` and the README print this.
pub const EXIT_CODES: &[(&str, &str)] = &[
    ("0", "success (run: the guest reset or powered off the machine)"),
    ("2", "bad input: options, image, initrd or results file refused; nothing ran"),
    ("4", "bench: a test failed or an exit-count check did not hold; compare, bench --ab: a test is slower (the gate fired)"),
    ("6", "KVM unavailable (no /dev/kvm, no permission); see `exitlab host`"),
    ("8", "the host refused to set up the VM (KVM or OS call failed)"),
    ("10", "an output file, or standard output, could not be written"),
    ("12", "compare, bench --ab: no verdict can gate (too few runs or pairs, a side missing, two single files); --accept-no-verdict: 0"),
    ("14", "a host change was refused (module parameter knob: not root, built in, in use, paravirtual host, modprobe or module missing)"),
    ("16", "a switched module parameter could not be restored (exitlab retries at its next start as root)"),
    ("70", "internal error in exitlab (a bug)"),
    ("120", "run: a vCPU triple-faulted"),
    ("122", "run: KVM could not run the guest (emulation failure, failed entry, unknown exit)"),
    ("124", "run, bench: --timeout expired (bench keeps the rounds that completed)"),
    ("130", "interrupted by SIGINT/SIGTERM; the VM was torn down"),
    ("odd N", "run: the guest wrote V=(N-1)/2 to the debug-exit port 0xf4 (as QEMU isa-debug-exit; V>=127: 255)"),
    ("N", "trace -- COMMAND: the command failed with exit status N (128+S: signal S ended it), as time(1) passes it on"),
];

/// The exit-code table as `--help` prints it.
pub fn exit_codes_help() -> String {
    let mut s = String::from("Exit codes (every subcommand):\n");
    for (code, what) in EXIT_CODES {
        s += &format!("  {code:>5}  {what}\n");
    }
    s
}

/// Prints `msg` as exitlab's error and returns the bad-input exit code.
pub fn usage_error(msg: impl std::fmt::Display) -> i32 {
    eprintln!("exitlab: {msg}");
    EXIT_USAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exitlab_codes_are_even_and_distinct_and_guest_codes_odd() {
        let own = [
            EXIT_OK,
            EXIT_USAGE,
            EXIT_TEST_FAILED,
            EXIT_NO_KVM,
            EXIT_VMM_FAILED,
            EXIT_CANT_WRITE,
            EXIT_HOST_REFUSED,
            EXIT_HOST_NOT_RESTORED,
            EXIT_INTERNAL,
            EXIT_TRIPLE_FAULT,
            EXIT_KVM_FAILURE,
            EXIT_TIMEOUT,
            EXIT_INTERRUPTED,
        ];
        for (i, a) in own.iter().enumerate() {
            assert_eq!(a % 2, 0, "{a} is odd: odd codes belong to the guest");
            assert!((0..=255).contains(a));
            for b in &own[i + 1..] {
                assert_ne!(a, b);
            }
            // Each code is in the table --help prints.
            assert!(EXIT_CODES.iter().any(|(c, _)| *c == a.to_string()), "{a}");
        }
        for v in 0..=1000u32 {
            let c = guest_exit_code(v);
            assert_eq!(c % 2, 1);
            assert!((1..=255).contains(&c));
        }
        assert_eq!(guest_exit_code(0), 1);
        assert_eq!(guest_exit_code(1), 3);
        assert_eq!(guest_exit_code(127), 255);
        assert_eq!(guest_exit_code(u32::MAX), 255);
    }

    #[test]
    fn the_debug_exit_note_names_value_status_and_rule() {
        let n = debug_exit_note(0);
        assert!(
            n.contains("wrote 0 (0x0)") && n.contains("exit status 1 = (0 << 1) | 1"),
            "{n}"
        );
        assert!(n.contains("isa-debug-exit") && n.contains("0xf4"), "{n}");
        let n = debug_exit_note(300);
        assert!(
            n.contains("exit status 255 = values above 127 give 255"),
            "{n}"
        );
    }
}

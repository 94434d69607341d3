//! For tests that need KVM: open /dev/kvm, or fail the calling test with one line that
//! names the problem and what to do (no panic message, no backtrace note).

use kvm_ioctls::Kvm;

/// What a test without KVM prints before it fails: the reason, and what to do.
pub fn missing_kvm_line(why: &dyn std::fmt::Display) -> String {
    format!(
        "this test needs KVM: {why}. On a host without /dev/kvm, `bash .ci/run` runs the \
         tests inside an L1 guest that has it (../shared/tools/l1kvm/run-in-l1)"
    )
}

/// Opens /dev/kvm, or fails the calling test with one clear line.
pub fn kvm_or_fail() -> Kvm {
    match crate::open_kvm() {
        Ok(k) => k,
        Err(e) => fail_without_kvm(&e),
    }
}

/// Fails the calling test with [`missing_kvm_line`]: the line goes to the test's
/// output, and the unwind carries no message, so libtest prints nothing more than the
/// test's name under "failures".
pub fn fail_without_kvm(why: &dyn std::fmt::Display) -> ! {
    eprintln!("{}", missing_kvm_line(why));
    std::panic::resume_unwind(Box::new(()))
}

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

/// Guest RAM for a guest that runs from the x86 reset vector: the low 1 MiB and the top
/// 64 KiB below 4 GiB.
pub fn reset_vector_ram() -> Vec<(u64, u64)> {
    vec![(0, 1 << 20), (0xFFFF_0000, 0x1_0000)]
}

/// The first guest-physical address a vCPU runs from after reset (real mode).
pub const RESET_VECTOR: u64 = 0xFFFF_FFF0;

/// Writes real-mode code (at most 16 bytes) at the reset vector.
pub fn write_at_reset_vector(mem: &vm_memory::GuestMemoryMmap, code: &[u8]) {
    use vm_memory::Bytes;
    assert!(code.len() <= 16, "16 bytes fit below 4 GiB");
    mem.write_slice(code, vm_memory::GuestAddress(RESET_VECTOR))
        .expect("the reset vector is in reset_vector_ram()");
}

/// The port of the test guests' doorbell (the `out` that hands a value to the hook).
pub const TEST_DOORBELL_PORT: u16 = 0x700;

/// A test vCPU: no stamp page and no run log, the doorbell on [`TEST_DOORBELL_PORT`],
/// and a HLT that stops it.
pub fn test_vcpu_config(id: u32) -> crate::vcpu::VcpuConfig {
    crate::vcpu::VcpuConfig {
        id,
        stamp_gpa: None,
        run_log: 0,
        doorbell_port: Some(TEST_DOORBELL_PORT),
        hlt: crate::hook::HltPolicy::Stop,
    }
}

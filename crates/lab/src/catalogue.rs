//! The benchmark catalogue: every exit test the lab kernel can run, what it needs from
//! the host, where its exit is expected to be handled, and which userspace exits it must
//! cause.

use exitlab_guest::abi;

/// Where an exit is expected to be handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    /// In the host kernel (KVM): a "lightweight" exit.
    Kernel,
    /// In the VMM's userspace: a "heavyweight" exit.
    User,
    /// No exit at all (the loop overhead).
    Nowhere,
}

/// The userspace exit a `User` test must cause once per iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserExit {
    /// Port read.
    IoIn,
    /// Port write.
    IoOut,
    /// MMIO read.
    MmioRead,
    /// MMIO write.
    MmioWrite,
    /// HLT.
    Hlt,
    /// RDMSR.
    Rdmsr,
    /// WRMSR.
    Wrmsr,
}

impl UserExit {
    /// The name used in exit counts.
    pub fn name(self) -> &'static str {
        match self {
            UserExit::IoIn => "io_in",
            UserExit::IoOut => "io_out",
            UserExit::MmioRead => "mmio_read",
            UserExit::MmioWrite => "mmio_write",
            UserExit::Hlt => "hlt",
            UserExit::Rdmsr => "rdmsr",
            UserExit::Wrmsr => "wrmsr",
        }
    }
}

/// What a test needs from the VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    /// In-kernel irqchip and PIT (the default).
    Irqchip,
    /// No in-kernel irqchip, so HLT reaches userspace.
    NoIrqchip,
    /// In-kernel irqchip and `USER_MSR` routed to userspace with an MSR filter.
    UserMsr,
    /// In-kernel irqchip and an ioeventfd on `MMIO_IOEVENTFD_GPA`.
    MmioIoeventfd,
}

/// One test of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestDef {
    /// Name, as kvm-unit-tests `vmexit` calls it where the test is the same.
    pub name: &'static str,
    /// Id in the guest ABI.
    pub id: u64,
    /// What the measured instruction is.
    pub what: &'static str,
    /// Where its exit is expected to be handled.
    pub expected: Where,
    /// The userspace exit each iteration causes, for `User` tests.
    pub user_exit: Option<UserExit>,
    /// Whether the instruction can run at ring 3.
    pub ring3: bool,
    /// What the VM needs.
    pub platform: Platform,
    /// Whether the test is part of the default suite.
    pub default: bool,
    /// Whether the per-exit phase breakdown is reported for it.
    pub phases: bool,
    /// Whether the VMM logs the duration of every KVM_RUN (back-to-back exits with
    /// `--batch` > 1, as the VMSAVE/VMLOAD measurement of HLT does). Other userspace
    /// tests derive one KVM_RUN per sample from the stamps instead, so that their exit
    /// loop does exactly what it does outside the lab.
    pub kvm_run_log: bool,
}

const fn t(
    name: &'static str,
    id: u64,
    what: &'static str,
    expected: Where,
    user_exit: Option<UserExit>,
    ring3: bool,
    platform: Platform,
) -> TestDef {
    TestDef {
        name,
        id,
        what,
        expected,
        user_exit,
        ring3,
        platform,
        default: true,
        phases: false,
        kvm_run_log: false,
    }
}

/// Every test, in the order the default suite runs them.
pub const TESTS: &[TestDef] = &[
    t(
        "loop_overhead",
        abi::TEST_LOOP_OVERHEAD,
        "the empty measurement loop",
        Where::Nowhere,
        None,
        true,
        Platform::Irqchip,
    ),
    t(
        "cpuid",
        abi::TEST_CPUID,
        "CPUID leaf 0",
        Where::Kernel,
        None,
        true,
        Platform::Irqchip,
    ),
    t(
        "cpuid_0xd",
        abi::TEST_CPUID_0XD,
        "CPUID leaf 0xD, sub-leaves 1..n (XSTATE)",
        Where::Kernel,
        None,
        true,
        Platform::Irqchip,
    ),
    t(
        "vmcall",
        abi::TEST_VMCALL,
        "a hypercall KVM answers (unknown number: -KVM_ENOSYS)",
        Where::Kernel,
        None,
        true,
        Platform::Irqchip,
    ),
    TestDef {
        kvm_run_log: true,
        ..t(
            "hlt",
            abi::TEST_HLT,
            "HLT with no in-kernel irqchip: each one reaches the VMM",
            Where::User,
            Some(UserExit::Hlt),
            false,
            Platform::NoIrqchip,
        )
    },
    t(
        "inl_from_kernel",
        abi::TEST_INL_FROM_KERNEL,
        "IN from port 0x4d0 (ELCR, in-kernel PIC)",
        Where::Kernel,
        None,
        true,
        Platform::Irqchip,
    ),
    t(
        "outl_to_kernel",
        abi::TEST_OUTL_TO_KERNEL,
        "OUT to port 0x4d0 (ELCR, in-kernel PIC)",
        Where::Kernel,
        None,
        true,
        Platform::Irqchip,
    ),
    TestDef {
        phases: true,
        ..t(
            "inl_from_user",
            abi::TEST_INL_FROM_USER,
            "32-bit IN from port 0x1234, answered by the VMM",
            Where::User,
            Some(UserExit::IoIn),
            true,
            Platform::Irqchip,
        )
    },
    t(
        "outl_to_user",
        abi::TEST_OUTL_TO_USER,
        "32-bit OUT to port 0x1234, taken by the VMM",
        Where::User,
        Some(UserExit::IoOut),
        true,
        Platform::Irqchip,
    ),
    TestDef {
        phases: true,
        ..t(
            "mmio_read_user",
            abi::TEST_MMIO_READ_USER,
            "32-bit load from an MMIO page the VMM answers",
            Where::User,
            Some(UserExit::MmioRead),
            true,
            Platform::Irqchip,
        )
    },
    t(
        "mmio_write_user",
        abi::TEST_MMIO_WRITE_USER,
        "32-bit store to an MMIO page the VMM answers",
        Where::User,
        Some(UserExit::MmioWrite),
        true,
        Platform::Irqchip,
    ),
    t(
        "mmio_write_ioeventfd",
        abi::TEST_MMIO_WRITE_IOEVENTFD,
        "32-bit store to an MMIO address an ioeventfd absorbs",
        Where::Kernel,
        None,
        true,
        Platform::MmioIoeventfd,
    ),
    t(
        "rd_tsc_adjust_msr",
        abi::TEST_RD_TSC_ADJUST_MSR,
        "RDMSR IA32_TSC_ADJUST",
        Where::Kernel,
        None,
        false,
        Platform::Irqchip,
    ),
    t(
        "wr_tsc_adjust_msr",
        abi::TEST_WR_TSC_ADJUST_MSR,
        "WRMSR IA32_TSC_ADJUST (0)",
        Where::Kernel,
        None,
        false,
        Platform::Irqchip,
    ),
    t(
        "rdmsr_user",
        abi::TEST_RDMSR_USER,
        "RDMSR of an MSR routed to the VMM by an MSR filter",
        Where::User,
        Some(UserExit::Rdmsr),
        false,
        Platform::UserMsr,
    ),
    t(
        "wrmsr_user",
        abi::TEST_WRMSR_USER,
        "WRMSR of an MSR routed to the VMM by an MSR filter",
        Where::User,
        Some(UserExit::Wrmsr),
        false,
        Platform::UserMsr,
    ),
    t(
        "mov_from_cr8",
        abi::TEST_MOV_FROM_CR8,
        "MOV from CR8 (TPR)",
        Where::Kernel,
        None,
        false,
        Platform::Irqchip,
    ),
    t(
        "mov_to_cr8",
        abi::TEST_MOV_TO_CR8,
        "MOV to CR8 (TPR, 0)",
        Where::Kernel,
        None,
        false,
        Platform::Irqchip,
    ),
];

/// Guest self-tests used by the integration tests; not benchmarks.
pub const SELFTESTS: &[TestDef] = &[
    TestDef {
        default: false,
        ..t(
            "selftest_garbage",
            abi::TEST_SELFTEST_GARBAGE,
            "writes garbage into the shared page",
            Where::Nowhere,
            None,
            false,
            Platform::Irqchip,
        )
    },
    TestDef {
        default: false,
        ..t(
            "selftest_triple_fault",
            abi::TEST_SELFTEST_TRIPLE_FAULT,
            "triple-faults",
            Where::Nowhere,
            None,
            false,
            Platform::Irqchip,
        )
    },
    TestDef {
        default: false,
        ..t(
            "selftest_spin",
            abi::TEST_SELFTEST_SPIN,
            "spins without exiting",
            Where::Nowhere,
            None,
            false,
            Platform::Irqchip,
        )
    },
    TestDef {
        default: false,
        ..t(
            "selftest_ud",
            abi::TEST_SELFTEST_UD,
            "executes ud2",
            Where::Nowhere,
            None,
            false,
            Platform::Irqchip,
        )
    },
];

/// Finds a test (benchmark or self-test) by name.
pub fn find(name: &str) -> Option<&'static TestDef> {
    TESTS.iter().chain(SELFTESTS).find(|t| t.name == name)
}

/// The default suite.
pub fn default_suite() -> Vec<&'static TestDef> {
    TESTS.iter().filter(|t| t.default).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ids_unique() {
        let all: Vec<&TestDef> = TESTS.iter().chain(SELFTESTS).collect();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.name, b.name);
                assert_ne!(a.id, b.id);
            }
        }
    }

    #[test]
    fn user_tests_name_their_exit() {
        for t in TESTS {
            assert_eq!(
                t.expected == Where::User,
                t.user_exit.is_some(),
                "{}",
                t.name
            );
        }
    }

    #[test]
    fn only_hlt_keeps_a_kvm_run_log() {
        let logged: Vec<&str> = TESTS
            .iter()
            .filter(|t| t.kvm_run_log)
            .map(|t| t.name)
            .collect();
        assert_eq!(logged, ["hlt"]);
    }

    #[test]
    fn find_and_default_suite() {
        assert_eq!(find("cpuid").map(|t| t.id), Some(abi::TEST_CPUID));
        assert!(find("nope").is_none());
        assert!(find("selftest_spin").is_some());
        let d = default_suite();
        assert_eq!(d.first().map(|t| t.name), Some("loop_overhead"));
        assert!(d.iter().all(|t| !t.name.starts_with("selftest")));
        assert_eq!(d.len(), 18);
    }
}

//! The benchmark catalogue: every exit test the lab kernel can run, what it needs from
//! the host, where its exit is expected to be handled, and which userspace exits it must
//! cause.

use exitlab_abi as abi;

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
    /// No in-kernel irqchip, so HLT reaches userspace; nor a local APIC, so the test is
    /// skipped in x2APIC mode ([`crate::smp::IrqKnobs::skip_reason`]).
    NoIrqchip,
    /// In-kernel irqchip and `USER_MSR` routed to userspace with an MSR filter.
    UserMsr,
    /// In-kernel irqchip and an ioeventfd on `MMIO_IOEVENTFD_GPA`.
    MmioIoeventfd,
}

/// How a test's measured loop uses the local APIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lapic {
    /// Not at all.
    No,
    /// Its registers only, with no interrupt delivered: the TPR (through CR8), an EOI with
    /// nothing in service.
    Registers,
    /// Interrupts are delivered in it: IPIs, self-IPIs, timers.
    Interrupts,
}

/// What the vCPUs of a test wait for in its measured loop: where HLT, MWAIT and PAUSE,
/// the idle mode and halt polling come into the figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waits {
    /// Nothing: the measured instruction exits and returns.
    Nothing,
    /// vCPU 0 spins with PAUSE until an interrupt arrives or the APs acknowledge one;
    /// the target APs (when the test has any, `min_cpus` > 1) wait as `--idle` says.
    Spins,
    /// As `Spins`, but the target AP waits in HLT whatever `--idle` says.
    HaltedTarget,
    /// vCPU 0 executes HLT with an interrupt already pending: it halts without blocking.
    PendingHlt,
}

/// What the control page's `arg0` carries for a test (the host fills it in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestArg {
    /// Nothing (0).
    None,
    /// The highest XSAVE sub-leaf of CPUID leaf 0xD the guest sees: the test cycles
    /// through sub-leaves 1..=arg0, and cannot run where the guest has no leaf 0xD.
    XsaveMaxSubleaf,
}

/// One test of the catalogue: everything about a test is in its row, as in
/// kvm-unit-tests' `vmexit.c` table.
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
    /// APIC mode the test fixes (`x2apic_*`); `None`: the run's `--apic`.
    pub apic: Option<exitlab_results::irq::ApicMode>,
    /// vCPUs the test needs (the IPI tests: a target besides vCPU 0).
    pub min_cpus: u32,
    /// The empty loop every other figure is reported net of: it runs first in every
    /// suite, has no net figure of its own, and the KVM exits it sees are the host's
    /// background, not a test's.
    pub baseline: bool,
    /// What the control page's `arg0` carries.
    pub arg: TestArg,
    /// The measured port is the in-kernel PIC's (ELCR, 0x4d0): with a split irqchip it
    /// is exitlab's userspace PIC, so the test does not run there.
    pub kernel_pic: bool,
    /// The test sends IPIs with the PV send-IPI hypercall: it does not run where
    /// `--pv-ipi off` hides the feature.
    pub pv_ipi: bool,
    /// The test's figure is a sum of one-way latencies the guest measures (send to
    /// handler entry or wake-up), not its loop's time: guest work added to the loop
    /// (`guest-cycles`) would not show in it, so the test does not run with it.
    pub one_way: bool,
    /// The measured instruction is a hypercall (`vmcall`/`vmmcall`). On a paravirtual KVM
    /// that never completes one (`kvm_pvm`), the test is skipped saying so rather than
    /// left to stall until the watchdog ([`crate::runner::skip_reason`]).
    pub hypercall: bool,
    /// Iterations per sample when `--batch` is not given ([`KERNEL_BATCH`] for the
    /// instructions KVM handles in the kernel, 1 for the rest).
    pub batch: u64,
    /// How the measured loop uses the local APIC (what `--apic` and `--irqchip` can
    /// change).
    pub lapic: Lapic,
    /// What its vCPUs wait for in the measured loop (what `--idle`, `--halt-poll-ns` and
    /// `--disable-exits` can change).
    pub waits: Waits,
}

/// Iterations per sample of a test whose exit KVM handles in the kernel, unless
/// `--batch` says otherwise. Such an exit costs a few thousand cycles or less, while the
/// clock reads that bracket a sample (serialized `rdtsc` pairs) cost as much or more and
/// step in units of the TSC's resolution; with one iteration a sample, what the brackets
/// cost varied from VM to VM beyond what the paired empty loop takes out. Four iterations
/// share those costs four ways (the campaign that chose it: `docs/notebook/`). The figures
/// are cycles per iteration either way. Userspace-handled tests keep one iteration a
/// sample: their phases are stamped per exit, and their spread is the host's, not the
/// clock's.
pub const KERNEL_BATCH: u64 = 4;

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
        apic: None,
        min_cpus: 1,
        baseline: false,
        arg: TestArg::None,
        kernel_pic: false,
        pv_ipi: false,
        one_way: false,
        hypercall: false,
        batch: match expected {
            Where::Kernel => KERNEL_BATCH,
            Where::User | Where::Nowhere => 1,
        },
        lapic: Lapic::No,
        waits: Waits::Nothing,
    }
}

/// An interrupt test: ring 0, handled in the kernel, not in the default suite, delivering
/// interrupts. One iteration a sample: an iteration is a delivery, whose figure the test
/// defines.
const fn irq(
    name: &'static str,
    id: u64,
    what: &'static str,
    min_cpus: u32,
    waits: Waits,
) -> TestDef {
    TestDef {
        default: false,
        min_cpus,
        batch: 1,
        lapic: Lapic::Interrupts,
        waits,
        ..t(
            name,
            id,
            what,
            Where::Kernel,
            None,
            false,
            Platform::Irqchip,
        )
    }
}

/// The same interrupt test with the APIC in x2APIC mode whatever `--apic` says.
const fn x2(def: TestDef, name: &'static str) -> TestDef {
    TestDef {
        name,
        apic: Some(exitlab_results::irq::ApicMode::X2apic),
        ..def
    }
}

const SELF_IPI_STI_NOP: TestDef = irq(
    "self_ipi_sti_nop",
    abi::TEST_SELF_IPI_STI_NOP,
    "self-IPI with IF=0, then STI; NOP (the handler runs in the window)",
    1,
    Waits::Nothing,
);
const SELF_IPI_STI_HLT: TestDef = irq(
    "self_ipi_sti_hlt",
    abi::TEST_SELF_IPI_STI_HLT,
    "self-IPI with IF=0, then STI; HLT (pending: HLT does not block)",
    1,
    Waits::PendingHlt,
);
const SELF_IPI_TPR: TestDef = irq(
    "self_ipi_tpr",
    abi::TEST_SELF_IPI_TPR,
    "TPR 0xF0, self-IPI (held), TPR 0: delivered at once (IF=1)",
    1,
    Waits::Spins,
);
const SELF_IPI_TPR_STI_NOP: TestDef = irq(
    "self_ipi_tpr_sti_nop",
    abi::TEST_SELF_IPI_TPR_STI_NOP,
    "TPR 0xF0, self-IPI, TPR 0 with IF=0, then STI; NOP",
    1,
    Waits::Nothing,
);
const SELF_IPI_TPR_STI_HLT: TestDef = irq(
    "self_ipi_tpr_sti_hlt",
    abi::TEST_SELF_IPI_TPR_STI_HLT,
    "TPR 0xF0, self-IPI, TPR 0 with IF=0, then STI; HLT",
    1,
    Waits::PendingHlt,
);
const EOI: TestDef = TestDef {
    lapic: Lapic::Registers,
    ..irq(
        "eoi",
        abi::TEST_EOI,
        "an EOI write with nothing in service",
        1,
        Waits::Nothing,
    )
};

/// The interrupt tests: IPIs between vCPUs, self-IPIs, EOI, LAPIC timers.
pub const IRQ_TESTS: &[TestDef] = &[
    irq(
        "ipi",
        abi::TEST_IPI,
        "fixed IPI to vCPU 1 (idling as --idle says) until its handler acknowledges",
        2,
        Waits::Spins,
    ),
    irq(
        "ipi_halt",
        abi::TEST_IPI_HALT,
        "fixed IPI to vCPU 1 waiting in HLT, until its handler acknowledges",
        2,
        Waits::HaltedTarget,
    ),
    TestDef {
        one_way: true,
        ..irq(
            "ipi_one_way",
            abi::TEST_IPI_ONE_WAY,
            "fixed IPI to vCPU 1: send (TSC before the ICR write) to handler entry",
            2,
            Waits::Spins,
        )
    },
    TestDef {
        one_way: true,
        ..irq(
            "hlt_wake",
            abi::TEST_HLT_WAKE,
            "fixed IPI to vCPU 1 in HLT: send to its first instruction after HLT",
            2,
            Waits::HaltedTarget,
        )
    },
    irq(
        "broadcast_ipi",
        abi::TEST_BROADCAST_IPI,
        "all-but-self fixed IPI until every other vCPU acknowledges",
        2,
        Waits::Spins,
    ),
    irq(
        "broadcast_lock",
        abi::TEST_BROADCAST_LOCK,
        "all-but-self IPI; each handler takes one shared spinlock",
        2,
        Waits::Spins,
    ),
    TestDef {
        pv_ipi: true,
        hypercall: true,
        ..irq(
            "pv_send_ipi",
            abi::TEST_PV_SEND_IPI,
            "KVM_HC_SEND_IPI hypercall to vCPU 1 until its handler acknowledges",
            2,
            Waits::Spins,
        )
    },
    SELF_IPI_STI_NOP,
    SELF_IPI_STI_HLT,
    SELF_IPI_TPR,
    SELF_IPI_TPR_STI_NOP,
    SELF_IPI_TPR_STI_HLT,
    x2(SELF_IPI_STI_NOP, "x2apic_self_ipi_sti_nop"),
    x2(SELF_IPI_STI_HLT, "x2apic_self_ipi_sti_hlt"),
    x2(SELF_IPI_TPR, "x2apic_self_ipi_tpr"),
    x2(SELF_IPI_TPR_STI_NOP, "x2apic_self_ipi_tpr_sti_nop"),
    x2(SELF_IPI_TPR_STI_HLT, "x2apic_self_ipi_tpr_sti_hlt"),
    EOI,
    x2(EOI, "x2apic_eoi"),
    irq(
        "tscdeadline_immed",
        abi::TEST_TSCDEADLINE_IMMED,
        "TSC deadline armed in the past: interrupt at once",
        1,
        Waits::Spins,
    ),
    irq(
        "tscdeadline",
        abi::TEST_TSCDEADLINE,
        "TSC deadline armed 10,000 cycles ahead: arm to delivery",
        1,
        Waits::Spins,
    ),
    irq(
        "lapic_timer_oneshot",
        abi::TEST_LAPIC_TIMER_ONESHOT,
        "one-shot LAPIC timer, count 1, divide 1: arm to delivery",
        1,
        Waits::Spins,
    ),
    // Its APs are brought up before READY: the loop it measures is the empty one.
    TestDef {
        lapic: Lapic::No,
        ..irq(
            "smp_bringup",
            abi::TEST_SMP_BRINGUP,
            "INIT-SIPI-SIPI of every AP before READY; then the empty loop",
            1,
            Waits::Nothing,
        )
    },
];

/// Every test, in the order the default suite runs them.
pub const TESTS: &[TestDef] = &[
    TestDef {
        baseline: true,
        ..t(
            "loop_overhead",
            abi::TEST_LOOP_OVERHEAD,
            "the empty measurement loop",
            Where::Nowhere,
            None,
            true,
            Platform::Irqchip,
        )
    },
    t(
        "cpuid",
        abi::TEST_CPUID,
        "CPUID leaf 0",
        Where::Kernel,
        None,
        true,
        Platform::Irqchip,
    ),
    TestDef {
        arg: TestArg::XsaveMaxSubleaf,
        ..t(
            "cpuid_0xd",
            abi::TEST_CPUID_0XD,
            "CPUID leaf 0xD, sub-leaves 1..n (XSTATE)",
            Where::Kernel,
            None,
            true,
            Platform::Irqchip,
        )
    },
    TestDef {
        hypercall: true,
        ..t(
            "vmcall",
            abi::TEST_VMCALL,
            "a hypercall KVM answers (unknown number: -KVM_ENOSYS)",
            Where::Kernel,
            None,
            true,
            Platform::Irqchip,
        )
    },
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
    TestDef {
        kernel_pic: true,
        ..t(
            "inl_from_kernel",
            abi::TEST_INL_FROM_KERNEL,
            "IN from port 0x4d0 (ELCR, in-kernel PIC)",
            Where::Kernel,
            None,
            true,
            Platform::Irqchip,
        )
    },
    TestDef {
        kernel_pic: true,
        ..t(
            "outl_to_kernel",
            abi::TEST_OUTL_TO_KERNEL,
            "OUT to port 0x4d0 (ELCR, in-kernel PIC)",
            Where::Kernel,
            None,
            true,
            Platform::Irqchip,
        )
    },
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
    TestDef {
        lapic: Lapic::Registers,
        ..t(
            "mov_from_cr8",
            abi::TEST_MOV_FROM_CR8,
            "MOV from CR8 (TPR)",
            Where::Kernel,
            None,
            false,
            Platform::Irqchip,
        )
    },
    TestDef {
        lapic: Lapic::Registers,
        ..t(
            "mov_to_cr8",
            abi::TEST_MOV_TO_CR8,
            "MOV to CR8 (TPR, 0)",
            Where::Kernel,
            None,
            false,
            Platform::Irqchip,
        )
    },
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
    TESTS
        .iter()
        .chain(IRQ_TESTS)
        .chain(SELFTESTS)
        .find(|t| t.name == name)
}

/// The baseline test (the empty loop, [`TestDef::baseline`]).
pub fn baseline() -> &'static TestDef {
    // The catalogue's first row; a test below checks it is the only baseline.
    &TESTS[0]
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
    fn each_special_case_is_a_property_of_its_rows() {
        let all = || TESTS.iter().chain(IRQ_TESTS).chain(SELFTESTS);
        let baselines: Vec<&str> = all().filter(|t| t.baseline).map(|t| t.name).collect();
        assert_eq!(baselines, ["loop_overhead"]);
        assert!(baseline().baseline);
        assert_eq!(baseline().expected, Where::Nowhere);
        let xsave: Vec<&str> = all()
            .filter(|t| t.arg == TestArg::XsaveMaxSubleaf)
            .map(|t| t.name)
            .collect();
        assert_eq!(xsave, ["cpuid_0xd"]);
        let pic: Vec<&str> = all().filter(|t| t.kernel_pic).map(|t| t.name).collect();
        assert_eq!(pic, ["inl_from_kernel", "outl_to_kernel"]);
        let pv: Vec<&str> = all().filter(|t| t.pv_ipi).map(|t| t.name).collect();
        assert_eq!(pv, ["pv_send_ipi"]);
        let hc: Vec<&str> = all().filter(|t| t.hypercall).map(|t| t.name).collect();
        assert_eq!(hc, ["vmcall", "pv_send_ipi"]);
        let batched: Vec<&str> = all().filter(|t| t.batch > 1).map(|t| t.name).collect();
        assert_eq!(
            batched,
            [
                "cpuid",
                "cpuid_0xd",
                "vmcall",
                "inl_from_kernel",
                "outl_to_kernel",
                "mmio_write_ioeventfd",
                "rd_tsc_adjust_msr",
                "wr_tsc_adjust_msr",
                "mov_from_cr8",
                "mov_to_cr8"
            ]
        );
        assert!(all().all(|t| t.batch == 1 || t.batch == KERNEL_BATCH));
        let lapic =
            |l: Lapic| -> Vec<&str> { all().filter(|t| t.lapic == l).map(|t| t.name).collect() };
        assert_eq!(
            lapic(Lapic::Registers),
            ["mov_from_cr8", "mov_to_cr8", "eoi", "x2apic_eoi"]
        );
        // Every interrupt test delivers interrupts but EOI and the bring-up (whose loop
        // is the empty one); no other test does.
        let delivering = lapic(Lapic::Interrupts);
        assert_eq!(delivering.len(), IRQ_TESTS.len() - 3);
        assert!(delivering
            .iter()
            .all(|n| IRQ_TESTS.iter().any(|t| t.name == *n)));
        let waits =
            |w: Waits| -> Vec<&str> { all().filter(|t| t.waits == w).map(|t| t.name).collect() };
        assert_eq!(waits(Waits::HaltedTarget), ["ipi_halt", "hlt_wake"]);
        assert_eq!(
            waits(Waits::PendingHlt),
            [
                "self_ipi_sti_hlt",
                "self_ipi_tpr_sti_hlt",
                "x2apic_self_ipi_sti_hlt",
                "x2apic_self_ipi_tpr_sti_hlt"
            ]
        );
        assert!(TESTS.iter().all(|t| t.waits == Waits::Nothing));
        // An IPI target waits: every test with one, vCPU 0 spinning (or the target in HLT).
        assert!(IRQ_TESTS
            .iter()
            .filter(|t| t.min_cpus > 1)
            .all(|t| matches!(t.waits, Waits::Spins | Waits::HaltedTarget)));
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

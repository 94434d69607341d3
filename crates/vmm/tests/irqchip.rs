//! `--irqchip kernel|split` (issue 9): the conformance kernel's `ioapic` test programs
//! the I/O APIC, takes a level-triggered interrupt that re-fires after each EOI while its
//! line is high, edge interrupts, and a masked input that stays quiet, under both
//! irqchips. With a split irqchip every I/O APIC register access the guest made reaches
//! exitlab (counted by the guest, by exitlab's I/O APIC, by the run loop's MMIO exits and
//! by KVM's `mmio_exits`), and each EOI of the level vector comes back as
//! KVM_EXIT_IOAPIC_EOI; with KVM's irqchip none does. (That the lab's knob is refused,
//! naming KVM_CAP_SPLIT_IRQCHIP, where the host lacks it is the lab's test, in
//! crates/lab/tests/irq_vm.rs.)
//!
//! They need a usable /dev/kvm; the split tests need KVM_CAP_SPLIT_IRQCHIP and fail with
//! one line naming it where the host lacks it. On kvm_pvm (this project's paravirtual
//! host) the guest's handler of the level-triggered interrupt now and then runs once too
//! often (with KVM's irqchip mostly, with the split one too): the tests accept exactly
//! that deviation there, say so, and check the rest, including, with the split
//! irqchip, that exitlab's I/O APIC sent no extra message; they pass in full on KVM
//! with SVM (run-in-l1).

mod common;

use std::time::Duration;

use exitlab_devices::serial::SharedBuffer;
use exitlab_vmm::machine::SerialOut;
use exitlab_vmm::machine::{self, IrqChip, MachineConfig, PlatformOptions, RunEnd, RunReport};

/// Handler runs of the level-triggered input (the guest's LEVEL_RUNS): one per EOI.
const LEVEL_RUNS: u64 = 3;

/// Edges the guest raises on its edge-triggered input: one message each.
const EDGES: u64 = 2;

/// One boot of the conformance kernel running its `ioapic` test.
struct Boot {
    report: RunReport,
    serial: String,
    /// The host ran the level-triggered handler once more than the EOIs allow (the
    /// kvm_pvm deviation `boot` accepts and says).
    extra_level_run: bool,
}

impl Boot {
    /// The guest's count of its I/O APIC accesses: (total, reads, writes).
    fn guest_accesses(&self) -> (u64, u64, u64) {
        let line = self
            .serial
            .lines()
            .find_map(|l| {
                l.strip_prefix("# ioapic: ")
                    .filter(|l| l.contains("MMIO accesses"))
            })
            .unwrap_or_else(|| panic!("the guest did not report its accesses:\n{}", self.serial));
        let n: Vec<u64> = line
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(n.len(), 3, "{line}");
        assert_eq!(n[0], n[1] + n[2], "{line}");
        (n[0], n[1], n[2])
    }

    fn describe(&self) -> String {
        format!(
            "ended {:?}\nexits {:?}\nI/O APIC {:?}, KVM mmio_exits {:?}\n--- serial ---\n{}",
            self.report.end,
            self.report.exits,
            self.report.ioapic,
            self.report.kvm_mmio_exits,
            self.serial
        )
    }
}

fn boot(irqchip: IrqChip) -> Boot {
    let kvm = common::kvm();
    if let Err(e) = exitlab_vmm::irqchip::probe(irqchip, &|c| kvm.check_extension_raw(c.into())) {
        panic!("{e}");
    }
    let buf = SharedBuffer::new();
    let report = machine::run(
        kvm,
        MachineConfig {
            kernel: exitlab_guest::CONFORMANCE_MULTIBOOT.to_vec(),
            kernel_path: "conformance-multiboot.elf".into(),
            cmdline: "ioapic".into(),
            initrd: None,
            cpus: 1,
            ram_bytes: 64 << 20,
            timeout: Some(Duration::from_secs(60)),
            serial: SerialOut::Writer(Box::new(buf.clone())),
            serial_input: false,
            prefer_pvh: true,
            cancel: None,
            platform: PlatformOptions {
                irqchip,
                ..PlatformOptions::default()
            },
        },
    )
    .unwrap_or_else(|e| panic!("--irqchip {}: {e}", irqchip.name()));
    let b = Boot {
        report,
        serial: String::from_utf8_lossy(&buf.contents()).into_owned(),
        extra_level_run: false,
    };
    if !matches!(b.report.end, RunEnd::DebugExit(0))
        && exitlab_host::survey().virtualization.kvm_pvm_loaded
    {
        // Seen on kvm_pvm (it emulates guest ring 0): the handler of the level-triggered
        // input runs a fourth time after the line dropped, with KVM's irqchip and, more
        // rarely, with the split one; the same guest passes with both irqchips on KVM
        // with SVM (run-in-l1). That exact deviation, and nothing else, is accepted
        // here and said on stderr. With the split irqchip the I/O APIC is exitlab's, and
        // it must have sent exactly one message per EOI the guest allowed plus the two
        // edges: the extra run then came from the host's local APIC, not from exitlab.
        let failures: Vec<&str> = b.serial.lines().filter(|l| l.starts_with("FAIL")).collect();
        let known = format!(
            "FAIL ioapic: the level-triggered input held high ran the handler {} times, expected {LEVEL_RUNS} (once, then again after each EOI until the line dropped)",
            LEVEL_RUNS + 1
        );
        assert!(
            failures == [known.as_str()] && matches!(b.report.end, RunEnd::DebugExit(1)),
            "on kvm_pvm only the known extra level-triggered delivery is accepted\n{}",
            b.describe()
        );
        if irqchip == IrqChip::Split {
            let sent = b.report.ioapic.map(|io| io.delivered);
            assert_eq!(
                sent,
                Some(LEVEL_RUNS + EDGES),
                "exitlab's I/O APIC sent other messages than the guest's EOIs allow: the \
                 extra run is exitlab's, not the host's\n{}",
                b.describe()
            );
        }
        eprintln!(
            "NOTE: this host's KVM (kvm_pvm) delivered the level-triggered I/O APIC interrupt \
             once more than its EOIs allow with the {} irqchip (a host deviation; run-in-l1 \
             passes); the access counts are checked all the same",
            irqchip.name()
        );
        return Boot {
            extra_level_run: true,
            ..b
        };
    }
    assert!(
        matches!(b.report.end, RunEnd::DebugExit(0)),
        "--irqchip {}: the guest's ioapic test did not pass\n{}",
        irqchip.name(),
        b.describe()
    );
    assert!(
        b.serial.lines().any(|l| l == "PASS ioapic"),
        "{}",
        b.describe()
    );
    b
}

#[test]
fn split_irqchip_ioapic_accesses_reach_userspace_exactly_as_counted() {
    let b = boot(IrqChip::Split);
    let (total, reads, writes) = b.guest_accesses();
    assert!(total > 0, "{}", b.describe());
    let io = b
        .report
        .ioapic
        .expect("a split irqchip has a userspace I/O APIC");
    assert_eq!(
        (io.reads, io.writes),
        (reads, writes),
        "exitlab's I/O APIC saw other accesses than the guest made\n{}",
        b.describe()
    );
    let e = &b.report.exits;
    assert_eq!(
        (e.mmio_read, e.mmio_write),
        (reads, writes),
        "the run loop's MMIO exits are the I/O APIC accesses, no more, no fewer\n{}",
        b.describe()
    );
    assert_eq!(
        e.ioapic_eoi,
        LEVEL_RUNS + u64::from(b.extra_level_run),
        "one KVM_EXIT_IOAPIC_EOI per EOI of the level-triggered vector (the handler EOIs \
         each run)\n{}",
        b.describe()
    );
    assert_eq!(
        io.delivered,
        LEVEL_RUNS + EDGES,
        "exitlab's I/O APIC sends one message per level run the EOIs allow and one per edge\n{}",
        b.describe()
    );
    match b.report.kvm_mmio_exits {
        Some(k) => assert_eq!(
            k,
            total,
            "KVM's mmio_exits (binary stats) differ from the guest's accesses\n{}",
            b.describe()
        ),
        None => panic!("this host has no KVM binary stats (mmio_exits): the count cannot be checked against KVM's"),
    }
}

#[test]
fn kernel_irqchip_ioapic_accesses_stay_in_the_kernel() {
    let b = boot(IrqChip::Kernel);
    let (total, _, _) = b.guest_accesses();
    assert!(total > 0, "{}", b.describe());
    assert_eq!(
        b.report.ioapic, None,
        "no userspace I/O APIC with KVM's irqchip"
    );
    let e = &b.report.exits;
    assert_eq!(
        (e.mmio_read, e.mmio_write, e.ioapic_eoi),
        (0, 0, 0),
        "KVM's I/O APIC answered every access and EOI\n{}",
        b.describe()
    );
    assert_eq!(b.report.kvm_mmio_exits.unwrap_or(0), 0, "{}", b.describe());
}

#[test]
fn both_irqchips_see_the_same_guest_accesses() {
    let split = boot(IrqChip::Split).guest_accesses();
    let kernel = boot(IrqChip::Kernel).guest_accesses();
    assert_eq!(
        split, kernel,
        "the guest's program does not depend on the irqchip"
    );
}

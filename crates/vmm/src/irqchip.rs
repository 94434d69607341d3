//! The interrupt controllers of a VM, as `--irqchip` chooses them, and the interrupt
//! lines the platform's devices drive.
//!
//! - [`IrqChip::Kernel`] (the default): KVM_CREATE_IRQCHIP, so KVM emulates the local
//!   APICs, the I/O APIC and the PIC pair; a device's line is KVM_IRQ_LINE on its GSI.
//! - [`IrqChip::Split`]: KVM_ENABLE_CAP(KVM_CAP_SPLIT_IRQCHIP) with 24 routes reserved
//!   for the I/O APIC: KVM keeps the local APICs, exitlab's own I/O APIC
//!   ([`exitlab_devices::ioapic`]) and PIC pair ([`exitlab_devices::pic`]) answer in
//!   userspace. A device's line goes to both; the I/O APIC delivers with KVM_SIGNAL_MSI
//!   and keeps KVM's routing table (GSI `i` = its entry `i` as an MSI) up to date, which
//!   is what makes KVM report the guest's EOIs of level-triggered vectors
//!   (KVM_EXIT_IOAPIC_EOI, handled in the run loop). KVM's PIT needs the full in-kernel
//!   irqchip, so there is no PIT in this mode (ports 0x40-0x43 are unclaimed), and the
//!   PIC's output is not connected (no ExtINT): interrupts arrive through the I/O APIC.
//! - [`IrqChip::None`]: no irqchip at all; HLT and every interrupt-controller access
//!   reach userspace (the lab's `hlt` test).

use std::sync::Arc;

use exitlab_devices::ioapic::{Ioapic, MsiMessage, MsiSink, IOAPIC_PINS};
use exitlab_devices::pc;
use exitlab_devices::pic::Pic;
use exitlab_devices::{BusDevice, IrqLine, OffsetDevice};
/// The capability number of the split irqchip (for [`probe`]'s callers).
pub use kvm_bindings::KVM_CAP_SPLIT_IRQCHIP;
use kvm_bindings::{
    kvm_enable_cap, kvm_irq_routing_entry, kvm_msi, KvmIrqRouting, KVM_IRQ_ROUTING_MSI,
};
use kvm_ioctls::{Kvm, VmFd};

use crate::bus::Bus;
use crate::VmmError;

/// Which interrupt controllers KVM emulates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IrqChip {
    /// No in-kernel irqchip.
    None,
    /// Local APICs, I/O APIC and PIC in the kernel (KVM_CREATE_IRQCHIP).
    #[default]
    Kernel,
    /// Local APICs in the kernel, I/O APIC and PIC in exitlab (KVM_CAP_SPLIT_IRQCHIP).
    Split,
}

impl IrqChip {
    /// "none", "kernel" or "split".
    pub fn name(self) -> &'static str {
        match self {
            IrqChip::None => "none",
            IrqChip::Kernel => "kernel",
            IrqChip::Split => "split",
        }
    }

    /// Parses `--irqchip`'s value: "kernel" or "split" (a run always has local APICs).
    pub fn parse(s: &str) -> Result<IrqChip, String> {
        match s.trim() {
            "kernel" => Ok(IrqChip::Kernel),
            "split" => Ok(IrqChip::Split),
            o => Err(format!("unknown irqchip '{o}': use kernel or split")),
        }
    }

    /// Whether KVM emulates the local APICs (HLT, IPIs and timers stay in the kernel).
    pub fn in_kernel_lapic(self) -> bool {
        self != IrqChip::None
    }
}

/// Routes reserved for the I/O APIC's inputs (KVM_ENABLE_CAP's args[0]).
pub const SPLIT_IOAPIC_ROUTES: u64 = IOAPIC_PINS as u64;

/// Checks that the host can give a VM `chip`; the error names the capability it lacks.
/// `check` answers KVM_CHECK_EXTENSION for a capability number (a VM fd, the system
/// fd, or a test's made-up host).
pub fn probe(chip: IrqChip, check: &dyn Fn(u32) -> i32) -> Result<(), String> {
    match chip {
        IrqChip::None => Ok(()),
        IrqChip::Kernel if check(kvm_bindings::KVM_CAP_IRQCHIP) <= 0 => {
            Err("this host's KVM lacks KVM_CAP_IRQCHIP (the in-kernel irqchip)".into())
        }
        IrqChip::Split if check(KVM_CAP_SPLIT_IRQCHIP) <= 0 => Err(
            "this host's KVM lacks KVM_CAP_SPLIT_IRQCHIP (--irqchip split): use --irqchip kernel"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// [`probe`] with this host's answers: KVM_CHECK_EXTENSION on the system fd `kvm`.
pub fn probe_host(chip: IrqChip, kvm: &Kvm) -> Result<(), String> {
    probe(chip, &|cap| kvm.check_extension_raw(cap.into()))
}

/// Turns on the split irqchip (before any vCPU exists).
pub(crate) fn enable_split(fd: &VmFd) -> Result<(), VmmError> {
    if fd.check_extension_raw(KVM_CAP_SPLIT_IRQCHIP.into()) <= 0 {
        return Err(VmmError::MissingCap(
            "KVM_CAP_SPLIT_IRQCHIP",
            "run with --irqchip kernel",
        ));
    }
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_SPLIT_IRQCHIP,
        ..Default::default()
    };
    cap.args[0] = SPLIT_IOAPIC_ROUTES;
    fd.enable_cap(&cap)
        .map_err(|e| VmmError::Kvm("KVM_ENABLE_CAP(SPLIT_IRQCHIP)", e))
}

/// The userspace interrupt controllers of a split irqchip.
#[derive(Debug, Clone)]
pub struct SplitChips {
    /// The I/O APIC.
    pub ioapic: Arc<Ioapic>,
    /// The PIC pair.
    pub pic: Arc<Pic>,
}

impl SplitChips {
    /// Creates the I/O APIC (delivering through `fd`) and the PIC pair and registers
    /// them on the buses.
    pub(crate) fn install(fd: &Arc<VmFd>, pio: &Bus, mmio: &Bus) -> Result<SplitChips, VmmError> {
        let ioapic = Arc::new(Ioapic::new(Arc::new(KvmMsi(fd.clone()))));
        let pic = Arc::new(Pic::new());
        for (_, r, bias) in pc::SPLIT_IRQCHIP_RANGES {
            let dev: Arc<dyn BusDevice> = if r.base == pc::IOAPIC.base {
                ioapic.clone()
            } else if *bias == 0 {
                pic.clone()
            } else {
                Arc::new(OffsetDevice::new(pic.clone(), *bias))
            };
            match r.space {
                exitlab_devices::IoSpace::Pio => pio,
                exitlab_devices::IoSpace::Mmio => mmio,
            }
            .insert(dev, r.base, r.len)?;
        }
        Ok(SplitChips { ioapic, pic })
    }
}

/// Delivers the I/O APIC's MSIs and keeps KVM's routing table equal to its entries.
struct KvmMsi(Arc<VmFd>);

impl MsiSink for KvmMsi {
    fn signal_msi(&self, msg: MsiMessage) -> bool {
        let msi = kvm_msi {
            address_lo: msg.address as u32,
            address_hi: (msg.address >> 32) as u32,
            data: msg.data,
            ..Default::default()
        };
        // KVM answers how many local APICs took it; 0 (none matched) is no error.
        self.0.signal_msi(msi).is_ok()
    }

    fn routes_changed(&self, routes: &[MsiMessage; IOAPIC_PINS]) {
        // A table KVM refuses leaves the previous one, whose only effect is which EOIs
        // come back to userspace; delivery itself does not use it.
        if let Ok(table) = routing_table(routes) {
            let _ = self.0.set_gsi_routing(&table);
        }
    }
}

/// KVM's routing table for the I/O APIC's messages: GSI `i` is an MSI route of entry `i`.
fn routing_table(routes: &[MsiMessage; IOAPIC_PINS]) -> Result<KvmIrqRouting, VmmError> {
    let entries: Vec<kvm_irq_routing_entry> = routes
        .iter()
        .enumerate()
        .map(|(gsi, m)| {
            let mut e = kvm_irq_routing_entry {
                gsi: gsi as u32,
                type_: KVM_IRQ_ROUTING_MSI,
                ..Default::default()
            };
            e.u.msi.address_lo = m.address as u32;
            e.u.msi.address_hi = (m.address >> 32) as u32;
            e.u.msi.data = m.data;
            e
        })
        .collect();
    KvmIrqRouting::from_entries(&entries).map_err(|_| VmmError::RoutingTable)
}

/// Raises and lowers interrupt lines through KVM_IRQ_LINE (the in-kernel irqchip).
pub(crate) struct KvmIrqLine(pub(crate) Arc<VmFd>);

impl IrqLine for KvmIrqLine {
    fn set_level(&self, gsi: u32, level: bool) {
        let _ = self.0.set_irq_line(gsi, level);
    }
}

/// Drives the userspace I/O APIC's input `gsi` and, for ISA IRQs, the PIC's.
pub(crate) struct SplitIrqLine(pub(crate) SplitChips);

impl IrqLine for SplitIrqLine {
    fn set_level(&self, gsi: u32, level: bool) {
        self.0.pic.set_level(gsi, level);
        self.0.ioapic.set_level(gsi, level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irqchip_names_round_trip() {
        for c in [IrqChip::Kernel, IrqChip::Split] {
            assert_eq!(IrqChip::parse(c.name()), Ok(c));
        }
        let e = IrqChip::parse("user").unwrap_err();
        assert!(e.contains("use kernel or split"), "{e}");
        assert!(IrqChip::parse("none").is_err(), "not a --irqchip value");
        assert!(!IrqChip::None.in_kernel_lapic());
        assert!(IrqChip::Split.in_kernel_lapic());
    }

    #[test]
    fn probe_names_the_missing_capability() {
        let none = |_: u32| 0;
        let all = |_: u32| 1;
        let no_split = |c: u32| i32::from(c != KVM_CAP_SPLIT_IRQCHIP);
        let e = probe(IrqChip::Split, &no_split).unwrap_err();
        assert!(e.contains("KVM_CAP_SPLIT_IRQCHIP"), "{e}");
        assert!(probe(IrqChip::Kernel, &no_split).is_ok());
        assert!(probe(IrqChip::Split, &all).is_ok());
        assert!(probe(IrqChip::Kernel, &none)
            .unwrap_err()
            .contains("KVM_CAP_IRQCHIP"));
        assert!(probe(IrqChip::None, &none).is_ok());
    }

    #[test]
    fn routing_table_has_one_msi_route_per_input() {
        let mut routes = [MsiMessage::default(); IOAPIC_PINS];
        routes[10] = MsiMessage {
            address: 0xfee0_1000,
            data: 0xc041,
        };
        let t = routing_table(&routes).unwrap();
        let e = t.as_slice();
        assert_eq!(e.len(), IOAPIC_PINS);
        assert!(e
            .iter()
            .enumerate()
            .all(|(i, r)| r.gsi == i as u32 && r.type_ == KVM_IRQ_ROUTING_MSI));
    }
}

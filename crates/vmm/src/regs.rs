//! Initial register state and register dumps.

use exitlab_boot::entry::{EntryState, Segment};
use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};
use kvm_ioctls::VcpuFd;

use crate::VmmError;

fn segment(s: Segment) -> kvm_segment {
    kvm_segment {
        base: s.base,
        limit: s.limit,
        selector: s.selector,
        type_: s.type_,
        present: s.present.into(),
        dpl: s.dpl,
        db: s.db.into(),
        s: s.s.into(),
        l: s.l.into(),
        g: s.g.into(),
        avl: s.avl.into(),
        unusable: u8::from(!s.present),
        padding: 0,
    }
}

/// Sets segment, control and general registers for the first instruction, as the boot
/// loader described them.
pub fn apply(fd: &VcpuFd, entry: &EntryState) -> Result<(), VmmError> {
    let mut sregs: kvm_sregs = fd
        .get_sregs()
        .map_err(|e| VmmError::Kvm("KVM_GET_SREGS", e))?;
    let code = segment(entry.code_segment());
    let data = segment(entry.data_segment());
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = segment(entry.tss_segment());
    if let Some((base, limit)) = entry.gdt {
        sregs.gdt.base = base;
        sregs.gdt.limit = limit;
    }
    sregs.cr0 = entry.cr0();
    sregs.cr3 = entry.cr3();
    sregs.cr4 = entry.cr4();
    sregs.efer = entry.efer();
    fd.set_sregs(&sregs)
        .map_err(|e| VmmError::Kvm("KVM_SET_SREGS", e))?;
    let regs = kvm_regs {
        rip: entry.rip,
        rsp: entry.rsp,
        rax: entry.rax,
        rbx: entry.rbx,
        rsi: entry.rsi,
        rflags: entry.rflags | 0x2,
        ..Default::default()
    };
    fd.set_regs(&regs)
        .map_err(|e| VmmError::Kvm("KVM_SET_REGS", e))
}

/// A human-readable dump of the general, segment and control registers.
pub fn dump(fd: &VcpuFd) -> String {
    let mut out = String::new();
    match fd.get_regs() {
        Ok(r) => {
            out += &format!(
                "rip={:#018x} rflags={:#010x} rsp={:#018x} rbp={:#018x}\n\
                 rax={:#018x} rbx={:#018x} rcx={:#018x} rdx={:#018x}\n\
                 rsi={:#018x} rdi={:#018x} r8 ={:#018x} r9 ={:#018x}\n\
                 r10={:#018x} r11={:#018x} r12={:#018x} r13={:#018x}\n\
                 r14={:#018x} r15={:#018x}\n",
                r.rip,
                r.rflags,
                r.rsp,
                r.rbp,
                r.rax,
                r.rbx,
                r.rcx,
                r.rdx,
                r.rsi,
                r.rdi,
                r.r8,
                r.r9,
                r.r10,
                r.r11,
                r.r12,
                r.r13,
                r.r14,
                r.r15
            );
        }
        Err(e) => out += &format!("(general registers unavailable: {e})\n"),
    }
    match fd.get_sregs() {
        Ok(s) => {
            out += &format!(
                "cs={:#06x} (base {:#x} l={} db={} dpl={}) ss={:#06x} ds={:#06x}\n\
                 cr0={:#x} cr2={:#x} cr3={:#x} cr4={:#x} efer={:#x} apic_base={:#x}\n\
                 gdt={:#x}+{:#x} idt={:#x}+{:#x} tr={:#06x}",
                s.cs.selector,
                s.cs.base,
                s.cs.l,
                s.cs.db,
                s.cs.dpl,
                s.ss.selector,
                s.ds.selector,
                s.cr0,
                s.cr2,
                s.cr3,
                s.cr4,
                s.efer,
                s.apic_base,
                s.gdt.base,
                s.gdt.limit,
                s.idt.base,
                s.idt.limit,
                s.tr.selector
            );
        }
        Err(e) => out += &format!("(segment registers unavailable: {e})"),
    }
    out
}

/// What a stopped vCPU's interrupt delivery looked like: its run state, its interrupt
/// flag, and its local APIC's priorities and highest pending and in-service vectors
/// (in-kernel LAPIC), read for failure reports of a guest that made no progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterruptState {
    /// KVM's run state of the vCPU (`KVM_MP_STATE_*`).
    pub mp_state: u32,
    /// RFLAGS.IF.
    pub interrupts_enabled: bool,
    /// The LAPIC's task priority register.
    pub tpr: u8,
    /// The highest vector requested and not yet delivered (IRR), if any.
    pub irr_highest: Option<u8>,
    /// The highest vector in service (ISR), if any.
    pub isr_highest: Option<u8>,
    /// The LAPIC is software-enabled (spurious-vector register bit 8); a disabled one
    /// delivers nothing, by the guest's choice.
    pub apic_enabled: bool,
}

/// KVM's run state of a halted vCPU (`KVM_MP_STATE_HALTED`), for [`InterruptState::mp_state`].
pub const MP_STATE_HALTED: u32 = kvm_bindings::KVM_MP_STATE_HALTED;

/// The 32-bit LAPIC register at byte offset `off` of a register page
/// (`kvm_lapic_state::regs`, little-endian); 0 past the page's end.
pub fn lapic_register(page: &[std::os::raw::c_char], off: usize) -> u32 {
    let mut b = [0u8; 4];
    for (i, x) in b.iter_mut().enumerate() {
        *x = page.get(off + i).copied().unwrap_or(0) as u8;
    }
    u32::from_le_bytes(b)
}

/// Writes the 32-bit LAPIC register at byte offset `off` of a register page (nothing
/// past the page's end).
pub fn set_lapic_register(page: &mut [std::os::raw::c_char], off: usize, value: u32) {
    for (i, x) in value.to_le_bytes().iter().enumerate() {
        if let Some(b) = page.get_mut(off + i) {
            *b = *x as std::os::raw::c_char;
        }
    }
}

/// Offsets of registers in the LAPIC's register page (`kvm_lapic_state::regs`).
const APIC_TPR: usize = 0x80;
const APIC_SVR: usize = 0xF0;
const APIC_ISR: usize = 0x100;
const APIC_IRR: usize = 0x200;

impl InterruptState {
    /// Reads the state from a LAPIC register page, the run state and RFLAGS.
    pub fn from_parts(lapic: &[std::os::raw::c_char], mp_state: u32, rflags: u64) -> Self {
        let word = |off: usize| lapic_register(lapic, off);
        // Eight 32-bit registers 16 bytes apart hold vectors 0..=255, low to high.
        let highest = |base: usize| {
            (0..8).rev().find_map(|i| {
                let w = word(base + 0x10 * i);
                (w != 0).then(|| (32 * i + 31 - w.leading_zeros() as usize) as u8)
            })
        };
        InterruptState {
            mp_state,
            interrupts_enabled: rflags & (1 << 9) != 0,
            tpr: word(APIC_TPR) as u8,
            irr_highest: highest(APIC_IRR),
            isr_highest: highest(APIC_ISR),
            apic_enabled: word(APIC_SVR) & 0x100 != 0,
        }
    }

    /// The processor priority: the higher of the task priority's and the in-service
    /// vector's priority classes (Intel SDM 10.8.3.1), as a class 0..=15.
    pub fn ppr_class(&self) -> u8 {
        (self.tpr >> 4).max(self.isr_highest.map_or(0, |v| v >> 4))
    }

    /// Halted with interrupts enabled, its LAPIC enabled and nothing requested or in
    /// service: waiting for an interrupt no one has sent yet.
    pub fn halted_with_nothing_pending(&self) -> bool {
        self.mp_state == MP_STATE_HALTED
            && self.interrupts_enabled
            && self.apic_enabled
            && self.irr_highest.is_none()
            && self.isr_highest.is_none()
    }

    /// A vector the vCPU should have been woken for and was not: the vCPU halted with
    /// interrupts enabled while its enabled LAPIC held a requested vector of a priority
    /// class above the processor priority. On a correct host that vCPU would run its
    /// handler; a guest stuck like this is most likely stuck in the host (a lost
    /// wakeup), not in its own code.
    pub fn undelivered_vector(&self) -> Option<u8> {
        let v = self.irr_highest?;
        (self.mp_state == kvm_bindings::KVM_MP_STATE_HALTED
            && self.interrupts_enabled
            && self.apic_enabled
            && v >> 4 > self.ppr_class())
        .then_some(v)
    }
}

impl std::fmt::Display for InterruptState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.mp_state {
            kvm_bindings::KVM_MP_STATE_RUNNABLE => "runnable".to_string(),
            kvm_bindings::KVM_MP_STATE_UNINITIALIZED => "uninitialized".to_string(),
            kvm_bindings::KVM_MP_STATE_INIT_RECEIVED => "waiting for SIPI".to_string(),
            kvm_bindings::KVM_MP_STATE_HALTED => "halted".to_string(),
            other => format!("mp_state {other}"),
        };
        let vector = |v: Option<u8>| v.map_or("none".to_string(), |v| format!("{v:#04x}"));
        write!(
            f,
            "{state}, IF={}; local APIC{}: TPR={:#04x}, highest requested (IRR) {}, highest in service (ISR) {}",
            u8::from(self.interrupts_enabled),
            if self.apic_enabled { "" } else { " (disabled)" },
            self.tpr,
            vector(self.irr_highest),
            vector(self.isr_highest)
        )
    }
}

/// The interrupt state of a vCPU with an in-kernel LAPIC; `None` without one (or when
/// KVM does not give it).
pub fn interrupt_state(fd: &VcpuFd) -> Option<InterruptState> {
    let lapic = fd.get_lapic().ok()?;
    let mp = fd.get_mp_state().ok()?;
    let rflags = fd.get_regs().ok()?.rflags;
    Some(InterruptState::from_parts(&lapic.regs, mp.mp_state, rflags))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A register page with the LAPIC enabled (SVR bit 8) and `set` written.
    fn page(set: &[(usize, u32)]) -> Vec<std::os::raw::c_char> {
        let mut p = vec![0 as std::os::raw::c_char; 1024];
        for &(off, v) in [(APIC_SVR, 0x1ff)].iter().chain(set) {
            set_lapic_register(&mut p, off, v);
        }
        p
    }

    #[test]
    fn the_highest_requested_and_in_service_vectors_are_read_from_the_register_page() {
        // Vector 0xf1 requested (IRR word 7, bit 17), 0x31 in service (ISR word 1, bit 17).
        let s = InterruptState::from_parts(
            &page(&[
                (APIC_IRR + 0x70, 1 << 17),
                (APIC_IRR, 1 << 3),
                (APIC_ISR + 0x10, 1 << 17),
            ]),
            kvm_bindings::KVM_MP_STATE_RUNNABLE,
            0x2,
        );
        assert_eq!(s.irr_highest, Some(0xf1));
        assert_eq!(s.isr_highest, Some(0x31));
        assert!(!s.interrupts_enabled);
        assert_eq!(s.ppr_class(), 3);
        assert_eq!(
            s.to_string(),
            "runnable, IF=0; local APIC: TPR=0x00, highest requested (IRR) 0xf1, highest in service (ISR) 0x31"
        );
        let empty =
            InterruptState::from_parts(&page(&[]), kvm_bindings::KVM_MP_STATE_HALTED, 0x202);
        assert_eq!((empty.irr_highest, empty.isr_highest), (None, None));
        assert_eq!(empty.undelivered_vector(), None);
    }

    #[test]
    fn a_vector_is_undelivered_only_when_halted_with_if_set_above_the_processor_priority() {
        let halted = kvm_bindings::KVM_MP_STATE_HALTED;
        // 0xe0 requested, nothing in service, TPR 0: should have woken the vCPU.
        let irr = (APIC_IRR + 0x70, 1);
        let s = InterruptState::from_parts(&page(&[irr]), halted, 0x246);
        assert_eq!(s.undelivered_vector(), Some(0xe0));
        // Interrupts disabled: the guest itself holds it off.
        let s = InterruptState::from_parts(&page(&[irr]), halted, 0x46);
        assert_eq!(s.undelivered_vector(), None);
        // Running, not halted.
        let s =
            InterruptState::from_parts(&page(&[irr]), kvm_bindings::KVM_MP_STATE_RUNNABLE, 0x246);
        assert_eq!(s.undelivered_vector(), None);
        // Task priority at the vector's class (0xe): masked by the guest.
        let s = InterruptState::from_parts(&page(&[irr, (APIC_TPR, 0xe0)]), halted, 0x246);
        assert_eq!(s.undelivered_vector(), None);
        // The LAPIC disabled by the guest (SVR bit 8 clear): nothing is delivered.
        let s = InterruptState::from_parts(&page(&[irr, (APIC_SVR, 0xff)]), halted, 0x246);
        assert!(!s.apic_enabled);
        assert_eq!(s.undelivered_vector(), None);
        assert!(s.to_string().contains("local APIC (disabled): "), "{s}");
        // A higher vector in service (0xf0): waits for its EOI.
        let s =
            InterruptState::from_parts(&page(&[irr, (APIC_ISR + 0x70, 1 << 16)]), halted, 0x246);
        assert_eq!(s.undelivered_vector(), None);
    }

    #[test]
    fn halted_with_nothing_pending_needs_if_an_enabled_lapic_and_empty_irr_and_isr() {
        let halted = kvm_bindings::KVM_MP_STATE_HALTED;
        assert!(InterruptState::from_parts(&page(&[]), halted, 0x246).halted_with_nothing_pending());
        let not = [
            InterruptState::from_parts(&page(&[]), halted, 0x46),
            InterruptState::from_parts(&page(&[]), kvm_bindings::KVM_MP_STATE_RUNNABLE, 0x246),
            InterruptState::from_parts(&page(&[(APIC_IRR + 0x70, 1)]), halted, 0x246),
            InterruptState::from_parts(&page(&[(APIC_ISR + 0x70, 1)]), halted, 0x246),
            InterruptState::from_parts(&page(&[(APIC_SVR, 0xff)]), halted, 0x246),
        ];
        for s in not {
            assert!(!s.halted_with_nothing_pending(), "{s}");
        }
    }
}

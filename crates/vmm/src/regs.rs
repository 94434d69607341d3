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

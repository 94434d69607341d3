//! Initial register state and register dumps.

use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};
use kvm_ioctls::VcpuFd;

use crate::VmmError;

const CR0_PE: u64 = 1;
const CR0_ET: u64 = 1 << 4;
const CR0_NE: u64 = 1 << 5;
const CR0_PG: u64 = 1 << 31;
const CR4_PAE: u64 = 1 << 5;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;

/// The processor mode a guest is entered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryMode {
    /// 32-bit protected mode, flat 4 GiB segments, paging off (multiboot, PVH).
    Protected32,
    /// 64-bit long mode with the given page-table root (Linux 64-bit boot protocol).
    Long64 {
        /// Guest-physical address of the PML4.
        cr3: u64,
    },
}

/// Register values at the first instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRegs {
    /// Processor mode.
    pub mode: EntryMode,
    /// Instruction pointer.
    pub rip: u64,
    /// Stack pointer.
    pub rsp: u64,
    /// RAX (multiboot magic).
    pub rax: u64,
    /// RBX (multiboot info / PVH start info).
    pub rbx: u64,
    /// RSI (Linux zero page).
    pub rsi: u64,
}

fn flat(selector: u16, code: bool, long: bool) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_: if code { 0xb } else { 0x3 },
        present: 1,
        dpl: 0,
        db: u8::from(!long || !code),
        s: 1,
        l: u8::from(long && code),
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// Sets segment, control and general registers for `entry`.
pub fn apply(fd: &VcpuFd, entry: &EntryRegs) -> Result<(), VmmError> {
    let mut sregs: kvm_sregs = fd.get_sregs().map_err(|e| VmmError::Kvm("KVM_GET_SREGS", e))?;
    let long = matches!(entry.mode, EntryMode::Long64 { .. });
    let code = flat(0x08, true, long);
    let data = flat(0x10, false, long);
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.cr0 = CR0_PE | CR0_ET | CR0_NE;
    match entry.mode {
        EntryMode::Protected32 => {
            sregs.cr4 = 0;
            sregs.efer = 0;
        }
        EntryMode::Long64 { cr3 } => {
            sregs.cr3 = cr3;
            sregs.cr4 = CR4_PAE;
            sregs.cr0 |= CR0_PG;
            sregs.efer = EFER_LME | EFER_LMA;
        }
    }
    fd.set_sregs(&sregs).map_err(|e| VmmError::Kvm("KVM_SET_SREGS", e))?;
    let regs = kvm_regs {
        rip: entry.rip,
        rsp: entry.rsp,
        rax: entry.rax,
        rbx: entry.rbx,
        rsi: entry.rsi,
        rflags: 0x2,
        ..Default::default()
    };
    fd.set_regs(&regs).map_err(|e| VmmError::Kvm("KVM_SET_REGS", e))
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
                r.rip, r.rflags, r.rsp, r.rbp, r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.r8,
                r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15
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
                s.cs.selector, s.cs.base, s.cs.l, s.cs.db, s.cs.dpl, s.ss.selector,
                s.ds.selector, s.cr0, s.cr2, s.cr3, s.cr4, s.efer, s.apic_base, s.gdt.base,
                s.gdt.limit, s.idt.base, s.idt.limit, s.tr.selector
            );
        }
        Err(e) => out += &format!("(segment registers unavailable: {e})"),
    }
    out
}

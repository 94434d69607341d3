//! The C rendering of the ABI for the guest kernels, generated from [`crate`]'s own
//! constants and structs: `abi.h` (C `#define`s, structs with `_Static_assert`ed layouts,
//! field offsets for assembly), `abi.ld` (the same constants as linker-script symbols)
//! and `abi_layout.rs` (the host's sizes and offsets by the header's names). The guest
//! crate's build script writes them and compiles its kernels against them.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::any::TypeId;
use core::fmt::Write as _;

use crate::*;

/// The generated texts (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// `abi.h`, for C and assembly.
    pub header: String,
    /// `abi.ld`: each constant as the linker-script symbol `ABI_<NAME>`.
    pub linker_symbols: String,
    /// `abi_layout.rs`: `LAYOUT`, each `SIZEOF_`/`OFFSETOF_` name of the header with the
    /// value the including crate's compiler gives it.
    pub layout: String,
}

/// A constant of `abi.rs` as C and linker-script text.
trait AbiConst {
    fn c_literal(&self) -> String;
    fn value(&self) -> u64;
}

impl AbiConst for u64 {
    fn c_literal(&self) -> String {
        format!("ABI_U64({self:#x})")
    }
    fn value(&self) -> u64 {
        *self
    }
}

impl AbiConst for u32 {
    fn c_literal(&self) -> String {
        format!("ABI_U32({self:#x})")
    }
    fn value(&self) -> u64 {
        u64::from(*self)
    }
}

impl AbiConst for u16 {
    fn c_literal(&self) -> String {
        format!("ABI_U32({self:#x})")
    }
    fn value(&self) -> u64 {
        u64::from(*self)
    }
}

/// C type of a struct field of `abi.rs`.
fn c_type<T: 'static>(_: &T) -> &'static str {
    let id = TypeId::of::<T>();
    if id == TypeId::of::<u64>() {
        "uint64_t"
    } else if id == TypeId::of::<u32>() {
        "uint32_t"
    } else if id == TypeId::of::<u16>() {
        "uint16_t"
    } else if id == TypeId::of::<u8>() {
        "uint8_t"
    } else {
        "unsupported"
    }
}

/// One struct of `abi.rs`: its name, C name, size, and fields (name, C type, offset).
struct AbiStruct {
    rust: &'static str,
    c: &'static str,
    size: usize,
    fields: Vec<(&'static str, &'static str, usize)>,
}

macro_rules! abi_consts {
    ($($name:ident),* $(,)?) => {
        vec![$((stringify!($name), $name.c_literal(), $name.value())),*]
    };
}

macro_rules! abi_struct {
    ($ty:ident, $c:literal, [$($field:ident),* $(,)?]) => {{
        let v = $ty::default();
        AbiStruct {
            rust: stringify!($ty),
            c: $c,
            size: core::mem::size_of::<$ty>(),
            fields: vec![$((stringify!($field), c_type(&v.$field), core::mem::offset_of!($ty, $field))),*],
        }
    }};
}

/// Names declared by `pub const NAME:` and the fields of each `pub struct` in `abi.rs`.
fn scan_abi(text: &str) -> (BTreeSet<String>, Vec<(String, Vec<String>)>) {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut consts = BTreeSet::new();
    let mut structs: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_struct = false;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("pub const ") {
            consts.insert(ident(rest));
        } else if let Some(rest) = line.strip_prefix("pub struct ") {
            structs.push((ident(rest), Vec::new()));
            in_struct = true;
        } else if in_struct && line.starts_with('}') {
            in_struct = false;
        } else if in_struct {
            if let (Some(rest), Some(last)) = (line.strip_prefix("pub "), structs.last_mut()) {
                last.1.push(ident(rest));
            }
        }
    }
    (consts, structs)
}

/// Generates `abi.h` and `abi.ld` from `abi.rs`, and `abi_layout.rs`: the same sizes and
/// offsets, by the header's names, as the compiler of the crate that includes it computes
/// them (the host's view), for a test to check against the header. Fails when `abi.rs`
/// declares a constant, struct or field the lists below leave out, or a field type C
/// cannot express.
pub fn generate() -> Result<Generated, String> {
    let abi_text = include_str!("abi.rs");
    let consts = abi_consts![
        ABI_VERSION,
        CONTROL_MAGIC,
        KERNEL_GPA,
        KERNEL_END_GPA,
        CONTROL_GPA,
        STAMPS_GPA,
        SAMPLES_GPA,
        SAMPLES_BYTES_PER_CPU,
        SAMPLES_PER_BATCH,
        MAX_CPUS,
        MIN_RAM_BYTES,
        PAGE_SIZE,
        MMIO_USER_GPA,
        MMIO_IOEVENTFD_GPA,
        MMIO_USER_READ_VALUE,
        DOORBELL_PORT,
        PROBE_PORT,
        USER_PORT,
        KERNEL_PORT,
        USER_MSR,
        USER_MSR_READ_VALUE,
        MSR_TSC_ADJUST,
        DOORBELL_READY,
        DOORBELL_BATCH,
        DOORBELL_DONE,
        DOORBELL_FAULT,
        DOORBELL_BAD_PARAMS,
        DOORBELL_PROBED,
        DOORBELL_PROBE,
        PROBE_BLOCKS,
        PROBE_ACCESSES,
        PROBE_EXITS,
        GUEST_ERR_ABI,
        GUEST_ERR_TEST,
        GUEST_ERR_RING,
        GUEST_ERR_COUNTS,
        MAX_WORK_CYCLES,
        TEST_LOOP_OVERHEAD,
        TEST_CPUID,
        TEST_CPUID_0XD,
        TEST_VMCALL,
        TEST_HLT,
        TEST_INL_FROM_KERNEL,
        TEST_OUTL_TO_KERNEL,
        TEST_INL_FROM_USER,
        TEST_OUTL_TO_USER,
        TEST_MMIO_READ_USER,
        TEST_MMIO_WRITE_USER,
        TEST_MMIO_WRITE_IOEVENTFD,
        TEST_RD_TSC_ADJUST_MSR,
        TEST_WR_TSC_ADJUST_MSR,
        TEST_RDMSR_USER,
        TEST_WRMSR_USER,
        TEST_MOV_FROM_CR8,
        TEST_MOV_TO_CR8,
        PERCPU_GPA,
        PERCPU_BYTES,
        AP_TRAMPOLINE_GPA,
        LAPIC_GPA,
        GUEST_ERR_FEATURE,
        GUEST_ERR_AP_TIMEOUT,
        APIC_XAPIC,
        APIC_X2APIC,
        IDLE_POLL,
        IDLE_HLT,
        IDLE_MWAIT,
        VECTOR_IPI,
        VECTOR_SELF,
        VECTOR_LOCK,
        VECTOR_TIMER,
        VECTOR_SPURIOUS,
        TSC_DEADLINE_DELTA,
        KVM_HC_SEND_IPI,
        TEST_IPI,
        TEST_IPI_HALT,
        TEST_IPI_ONE_WAY,
        TEST_SELF_IPI_STI_NOP,
        TEST_SELF_IPI_STI_HLT,
        TEST_SELF_IPI_TPR,
        TEST_SELF_IPI_TPR_STI_NOP,
        TEST_SELF_IPI_TPR_STI_HLT,
        TEST_EOI,
        TEST_TSCDEADLINE_IMMED,
        TEST_TSCDEADLINE,
        TEST_LAPIC_TIMER_ONESHOT,
        TEST_BROADCAST_IPI,
        TEST_BROADCAST_LOCK,
        TEST_PV_SEND_IPI,
        TEST_HLT_WAKE,
        TEST_SMP_BRINGUP,
        TEST_SELFTEST_GARBAGE,
        TEST_SELFTEST_TRIPLE_FAULT,
        TEST_SELFTEST_SPIN,
        TEST_SELFTEST_UD,
        SAMPLE_BYTES,
    ];
    let structs = [
        abi_struct!(
            Control,
            "control",
            [
                magic,
                abi_version,
                test,
                ring,
                samples,
                batch,
                warmup,
                arg0,
                arg1,
                batch_count,
                guest_error,
                fault_vector,
                fault_rip,
                fault_error,
                fault_cr2,
                ready_tsc,
                apic_mode,
                cpus,
                idle,
                cpus_online,
                work_cycles,
                work_iterations,
                work_spent,
                probe,
                probe_kernel_before,
                probe_user_before,
                probe_kernel_after,
                probe_user_after,
            ]
        ),
        abi_struct!(
            PerCpu,
            "percpu",
            [
                online,
                apic_id,
                irqs,
                last_entry_tsc,
                acks,
                wake_tsc,
                wakes,
                self_ipis
            ]
        ),
        abi_struct!(Stamps, "stamps", [seq, t_return, t_reenter]),
        abi_struct!(
            Sample,
            "sample",
            [
                g_start,
                g_end,
                h_prev_reenter,
                h_return,
                h_reenter,
                seq_delta,
                g_loop
            ]
        ),
    ];

    // Every constant and struct field of abi.rs must reach the C side.
    let (declared_consts, declared_structs) = scan_abi(abi_text);
    let exported: BTreeSet<String> = consts.iter().map(|(n, _, _)| n.to_string()).collect();
    if let Some(missing) = declared_consts.difference(&exported).next() {
        return Err(format!(
            "src/abi.rs declares `{missing}`, which c_header.rs does not export to abi.h: add it \
             to the abi_consts! list in c_header.rs"
        ));
    }
    for (name, fields) in &declared_structs {
        let Some(s) = structs.iter().find(|s| s.rust == name) else {
            return Err(format!(
                "src/abi.rs declares struct `{name}`, which c_header.rs does not export to abi.h"
            ));
        };
        let listed: Vec<&str> = s.fields.iter().map(|f| f.0).collect();
        if *fields != listed {
            return Err(format!(
                "the fields of `{name}` in src/abi.rs ({fields:?}) differ from c_header.rs's list \
                 ({listed:?}): update the abi_struct! call in c_header.rs"
            ));
        }
        if let Some(f) = s.fields.iter().find(|f| f.1 == "unsupported") {
            return Err(format!(
                "`{name}::{}` has a type c_header.rs cannot express in C",
                f.0
            ));
        }
    }
    if SAMPLE_BYTES != core::mem::size_of::<Sample>() as u64 {
        return Err("SAMPLE_BYTES differs from the size of Sample".into());
    }

    let mut h = String::new();
    let mut ld = String::new();
    let _ = writeln!(
        h,
        "/* Generated from exitlab-abi's src/abi.rs by its c_header.rs. Do not edit. */"
    );
    let _ = writeln!(h, "#ifndef EXITLAB_ABI_H\n#define EXITLAB_ABI_H\n");
    let _ = writeln!(h, "#ifdef __ASSEMBLER__");
    let _ = writeln!(h, "#define ABI_U64(x) x\n#define ABI_U32(x) x");
    let _ = writeln!(h, "#else");
    let _ = writeln!(h, "#define ABI_U64(x) x##ULL\n#define ABI_U32(x) x##U");
    let _ = writeln!(h, "#endif\n");
    let _ = writeln!(
        ld,
        "/* Generated from exitlab-abi's src/abi.rs by its c_header.rs. Do not edit. */"
    );
    for (name, lit, value) in &consts {
        let _ = writeln!(h, "#define {name} {lit}");
        let _ = writeln!(ld, "ABI_{name} = {value:#x};");
    }
    let _ = writeln!(h);
    for s in &structs {
        let upper = s.c.to_ascii_uppercase();
        let _ = writeln!(h, "#define SIZEOF_{upper} {}", s.size);
        for (field, _, off) in &s.fields {
            let _ = writeln!(
                h,
                "#define OFFSETOF_{upper}_{} {off}",
                field.to_ascii_uppercase()
            );
        }
    }
    let _ = writeln!(
        h,
        "\n#ifndef __ASSEMBLER__\n#include <stdint.h>\n#include <stddef.h>\n"
    );
    for s in &structs {
        let upper = s.c.to_ascii_uppercase();
        let _ = writeln!(h, "/* {} in src/abi.rs */\nstruct {} {{", s.rust, s.c);
        for (field, ty, _) in &s.fields {
            let _ = writeln!(h, "    {ty} {field};");
        }
        let _ = writeln!(h, "}};");
        let _ = writeln!(
            h,
            "_Static_assert(sizeof(struct {}) == SIZEOF_{upper}, \"struct {} differs from abi.rs\");",
            s.c, s.c
        );
        for (field, _, _) in &s.fields {
            let _ = writeln!(
                h,
                "_Static_assert(offsetof(struct {c}, {field}) == OFFSETOF_{upper}_{fu}, \
                 \"{c}.{field} differs from abi.rs\");",
                c = s.c,
                fu = field.to_ascii_uppercase()
            );
        }
        let _ = writeln!(h);
    }
    let _ = writeln!(
        h,
        "#endif /* __ASSEMBLER__ */\n\n#endif /* EXITLAB_ABI_H */"
    );
    let mut rs = String::from(
        "// Generated by exitlab-abi's c_header.rs. Do not edit.\n\
         /// Each ABI struct's size and field offsets as the including crate is compiled,\n\
         /// by the names of their `#define`s in abi.h.\n\
         pub const LAYOUT: &[(&str, usize)] = &[\n",
    );
    for s in &structs {
        let upper = s.c.to_ascii_uppercase();
        let _ = writeln!(
            rs,
            "    (\"SIZEOF_{upper}\", core::mem::size_of::<exitlab_abi::{}>()),",
            s.rust
        );
        for (field, _, _) in &s.fields {
            let _ = writeln!(
                rs,
                "    (\"OFFSETOF_{upper}_{}\", core::mem::offset_of!(exitlab_abi::{}, {field})),",
                field.to_ascii_uppercase(),
                s.rust
            );
        }
    }
    rs.push_str("];\n");
    Ok(Generated {
        header: h,
        linker_symbols: ld,
        layout: rs,
    })
}

//! Builds the guest test kernel from source.
//!
//! 1. `src/abi.rs` is included here and turned into `abi.h` (C `#define`s, structs with
//!    `_Static_assert`ed layouts, field offsets for assembly) and `abi.ld` (the same
//!    constants as linker-script symbols), so the kernel and the host share one contract.
//! 2. `kernel/*.S` and `kernel/*.c` are compiled with the system `gcc` through `cc`.
//! 3. The objects are linked with binutils `ld` using `kernel/kernel.ld`, and the ELF is
//!    flattened with `objcopy -O binary` into `$OUT_DIR/exitlab-guest.bin`.
//! 4. The flat image's multiboot header is checked against the ELF's layout and the ABI,
//!    and `$OUT_DIR/image_info.rs` records the addresses the host needs.
//! 5. The conformance kernel in `conformance/` is compiled for 32-bit protected mode and
//!    linked three times with `conformance/conformance.ld`: as a multiboot ELF32
//!    (`conformance-multiboot.elf`), as a multiboot a.out-kludge flat binary
//!    (`conformance-multiboot.bin`) and as a PVH ELF32 (`conformance-pvh.elf`).
#![deny(unsafe_code)]

use std::any::TypeId;
use std::collections::BTreeSet;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[allow(dead_code, missing_docs)]
mod abi {
    include!("src/abi.rs");
}

use abi::*;

/// Multiboot v1 header magic.
const MULTIBOOT_MAGIC: u32 = 0x1BAD_B002;
/// The multiboot header must lie within this many bytes of the image start.
const MULTIBOOT_SEARCH: usize = 8192;

/// Kernel sources, relative to the crate root.
const ASM_SOURCES: &[&str] = &["kernel/boot.S", "kernel/smp.S"];
const C_SOURCES: &[&str] = &["kernel/kmain.c", "kernel/apic.c"];
const OTHER_SOURCES: &[&str] = &[
    "kernel/kernel.ld",
    "kernel/kernel.h",
    "kernel/apic.h",
    "src/abi.rs",
];

/// Conformance kernel sources in `conformance/`: the code shared by every image...
const CONFORMANCE_COMMON: &[&str] = &[
    "entry.S",
    "main.c",
    "lib.c",
    "boot.c",
    "acpi.c",
    "fwcfg.c",
    "timers.c",
    "pci.c",
    "serial.c",
    "smp.c",
    "faults.c",
    "nmi.c",
    "strio.c",
    "mce.c",
    "s3.c",
    "s3_wake.S",
    "ioapic.c",
];
/// ...the piece that makes each image bootable its way...
const CONFORMANCE_HEADERS: &[&str] = &["multiboot_elf.S", "multiboot_aout.S", "pvh_note.S"];
/// ...and everything else they are built from.
const CONFORMANCE_OTHER: &[&str] = &["conformance.h", "conformance.ld", "realmode.ld"];
/// The real-mode kernel linked at 0x8000 (`conformance-realmode.elf`), with its own
/// linker script.
const CONFORMANCE_REALMODE: &str = "realmode.S";

#[path = "initrd/build_initrd.rs"]
mod build_initrd;

fn main() {
    if let Err(msg) = run() {
        eprintln!("error: building the exitlab guest kernel failed: {msg}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let manifest = PathBuf::from(env_var("CARGO_MANIFEST_DIR")?);
    let out = PathBuf::from(env_var("OUT_DIR")?);

    println!("cargo:rerun-if-changed=build.rs");
    for src in ASM_SOURCES.iter().chain(C_SOURCES).chain(OTHER_SOURCES) {
        println!("cargo:rerun-if-changed={src}");
    }

    for src in CONFORMANCE_COMMON
        .iter()
        .chain(CONFORMANCE_HEADERS)
        .chain(CONFORMANCE_OTHER)
        .chain([&CONFORMANCE_REALMODE])
    {
        println!("cargo:rerun-if-changed=conformance/{src}");
    }

    check_tool("gcc", "build-essential")?;
    check_tool("ld", "binutils")?;
    check_tool("objcopy", "binutils")?;

    let abi_text = fs::read_to_string(manifest.join("src/abi.rs"))
        .map_err(|e| format!("cannot read src/abi.rs: {e}"))?;
    let (header, ld_syms, layout) = generate_abi(&abi_text)?;
    write(&out.join("abi.h"), &header)?;
    write(&out.join("abi.ld"), &ld_syms)?;
    write(&out.join("abi_layout.rs"), &layout)?;

    let objects = compile(&manifest, &out)?;

    let elf = out.join("exitlab-guest.elf");
    let bin = out.join("exitlab-guest.bin");
    let mut ld = Command::new("ld");
    ld.args([
        "-m",
        "elf_x86_64",
        "-nostdlib",
        "-static",
        "--build-id=none",
    ])
    .args(["-z", "max-page-size=0x1000", "-z", "noexecstack"])
    .arg("-L")
    .arg(&out)
    .arg("-T")
    .arg(manifest.join("kernel/kernel.ld"))
    .arg("-o")
    .arg(&elf)
    .args(&objects);
    run_tool(&mut ld, "ld")?;
    let mut objcopy = Command::new("objcopy");
    objcopy.args(["-O", "binary"]).arg(&elf).arg(&bin);
    run_tool(&mut objcopy, "objcopy")?;

    let image = fs::read(&bin).map_err(|e| format!("cannot read {}: {e}", bin.display()))?;
    let info = check_image(&image)?;
    write(
        &out.join("image_info.rs"),
        &format!(
            "/// Offset of the multiboot header in the image.\n\
             pub const MULTIBOOT_HEADER_OFFSET: usize = {:#x};\n\
             /// Guest-physical address the image is loaded at (`load_addr`).\n\
             pub const LOAD_ADDR: u64 = {:#x};\n\
             /// End of the loaded bytes (`load_end_addr`).\n\
             pub const LOAD_END_ADDR: u64 = {:#x};\n\
             /// End of the zero-initialised memory after the image (`bss_end_addr`).\n\
             pub const BSS_END_ADDR: u64 = {:#x};\n\
             /// 32-bit protected-mode entry point (`entry_addr`).\n\
             pub const ENTRY_ADDR: u64 = {:#x};\n",
            info.header_offset, info.load_addr, info.load_end, info.bss_end, info.entry
        ),
    )?;

    build_conformance(&manifest, &out)?;
    build_initrd::build(&manifest, &out)?;
    build_harness(&manifest, &out)?;
    build_chaos(&manifest, &out)?;
    Ok(())
}

fn env_var(name: &str) -> Result<String, String> {
    env::var(name)
        .map_err(|_| format!("environment variable {name} is not set (run through cargo)"))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Fails with a message naming the Debian package when `tool` cannot be run.
fn check_tool(tool: &str, package: &str) -> Result<(), String> {
    match Command::new(tool).arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "`{tool} --version` failed ({}); the guest kernel needs a working `{tool}` \
             (Debian/Ubuntu: apt-get install {package})",
            out.status
        )),
        Err(e) => Err(format!(
            "cannot run `{tool}` ({e}); the guest kernel is built with gcc and binutils: \
             install them (Debian/Ubuntu: apt-get install {package})"
        )),
    }
}

fn run_tool(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {:?}\n{}{}",
            out.status,
            cmd,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn compile(manifest: &Path, out: &Path) -> Result<Vec<PathBuf>, String> {
    let mut build = cc::Build::new();
    build
        .compiler("gcc")
        .cargo_metadata(false)
        .pic(false)
        .opt_level(2)
        .debug(false)
        .warnings(true)
        .extra_warnings(true)
        .include(out)
        .include(manifest.join("kernel"))
        .flag("-m64")
        .flag("-ffreestanding")
        .flag("-fno-pic")
        .flag("-fno-pie")
        .flag("-mno-red-zone")
        .flag("-mgeneral-regs-only")
        .flag("-fno-stack-protector")
        .flag("-fno-asynchronous-unwind-tables")
        .flag("-fno-unwind-tables")
        .flag("-fcf-protection=none")
        .flag("-nostdlib");
    for src in ASM_SOURCES.iter().chain(C_SOURCES) {
        build.file(manifest.join(src));
    }
    build
        .try_compile_intermediates()
        .map_err(|e| format!("compiling the kernel sources with gcc failed: {e}"))
}

/// What the flat image's multiboot header says.
struct ImageInfo {
    header_offset: usize,
    load_addr: u64,
    load_end: u64,
    bss_end: u64,
    entry: u64,
}

fn le32(image: &[u8], off: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&image[off..off + 4]);
    u32::from_le_bytes(b)
}

/// Finds and checks the multiboot header of the flat image against the ABI's layout.
fn check_image(image: &[u8]) -> Result<ImageInfo, String> {
    let limit = image.len().min(MULTIBOOT_SEARCH);
    let header_offset = (0..limit.saturating_sub(32))
        .step_by(4)
        .find(|&off| le32(image, off) == MULTIBOOT_MAGIC)
        .ok_or("the image has no multiboot header in its first 8 KiB")?;
    let h = |i: usize| u64::from(le32(image, header_offset + 4 * i));
    let (magic, flags, checksum) = (h(0), h(1), h(2));
    let (header_addr, load_addr, load_end, bss_end, entry) = (h(3), h(4), h(5), h(6), h(7));
    if (magic + flags + checksum) & 0xffff_ffff != 0 {
        return Err("the multiboot header checksum is wrong".into());
    }
    if flags & (1 << 16) == 0 || flags & (1 << 1) == 0 {
        return Err(format!("multiboot flags {flags:#x} lack bit 16 or bit 1"));
    }
    if load_addr != KERNEL_GPA || header_addr != load_addr + header_offset as u64 {
        return Err(format!(
            "multiboot load_addr {load_addr:#x} / header_addr {header_addr:#x} do not match \
             KERNEL_GPA {KERNEL_GPA:#x} and the header's offset {header_offset:#x}"
        ));
    }
    if load_end - load_addr != image.len() as u64 {
        return Err(format!(
            "multiboot load_end_addr {load_end:#x} disagrees with the image size {:#x}",
            image.len()
        ));
    }
    if bss_end < load_end || bss_end > KERNEL_END_GPA {
        return Err(format!(
            "the kernel with its bss ends at {bss_end:#x}, beyond KERNEL_END_GPA {KERNEL_END_GPA:#x}: \
             shrink the kernel's data or stacks"
        ));
    }
    if !(load_addr..load_end).contains(&entry) {
        return Err(format!(
            "multiboot entry_addr {entry:#x} is outside the image"
        ));
    }
    Ok(ImageInfo {
        header_offset,
        load_addr,
        load_end,
        bss_end,
        entry,
    })
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
            size: std::mem::size_of::<$ty>(),
            fields: vec![$((stringify!($field), c_type(&v.$field), std::mem::offset_of!($ty, $field))),*],
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

/// Generates `abi.h` and `abi.ld` from the included `abi.rs`, and `abi_layout.rs`: the
/// same sizes and offsets, by the header's names, as the crate's own compiler computes
/// them (the host's view), for a test to check against the header.
fn generate_abi(abi_text: &str) -> Result<(String, String, String), String> {
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
                spare
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
            "src/abi.rs declares `{missing}`, which build.rs does not export to abi.h: add it to \
             the abi_consts! list in build.rs"
        ));
    }
    for (name, fields) in &declared_structs {
        let Some(s) = structs.iter().find(|s| s.rust == name) else {
            return Err(format!(
                "src/abi.rs declares struct `{name}`, which build.rs does not export to abi.h"
            ));
        };
        let listed: Vec<&str> = s.fields.iter().map(|f| f.0).collect();
        if *fields != listed {
            return Err(format!(
                "the fields of `{name}` in src/abi.rs ({fields:?}) differ from build.rs's list \
                 ({listed:?}): update the abi_struct! call in build.rs"
            ));
        }
        if let Some(f) = s.fields.iter().find(|f| f.1 == "unsupported") {
            return Err(format!(
                "`{name}::{}` has a type build.rs cannot express in C",
                f.0
            ));
        }
    }
    if SAMPLE_BYTES != std::mem::size_of::<Sample>() as u64 {
        return Err("SAMPLE_BYTES differs from the size of Sample".into());
    }

    let mut h = String::new();
    let mut ld = String::new();
    let _ = writeln!(
        h,
        "/* Generated by exitlab-guest's build.rs from src/abi.rs. Do not edit. */"
    );
    let _ = writeln!(h, "#ifndef EXITLAB_ABI_H\n#define EXITLAB_ABI_H\n");
    let _ = writeln!(h, "#ifdef __ASSEMBLER__");
    let _ = writeln!(h, "#define ABI_U64(x) x\n#define ABI_U32(x) x");
    let _ = writeln!(h, "#else");
    let _ = writeln!(h, "#define ABI_U64(x) x##ULL\n#define ABI_U32(x) x##U");
    let _ = writeln!(h, "#endif\n");
    let _ = writeln!(
        ld,
        "/* Generated by exitlab-guest's build.rs from src/abi.rs. Do not edit. */"
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
        "// Generated by exitlab-guest's build.rs. Do not edit.\n\
         /// Each ABI struct's size and field offsets as this crate is compiled, by the\n\
         /// names of their `#define`s in abi.h.\n\
         pub const LAYOUT: &[(&str, usize)] = &[\n",
    );
    for s in &structs {
        let upper = s.c.to_ascii_uppercase();
        let _ = writeln!(
            rs,
            "    (\"SIZEOF_{upper}\", core::mem::size_of::<crate::abi::{}>()),",
            s.rust
        );
        for (field, _, _) in &s.fields {
            let _ = writeln!(
                rs,
                "    (\"OFFSETOF_{upper}_{}\", core::mem::offset_of!(crate::abi::{}, {field})),",
                field.to_ascii_uppercase(),
                s.rust
            );
        }
    }
    rs.push_str("];\n");
    Ok((h, ld, rs))
}

/// How a conformance image is linked and packaged.
struct ConformanceImage {
    /// The object that makes it bootable (a multiboot header or the PVH note).
    header: &'static str,
    /// Whether the linker script's PVH-ONLY lines apply (else the MULTIBOOT-ONLY ones).
    pvh: bool,
    /// The linked ELF.
    elf: &'static str,
    /// The flat binary made from it with `objcopy -O binary`, if any.
    flat: Option<&'static str>,
}

const CONFORMANCE_IMAGES: &[ConformanceImage] = &[
    ConformanceImage {
        header: "multiboot_elf.S",
        pvh: false,
        elf: "conformance-multiboot.elf",
        flat: None,
    },
    ConformanceImage {
        header: "multiboot_aout.S",
        pvh: false,
        elf: "conformance-multiboot-aout.elf",
        flat: Some("conformance-multiboot.bin"),
    },
    ConformanceImage {
        header: "pvh_note.S",
        pvh: true,
        elf: "conformance-pvh.elf",
        flat: None,
    },
];

/// The conformance linker script for one kind of image: lines tagged for the other
/// kind are dropped.
fn conformance_script(template: &str, pvh: bool) -> String {
    let drop = if pvh {
        "/* MULTIBOOT-ONLY */"
    } else {
        "/* PVH-ONLY */"
    };
    template
        .lines()
        .filter(|l| !l.trim_end().ends_with(drop))
        .fold(String::new(), |mut acc, l| {
            acc.push_str(l);
            acc.push('\n');
            acc
        })
}

/// Builds the conformance kernel images into `$OUT_DIR`.
/// A `cc` build for exitlab's 32-bit freestanding kernels (conformance, second harness,
/// chaos): gcc -m32 for i686, no PIC, no libc, no SSE, no stack protector, no unwind
/// tables, objects into `obj_dir`.
fn i386_build(src: &Path, obj_dir: &Path) -> Result<cc::Build, String> {
    fs::create_dir_all(obj_dir).map_err(|e| format!("cannot create {}: {e}", obj_dir.display()))?;
    let mut build = cc::Build::new();
    build
        .compiler("gcc")
        .cargo_metadata(false)
        .out_dir(obj_dir)
        .pic(false)
        .opt_level(2)
        .debug(false)
        .warnings(true)
        .include(src)
        .flag("-m32")
        .flag("-march=i686")
        .flag("-ffreestanding")
        .flag("-fno-pic")
        .flag("-fno-pie")
        .flag("-mgeneral-regs-only")
        .flag("-fno-stack-protector")
        .flag("-fno-asynchronous-unwind-tables")
        .flag("-fno-unwind-tables")
        .flag("-fcf-protection=none")
        .flag("-nostdlib");
    Ok(build)
}

/// Links 32-bit objects into the static ELF `elf` with the linker script `script`.
fn i386_link(script: &Path, elf: &Path, objects: &[PathBuf], what: &str) -> Result<(), String> {
    let mut ld = Command::new("ld");
    ld.args(["-m", "elf_i386", "-nostdlib", "-static", "--build-id=none"])
        .args(["-z", "max-page-size=0x1000", "-z", "noexecstack"])
        .arg("-T")
        .arg(script)
        .arg("-o")
        .arg(elf)
        .args(objects);
    run_tool(&mut ld, &format!("ld ({what})"))
}

fn build_conformance(manifest: &Path, out: &Path) -> Result<(), String> {
    let src = manifest.join("conformance");
    let obj_dir = out.join("conformance");
    let mut build = i386_build(&src, &obj_dir)?;
    build
        .extra_warnings(true)
        .flag("-fno-delete-null-pointer-checks");
    for f in CONFORMANCE_COMMON
        .iter()
        .chain(CONFORMANCE_HEADERS)
        .chain([&CONFORMANCE_REALMODE])
    {
        build.file(src.join(f));
    }
    let objects = build
        .try_compile_intermediates()
        .map_err(|e| format!("compiling the conformance kernel with gcc -m32 failed: {e}"))?;
    let object_of = |source: &str| -> Result<PathBuf, String> {
        let stem = Path::new(source)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or(source);
        objects
            .iter()
            .find(|o| {
                o.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(&format!("-{stem}.o")) || n == format!("{stem}.o"))
            })
            .cloned()
            .ok_or_else(|| format!("cc produced no object for conformance/{source}"))
    };
    let common = CONFORMANCE_COMMON
        .iter()
        .map(|s| object_of(s))
        .collect::<Result<Vec<_>, _>>()?;

    let template = fs::read_to_string(src.join("conformance.ld"))
        .map_err(|e| format!("cannot read conformance/conformance.ld: {e}"))?;
    for image in CONFORMANCE_IMAGES {
        let script = obj_dir.join(if image.pvh { "pvh.ld" } else { "multiboot.ld" });
        write(&script, &conformance_script(&template, image.pvh))?;
        let elf = out.join(image.elf);
        let mut objects = common.clone();
        objects.push(object_of(image.header)?);
        i386_link(&script, &elf, &objects, "conformance kernel")?;
        if let Some(flat) = image.flat {
            let mut objcopy = Command::new("objcopy");
            objcopy.args(["-O", "binary"]).arg(&elf).arg(out.join(flat));
            run_tool(&mut objcopy, "objcopy (conformance kernel)")?;
        }
    }
    let mut ld = Command::new("ld");
    ld.args(["-m", "elf_i386", "-nostdlib", "-static", "--build-id=none"])
        .args(["-z", "max-page-size=0x1000", "-z", "noexecstack"])
        .arg("-T")
        .arg(src.join("realmode.ld"))
        .arg("-o")
        .arg(out.join("conformance-realmode.elf"))
        .arg(object_of(CONFORMANCE_REALMODE)?);
    run_tool(&mut ld, "ld (real-mode conformance kernel)")?;
    Ok(())
}

// ---- The second harness (harness/): an independent multiboot kernel ----------------

/// Sources of the second harness in `harness/`.
const HARNESS_SOURCES: &[&str] = &["entry.S", "harness.c", "harness.ld"];

/// Builds `$OUT_DIR/exitlab-harness.elf`: the second harness, a multiboot v1 ELF32 of
/// its own (32-bit protected mode, no paging), compiled with gcc -m32 and linked with
/// `harness/harness.ld`.
fn build_harness(manifest: &Path, out: &Path) -> Result<(), String> {
    let src = manifest.join("harness");
    for f in HARNESS_SOURCES {
        println!("cargo:rerun-if-changed=harness/{f}");
    }
    let objects = i386_build(&src, &out.join("harness"))?
        .file(src.join("entry.S"))
        .file(src.join("harness.c"))
        .try_compile_intermediates()
        .map_err(|e| format!("compiling the second harness with gcc -m32 failed: {e}"))?;
    i386_link(
        &src.join("harness.ld"),
        &out.join("exitlab-harness.elf"),
        &objects,
        "second harness",
    )
}

// ---- The chaos kernel (`exitlab run --builtin chaos`) ----------------------------------

/// Chaos kernel sources in `chaos/`.
const CHAOS_SOURCES: &[&str] = &["chaos.S", "chaos.c"];

/// Builds `chaos/` into `$OUT_DIR/chaos.elf`: a multiboot ELF32 for 32-bit protected mode.
fn build_chaos(manifest: &Path, out: &Path) -> Result<(), String> {
    let src = manifest.join("chaos");
    for f in CHAOS_SOURCES.iter().chain(&["chaos.ld"]) {
        println!("cargo:rerun-if-changed=chaos/{f}");
    }
    let objects = i386_build(&src, &out.join("chaos"))?
        .files(CHAOS_SOURCES.iter().map(|f| src.join(f)))
        .try_compile_intermediates()
        .map_err(|e| format!("compiling the chaos kernel with gcc -m32 failed: {e}"))?;
    i386_link(
        &src.join("chaos.ld"),
        &out.join("chaos.elf"),
        &objects,
        "chaos kernel",
    )
}

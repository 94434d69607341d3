//! Builds the guest test kernel from source.
//!
//! 1. `exitlab-abi` (a build dependency) renders the ABI as `abi.h` (C `#define`s, structs
//!    with `_Static_assert`ed layouts, field offsets for assembly) and `abi.ld` (the same
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

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use exitlab_abi::{KERNEL_END_GPA, KERNEL_GPA};

/// Multiboot v1 header magic.
const MULTIBOOT_MAGIC: u32 = 0x1BAD_B002;
/// The multiboot header must lie within this many bytes of the image start.
const MULTIBOOT_SEARCH: usize = 8192;

/// Kernel sources, relative to the crate root.
const ASM_SOURCES: &[&str] = &["kernel/boot.S", "kernel/smp.S"];
const C_SOURCES: &[&str] = &["kernel/kmain.c", "kernel/apic.c", "kernel/probe.c"];
const OTHER_SOURCES: &[&str] = &[
    "kernel/kernel.ld",
    "kernel/kernel.h",
    "kernel/apic.h",
    "kernel/lab.h",
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

    let abi = exitlab_abi::c_header::generate()?;
    write(&out.join("abi.h"), &abi.header)?;
    write(&out.join("abi.ld"), &abi.linker_symbols)?;
    write(&out.join("abi_layout.rs"), &abi.layout)?;

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

//! exitlab's guest test kernels.
//!
//! [`IMAGE`] is the kernel as a flat binary, built from the C and assembly sources in
//! `kernel/` by this crate's build script against `abi.h`, which `exitlab-abi` generates
//! from the structs the host uses ([`ABI_HEADER`]). It is linked at
//! [`exitlab_abi::KERNEL_GPA`] and opens
//! with a multiboot v1 header using the a.out kludge (flags bit 16): load the file at
//! `load_addr`, zero memory up to `bss_end_addr`, and enter at `entry_addr` in 32-bit
//! protected mode with EAX = 0x2BADB002, flat 4 GiB code and data segments, paging off
//! and IF = 0, as multiboot prescribes. The kernel sets up its own GDT, IDT, TSS, page
//! tables and stack. [`image_info`] has the header's addresses.
#![deny(unsafe_code)]
#![no_std]

use exitlab_abi as abi;

pub mod hackbench;

/// Each ABI struct's size and field offsets as this crate is compiled (for the test of
/// the host's and the guest's views).
#[cfg(test)]
mod abi_layout {
    include!(concat!(env!("OUT_DIR"), "/abi_layout.rs"));
}

/// The addresses in the image's multiboot header, as the build checked them.
pub mod image_info {
    include!(concat!(env!("OUT_DIR"), "/image_info.rs"));
}

/// The guest kernel as a flat binary, to be loaded at [`exitlab_abi::KERNEL_GPA`].
pub static IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/exitlab-guest.bin"));

/// The guest kernel as a flat binary (same as [`IMAGE`]).
pub fn image() -> &'static [u8] {
    IMAGE
}

/// The conformance kernel as a multiboot v1 ELF32 image (header without the a.out
/// kludge, segments from the program headers), the way the kvm-unit-tests x86 images
/// are built.
///
/// It runs in 32-bit protected mode with paging off and checks, from inside the guest,
/// the boot information and the PC platform. The command line names the tests to run
/// (`mbinfo`, `pvhinfo`, `cmdline`, `fwcfg`, `acpi`, `pmtimer`, `hpet`, `pci`, `pcicfg`,
/// `serial`, `smp`, `mce`, and, only when named, `triplefault`, `timeout`,
/// `badfetch`, `reset92`, `nmi`, `strio`, `s3` and `s5`; all that apply when none is named; one source file
/// per area in `conformance/`, the table of tests in `conformance/main.c`)
/// and the expected values as `key=value` words: `ram=` (MiB), `cpus=`, `tsc_khz=`,
/// `initrd_len=`, `initrd_sum=` (FNV-1a 32 of the initrd), `doorbells=` (writes per
/// pci-testdev doorbell, default 1000). It prints `PASS <test>` or `FAIL <test>: <reason>`
/// per test on COM1 (lines starting with `#` are information), then
/// `SUMMARY <passed>/<total>`, and writes 0 (all passed) or 1 to the debug-exit port 0xF4.
/// The `cmdline` test prints `CMDLINE-ARGV0 <argv[0]>` (multiboot only) and
/// `CMDLINE-REST <the rest>`; the `serial` test prints the bytes of
/// [`CONFORMANCE_SERIAL_PATTERN`].
pub static CONFORMANCE_MULTIBOOT: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/conformance-multiboot.elf"));

/// The conformance kernel ([`CONFORMANCE_MULTIBOOT`]) as a flat binary with a multiboot
/// v1 header that uses the a.out kludge (flag 16): loaded at 1 MiB, no ELF structure.
pub static CONFORMANCE_MULTIBOOT_FLAT: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/conformance-multiboot.bin"));

/// The conformance kernel ([`CONFORMANCE_MULTIBOOT`]) as a PVH ELF32: a PT_NOTE with
/// the note "Xen", type 18 (XEN_ELFNOTE_PHYS32_ENTRY), whose descriptor is the 32-bit
/// entry point; no multiboot header.
pub static CONFORMANCE_PVH: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/conformance-pvh.elf"));

/// exitlab's second harness: a multiboot v1 ELF32 kernel of its own (sources in
/// `harness/`, independent of the lab kernel) that times blocks of 2^k iterations of the
/// lab's instructions with one rdtsc pair and prints the raw totals on COM1; it also
/// has an exits mode (`outs=N ins=N port=P marker=M`) that does exactly N port
/// accesses. `harness/harness.c` documents its command line and output. It runs under
/// any VMM with a 16550 at 0x3F8 and an isa-debug-exit at 0xF4 (`exitlab run`, QEMU).
pub static HARNESS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/exitlab-harness.elf"));

/// A real-mode test kernel: a multiboot ELF32 with one segment linked at 0x8000, below
/// 1 MiB, as real-mode test kernels are. Entered in 32-bit protected mode, it drops to
/// 16-bit real mode, prints `# realmode: hello from real mode, CR0.PE=0, IP 0x<ip>` on
/// COM1 and writes 0 to the debug-exit port.
pub static CONFORMANCE_REALMODE: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/conformance-realmode.elf"));

/// What the conformance kernel's `serial` test writes to COM1, byte for byte.
pub const CONFORMANCE_SERIAL_PATTERN: &[u8] = b"SERIAL-PATTERN-BEGIN\n \
    !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~\r\n\
    ~}|{zyxwvutsrqponmlkjihgfedcba`_^]\\[ZYXWVUTSRQPONMLKJIHGFEDCBA@?>=<;:9876543210/.-,+*)('&%$#\"! \
    \r\n\r\n\n\r\nSERIAL-PATTERN-END\n";

// Layout facts the host relies on, checked when the crate compiles.
const _: () = {
    assert!(image_info::BSS_END_ADDR <= abi::KERNEL_END_GPA);
    assert!(image_info::LOAD_ADDR == abi::KERNEL_GPA);
    assert!(image_info::LOAD_ADDR <= image_info::ENTRY_ADDR);
    assert!(image_info::ENTRY_ADDR < image_info::LOAD_END_ADDR);
};

/// `abi.h`, the C header the guest kernels are compiled against, generated from
/// `exitlab-abi` by [`exitlab_abi::c_header`] in the build script (its layouts
/// `_Static_assert`ed by the C compiler).
pub const ABI_HEADER: &str = include_str!(concat!(env!("OUT_DIR"), "/abi.h"));

/// The chaos kernel (`exitlab run --builtin chaos`): a multiboot ELF32 that, from the seed
/// on its command line (`seed=N`), issues random port, string-I/O, MMIO and MSR accesses,
/// serial floods, garbage to the lab control page and doorbell, INIT/SIPI storms and
/// triple faults, counting the faults it takes. Every 256 operations it prints
/// `CHAOS ops=<hex> faults=<hex> last=<hex>` on COM1.
pub static CHAOS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/chaos.elf"));

/// A guest kernel `exitlab run --builtin NAME` boots.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    /// The name `--builtin` takes.
    pub name: &'static str,
    /// The image, as `exitlab run KERNEL` would read it from a file.
    pub image: &'static [u8],
    /// What it is and what it does, in one line (`run --help` lists it).
    pub about: &'static str,
}

/// Every kernel this crate builds that runs on its own under `exitlab run` (or QEMU), in
/// the order `run --help` lists them. The lab kernel ([`IMAGE`]) is not among them: it
/// waits for `bench`'s commands on its control page.
pub static BUILTINS: &[Builtin] = &[
    Builtin {
        name: "conformance",
        image: CONFORMANCE_MULTIBOOT,
        about: "platform checks from inside the guest (multiboot ELF); prints PASS/FAIL \
                per test and SUMMARY, writes 0 to the debug-exit port when all pass",
    },
    Builtin {
        name: "conformance-flat",
        image: CONFORMANCE_MULTIBOOT_FLAT,
        about: "the conformance kernel as a flat multiboot binary (a.out kludge)",
    },
    Builtin {
        name: "conformance-pvh",
        image: CONFORMANCE_PVH,
        about: "the conformance kernel as a PVH ELF (Xen PHYS32 entry note)",
    },
    Builtin {
        name: "realmode",
        image: CONFORMANCE_REALMODE,
        about: "a kernel linked at 0x8000 that drops to real mode, prints one line, exits",
    },
    Builtin {
        name: "harness",
        image: HARNESS,
        about: "the second timing harness: times the lab's instructions, prints raw \
                totals (command line words in crates/guest/harness/harness.c)",
    },
    Builtin {
        name: "chaos",
        image: CHAOS,
        about: "a seeded hostile guest booted again and again for --seconds, ending with \
                an account of exits and faults",
    },
];

/// The built-in kernel called `name`.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::vec::Vec;

    fn le32(off: usize) -> u64 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&IMAGE[off..off + 4]);
        u64::from(u32::from_le_bytes(b))
    }

    #[test]
    fn multiboot_header_matches_the_layout() {
        let off = image_info::MULTIBOOT_HEADER_OFFSET;
        assert!(off + 32 <= 8192 && off & 3 == 0);
        let field = |i: usize| le32(off + 4 * i);
        assert_eq!(field(0), 0x1BAD_B002);
        let flags = field(1);
        assert_ne!(flags & (1 << 16), 0);
        assert_ne!(flags & (1 << 1), 0);
        assert_eq!((field(0) + flags + field(2)) & 0xffff_ffff, 0);
        assert_eq!(field(3), abi::KERNEL_GPA + off as u64);
        assert_eq!(field(4), image_info::LOAD_ADDR);
        assert_eq!(field(5), image_info::LOAD_END_ADDR);
        assert_eq!(field(6), image_info::BSS_END_ADDR);
        assert_eq!(field(7), image_info::ENTRY_ADDR);
        assert_eq!(image_info::LOAD_ADDR, abi::KERNEL_GPA);
    }

    #[test]
    fn image_fits_below_the_control_page() {
        assert_eq!(
            IMAGE.len() as u64,
            image_info::LOAD_END_ADDR - image_info::LOAD_ADDR
        );
    }

    fn le16_at(b: &[u8], off: usize) -> u32 {
        u32::from(u16::from_le_bytes([b[off], b[off + 1]]))
    }

    fn le32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
    }

    /// Offset of the first multiboot v1 magic in the first 8 KiB.
    fn multiboot_header(b: &[u8]) -> Option<usize> {
        (0..b.len().min(8192) - 12)
            .step_by(4)
            .find(|&o| le32_at(b, o) == 0x1BAD_B002)
    }

    /// The program headers of an ELF32: (type, offset, paddr, filesz, memsz).
    fn elf32_phdrs(b: &[u8]) -> impl Iterator<Item = [u32; 5]> + '_ {
        assert_eq!(&b[..4], b"\x7fELF");
        assert_eq!(b[4], 1, "ELFCLASS32");
        assert_eq!(le16_at(b, 18), 3, "EM_386");
        let (phoff, phentsize, phnum) = (le32_at(b, 28), le16_at(b, 42), le16_at(b, 44));
        (0..phnum).map(move |i| {
            let p = (phoff + i * phentsize) as usize;
            [
                le32_at(b, p),
                le32_at(b, p + 4),
                le32_at(b, p + 12),
                le32_at(b, p + 16),
                le32_at(b, p + 20),
            ]
        })
    }

    #[test]
    fn every_builtin_is_a_distinct_named_image() {
        for (i, b) in BUILTINS.iter().enumerate() {
            assert!(!b.image.is_empty() && !b.about.is_empty(), "{}", b.name);
            assert!(core::ptr::eq(builtin(b.name).unwrap(), b));
            for o in &BUILTINS[i + 1..] {
                assert_ne!(b.name, o.name);
                assert_ne!(b.image.as_ptr(), o.image.as_ptr(), "{} {}", b.name, o.name);
            }
        }
        assert!(builtin("nosuch").is_none());
        assert!(builtin("chaos").is_some() && builtin("conformance").is_some());
    }

    #[test]
    fn conformance_multiboot_elf_has_a_plain_header() {
        let img = CONFORMANCE_MULTIBOOT;
        let off = multiboot_header(img).expect("multiboot header");
        let flags = le32_at(img, off + 4);
        assert_eq!(flags & (1 << 16), 0, "no a.out kludge");
        assert_eq!(
            0x1BAD_B002u32
                .wrapping_add(flags)
                .wrapping_add(le32_at(img, off + 8)),
            0
        );
        let phdrs: Vec<_> = elf32_phdrs(img).collect();
        assert!(phdrs.iter().all(|p| p[0] != 4), "no PT_NOTE");
        let entry = le32_at(img, 24);
        assert!(phdrs
            .iter()
            .any(|p| p[0] == 1 && entry >= p[2] && entry < p[2] + p[3]));
        assert!(phdrs.iter().all(|p| p[0] != 1 || p[2] >= 0x10_0000));
    }

    #[test]
    fn conformance_flat_image_uses_the_aout_kludge() {
        let img = CONFORMANCE_MULTIBOOT_FLAT;
        let off = multiboot_header(img).expect("multiboot header");
        let f = |i: usize| le32_at(img, off + 4 * i);
        assert_ne!(f(1) & (1 << 16), 0);
        assert_eq!(0x1BAD_B002u32.wrapping_add(f(1)).wrapping_add(f(2)), 0);
        let (header_addr, load, load_end, bss_end, entry) = (f(3), f(4), f(5), f(6), f(7));
        assert_eq!(load, 0x10_0000);
        assert_eq!(header_addr, load + off as u32);
        assert_eq!((load_end - load) as usize, img.len());
        assert!(bss_end >= load_end);
        assert!((load..load_end).contains(&entry));
    }

    #[test]
    fn conformance_pvh_image_has_the_entry_note() {
        let img = CONFORMANCE_PVH;
        assert_eq!(multiboot_header(img), None);
        let phdrs: Vec<_> = elf32_phdrs(img).collect();
        let note = phdrs.iter().find(|p| p[0] == 4).expect("PT_NOTE");
        let n = note[1] as usize;
        let (namesz, descsz, kind) = (le32_at(img, n), le32_at(img, n + 4), le32_at(img, n + 8));
        assert_eq!((namesz, descsz, kind), (4, 4, 18));
        assert_eq!(&img[n + 12..n + 16], b"Xen\0");
        let entry = le32_at(img, n + 16);
        assert!(phdrs
            .iter()
            .any(|p| p[0] == 1 && entry >= p[2] && entry < p[2] + p[3]));
    }

    #[test]
    fn serial_pattern_is_what_the_kernel_prints() {
        let mut want: Vec<u8> = b"SERIAL-PATTERN-BEGIN\n".to_vec();
        want.extend(0x20u8..0x7F);
        want.extend_from_slice(b"\r\n");
        want.extend((0x20u8..0x7F).rev());
        want.extend_from_slice(b"\r\n\r\n\n\r\nSERIAL-PATTERN-END\n");
        assert_eq!(CONFORMANCE_SERIAL_PATTERN, &want[..]);
    }

    /// The `#define NAME value` lines of `abi.h` that give a struct's size or a field's
    /// offset.
    fn header_layout() -> Vec<(&'static str, usize)> {
        ABI_HEADER
            .lines()
            .filter_map(|l| {
                let mut w = l.strip_prefix("#define ")?.split_whitespace();
                let (name, value) = (w.next()?, w.next()?);
                (name.starts_with("SIZEOF_") || name.starts_with("OFFSETOF_"))
                    .then(|| (name, value.parse().expect("a number")))
            })
            .collect()
    }

    #[test]
    fn the_host_and_the_guest_kernels_see_each_abi_struct_with_one_layout() {
        // abi.h (the guest kernels' view, `_Static_assert`ed by their C compiler) against
        // the sizes and offsets this crate's compiler gives the same structs, which the
        // host reads and writes in guest memory.
        assert_eq!(header_layout(), abi_layout::LAYOUT);
        assert!(
            abi_layout::LAYOUT.len() > 4 * 2,
            "every struct and field is listed"
        );
        assert!(size_of::<abi::PerCpu>() as u64 <= abi::PERCPU_BYTES);
        assert!(size_of::<abi::Stamps>() as u64 <= abi::PAGE_SIZE);
        assert!(size_of::<abi::Control>() as u64 <= abi::PAGE_SIZE);
    }
}

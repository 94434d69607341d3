//! A corpus of malformed images and inputs for `exitlab run`: each class must be refused
//! with its own message and the bad-input exit code, before /dev/kvm is opened (so these
//! tests pass on a host without KVM too) and with nothing run. `cargo test --test
//! malformed -- --nocapture` prints the table (class, message, exit code).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use exitlab_guest::{
    CONFORMANCE_MULTIBOOT, CONFORMANCE_MULTIBOOT_FLAT, CONFORMANCE_PVH, CONFORMANCE_REALMODE,
};

mod common;

/// `exitlab run`'s bad-input code.
const BAD_INPUT: i32 = 2;
/// What `run -v` prints just before it opens /dev/kvm.
const OPENING_KVM: &str = "opening /dev/kvm";

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// File offsets of the ELF32 image's program headers of type `ty`.
fn phdrs32(img: &[u8], ty: u32) -> Vec<usize> {
    let phoff = le32(img, 28) as usize;
    let entsize = usize::from(u16::from_le_bytes([img[42], img[43]]));
    let num = usize::from(u16::from_le_bytes([img[44], img[45]]));
    (0..num)
        .map(|i| phoff + i * entsize)
        .filter(|&p| le32(img, p) == ty)
        .collect()
}

/// A minimal ELF64 (taken as a Linux vmlinux): one PT_LOAD of `filesz` bytes at
/// `paddr` with `memsz`, entry at `entry`.
fn elf64(paddr: u64, filesz: u64, memsz: u64, entry: u64) -> Vec<u8> {
    let mut b = vec![0u8; 0x1000 + filesz as usize];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2; // ELFCLASS64
    b[5] = 1; // little-endian
    b[6] = 1;
    b[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    b[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
    b[20..24].copy_from_slice(&1u32.to_le_bytes());
    b[24..32].copy_from_slice(&entry.to_le_bytes());
    b[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
    b[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    b[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    b[56..58].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
    let p = 64;
    b[p..p + 4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    b[p + 4..p + 8].copy_from_slice(&5u32.to_le_bytes());
    b[p + 8..p + 16].copy_from_slice(&0x1000u64.to_le_bytes()); // p_offset
    b[p + 16..p + 24].copy_from_slice(&paddr.to_le_bytes()); // p_vaddr
    b[p + 24..p + 32].copy_from_slice(&paddr.to_le_bytes()); // p_paddr
    b[p + 32..p + 40].copy_from_slice(&filesz.to_le_bytes());
    b[p + 40..p + 48].copy_from_slice(&memsz.to_le_bytes());
    b[p + 48..p + 56].copy_from_slice(&0x1000u64.to_le_bytes());
    b
}

/// Offset of the multiboot header in the flat (a.out kludge) conformance image.
fn multiboot_header(img: &[u8]) -> usize {
    (0..8192)
        .step_by(4)
        .find(|&o| le32(img, o) == 0x1BAD_B002)
        .expect("multiboot header")
}

/// A bzImage boot sector and setup header ("HdrS", protocol 2.15) with `setup_sects`
/// setup sectors, followed by `payload` (its length, in 16-byte units, is `syssize`).
fn bzimage(setup_sects: u8, payload: &[u8]) -> Vec<u8> {
    let mut img = vec![0u8; 0x400];
    img[0x1F1] = setup_sects;
    img[0x1FE] = 0x55;
    img[0x1FF] = 0xAA;
    img[0x202..0x206].copy_from_slice(b"HdrS");
    img[0x206..0x208].copy_from_slice(&0x020Fu16.to_le_bytes());
    img[0x211] = 1; // LOADED_HIGH
    img[0x1F4..0x1F8].copy_from_slice(&(payload.len() as u32 / 16).to_le_bytes());
    img.extend_from_slice(payload);
    img
}

struct Case {
    class: String,
    /// The kernel image (written to a file) or an existing path.
    kernel: Input,
    extra: Vec<String>,
    expected: String,
}

enum Input {
    Bytes(Vec<u8>),
    Path(PathBuf),
}

fn corpus(dir: &Path) -> Vec<Case> {
    let pvh = CONFORMANCE_PVH;
    let loads = phdrs32(pvh, 1);
    assert!(
        loads.len() >= 2,
        "the PVH conformance kernel has two PT_LOADs"
    );
    let note = phdrs32(pvh, 4)[0];
    let mut cases = Vec::new();
    let mut case = |class: &str, kernel, extra: &[&str], expected: &str| {
        cases.push(Case {
            class: class.to_string(),
            kernel,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            expected: expected.to_string(),
        })
    };

    case(
        "truncated ELF header",
        Input::Bytes(pvh[..40].to_vec()),
        &[],
        "truncated",
    );
    case(
        "truncated ELF (program data cut)",
        Input::Bytes(pvh[..pvh.len() / 2].to_vec()),
        &[],
        "truncated",
    );
    case(
        "truncated bzImage setup",
        Input::Bytes(bzimage(30, &[0u8; 64])),
        &[],
        "truncated",
    );
    let mut mb = CONFORMANCE_MULTIBOOT_FLAT.to_vec();
    let h = multiboot_header(&mb);
    mb[h + 8] ^= 0x40;
    case(
        "multiboot bad checksum",
        Input::Bytes(mb),
        &[],
        "bad checksum",
    );
    let mut bz = bzimage(1, pvh);
    bz[0x202..0x206].copy_from_slice(b"HdrZ");
    case(
        "bzImage bad setup magic",
        Input::Bytes(bz),
        &[],
        "not a Linux bzImage",
    );
    case(
        "unrecognised format",
        Input::Bytes((0..4096u32).map(|i| (i * 7 + 3) as u8).collect()),
        &[],
        "unrecognised kernel image",
    );

    // Every format cut in half and cut by its last byte: each declared size (program
    // and section header tables, PT_LOAD file data, the a.out kludge's load range, the
    // bzImage's syssize) is checked against the bytes present.
    // One setup sector: the boot sector and setup header are all of the setup code.
    let bz = bzimage(1, &[0x90u8; 0x4000]);
    let vmlinux = elf64(0x100_0000, 0x1000, 0x1000, 0x100_0000);
    let load = "a PT_LOAD segment's file data";
    let shdrs = "the section header table (e_shoff + e_shnum x e_shentsize)";
    let aout = "the a.out kludge load range (load_addr..load_end_addr)";
    let syssize = "the bzImage protected-mode kernel (the setup header's syssize x 16 bytes)";
    let formats: [(&str, &[u8], &str, &str); 6] = [
        ("multiboot ELF", CONFORMANCE_MULTIBOOT, load, shdrs),
        ("multiboot flat", CONFORMANCE_MULTIBOOT_FLAT, aout, aout),
        ("PVH ELF", pvh, load, shdrs),
        ("real-mode ELF", CONFORMANCE_REALMODE, load, shdrs),
        ("vmlinux ELF64", &vmlinux, load, load),
        ("bzImage", &bz, syssize, syssize),
    ];
    for (format, image, half, by_one) in formats {
        for (how, len, expected) in [
            ("cut in half", image.len() / 2, half),
            ("cut by one byte", image.len() - 1, by_one),
        ] {
            case(
                &format!("{format} {how}"),
                Input::Bytes(image[..len].to_vec()),
                &[],
                &format!("truncated: {expected}"),
            );
        }
    }

    // Entry points outside memory.
    let mut img = pvh.to_vec();
    let note_off = le32(&img, note + 4) as usize;
    put32(&mut img, note_off + 16, 0xF000_0000);
    case(
        "PVH entry outside memory",
        Input::Bytes(img),
        &[],
        "outside the loaded image",
    );
    let mut mb = CONFORMANCE_MULTIBOOT_FLAT.to_vec();
    let h = multiboot_header(&mb);
    put32(&mut mb, h + 28, 0xFFFF_FFF0);
    case(
        "multiboot entry outside memory",
        Input::Bytes(mb),
        &[],
        "entry point",
    );
    case(
        "vmlinux entry outside memory",
        Input::Bytes(elf64(0x100_0000, 0x100, 0x100, 0x7FFF_0000_0000)),
        &[],
        "outside the loaded image",
    );

    // Segments that overlap each other or exitlab's reserved areas.
    let mut img = pvh.to_vec();
    let first_paddr = le32(&img, loads[0] + 12);
    put32(&mut img, loads[1] + 12, first_paddr + 0x10);
    put32(&mut img, loads[1] + 8, first_paddr + 0x10);
    case(
        "segments overlap each other",
        Input::Bytes(img),
        &[],
        "overlap",
    );
    let mut img = pvh.to_vec();
    put32(&mut img, loads[0] + 12, 0x9000);
    case(
        "segment over the boot data (low 1 MiB)",
        Input::Bytes(img),
        &[],
        "overlaps the low 1 MiB",
    );
    let mut img = pvh.to_vec();
    put32(&mut img, loads[1] + 12, 0xF000_0000);
    case(
        "segment in the PCI hole",
        Input::Bytes(img),
        &[],
        "outside guest RAM",
    );

    // Sizes that overflow 32- and 64-bit arithmetic.
    let mut img = pvh.to_vec();
    put32(&mut img, loads[1] + 12, 0xFFFF_F000);
    put32(&mut img, loads[1] + 20, 0x0010_0000);
    case(
        "ELF32 segment end past 2^32",
        Input::Bytes(img),
        &[],
        "lies above 4 GiB",
    );
    case(
        "ELF64 segment end past 2^64",
        Input::Bytes(elf64(
            0xFFFF_FFFF_FFFF_F000,
            0x100,
            0x10_0000,
            0xFFFF_FFFF_FFFF_F000,
        )),
        &[],
        "outside guest RAM",
    );
    let mut mb = CONFORMANCE_MULTIBOOT_FLAT.to_vec();
    let h = multiboot_header(&mb);
    put32(&mut mb, h + 24, 0xFFFF_FFFF);
    case(
        "multiboot bss end past 2^32",
        Input::Bytes(mb),
        &[],
        "outside guest RAM",
    );

    // Too big for the guest.
    case(
        "kernel bigger than guest RAM",
        Input::Bytes(vec![0u8; 3 << 20]),
        &["--mem", "2"],
        "bigger than guest RAM",
    );
    let initrd = dir.join("big-initrd");
    fs::write(&initrd, vec![0x5Au8; 7 << 20]).unwrap();
    let initrd = initrd.to_str().unwrap().to_string();
    case(
        "initrd that does not fit",
        Input::Bytes(pvh.to_vec()),
        &["--mem", "8", "--initrd", &initrd],
        "no room for the",
    );

    // Files that are not images.
    case(
        "/dev/zero as the kernel",
        Input::Path(PathBuf::from("/dev/zero")),
        &[],
        "is a character device",
    );
    // In the system's temporary directory: the target directory may be on a file system
    // without FIFOs (a 9p share inside run-in-l1's L1).
    let fifo = std::env::temp_dir().join(format!("exitlab-malformed-fifo-{}", std::process::id()));
    let _ = fs::remove_file(&fifo);
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let fifo = fifo.to_str().unwrap().to_string();
    case(
        "FIFO as the initrd",
        Input::Bytes(pvh.to_vec()),
        &["--initrd", &fifo],
        "is a FIFO",
    );
    case(
        "directory as the kernel",
        Input::Path(dir.to_path_buf()),
        &[],
        "is a directory",
    );
    cases
}

#[test]
fn every_malformed_image_is_refused_before_kvm_with_its_own_message() {
    let dir = common::tempdir("malformed");
    let cases = corpus(&dir);
    let mut table = vec![
        "| class | message (start) | exit code |".to_string(),
        "|---|---|---|".to_string(),
    ];
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let kernel = match &c.kernel {
            Input::Bytes(b) => {
                let p = dir.join(format!("case-{i}"));
                fs::write(&p, b).unwrap();
                p
            }
            Input::Path(p) => p.clone(),
        };
        let out = Command::new(common::EXITLAB)
            .arg("run")
            .arg(&kernel)
            .args(&c.extra)
            .args(["-v", "--timeout", "5"])
            .output()
            .expect("run exitlab");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let msg = stderr
            .lines()
            .find(|l| l.starts_with("exitlab: ") && !l.ends_with(" image"))
            .unwrap_or("")
            .trim_start_matches("exitlab: ")
            .replace(kernel.to_str().unwrap(), "IMAGE")
            .replace(dir.to_str().unwrap(), "DIR");
        let code = out.status.code();
        table.push(format!(
            "| {} | {} | {} |",
            c.class,
            msg.chars().take(150).collect::<String>(),
            code.map_or("signal".into(), |c| c.to_string())
        ));
        if code != Some(BAD_INPUT)
            || !stderr.contains(&c.expected)
            || !out.stdout.is_empty()
            || stderr.contains(OPENING_KVM)
        {
            failures.push(format!(
                "{}: expected code {BAD_INPUT} and a message containing {:?}, no guest output and \
                 no /dev/kvm; got code {code:?}\nstdout: {}\nstderr: {stderr}",
                c.class,
                c.expected,
                String::from_utf8_lossy(&out.stdout)
            ));
        }
    }
    eprintln!("{}", table.join("\n"));
    let _ = fs::remove_dir_all(&dir);
    let _ = fs::remove_file(
        std::env::temp_dir().join(format!("exitlab-malformed-fifo-{}", std::process::id())),
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn bad_options_are_refused_before_kvm() {
    let dir = common::tempdir("malformed-opts");
    let kernel = dir.join("pvh.elf");
    fs::write(&kernel, CONFORMANCE_PVH).unwrap();
    let k = kernel.to_str().unwrap();
    for (args, expected) in [
        (&["--timeout", "1e99"][..], "--timeout"),
        (&["--timeout=-1"], "--timeout"),
        (&["--timeout", "nan"], "--timeout"),
        (&["--timeout", "inf"], "--timeout"),
        (&["--cpus", "0"], "--cpus 0 is out of range"),
        (&["--cpus", "100000"], "--cpus 100000 is out of range"),
        (&["--mem", "0"], "--mem 0 MiB is out of range"),
        (&["--mem", "1"], "--mem 1 MiB is out of range"),
        (&["--mem", "1048576"], "more than this host can back"),
        (&["--serial", "tcp:1234"], "use stdio, file:PATH or none"),
        (&["--serial", "file:"], "use stdio, file:PATH or none"),
        (
            &["--serial", "file:/nonexistent-dir/x/serial.log"],
            "cannot create it",
        ),
    ] {
        let mut all = vec!["run", k, "-v"];
        all.extend_from_slice(args);
        let o = common::exitlab(&all);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(BAD_INPUT), "{args:?}: {e}");
        assert!(e.contains(expected), "{args:?}: {e}");
        assert!(!e.contains(OPENING_KVM), "{args:?}: {e}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    let _ = fs::remove_dir_all(&dir);
}

/// Runs `exitlab ARGS` in a private mount namespace whose /dev has no kvm node (needs
/// root, as this project's tests do for /dev/kvm anyway).
fn exitlab_without_kvm(args: &[&str]) -> std::process::Output {
    let o = Command::new("unshare")
        .args(["-m", "sh", "-c"])
        .arg(
            "mount --make-rprivate / && mount -t tmpfs tmpfs /dev && mknod -m 666 /dev/null c 1 3 \
             && exec \"$@\"",
        )
        .arg("sh")
        .arg(common::EXITLAB)
        .args(args)
        .output()
        .expect("run unshare (util-linux)");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !e.contains("unshare:") && !e.contains("mount:"),
        "this test hides /dev/kvm in a private mount namespace and needs root for it: {e}"
    );
    o
}

#[test]
fn without_kvm_bad_input_is_still_bad_input_and_good_input_gets_exit_6() {
    let dir = common::tempdir("malformed-nokvm");
    let good = dir.join("pvh.elf");
    fs::write(&good, CONFORMANCE_PVH).unwrap();
    let bad = dir.join("truncated.elf");
    fs::write(&bad, &CONFORMANCE_PVH[..100]).unwrap();
    let o = exitlab_without_kvm(&["run", bad.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(BAD_INPUT), "{e}");
    assert!(e.contains("truncated"), "{e}");
    let o = exitlab_without_kvm(&["run", good.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(6), "{e}");
    assert!(e.contains("/dev/kvm does not exist"), "{e}");
    let o = exitlab_without_kvm(&["bench", "--samples", "1"]);
    assert_eq!(o.status.code(), Some(6));
    let o = exitlab_without_kvm(&["run", "--builtin", "chaos", "--seconds", "1"]);
    assert_eq!(o.status.code(), Some(6));
    let _ = fs::remove_dir_all(&dir);
}

/// The reason `exitlab host` gives for an unusable /dev/kvm ("KVM IS NOT USABLE: ...").
fn host_reason(o: &std::process::Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout);
    out.lines()
        .find_map(|l| l.strip_prefix("KVM IS NOT USABLE: "))
        .unwrap_or_else(|| panic!("no diagnosis in exitlab host:\n{out}"))
        .to_string()
}

#[test]
fn without_the_device_node_run_bench_and_host_give_one_diagnosis() {
    // The KVM module stays loaded (the kernel registered its device); only the node is
    // hidden. Every command must say so, none "load kvm_intel".
    let host = exitlab_without_kvm(&["host"]);
    assert_eq!(host.status.code(), Some(6));
    let reason = host_reason(&host);
    if fs::metadata("/sys/class/misc/kvm/dev").is_ok() {
        assert!(reason.contains("the kernel has KVM"), "{reason}");
    }
    for args in [
        &["run", "--builtin", "conformance"][..],
        &["bench", "--samples", "1"],
        &["run", "--builtin", "chaos", "--seconds", "1"],
        &["agree", "--samples", "1"],
    ] {
        let o = exitlab_without_kvm(args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(6), "{args:?}: {e}");
        assert!(
            e.contains(&format!("exitlab: KVM is not usable: {reason}\n")),
            "{args:?} does not give host's diagnosis {reason:?}: {e}"
        );
        assert!(e.contains("what to do: "), "{args:?}: {e}");
        if reason.contains("the kernel has KVM") {
            assert!(
                !e.contains("kvm_intel") && !e.contains("kvm_amd"),
                "{args:?}: {e}"
            );
        }
    }
}

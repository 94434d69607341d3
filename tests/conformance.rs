//! Conformance: boots exitlab's conformance kernels (`crates/guest/conformance`) with
//! `exitlab run` and checks how each run ends and what the kernels report from inside
//! the guest: boot information (multiboot and PVH), command line, fw_cfg, ACPI, the PM
//! timer, the HPET, PCI (CONFIG_ADDRESS bits 1:0 at every offset and size) and
//! pci-testdev doorbells, the serial port, SMP bring-up, MCE banks, string I/O into
//! MMIO, NMI latching, ACPI S3/S5, port 0x92, a real-mode kernel linked at 0x8000, the
//! QEMU-style command line, and the triple fault and timeout endings. Malformed images
//! must be refused before anything runs.
//!
//! These tests need a usable /dev/kvm, as `exitlab run` does. The NMI latching test
//! also needs a KVM that can run a ring-0 IRET (not kvm_pvm, which emulates ring 0
//! and stops on it): there it fails saying so.
#![deny(unsafe_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use exitlab_guest::{
    CONFORMANCE_MULTIBOOT, CONFORMANCE_MULTIBOOT_FLAT, CONFORMANCE_PVH, CONFORMANCE_REALMODE,
    CONFORMANCE_SERIAL_PATTERN,
};

const EXITLAB: &str = env!("CARGO_BIN_EXE_exitlab");

/// Upper bound of every run, in seconds (a run that ends normally takes well under 1 s).
const TIMEOUT_S: &str = "20";

/// `exitlab run`'s exit code when the guest wrote `v` to the debug-exit port.
const fn debug_exit(v: i32) -> i32 {
    (v << 1) | 1
}
/// The conformance kernel wrote 0: every test passed.
const ALL_PASSED: i32 = debug_exit(0);
/// The conformance kernel wrote 1: a test failed.
const SOME_FAILED: i32 = debug_exit(1);
/// A vCPU triple-faulted.
const TRIPLE_FAULT: i32 = 120;
/// The run hit `--timeout`.
const TIMED_OUT: i32 = 124;
/// KVM could not run the guest.
const KVM_FAILURE: i32 = 122;
/// Bad image or options: nothing ran.
const BAD_INPUT: i32 = 2;

/// The result of one `exitlab run`.
struct Run {
    command: String,
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
    took: Duration,
}

impl Run {
    fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Everything about the run, for assertion messages.
    fn describe(&self) -> String {
        format!(
            "command: {}\nexit code: {} after {:.2} s\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command,
            self.code,
            self.took.as_secs_f64(),
            self.out(),
            self.stderr
        )
    }

    /// Lines of the guest's output that start with `prefix`, without it.
    fn lines_after(&self, prefix: &str) -> Vec<String> {
        self.out()
            .lines()
            .filter_map(|l| l.strip_prefix(prefix).map(str::to_owned))
            .collect()
    }

    /// Asserts that the kernel ran exactly `tests`, all passed, and the run ended with
    /// the "all passed" code.
    fn assert_all_passed(&self, tests: &[&str]) {
        let out = self.out();
        let failures: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL ")).collect();
        assert!(
            failures.is_empty(),
            "failures: {failures:#?}\n{}",
            self.describe()
        );
        for t in tests {
            assert!(
                out.lines().any(|l| l == format!("PASS {t}")),
                "no `PASS {t}`\n{}",
                self.describe()
            );
        }
        let summary = format!("SUMMARY {}/{}", tests.len(), tests.len());
        assert!(
            out.lines().any(|l| l == summary),
            "no `{summary}`\n{}",
            self.describe()
        );
        assert_eq!(self.code, ALL_PASSED, "{}", self.describe());
    }

    /// The counters `--exit-stats` prints (lines `<reason> <count> ...`).
    fn exit_stats(&self) -> Vec<(String, u64)> {
        self.stderr
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let name = w.next()?;
                let count = w.next()?.parse().ok()?;
                Some((name.to_owned(), count))
            })
            .collect()
    }

    fn stat(&self, name: &str) -> u64 {
        match self.exit_stats().iter().find(|(n, _)| n == name) {
            Some((_, c)) => *c,
            None => panic!("--exit-stats printed no `{name}`\n{}", self.describe()),
        }
    }
}

/// A directory for this test binary's files.
fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("conformance");
    fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// A file in the scratch directory, removed when dropped.
struct ScratchFile(PathBuf);

impl std::ops::Deref for ScratchFile {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Writes `bytes` to a file of this process named `name`.
fn write_file(name: &str, bytes: &[u8]) -> ScratchFile {
    let path = scratch().join(format!("{}-{name}", std::process::id()));
    fs::write(&path, bytes).expect("write a scratch file");
    ScratchFile(path)
}

mod common;

/// Runs `exitlab run KERNEL ARGS...` (with `--timeout` unless given); fails the test with
/// one line first when /dev/kvm cannot be used.
fn run(kernel: &Path, args: &[&str]) -> Run {
    common::require_kvm();
    exec(kernel, args)
}

/// [`run`] without the KVM check, for images that must be refused before KVM is opened.
fn exec(kernel: &Path, args: &[&str]) -> Run {
    let mut cmd = Command::new(EXITLAB);
    cmd.arg("run").arg(kernel).args(args);
    if !args.contains(&"--timeout") {
        cmd.args(["--timeout", TIMEOUT_S]);
    }
    execute(cmd)
}

/// Runs `cmd` to completion and records how it ended.
fn execute(mut cmd: Command) -> Run {
    let command = format!("{cmd:?}");
    let start = Instant::now();
    let out = cmd.output().expect("run the exitlab binary");
    Run {
        command,
        code: out.status.code().unwrap_or(-1),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: start.elapsed(),
    }
}

/// The host's TSC frequency as `exitlab host --json` reports it (tsc.khz).
fn tsc_khz() -> u64 {
    static KHZ: OnceLock<u64> = OnceLock::new();
    *KHZ.get_or_init(|| {
        let out = Command::new(EXITLAB)
            .args(["host", "--json"])
            .output()
            .expect("run exitlab host --json");
        assert!(out.status.success(), "exitlab host --json failed: {out:?}");
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("exitlab host --json prints JSON");
        v["tsc"]["khz"]
            .as_u64()
            .expect("exitlab host --json has tsc.khz")
    })
}

/// FNV-1a, 32 bits: the checksum the kernel computes over the initrd.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(2_166_136_261u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(16_777_619)
    })
}

/// An initrd of `len` pseudo-random bytes, written to a file; returns the file and
/// the kernel arguments that describe it.
fn initrd(name: &str, len: usize) -> (ScratchFile, String) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ len as u64;
    let bytes: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let path = write_file(name, &bytes);
    let args = format!("initrd_len={len} initrd_sum={:#x}", fnv1a(&bytes));
    (path, args)
}

/// A token no other run uses.
fn unique_token() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("tok-{}-{nanos:08x}", std::process::id())
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("scratch paths are UTF-8")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn multiboot_elf_passes_every_test() {
    let kernel = write_file("conformance-multiboot.elf", CONFORMANCE_MULTIBOOT);
    let (initrd, initrd_args) = initrd("initrd-mb", 3001);
    let token = unique_token();
    // Odd spacing, quotes and a tab: the rest of the command line must arrive verbatim.
    let cmdline = format!(
        "ram=64 cpus=2 tsc_khz={} {initrd_args} token={token} quoted=\"a  b\"\tend",
        tsc_khz()
    );
    let r = run(
        &kernel,
        &[
            "--mem",
            "64",
            "--cpus",
            "2",
            "--initrd",
            path_str(&initrd),
            "--cmdline",
            &cmdline,
        ],
    );
    r.assert_all_passed(&[
        "mbinfo", "cmdline", "fwcfg", "acpi", "pmtimer", "hpet", "firmware", "pci", "pcicfg",
        "serial", "smp", "mce",
    ]);
    assert_eq!(
        r.lines_after("CMDLINE-ARGV0 "),
        vec![path_str(&kernel).to_owned()],
        "argv[0] must be the kernel's path\n{}",
        r.describe()
    );
    assert_eq!(
        r.lines_after("CMDLINE-REST "),
        vec![cmdline.clone()],
        "the command line must round-trip\n{}",
        r.describe()
    );
    assert!(
        contains(&r.stdout, CONFORMANCE_SERIAL_PATTERN),
        "{}",
        r.describe()
    );
}

#[test]
fn multiboot_elf_passes_every_test_with_a_split_irqchip() {
    // With --irqchip split the PICs are exitlab's userspace pair: the firmware state a
    // multiboot kernel finds (PIC bases and masks as SeaBIOS leaves them) is set there.
    let kernel = write_file("conformance-multiboot-split.elf", CONFORMANCE_MULTIBOOT);
    let cmdline = format!("ram=64 cpus=1 tsc_khz={}", tsc_khz());
    let r = run(
        &kernel,
        &["--mem", "64", "--irqchip", "split", "--cmdline", &cmdline],
    );
    r.assert_all_passed(&[
        "mbinfo", "cmdline", "fwcfg", "acpi", "pmtimer", "hpet", "firmware", "pci", "pcicfg",
        "serial", "smp", "mce",
    ]);
}

#[test]
fn multiboot_flat_image_with_ram_above_4g() {
    // 3.5 GiB: 3 GiB below the PCI hole, 512 MiB from 4 GiB; the initrd goes high
    // below the hole.
    let kernel = write_file("conformance-multiboot.bin", CONFORMANCE_MULTIBOOT_FLAT);
    let (initrd, initrd_args) = initrd("initrd-flat", 4096 + 17);
    let cmdline = format!("mbinfo fwcfg cmdline ram=3584 cpus=1 {initrd_args}");
    let r = run(
        &kernel,
        &[
            "--mem",
            "3584",
            "--initrd",
            path_str(&initrd),
            "--append",
            &cmdline,
        ],
    );
    r.assert_all_passed(&["mbinfo", "fwcfg", "cmdline"]);
    assert!(
        r.out().contains("0100000000..0120000000 ram"),
        "the memory map must list the RAM above 4 GiB\n{}",
        r.describe()
    );
    assert_eq!(r.lines_after("CMDLINE-REST "), vec![cmdline]);
}

#[test]
fn pvh_passes_every_test() {
    let kernel = write_file("conformance-pvh.elf", CONFORMANCE_PVH);
    let (initrd, initrd_args) = initrd("initrd-pvh", 777);
    let token = unique_token();
    let cmdline = format!(
        "ram=96 cpus=3 tsc_khz={} {initrd_args} token={token}",
        tsc_khz()
    );
    let r = run(
        &kernel,
        &[
            "--mem",
            "96",
            "--smp",
            "3",
            "--initrd",
            path_str(&initrd),
            "--cmdline",
            &cmdline,
        ],
    );
    r.assert_all_passed(&[
        "pvhinfo", "cmdline", "fwcfg", "acpi", "pmtimer", "hpet", "pci", "pcicfg", "serial", "smp",
        "mce",
    ]);
    // PVH passes the command line alone, without the kernel's path.
    assert!(
        r.lines_after("CMDLINE-ARGV0 ").is_empty(),
        "{}",
        r.describe()
    );
    assert_eq!(
        r.lines_after("CMDLINE-REST "),
        vec![cmdline],
        "{}",
        r.describe()
    );
    assert_eq!(
        r.lines_after("# smp: AP ").len(),
        2,
        "two application processors\n{}",
        r.describe()
    );
}

#[test]
fn serial_output_is_byte_exact() {
    let kernel = write_file("conformance-serial.elf", CONFORMANCE_PVH);
    let r = run(&kernel, &["--cmdline", "serial"]);
    let mut want = b"# exitlab conformance kernel, PVH entry\n".to_vec();
    want.extend_from_slice(CONFORMANCE_SERIAL_PATTERN);
    want.extend_from_slice(b"PASS serial\nSUMMARY 1/1\n");
    assert_eq!(
        r.stdout,
        want,
        "stdout must be exactly what the guest wrote\n{}",
        r.describe()
    );
    assert_eq!(r.code, ALL_PASSED, "{}", r.describe());
}

#[test]
fn ioeventfd_doorbells_do_not_exit_to_userspace() {
    // Two runs that differ only in the number of writes per pci-testdev doorbell. Of
    // the six doorbells, only the two without an ioeventfd may reach user space: the
    // extra writes add exactly one MMIO and one port write exit each, and the extra
    // serial output one port write (and one LSR read) per byte.
    let kernel = write_file("conformance-pci.elf", CONFORMANCE_PVH);
    let (few, many) = (200u64, 1200u64);
    let runs: Vec<Run> = [few, many]
        .iter()
        .map(|n| {
            let cmdline = format!("pci doorbells={n}");
            let r = run(&kernel, &["--exit-stats", "--cmdline", &cmdline]);
            r.assert_all_passed(&["pci"]);
            r
        })
        .collect();
    let (a, b) = (&runs[0], &runs[1]);
    let extra = many - few;
    let extra = extra as i64;
    let extra_serial = b.stdout.len() as i64 - a.stdout.len() as i64;
    let delta = |name: &str| b.stat(name) as i64 - a.stat(name) as i64;
    let both = format!("{}\n{}", a.describe(), b.describe());
    assert_eq!(delta("mmio_write"), extra, "{both}");
    assert_eq!(delta("io_out"), extra + extra_serial, "{both}");
    assert_eq!(delta("mmio_read"), 0, "{both}");
    assert_eq!(delta("io_in"), extra_serial, "{both}");
    // Had the four ioeventfd doorbells exited too, there would be three times as many.
    assert!(b.stat("mmio_write") < 2 * many, "{both}");
}

#[test]
fn pci_config_address_low_bits_at_every_offset_and_size() {
    let kernel = write_file("conformance-pcicfg.bin", CONFORMANCE_MULTIBOOT_FLAT);
    let r = run(&kernel, &["--cmdline", "pcicfg"]);
    r.assert_all_passed(&["pcicfg"]);
}

#[test]
fn real_mode_kernel_linked_at_0x8000_prints_and_exits() {
    let kernel = write_file("conformance-realmode.elf", CONFORMANCE_REALMODE);
    let r = run(
        &kernel,
        &["--cmdline", "a command line that needs boot data"],
    );
    assert_eq!(r.code, ALL_PASSED, "{}", r.describe());
    let line = r.lines_after("# realmode: ");
    assert_eq!(line.len(), 1, "{}", r.describe());
    assert!(
        line[0].starts_with("hello from real mode, CR0.PE=0, IP 0x80"),
        "{}",
        r.describe()
    );
}

#[test]
fn kernel_in_the_vga_hole_is_refused_naming_it() {
    // The real-mode kernel moved to 0xB8000 (program header and entry point).
    let mut img = CONFORMANCE_REALMODE.to_vec();
    let phoff = le32(&img, 28) as usize;
    let entry = le32(&img, 24) - 0x8000 + 0xB_8000;
    img[24..28].copy_from_slice(&entry.to_le_bytes());
    img[phoff + 8..phoff + 16].copy_from_slice(&[0x00, 0x80, 0x0B, 0x00, 0x00, 0x80, 0x0B, 0x00]);
    assert_refused("vga.elf", &img, "overlaps the VGA hole (0xa0000..0xc0000)");
}

#[test]
fn port_0x92_bit0_resets_the_machine() {
    let kernel = write_file("conformance-reset92.elf", CONFORMANCE_PVH);
    let r = run(&kernel, &["--cmdline", "reset92"]);
    // A reset ends `exitlab run` with 0, as on QEMU with -no-reboot.
    assert_eq!(r.code, 0, "{}", r.describe());
    let out = r.out();
    assert!(
        out.contains("# reset92: port 0x92 reads 0x0; setting A20, then bit 0"),
        "{}",
        r.describe()
    );
    assert!(!out.contains("FAIL"), "{}", r.describe());
    assert!(r.stderr.contains("reset"), "{}", r.describe());
}

#[test]
fn s3_sleeps_until_the_rtc_alarm_and_resumes_at_the_waking_vector() {
    // Two vCPUs: the application processor must be parked for the resume too.
    let kernel = write_file("conformance-s3.elf", CONFORMANCE_PVH);
    let r = run(&kernel, &["--cpus", "2", "--cmdline", "s3"]);
    assert_eq!(r.code, ALL_PASSED, "{}", r.describe());
    let out = r.out();
    assert!(
        out.contains("# s3: suspending at second"),
        "{}",
        r.describe()
    );
    // CS 0700: the waking vector 0x7000 in real mode; register C: the alarm flag and
    // IRQF, as the alarm woke the machine.
    assert!(
        out.contains(
            "# s3: resumed in real mode at the waking vector, CS 0700, CR0.PE 0, RTC register C a0"
        ),
        "{}",
        r.describe()
    );
    assert!(!out.contains("FAIL"), "{}", r.describe());
    // The alarm is 2 s ahead on a 1 s clock: at least 1 s asleep.
    assert!(r.took >= Duration::from_secs(1), "{}", r.describe());
}

#[test]
fn s5_powers_off() {
    let kernel = write_file("conformance-s5.elf", CONFORMANCE_PVH);
    let r = run(&kernel, &["--cmdline", "s5"]);
    assert_eq!(r.code, 0, "{}", r.describe());
    assert!(
        r.out()
            .contains("# s5: powering off through PM1a_CNT 0xb004"),
        "{}",
        r.describe()
    );
    assert!(!r.out().contains("FAIL"), "{}", r.describe());
}

#[test]
fn string_port_input_into_mmio_lands_byte_by_byte() {
    // outw to pc-testdev's latch, then rep insb of 1,024 bytes into pc-testdev's MMIO:
    // every element is a port read and an MMIO write, handled one at a time.
    let kernel = write_file("conformance-strio.elf", CONFORMANCE_PVH);
    let r = run(&kernel, &["--cmdline", "strio"]);
    r.assert_all_passed(&["strio"]);
}

#[test]
fn nmi_latching_one_more_after_iret() {
    // Two self-NMIs sent inside the NMI handler: exactly one is delivered, after IRET.
    let kernel = write_file("conformance-nmi.elf", CONFORMANCE_PVH);
    let cmdline = format!("nmi tsc_khz={}", tsc_khz());
    let r = run(&kernel, &["--cmdline", &cmdline]);
    if r.code == 122 && r.stderr.contains("instruction bytes: cf") {
        // A host limit, not a pass: KVM's instruction emulator stops on a protected-mode
        // ring-0 IRET. Only the paravirtual kvm_pvm (which emulates guest ring 0) is
        // known to; anywhere else this is a failure. What can be checked here is that
        // exitlab reports the stop as an emulation failure naming the instruction.
        assert!(
            exitlab_host::survey().virtualization.kvm_pvm_loaded,
            "KVM could not run a ring-0 IRET on a host that does not emulate ring 0\n{}",
            r.describe()
        );
        assert!(r.stderr.contains("emulation failure"), "{}", r.describe());
        common::say_not_verified(
            "NOT CHECKED on this host: its KVM (kvm_pvm) cannot run a ring-0 IRET in \
             protected mode, so the NMI latching rule cannot be observed here; .ci/run \
             checks it inside ../shared/tools/l1kvm/run-in-l1 (SVM KVM).",
        );
        return;
    }
    r.assert_all_passed(&["nmi"]);
    assert_eq!(
        r.lines_after("# nmi: "),
        vec!["2 handler runs; 2 NMIs sent from inside the handler".to_owned()],
        "{}",
        r.describe()
    );
}

/// The options a QEMU-based runner passes, around `-kernel` and `-append`.
const QEMU_RUNNER_ARGS: &str = "-smp 2 -m 96 -cpu host,-arch-capabilities \
    -machine accel=kvm,pit=off -nodefaults -no-reboot -display none -serial stdio \
    -device isa-debug-exit,iobase=0xf4,iosize=0x4 -device pci-testdev -device pc-testdev \
    -global kvm-pit.lost_tick_policy=discard";

fn run_qemu_style(program: &Path, lead: &[&str], args: &[&str]) -> Run {
    let mut cmd = Command::new(program);
    cmd.args(lead).args(args);
    execute(cmd)
}

#[test]
fn qemu_style_command_line_runs_the_conformance_kernel() {
    let kernel = write_file("conformance-qemu.elf", CONFORMANCE_MULTIBOOT);
    let cmdline = format!("ram=96 cpus=2 tsc_khz={}", tsc_khz());
    let mut args = vec!["-kernel", path_str(&kernel), "-append", &cmdline];
    args.extend(QEMU_RUNNER_ARGS.split_whitespace());
    let r = run_qemu_style(Path::new(EXITLAB), &["run", "--qemu-args", "--"], &args);
    let all = [
        "mbinfo", "cmdline", "fwcfg", "acpi", "pmtimer", "hpet", "firmware", "pci", "pcicfg",
        "serial", "smp", "mce",
    ];
    r.assert_all_passed(&all);
    // The same binary named exitlab-qemu takes the options directly.
    let link = scratch().join(format!("{}-bin/exitlab-qemu", std::process::id()));
    fs::create_dir_all(link.parent().unwrap()).unwrap();
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(EXITLAB, &link).expect("symlink exitlab-qemu");
    let r2 = run_qemu_style(&link, &[], &args);
    let _ = fs::remove_file(&link);
    r2.assert_all_passed(&all);
}

#[test]
fn qemu_style_refuses_an_unknown_option_naming_it() {
    let kernel = write_file("conformance-qemu-bad.elf", CONFORMANCE_PVH);
    let r = run_qemu_style(
        Path::new(EXITLAB),
        &["run", "--qemu-args", "--"],
        &["-kernel", path_str(&kernel), "-vga", "std"],
    );
    assert_eq!(r.code, BAD_INPUT, "{}", r.describe());
    assert!(r.stdout.is_empty(), "{}", r.describe());
    assert!(
        r.stderr.contains("QEMU option -vga is not supported"),
        "{}",
        r.describe()
    );
}

#[test]
fn a_failing_test_ends_with_debug_exit_1() {
    // mbinfo does not apply to a PVH boot: named anyway, it fails.
    let kernel = write_file("conformance-fail.elf", CONFORMANCE_PVH);
    let r = run(&kernel, &["--cmdline", "mbinfo"]);
    assert_eq!(r.code, SOME_FAILED, "{}", r.describe());
    let out = r.out();
    assert!(
        out.contains("FAIL mbinfo: the kernel was not entered through multiboot"),
        "{}",
        r.describe()
    );
    assert!(out.contains("SUMMARY 0/1"), "{}", r.describe());
}

#[test]
fn triple_fault_ends_with_120() {
    let kernel = write_file("conformance-triple.elf", CONFORMANCE_PVH);
    let r = run(&kernel, &["--cmdline", "triplefault"]);
    assert_eq!(r.code, TRIPLE_FAULT, "{}", r.describe());
    assert!(
        r.out().contains("# triplefault: loading an empty IDT"),
        "{}",
        r.describe()
    );
    assert!(
        r.stderr.to_lowercase().contains("triple"),
        "{}",
        r.describe()
    );
}

#[test]
fn instruction_fetch_from_unbacked_memory_ends_with_122_naming_the_failure() {
    let kernel = write_file("conformance-badfetch.elf", CONFORMANCE_PVH);
    let r = run(&kernel, &["--cmdline", "badfetch"]);
    assert_eq!(r.code, KVM_FAILURE, "{}", r.describe());
    assert!(
        r.out().contains("# badfetch: jumping to 0xd0000000"),
        "{}",
        r.describe()
    );
    // The vCPU, KVM's reason and the registers at the failing instruction.
    assert!(r.stderr.contains("vCPU 0: KVM"), "{}", r.describe());
    assert!(
        r.stderr.contains("rip=0x00000000d0000000"),
        "{}",
        r.describe()
    );
}

#[test]
fn timeout_ends_with_124() {
    let kernel = write_file("conformance-timeout.bin", CONFORMANCE_MULTIBOOT_FLAT);
    let r = run(&kernel, &["--timeout", "2", "--cmdline", "timeout"]);
    assert_eq!(r.code, TIMED_OUT, "{}", r.describe());
    assert!(
        // Not before the limit; the upper bound only catches a limit that is not
        // honoured (an emulated L1 under load takes seconds to start a process).
        r.took >= Duration::from_secs(2) && r.took < Duration::from_secs(120),
        "{}",
        r.describe()
    );
    assert!(r.out().contains("# timeout: spinning"), "{}", r.describe());
}

/// Runs a malformed image: it must be refused with exit code 2, a message containing
/// `expected`, and no guest output.
fn assert_refused(name: &str, image: &[u8], expected: &str) {
    let kernel = write_file(name, image);
    let r = exec(&kernel, &["--cmdline", "serial"]);
    assert_eq!(r.code, BAD_INPUT, "{}", r.describe());
    assert!(r.stdout.is_empty(), "nothing may run\n{}", r.describe());
    assert!(
        r.stderr.contains(expected),
        "expected a message containing {expected:?}\n{}",
        r.describe()
    );
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[test]
fn bad_multiboot_checksum_is_refused() {
    let mut img = CONFORMANCE_MULTIBOOT_FLAT.to_vec();
    let off = (0..8192)
        .step_by(4)
        .find(|&o| le32(&img, o) == 0x1BAD_B002)
        .expect("multiboot header");
    img[off + 8] ^= 0x40;
    assert_refused("bad-checksum.bin", &img, "bad checksum");
}

#[test]
fn truncated_elf_is_refused() {
    let img = &CONFORMANCE_PVH[..CONFORMANCE_PVH.len() / 2];
    assert_refused("truncated.elf", img, "truncated");
}

#[test]
fn segment_outside_memory_is_refused() {
    // Move the PVH image's first PT_LOAD to 0xF0000000, in the PCI hole.
    let mut img = CONFORMANCE_PVH.to_vec();
    let phoff = le32(&img, 28) as usize;
    let phentsize = usize::from(u16::from_le_bytes([img[42], img[43]]));
    let phnum = usize::from(u16::from_le_bytes([img[44], img[45]]));
    let load = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .find(|&p| le32(&img, p) == 1)
        .expect("a PT_LOAD");
    img[load + 12..load + 16].copy_from_slice(&0xF000_0000u32.to_le_bytes());
    assert_refused("outside.elf", &img, "outside guest RAM");
}

#[test]
fn bzimage_with_bad_magic_is_refused() {
    // A boot sector with the 0xAA55 flag and one setup sector, but "HdrZ" where the
    // setup header magic "HdrS" belongs; a real kernel image as the payload.
    let mut img = vec![0u8; 0x400];
    img[0x1F1] = 1;
    img[0x1FE] = 0x55;
    img[0x1FF] = 0xAA;
    img[0x202..0x206].copy_from_slice(b"HdrZ");
    img[0x206..0x208].copy_from_slice(&0x020Fu16.to_le_bytes());
    img.extend_from_slice(CONFORMANCE_PVH);
    assert_refused("bad-magic.bzimage", &img, "not a Linux bzImage");
}

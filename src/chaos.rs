//! `exitlab run --builtin chaos`: boots the chaos kernel (a seeded hostile guest) again
//! and again for a given time, and ends with an account: how each boot ended, userspace
//! exits by reason, the faults the guest took, and the process's peak memory. Boots
//! alternate between the PC platform (`exitlab run`'s devices) and a lab VM where the
//! lab answers the guest's doorbells with its measurement protocol, so that garbage in
//! the control page, the sample ring and the doorbells reaches the code that parses them
//! in a measurement. The VMM and the lab must answer every exit, never panic, and keep
//! their memory bounded.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use exitlab_vmm::machine::{self, MachineConfig, RunEnd, SerialOut};
use exitlab_vmm::vcpu::ExitCounts;

use crate::status::{usage_error, EXIT_INTERRUPTED, EXIT_OK, EXIT_VMM_FAILED};

/// Options of a chaos run.
#[derive(Debug)]
pub struct ChaosOptions {
    /// How long to keep booting, in seconds.
    pub seconds: f64,
    /// The seed; boot `k` of the run uses a seed derived from it and `k`.
    pub seed: u64,
    /// vCPUs (INIT/SIPI storms need 2 or more).
    pub cpus: u32,
    /// Guest RAM in MiB.
    pub mem_mib: u64,
    /// Where the guest's serial output goes (default: nowhere; it is garbage).
    pub serial: Option<PathBuf>,
    /// Print one line per boot.
    pub verbose: bool,
}

/// The seed of boot `boot` of a run seeded with `seed` (splitmix64, kept below 10^18 so
/// that the guest's decimal parser takes it whole).
pub fn boot_seed(seed: u64, boot: u64) -> u64 {
    let mut z = seed
        .wrapping_add(boot.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % 1_000_000_000_000_000_000
}

/// What the guest reported in its last `CHAOS ops=.. faults=.. last=..` line.
#[derive(Debug, Default, Clone, Copy)]
struct GuestReport {
    ops: u64,
    faults: u64,
    last_vector: u64,
}

/// The serial sink of a chaos boot: counts bytes, picks out the guest's report lines
/// (with a bounded line buffer: the rest of the output is random bytes), and copies the
/// output to a file when asked.
#[derive(Clone)]
struct ChaosSerial {
    state: Arc<Mutex<SerialState>>,
}

struct SerialState {
    bytes: u64,
    line: Vec<u8>,
    report: GuestReport,
    copy: Option<std::fs::File>,
}

const LINE_MAX: usize = 64;

fn parse_report(line: &[u8]) -> Option<GuestReport> {
    let s = std::str::from_utf8(line).ok()?;
    let mut it = s.strip_prefix("CHAOS ")?.split(' ');
    let mut field = |name: &str| -> Option<u64> {
        u64::from_str_radix(it.next()?.strip_prefix(name)?, 16).ok()
    };
    Some(GuestReport {
        ops: field("ops=")?,
        faults: field("faults=")?,
        last_vector: field("last=")?,
    })
}

impl Write for ChaosSerial {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let mut st = exitlab_devices::lock(&self.state);
        st.bytes += b.len() as u64;
        for &c in b {
            if c == b'\n' {
                if let Some(r) = parse_report(&st.line) {
                    st.report = r;
                }
                st.line.clear();
            } else if st.line.len() < LINE_MAX {
                st.line.push(c);
            }
        }
        if let Some(f) = st.copy.as_mut() {
            f.write_all(b)?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The process's current and peak resident set size, in KiB (VmRSS, VmHWM).
pub fn rss_kib() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// What the boots under the lab's doorbell protocol came to.
#[derive(Default)]
struct LabAccount {
    boots: u64,
    doorbells: u64,
    samples: u64,
    /// How the boots ended (numbers as N), with how many.
    ends: BTreeMap<String, u64>,
    /// A full message of each kind of protocol violation caught, the first seen.
    examples: BTreeMap<String, String>,
}

impl LabAccount {
    fn add(&mut self, b: exitlab_lab::runner::ProtocolBoot) {
        self.boots += 1;
        self.doorbells += b.doorbells;
        self.samples += b.samples;
        *self.ends.entry(b.ended.clone()).or_default() += 1;
        if let Some(e) = b.protocol_error {
            self.examples.entry(b.ended).or_insert(e);
        }
    }

    fn print(&self, out: &mut impl Write) {
        let _ = writeln!(
            out,
            "lab protocol boots: {} ({} doorbells rung, {} sample records taken); how they ended:",
            self.boots, self.doorbells, self.samples
        );
        for (k, n) in &self.ends {
            let _ = writeln!(out, "  {n:>8}  {k}");
            if let Some(e) = self.examples.get(k).filter(|e| *e != k) {
                let first = e.lines().next().unwrap_or(e);
                let _ = writeln!(out, "            e.g. {first}");
            }
        }
    }
}

/// Short name of how a boot ended, for the account.
fn end_kind(end: &RunEnd) -> String {
    match end {
        RunEnd::DebugExit(_) => "debug-exit write".into(),
        RunEnd::Reset => "reset (i8042 / shutdown event)".into(),
        RunEnd::TripleFault { .. } => "triple fault".into(),
        RunEnd::Timeout { .. } => "end of the run (time up)".into(),
        RunEnd::Cancelled => "interrupted".into(),
        RunEnd::Failure { what, .. } => {
            let w = what.split(';').next().unwrap_or(what);
            format!("KVM could not go on: {w}")
        }
        RunEnd::Stopped(_) => "every vCPU stopped".into(),
    }
}

/// Runs the chaos mode; returns the process exit code.
pub fn chaos_cmd(o: ChaosOptions) -> i32 {
    if let Err(e) = crate::common::check_seconds("--seconds", o.seconds) {
        return usage_error(e);
    }
    if o.cpus == 0 || o.cpus > machine::MAX_CPUS {
        return usage_error(format!(
            "--cpus {} is out of range: use 1..={}",
            o.cpus,
            machine::MAX_CPUS
        ));
    }
    if o.mem_mib < 8 || o.mem_mib > 4096 {
        return usage_error(format!(
            "--mem {} MiB is out of range for the chaos kernel: use 8..=4096",
            o.mem_mib
        ));
    }
    let copy = match &o.serial {
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Some(f),
            Err(e) => {
                return usage_error(format!(
                    "--serial file:{}: cannot create it ({e}); choose a writable path",
                    p.display()
                ))
            }
        },
        None => None,
    };
    let (kvm, cancel) = match crate::signals::open_kvm_cancellable() {
        Ok(k) => k,
        Err(code) => return code,
    };
    let serial = ChaosSerial {
        state: Arc::new(Mutex::new(SerialState {
            bytes: 0,
            line: Vec::with_capacity(LINE_MAX),
            report: GuestReport::default(),
            copy,
        })),
    };
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(o.seconds);
    let mut exits = ExitCounts::default();
    let mut kvm_exits: Option<u64> = Some(0);
    let mut ends: BTreeMap<String, u64> = BTreeMap::new();
    let mut guest = GuestReport::default();
    let mut vectors: BTreeMap<u64, u64> = BTreeMap::new();
    let mut boots = 0u64;
    let mut lab = LabAccount::default();
    let mut rss_after_first = 0;
    eprintln!(
        "exitlab chaos: seed {}, {} s, {} vCPU(s), {} MiB",
        o.seed, o.seconds, o.cpus, o.mem_mib
    );
    while Instant::now() < deadline && !cancel.load(Ordering::Acquire) {
        {
            let mut st = exitlab_devices::lock(&serial.state);
            st.report = GuestReport::default();
            st.line.clear();
        }
        let seed = boot_seed(o.seed, boots);
        if boots % 2 == 1 {
            let limit = deadline.saturating_duration_since(Instant::now());
            let b = match exitlab_lab::runner::protocol_boot(
                &kvm,
                exitlab_guest::CHAOS,
                &format!("seed={seed} lab"),
                limit,
            ) {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("exitlab: chaos boot {boots} (lab protocol): {e}");
                    return EXIT_VMM_FAILED;
                }
            };
            boots += 1;
            exits = exits.plus(&b.exits);
            if o.verbose {
                eprintln!(
                    "  boot {boots} (seed {seed}, lab protocol): {}; {} doorbells, {} exits",
                    b.protocol_error.as_deref().unwrap_or(&b.ended),
                    b.doorbells,
                    b.exits.total()
                );
            }
            lab.add(b);
            continue;
        }
        let cfg = MachineConfig {
            kernel: exitlab_guest::CHAOS.to_vec(),
            kernel_path: "chaos".into(),
            cmdline: format!("seed={seed}"),
            initrd: None,
            cpus: o.cpus,
            ram_bytes: o.mem_mib << 20,
            timeout: Some(deadline.saturating_duration_since(Instant::now())),
            serial: SerialOut::Writer(Box::new(serial.clone())),
            serial_input: false,
            prefer_pvh: true,
            cancel: Some(cancel.clone()),
            platform: Default::default(),
        };
        let report = match machine::run(kvm.clone(), cfg) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("exitlab: chaos boot {boots}: {e}");
                return EXIT_VMM_FAILED;
            }
        };
        boots += 1;
        exits = exits.plus(&report.exits);
        kvm_exits = kvm_exits.zip(report.kvm_exits).map(|(a, b)| a + b);
        let kind = end_kind(&report.end);
        *ends.entry(kind.clone()).or_default() += 1;
        let r = exitlab_devices::lock(&serial.state).report;
        guest.ops += r.ops;
        guest.faults += r.faults;
        if r.faults > 0 {
            *vectors.entry(r.last_vector).or_default() += 1;
        }
        if boots == 1 {
            rss_after_first = rss_kib().0;
        }
        if o.verbose {
            eprintln!(
                "  boot {boots} (seed {seed}): {kind}; guest ops {} faults {}; {} exits",
                r.ops,
                r.faults,
                report.exits.total()
            );
        }
    }
    let (rss, hwm) = rss_kib();
    let serial_bytes = exitlab_devices::lock(&serial.state).bytes;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "chaos: seed {}, {:.1} s, {boots} boot(s) of the chaos kernel ({} vCPU(s), {} MiB on the PC platform; 1 vCPU, {} MiB under the lab protocol)",
        o.seed,
        start.elapsed().as_secs_f64(),
        o.cpus,
        o.mem_mib,
        exitlab_lab::runner::LAB_RAM_BYTES >> 20
    );
    let _ = writeln!(out, "how each PC-platform boot ended:");
    for (k, n) in &ends {
        let _ = writeln!(out, "  {n:>8}  {k}");
    }
    lab.print(&mut out);
    let _ = writeln!(out, "exits by reason (userspace, all boots):");
    for (name, n) in exits.entries() {
        let _ = writeln!(out, "  {name:<12} {n}");
    }
    let _ = writeln!(out, "  {:<12} {}", "total", exits.total());
    match kvm_exits {
        Some(k) => {
            let _ = writeln!(
                out,
                "  {:<12} {k} (KVM's count of all exits, in-kernel ones included)",
                "kvm_exits"
            );
        }
        None => {
            let _ = writeln!(out, "  kvm_exits    unavailable (no KVM binary stats)");
        }
    }
    let _ = writeln!(
        out,
        "faults seen: {} exceptions taken by the guest (as last reported per PC-platform \
         boot, over {} guest operations), {} triple fault(s), {} boot(s) KVM could not go on with",
        guest.faults,
        guest.ops,
        ends.get("triple fault").copied().unwrap_or(0),
        ends.iter()
            .filter(|(k, _)| k.starts_with("KVM could not"))
            .map(|(_, n)| n)
            .sum::<u64>()
    );
    if !vectors.is_empty() {
        let v: Vec<String> = vectors.iter().map(|(v, n)| format!("{v}: {n}")).collect();
        let _ = writeln!(
            out,
            "last fault vector per boot (vector: boots): {}",
            v.join(", ")
        );
    }
    let _ = writeln!(out, "serial output: {serial_bytes} bytes");
    let _ = writeln!(
        out,
        "memory: peak RSS {:.1} MiB, RSS {:.1} MiB after the first boot and {:.1} MiB at the end",
        hwm as f64 / 1024.0,
        rss_after_first as f64 / 1024.0,
        rss as f64 / 1024.0
    );
    if cancel.load(Ordering::Acquire) {
        crate::signals::restore_terminal();
        return EXIT_INTERRUPTED;
    }
    EXIT_OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_are_parsed_and_garbage_is_not() {
        let r = parse_report(b"CHAOS ops=00001000 faults=0000000a last=0000000d").unwrap();
        assert_eq!((r.ops, r.faults, r.last_vector), (4096, 10, 13));
        assert!(parse_report(b"CHAOS ops=zz faults=1 last=2").is_none());
        assert!(parse_report(b"\xff\x00CHAOS").is_none());
        let mut s = ChaosSerial {
            state: Arc::new(Mutex::new(SerialState {
                bytes: 0,
                line: Vec::new(),
                report: GuestReport::default(),
                copy: None,
            })),
        };
        s.write_all(&[0xAB; 10_000]).unwrap();
        s.write_all(b"\nCHAOS ops=00000010 faults=00000002 last=0000000d\n")
            .unwrap();
        let st = s.state.lock().unwrap();
        assert_eq!(st.report.ops, 16);
        assert!(st.line.capacity() <= 10_000);
        assert_eq!(st.bytes, 10_000 + 50);
    }

    #[test]
    fn boot_seeds_are_fixed_and_distinct() {
        assert_eq!(boot_seed(42, 0), boot_seed(42, 0));
        assert_ne!(boot_seed(42, 0), boot_seed(42, 1));
        assert_ne!(boot_seed(42, 0), boot_seed(43, 0));
        assert!(boot_seed(u64::MAX, u64::MAX) < 1_000_000_000_000_000_000);
    }
}

//! The chaos experiment (`exitlab run --builtin chaos`): boots the chaos kernel (a seeded
//! hostile guest) again and again for a given time, and ends with an account: how each
//! boot ended, userspace exits by reason, the faults the guest took, and the process's
//! peak memory. Boots
//! alternate between the PC platform (`exitlab run`'s devices) and a lab VM where the
//! lab answers the guest's doorbells with its measurement protocol, so that garbage in
//! the control page, the sample ring and the doorbells reaches the code that parses them
//! in a measurement. The VMM and the lab must answer every exit, never panic, and keep
//! their memory bounded.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use exitlab_vmm::machine::{self, MachineConfig, MachineError, RunEnd, SerialOut};
use exitlab_vmm::vcpu::ExitCounts;
use exitlab_vmm::Kvm;

use crate::runner::{self, ProtocolBoot, RunError};

/// What a chaos run boots.
#[derive(Debug)]
pub struct ChaosConfig {
    /// How long to keep booting.
    pub duration: Duration,
    /// The seed; boot `k` of the run uses a seed derived from it and `k`.
    pub seed: u64,
    /// vCPUs of the PC-platform boots (INIT/SIPI storms need 2 or more).
    pub cpus: u32,
    /// Guest RAM of the PC-platform boots, in MiB.
    pub mem_mib: u64,
    /// Where a copy of the guest's serial output goes (default: nowhere; it is garbage).
    pub serial_copy: Option<std::fs::File>,
}

/// Why a chaos run stopped before its time was up: the VMM or the lab could not set a
/// boot up (a guest's misbehaviour never ends the run).
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// A PC-platform boot could not be set up.
    #[error("chaos boot {boot}: {source}")]
    Machine {
        /// The boot's number, from 0.
        boot: u64,
        /// What the VMM said.
        source: MachineError,
    },
    /// A boot under the lab's protocol could not be set up.
    #[error("chaos boot {boot} (lab protocol): {source}")]
    Lab {
        /// The boot's number, from 0.
        boot: u64,
        /// What the lab said.
        source: RunError,
    },
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
fn rss_kib() -> (u64, u64) {
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
#[derive(Debug, Default)]
pub struct LabAccount {
    /// Boots under the lab's protocol.
    pub boots: u64,
    /// Doorbells their guests rang.
    pub doorbells: u64,
    /// Sample records the lab took from their rings.
    pub samples: u64,
    /// How the boots ended (numbers as N), with how many.
    pub ends: BTreeMap<String, u64>,
    /// A full message of each kind of protocol violation caught, the first seen.
    pub examples: BTreeMap<String, String>,
}

impl LabAccount {
    fn add(&mut self, b: ProtocolBoot) {
        self.boots += 1;
        self.doorbells += b.doorbells;
        self.samples += b.samples;
        *self.ends.entry(b.ended.clone()).or_default() += 1;
        if let Some(e) = b.protocol_error {
            self.examples.entry(b.ended).or_insert(e);
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

/// One boot of a chaos run, as it ended.
#[derive(Debug, Clone)]
pub struct Boot {
    /// Its number, from 1.
    pub number: u64,
    /// The seed the guest was given.
    pub seed: u64,
    /// Whether it ran under the lab's protocol (else on the PC platform).
    pub lab: bool,
    /// How it ended: the end's short name, or the protocol violation the lab caught.
    pub ended: String,
    /// Guest operations and faults it reported (PC-platform boots).
    pub guest_ops: u64,
    /// Exceptions the guest took (PC-platform boots).
    pub guest_faults: u64,
    /// Doorbells the guest rang (lab boots).
    pub doorbells: u64,
    /// Userspace exits of the boot.
    pub exits: u64,
}

/// The account of a chaos run.
#[derive(Debug, Default)]
pub struct ChaosAccount {
    /// Boots, both kinds.
    pub boots: u64,
    /// How long the run took.
    pub elapsed: Duration,
    /// How each PC-platform boot ended, with how many.
    pub ends: BTreeMap<String, u64>,
    /// The boots under the lab's protocol.
    pub lab: LabAccount,
    /// Userspace exits by reason, all boots.
    pub exits: ExitCounts,
    /// KVM's count of all exits of the PC-platform boots (`None` without binary stats).
    pub kvm_exits: Option<u64>,
    /// Operations the guests reported, as last reported per PC-platform boot.
    pub guest_ops: u64,
    /// Exceptions the guests took, as last reported per PC-platform boot.
    pub guest_faults: u64,
    /// The last fault vector of each PC-platform boot that took one: vector, boots.
    pub vectors: BTreeMap<u64, u64>,
    /// Bytes of serial output.
    pub serial_bytes: u64,
    /// Resident set size after the first boot, KiB.
    pub rss_after_first_kib: u64,
    /// Resident set size at the end, KiB.
    pub rss_kib: u64,
    /// Peak resident set size, KiB.
    pub peak_rss_kib: u64,
}

impl ChaosAccount {
    /// Triple faults among the PC-platform boots.
    pub fn triple_faults(&self) -> u64 {
        self.ends.get("triple fault").copied().unwrap_or(0)
    }

    /// PC-platform boots KVM could not go on with.
    pub fn kvm_failures(&self) -> u64 {
        self.ends
            .iter()
            .filter(|(k, _)| k.starts_with("KVM could not"))
            .map(|(_, n)| n)
            .sum()
    }
}

/// Guest RAM of the boots under the lab's protocol, in MiB (they run on one vCPU).
pub const LAB_MEM_MIB: u64 = runner::LAB_RAM_BYTES >> 20;

/// Boots the chaos kernel until `cfg.duration` is up or `cancel` is set, alternating
/// between the PC platform and the lab's protocol, and returns the account; `on_boot` is
/// told of each boot as it ends.
pub fn run(
    kvm: &Arc<Kvm>,
    cancel: &Arc<AtomicBool>,
    cfg: ChaosConfig,
    on_boot: &mut dyn FnMut(&Boot),
) -> Result<ChaosAccount, ChaosError> {
    let serial = ChaosSerial {
        state: Arc::new(Mutex::new(SerialState {
            bytes: 0,
            line: Vec::with_capacity(LINE_MAX),
            report: GuestReport::default(),
            copy: cfg.serial_copy,
        })),
    };
    let start = Instant::now();
    let deadline = start + cfg.duration;
    let pc = PcPlatform {
        kvm,
        cancel,
        serial: &serial,
        cpus: cfg.cpus,
        mem_mib: cfg.mem_mib,
    };
    let mut a = ChaosAccount {
        kvm_exits: Some(0),
        ..ChaosAccount::default()
    };
    while Instant::now() < deadline && !cancel.load(Ordering::Acquire) {
        {
            let mut st = exitlab_devices::lock(&serial.state);
            st.report = GuestReport::default();
            st.line.clear();
        }
        let seed = boot_seed(cfg.seed, a.boots);
        let boot = if a.boots % 2 == 1 {
            a.lab_boot(kvm, seed, deadline)?
        } else {
            a.pc_boot(&pc, seed, deadline)?
        };
        on_boot(&boot);
    }
    (a.rss_kib, a.peak_rss_kib) = rss_kib();
    a.serial_bytes = exitlab_devices::lock(&serial.state).bytes;
    a.elapsed = start.elapsed();
    Ok(a)
}

/// What the PC-platform boots of a run share.
struct PcPlatform<'a> {
    kvm: &'a Arc<Kvm>,
    cancel: &'a Arc<AtomicBool>,
    serial: &'a ChaosSerial,
    cpus: u32,
    mem_mib: u64,
}

impl ChaosAccount {
    /// One boot under the lab's protocol, until it ends or `deadline`.
    fn lab_boot(
        &mut self,
        kvm: &Arc<Kvm>,
        seed: u64,
        deadline: Instant,
    ) -> Result<Boot, ChaosError> {
        let limit = deadline.saturating_duration_since(Instant::now());
        let cmdline = format!("seed={seed} lab");
        let b = runner::protocol_boot(kvm, exitlab_guest::CHAOS, &cmdline, limit).map_err(
            |source| ChaosError::Lab {
                boot: self.boots,
                source,
            },
        )?;
        self.boots += 1;
        self.exits = self.exits.plus(&b.exits);
        let boot = Boot {
            number: self.boots,
            seed,
            lab: true,
            ended: b.protocol_error.clone().unwrap_or_else(|| b.ended.clone()),
            guest_ops: 0,
            guest_faults: 0,
            doorbells: b.doorbells,
            exits: b.exits.total(),
        };
        self.lab.add(b);
        Ok(boot)
    }

    /// One boot on the PC platform, until it ends or `deadline`.
    fn pc_boot(
        &mut self,
        pc: &PcPlatform<'_>,
        seed: u64,
        deadline: Instant,
    ) -> Result<Boot, ChaosError> {
        let machine_cfg = MachineConfig {
            kernel: exitlab_guest::CHAOS.to_vec(),
            kernel_path: "chaos".into(),
            cmdline: format!("seed={seed}"),
            initrd: None,
            cpus: pc.cpus,
            ram_bytes: pc.mem_mib << 20,
            timeout: Some(deadline.saturating_duration_since(Instant::now())),
            serial: SerialOut::Writer(Box::new(pc.serial.clone())),
            serial_input: false,
            prefer_pvh: true,
            cancel: Some(pc.cancel.clone()),
            platform: Default::default(),
        };
        let report =
            machine::run(pc.kvm.clone(), machine_cfg).map_err(|source| ChaosError::Machine {
                boot: self.boots,
                source,
            })?;
        self.boots += 1;
        self.exits = self.exits.plus(&report.exits);
        self.kvm_exits = self.kvm_exits.zip(report.kvm_exits).map(|(x, y)| x + y);
        let kind = end_kind(&report.end);
        *self.ends.entry(kind.clone()).or_default() += 1;
        let r = exitlab_devices::lock(&pc.serial.state).report;
        self.guest_ops += r.ops;
        self.guest_faults += r.faults;
        if r.faults > 0 {
            *self.vectors.entry(r.last_vector).or_default() += 1;
        }
        if self.boots == 1 {
            self.rss_after_first_kib = rss_kib().0;
        }
        Ok(Boot {
            number: self.boots,
            seed,
            lab: false,
            ended: kind,
            guest_ops: r.ops,
            guest_faults: r.faults,
            doorbells: 0,
            exits: report.exits.total(),
        })
    }
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

    #[test]
    fn the_account_counts_triple_faults_and_kvm_failures_by_end() {
        let mut a = ChaosAccount::default();
        for end in [
            RunEnd::TripleFault {
                vcpu: 0,
                registers: String::new(),
            },
            RunEnd::Reset,
            RunEnd::Failure {
                vcpu: 1,
                what: "KVM_EXIT_INTERNAL_ERROR; suberror 1".into(),
                registers: String::new(),
                emulation_failure: None,
            },
            RunEnd::Failure {
                vcpu: 0,
                what: "KVM_EXIT_FAIL_ENTRY".into(),
                registers: String::new(),
                emulation_failure: None,
            },
        ] {
            *a.ends.entry(end_kind(&end)).or_default() += 1;
        }
        assert_eq!(a.triple_faults(), 1);
        assert_eq!(a.kvm_failures(), 2);
        assert!(a
            .ends
            .contains_key("KVM could not go on: KVM_EXIT_INTERNAL_ERROR"));
    }
}

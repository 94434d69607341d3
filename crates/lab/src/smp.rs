//! Interrupt experiments on several vCPUs: the knobs of a run (APIC mode, vCPU count,
//! idle behaviour, disabled exits, halt polling, PV send-IPI, irqchip, pinning), what
//! they set in the VM's configuration and in the control page the lab kernel reads, the
//! tests they rule out, and what the per-vCPU page says when a run fails. The APs are
//! vCPUs of the run's machine: [`crate::runner`] adds them to its
//! [`exitlab_vmm::builder::MachineBuilder`], and stops and accounts them after the test.

use std::mem::offset_of;

use exitlab_abi::{self as abi, host};
use exitlab_vmm::knobs::{self, VmKnobs};
use exitlab_vmm::vm::IrqChip;
use exitlab_vmm::vm::VmConfig;
use exitlab_vmm::Kvm;
use vm_memory::{Bytes, GuestMemoryMmap};

use exitlab_results::irq::{ApicMode, Idle, IrqConfig};

use crate::catalogue::{Platform, TestDef, Waits};

/// Most host CPUs `--pin` can name for the APs.
pub const MAX_AP_PINS: usize = 15;

/// The interrupt knobs of a run. `Default` is the lab's plain setup: xAPIC, 2 vCPUs for
/// the tests that need them (1 otherwise), idle loop polling, nothing disabled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IrqKnobs {
    /// APIC mode of the tests that do not fix their own.
    pub apic: ApicMode,
    /// vCPUs of each VM; 0 = as the test needs (2 for the IPI tests, else 1).
    pub cpus: u32,
    /// What the APs do while they wait.
    pub idle: Idle,
    /// KVM_CAP_X86_DISABLE_EXITS bits.
    pub disable_exits: u32,
    /// Per-VM halt polling window (ns).
    pub halt_poll_ns: Option<u32>,
    /// PV send-IPI feature bit in the guest CPUID (None: as KVM offers).
    pub pv_ipi: Option<bool>,
    /// Where the I/O APIC and PIC are emulated: in the kernel, or in exitlab (split).
    pub irqchip: IrqChip,
    /// Host CPUs of APs 1, 2, ... (vCPU 0's is `RunParams::pin`); `ap_pins_len` used.
    pub ap_pins: [u16; MAX_AP_PINS],
    /// Entries of `ap_pins` in use.
    pub ap_pins_len: u8,
    /// Fault injection for tests: the AP with this vCPU index (> 0) is never created, so
    /// the guest's SIPI to it goes nowhere; 0 = every AP is created.
    pub withhold_ap: u32,
}

impl IrqKnobs {
    /// Sets the APs' host CPUs.
    pub fn set_ap_pins(&mut self, cpus: &[usize]) -> Result<(), String> {
        if cpus.len() > MAX_AP_PINS {
            return Err(format!("at most {} APs can be pinned", MAX_AP_PINS));
        }
        for (i, &c) in cpus.iter().enumerate() {
            self.ap_pins[i] =
                u16::try_from(c).map_err(|_| format!("host CPU {c} is out of range"))?;
        }
        self.ap_pins_len = cpus.len() as u8;
        Ok(())
    }

    /// Host CPU of AP `i` (1-based vCPU index), if pinned.
    pub fn ap_pin(&self, vcpu: u32) -> Option<usize> {
        let i = vcpu.checked_sub(1)? as usize;
        (i < usize::from(self.ap_pins_len)).then(|| usize::from(self.ap_pins[i]))
    }

    /// The VM knobs for the VMM.
    pub fn vm_knobs(&self) -> VmKnobs {
        VmKnobs {
            halt_poll_ns: self.halt_poll_ns,
            pv_send_ipi: self.pv_ipi,
        }
    }

    /// Checks the host offers every knob asked for.
    pub fn probe(&self, kvm: &Kvm) -> Result<(), String> {
        exitlab_vmm::irqchip::probe_host(self.irqchip, kvm)?;
        self.probe_vm_knobs(kvm)
    }

    /// [`IrqKnobs::probe`] with KVM_CHECK_EXTENSION's answers for the irqchip taken from
    /// `check` (tests stand in a host that lacks a capability).
    pub fn probe_with(&self, kvm: &Kvm, check: &dyn Fn(u32) -> i32) -> Result<(), String> {
        exitlab_vmm::irqchip::probe(self.irqchip, check)?;
        self.probe_vm_knobs(kvm)
    }

    /// Checks the host offers the disabled exits, VM knobs and idle mode asked for.
    fn probe_vm_knobs(&self, kvm: &Kvm) -> Result<(), String> {
        knobs::probe(kvm, self.disable_exits, &self.vm_knobs())?;
        if self.idle == Idle::Mwait
            && self.disable_exits & knobs::DISABLE_MWAIT == 0
            && !knobs::cpuid_offers_mwait(kvm)
        {
            return Err("--idle mwait: the guest CPUID does not offer MONITOR/MWAIT (KVM offers it with KVM_X86_DISABLE_EXITS_MWAIT: add --disable-exits mwait where the host has it)".into());
        }
        Ok(())
    }

    /// vCPUs a VM for `def` gets.
    pub fn cpus_for(&self, def: &TestDef) -> u32 {
        if self.cpus == 0 {
            def.min_cpus.max(1)
        } else {
            self.cpus
        }
    }

    /// The APIC mode `def` runs in.
    pub fn apic_for(&self, def: &TestDef) -> ApicMode {
        def.apic.unwrap_or(self.apic)
    }

    /// Sets up `c` for `def` with these knobs. A test that runs without an irqchip
    /// keeps none; the others get the irqchip asked for (and no PIT when it is split:
    /// KVM's PIT needs the full in-kernel irqchip).
    pub fn configure(&self, def: &TestDef, c: &mut VmConfig) {
        if c.irqchip == IrqChip::Kernel && self.irqchip == IrqChip::Split {
            c.irqchip = IrqChip::Split;
            c.pit = false;
        }
        c.cpus = self.cpus_for(def);
        c.disable_exits = self.disable_exits;
        c.knobs = self.vm_knobs();
    }

    /// Sets the control page's interrupt fields for `def`: APIC mode, vCPUs, idle.
    pub fn fill_control(&self, def: &TestDef, c: &mut abi::Control) {
        c.apic_mode = apic_abi(self.apic_for(def));
        c.cpus = u64::from(self.cpus_for(def));
        c.idle = idle_abi(self.idle);
    }

    /// Whether a vCPU of `def`'s measured loop blocks in HLT in KVM and is woken there
    /// (what halt polling changes): a target AP waiting in HLT, by the test's own
    /// choice ([`Waits::HaltedTarget`]) or as `--idle hlt` makes every IPI target wait,
    /// with an in-kernel irqchip and HLT exits not disabled.
    pub fn wakes_from_hlt(&self, def: &TestDef) -> bool {
        let target_halts =
            def.waits == Waits::HaltedTarget || (def.min_cpus > 1 && self.idle == Idle::Hlt);
        target_halts
            && def.platform != Platform::NoIrqchip
            && self.disable_exits & knobs::DISABLE_HLT == 0
    }

    /// Why `def` cannot run with these knobs, if it cannot.
    pub fn skip_reason(&self, def: &TestDef) -> Option<String> {
        let n = self.cpus_for(def);
        if n < def.min_cpus {
            return Some(format!(
                "needs at least {} vCPUs (--cpus {n})",
                def.min_cpus
            ));
        }
        if u64::from(n) > abi::MAX_CPUS {
            return Some(format!(
                "the lab kernel runs at most {} vCPUs",
                abi::MAX_CPUS
            ));
        }
        if self.irqchip == IrqChip::Split && def.kernel_pic {
            return Some(
                "--irqchip split: the ELCR (port 0x4d0) is exitlab's userspace PIC, not the kernel's"
                    .into(),
            );
        }
        if def.pv_ipi && self.pv_ipi == Some(false) {
            return Some("--pv-ipi off hides KVM_FEATURE_PV_SEND_IPI from the guest".into());
        }
        if def.platform == Platform::NoIrqchip && self.apic_for(def) == ApicMode::X2apic {
            return Some(
                "--apic x2apic: the test runs with no in-kernel irqchip, so there is no local APIC to put in x2APIC mode"
                    .into(),
            );
        }
        None
    }
}

impl IrqKnobs {
    /// The configuration record, with vCPU 0's pin.
    pub fn record(&self, pin: Option<usize>) -> IrqConfig {
        let mut pins = vec![pin.map(|p| p as u32)];
        pins.extend((0..self.ap_pins_len).map(|i| Some(u32::from(self.ap_pins[usize::from(i)]))));
        IrqConfig {
            apic: self.apic,
            cpus: self.cpus,
            idle: self.idle,
            disable_exits: knobs::disable_exits_names(self.disable_exits),
            halt_poll_ns: self.halt_poll_ns,
            pv_ipi: self.pv_ipi,
            irqchip: self.irqchip.name().into(),
            pins,
        }
    }
}

/// The guest ABI's value of an APIC mode.
fn apic_abi(mode: ApicMode) -> u64 {
    match mode {
        ApicMode::Xapic => abi::APIC_XAPIC,
        ApicMode::X2apic => abi::APIC_X2APIC,
    }
}

/// The guest ABI's value of an idle mode.
fn idle_abi(idle: Idle) -> u64 {
    match idle {
        Idle::Poll => abi::IDLE_POLL,
        Idle::Hlt => abi::IDLE_HLT,
        Idle::Mwait => abi::IDLE_MWAIT,
    }
}

/// APIC ids (below `cpus`) whose vCPU never reported online.
pub fn missing_cpus(mem: &GuestMemoryMmap, cpus: u32) -> Vec<u32> {
    let online = host::read_control_field(mem, offset_of!(abi::Control, cpus_online)).unwrap_or(0);
    (0..cpus.min(64))
        .filter(|i| online & (1 << i) == 0)
        .collect()
}

/// What each vCPU's record on the per-vCPU page says, for failure reports.
pub fn percpu_summary(mem: &GuestMemoryMmap, cpus: u32) -> String {
    let parts: Vec<String> = (0..cpus.min(64))
        .map(|i| match mem.read_obj::<abi::PerCpu>(host::percpu_gpa(i)) {
            Ok(p) => format!(
                "vCPU {i}: online {} apic id {} irqs {} acks {} wakes {}",
                p.online, p.apic_id, p.irqs, p.acks, p.wakes
            ),
            Err(_) => format!("vCPU {i}: unreadable"),
        })
        .collect();
    parts.join("; ")
}

/// Host CPUs shared by several vCPUs of a run (`pin` is vCPU 0's), for a warning.
pub fn shared_host_cpus(pin: Option<usize>, knobs: &IrqKnobs, cpus: u32) -> Vec<usize> {
    let mut seen = Vec::new();
    let mut shared = Vec::new();
    let all = std::iter::once(pin).chain((1..cpus).map(|i| knobs.ap_pin(i)));
    for c in all.flatten() {
        if seen.contains(&c) {
            if !shared.contains(&c) {
                shared.push(c);
            }
        } else {
            seen.push(c);
        }
    }
    shared
}

/// How many host CPUs were idle over an interval ([`idle_cpus`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleCpus {
    /// CPUs idle for at least [`IDLE_SHARE`] of the interval.
    pub idle: usize,
    /// CPUs /proc/stat lists in both readings.
    pub cpus: usize,
}

/// The share of an interval a host CPU must have been idle (idle or waiting for I/O) to
/// count as idle.
pub const IDLE_SHARE: f64 = 0.75;

/// Each CPU's (name, idle jiffies, all jiffies) from /proc/stat's `cpuN` lines: idle is
/// `idle` + `iowait`, all is `user` to `steal` (`guest` time is in `user` already).
fn cpu_times(stat: &str) -> Vec<(&str, u64, u64)> {
    stat.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next()?;
            let n = name.strip_prefix("cpu")?;
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let v: Vec<u64> = f.take(8).map(|x| x.parse().ok()).collect::<Option<_>>()?;
            // Kernels since 2.6.11 give at least user..steal; older lines are not counted.
            (v.len() == 8).then(|| (name, v[3] + v[4], v.iter().sum()))
        })
        .collect()
}

/// The host CPUs idle between two readings of /proc/stat (`before`, `after`): those idle
/// for at least [`IDLE_SHARE`] of the jiffies that passed on them. `None` when no CPU is
/// in both, or no time passed on any.
pub fn idle_cpus(before: &str, after: &str) -> Option<IdleCpus> {
    let before = cpu_times(before);
    let mut idle = 0;
    let mut cpus = 0;
    let mut passed = false;
    for (name, i1, t1) in cpu_times(after) {
        let Some(&(_, i0, t0)) = before.iter().find(|c| c.0 == name) else {
            continue;
        };
        cpus += 1;
        let (di, dt) = (i1.saturating_sub(i0), t1.saturating_sub(t0));
        passed |= dt > 0;
        if dt > 0 && di as f64 >= IDLE_SHARE * dt as f64 {
            idle += 1;
        }
    }
    (cpus > 0 && passed).then_some(IdleCpus { idle, cpus })
}

/// The host CPUs idle now: /proc/stat read twice, `gap` apart.
pub fn host_idle_cpus(gap: std::time::Duration) -> Option<IdleCpus> {
    let before = std::fs::read_to_string("/proc/stat").ok()?;
    std::thread::sleep(gap);
    let after = std::fs::read_to_string("/proc/stat").ok()?;
    idle_cpus(&before, &after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_are_set_by_name() {
        let mut k = IrqKnobs::default();
        k.set("apic", "x2apic").unwrap();
        k.set("cpus", "4").unwrap();
        k.set("idle", "hlt").unwrap();
        k.set("disable-exits", "hlt,pause").unwrap();
        k.set("halt-poll-ns", "0").unwrap();
        k.set("pv-ipi", "off").unwrap();
        k.set("irqchip", "split").unwrap();
        assert_eq!(k.irqchip, IrqChip::Split);
        assert_eq!(k.get("irqchip"), "split");
        assert_eq!(k.apic, ApicMode::X2apic);
        assert_eq!(k.cpus, 4);
        assert_eq!(k.idle, Idle::Hlt);
        assert_eq!(k.disable_exits, knobs::DISABLE_HLT | knobs::DISABLE_PAUSE);
        assert_eq!(k.halt_poll_ns, Some(0));
        assert_eq!(k.pv_ipi, Some(false));
        let d = k.record(None).describe();
        assert!(
            d.contains("apic x2apic")
                && d.contains("irqchip split")
                && d.contains("disable-exits hlt,pause"),
            "{d}"
        );
        assert!(k
            .set("irqchip", "user")
            .unwrap_err()
            .contains("use kernel or split"));
        k.set("disable-exits", "none").unwrap();
        assert_eq!(k.disable_exits, 0);
        assert!(k.set("cpus", "0").unwrap_err().contains("out of range"));
        assert!(k
            .set("apic", "x3apic")
            .unwrap_err()
            .contains("xapic or x2apic"));
        assert!(k.set("volume", "11").unwrap_err().contains("unknown knob"));
        for n in crate::knobs::IRQ_KNOBS {
            assert!(k.set(n, "???").is_err(), "{n}");
        }
    }

    #[test]
    fn a_test_without_an_irqchip_is_skipped_in_x2apic_mode_only() {
        let hlt = crate::catalogue::find("hlt").unwrap();
        let mut k = IrqKnobs::default();
        assert_eq!(k.skip_reason(hlt), None);
        k.set("apic", "x2apic").unwrap();
        let why = k.skip_reason(hlt).expect("hlt cannot run in x2APIC mode");
        assert!(why.contains("no in-kernel irqchip"), "{why}");
        // Tests with an irqchip run in x2APIC mode as asked.
        assert_eq!(
            k.skip_reason(crate::catalogue::find("cpuid").unwrap()),
            None
        );
        assert_eq!(k.skip_reason(crate::catalogue::find("eoi").unwrap()), None);
    }

    /// /proc/stat with the given (user, system, idle, iowait) jiffies per CPU.
    fn stat(cpus: &[(u64, u64, u64, u64)]) -> String {
        let all: u64 = cpus.iter().map(|c| c.0 + c.1 + c.2 + c.3).sum();
        let mut s = format!("cpu  {all} 0 0 0 0 0 0 0 0 0\n");
        for (i, (u, sys, idle, io)) in cpus.iter().enumerate() {
            s += &format!("cpu{i} {u} 0 {sys} {idle} {io} 0 0 0 0 0\n");
        }
        s + "intr 12345 0 0\nctxt 999\nbtime 1700000000\nprocs_running 3\n"
    }

    #[test]
    fn idle_host_cpus_are_counted_from_two_readings_of_proc_stat() {
        let before = stat(&[(100, 50, 1000, 10), (100, 50, 1000, 10)]);
        // 20 jiffies each: CPU 0 busy the whole time, CPU 1 idle 16 (with 1 of I/O wait).
        let after = stat(&[(118, 52, 1000, 10), (102, 52, 1015, 11)]);
        assert_eq!(
            idle_cpus(&before, &after),
            Some(IdleCpus { idle: 1, cpus: 2 })
        );
        // Idle 14 of 20 is under three quarters: busy.
        let after = stat(&[(118, 52, 1000, 10), (103, 53, 1014, 10)]);
        assert_eq!(
            idle_cpus(&before, &after),
            Some(IdleCpus { idle: 0, cpus: 2 })
        );
        // Idle 15 of 20 is three quarters: idle.
        let after = stat(&[(100, 50, 1020, 10), (103, 52, 1015, 10)]);
        assert_eq!(
            idle_cpus(&before, &after),
            Some(IdleCpus { idle: 2, cpus: 2 })
        );
        // A CPU in one reading only is not counted; no time passed, or nothing to read:
        // no answer.
        let three = stat(&[(100, 50, 1020, 10), (118, 52, 1000, 10), (0, 0, 20, 0)]);
        assert_eq!(
            idle_cpus(&before, &three),
            Some(IdleCpus { idle: 1, cpus: 2 })
        );
        assert_eq!(idle_cpus(&before, &before), None);
        assert_eq!(idle_cpus("", &before), None);
        assert_eq!(idle_cpus("cpu0 1 2\n", "cpu0 3 4\n"), None);
    }

    #[test]
    fn shared_pins_are_found() {
        let mut k = IrqKnobs::default();
        k.set_ap_pins(&[1, 1]).unwrap();
        assert_eq!(shared_host_cpus(Some(0), &k, 3), vec![1]);
        assert_eq!(shared_host_cpus(Some(1), &k, 2), vec![1]);
        k.set_ap_pins(&[1]).unwrap();
        assert!(shared_host_cpus(Some(0), &k, 2).is_empty());
        assert_eq!(k.ap_pin(1), Some(1));
        assert_eq!(k.ap_pin(2), None);
        assert_eq!(k.ap_pin(0), None);
    }

    #[test]
    fn results_written_before_the_irqchip_knob_read_as_the_default_record() {
        // exitlab-results defaults a missing irqchip to "kernel": the name of the VMM's
        // kernel irqchip, which such runs had.
        let old: IrqConfig = serde_json::from_str(
            r#"{"apic":"xapic","cpus":0,"idle":"poll","disable_exits":"none",
                "halt_poll_ns":null,"pv_ipi":null,"pins":[null]}"#,
        )
        .unwrap();
        assert_eq!(old, IrqKnobs::default().record(None));
        assert_eq!(old.irqchip, IrqChip::Kernel.name());
    }
}

//! What results record about a run's interrupts and vCPUs: the APIC and idle modes, the
//! interrupt knobs of the configuration, and each test's exits per vCPU.

/// How the guest drives its local APICs.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ApicMode {
    /// MMIO at 0xFEE00000.
    #[default]
    Xapic,
    /// MSRs 0x800..0x8FF.
    X2apic,
}

impl ApicMode {
    /// "xapic" or "x2apic".
    pub fn name(self) -> &'static str {
        match self {
            ApicMode::Xapic => "xapic",
            ApicMode::X2apic => "x2apic",
        }
    }

    /// Parses "xapic" or "x2apic".
    pub fn parse(s: &str) -> Result<ApicMode, String> {
        match s.trim() {
            "xapic" => Ok(ApicMode::Xapic),
            "x2apic" => Ok(ApicMode::X2apic),
            o => Err(format!("unknown APIC mode '{o}': use xapic or x2apic")),
        }
    }
}

/// What vCPUs waiting for an interrupt do.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Idle {
    /// Spin with `pause` (the seed's idle=poll).
    #[default]
    Poll,
    /// `sti; hlt`.
    Hlt,
    /// `monitor; mwait` (only where the guest CPUID offers MONITOR/MWAIT).
    Mwait,
}

impl Idle {
    /// "poll", "hlt" or "mwait".
    pub fn name(self) -> &'static str {
        match self {
            Idle::Poll => "poll",
            Idle::Hlt => "hlt",
            Idle::Mwait => "mwait",
        }
    }

    /// Parses "poll", "hlt" or "mwait".
    pub fn parse(s: &str) -> Result<Idle, String> {
        match s.trim() {
            "poll" => Ok(Idle::Poll),
            "hlt" => Ok(Idle::Hlt),
            "mwait" => Ok(Idle::Mwait),
            o => Err(format!("unknown idle mode '{o}': use poll, hlt or mwait")),
        }
    }
}

/// The interrupt knobs as the results' configuration records them.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct IrqConfig {
    /// APIC mode of the tests that do not fix their own.
    pub apic: ApicMode,
    /// vCPUs per VM; 0 = as each test needs.
    pub cpus: u32,
    /// What waiting vCPUs do.
    pub idle: Idle,
    /// Exits disabled with KVM_CAP_X86_DISABLE_EXITS ("none" or names).
    pub disable_exits: String,
    /// Per-VM halt polling window in ns, if set.
    pub halt_poll_ns: Option<u32>,
    /// PV send-IPI CPUID bit forced on or off, if set.
    pub pv_ipi: Option<bool>,
    /// Where the I/O APIC and PIC were emulated: "kernel" or "split" (results written
    /// before the knob existed read as "kernel", which they ran with).
    #[serde(default = "kernel_irqchip")]
    pub irqchip: String,
    /// Host CPU of each vCPU that was pinned (vCPU 0 first; `None` = not pinned).
    pub pins: Vec<Option<u32>>,
}

/// The irqchip of results written before the knob existed (they ran with the kernel's).
fn kernel_irqchip() -> String {
    "kernel".into()
}

/// What a test's results record about its vCPUs.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct IrqResult {
    /// APIC mode the guest ran in.
    pub apic: ApicMode,
    /// vCPUs of its VM.
    pub cpus: u32,
    /// Exits per vCPU (vCPU 0 between READY and DONE, the APs over the whole run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_vcpu: Vec<VcpuExits>,
}

impl IrqConfig {
    /// One line for reports.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "interrupts: apic {} (x2apic_* tests: x2apic), irqchip {}, vCPUs {}, idle {}, disable-exits {}",
            self.apic.name(),
            self.irqchip,
            if self.cpus == 0 {
                "as each test needs".to_string()
            } else {
                self.cpus.to_string()
            },
            self.idle.name(),
            self.disable_exits
        );
        if let Some(ns) = self.halt_poll_ns {
            s += &format!(", halt-poll-ns {ns}");
        }
        if let Some(p) = self.pv_ipi {
            s += &format!(", pv-ipi {}", if p { "on" } else { "off" });
        }
        if self.pins.len() > 1 {
            let p: Vec<String> = self
                .pins
                .iter()
                .map(|p| p.map_or("-".into(), |c| c.to_string()))
                .collect();
            s += &format!(", vCPU pins {}", p.join(","));
        }
        s
    }
}

/// Exits of one vCPU over a test (vCPU 0 between READY and DONE, the APs over the whole
/// run): the record the VMM makes of each vCPU.
pub use exitlab_counts::VcpuExits;

/// Adds the per-vCPU exits of another round of the same test.
pub fn merge_vcpu_exits(into: &mut Vec<VcpuExits>, other: &[VcpuExits]) {
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    if into.len() != other.len() {
        into.clear();
        return;
    }
    for (a, b) in into.iter_mut().zip(other) {
        a.user = a.user.plus(&b.user);
        a.kvm_exits = add(a.kvm_exits, b.kvm_exits);
        a.halt_exits = add(a.halt_exits, b.halt_exits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exitlab_counts::ExitCounts;

    fn exits(vcpu: u32, hlt: u64, kvm: Option<u64>) -> VcpuExits {
        VcpuExits {
            vcpu,
            user: ExitCounts {
                hlt,
                ..ExitCounts::default()
            },
            kvm_exits: kvm,
            halt_exits: kvm,
        }
    }

    #[test]
    fn modes_parse_their_names_and_refuse_others() {
        for m in [ApicMode::Xapic, ApicMode::X2apic] {
            assert_eq!(ApicMode::parse(m.name()), Ok(m));
        }
        for i in [Idle::Poll, Idle::Hlt, Idle::Mwait] {
            assert_eq!(Idle::parse(&format!(" {} ", i.name())), Ok(i));
        }
        assert!(ApicMode::parse("x3apic")
            .unwrap_err()
            .contains("xapic or x2apic"));
        assert!(Idle::parse("spin")
            .unwrap_err()
            .contains("poll, hlt or mwait"));
    }

    #[test]
    fn merging_rounds_adds_per_vcpu_and_unknown_stays_unknown() {
        let mut into = vec![exits(0, 1, Some(10)), exits(1, 2, Some(20))];
        merge_vcpu_exits(&mut into, &[exits(0, 3, Some(30)), exits(1, 4, None)]);
        assert_eq!(into[0].user.hlt, 4);
        assert_eq!(into[0].kvm_exits, Some(40));
        assert_eq!(into[1].user.hlt, 6);
        assert_eq!(into[1].kvm_exits, None, "one round without stats");
        // Rounds with different vCPU counts cannot be told apart: nothing is kept.
        merge_vcpu_exits(&mut into, &[exits(0, 1, None)]);
        assert!(into.is_empty());
    }

    #[test]
    fn a_configuration_without_irqchip_reads_as_kernel_and_describes_itself() {
        let json = r#"{"apic":"x2apic","cpus":0,"idle":"hlt","disable_exits":"hlt",
            "halt_poll_ns":0,"pv_ipi":false,"pins":[null,3]}"#;
        let c: IrqConfig = serde_json::from_str(json).unwrap();
        assert_eq!(c.irqchip, "kernel");
        assert_eq!(
            c.describe(),
            "interrupts: apic x2apic (x2apic_* tests: x2apic), irqchip kernel, vCPUs as each \
             test needs, idle hlt, disable-exits hlt, halt-poll-ns 0, pv-ipi off, vCPU pins -,3"
        );
    }
}

//! Knobs: the settings a run can be made with, by name, in one typed registry. The
//! bench's command-line options, `bench --ab KNOB=A,B` and the Linux workload's setup
//! and `--ab` all parse a knob's text here, with the same names, limits and error
//! messages, into a typed [`Setting`]; each applies the settings it can take and
//! refuses the others. Every results file records every knob's value.
//!
//! Adding a knob is one [`Setting`] variant and one entry in [`KNOBS`]: `--ab`, the
//! results' `config.knobs` and `compare`'s configuration warnings pick it up by name.

use std::collections::BTreeMap;

use exitlab_abi as abi;
use exitlab_results::irq::{ApicMode, Idle};
use exitlab_vmm::knobs::{disable_exits_names, parse_disable_exits};
use exitlab_vmm::vm::IrqChip;

use crate::bench::BenchOptions;
use crate::runner::RunParams;
use crate::smp::IrqKnobs;

/// One knob's value, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// Guest privilege ring of the measured loop: 0 or 3.
    Ring(u8),
    /// Iterations per sample.
    Batch(u64),
    /// Unmeasured iterations before the first sample.
    Warmup(u64),
    /// Host CPU of vCPU 0's thread (`None`: not pinned).
    Pin(Option<usize>),
    /// APIC mode.
    Apic(ApicMode),
    /// vCPUs per VM (0 only as the lab's default: as each test needs).
    Cpus(u32),
    /// What waiting vCPUs do.
    Idle(Idle),
    /// KVM_CAP_X86_DISABLE_EXITS bits.
    DisableExits(u32),
    /// Per-VM halt-polling window in ns (`None`: KVM's default).
    HaltPollNs(Option<u32>),
    /// KVM's PV send-IPI in the guest CPUID (`None`: as KVM offers it).
    PvIpi(Option<bool>),
    /// Where the I/O APIC and PIC are emulated.
    Irqchip(IrqChip),
    /// Known-answer control: host cycles the VMM's calibrated busy-wait adds per userspace
    /// exit (0: off).
    InjectCycles(u64),
    /// Known-answer control: guest cycles of busy-waiting added to every iteration of
    /// the measured loop, not to the paired empty loop (0: off).
    GuestCycles(u64),
}

impl Setting {
    /// The knob's name.
    pub fn name(&self) -> &'static str {
        match self {
            Setting::Ring(_) => "ring",
            Setting::Batch(_) => "batch",
            Setting::Warmup(_) => "warmup",
            Setting::Pin(_) => "pin",
            Setting::Apic(_) => "apic",
            Setting::Cpus(_) => "cpus",
            Setting::Idle(_) => "idle",
            Setting::DisableExits(_) => "disable-exits",
            Setting::HaltPollNs(_) => "halt-poll-ns",
            Setting::PvIpi(_) => "pv-ipi",
            Setting::Irqchip(_) => "irqchip",
            Setting::InjectCycles(_) => "inject-cycles",
            Setting::GuestCycles(_) => "guest-cycles",
        }
    }

    /// The value as the knob's parser takes it (`default` where the setting is left
    /// to KVM; `each test's own` for the batch `bench` runs without `--batch`, which no
    /// parser takes).
    pub fn value(&self) -> String {
        let default = || "default".to_string();
        match *self {
            Setting::Ring(r) => r.to_string(),
            Setting::Batch(crate::runner::BATCH_PER_TEST) => "each test's own".into(),
            Setting::Batch(n)
            | Setting::Warmup(n)
            | Setting::InjectCycles(n)
            | Setting::GuestCycles(n) => n.to_string(),
            Setting::Pin(p) => p.map_or("none".into(), |p| p.to_string()),
            Setting::Apic(a) => a.name().into(),
            Setting::Cpus(n) => n.to_string(),
            Setting::Idle(i) => i.name().into(),
            Setting::DisableExits(bits) => disable_exits_names(bits),
            Setting::HaltPollNs(ns) => ns.map_or_else(default, |n| n.to_string()),
            Setting::PvIpi(p) => p.map_or_else(default, |on| if on { "on" } else { "off" }.into()),
            Setting::Irqchip(c) => c.name().into(),
        }
    }
}

/// One knob: its name, a line of help, and its parser.
pub struct Knob {
    /// Name as `--ab` takes it.
    pub name: &'static str,
    /// What it changes and which values it takes.
    pub help: &'static str,
    /// Parses its text; the error says which values are valid.
    pub parse: fn(&str) -> Result<Setting, String>,
}

impl Knob {
    /// Sets this knob in `opts` from text.
    pub fn set(&self, opts: &mut BenchOptions, value: &str) -> Result<(), String> {
        opts.params.apply((self.parse)(value)?)
    }
}

fn parse_u64(name: &str, v: &str, min: u64, max: u64) -> Result<u64, String> {
    v.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| format!("{name}={v}: expected a whole number from {min} to {max}"))
}

/// Most vCPUs a knob can ask for: what the VMM creates. The lab kernel's own limit
/// ([`abi::MAX_CPUS`]) is checked where a lab run takes the setting.
pub const MAX_CPUS: u32 = exitlab_vmm::machine::MAX_CPUS;

/// Every knob, by name.
pub const KNOBS: &[Knob] = &[
    Knob {
        name: "ring",
        help: "guest privilege ring of the measured loop: 0 or 3",
        parse: |v| match v.trim() {
            "0" => Ok(Setting::Ring(0)),
            "3" => Ok(Setting::Ring(3)),
            _ => Err(format!("ring={v}: expected 0 or 3")),
        },
    },
    Knob {
        name: "batch",
        help: "iterations of the measured instruction per sample: 1 to 1000000",
        parse: |v| parse_u64("batch", v, 1, 1_000_000).map(Setting::Batch),
    },
    Knob {
        name: "warmup",
        help: "unmeasured iterations before the first sample: 0 to 10000000",
        parse: |v| parse_u64("warmup", v, 0, 10_000_000).map(Setting::Warmup),
    },
    Knob {
        name: "pin",
        help: "host CPU the vCPU thread is pinned to, or none",
        parse: |v| {
            if v.trim() == "none" {
                return Ok(Setting::Pin(None));
            }
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            Ok(Setting::Pin(Some(
                parse_u64("pin", v, 0, n as u64 - 1)? as usize,
            )))
        },
    },
    Knob {
        name: "apic",
        help: "APIC mode of the interrupt tests: xapic or x2apic",
        parse: |v| ApicMode::parse(v).map(Setting::Apic),
    },
    Knob {
        name: "cpus",
        help: "vCPUs per VM: 1 to 64 for the lab kernel, 1 to 255 for a workload (default: as each test needs)",
        parse: |v| {
            let n: u32 = v
                .trim()
                .parse()
                .map_err(|_| format!("cpus '{v}' is not a number"))?;
            if n == 0 || n > MAX_CPUS {
                return Err(format!("cpus {n} is out of range 1..={MAX_CPUS}"));
            }
            Ok(Setting::Cpus(n))
        },
    },
    Knob {
        name: "idle",
        help: "what waiting vCPUs do: poll, hlt or mwait",
        parse: |v| Idle::parse(v).map(Setting::Idle),
    },
    Knob {
        name: "disable-exits",
        help: "exits disabled with KVM_CAP_X86_DISABLE_EXITS: none or hlt,mwait,pause,cstate",
        parse: |v| {
            if v.trim() == "none" {
                Ok(Setting::DisableExits(0))
            } else {
                parse_disable_exits(v).map(Setting::DisableExits)
            }
        },
    },
    Knob {
        name: "halt-poll-ns",
        help: "per-VM halt-polling window in ns (KVM_CAP_HALT_POLL)",
        parse: |v| {
            v.trim()
                .parse()
                .map(|n| Setting::HaltPollNs(Some(n)))
                .map_err(|_| format!("halt-poll-ns '{v}' is not a number of ns"))
        },
    },
    Knob {
        name: "pv-ipi",
        help: "KVM PV send-IPI in the guest CPUID: on or off",
        parse: |v| match v.trim() {
            "on" => Ok(Setting::PvIpi(Some(true))),
            "off" => Ok(Setting::PvIpi(Some(false))),
            o => Err(format!("pv-ipi '{o}': use on or off")),
        },
    },
    Knob {
        name: "irqchip",
        help: "where the I/O APIC and PIC are emulated: kernel or split (KVM_CAP_SPLIT_IRQCHIP)",
        parse: |v| IrqChip::parse(v).map(Setting::Irqchip),
    },
    Knob {
        name: "inject-cycles",
        help: "known-answer control: host cycles the VMM's busy-wait adds per userspace exit: 0 (off) to 100000000",
        parse: |v| parse_u64("inject-cycles", v, 0, exitlab_vmm::vcpu::MAX_INJECT_CYCLES).map(Setting::InjectCycles),
    },
    Knob {
        name: "guest-cycles",
        help: "known-answer control: guest TSC cycles of busy-waiting added to every iteration of the measured loop (not the empty loop it is net of): 0 (off) to 100000000",
        parse: |v| {
            parse_u64("guest-cycles", v, 0, abi::MAX_WORK_CYCLES).map(Setting::GuestCycles)
        },
    },
];

/// The knob called `name`.
pub fn find(name: &str) -> Option<&'static Knob> {
    KNOBS.iter().find(|k| k.name == name)
}

/// Parses knob `name`'s text `value`.
pub fn parse(name: &str, value: &str) -> Result<Setting, String> {
    let knob = find(name).ok_or_else(|| {
        let names: Vec<&str> = KNOBS.iter().map(|k| k.name).collect();
        format!(
            "unknown knob '{name}'{}; knobs: {}",
            crate::names::did_you_mean(name, names.iter().copied()),
            names.join(", ")
        )
    })?;
    (knob.parse)(value)
}

/// Every knob's value in `opts`.
pub fn values(opts: &BenchOptions) -> BTreeMap<String, String> {
    opts.params
        .settings()
        .iter()
        .map(|s| (s.name().to_string(), s.value()))
        .collect()
}

impl RunParams {
    /// Takes a setting: the measurement's own, or an interrupt knob's.
    pub fn apply(&mut self, s: Setting) -> Result<(), String> {
        match s {
            Setting::Ring(r) => self.ring = r,
            Setting::Batch(n) => self.batch = n,
            Setting::Warmup(n) => self.warmup = n,
            Setting::Pin(p) => self.pin = p,
            Setting::InjectCycles(n) => self.inject_cycles = n,
            Setting::GuestCycles(n) => self.guest_cycles = n,
            irq => self.irq.apply(irq)?,
        }
        Ok(())
    }

    /// Every knob's setting, in [`KNOBS`]' order.
    pub fn settings(&self) -> Vec<Setting> {
        let mut s = vec![
            Setting::Ring(self.ring),
            Setting::Batch(self.batch),
            Setting::Warmup(self.warmup),
            Setting::Pin(self.pin),
        ];
        s.extend(self.irq.settings());
        s.push(Setting::InjectCycles(self.inject_cycles));
        s.push(Setting::GuestCycles(self.guest_cycles));
        s
    }
}

impl IrqKnobs {
    /// Takes an interrupt knob's setting; the lab kernel runs at most
    /// [`abi::MAX_CPUS`] vCPUs.
    pub fn apply(&mut self, s: Setting) -> Result<(), String> {
        match s {
            Setting::Apic(a) => self.apic = a,
            Setting::Cpus(n) if u64::from(n) > abi::MAX_CPUS => {
                return Err(format!(
                    "cpus {n} is out of range 1..={} (the lab kernel's limit)",
                    abi::MAX_CPUS
                ))
            }
            Setting::Cpus(n) => self.cpus = n,
            Setting::Idle(i) => self.idle = i,
            Setting::DisableExits(bits) => self.disable_exits = bits,
            Setting::HaltPollNs(ns) => self.halt_poll_ns = ns,
            Setting::PvIpi(p) => self.pv_ipi = p,
            Setting::Irqchip(c) => self.irqchip = c,
            other => {
                return Err(format!(
                    "{} is not an interrupt knob; interrupt knobs: {}",
                    other.name(),
                    IRQ_KNOBS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// Sets one interrupt knob by name from its command-line text.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        self.apply(parse(name, value)?)
    }

    /// The value of one knob by name, as `set` takes it (empty for a knob that is not
    /// an interrupt knob).
    pub fn get(&self, name: &str) -> String {
        self.settings()
            .iter()
            .find(|s| s.name() == name)
            .map_or_else(String::new, Setting::value)
    }

    /// Every interrupt knob's setting.
    pub fn settings(&self) -> [Setting; 7] {
        [
            Setting::Apic(self.apic),
            Setting::Cpus(self.cpus),
            Setting::Idle(self.idle),
            Setting::DisableExits(self.disable_exits),
            Setting::HaltPollNs(self.halt_poll_ns),
            Setting::PvIpi(self.pv_ipi),
            Setting::Irqchip(self.irqchip),
        ]
    }
}

/// The interrupt knobs' names (those [`IrqKnobs::set`] takes).
pub const IRQ_KNOBS: &[&str] = &[
    "apic",
    "cpus",
    "idle",
    "disable-exits",
    "halt-poll-ns",
    "pv-ipi",
    "irqchip",
];

/// What an A/B experiment varies.
#[derive(Debug, Clone)]
pub enum AbKnob {
    /// One of exitlab's own knobs ([`KNOBS`]), set in each side's options.
    Run(&'static Knob),
    /// A KVM module parameter (`MODULE.PARAM`), switched on the host between side-runs
    /// ([`crate::host_knob`]); each side's options are the same.
    Module(exitlab_host::ParamSpec),
}

impl std::fmt::Debug for Knob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl AbKnob {
    /// The knob's name as `--ab` took it.
    pub fn name(&self) -> String {
        match self {
            AbKnob::Run(k) => k.name.to_string(),
            AbKnob::Module(p) => p.to_string(),
        }
    }

    /// Sets this knob in `opts` from text (a module parameter is the host's, not the
    /// options').
    pub fn set(&self, opts: &mut BenchOptions, value: &str) -> Result<(), String> {
        match self {
            AbKnob::Run(k) => k.set(opts, value),
            AbKnob::Module(p) => p.check_value(value).map_err(|e| e.to_string()),
        }
    }

    /// The module parameter, for a knob that changes the host.
    pub fn module(&self) -> Option<&exitlab_host::ParamSpec> {
        match self {
            AbKnob::Module(p) => Some(p),
            AbKnob::Run(_) => None,
        }
    }
}

/// An A/B experiment's knob and its two values, parsed from `KNOB=A,B`.
#[derive(Debug, Clone)]
pub struct AbSpec {
    /// The knob.
    pub knob: AbKnob,
    /// Side A's value.
    pub a: String,
    /// Side B's value.
    pub b: String,
}

/// Splits `--ab`'s `KNOB=A,B` into the knob's name and the two values, trimmed, with
/// the messages every `--ab` gives (`example`: a valid spec to show); the caller checks
/// the name and the values against its knobs.
pub fn split_ab<'a>(spec: &'a str, example: &str) -> Result<(&'a str, String, String), String> {
    let (name, values) = spec
        .split_once('=')
        .ok_or_else(|| format!("--ab {spec}: expected KNOB=A,B, e.g. {example}"))?;
    let (a, b) = values
        .split_once(',')
        .ok_or_else(|| format!("--ab {spec}: expected two values, A,B"))?;
    let (a, b) = (a.trim().to_string(), b.trim().to_string());
    if a.is_empty() || b.is_empty() {
        return Err(format!("--ab {spec}: expected two values, A,B"));
    }
    // The same value twice is an A/A run: what the gate does when nothing changed.
    Ok((name.trim(), a, b))
}

/// Parses `KNOB=A,B`, checking that the knob exists and takes both values. A name with
/// a dot is a KVM module parameter (`MODULE.PARAM`): whether the host has it and lets
/// it change is checked when the run opens it ([`exitlab_host::ParamSession`]).
pub fn parse_ab(spec: &str, opts: &BenchOptions) -> Result<AbSpec, String> {
    let names = || KNOBS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ");
    let (name, a, b) = split_ab(spec, "ring=0,3")?;
    let knob = if name.contains('.') {
        AbKnob::Module(exitlab_host::ParamSpec::parse(name).map_err(|e| e.to_string())?)
    } else {
        AbKnob::Run(find(name).ok_or_else(|| {
            format!(
                "--ab {spec}: unknown knob '{name}'{}; knobs: {}, or a KVM module parameter as MODULE.PARAM (e.g. kvm.halt_poll_ns)",
                crate::names::did_you_mean(name, KNOBS.iter().map(|k| k.name)),
                names()
            )
        })?)
    };
    for v in [&a, &b] {
        knob.set(&mut opts.clone(), v)
            .map_err(|e| format!("--ab {spec}: {e}"))?;
    }
    Ok(AbSpec { knob, a, b })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::RunParams;
    use std::time::Duration;

    pub(crate) fn opts() -> BenchOptions {
        BenchOptions {
            tests: Vec::new(),
            params: RunParams {
                ring: 0,
                samples: 10,
                batch: 1,
                warmup: 0,
                timeout: Duration::from_secs(1),
                pin: None,
                bare: false,
                irq: Default::default(),
                inject_cycles: 0,
                guest_cycles: 0,
            },
            raw: false,
            overhead: false,
            floor: None,
            rounds: 1,
            precision: None,
            cancel: None,
            knobs: BTreeMap::new(),
            phases_off: None,
        }
    }

    #[test]
    fn ab_specs_are_parsed_and_checked() {
        let o = opts();
        let s = parse_ab("ring=0,3", &o).unwrap();
        assert_eq!(
            (s.knob.name().as_str(), s.a.as_str(), s.b.as_str()),
            ("ring", "0", "3")
        );
        let mut o2 = o.clone();
        s.knob.set(&mut o2, &s.b).unwrap();
        assert_eq!(o2.params.ring, 3);
        let err = parse_ab("apic-mode=x,y", &o).err().unwrap();
        assert!(
            err.contains("unknown knob 'apic-mode' (did you mean 'apic'?); knobs: ring,"),
            "{err}"
        );
        assert!(parse_ab("ring=0,2", &o)
            .err()
            .unwrap()
            .contains("expected 0 or 3"));
        let s = parse_ab("irqchip=kernel,split", &o).unwrap();
        let mut o3 = o.clone();
        s.knob.set(&mut o3, &s.b).unwrap();
        assert_eq!(o3.params.irq.irqchip, exitlab_vmm::vm::IrqChip::Split);
        assert!(parse_ab("irqchip=kernel,user", &o)
            .err()
            .unwrap()
            .contains("use kernel or split"));
        assert!(parse_ab("ring", &o).err().unwrap().contains("KNOB=A,B"));
        assert!(parse_ab("ring=0", &o).err().unwrap().contains("two values"));
        // The same value twice is an A/A run.
        assert!(parse_ab("batch=5,5", &o).is_ok());
        assert!(parse_ab("batch=5,", &o)
            .err()
            .unwrap()
            .contains("two values"));
        // A module parameter: checked for what the kernel can take; the host decides the
        // rest when the run opens it.
        let m = parse_ab("kvm-amd.npt=0,1", &o).unwrap();
        assert_eq!(m.knob.name(), "kvm_amd.npt");
        assert!(m.knob.module().is_some());
        let mut o4 = o.clone();
        m.knob.set(&mut o4, "0").unwrap();
        assert_eq!(o4.params.ring, o.params.ring);
        assert!(parse_ab("kvm.halt_poll_ns=0,a b", &o).is_err());
        assert!(parse_ab("nosuch=0,1", &o)
            .err()
            .unwrap()
            .contains("MODULE.PARAM"));
        assert!(parse_ab("batch=0,5", &o)
            .err()
            .unwrap()
            .contains("1 to 1000000"));
    }

    #[test]
    fn every_knob_reads_back_what_it_was_set_to_and_names_itself() {
        for (name, v) in [
            ("ring", "3"),
            ("batch", "7"),
            ("warmup", "9"),
            ("pin", "0"),
            ("apic", "x2apic"),
            ("cpus", "4"),
            ("idle", "hlt"),
            ("disable-exits", "hlt,pause"),
            ("halt-poll-ns", "0"),
            ("pv-ipi", "off"),
            ("irqchip", "split"),
            ("inject-cycles", "480"),
            ("guest-cycles", "1300"),
        ] {
            let s = parse(name, v).unwrap();
            assert_eq!((s.name(), s.value().as_str()), (name, v));
            let mut o = opts();
            find(name).unwrap().set(&mut o, v).unwrap();
            assert_eq!(values(&o)[name], v);
        }
        assert_eq!(KNOBS.len(), opts().params.settings().len());
        let irq: Vec<&str> = IrqKnobs::default()
            .settings()
            .iter()
            .map(Setting::name)
            .collect();
        assert_eq!(irq, IRQ_KNOBS);
        assert!(parse("volume", "11")
            .unwrap_err()
            .contains("unknown knob 'volume'"));
        // The knob's limit is the VMM's; the lab kernel's is checked where it applies.
        assert_eq!(parse("cpus", "100"), Ok(Setting::Cpus(100)));
        let e = IrqKnobs::default().set("cpus", "65").unwrap_err();
        assert!(e.contains("out of range 1..=64"), "{e}");
        assert!(parse("cpus", "256")
            .unwrap_err()
            .contains("out of range 1..=255"));
        let e = IrqKnobs::default().apply(Setting::Ring(3)).unwrap_err();
        assert!(e.contains("not an interrupt knob"), "{e}");
    }

    #[test]
    fn guest_cycles_is_a_knob_off_by_default_that_ab_can_vary() {
        let o = opts();
        assert_eq!(values(&o)["guest-cycles"], "0");
        let s = parse_ab("guest-cycles=0,1300", &o).unwrap();
        assert_eq!(s.knob.name(), "guest-cycles");
        let mut b = o.clone();
        s.knob.set(&mut b, &s.b).unwrap();
        assert_eq!((b.params.guest_cycles, b.params.inject_cycles), (1300, 0));
        assert_eq!(
            parse("guest-cycles", "100000000"),
            Ok(Setting::GuestCycles(abi::MAX_WORK_CYCLES))
        );
        for bad in ["100000001", "-1", "many"] {
            let e = parse_ab(&format!("guest-cycles=0,{bad}"), &o)
                .err()
                .unwrap();
            assert!(e.contains("0 to 100000000"), "{e}");
        }
        let e = IrqKnobs::default()
            .apply(Setting::GuestCycles(1))
            .unwrap_err();
        assert!(e.contains("not an interrupt knob"), "{e}");
    }

    #[test]
    fn values_name_every_knob() {
        let v = values(&opts());
        assert_eq!(v["ring"], "0");
        assert_eq!(v["pin"], "none");
        assert_eq!(v["irqchip"], "kernel");
        assert_eq!(v.len(), KNOBS.len());
    }
}

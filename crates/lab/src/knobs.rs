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
use crate::catalogue::{self, Lapic, TestDef, UserExit, Waits};
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

/// One knob: its name, a line of help, its parser, and the tests it can affect.
pub struct Knob {
    /// Name as `--ab` takes it.
    pub name: &'static str,
    /// What it changes and which values it takes.
    pub help: &'static str,
    /// Parses its text; the error says which values are valid.
    pub parse: fn(&str) -> Result<Setting, String>,
    /// Whether it can change the figure of a test (its catalogue row) in a run with the
    /// other settings `params`: a rule over the row's fields, never a list of names.
    pub affects: fn(&TestDef, &RunParams) -> bool,
    /// [`Knob::affects`] in words, for help and messages ("the tests that ...").
    pub reach: &'static str,
}

/// The reach of a knob that changes every test.
const EVERY_TEST: &str = "every test";

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
        affects: |def, _| def.ring3,
        reach: "the tests that can run at ring 3",
    },
    Knob {
        name: "batch",
        help: "iterations of the measured instruction per sample: 1 to 1000000",
        parse: |v| parse_u64("batch", v, 1, 1_000_000).map(Setting::Batch),
        affects: |_, _| true,
        reach: EVERY_TEST,
    },
    Knob {
        name: "warmup",
        help: "unmeasured iterations before the first sample: 0 to 10000000",
        parse: |v| parse_u64("warmup", v, 0, 10_000_000).map(Setting::Warmup),
        affects: |_, _| true,
        reach: EVERY_TEST,
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
        affects: |_, _| true,
        reach: EVERY_TEST,
    },
    Knob {
        name: "apic",
        help: "APIC mode of the interrupt tests: xapic or x2apic",
        parse: |v| ApicMode::parse(v).map(Setting::Apic),
        affects: |def, _| def.lapic != Lapic::No && def.apic.is_none(),
        reach: "the tests whose loop uses the local APIC, in the mode --apic sets",
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
        affects: |def, _| def.min_cpus > 1,
        reach: "the tests that send IPIs to other vCPUs",
    },
    Knob {
        name: "idle",
        help: "what waiting vCPUs do: poll, hlt or mwait",
        parse: |v| Idle::parse(v).map(Setting::Idle),
        affects: |def, _| def.min_cpus > 1 && def.waits != Waits::HaltedTarget,
        reach: "the tests whose IPI targets wait as --idle says",
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
        affects: |def, _| def.waits != Waits::Nothing || def.user_exit == Some(UserExit::Hlt),
        reach: "the tests whose loop runs HLT, MWAIT or PAUSE",
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
        affects: |def, p| p.irq.wakes_from_hlt(def),
        reach: "the tests that wake a vCPU from HLT in KVM (an IPI target in HLT)",
    },
    Knob {
        name: "pv-ipi",
        help: "KVM PV send-IPI in the guest CPUID: on or off",
        parse: |v| match v.trim() {
            "on" => Ok(Setting::PvIpi(Some(true))),
            "off" => Ok(Setting::PvIpi(Some(false))),
            o => Err(format!("pv-ipi '{o}': use on or off")),
        },
        affects: |def, _| def.pv_ipi,
        reach: "the tests that send IPIs by the PV hypercall",
    },
    Knob {
        name: "irqchip",
        help: "where the I/O APIC and PIC are emulated: kernel or split (KVM_CAP_SPLIT_IRQCHIP)",
        parse: |v| IrqChip::parse(v).map(Setting::Irqchip),
        affects: |def, _| def.kernel_pic || def.lapic == Lapic::Interrupts,
        reach: "the tests that use the in-kernel PIC or deliver interrupts",
    },
    Knob {
        name: "inject-cycles",
        help: "known-answer control: host cycles the VMM's busy-wait adds per userspace exit: 0 (off) to 100000000",
        parse: |v| parse_u64("inject-cycles", v, 0, exitlab_vmm::vcpu::MAX_INJECT_CYCLES).map(Setting::InjectCycles),
        affects: |def, _| def.user_exit.is_some(),
        reach: "the userspace-handled tests",
    },
    Knob {
        name: "guest-cycles",
        help: "known-answer control: guest TSC cycles of busy-waiting added to every iteration of the measured loop (not the empty loop it is net of): 0 (off) to 100000000",
        parse: |v| {
            parse_u64("guest-cycles", v, 0, abi::MAX_WORK_CYCLES).map(Setting::GuestCycles)
        },
        affects: |def, p| {
            crate::runner::guest_work_cycles(def, &RunParams { guest_cycles: 1, ..*p }) != 0
        },
        reach: "the kernel-handled tests that are not one-way",
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

    /// Whether this knob can change `def`'s figure in a run with `params` ([`Knob::affects`];
    /// a module parameter: every test, as exitlab cannot know what it changes).
    pub fn affects(&self, def: &TestDef, params: &RunParams) -> bool {
        match self {
            AbKnob::Run(k) => (k.affects)(def, params),
            AbKnob::Module(_) => true,
        }
    }

    /// [`AbKnob::affects`] in words.
    pub fn reach(&self) -> &'static str {
        match self {
            AbKnob::Run(k) => k.reach,
            AbKnob::Module(_) => MODULE_REACH,
        }
    }
}

/// The reach of a KVM module parameter as a knob.
const MODULE_REACH: &str =
    "every test (a KVM module parameter: exitlab cannot know which it changes)";

/// `bench --ab`'s help on the knobs: each with the tests it can affect, knobs of the
/// same reach together.
pub fn ab_knobs_help() -> String {
    let mut groups: Vec<(Vec<&str>, &str)> = Vec::new();
    for k in KNOBS {
        match groups.last_mut() {
            Some((names, reach)) if *reach == k.reach => names.push(k.name),
            _ => groups.push((vec![k.name], k.reach)),
        }
    }
    groups.push((vec!["MODULE.PARAM"], MODULE_REACH));
    let parts: Vec<String> = groups
        .iter()
        .map(|(names, reach)| format!("{}: {reach}", names.join(", ")))
        .collect();
    format!(
        "Knobs, each with the tests it can affect: {}.",
        parts.join("; ")
    )
}

/// The tests an A/B run runs ([`ab_tests`]) and what to say about the choice.
#[derive(Debug, Clone, PartialEq)]
pub struct AbTests {
    /// The tests to run (every suite runs the empty loop as well).
    pub tests: Vec<&'static TestDef>,
    /// Without `--tests`: one line naming the tests chosen, when they are not the default
    /// suite.
    pub chosen: Option<String>,
    /// With `--tests`: a warning naming those the knob cannot affect, which run anyway
    /// (an A/A control).
    pub warning: Option<String>,
}

/// The tests an A/B run of `spec` runs with the other settings `params`. With the tests
/// the user asked for (`asked`), those, with a warning naming any the knob cannot
/// affect. Without, the default suite's tests it can affect; when it can affect none of
/// them, the interrupt tests it can affect; when none of those either, the default
/// suite (an A/A control), saying so. The empty loop is never named: it always runs.
pub fn ab_tests(spec: &AbSpec, asked: Option<&[&'static TestDef]>, params: &RunParams) -> AbTests {
    let knob = spec.knob.name();
    let reach = spec.knob.reach();
    let can = |d: &&'static TestDef| d.baseline || spec.knob.affects(d, params);
    let named = |tests: &[&'static TestDef]| -> Vec<&'static str> {
        tests
            .iter()
            .filter(|d| !d.baseline)
            .map(|d| d.name)
            .collect()
    };
    let plural = |n: usize, one: &'static str, many: &'static str| if n == 1 { one } else { many };
    if let Some(asked) = asked {
        let cannot: Vec<&'static TestDef> = asked.iter().copied().filter(|d| !can(d)).collect();
        let cannot = named(&cannot);
        let warning = (!cannot.is_empty()).then(|| {
            format!(
                "--ab {knob} cannot affect {} ({knob} affects {reach}): {} anyway, as an A/A control",
                cannot.join(", "),
                plural(cannot.len(), "it runs", "they run")
            )
        });
        return AbTests {
            tests: asked.to_vec(),
            chosen: None,
            warning,
        };
    }
    let default = catalogue::default_suite();
    let in_default: Vec<&'static TestDef> = default.iter().copied().filter(can).collect();
    if in_default.len() == default.len() {
        return AbTests {
            tests: default,
            chosen: None,
            warning: None,
        };
    }
    let (tests, whence) = if !named(&in_default).is_empty() {
        (in_default, "")
    } else {
        let irq: Vec<&'static TestDef> = catalogue::IRQ_TESTS.iter().filter(can).collect();
        if irq.is_empty() {
            return AbTests {
                tests: default,
                chosen: Some(format!(
                    "--ab {knob}: it can affect no test with these options ({knob} affects {reach}): runs the default suite, as an A/A control"
                )),
                warning: None,
            };
        }
        (irq, " (none of the default suite's)")
    };
    let names = named(&tests);
    let chosen = format!(
        "--ab {knob}: runs the {} {} it can affect{whence}: {} (--tests to choose)",
        names.len(),
        plural(names.len(), "test", "tests"),
        names.join(", ")
    );
    AbTests {
        tests,
        chosen: Some(chosen),
        warning: None,
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

    /// The tests of `tests` knob `name` can affect with the settings of `o`.
    fn affected(name: &str, o: &BenchOptions, tests: &[TestDef]) -> Vec<&'static str> {
        let k = find(name).unwrap();
        tests
            .iter()
            .filter(|d| (k.affects)(d, &o.params))
            .map(|d| d.name)
            .collect()
    }

    #[test]
    fn each_knob_affects_the_tests_its_rule_gives() {
        let o = opts();
        let default = catalogue::TESTS;
        let irq = catalogue::IRQ_TESTS;
        for every in ["batch", "warmup", "pin"] {
            assert_eq!(affected(every, &o, default).len(), default.len(), "{every}");
            assert_eq!(affected(every, &o, irq).len(), irq.len(), "{every}");
        }
        let user = [
            "hlt",
            "inl_from_user",
            "outl_to_user",
            "mmio_read_user",
            "mmio_write_user",
            "rdmsr_user",
            "wrmsr_user",
        ];
        assert_eq!(affected("inject-cycles", &o, default), user);
        assert!(affected("inject-cycles", &o, irq).is_empty());
        // The kernel-handled tests and their calibration, the empty loop; not the
        // one-way IPI latencies.
        let guest = affected("guest-cycles", &o, default);
        assert!(guest.iter().all(|n| !user.contains(n)), "{guest:?}");
        assert_eq!(guest.len(), default.len() - user.len(), "{guest:?}");
        let guest_irq = affected("guest-cycles", &o, irq);
        assert!(!guest_irq.contains(&"ipi_one_way") && !guest_irq.contains(&"hlt_wake"));
        assert_eq!(guest_irq.len(), irq.len() - 2);
        assert_eq!(
            affected("ring", &o, default),
            [
                "loop_overhead",
                "cpuid",
                "cpuid_0xd",
                "vmcall",
                "inl_from_kernel",
                "outl_to_kernel",
                "inl_from_user",
                "outl_to_user",
                "mmio_read_user",
                "mmio_write_user",
                "mmio_write_ioeventfd"
            ]
        );
        assert!(affected("ring", &o, irq).is_empty());
        // The local APIC: the TPR through CR8 and the interrupt tests, but not those
        // that fix x2APIC mode nor the bring-up, whose loop is the empty one.
        assert_eq!(
            affected("apic", &o, default),
            ["mov_from_cr8", "mov_to_cr8"]
        );
        let apic = affected("apic", &o, irq);
        assert!(apic.iter().all(|n| !n.starts_with("x2apic_")), "{apic:?}");
        assert!(!apic.contains(&"smp_bringup") && apic.contains(&"eoi"));
        assert_eq!(apic.len(), irq.len() - 6 - 1);
        assert_eq!(
            affected("irqchip", &o, default),
            ["inl_from_kernel", "outl_to_kernel"]
        );
        let chip = affected("irqchip", &o, irq);
        assert!(
            !chip.contains(&"eoi") && !chip.contains(&"smp_bringup"),
            "{chip:?}"
        );
        let ipis = [
            "ipi",
            "ipi_halt",
            "ipi_one_way",
            "hlt_wake",
            "broadcast_ipi",
            "broadcast_lock",
            "pv_send_ipi",
        ];
        assert_eq!(affected("cpus", &o, irq), ipis);
        let idle = [
            "ipi",
            "ipi_one_way",
            "broadcast_ipi",
            "broadcast_lock",
            "pv_send_ipi",
        ];
        assert_eq!(affected("idle", &o, irq), idle);
        assert_eq!(affected("pv-ipi", &o, irq), ["pv_send_ipi"]);
        for k in ["cpus", "idle", "pv-ipi", "halt-poll-ns"] {
            assert!(affected(k, &o, default).is_empty(), "{k}");
        }
        // HLT, MWAIT or PAUSE in the loop: the HLT test, and every interrupt test that
        // waits or halts.
        assert_eq!(affected("disable-exits", &o, default), ["hlt"]);
        let dis = affected("disable-exits", &o, irq);
        for n in [
            "self_ipi_sti_nop",
            "self_ipi_tpr_sti_nop",
            "eoi",
            "smp_bringup",
        ] {
            assert!(!dis.contains(&n), "{n} in {dis:?}");
        }
        assert!(dis.contains(&"self_ipi_sti_hlt") && dis.contains(&"tscdeadline"));
        // Halt polling: where a target wakes from HLT in KVM; with --idle hlt every IPI
        // target; none when HLT does not exit.
        assert_eq!(affected("halt-poll-ns", &o, irq), ["ipi_halt", "hlt_wake"]);
        let mut hlt = opts();
        hlt.params.irq.idle = Idle::Hlt;
        assert_eq!(affected("halt-poll-ns", &hlt, irq), ipis);
        hlt.params.irq.disable_exits = exitlab_vmm::knobs::DISABLE_HLT;
        assert!(affected("halt-poll-ns", &hlt, irq).is_empty());
        // A module parameter: every test.
        let m = parse_ab("kvm.halt_poll_ns=0,1", &o).unwrap();
        assert!(default
            .iter()
            .chain(irq)
            .all(|d| m.knob.affects(d, &o.params)));
    }

    fn ab(spec: &str, o: &BenchOptions, asked: Option<&[&str]>) -> AbTests {
        let asked: Option<Vec<&'static TestDef>> =
            asked.map(|a| a.iter().map(|n| catalogue::find(n).unwrap()).collect());
        ab_tests(&parse_ab(spec, o).unwrap(), asked.as_deref(), &o.params)
    }

    fn names(t: &AbTests) -> Vec<&'static str> {
        t.tests.iter().map(|d| d.name).collect()
    }

    #[test]
    fn without_tests_an_ab_run_runs_the_tests_its_knob_can_affect_and_says_so() {
        let o = opts();
        // halt-poll-ns affects no default test: the interrupt tests it can affect.
        let t = ab("halt-poll-ns=0,200000", &o, None);
        assert_eq!(names(&t), ["ipi_halt", "hlt_wake"]);
        assert_eq!(
            t.chosen.as_deref(),
            Some("--ab halt-poll-ns: runs the 2 tests it can affect (none of the default suite's): ipi_halt, hlt_wake (--tests to choose)")
        );
        assert_eq!(t.warning, None);
        // Some default tests: those, and the empty loop (not named).
        let t = ab("inject-cycles=0,500", &o, None);
        assert_eq!(names(&t)[0], "loop_overhead");
        assert_eq!(t.tests.len(), 8);
        assert_eq!(
            t.chosen.as_deref(),
            Some("--ab inject-cycles: runs the 7 tests it can affect: hlt, inl_from_user, outl_to_user, mmio_read_user, mmio_write_user, rdmsr_user, wrmsr_user (--tests to choose)")
        );
        // A knob that affects every test, or a module parameter: the default suite, quietly.
        for spec in ["batch=1,4", "kvm.halt_poll_ns=0,1"] {
            let t = ab(spec, &o, None);
            assert_eq!(t.tests, catalogue::default_suite(), "{spec}");
            assert_eq!((t.chosen, t.warning), (None, None), "{spec}");
        }
        // No test at all: the default suite, as an A/A control, said.
        let mut none = opts();
        none.params.irq.disable_exits = exitlab_vmm::knobs::DISABLE_HLT;
        let t = ab("halt-poll-ns=0,200000", &none, None);
        assert_eq!(t.tests, catalogue::default_suite());
        let said = t.chosen.unwrap();
        assert!(
            said.starts_with("--ab halt-poll-ns: it can affect no test with these options (halt-poll-ns affects the tests that wake a vCPU from HLT")
                && said.ends_with("runs the default suite, as an A/A control"),
            "{said}"
        );
    }

    #[test]
    fn asked_for_tests_a_knob_cannot_affect_run_with_one_warning_naming_them() {
        let o = opts();
        let t = ab(
            "inject-cycles=0,500",
            &o,
            Some(&["loop_overhead", "cpuid", "inl_from_user", "mov_to_cr8"]),
        );
        assert_eq!(
            names(&t),
            ["loop_overhead", "cpuid", "inl_from_user", "mov_to_cr8"]
        );
        assert_eq!(t.chosen, None);
        assert_eq!(
            t.warning.as_deref(),
            Some("--ab inject-cycles cannot affect cpuid, mov_to_cr8 (inject-cycles affects the userspace-handled tests): they run anyway, as an A/A control")
        );
        let t = ab("halt-poll-ns=0,1", &o, Some(&["ipi_halt", "cpuid"]));
        assert!(t
            .warning
            .unwrap()
            .starts_with("--ab halt-poll-ns cannot affect cpuid ("));
        // Every test asked for can be affected: nothing to say.
        let t = ab("ring=0,3", &o, Some(&["cpuid", "inl_from_user"]));
        assert_eq!((t.chosen, t.warning), (None, None));
    }

    #[test]
    fn the_ab_help_gives_every_knob_with_what_it_can_affect() {
        let h = ab_knobs_help();
        for k in KNOBS {
            assert!(h.contains(k.name) && h.contains(k.reach), "{}: {h}", k.name);
        }
        assert!(h.contains("batch, warmup, pin: every test;"), "{h}");
        assert!(
            h.contains("MODULE.PARAM: every test (a KVM module parameter"),
            "{h}"
        );
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

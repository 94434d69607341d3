//! Knobs: the settings a run can be made with, by name, so that `bench --ab KNOB=A,B`
//! can set any of them and every results file records all of them.
//!
//! A knob is a name, a line of help, a way to read its value from [`BenchOptions`] and a
//! way to set it from text. Adding a knob is adding one entry to [`KNOBS`]: `--ab`, the
//! results' `config.knobs` and `compare`'s configuration warnings pick it up by name.

use std::collections::BTreeMap;

use crate::bench::BenchOptions;

/// One setting of a run.
pub struct Knob {
    /// Name as `--ab` takes it.
    pub name: &'static str,
    /// What it changes and which values it takes.
    pub help: &'static str,
    /// Its value in `opts`, as text.
    pub get: fn(&BenchOptions) -> String,
    /// Sets it in `opts` from text; the error says which values are valid.
    pub set: fn(&mut BenchOptions, &str) -> Result<(), String>,
}

fn parse_u64(name: &str, v: &str, min: u64, max: u64) -> Result<u64, String> {
    v.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| format!("{name}={v}: expected a whole number from {min} to {max}"))
}

/// Every knob, by name.
pub const KNOBS: &[Knob] = &[
    Knob {
        name: "ring",
        help: "guest privilege ring of the measured loop: 0 or 3",
        get: |o| o.params.ring.to_string(),
        set: |o, v| {
            o.params.ring = match v.trim() {
                "0" => 0,
                "3" => 3,
                _ => return Err(format!("ring={v}: expected 0 or 3")),
            };
            Ok(())
        },
    },
    Knob {
        name: "batch",
        help: "iterations of the measured instruction per sample: 1 to 1000000",
        get: |o| o.params.batch.to_string(),
        set: |o, v| {
            o.params.batch = parse_u64("batch", v, 1, 1_000_000)?;
            Ok(())
        },
    },
    Knob {
        name: "warmup",
        help: "unmeasured iterations before the first sample: 0 to 10000000",
        get: |o| o.params.warmup.to_string(),
        set: |o, v| {
            o.params.warmup = parse_u64("warmup", v, 0, 10_000_000)?;
            Ok(())
        },
    },
    Knob {
        name: "pin",
        help: "host CPU the vCPU thread is pinned to, or none",
        get: |o| o.params.pin.map_or("none".into(), |p| p.to_string()),
        set: |o, v| {
            if v.trim() == "none" {
                o.params.pin = None;
                return Ok(());
            }
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            o.params.pin = Some(parse_u64("pin", v, 0, n as u64 - 1)? as usize);
            Ok(())
        },
    },
    Knob {
        name: "apic",
        help: "APIC mode of the interrupt tests: xapic or x2apic",
        get: |o| o.params.irq.get("apic"),
        set: |o, v| o.params.irq.set("apic", v),
    },
    Knob {
        name: "cpus",
        help: "vCPUs per VM: 1 to 64 (0: as each test needs)",
        get: |o| o.params.irq.get("cpus"),
        set: |o, v| o.params.irq.set("cpus", v),
    },
    Knob {
        name: "idle",
        help: "what waiting vCPUs do: poll, hlt or mwait",
        get: |o| o.params.irq.get("idle"),
        set: |o, v| o.params.irq.set("idle", v),
    },
    Knob {
        name: "disable-exits",
        help: "exits disabled with KVM_CAP_X86_DISABLE_EXITS: none or hlt,mwait,pause,cstate",
        get: |o| o.params.irq.get("disable-exits"),
        set: |o, v| o.params.irq.set("disable-exits", v),
    },
    Knob {
        name: "halt-poll-ns",
        help: "per-VM halt-polling window in ns (KVM_CAP_HALT_POLL)",
        get: |o| o.params.irq.get("halt-poll-ns"),
        set: |o, v| o.params.irq.set("halt-poll-ns", v),
    },
    Knob {
        name: "pv-ipi",
        help: "KVM PV send-IPI in the guest CPUID: on or off",
        get: |o| o.params.irq.get("pv-ipi"),
        set: |o, v| o.params.irq.set("pv-ipi", v),
    },
    Knob {
        name: "irqchip",
        help: "where the I/O APIC and PIC are emulated: kernel or split (KVM_CAP_SPLIT_IRQCHIP)",
        get: |o| o.params.irq.get("irqchip"),
        set: |o, v| o.params.irq.set("irqchip", v),
    },
    Knob {
        name: "inject-cycles",
        help: "known-answer control: host cycles the VMM busy-waits per userspace exit: 0 (off) to 100000000",
        get: |o| o.params.inject_cycles.to_string(),
        set: |o, v| {
            o.params.inject_cycles = parse_u64("inject-cycles", v, 0, 100_000_000)?;
            Ok(())
        },
    },
];

/// The knob called `name`.
pub fn find(name: &str) -> Option<&'static Knob> {
    KNOBS.iter().find(|k| k.name == name)
}

/// Every knob's value in `opts`.
pub fn values(opts: &BenchOptions) -> BTreeMap<String, String> {
    KNOBS
        .iter()
        .map(|k| (k.name.to_string(), (k.get)(opts)))
        .collect()
}

/// An A/B experiment's knob and its two values, parsed from `KNOB=A,B`.
pub struct AbSpec {
    /// The knob.
    pub knob: &'static Knob,
    /// Side A's value.
    pub a: String,
    /// Side B's value.
    pub b: String,
}

/// Parses `KNOB=A,B`, checking that the knob exists and takes both values.
pub fn parse_ab(spec: &str, opts: &BenchOptions) -> Result<AbSpec, String> {
    let names = || KNOBS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ");
    let (name, values) = spec
        .split_once('=')
        .ok_or_else(|| format!("--ab {spec}: expected KNOB=A,B, e.g. ring=0,3"))?;
    let knob = find(name.trim()).ok_or_else(|| {
        format!(
            "--ab {spec}: unknown knob '{}'; knobs: {}",
            name.trim(),
            names()
        )
    })?;
    let (a, b) = values
        .split_once(',')
        .ok_or_else(|| format!("--ab {spec}: expected two values, A,B"))?;
    let (a, b) = (a.trim().to_string(), b.trim().to_string());
    if a == b {
        return Err(format!("--ab {spec}: the two values are the same"));
    }
    for v in [&a, &b] {
        (knob.set)(&mut opts.clone(), v).map_err(|e| format!("--ab {spec}: {e}"))?;
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
            },
            raw: false,
            overhead: false,
            rounds: 1,
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
            (s.knob.name, s.a.as_str(), s.b.as_str()),
            ("ring", "0", "3")
        );
        let mut o2 = o.clone();
        (s.knob.set)(&mut o2, &s.b).unwrap();
        assert_eq!(o2.params.ring, 3);
        let err = parse_ab("apic-mode=x,y", &o).err().unwrap();
        assert!(
            err.contains("unknown knob 'apic-mode'") && err.contains("ring"),
            "{err}"
        );
        assert!(parse_ab("ring=0,2", &o)
            .err()
            .unwrap()
            .contains("expected 0 or 3"));
        let s = parse_ab("irqchip=kernel,split", &o).unwrap();
        let mut o3 = o.clone();
        (s.knob.set)(&mut o3, &s.b).unwrap();
        assert_eq!(o3.params.irq.irqchip, exitlab_vmm::vm::IrqChip::Split);
        assert!(parse_ab("irqchip=kernel,user", &o)
            .err()
            .unwrap()
            .contains("use kernel or split"));
        assert!(parse_ab("ring", &o).err().unwrap().contains("KNOB=A,B"));
        assert!(parse_ab("ring=0", &o).err().unwrap().contains("two values"));
        assert!(parse_ab("batch=5,5", &o)
            .err()
            .unwrap()
            .contains("the same"));
        assert!(parse_ab("batch=0,5", &o)
            .err()
            .unwrap()
            .contains("1 to 1000000"));
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

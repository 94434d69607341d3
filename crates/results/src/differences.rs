//! What differs between the two sides of a comparison besides what is compared: host
//! facts, KVM module parameters and build IDs, exitlab's revision and configuration, and
//! incomplete runs. Each difference is a warning above the verdicts
//! (a comparison's `warnings`); none changes a verdict.

use std::collections::BTreeSet;

use crate::format::host_str;
use crate::results::Results;

/// Host and configuration differences between the sides (their first runs) and within
/// each side (its first run against each other), each said once; incomplete runs. A run
/// is its name (the file's path) and its results.
pub(crate) fn side_warnings(
    before: &[(&str, &Results)],
    after: &[(&str, &Results)],
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |w: String| {
        if !out.contains(&w) {
            out.push(w);
        }
    };
    if let (Some(b), Some(a)) = (before.first(), after.first()) {
        host_and_config_warnings(b.1, a.1)
            .into_iter()
            .for_each(&mut push);
    }
    for (side, label) in [(before, "before"), (after, "after")] {
        let Some(first) = side.first() else { continue };
        for other in &side[1..] {
            for w in host_and_config_warnings(first.1, other.1) {
                push(format!(
                    "within the {label} runs, {} and {}: {w}",
                    first.0, other.0
                ));
            }
        }
        for r in side {
            if let Some(why) = &r.1.incomplete {
                push(format!("the {label} run {} is incomplete: {why}", r.0));
            }
        }
    }
    out
}

/// Why one test's figures of two runs, or sides of runs, are not judged, if its
/// iterations per sample (`batch`, each run's list) differ: exits back to back cost
/// differently than one at a time, so the figures are not comparable.
pub(crate) fn batches_differ(before: &[u64], after: &[u64]) -> Option<String> {
    let list = |v: &[u64]| crate::results::distinct_batches(v.iter().copied(), " and ");
    let first = before.first().or(after.first());
    before.iter().chain(after).any(|b| Some(b) != first).then(|| {
        format!(
            "taken at different iterations per sample ({} before, {} after): exits back to back cost differently than one at a time; re-run a side at the other's --batch, or measure the batch with bench --ab batch=B,A",
            list(before),
            list(after)
        )
    })
}

/// Host facts compared between two runs: JSON pointer into the host block, and name.
const HOST_FIELDS: [(&str, &str); 5] = [
    ("/cpu/model_name", "CPU model"),
    ("/cpu/microcode", "microcode"),
    ("/kernel/release", "kernel"),
    ("/kernel/version", "kernel build"),
    ("/virtualization/summary", "virtualization"),
];

/// How a warning about a build that differs starts, before the build's name (`kernel`
/// or a module's): `compare --changed` leaves out those the user declared.
pub const BUILD_ID_WARNING: &str = "build ID of ";

/// The GNU build IDs a results file's host survey recorded: `kernel` and each KVM
/// module's.
pub fn build_ids(r: &Results) -> std::collections::BTreeMap<String, String> {
    host_build_ids(&r.host)
}

/// The GNU build IDs of a host survey (a results file's `host`): `kernel` and each KVM
/// module's.
pub fn host_build_ids(host: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    let ids = host.get("build_ids");
    let mut out = std::collections::BTreeMap::new();
    if let Some(k) = ids.and_then(|i| i.get("kernel")).and_then(|k| k.as_str()) {
        out.insert("kernel".to_string(), k.to_string());
    }
    for (m, id) in ids
        .and_then(|i| i.get("modules"))
        .and_then(|m| m.as_object())
        .into_iter()
        .flatten()
    {
        if let Some(id) = id.as_str() {
            out.insert(m.clone(), id.to_string());
        }
    }
    out
}

/// `compare --changed`: what the user declared changed between the sides (`kernel`, a
/// module's name). The warnings about those builds differing are left out; a declared
/// build whose ID is the same on both sides (the first runs') gets one. `warnings` are
/// the comparison's.
pub fn declare_changed(
    warnings: &mut Vec<String>,
    before: &Results,
    after: &Results,
    declared: &[String],
) {
    warnings.retain(|w| {
        !declared
            .iter()
            .any(|d| w.starts_with(&format!("{BUILD_ID_WARNING}{d} differs")))
    });
    let (ib, ia) = (build_ids(before), build_ids(after));
    for d in declared {
        match (ib.get(d), ia.get(d)) {
            (Some(b), Some(a)) if a == b => warnings.push(format!(
                "--changed {d}: but its build ID is the same on both sides ({b}); the runs compared may not be the builds meant"
            )),
            (None, _) | (_, None) => warnings.push(format!(
                "--changed {d}: a side's results record no build ID of {d} (an older exitlab, or {d} built into the kernel), so the change cannot be checked"
            )),
            _ => {}
        }
    }
}

/// A run's `--pin` as the user wrote it.
fn pin_str(pin: Option<u32>) -> String {
    pin.map_or_else(|| "none".to_string(), |cpu| format!("CPU {cpu}"))
}

/// Warnings for host facts, program and configuration that differ between two runs.
/// Keys missing from either file are not compared.
pub(crate) fn host_and_config_warnings(before: &Results, after: &Results) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut differ = |what: &str, b: &str, a: &str| {
        if a != b {
            warnings.push(format!("{what} differs: \"{b}\" before, \"{a}\" after"));
        }
    };
    for (pointer, what) in HOST_FIELDS {
        if let (Some(b), Some(a)) = (
            host_str(&before.host, pointer),
            host_str(&after.host, pointer),
        ) {
            differ(&format!("host {what}"), b, a);
        }
    }
    let module_params = |r: &Results| {
        r.host
            .get("module_params")
            .and_then(|m| m.as_object())
            .map(|m| {
                m.iter()
                    .filter(|(module, _)| module.starts_with("kvm"))
                    .flat_map(|(module, params)| {
                        params.as_object().into_iter().flatten().map(move |(k, v)| {
                            (
                                format!("{module}.{k}"),
                                v.as_str().unwrap_or("").to_string(),
                            )
                        })
                    })
                    .collect::<std::collections::BTreeMap<_, _>>()
            })
    };
    if let (Some(b), Some(a)) = (module_params(before), module_params(after)) {
        let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
        for k in keys {
            let none = String::from("(absent)");
            differ(
                &format!("KVM module parameter {k}"),
                b.get(k).unwrap_or(&none),
                a.get(k).unwrap_or(&none),
            );
        }
    }
    let (ib, ia) = (build_ids(before), build_ids(after));
    for name in ib.keys().filter(|k| ia.contains_key(*k)) {
        differ(&format!("{BUILD_ID_WARNING}{name}"), &ib[name], &ia[name]);
    }
    if let (Some(b), Some(a)) = (&before.provenance, &after.provenance) {
        if let (Some(hb), Some(ha)) = (&b.hostname, &a.hostname) {
            differ("host name", hb, ha);
        }
        differ("exitlab revision", &b.git_revision, &a.git_revision);
    }
    differ("exitlab version", &before.tool.version, &after.tool.version);
    let (b, a) = (&before.config, &after.config);
    let config = [
        ("ring", b.ring.to_string(), a.ring.to_string()),
        ("batch", b.batch_str(), a.batch_str()),
        ("samples", b.samples.to_string(), a.samples.to_string()),
        ("warmup", b.warmup.to_string(), a.warmup.to_string()),
        ("rounds", b.rounds.to_string(), a.rounds.to_string()),
        ("pin", pin_str(b.pin), pin_str(a.pin)),
    ];
    for (name, vb, va) in &config {
        differ(&format!("config {name}"), vb, va);
    }
    // A knob that is also a configuration field was warned about as the field.
    let keys: BTreeSet<&String> = b.knobs.keys().chain(a.knobs.keys()).collect();
    for k in keys
        .into_iter()
        .filter(|k| !config.iter().any(|(name, ..)| name == k))
    {
        let none = String::from("(absent)");
        differ(
            &format!("knob {k}"),
            b.knobs.get(k).unwrap_or(&none),
            a.knobs.get(k).unwrap_or(&none),
        );
    }
    warnings
}

/// A warning for each of two runs that is incomplete.
pub(crate) fn incomplete_warnings(before: &Results, after: &Results) -> Vec<String> {
    [(before, "before"), (after, "after")]
        .into_iter()
        .filter_map(|(r, when)| {
            let why = r.incomplete.as_ref()?;
            Some(format!("the run {when} is incomplete: {why}"))
        })
        .collect()
}

//! Results as OpenMetrics text (`exitlab report --format openmetrics`), so that a fleet
//! of hosts can hand their figures to Prometheus through node_exporter's textfile
//! collector or the Pushgateway. Every figure is the one the text report shows, taken
//! from the same code: a test's figure and its interval from
//! [`crate::stats::units::central`], an A/B run's changes and verdicts from
//! [`compare::compare_ab_run`], two plain files' from [`compare::compare`] (a screen).
//! Values are rounded to 9 significant digits; a figure that cannot be computed has no
//! sample.
//!
//! **The run's identity** (label `run`) does not depend on how the file was named on
//! the command line: `./a.json`, `a.json`, `/abs/path/a.json` and a copy of the file are
//! one run. It is [`run_id`]: the run's start time (UTC, `20260509T072933Z`), then 12
//! hex digits of a 64-bit FNV-1a hash of what makes the run that run: its start time and
//! wall time, the exitlab version and git revision, the host name, the command line, and
//! every test's name, status, samples and per-round medians (both sides of an A/B run).
//! Two distinct runs differ there (a run edited by hand differs in its figures); a file
//! given twice is rendered once, and two different files that would still share an id
//! get `#2`, `#3`... so that no two series coincide.
//!
//! **Families** (labels in brackets; every test series has `run`, `test`, `ring`,
//! `apic` (the run's APIC knob, `default` when unset), `host`, `batch` (iterations per
//! sample: figures from batches of 4 back-to-back exits are not figures of single
//! exits), and `side="KNOB=VALUE"` on each side of an A/B run):
//! - `exitlab_run_info` (1) `[run, version, revision, hostname, kernel, cpu, host_kind,
//!   virtualization, hardware_figures, started, knob_*, build_id_*, ab_*]`: what the
//!   run is. `hardware_figures="no"` on a nested or paravirtual host (`host_kind` from
//!   the host survey's `virtualization.kind`): its exit costs are not hardware figures.
//! - `exitlab_run_start_time_seconds`, `exitlab_run_incomplete` (0 or 1) `[run]`.
//! - `exitlab_exit_cycles`, a summary: raw cycles per iteration of the samples
//!   (`quantile` 0.1, 0.5, 0.9, 0.99; `_count`: the samples); `exitlab_exit_mean_cycles`
//!   and `exitlab_exit_stddev_cycles` beside it (not quantiles).
//! - `exitlab_exit_net_median_cycles`: the test's figure, the net median (the median
//!   over rounds of each round's median net cycles, docs/model.md), with
//!   `exitlab_exit_net_median_ci95_lower_cycles` / `_upper_cycles` (its 95 % interval
//!   over rounds), `exitlab_exit_net_median_seconds` and `exitlab_exit_rounds`. The
//!   empty loop (`loop_overhead`) has no net figure, only the raw summary.
//! - Comparisons `[design, a, b, test]` (A/B run: `run`, `design="pairs"`,
//!   `a`/`b` = `KNOB=VALUE`; two plain files: `design="screen"`, `a`/`b` = their run
//!   ids): `exitlab_change_ratio` (B/A − 1), `exitlab_change_ci95_lower_ratio` /
//!   `_upper_ratio`, `exitlab_change_min_detectable_ratio`, `exitlab_change_p_slower`,
//!   `exitlab_change_units` `[side]`, and `exitlab_change_verdict` `[verdict]`: one
//!   series per verdict (`slower`, `faster`, `equivalent`, `inconclusive`,
//!   `no_verdict`), 1 for the test's and 0 for the others (a state set).
//! - The gate `[design, a, b]`: `exitlab_change_threshold_ratio` (δ),
//!   `exitlab_gate` `[outcome]`, a state set of `fires` (exit 4: a slower test Holm
//!   confirms), `no_verdict` (exit 12: fails closed), `passes` (0) and `cannot_gate`
//!   (a screen: one run a side cannot gate), and `exitlab_gate_tests` `[group]`
//!   (`judged`, `slower`, `unconfirmed`, `no_verdict`).
//!
//! **Why gauges and no `info` or `stateset` type, and why hand-written**: node_exporter's
//! textfile collector, the Pushgateway and `promtool check metrics` read the exposition
//! with the Prometheus text-format 0.0.4 parser, which refuses a whole file with an
//! `info` or `stateset` TYPE ("unknown metric type"). So the info metric and the state
//! sets are gauges that follow those types' conventions (a `_info` gauge of value 1,
//! one 0/1 series per state), which both parsers read alike; percentiles are a
//! `summary`, which both know. The `prometheus-client` crate (0.26) was considered: its
//! registry encodes live counters, gauges, histograms and info metrics, but has no
//! summary type, so the `quantile` series could not be a summary through it; the text
//! here is short, and tests parse it with Prometheus' own parsers.

use std::fmt::Write as _;

use crate::compare::{self, Comparison, Design};
use crate::format::host_str;
use crate::identity::{host_kind, run_id};
use crate::report::plain_number;
use crate::results::{Results, TestResult};
use crate::stats::units::{self, Figure};
use crate::stats::verdict::Verdict;

/// Escapes a label value (backslash, double quote, line feed).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A label name from free text (a knob's or a module's name): `[a-zA-Z0-9_]`, the
/// rest as `_`.
fn label_name(prefix: &str, name: &str) -> String {
    let tail: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{prefix}{tail}")
}

/// The host label: the host name, else the CPU model and kernel.
fn host_label(r: &Results) -> String {
    r.provenance
        .as_ref()
        .and_then(|p| p.hostname.clone())
        .unwrap_or_else(|| {
            format!(
                "{} / {}",
                host_str(&r.host, "/cpu/model_name").unwrap_or("unknown CPU"),
                host_str(&r.host, "/kernel/release").unwrap_or("unknown kernel")
            )
        })
}

/// Labels, in order, as `name="value"` pairs (values unescaped).
type Labels = Vec<(String, String)>;

fn labels_text(labels: &Labels) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect::<Vec<_>>()
        .join(",")
}

fn with(labels: &Labels, name: &str, value: impl Into<String>) -> Labels {
    let mut l = labels.clone();
    l.push((name.to_string(), value.into()));
    l
}

/// A metric family's metadata: name, type, unit (a suffix of the name) and help.
struct Meta {
    name: &'static str,
    kind: &'static str,
    unit: Option<&'static str>,
    help: &'static str,
}

const fn gauge(name: &'static str, unit: Option<&'static str>, help: &'static str) -> Meta {
    Meta {
        name,
        kind: "gauge",
        unit,
        help,
    }
}

const RUN_INFO: Meta = gauge(
    "exitlab_run_info",
    None,
    "What the run is (value 1): exitlab version and revision, host, kernel, host kind and whether its exit costs are hardware figures (not on a nested or paravirtual host), KVM build IDs, knobs, start time",
);
const RUN_START: Meta = gauge(
    "exitlab_run_start_time_seconds",
    Some("seconds"),
    "When the run started, seconds since the Unix epoch",
);
const RUN_INCOMPLETE: Meta = gauge(
    "exitlab_run_incomplete",
    None,
    "1 when the run was interrupted (only the tests it lists completed), else 0",
);
const CYCLES: Meta = Meta {
    name: "exitlab_exit_cycles",
    kind: "summary",
    unit: Some("cycles"),
    help: "Raw cycles per iteration of the test's loop over all samples (the empty loop not subtracted): quantiles, and the samples as _count",
};
const MEAN: Meta = gauge(
    "exitlab_exit_mean_cycles",
    Some("cycles"),
    "Mean raw cycles per iteration over all samples (the empty loop not subtracted)",
);
const STDDEV: Meta = gauge(
    "exitlab_exit_stddev_cycles",
    Some("cycles"),
    "Standard deviation of the raw cycles per iteration over all samples",
);
const NET: Meta = gauge(
    "exitlab_exit_net_median_cycles",
    Some("cycles"),
    "The test's figure, as every report shows it: the median over rounds (fresh VMs) of each round's median net cycles per iteration (sample minus the empty loop timed just before it), docs/model.md",
);
const NET_LOW: Meta = gauge(
    "exitlab_exit_net_median_ci95_lower_cycles",
    Some("cycles"),
    "Lower bound of the 95% interval of the net median over rounds",
);
const NET_HIGH: Meta = gauge(
    "exitlab_exit_net_median_ci95_upper_cycles",
    Some("cycles"),
    "Upper bound of the 95% interval of the net median over rounds",
);
const NET_SECONDS: Meta = gauge(
    "exitlab_exit_net_median_seconds",
    Some("seconds"),
    "The net median converted with the TSC frequency",
);
const ROUNDS: Meta = gauge(
    "exitlab_exit_rounds",
    None,
    "Rounds (fresh VMs) the test's figure and its interval rest on",
);
const CHANGE: Meta = gauge(
    "exitlab_change_ratio",
    Some("ratio"),
    "Change of the test's figure from side a to side b (B/A - 1; 0.05 is 5% slower): for design=pairs the median of the pairs' ratios, for design=screen the ratio of two runs' figures",
);
const CHANGE_LOW: Meta = gauge(
    "exitlab_change_ci95_lower_ratio",
    Some("ratio"),
    "Lower bound of the change's 95% interval",
);
const CHANGE_HIGH: Meta = gauge(
    "exitlab_change_ci95_upper_ratio",
    Some("ratio"),
    "Upper bound of the change's 95% interval",
);
const CHANGE_MDC: Meta = gauge(
    "exitlab_change_min_detectable_ratio",
    Some("ratio"),
    "Smallest slowdown this design calls slower 80% of the time",
);
const CHANGE_P: Meta = gauge(
    "exitlab_change_p_slower",
    None,
    "One-sided p-value of no slowdown (what the gate's Holm correction takes)",
);
const CHANGE_UNITS: Meta = gauge(
    "exitlab_change_units",
    None,
    "Units the change rests on, per side (unit: pairs of rounds, or rounds)",
);
const VERDICT: Meta = gauge(
    "exitlab_change_verdict",
    None,
    "The test's verdict as a state set: 1 for its verdict, 0 for the others (slower/faster beyond the threshold with a 95% interval excluding no change, equivalent within it, inconclusive, no_verdict)",
);
const THRESHOLD: Meta = gauge(
    "exitlab_change_threshold_ratio",
    Some("ratio"),
    "The threshold of the verdicts (delta)",
);
const GATE: Meta = gauge(
    "exitlab_gate",
    None,
    "The gate over the tests as a state set: fires (exit 4, a slower test Holm's correction confirms), no_verdict (exit 12, a test it judges has no verdict), passes (exit 0), cannot_gate (design=screen: one run a side cannot gate)",
);
const GATE_TESTS: Meta = gauge(
    "exitlab_gate_tests",
    None,
    "Tests the gate judged, those it fires on, those slower on their own but not after Holm's correction, and those without a verdict",
);

/// The exposition: families in the order first used, each with its samples.
#[derive(Default)]
struct Exposition {
    families: Vec<(&'static Meta, Vec<String>)>,
}

impl Exposition {
    /// One sample (`suffix` after the family's name: `_count`, `""`), left out when
    /// the value is not a number.
    fn add(&mut self, meta: &'static Meta, suffix: &str, labels: &Labels, value: f64) {
        if !value.is_finite() {
            return;
        }
        let line = format!(
            "{}{suffix}{{{}}} {}",
            meta.name,
            labels_text(labels),
            plain_number(value)
        );
        match self.families.iter_mut().find(|(m, _)| m.name == meta.name) {
            Some((_, lines)) => lines.push(line),
            None => self.families.push((meta, vec![line])),
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for (m, lines) in &self.families {
            let _ = writeln!(out, "# TYPE {} {}", m.name, m.kind);
            if let Some(unit) = m.unit {
                let _ = writeln!(out, "# UNIT {} {unit}", m.name);
            }
            let _ = writeln!(out, "# HELP {} {}.", m.name, m.help);
            for l in lines {
                out.push_str(l);
                out.push('\n');
            }
        }
        out.push_str("# EOF\n");
        out
    }
}

/// The `run` labels of the files, in order: each file's [`run_id`], with `#2`, `#3`...
/// for a different file whose id an earlier one has; `None` for a file given again
/// (the same run, rendered once).
fn run_labels(files: &[(String, Results)]) -> Vec<Option<String>> {
    let mut seen: Vec<(String, &Results)> = Vec::new();
    files
        .iter()
        .map(|(_, r)| {
            let id = run_id(r);
            if seen.iter().any(|(_, s)| *s == r) {
                return None;
            }
            let n = seen
                .iter()
                .filter(|(i, _)| i.split('#').next() == Some(id.as_str()))
                .count();
            let label = match n {
                0 => id,
                n => format!("{id}#{}", n + 1),
            };
            seen.push((label.clone(), r));
            Some(label)
        })
        .collect()
}

/// Renders every file (both sides of an A/B run, its changes and gate; the screen of
/// the first plain file against each other when all are plain) as one exposition.
pub fn render(files: &[(String, Results)]) -> String {
    let mut x = Exposition::default();
    let runs = run_labels(files);
    for ((_, r), run) in files.iter().zip(&runs) {
        let Some(run) = run else { continue };
        run_series(&mut x, run, r);
        let sides: Vec<(Option<String>, Results)> = match (units::ab_sides(r), &r.ab) {
            (Some((a, b)), Some(ab)) => vec![
                (Some(format!("{}={}", ab.knob, ab.a)), a),
                (Some(format!("{}={}", ab.knob, ab.b)), b),
            ],
            _ => vec![(None, r.clone())],
        };
        for (side, res) in &sides {
            test_series(&mut x, run, side.as_deref(), res);
        }
        if let (Some(cmp), Some(ab)) = (
            compare::compare_ab_run(r, crate::stats::model::THRESHOLD_PCT),
            &r.ab,
        ) {
            let labels = vec![
                ("run".to_string(), run.clone()),
                ("design".to_string(), "pairs".to_string()),
                ("a".to_string(), format!("{}={}", ab.knob, ab.a)),
                ("b".to_string(), format!("{}={}", ab.knob, ab.b)),
            ];
            comparison_series(&mut x, &labels, &cmp);
        }
    }
    let plain: Vec<(&Results, &String)> = files
        .iter()
        .zip(&runs)
        .filter_map(|((_, r), run)| Some((r, run.as_ref()?)))
        .collect();
    if plain.len() >= 2 && plain.iter().all(|(r, _)| r.ab.is_none()) {
        let (base, base_run) = plain[0];
        for (other, run) in &plain[1..] {
            let cmp = compare::compare(base, other, crate::stats::model::THRESHOLD_PCT);
            let labels = vec![
                ("design".to_string(), "screen".to_string()),
                ("a".to_string(), base_run.clone()),
                ("b".to_string(), (*run).clone()),
            ];
            comparison_series(&mut x, &labels, &cmp);
        }
    }
    x.text()
}

/// The run's own series: what it is, when it started, whether it is complete.
fn run_series(x: &mut Exposition, run: &str, r: &Results) {
    let base: Labels = vec![("run".into(), run.into())];
    let (kind, hardware) = host_kind(r);
    let mut info = base.clone();
    let p = r.provenance.as_ref();
    for (name, value) in [
        ("version", Some(r.tool.version.as_str())),
        ("revision", p.map(|p| p.git_revision.as_str())),
        ("hostname", p.and_then(|p| p.hostname.as_deref())),
        ("cpu", host_str(&r.host, "/cpu/model_name")),
        ("kernel", host_str(&r.host, "/kernel/release")),
        ("host_kind", Some(kind.as_str())),
        ("hardware_figures", Some(hardware)),
        (
            "virtualization",
            host_str(&r.host, "/virtualization/summary"),
        ),
    ] {
        info.push((name.into(), value.unwrap_or("unknown").into()));
    }
    info.push((
        "started".into(),
        crate::format::fmt_unix_utc(r.started_at_unix),
    ));
    for (object, id) in crate::differences::build_ids(r) {
        info.push((label_name("build_id_", &object), id));
    }
    for (knob, value) in &r.config.knobs {
        info.push((label_name("knob_", knob), value.clone()));
    }
    if let Some(ab) = &r.ab {
        info.push(("ab_knob".into(), ab.knob.clone()));
        info.push(("ab_a".into(), ab.a.clone()));
        info.push(("ab_b".into(), ab.b.clone()));
    }
    // Two free-text names that sanitize alike keep the first.
    let mut names = std::collections::BTreeSet::new();
    info.retain(|(k, _)| names.insert(k.clone()));
    x.add(&RUN_INFO, "", &info, 1.0);
    x.add(&RUN_START, "", &base, r.started_at_unix as f64);
    x.add(
        &RUN_INCOMPLETE,
        "",
        &base,
        f64::from(u8::from(r.incomplete.is_some())),
    );
}

/// One side's (or one plain run's) tests that completed.
fn test_series(x: &mut Exposition, run: &str, side: Option<&str>, r: &Results) {
    let host = host_label(r);
    let apic = r
        .config
        .knobs
        .get("apic")
        .cloned()
        .unwrap_or_else(|| "default".into());
    for t in r.tests.iter().filter(|t| t.status.is_ok()) {
        let mut l: Labels = vec![
            ("run".into(), run.into()),
            ("test".into(), t.name.clone()),
            ("ring".into(), t.ring.to_string()),
            ("apic".into(), apic.clone()),
            ("host".into(), host.clone()),
            ("batch".into(), t.batch.to_string()),
        ];
        if let Some(side) = side {
            l.push(("side".into(), side.into()));
        }
        test_figures(x, &l, t, r.config.tsc_khz);
    }
}

/// A test's raw summary and its figure with its interval.
fn test_figures(x: &mut Exposition, l: &Labels, t: &TestResult, tsc_khz: u64) {
    if let Some(c) = &t.cycles {
        for (q, v) in [
            ("0.1", c.p10),
            ("0.5", c.median),
            ("0.9", c.p90),
            ("0.99", c.p99),
        ] {
            x.add(&CYCLES, "", &with(l, "quantile", q), v);
        }
        x.add(&CYCLES, "_count", l, c.n as f64);
        x.add(&MEAN, "", l, c.mean);
        x.add(&STDDEV, "", l, c.stddev);
    }
    let Some(c) = units::central(t).filter(|c| c.figure == Figure::Net) else {
        return;
    };
    x.add(&NET, "", l, c.value);
    if let Some([lo, hi]) = c.interval() {
        x.add(&NET_LOW, "", l, lo);
        x.add(&NET_HIGH, "", l, hi);
    }
    if let Some((ns, true)) = units::figure_ns(t, tsc_khz) {
        x.add(&NET_SECONDS, "", l, ns * 1e-9);
    }
    x.add(&ROUNDS, "", l, c.rounds.len() as f64);
}

/// The state of the gate over `cmp` as `compare` and `bench --ab` would exit on it
/// (without `--gate` or `--accept-no-verdict`).
fn gate_outcome(cmp: &Comparison, g: &crate::stats::verdict::Gate) -> &'static str {
    if !cmp.design.gates() {
        "cannot_gate"
    } else if g.fires() {
        "fires"
    } else if !g.no_verdict.is_empty() || g.judged.is_empty() {
        "no_verdict"
    } else {
        "passes"
    }
}

/// A comparison's changes, verdicts and gate, under `labels` (which say the design and
/// the sides).
fn comparison_series(x: &mut Exposition, labels: &Labels, cmp: &Comparison) {
    let ratio = |pct: f64| pct / 100.0;
    for t in &cmp.tests {
        let c = &t.change;
        let l = with(labels, "test", t.name.clone());
        x.add(&CHANGE, "", &l, c.pct.map_or(f64::NAN, ratio));
        if let Some([lo, hi]) = c.ci95_pct {
            x.add(&CHANGE_LOW, "", &l, ratio(lo));
            x.add(&CHANGE_HIGH, "", &l, ratio(hi));
        }
        x.add(
            &CHANGE_MDC,
            "",
            &l,
            c.min_detectable_pct.map_or(f64::NAN, ratio),
        );
        x.add(&CHANGE_P, "", &l, c.p_slower.unwrap_or(f64::NAN));
        for (side, n) in ["a", "b"].into_iter().zip(c.units) {
            let l = with(&with(&l, "side", side), "unit", c.unit.name(2));
            x.add(&CHANGE_UNITS, "", &l, n as f64);
        }
        let verdict = match c.verdict {
            Verdict::NoVerdict(_) => "no_verdict",
            ref v => v.as_str(),
        };
        for state in [
            "slower",
            "faster",
            "equivalent",
            "inconclusive",
            "no_verdict",
        ] {
            let v = f64::from(u8::from(state == verdict));
            x.add(&VERDICT, "", &with(&l, "verdict", state), v);
        }
    }
    x.add(&THRESHOLD, "", labels, ratio(cmp.threshold_pct));
    let g = cmp.gate(None);
    let outcome = gate_outcome(cmp, &g);
    for state in ["fires", "no_verdict", "passes", "cannot_gate"] {
        let v = f64::from(u8::from(state == outcome));
        x.add(&GATE, "", &with(labels, "outcome", state), v);
    }
    if cmp.design == Design::Screen {
        return;
    }
    for (group, n) in [
        ("judged", g.judged.len()),
        ("slower", g.slower.len()),
        ("unconfirmed", g.unconfirmed.len()),
        ("no_verdict", g.no_verdict.len()),
    ] {
        x.add(&GATE_TESTS, "", &with(labels, "group", group), n as f64);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::results::tests::sample_results;

    /// The sample lines of `text` (no metadata).
    fn samples(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    /// An A/B run of the sample results whose side B is `slower_by` times side A.
    pub(crate) fn ab_run(slower_by: f64) -> Results {
        let mut r = sample_results();
        let mut b = r.tests.clone();
        for t in &mut b {
            for rf in &mut t.rounds {
                rf.net_median = rf.net_median.map(|n| n * slower_by);
            }
        }
        r.ab = Some(crate::results::AbRun {
            knob: "ring".into(),
            a: "0".into(),
            b: "3".into(),
            b_tests: b,
            order: Vec::new(),
            host: Vec::new(),
        });
        r
    }

    #[test]
    fn exposition_has_labels_units_and_eof() {
        let mut r = sample_results();
        r.config.knobs.insert("apic".into(), "x2apic".into());
        r.provenance.as_mut().unwrap().hostname = Some("rack1 \"a\"".into());
        let id = run_id(&r);
        let text = render(&[("r.json".into(), r)]);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(
            text.contains(
                "# TYPE exitlab_exit_cycles summary\n# UNIT exitlab_exit_cycles cycles\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "exitlab_exit_net_median_cycles{{run=\"{id}\",test=\"cpuid\",ring=\"3\",apic=\"x2apic\",host=\"rack1 \\\"a\\\"\",batch=\"100\"}} 1240"
            )),
            "{text}"
        );
        // Tests that did not complete give no series.
        assert!(!text.contains("test=\"vmcall\""));
        // Every sample line: name{labels} value.
        for line in samples(&text) {
            let (_, value) = line.rsplit_once(' ').unwrap();
            value.parse::<f64>().unwrap();
            assert!(line.starts_with("exitlab_"), "{line}");
        }
    }

    #[test]
    fn percentiles_are_quantiles_of_a_summary_and_the_mean_and_interval_their_own_series() {
        let r = sample_results();
        let text = render(&[("r.json".into(), r.clone())]);
        let cpuid = r.test("cpuid").unwrap();
        let c = cpuid.cycles.as_ref().unwrap();
        for (q, v) in [
            ("0.1", c.p10),
            ("0.5", c.median),
            ("0.9", c.p90),
            ("0.99", c.p99),
        ] {
            let line = samples(&text)
                .into_iter()
                .find(|l| {
                    l.starts_with("exitlab_exit_cycles{")
                        && l.contains("test=\"cpuid\"")
                        && l.contains(&format!("quantile=\"{q}\""))
                })
                .unwrap_or_else(|| panic!("quantile {q}: {text}"));
            assert!(line.ends_with(&format!(" {}", plain_number(v))), "{line}");
        }
        // No statistic is a fake quantile or a `stat` label.
        assert!(!text.contains("stat=\""), "{text}");
        assert!(!text.contains("quantile=\"mean\""), "{text}");
        assert!(text.contains("exitlab_exit_cycles_count{"), "{text}");
        assert!(text.contains("\nexitlab_exit_mean_cycles{"), "{text}");
        // The figure and its interval: the model's, under names that say so.
        let central = units::central(cpuid).unwrap();
        let [lo, hi] = central.interval().unwrap();
        for (name, v) in [
            ("exitlab_exit_net_median_cycles", central.value),
            ("exitlab_exit_net_median_ci95_lower_cycles", lo),
            ("exitlab_exit_net_median_ci95_upper_cycles", hi),
        ] {
            let line = samples(&text)
                .into_iter()
                .find(|l| l.starts_with(&format!("{name}{{")) && l.contains("test=\"cpuid\""))
                .unwrap_or_else(|| panic!("{name}: {text}"));
            assert!(line.ends_with(&format!(" {}", plain_number(v))), "{line}");
        }
    }

    #[test]
    fn the_run_id_is_the_run_s_not_the_path_s() {
        let r = sample_results();
        let id = run_id(&r);
        let text = |name: &str| render(&[(name.to_string(), r.clone())]);
        // The same file however it is named: the same series.
        assert_eq!(text("./a.json"), text("a.json"));
        assert_eq!(text("a.json"), text("/abs/path/a.json"));
        assert!(text("a.json").contains(&format!("run=\"{id}\"")));
        assert!(!text("a.json").contains("a.json"));
        assert!(id.starts_with("20231114T221320Z-"), "{id}");
        // Another run (another start, or other figures) is another id.
        let mut later = r.clone();
        later.started_at_unix += 1;
        assert_ne!(run_id(&later), id);
        let mut edited = r.clone();
        edited.tests[1].rounds[0].median += 1.0;
        assert_ne!(run_id(&edited), id);
    }

    #[test]
    fn several_files_get_distinct_run_labels_and_a_file_given_twice_counts_once() {
        let mut a = sample_results();
        if let Some(c) = a.tests[0].cycles.as_mut() {
            c.mean = 26236.60000000001;
        }
        let mut b = sample_results();
        b.started_at_unix += 60;
        // A different run that shares the identity's fields (edited outside them).
        let mut c = a.clone();
        c.notes.push("edited".into());
        let text = render(&[
            ("a.json".into(), a.clone()),
            ("b.json".into(), b.clone()),
            ("./a.json".into(), a.clone()),
            ("c.json".into(), c),
        ]);
        assert!(
            text.contains(" 26236.6\n") && !text.contains("26236.60000"),
            "{text}"
        );
        let lines = samples(&text);
        let (ia, ib) = (run_id(&a), run_id(&b));
        for run in [
            format!("run=\"{ia}\""),
            format!("run=\"{ib}\""),
            format!("run=\"{ia}#2\""),
        ] {
            assert!(lines.iter().any(|l| l.contains(&run)), "{run}: {text}");
        }
        assert!(!text.contains(&format!("{ia}#3")), "{text}");
        // No two samples share a name and label set.
        let keys: std::collections::HashSet<&str> = lines
            .iter()
            .map(|l| l.rsplit_once(' ').unwrap().0)
            .collect();
        assert_eq!(keys.len(), lines.len(), "{text}");
    }

    #[test]
    fn the_info_metric_says_what_the_run_is_and_whether_its_figures_are_hardware_figures() {
        let mut r = sample_results();
        r.host = serde_json::json!({
            "cpu": { "model_name": "Test CPU" },
            "kernel": { "release": "6.8.0-test" },
            "virtualization": { "kind": "nested_paravirtual", "summary": "nested: not hardware figures" },
            "build_ids": { "kernel": "abc123", "modules": { "kvm": "def456", "kvm_pvm": "0789" } }
        });
        r.config
            .knobs
            .insert("halt-poll-ns".into(), "default".into());
        r.config.knobs.insert("cpus".into(), "0".into());
        r.incomplete = Some("interrupted".into());
        let text = render(&[("r.json".into(), r.clone())]);
        let info = samples(&text)
            .into_iter()
            .find(|l| l.starts_with("exitlab_run_info{"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(info.ends_with("} 1"), "{info}");
        for want in [
            format!("version=\"{}\"", r.tool.version),
            "revision=\"".to_string(),
            "kernel=\"6.8.0-test\"".into(),
            "host_kind=\"nested_paravirtual\"".into(),
            "hardware_figures=\"no\"".into(),
            "build_id_kernel=\"abc123\"".into(),
            "build_id_kvm=\"def456\"".into(),
            "build_id_kvm_pvm=\"0789\"".into(),
            "knob_halt_poll_ns=\"default\"".into(),
            "knob_cpus=\"0\"".into(),
            "started=\"2023-11-14 22:13:20 UTC\"".into(),
        ] {
            assert!(info.contains(&want), "{want}: {info}");
        }
        assert!(
            text.contains("\nexitlab_run_start_time_seconds{run=\""),
            "{text}"
        );
        assert!(text.contains("\"} 1700000000\n"), "{text}");
        assert!(
            text.contains(&format!(
                "exitlab_run_incomplete{{run=\"{}\"}} 1\n",
                run_id(&r)
            )),
            "{text}"
        );
        r.host = serde_json::json!({ "virtualization": { "kind": "bare_metal", "summary": "bare metal" } });
        r.incomplete = None;
        let text = render(&[("r.json".into(), r.clone())]);
        assert!(text.contains("hardware_figures=\"yes\""), "{text}");
        assert!(text.contains("exitlab_run_incomplete{run=\"") && text.contains("\"} 0\n"));
    }

    #[test]
    fn ab_runs_label_both_sides_and_export_changes_verdicts_and_the_gate() {
        let r = ab_run(1.5);
        let id = run_id(&r);
        let text = render(&[("r.json".into(), r.clone())]);
        assert!(text.contains("side=\"ring=0\""), "{text}");
        assert!(text.contains("side=\"ring=3\""), "{text}");
        let cmp = compare::compare_ab_run(&r, crate::stats::model::THRESHOLD_PCT).unwrap();
        let t = cmp.tests.iter().find(|t| t.name == "cpuid").unwrap();
        let c = &t.change;
        let l = format!("run=\"{id}\",design=\"pairs\",a=\"ring=0\",b=\"ring=3\",test=\"cpuid\"");
        for (name, v) in [
            ("exitlab_change_ratio", c.pct.unwrap() / 100.0),
            (
                "exitlab_change_ci95_lower_ratio",
                c.ci95_pct.unwrap()[0] / 100.0,
            ),
            (
                "exitlab_change_ci95_upper_ratio",
                c.ci95_pct.unwrap()[1] / 100.0,
            ),
            (
                "exitlab_change_min_detectable_ratio",
                c.min_detectable_pct.unwrap() / 100.0,
            ),
        ] {
            let want = format!("{name}{{{l}}} {}\n", plain_number(v));
            assert!(text.contains(&want), "{want}: {text}");
        }
        assert_eq!(c.verdict, Verdict::Slower);
        assert!(
            text.contains(&format!(
                "exitlab_change_verdict{{{l},verdict=\"slower\"}} 1\n"
            )),
            "{text}"
        );
        assert!(text.contains(&format!(
            "exitlab_change_verdict{{{l},verdict=\"equivalent\"}} 0\n"
        )));
        let gl = format!("run=\"{id}\",design=\"pairs\",a=\"ring=0\",b=\"ring=3\"");
        assert!(cmp.gate(None).fires());
        assert!(
            text.contains(&format!("exitlab_gate{{{gl},outcome=\"fires\"}} 1\n")),
            "{text}"
        );
        assert!(text.contains(&format!("exitlab_gate{{{gl},outcome=\"passes\"}} 0\n")));
        assert!(text.contains(&format!("exitlab_change_threshold_ratio{{{gl}}} 0.02\n")));
        // Unchanged: the gate passes.
        let text = render(&[("r.json".into(), ab_run(1.0))]);
        assert!(text.contains("outcome=\"passes\"} 1\n"), "{text}");
    }

    #[test]
    fn two_plain_files_are_a_screen_that_cannot_gate() {
        let a = sample_results();
        let mut b = sample_results();
        b.started_at_unix += 60;
        let text = render(&[("a.json".into(), a.clone()), ("b.json".into(), b.clone())]);
        let l = format!(
            "design=\"screen\",a=\"{}\",b=\"{}\"",
            run_id(&a),
            run_id(&b)
        );
        assert!(
            text.contains(&format!("exitlab_gate{{{l},outcome=\"cannot_gate\"}} 1\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("exitlab_gate{{{l},outcome=\"passes\"}} 0\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("exitlab_change_ratio{{{l},test=\"cpuid\"}} 0\n")),
            "{text}"
        );
        // One file: no comparison.
        let text = render(&[("a.json".into(), a)]);
        assert!(
            !text.contains("exitlab_change_") && !text.contains("exitlab_gate"),
            "{text}"
        );
    }
}

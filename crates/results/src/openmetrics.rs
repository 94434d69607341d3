//! Results as OpenMetrics text (`exitlab report --format openmetrics`), so that a fleet
//! of hosts can hand their figures to Prometheus through the pushgateway or
//! node_exporter's textfile collector. Labels: `run` (the results file as named on the
//! command line, with `#2`, `#3`... when one is named again: it keeps the series of
//! several files apart), `test`, `ring`, `apic` (the run's APIC mode knob, `default` when
//! the run did not set one), `host`, `batch` (the test's iterations per sample: a figure
//! per iteration from batches of 4 back-to-back exits is not one from single exits, so
//! their series stay apart), and for A/B runs `side`. Values are rounded to 9 significant
//! digits.

use std::fmt::Write as _;

use crate::format::host_str;
use crate::report::plain_number;
use crate::results::{Results, TestResult};

/// Escapes a label value (backslash, double quote, line feed).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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

struct Series<'a> {
    labels: String,
    test: &'a TestResult,
}

/// Renders every file's tests (both sides of an A/B run) as one OpenMetrics exposition.
pub fn render(files: &[(String, Results)]) -> String {
    let mut series = Vec::new();
    let mut runs: Vec<&str> = Vec::new();
    for (file, r) in files {
        let host = escape(&host_label(r));
        let seen = runs.iter().filter(|f| *f == file).count();
        runs.push(file);
        let run = match seen {
            0 => escape(file),
            n => escape(&format!("{file}#{}", n + 1)),
        };
        let mut sides: Vec<(Option<String>, Results)> = Vec::new();
        match crate::stats::units::ab_sides(r) {
            Some((a, b)) => {
                let ab = r.ab.as_ref().map(|ab| (ab.a.clone(), ab.b.clone()));
                let (va, vb) = ab.unwrap_or_default();
                sides.push((Some(va), a));
                sides.push((Some(vb), b));
            }
            None => sides.push((None, r.clone())),
        }
        for (side, res) in sides {
            let apic = res
                .config
                .knobs
                .get("apic")
                .cloned()
                .unwrap_or_else(|| "default".into());
            for t in res.tests.iter().filter(|t| t.status.is_ok()) {
                let mut labels = format!(
                    "run=\"{run}\",test=\"{}\",ring=\"{}\",apic=\"{}\",host=\"{host}\",batch=\"{}\"",
                    escape(&t.name),
                    t.ring,
                    escape(&apic),
                    t.batch
                );
                if let (Some(v), Some(ab)) = (&side, &r.ab) {
                    let _ = write!(labels, ",side=\"{}={}\"", escape(&ab.knob), escape(v));
                }
                // The sides' tests are owned by `sides`; keep what the lines need.
                series.push((labels, t.clone()));
            }
        }
    }
    let series: Vec<Series<'_>> = series
        .iter()
        .map(|(labels, test)| Series {
            labels: labels.clone(),
            test,
        })
        .collect();
    let mut out = String::new();
    family(
        &mut out,
        "exitlab_exit_cycles",
        "cycles",
        "Cycles per iteration of the test's loop (raw, the empty loop not subtracted), by statistic",
        &series,
        |t| {
            let c = t.cycles.as_ref()?;
            Some(vec![
                ("p10", c.p10),
                ("median", c.median),
                ("p90", c.p90),
                ("p99", c.p99),
                ("mean", c.mean),
            ])
        },
    );
    family(
        &mut out,
        "exitlab_exit_net_cycles",
        "cycles",
        "The test's figure: the median over rounds (fresh VMs) of each round's median of the sample minus the empty loop timed just before it, with its 95% interval over rounds (docs/model.md)",
        &series,
        |t| {
            let mut v = vec![("median", crate::stats::units::net_figure(t)?)];
            if let Some([lo, hi]) = crate::report::net_interval(t) {
                v.extend([("ci95_low", lo), ("ci95_high", hi)]);
            }
            Some(v)
        },
    );
    family(
        &mut out,
        "exitlab_exit_net_seconds",
        "seconds",
        "The net median converted with the TSC frequency",
        &series,
        |t| {
            crate::stats::units::figure_ns(t)
                .filter(|f| f.1)
                .map(|f| vec![("median", f.0 * 1e-9)])
        },
    );
    out.push_str("# EOF\n");
    out
}

/// One metric family: TYPE, UNIT, HELP, then a line per series and statistic.
fn family(
    out: &mut String,
    name: &str,
    unit: &str,
    help: &str,
    series: &[Series<'_>],
    values: impl Fn(&TestResult) -> Option<Vec<(&'static str, f64)>>,
) {
    let _ = writeln!(out, "# TYPE {name} gauge");
    let _ = writeln!(out, "# UNIT {name} {unit}");
    let _ = writeln!(out, "# HELP {name} {help}.");
    for s in series {
        for (stat, v) in values(s.test).unwrap_or_default() {
            if v.is_finite() {
                let _ = writeln!(
                    out,
                    "{name}{{{},stat=\"{stat}\"}} {}",
                    s.labels,
                    plain_number(v)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::sample_results;

    #[test]
    fn exposition_has_labels_units_and_eof() {
        let mut r = sample_results();
        r.config.knobs.insert("apic".into(), "x2apic".into());
        r.provenance.as_mut().unwrap().hostname = Some("rack1 \"a\"".into());
        let text = render(&[("r.json".into(), r)]);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(
            text.contains("# TYPE exitlab_exit_cycles gauge\n# UNIT exitlab_exit_cycles cycles\n")
        );
        assert!(
            text.contains(
                "exitlab_exit_net_cycles{run=\"r.json\",test=\"cpuid\",ring=\"3\",apic=\"x2apic\",host=\"rack1 \\\"a\\\"\",batch=\"100\",stat=\"median\"} 1240"
            ),
            "{text}"
        );
        // Tests that did not complete give no series.
        assert!(!text.contains("test=\"vmcall\""));
        // Every sample line: name{labels} value.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').unwrap();
            value.parse::<f64>().unwrap();
            assert!(line.starts_with("exitlab_exit_"), "{line}");
        }
    }

    #[test]
    fn several_files_get_distinct_run_labels_and_rounded_values() {
        let mut a = sample_results();
        if let Some(c) = a.tests[0].cycles.as_mut() {
            c.mean = 26236.60000000001;
        }
        let b = sample_results();
        let text = render(&[
            ("a.json".into(), a.clone()),
            ("b.json".into(), b),
            ("a.json".into(), a),
        ]);
        assert!(
            text.contains(" 26236.6\n") && !text.contains("26236.60000"),
            "{text}"
        );
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        for run in ["run=\"a.json\"", "run=\"b.json\"", "run=\"a.json#2\""] {
            assert!(lines.iter().any(|l| l.contains(run)), "{run}: {text}");
        }
        // No two samples share a name and label set.
        let keys: std::collections::HashSet<&str> = lines
            .iter()
            .map(|l| l.rsplit_once(' ').unwrap().0)
            .collect();
        assert_eq!(keys.len(), lines.len(), "{text}");
    }

    #[test]
    fn ab_runs_label_both_sides() {
        let mut r = sample_results();
        r.ab = Some(crate::results::AbRun {
            knob: "ring".into(),
            a: "0".into(),
            b: "3".into(),
            b_tests: r.tests.clone(),
            order: Vec::new(),
            host: Vec::new(),
        });
        let text = render(&[("r.json".into(), r)]);
        assert!(text.contains("side=\"ring=0\""), "{text}");
        assert!(text.contains("side=\"ring=3\""), "{text}");
    }
}

//! Comparison of two results files (`exitlab compare BEFORE AFTER`).
//!
//! Tests are matched by name. For tests that completed in both files the
//! per-iteration cycle medians, p10 and p90 are compared. A change is called
//! *significant* when the 95 % confidence intervals of the two medians
//! ([`Summary::median_ci95`]) do not overlap. This is a simple, conservative
//! criterion: non-overlap of two 95 % intervals implies a difference at a
//! level well below 5 %, while overlapping intervals do not prove that
//! nothing changed.

use crate::report::{fmt_cycles, fmt_pct_signed, host_str, layout, Align};
use crate::results::{Results, TestResult};
use crate::stats::Summary;

/// Direction of a significant change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Fewer cycles after than before, significantly.
    Faster,
    /// More cycles after than before, significantly.
    Slower,
    /// The median confidence intervals overlap.
    NotSignificant,
}

impl Change {
    /// The word used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Faster => "faster",
            Change::Slower => "slower",
            Change::NotSignificant => "~",
        }
    }
}

/// One test present and completed in both files.
#[derive(Debug, Clone, PartialEq)]
pub struct TestComparison {
    /// Test name.
    pub name: String,
    /// Cycles per iteration before.
    pub before: Summary,
    /// Cycles per iteration after.
    pub after: Summary,
    /// Net (loop-subtracted) median before, when recorded.
    pub net_median_before: Option<f64>,
    /// Net (loop-subtracted) median after, when recorded.
    pub net_median_after: Option<f64>,
    /// Relative change of the median in percent (`None` if the median before is 0).
    pub median_delta_pct: Option<f64>,
    /// Relative change of the 10th percentile in percent.
    pub p10_delta_pct: Option<f64>,
    /// Relative change of the 90th percentile in percent.
    pub p90_delta_pct: Option<f64>,
    /// Whether the two medians' 95 % confidence intervals do not overlap.
    pub significant: bool,
}

impl TestComparison {
    /// Direction of the change, if significant.
    pub fn change(&self) -> Change {
        if !self.significant {
            Change::NotSignificant
        } else if self.after.median < self.before.median {
            Change::Faster
        } else {
            Change::Slower
        }
    }
}

/// A test present in both files that could not be compared, because it did
/// not complete in at least one of them or has no cycle summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotCompared {
    /// Test name.
    pub name: String,
    /// Status word in the first file (`ok`, `skipped`, ...).
    pub before: String,
    /// Status word in the second file.
    pub after: String,
}

/// The comparison of two results files.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Tests compared, in the first file's order.
    pub tests: Vec<TestComparison>,
    /// Tests in both files that could not be compared.
    pub not_compared: Vec<NotCompared>,
    /// Tests only in the first file.
    pub only_before: Vec<String>,
    /// Tests only in the second file.
    pub only_after: Vec<String>,
    /// Reasons the two runs may not be comparable (different host or configuration).
    pub warnings: Vec<String>,
}

/// Relative change from `before` to `after` in percent.
fn delta_pct(before: f64, after: f64) -> Option<f64> {
    let d = (after - before) / before * 100.0;
    (before != 0.0 && d.is_finite()).then_some(d)
}

/// Status word of a test, noting a missing cycle summary.
fn status_word(t: &TestResult) -> String {
    if t.status.is_ok() && t.cycles.is_none() {
        "ok (no cycles)".to_string()
    } else {
        t.status.word().to_string()
    }
}

/// Compares the run `before` with the run `after`.
pub fn compare(before: &Results, after: &Results) -> Comparison {
    let mut tests = Vec::new();
    let mut not_compared = Vec::new();
    let mut only_before = Vec::new();
    let mut warnings = host_and_config_warnings(before, after);
    for b in &before.tests {
        let Some(a) = after.test(&b.name) else {
            only_before.push(b.name.clone());
            continue;
        };
        if b.ring != a.ring {
            warnings.push(format!(
                "{} ran in ring {} before and ring {} after",
                b.name, b.ring, a.ring
            ));
        }
        match (&b.cycles, &a.cycles) {
            (Some(bc), Some(ac)) if b.status.is_ok() && a.status.is_ok() => {
                tests.push(TestComparison {
                    name: b.name.clone(),
                    before: bc.clone(),
                    after: ac.clone(),
                    net_median_before: b.net_median_cycles,
                    net_median_after: a.net_median_cycles,
                    median_delta_pct: delta_pct(bc.median, ac.median),
                    p10_delta_pct: delta_pct(bc.p10, ac.p10),
                    p90_delta_pct: delta_pct(bc.p90, ac.p90),
                    significant: !bc.median_ci_overlaps(ac),
                });
            }
            _ => not_compared.push(NotCompared {
                name: b.name.clone(),
                before: status_word(b),
                after: status_word(a),
            }),
        }
    }
    let only_after = after
        .tests
        .iter()
        .filter(|a| before.test(&a.name).is_none())
        .map(|a| a.name.clone())
        .collect();
    Comparison {
        tests,
        not_compared,
        only_before,
        only_after,
        warnings,
    }
}

/// Warnings for host facts and configuration that differ between the runs.
/// Host keys missing from either file are not compared.
fn host_and_config_warnings(before: &Results, after: &Results) -> Vec<String> {
    let mut warnings = Vec::new();
    for (pointer, what) in [("/cpu/model_name", "CPU"), ("/kernel/release", "kernel")] {
        if let (Some(b), Some(a)) = (
            host_str(&before.host, pointer),
            host_str(&after.host, pointer),
        ) {
            if a != b {
                warnings.push(format!(
                    "hosts differ: {what} \"{b}\" before, \"{a}\" after"
                ));
            }
        }
    }
    let (b, a) = (&before.config, &after.config);
    if b.ring != a.ring {
        warnings.push(format!(
            "configs differ: ring {} before, ring {} after",
            b.ring, a.ring
        ));
    }
    if b.batch != a.batch {
        warnings.push(format!(
            "configs differ: batch {} before, batch {} after",
            b.batch, a.batch
        ));
    }
    warnings
}

fn opt_pct(v: Option<f64>) -> String {
    v.map(fmt_pct_signed).unwrap_or_else(|| "-".to_string())
}

fn fmt_ci(s: &Summary) -> String {
    format!(
        "{}..{}",
        fmt_cycles(s.median_ci95[0]),
        fmt_cycles(s.median_ci95[1])
    )
}

/// Renders a comparison as a fixed-width terminal table with warnings first
/// and the unmatched tests last.
pub fn render_comparison(cmp: &Comparison) -> String {
    let mut out = String::new();
    for w in &cmp.warnings {
        out.push_str("warning: ");
        out.push_str(w);
        out.push('\n');
    }
    if !cmp.warnings.is_empty() {
        out.push('\n');
    }
    if cmp.tests.is_empty() {
        out.push_str("no test completed in both files\n");
    } else {
        out.push_str("cycles per iteration (medians; loop overhead not subtracted)\n");
        let headers = [
            "test",
            "before",
            "after",
            "delta",
            "p10 delta",
            "p90 delta",
            "before 95% CI",
            "after 95% CI",
            "change",
        ];
        let mut aligns = vec![Align::Right; headers.len()];
        aligns[0] = Align::Left;
        aligns[8] = Align::Left;
        let rows: Vec<Vec<String>> = cmp
            .tests
            .iter()
            .map(|t| {
                vec![
                    t.name.clone(),
                    fmt_cycles(t.before.median),
                    fmt_cycles(t.after.median),
                    opt_pct(t.median_delta_pct),
                    opt_pct(t.p10_delta_pct),
                    opt_pct(t.p90_delta_pct),
                    fmt_ci(&t.before),
                    fmt_ci(&t.after),
                    t.change().as_str().to_string(),
                ]
            })
            .collect();
        out.push_str(&layout(&headers, &aligns, &rows));
        out.push_str(
            "change: faster/slower when the medians' 95% confidence intervals do not overlap, ~ otherwise\n",
        );
    }
    let mut tail = Vec::new();
    for n in &cmp.not_compared {
        tail.push(format!(
            "not compared: {} ({} before, {} after)",
            n.name, n.before, n.after
        ));
    }
    if !cmp.only_before.is_empty() {
        tail.push(format!("only before: {}", cmp.only_before.join(", ")));
    }
    if !cmp.only_after.is_empty() {
        tail.push(format!("only after: {}", cmp.only_after.join(", ")));
    }
    if !tail.is_empty() {
        out.push('\n');
        for line in tail {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::{ok_test, sample_results};
    use crate::results::TestStatus;
    use crate::stats::summarize;

    fn with_ci(base: f64, ci: [f64; 2]) -> Summary {
        let v: Vec<f64> = (0..101).map(|i| base + f64::from(i)).collect();
        let mut s = summarize(&v).unwrap();
        s.median_ci95 = ci;
        s
    }

    #[test]
    fn identical_files_show_no_change() {
        let r = sample_results();
        let c = compare(&r, &r);
        assert!(c.warnings.is_empty());
        assert!(c.only_before.is_empty() && c.only_after.is_empty());
        assert_eq!(c.tests.len(), 3);
        assert_eq!(c.not_compared.len(), 3);
        for t in &c.tests {
            assert_eq!(t.median_delta_pct, Some(0.0));
            assert!(!t.significant);
            assert_eq!(t.change(), Change::NotSignificant);
        }
        let text = render_comparison(&c);
        assert!(!text.contains("warning"));
        assert!(
            text.contains("not compared: vmcall (skipped before, skipped after)"),
            "{text}"
        );
    }

    #[test]
    fn significant_and_insignificant_changes() {
        let mut before = sample_results();
        let mut after = sample_results();
        // cpuid: 1250 -> 1000, disjoint intervals: faster.
        before.tests[1].cycles = Some(with_ci(1200.0, [1240.0, 1260.0]));
        after.tests[1].cycles = Some(with_ci(950.0, [990.0, 1010.0]));
        // inl_from_qemu: 5050 -> 5100 with overlapping intervals.
        before.tests[2].cycles = Some(with_ci(5000.0, [5000.0, 5100.0]));
        after.tests[2].cycles = Some(with_ci(5050.0, [5090.0, 5150.0]));
        // loop_overhead: 60 -> 70, disjoint: slower.
        before.tests[0].cycles = Some(with_ci(10.0, [59.0, 61.0]));
        after.tests[0].cycles = Some(with_ci(20.0, [69.0, 71.0]));
        let c = compare(&before, &after);
        let cpuid = c.tests.iter().find(|t| t.name == "cpuid").unwrap();
        assert!(cpuid.significant);
        assert_eq!(cpuid.change(), Change::Faster);
        assert!((cpuid.median_delta_pct.unwrap() + 20.0).abs() < 1e-9);
        assert!((cpuid.p10_delta_pct.unwrap() - (960.0 / 1210.0 - 1.0) * 100.0).abs() < 1e-9);
        assert!((cpuid.p90_delta_pct.unwrap() - (1040.0 / 1290.0 - 1.0) * 100.0).abs() < 1e-9);
        let inl = c.tests.iter().find(|t| t.name == "inl_from_qemu").unwrap();
        assert!(!inl.significant);
        let lo = c.tests.iter().find(|t| t.name == "loop_overhead").unwrap();
        assert_eq!(lo.change(), Change::Slower);
        let text = render_comparison(&c);
        let row = text.lines().find(|l| l.starts_with("cpuid")).unwrap();
        for needle in [
            "1,250",
            "1,000",
            "-20.0%",
            "1,240..1,260",
            "990..1,010",
            "faster",
        ] {
            assert!(row.contains(needle), "{needle} missing in {row}");
        }
        let row = text
            .lines()
            .find(|l| l.starts_with("inl_from_qemu"))
            .unwrap();
        assert!(row.trim_end().ends_with('~'), "{row}");
        let row = text
            .lines()
            .find(|l| l.starts_with("loop_overhead"))
            .unwrap();
        assert!(row.contains("+16.7%") && row.contains("slower"), "{row}");
    }

    #[test]
    fn unmatched_and_uncomparable_tests() {
        let mut before = sample_results();
        let mut after = sample_results();
        before.tests.push(ok_test("only_in_before", 100.0));
        after.tests.push(ok_test("only_in_after", 100.0));
        after.tests.push(ok_test("also_after", 100.0));
        // cpuid failed after.
        after.tests[1].status = TestStatus::Failed {
            reason: "boom".into(),
        };
        // inl_from_qemu has no cycles before.
        before.tests[2].cycles = None;
        let c = compare(&before, &after);
        assert_eq!(c.only_before, vec!["only_in_before"]);
        assert_eq!(c.only_after, vec!["only_in_after", "also_after"]);
        let names: Vec<&str> = c.tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["loop_overhead"]);
        assert!(c.not_compared.contains(&NotCompared {
            name: "cpuid".into(),
            before: "ok".into(),
            after: "failed".into()
        }));
        assert!(c.not_compared.contains(&NotCompared {
            name: "inl_from_qemu".into(),
            before: "ok (no cycles)".into(),
            after: "ok".into()
        }));
        let text = render_comparison(&c);
        assert!(text.contains("only before: only_in_before"));
        assert!(text.contains("only after: only_in_after, also_after"));
        assert!(text.contains("not compared: cpuid (ok before, failed after)"));
    }

    #[test]
    fn host_and_config_warnings_are_reported() {
        let before = sample_results();
        let mut after = sample_results();
        after.host["cpu"]["model_name"] = "Other CPU".into();
        after.host["kernel"]["release"] = "6.9.0".into();
        after.config.ring = 0;
        after.config.batch = 10;
        after.tests[1].ring = 0;
        let c = compare(&before, &after);
        assert_eq!(c.warnings.len(), 5, "{:?}", c.warnings);
        let text = render_comparison(&c);
        assert!(text.contains(
            "warning: hosts differ: CPU \"Test CPU @ 3.00GHz\" before, \"Other CPU\" after"
        ));
        assert!(
            text.contains("warning: hosts differ: kernel \"6.8.0-test\" before, \"6.9.0\" after")
        );
        assert!(text.contains("warning: configs differ: ring 3 before, ring 0 after"));
        assert!(text.contains("warning: configs differ: batch 100 before, batch 10 after"));
        assert!(text.contains("warning: cpuid ran in ring 3 before and ring 0 after"));
    }

    #[test]
    fn missing_host_keys_are_not_compared() {
        let before = sample_results();
        let mut after = sample_results();
        after.host = serde_json::json!({"cpu": {}});
        assert!(compare(&before, &after).warnings.is_empty());
        after.host = serde_json::Value::Null;
        assert!(compare(&after, &before).warnings.is_empty());
    }

    #[test]
    fn zero_median_has_no_percentage() {
        let mut before = sample_results();
        let after = sample_results();
        let mut s = before.tests[0].cycles.clone().unwrap();
        s.median = 0.0;
        s.p10 = 0.0;
        before.tests[0].cycles = Some(s);
        let c = compare(&before, &after);
        assert_eq!(c.tests[0].median_delta_pct, None);
        assert_eq!(c.tests[0].p10_delta_pct, None);
        assert!(c.tests[0].p90_delta_pct.is_some());
    }

    #[test]
    fn nothing_in_common() {
        let mut before = sample_results();
        let mut after = sample_results();
        before.tests.truncate(0);
        after.tests.truncate(1);
        let text = render_comparison(&compare(&before, &after));
        assert!(text.contains("no test completed in both files"));
        assert!(text.contains("only after: loop_overhead"));
    }
}

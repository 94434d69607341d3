//! A comparison ([`crate::compare::Comparison`]) as a terminal table and as Markdown: the
//! figures, the change with its interval and verdict per test, then the signs, the
//! reasons without a verdict and the gate's lines.

use crate::compare::{Comparison, Design};
use crate::format::{fmt_cycles, fmt_pct_signed, layout, Align};
use crate::stats::interval::Unit;
use crate::stats::model::AB_TARGET_HALF_WIDTH_PCT;
use crate::stats::units::Figure;
use crate::stats::verdict::{Gate, Verdict};

/// `lo..hi` of an interval in percent.
pub fn fmt_ci_pct(ci: Option<[f64; 2]>) -> String {
    ci.map(|[lo, hi]| format!("{}..{}", fmt_pct_signed(lo), fmt_pct_signed(hi)))
        .unwrap_or_else(|| "-".into())
}

/// The minimum detectable change as `x.x%`.
pub fn fmt_mdc(mdc: Option<f64>) -> String {
    mdc.filter(|m| m.is_finite())
        .map(|m| format!("{m:.1}%"))
        .unwrap_or_else(|| "-".into())
}

/// The one line under a comparison's header that says what its figures are.
pub fn figure_line(cmp: &Comparison) -> String {
    let what = match cmp.design {
        Design::Pairs => "change: median of the pairs' ratios B/A (rounds back to back)",
        Design::Runs => "each side: geometric mean of its runs' figures; units: runs",
        Design::Screen => {
            "one run a side: a screen; its interval is within one run and cannot gate"
        }
    };
    format!(
        "cycles per iteration, net of the empty loop, median over rounds; {what}; model: docs/model.md"
    )
}

/// "1 test", "16 tests".
fn n_tests(n: usize) -> String {
    format!("{n} test{}", if n == 1 { "" } else { "s" })
}

/// The verdict lines of a gating design: what the gate decided and why.
pub fn gate_lines(cmp: &Comparison, g: &Gate) -> Vec<String> {
    let mut out = Vec::new();
    if !g.slower.is_empty() {
        out.push(format!(
            "gate: slower beyond {}% (Holm over {}): {}",
            cmp.threshold_pct,
            n_tests(g.judged.len()),
            g.slower.join(", ")
        ));
    }
    if !g.unconfirmed.is_empty() {
        out.push(format!(
            "slower on its own at 95%, not after Holm's correction over {} (does not gate): {}",
            n_tests(g.judged.len()),
            g.unconfirmed.join(", ")
        ));
    }
    if !g.no_verdict.is_empty() {
        out.push(format!(
            "no verdict, so the gate cannot pass (fails closed): {}",
            g.no_verdict.join(", ")
        ));
    }
    if out.is_empty() {
        out.push(format!(
            "gate: passes; no test slower beyond {}% over {}",
            cmp.threshold_pct,
            n_tests(g.judged.len())
        ));
    }
    out
}

/// Renders a comparison as a terminal table with the warnings first, and the signs,
/// reasons and unmatched tests after it. `labels` names the two sides.
pub fn render_comparison(cmp: &Comparison, labels: [&str; 2]) -> String {
    let mut out = String::new();
    for c in &cmp.caveats {
        out.push_str(c);
        out.push('\n');
    }
    for w in &cmp.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    if !cmp.warnings.is_empty() {
        out.push('\n');
    }
    if cmp.tests.is_empty() {
        out.push_str("no test completed on both sides\n");
    } else {
        out.push_str(&figure_line(cmp));
        out.push('\n');
        let unit = cmp.tests.first().map_or(Unit::Round, |t| t.change.unit);
        let units_header = unit.name(2);
        let headers = [
            "test",
            labels[0],
            labels[1],
            "change",
            "95% CI",
            "min detectable",
            units_header,
            "verdict",
        ];
        let mut aligns = vec![Align::Right; headers.len()];
        aligns[0] = Align::Left;
        aligns[7] = Align::Left;
        let rows: Vec<Vec<String>> = cmp
            .tests
            .iter()
            .map(|t| {
                let c = &t.change;
                vec![
                    if t.figure == Figure::Raw {
                        format!("{} (raw)", t.name)
                    } else {
                        t.name.clone()
                    },
                    fmt_cycles(c.figures[0]),
                    fmt_cycles(c.figures[1]),
                    c.pct.map(fmt_pct_signed).unwrap_or_else(|| "-".into()),
                    fmt_ci_pct(c.ci95_pct),
                    fmt_mdc(c.min_detectable_pct),
                    if c.units[0] == c.units[1] {
                        c.units[0].to_string()
                    } else {
                        format!("{}/{}", c.units[0], c.units[1])
                    },
                    c.verdict.as_str().to_string(),
                ]
            })
            .collect();
        out.push_str(&layout(&headers, &aligns, &rows));
        out.push_str(&verdict_rule_line(cmp));
        out.push('\n');
    }
    let tail = comparison_notes(cmp, labels);
    if !tail.is_empty() {
        out.push('\n');
        for line in tail {
            out.push_str(&line);
            out.push('\n');
        }
    }
    crate::format::wrap(&out, crate::format::MAX_LINE)
}

/// What the verdicts of a comparison mean, in one line.
pub fn verdict_rule_line(cmp: &Comparison) -> String {
    format!(
        "verdict: slower/faster beyond ±{}% with a 95% interval excluding no change; equivalent: interval within ±{}%",
        cmp.threshold_pct, cmp.threshold_pct
    )
}

/// The lines under a comparison's table: signs, reasons without a verdict, tests not
/// compared or on one side only, an empty loop that moved, and the gate's lines (or the
/// screen's). `labels` names the two sides.
pub fn comparison_notes(cmp: &Comparison, labels: [&str; 2]) -> Vec<String> {
    let mut tail = Vec::new();
    for s in &cmp.signs {
        tail.push(format!("sign: {s}"));
    }
    let mut reasons: Vec<(String, Vec<&str>)> = Vec::new();
    for t in &cmp.tests {
        if let Some(why) = t.change.verdict.reason() {
            match reasons.iter_mut().find(|(w, _)| w == why) {
                Some((_, names)) => names.push(&t.name),
                None => reasons.push((why.to_string(), vec![&t.name])),
            }
        }
    }
    for (why, names) in reasons {
        tail.push(format!("no verdict for {}: {why}", names.join(", ")));
    }
    for n in &cmp.not_compared {
        tail.push(format!(
            "not compared: {} ({} {}, {} {})",
            n.name, n.before, labels[0], n.after, labels[1]
        ));
    }
    if !cmp.only_before.is_empty() {
        tail.push(format!(
            "only {}: {}",
            labels[0],
            cmp.only_before.join(", ")
        ));
    }
    if !cmp.only_after.is_empty() {
        tail.push(format!("only {}: {}", labels[1], cmp.only_after.join(", ")));
    }
    for t in cmp.tests.iter().filter(|t| t.baseline) {
        if let (Verdict::Slower | Verdict::Faster, Some(pct)) = (&t.change.verdict, t.change.pct) {
            tail.push(format!(
                "{} (the empty loop, no exit) moved {}: the guest's code ran at another speed; it does not gate",
                t.name,
                fmt_pct_signed(pct)
            ));
        }
    }
    if let Some((m, test)) = &cmp.runs_needed {
        tail.push(format!(
            "planner: {m} runs a side would give every test a 95% interval within ±{AB_TARGET_HALF_WIDTH_PCT}% at these runs' spread ({test} asks most)"
        ));
    }
    if cmp.design.gates() {
        tail.extend(gate_lines(cmp, &cmp.gate(None)));
    } else {
        let slower = cmp.slower();
        if !slower.is_empty() {
            tail.push(format!("slower in this screen: {}", slower.join(", ")));
        }
        tail.push(
            "screen: one run a side cannot gate (runs differ more than one run's rounds show); use bench --runs 3 a side, or bench --ab".to_string(),
        );
    }
    tail
}

/// For an A/B run: a line per test whose two sides' figures (each side's median of its
/// rounds) differ by a ratio outside the interval of the change (the median of the
/// pairs' ratios), so that a reader of the table sees why its columns and its change
/// tell different stories: the rounds fall into groups, or into host states, that the
/// pairs do not share alike.
pub fn disagreement_lines(cmp: &Comparison) -> Vec<String> {
    if cmp.design != Design::Pairs {
        return Vec::new();
    }
    cmp.tests
        .iter()
        .filter_map(|t| {
            let c = &t.change;
            let [lo, hi] = c.ci95_pct?;
            let sides = (c.figures[1] / c.figures[0] - 1.0) * 100.0;
            (sides.is_finite() && (sides < lo || sides > hi)).then(|| {
                format!(
                    "{}: the sides' medians differ by {}, outside the change's interval ({}): its rounds fall in groups; the change is the pairs'",
                    t.name,
                    fmt_pct_signed(sides),
                    fmt_ci_pct(c.ci95_pct)
                )
            })
        })
        .collect()
}

/// A comparison as GitHub-flavoured Markdown: the table, then its lines (caveats,
/// warnings, signs, reasons, the gate) in a code block.
pub fn render_comparison_md(cmp: &Comparison, labels: [&str; 2]) -> String {
    let cell = crate::format::md_cell;
    let unit = cmp.tests.first().map_or(Unit::Round, |t| t.change.unit);
    let mut out = format!(
        "| test | {} | {} | change | 95% CI | min detectable | {} | verdict |\n|:--|--:|--:|--:|--:|--:|--:|:--|\n",
        cell(labels[0]),
        cell(labels[1]),
        unit.name(2)
    );
    for t in &cmp.tests {
        let c = &t.change;
        out.push_str(&format!(
            "| `{}`{} | {} | {} | {} | {} | {} | {} | {} |\n",
            t.name.replace('`', "'"),
            if t.figure == Figure::Raw {
                " (raw)"
            } else {
                ""
            },
            fmt_cycles(c.figures[0]),
            fmt_cycles(c.figures[1]),
            c.pct.map(fmt_pct_signed).unwrap_or_else(|| "-".into()),
            fmt_ci_pct(c.ci95_pct),
            fmt_mdc(c.min_detectable_pct),
            c.units[0].min(c.units[1]),
            c.verdict.as_str()
        ));
    }
    out.push_str(&format!("\n{}\n", cell(&figure_line(cmp))));
    let text = render_comparison(cmp, labels);
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("verdict:"))
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let head: Vec<String> = cmp.caveats.iter().chain(&cmp.warnings).cloned().collect();
    if !lines.is_empty() || !head.is_empty() {
        let block: String = head
            .iter()
            .map(String::as_str)
            .chain(lines)
            .map(|l| format!("{l}\n"))
            .collect();
        out.push_str("\n```\n");
        out.push_str(&crate::format::wrap(&block, crate::format::MAX_LINE));
        out.push_str("```\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::n_tests;

    #[test]
    fn a_count_of_tests_agrees_in_number() {
        assert_eq!(n_tests(1), "1 test");
        assert_eq!(n_tests(0), "0 tests");
        assert_eq!(n_tests(16), "16 tests");
    }
}

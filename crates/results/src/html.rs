//! One self-contained HTML report (`exitlab report FILE... -o report.html`): host and
//! configuration, the summary table with confidence intervals, a CDF per test that
//! overlays the files (or the two sides of an A/B run), the phases of userspace exits,
//! and the comparison or A/B table with verdicts.
//!
//! Nothing is fetched: styles are inline, the plots are inline SVG drawn by `plotters`,
//! text uses the reader's own sans-serif font, and there is no script at all.

use std::fmt::Write as _;

use plotters::prelude::*;

use crate::compare::{self, fmt_ci_pct, fmt_mdc, Comparison};
use crate::report::{fmt_cycles, fmt_unix_utc, host_str};
use crate::results::{Results, TestResult};
use crate::verdict::Verdict;

/// One line in the plots and one block of tables: a file, or a side of an A/B run.
struct Series {
    label: String,
    results: Results,
}

const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The series to draw: both sides of an A/B file, each other file as it is.
fn series_of(files: &[(String, Results)]) -> Vec<Series> {
    let mut out = Vec::new();
    for (name, r) in files {
        match (r.ab_sides(), &r.ab) {
            (Some((a, b)), Some(ab)) => {
                out.push(Series {
                    label: format!("{}={} (A)", ab.knob, ab.a),
                    results: a,
                });
                out.push(Series {
                    label: format!("{}={} (B)", ab.knob, ab.b),
                    results: b,
                });
            }
            _ => out.push(Series {
                label: name.clone(),
                results: r.clone(),
            }),
        }
    }
    out
}

/// Renders the page.
pub fn render(files: &[(String, Results)]) -> String {
    let series = series_of(files);
    let mut page = String::new();
    page.push_str(HEAD);
    let _ = writeln!(page, "<h1>exitlab report</h1>");
    for (name, r) in files {
        host_and_config(&mut page, name, r);
    }
    for (_, r) in files {
        if let (Some((a, b)), Some(ab)) = (r.ab_sides(), &r.ab) {
            let _ = writeln!(
                page,
                "<h2>A/B: {} = {} vs {}</h2><p>{} rounds interleaved (A B, then B A, ...), each side in fresh VMs; rounds paired.</p>",
                esc(&ab.knob),
                esc(&ab.a),
                esc(&ab.b),
                r.config.rounds
            );
            let labels = [
                format!("{}={}", ab.knob, ab.a),
                format!("{}={}", ab.knob, ab.b),
            ];
            comparison_table(&mut page, &compare::compare_ab(&a, &b, 0.0), &labels);
        }
    }
    if files.len() >= 2 && files.iter().all(|(_, r)| r.ab.is_none()) {
        let (first, base) = &files[0];
        for (name, other) in &files[1..] {
            let _ = writeln!(page, "<h2>Comparison: {} → {}</h2>", esc(first), esc(name));
            let cmp = compare::compare(base, other, compare::DEFAULT_THRESHOLD_PCT);
            if !cmp.warnings.is_empty() {
                page.push_str("<ul class=\"warn\">");
                for w in &cmp.warnings {
                    let _ = write!(page, "<li>{}</li>", esc(w));
                }
                page.push_str("</ul>");
            }
            comparison_table(&mut page, &cmp, &["before".into(), "after".into()]);
        }
    }
    for s in &series {
        summary_table(&mut page, s);
    }
    page.push_str("<h2>Distributions</h2><p>CDF of the paired net cycles per iteration (sample minus the empty loop measured just before it in the same VM; raw cycles for <code>loop_overhead</code>), all rounds; the x axis spans the 5th to the 95th percentile, the tails beyond are drawn at the edges.</p>\n<div class=\"plots\">");
    for name in test_names(&series) {
        if let Some(svg) = cdf_svg(&name, &series) {
            let _ = writeln!(
                page,
                "<figure class=\"cdf\" data-test=\"{}\">{svg}<figcaption>{}</figcaption></figure>",
                esc(&name),
                esc(&name)
            );
        }
    }
    page.push_str("</div>\n");
    match phases_svg(&series) {
        Some(svg) => {
            let _ = writeln!(
                page,
                "<h2>Phases of a userspace exit</h2><p>Median host cycles from the guest's exiting instruction to the VMM seeing the exit (exit leg), in the VMM (handling), and from re-entering KVM_RUN to the guest resuming (entry leg).</p><figure class=\"phases\">{svg}</figure>"
            );
        }
        None => {
            // Say why rather than leave the section out silently.
            let why = files
                .iter()
                .flat_map(|(_, r)| &r.notes)
                .find(|n| n.starts_with("phase figures are off"))
                .cloned()
                .unwrap_or_else(|| {
                    "no test of these runs measured them (only userspace-exit tests do)".into()
                });
            let _ = writeln!(
                page,
                "<h2>Phases of a userspace exit</h2><p class=\"no-phases\">Not measured: {}</p>",
                esc(&why)
            );
        }
    }
    page.push_str("</body></html>\n");
    page
}

const HEAD: &str = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>exitlab report</title>\n<style>\nbody{font-family:sans-serif;margin:1.5em;color:#222;max-width:1400px}\ntable{border-collapse:collapse;margin:.5em 0 1.5em}\nth,td{border:1px solid #ccc;padding:.2em .5em;text-align:right;font-variant-numeric:tabular-nums}\nth:first-child,td:first-child{text-align:left}\nth{background:#f0f0f0}\n.slower{color:#b00;font-weight:bold}.faster{color:#070;font-weight:bold}\n.warn li{color:#a60}\ndl{display:grid;grid-template-columns:max-content auto;gap:.1em 1em}dt{font-weight:bold}dd{margin:0}\n.plots{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0}figcaption{font-size:.8em;text-align:center}\n</style></head><body>\n";

fn host_and_config(page: &mut String, name: &str, r: &Results) {
    let _ = writeln!(page, "<h2>{}</h2><dl>", esc(name));
    let mut row = |k: &str, v: String| {
        let _ = writeln!(page, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(&v));
    };
    row(
        "run",
        format!(
            "{}, {:.1} s wall",
            fmt_unix_utc(r.started_at_unix),
            r.wall_seconds
        ),
    );
    row("exitlab", r.tool.version.clone());
    if let Some(p) = &r.provenance {
        row("revision", p.git_revision.clone());
        row("command", p.command_line.join(" "));
        if let Some(h) = &p.hostname {
            row("host name", h.clone());
        }
    }
    for (pointer, what) in [
        ("/cpu/model_name", "CPU"),
        ("/cpu/microcode", "microcode"),
        ("/kernel/release", "kernel"),
        ("/virtualization/summary", "virtualization"),
    ] {
        if let Some(v) = host_str(&r.host, pointer) {
            row(what, v.to_string());
        }
    }
    let c = &r.config;
    row(
        "config",
        format!(
            "ring {}, {} samples x {} iteration(s), warm-up {}, {} round(s), TSC {} kHz ({})",
            c.ring, c.samples, c.batch, c.warmup, c.rounds, c.tsc_khz, c.tsc_khz_source
        ),
    );
    if !c.knobs.is_empty() {
        row(
            "knobs",
            c.knobs
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    if let Some(why) = &r.incomplete {
        row("INCOMPLETE", why.clone());
    }
    for n in &r.notes {
        row("note", n.clone());
    }
    page.push_str("</dl>\n");
}

fn cell(v: f64) -> String {
    fmt_cycles(v)
}

fn summary_table(page: &mut String, s: &Series) {
    let _ = writeln!(
        page,
        "<h2>Summary: {}</h2><table class=\"summary\"><tr><th>test</th><th>handled</th><th>median</th><th>95% CI of median</th><th>p10</th><th>p90</th><th>p99</th><th>net median</th><th>median ns</th><th>rounds</th><th>samples</th></tr>",
        esc(&s.label)
    );
    for t in &s.results.tests {
        let handled = if t.status.is_ok() {
            t.handled.map_or("-", |h| h.as_str()).to_string()
        } else {
            t.status.word().to_string()
        };
        let (median, ci, p10, p90, p99) = match &t.cycles {
            Some(c) => (
                cell(c.median),
                format!("{}..{}", cell(c.median_ci95[0]), cell(c.median_ci95[1])),
                cell(c.p10),
                cell(c.p90),
                cell(c.p99),
            ),
            None => Default::default(),
        };
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{median}</td><td>{ci}</td><td>{p10}</td><td>{p90}</td><td>{p99}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&t.name),
            esc(&handled),
            crate::central::net_figure(t).map_or("-".into(), cell),
            crate::central::figure_ns(t).map_or("-".into(), |n| format!("{:.0}", n.0)),
            t.rounds.len(),
            t.samples
        );
    }
    page.push_str("</table>\n");
}

fn comparison_table(page: &mut String, cmp: &Comparison, labels: &[String; 2]) {
    let _ = writeln!(
        page,
        "<table class=\"verdicts\"><tr><th>test</th><th>{}</th><th>{}</th><th>change</th><th>95% CI</th><th>min detectable</th><th>rounds</th><th>verdict</th></tr>",
        esc(&labels[0]),
        esc(&labels[1])
    );
    for t in &cmp.tests {
        let c = &t.change;
        let class = match c.verdict {
            Verdict::Slower => "slower",
            Verdict::Faster => "faster",
            _ => "",
        };
        let verdict = match &c.verdict {
            Verdict::NoConclusion(why) => format!("no conclusion: {why}"),
            v => v.as_str().to_string(),
        };
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/{}</td><td class=\"{class}\">{}</td></tr>",
            esc(&t.name),
            cell(c.median_before),
            cell(c.median_after),
            c.pct.map_or("-".into(), |p| format!("{p:+.1}%")),
            esc(&fmt_ci_pct(c.ci95_pct)),
            esc(&fmt_mdc(c.min_detectable_pct)),
            c.rounds_before,
            c.rounds_after,
            esc(&verdict)
        );
    }
    let _ = writeln!(
        page,
        "</table><p>Cycles per iteration: {}; change with a 95% bootstrap interval over rounds; slower/faster when the whole interval lies beyond ±{:.1}%.</p>",
        crate::central::DESCRIPTION,
        cmp.threshold_pct
    );
}

/// Test names in first-seen order over all series.
fn test_names(series: &[Series]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for s in series {
        for t in &s.results.tests {
            if !names.contains(&t.name) {
                names.push(t.name.clone());
            }
        }
    }
    names
}

fn percentiles_of<'a>(s: &'a Series, test: &str) -> Option<&'a Vec<f64>> {
    s.results
        .test(test)
        .filter(|t| t.status.is_ok())
        .and_then(|t: &TestResult| t.net_percentiles.as_ref())
        .filter(|p| p.len() >= 2)
}

/// The CDF of one test, one line per series that has it.
fn cdf_svg(test: &str, series: &[Series]) -> Option<String> {
    let lines: Vec<(usize, &Series, &Vec<f64>)> = series
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i, s, percentiles_of(s, test)?)))
        .collect();
    if lines.is_empty() {
        return None;
    }
    // The 5th to 95th percentiles set the axis, so the tails (rare slow exits from host
    // interrupts or preemption, and negative net figures when the paired empty loop
    // itself was interrupted) do not squash the body of the distribution.
    let at = |p: &Vec<f64>, pct: usize| p[(p.len() - 1) * pct / 100];
    let top = |p: &Vec<f64>| at(p, 95);
    let lo = lines
        .iter()
        .map(|l| at(l.2, 5))
        .fold(f64::INFINITY, f64::min);
    let hi = lines
        .iter()
        .map(|l| top(l.2))
        .fold(f64::NEG_INFINITY, f64::max);
    let pad = ((hi - lo) * 0.05).max(1.0);
    let (x0, x1) = (lo - pad, hi + pad);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (440, 280)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .caption(test, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(36)
            .y_label_area_size(44)
            .build_cartesian_2d(x0..x1, 0.0..1.0)
            .ok()?;
        chart
            .configure_mesh()
            .x_desc("net cycles per iteration")
            .y_desc("fraction")
            .x_labels(5)
            .y_labels(5)
            .x_label_formatter(&|v| fmt_cycles(*v))
            .draw()
            .ok()?;
        for (i, s, p) in &lines {
            let colour = COLOURS[i % COLOURS.len()];
            let n = p.len() - 1;
            let points = p
                .iter()
                .enumerate()
                .map(|(k, &x)| (x.clamp(x0, x1), k as f64 / n as f64));
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                .ok()?
                .label(s.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

/// Stacked bars of the three phases of each userspace exit that has them, per series.
fn phases_svg(series: &[Series]) -> Option<String> {
    let mut bars: Vec<(String, [f64; 3])> = Vec::new();
    for s in series {
        for t in &s.results.tests {
            if let Some(p) = &t.phases {
                let label = if series.len() > 1 {
                    format!("{} [{}]", t.name, s.label)
                } else {
                    t.name.clone()
                };
                bars.push((
                    label,
                    [p.exit_leg.median, p.handling.median, p.entry_leg.median],
                ));
            }
        }
    }
    if bars.is_empty() {
        return None;
    }
    let total = bars
        .iter()
        .map(|b| b.1.iter().sum::<f64>())
        .fold(1.0, f64::max);
    let height = 70 + 34 * bars.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, height)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let n = bars.len();
        let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(260)
            .build_cartesian_2d(0.0..total * 1.05, 0.0..n as f64)
            .ok()?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("host cycles (median)")
            .x_label_formatter(&|v| fmt_cycles(*v))
            .y_labels(n * 2 + 1)
            .y_label_formatter(&|y| {
                let i = (y - 0.5).round();
                if (y - 0.5 - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                    labels[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .draw()
            .ok()?;
        let names = ["exit leg", "VMM handling", "entry leg"];
        for phase in 0..3 {
            let colour = COLOURS[phase];
            let rects: Vec<Rectangle<(f64, f64)>> = bars
                .iter()
                .enumerate()
                .map(|(i, (_, v))| {
                    let start: f64 = v[..phase].iter().sum();
                    let y = i as f64;
                    Rectangle::new(
                        [(start, y + 0.2), (start + v[phase], y + 0.8)],
                        colour.filled(),
                    )
                })
                .collect();
            chart
                .draw_series(rects)
                .ok()?
                .label(names[phase])
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::sample_results;

    #[test]
    fn page_is_self_contained_with_one_cdf_per_test() {
        let r = sample_results();
        let page = render(&[("a.json".into(), r.clone()), ("b.json".into(), r)]);
        assert!(page.starts_with("<!DOCTYPE html>"));
        for forbidden in ["<script", "http://", "https://", "@import", "url("] {
            // plotters writes the SVG namespace URI, which is an identifier, not a fetch.
            let hits = page.matches(forbidden).count()
                - page.matches("xmlns=\"http://www.w3.org/2000/svg\"").count()
                    * usize::from(forbidden == "http://");
            assert_eq!(hits, 0, "{forbidden} in the page");
        }
        // One CDF per test that completed (3 in the sample), each with both files.
        assert_eq!(page.matches("<figure class=\"cdf\"").count(), 3, "{page}");
        assert!(page.contains("data-test=\"inl_from_qemu\""));
        assert!(page.contains("<table class=\"summary\">"));
        assert!(page.contains("Comparison: a.json → b.json"));
        assert!(page.contains("Phases of a userspace exit"));
        assert!(page.contains("Test CPU @ 3.00GHz"));
    }

    #[test]
    fn a_page_without_phases_says_why() {
        let mut r = sample_results();
        for t in &mut r.tests {
            t.phases = None;
        }
        let page = render(&[("a.json".into(), r.clone())]);
        assert!(page.contains("Not measured: no test of these runs measured them"));
        r.notes
            .push("phase figures are off: the TSC is not invariant".into());
        let page = render(&[("a.json".into(), r)]);
        assert!(page.contains("Not measured: phase figures are off: the TSC is not invariant"));
        assert!(!page.contains("<figure class=\"phases\">"));
    }

    #[test]
    fn ab_page_has_verdicts_and_both_sides() {
        let mut r = sample_results();
        let mut b = r.tests.clone();
        for rf in &mut b[1].rounds {
            rf.net_median = rf.net_median.map(|n| n * 1.5);
        }
        r.ab = Some(crate::results::AbRun {
            knob: "ring".into(),
            a: "0".into(),
            b: "3".into(),
            b_tests: b,
            order: Vec::new(),
        });
        let page = render(&[("ab.json".into(), r)]);
        assert!(page.contains("A/B: ring = 0 vs 3"));
        assert!(page.contains("<td class=\"slower\">slower</td>"), "{page}");
        assert!(page.contains("ring=0 (A)") && page.contains("ring=3 (B)"));
    }
}

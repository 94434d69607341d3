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
use crate::format::{fmt_cycles, fmt_ns, fmt_unix_utc, host_str};
use crate::report::samples_cell;
use crate::results::{Results, TestResult};
use crate::stats::verdict::Verdict;

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
        match (crate::stats::units::ab_sides(r), &r.ab) {
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
        if let (Some(cmp), Some(ab)) = (
            compare::compare_ab_run(r, compare::DEFAULT_THRESHOLD_PCT),
            &r.ab,
        ) {
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
            comparison_table(&mut page, &cmp, &labels);
            // A planned design: its target, pilot, and the tests short of the target.
            for line in crate::report::plan_lines(r) {
                let _ = writeln!(page, "<p>{}</p>", esc(&line));
            }
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
    page.push_str("<h2>Distributions</h2><p>CDF of the paired net cycles per iteration (sample minus the empty loop measured just before it in the same VM; raw cycles for <code>loop_overhead</code>), all rounds; the x axis spans the 5th to the 95th percentile, the tails beyond are drawn at the edges.</p>\n");
    // One legend for every plot (each series has the same colour in all of them), kept
    // out of the plots so that it covers no data.
    let keys: Vec<(String, RGBColor)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.label.clone(), COLOURS[i % COLOURS.len()]))
        .collect();
    legend(&mut page, &keys);
    page.push_str("<div class=\"plots\">");
    for name in test_names(&series) {
        // The plot's own caption names the test; no second name under it.
        if let Some(svg) = cdf_svg(&name, &series) {
            let _ = writeln!(
                page,
                "<figure class=\"cdf\" data-test=\"{}\">{svg}</figure>",
                esc(&name)
            );
        }
    }
    page.push_str("</div>\n");
    match phases_svg(&series) {
        Some(svg) => {
            let _ = writeln!(
                page,
                "<h2>Phases of a userspace exit</h2><p>Median host cycles from the guest's exiting instruction to the VMM seeing the exit (exit leg), in the VMM (handling), and from re-entering KVM_RUN to the guest resuming (entry leg). The bars share a logarithmic axis, so that the VMM's short share shows beside the long legs; the table gives the figures.</p>"
            );
            let keys: Vec<(String, RGBColor)> = PHASE_NAMES
                .iter()
                .zip(COLOURS)
                .map(|(n, c)| (n.to_string(), c))
                .collect();
            legend(&mut page, &keys);
            let _ = writeln!(
                page,
                "<div class=\"phases-wrap\"><figure class=\"phases\">{svg}</figure>{}</div>",
                phases_table(&series)
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

const HEAD: &str = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>exitlab report</title>\n<style>\nbody{font-family:sans-serif;margin:1.5em;color:#222;max-width:1400px}\ntable{border-collapse:collapse;margin:.5em 0 1.5em}\nth,td{border:1px solid #ccc;padding:.2em .5em;text-align:right;font-variant-numeric:tabular-nums}\nth:first-child,td:first-child{text-align:left}\nth{background:#f0f0f0}\n.slower{color:#b00;font-weight:bold}.faster{color:#070;font-weight:bold}\n.warn li{color:#a60}\ndl{display:grid;grid-template-columns:max-content auto;gap:.1em 1em}dt{font-weight:bold}dd{margin:0}\n.plots{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0}\n.legend{display:flex;flex-wrap:wrap;gap:.3em 1.5em;font-size:.9em}.key{display:inline-block;width:1.6em;height:.7em;margin-right:.4em;vertical-align:middle}\n.phases-wrap{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}\n.footnote{font-size:.9em}\n</style></head><body>\n";

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
            c.ring,
            c.samples,
            crate::results::batch_header(r),
            c.warmup,
            c.rounds,
            c.tsc_khz,
            c.tsc_khz_source
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
    // The virtualization row says already what a note repeating the host's summary would.
    for n in r.notes_beyond_host() {
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
        "<h2>Summary: {}</h2><table class=\"summary\"><tr><th>test</th><th>observed</th><th>median</th><th>net median</th><th>95% CI (rounds)</th><th>p10</th><th>p90</th><th>p99</th><th>median ns</th><th>rounds</th><th>samples</th></tr>",
        esc(&s.label)
    );
    let mut starred = false;
    for t in &s.results.tests {
        let handled = if t.status.is_ok() {
            match t.handled {
                Some(h) if !h.agrees_with(t.expected_handling) => {
                    starred = true;
                    format!("{}*", h.label())
                }
                Some(h) => h.label(),
                None => "-".to_string(),
            }
        } else {
            t.status.word().to_string()
        };
        let ci = crate::stats::units::central(t)
            .and_then(|c| c.interval())
            .map_or("-".into(), |[lo, hi]| format!("{}..{}", cell(lo), cell(hi)));
        let (median, p10, p90, p99) = match &t.cycles {
            Some(c) => (cell(c.median), cell(c.p10), cell(c.p90), cell(c.p99)),
            None => Default::default(),
        };
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{median}</td><td>{}</td><td>{ci}</td><td>{p10}</td><td>{p90}</td><td>{p99}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&t.name),
            esc(&handled),
            crate::stats::units::figure_cycles(t).map_or("-".into(), |(c, net)| if net {
                cell(c)
            } else {
                format!("{} (raw)", cell(c))
            }),
            crate::stats::units::figure_ns(t).map_or("-".into(), |n| fmt_ns(n.0)),
            t.rounds.len(),
            samples_cell(t)
        );
    }
    page.push_str("</table>\n");
    if starred {
        page.push_str(
            "<p class=\"footnote\">* observed differs from where the exit is expected to be \
             handled (<code>bench --list</code>, column <i>expected</i>); <i>not observed</i>: \
             no userspace exit, and KVM's exit counter counted none beyond the empty loop's, so \
             where it was handled could not be seen.</p>\n",
        );
    }
}

fn comparison_table(page: &mut String, cmp: &Comparison, labels: &[String; 2]) {
    let _ = writeln!(
        page,
        "<table class=\"verdicts\"><tr><th>test</th><th>{}</th><th>{}</th><th>change</th><th>95% CI</th><th>min detectable</th><th>{}</th><th>verdict</th></tr>",
        esc(&labels[0]),
        esc(&labels[1]),
        cmp.tests.first().map_or("rounds", |t| t.change.unit.name(2))
    );
    for t in &cmp.tests {
        let c = &t.change;
        let class = match c.verdict {
            Verdict::Slower => "slower",
            Verdict::Faster => "faster",
            _ => "",
        };
        let verdict = match &c.verdict {
            Verdict::NoVerdict(why) => format!("no verdict: {why}"),
            v => v.as_str().to_string(),
        };
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}</td></tr>",
            esc(&t.name),
            cell(c.figures[0]),
            cell(c.figures[1]),
            c.pct.map_or("-".into(), |p| format!("{p:+.1}%")),
            esc(&fmt_ci_pct(c.ci95_pct)),
            esc(&fmt_mdc(c.min_detectable_pct)),
            c.units[0].min(c.units[1]),
            esc(&verdict)
        );
    }
    let _ = writeln!(page, "</table><p>{}</p>", esc(&compare::figure_line(cmp)));
    for line in cmp.signs.iter().map(|s| format!("sign: {s}")).chain(
        cmp.design
            .gates()
            .then(|| compare::gate_lines(cmp, &cmp.gate(None)))
            .unwrap_or_default(),
    ) {
        let _ = writeln!(page, "<p>{}</p>", esc(&line));
    }
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
    // A test whose figures are raw (the empty loop itself: nothing to subtract).
    let raw = lines
        .iter()
        .filter_map(|(_, s, _)| s.results.test(test))
        .any(|t| !t.median_ns_is_net);
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
            .x_desc(if raw {
                "raw cycles per iteration (nothing subtracted)"
            } else {
                "net cycles per iteration"
            })
            .y_desc("fraction")
            .x_labels(5)
            .y_labels(5)
            .x_label_formatter(&|v| fmt_cycles(*v))
            .draw()
            .ok()?;
        for (i, _, p) in &lines {
            let colour = COLOURS[i % COLOURS.len()];
            let n = p.len() - 1;
            let points = p
                .iter()
                .enumerate()
                .map(|(k, &x)| (x.clamp(x0, x1), k as f64 / n as f64));
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                .ok()?;
        }
        root.present().ok()?;
    }
    Some(svg)
}

/// The three phases of a userspace exit, in [`Phases`](crate::results::Phases) order.
const PHASE_NAMES: [&str; 3] = ["exit leg", "VMM handling", "entry leg"];

/// The phases of each userspace exit that has them, per series: (label, medians).
fn phase_bars(series: &[Series]) -> Vec<(String, [f64; 3])> {
    let mut bars = Vec::new();
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
    bars
}

/// The phases' figures beside their chart: medians, the round trip, and the VMM's share.
fn phases_table(series: &[Series]) -> String {
    let mut t = String::from(
        "<table class=\"phases\"><tr><th>test</th><th>exit leg</th><th>VMM handling</th><th>entry leg</th><th>round trip</th><th>VMM share</th></tr>",
    );
    for (label, v) in phase_bars(series) {
        let total: f64 = v.iter().sum();
        let _ = write!(
            t,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td></tr>",
            esc(&label),
            fmt_cycles(v[0]),
            fmt_cycles(v[1]),
            fmt_cycles(v[2]),
            fmt_cycles(total),
            if total > 0.0 {
                v[1] / total * 100.0
            } else {
                0.0
            }
        );
    }
    t.push_str("</table>");
    t
}

/// The phases as bars side by side (one per phase, per test and series) on a
/// logarithmic axis: on a linear one the VMM's few hundred cycles beside legs of tens of
/// thousands are a sliver under a pixel wide. The axis starts at half the smallest
/// figure, so every bar is well over a pixel long; the legend is the page's, outside.
fn phases_svg(series: &[Series]) -> Option<String> {
    let bars = phase_bars(series);
    let positive = bars.iter().flat_map(|b| b.1).filter(|v| *v > 0.0);
    let smallest = positive.clone().fold(f64::INFINITY, f64::min);
    let largest = positive.fold(0.0, f64::max);
    if bars.is_empty() || largest <= 0.0 {
        return None;
    }
    let (lo, hi) = (smallest / 2.0, largest * 1.5);
    let height = 60 + 60 * bars.len() as u32;
    // Room for the longest row label (about 7 px a character at the axis' font size).
    let label_width = bars
        .iter()
        .map(|b| 7 * b.0.chars().count() as u32 + 16)
        .max()
        .unwrap_or(0)
        .clamp(80, 480);
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (460 + label_width, height)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let n = bars.len();
        let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(label_width)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..n as f64)
            .ok()?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("host cycles (median, logarithmic)")
            .x_labels(5)
            .max_light_lines(0)
            .x_label_formatter(&|v| fmt_cycles(*v))
            .y_labels(n * 2 + 1)
            .y_label_formatter(&|y| {
                let i = (y - 0.5).round();
                // Rows from the top, in the table's order.
                if (y - 0.5 - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                    labels[labels.len() - 1 - i as usize].clone()
                } else {
                    String::new()
                }
            })
            .draw()
            .ok()?;
        for (phase, colour) in COLOURS.iter().take(PHASE_NAMES.len()).enumerate() {
            let rects: Vec<Rectangle<(f64, f64)>> = bars
                .iter()
                .enumerate()
                .filter(|(_, (_, v))| v[phase] > 0.0)
                .map(|(i, (_, v))| {
                    // Top to bottom in each group: exit leg, handling, entry leg.
                    let y = (n - 1 - i) as f64 + 0.75 - 0.25 * phase as f64;
                    Rectangle::new([(lo, y - 0.1), (v[phase], y + 0.1)], colour.filled())
                })
                .collect();
            chart.draw_series(rects).ok()?;
        }
        root.present().ok()?;
    }
    Some(svg)
}

/// A legend in the page (not in a plot, where it could cover data): a colour key and a
/// label per entry.
fn legend(page: &mut String, keys: &[(String, RGBColor)]) {
    page.push_str("<p class=\"legend\">");
    for (label, RGBColor(r, g, b)) in keys {
        let _ = write!(
            page,
            "<span><span class=\"key\" style=\"background:rgb({r},{g},{b})\"></span>{}</span>",
            esc(label)
        );
    }
    page.push_str("</p>\n");
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
    fn plots_are_named_once_legends_stay_out_and_phases_have_a_table() {
        let r = sample_results();
        let page = render(&[("a.json".into(), r)]);
        assert!(!page.contains("<figcaption"), "{page}");
        // No legend inside any plot: the page's own legends name series and phases.
        assert!(!page.contains("fill=\"none\" stroke=\"#000000\""), "{page}");
        assert_eq!(page.matches("<p class=\"legend\">").count(), 2, "{page}");
        assert!(page.contains("<table class=\"phases\">"), "{page}");
        assert!(page.contains("host cycles (median, logarithmic)"), "{page}");
        assert!(page.contains("<th>VMM share</th>"), "{page}");
    }

    #[test]
    fn summary_has_thousands_separators_and_the_observed_footnote_when_starred() {
        let mut r = sample_results();
        // inl_from_qemu: net 5,040 cycles at 3 GHz.
        let page = render(&[("a.json".into(), r.clone())]);
        assert!(page.contains("<td>1,680</td>"), "{page}");
        assert!(!page.contains("class=\"footnote\""), "{page}");
        let t = r
            .tests
            .iter_mut()
            .find(|t| t.name == "inl_from_qemu")
            .unwrap();
        t.handled = Some(crate::results::Handling::NotObserved);
        let page = render(&[("a.json".into(), r)]);
        assert!(page.contains("<td>not observed*</td>"), "{page}");
        assert!(
            page.contains("<p class=\"footnote\">* observed differs from where the exit"),
            "{page}"
        );
    }

    #[test]
    fn a_note_that_repeats_the_virtualization_row_is_shown_once() {
        let mut r = sample_results();
        let summary = "nested, paravirtual: exit costs are not hardware figures";
        r.host = serde_json::json!({ "virtualization": { "summary": summary } });
        r.notes = vec![summary.to_string(), "another note".to_string()];
        let page = render(&[("a.json".into(), r)]);
        assert_eq!(page.matches(summary).count(), 1, "{page}");
        assert!(page.contains("another note"), "{page}");
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
            host: Vec::new(),
        });
        let page = render(&[("ab.json".into(), r)]);
        assert!(page.contains("A/B: ring = 0 vs 3"));
        assert!(page.contains("<td class=\"slower\">slower</td>"), "{page}");
        assert!(page.contains("ring=0 (A)") && page.contains("ring=3 (B)"));
    }
}

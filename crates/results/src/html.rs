//! One self-contained HTML report (`exitlab report FILE... -o report.html`), in the
//! order a reader needs it: that the figures are not hardware figures (a nested or
//! paravirtual host), the contents, each file's host and configuration (knob values as
//! the text report says them, the run's id as OpenMetrics labels it) and VMM overhead,
//! the A/B or comparison table with verdicts and the lines the text prints under it,
//! then per file or side the text table's columns with each figure's 95 % interval
//! over rounds and what the text prints below its table (tests skipped or stopped,
//! where exits were handled, exit checks, KVM counters, signs, plan, host times), a
//! CDF per test that overlays the files (or the two sides of an A/B run), and the
//! phases of userspace exits. Every line shown is the text report's own, from the same
//! functions of [`crate::report`] and [`crate::compare`], escaped.
//!
//! Nothing is fetched: styles are inline, the plots are inline SVG drawn by `plotters`,
//! text uses the reader's own sans-serif font, and there is no script at all.

use std::fmt::Write as _;

use plotters::prelude::*;

use crate::compare::{self, Comparison};
use crate::comparison_report::{self, fmt_ci_pct, fmt_mdc};
use crate::format::{fmt_cycles, fmt_pct_signed, fmt_unix_utc, host_str};
use crate::report;
use crate::results::{Results, TestResult};
use crate::stats::units::Figure;
use crate::stats::verdict::Verdict;

/// One line in the plots and one block of tables: a file, or a side of an A/B run.
struct Series {
    label: String,
    results: Results,
    /// A side of an A/B run (its plan goes with the A/B table).
    ab_side: bool,
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
                    ab_side: true,
                });
                out.push(Series {
                    label: format!("{}={} (B)", ab.knob, ab.b),
                    results: b,
                    ab_side: true,
                });
            }
            _ => out.push(Series {
                label: name.clone(),
                results: r.clone(),
                ab_side: false,
            }),
        }
    }
    out
}

/// The page's sections as they are written: anchor and title, for its contents.
#[derive(Default)]
struct Page {
    body: String,
    contents: Vec<(String, String)>,
}

impl Page {
    /// A section's heading, listed in the contents.
    fn section(&mut self, id: &str, title: &str) {
        let _ = writeln!(self.body, "<h2 id=\"{id}\">{}</h2>", esc(title));
        self.contents.push((id.to_string(), title.to_string()));
    }
}

/// Renders the page.
pub fn render(files: &[(String, Results)]) -> String {
    let series = series_of(files);
    let mut p = Page::default();
    for (i, (name, r)) in files.iter().enumerate() {
        p.section(&format!("run-{}", i + 1), name);
        host_and_config(&mut p.body, r);
        overhead(&mut p.body, r);
    }
    for (i, (_, r)) in files.iter().enumerate() {
        if let (Some(cmp), Some(ab)) = (
            compare::compare_ab_run(r, crate::stats::model::THRESHOLD_PCT),
            &r.ab,
        ) {
            p.section(
                &format!("ab-{}", i + 1),
                &format!("A/B: {} = {} vs {}", ab.knob, ab.a, ab.b),
            );
            let _ = writeln!(
                p.body,
                "<p>{} round(s), each test's two sides back to back (A B, then B A), each in a fresh VM; pairs of rounds are the units.</p>",
                r.config.rounds
            );
            let labels = [
                format!("{}={}", ab.knob, ab.a),
                format!("{}={}", ab.knob, ab.b),
            ];
            comparison_table(&mut p.body, &cmp, &labels);
            // Tests whose sides' medians and change disagree, a host knob's switches,
            // and a planned design's target, pilot, and the tests short of the target.
            lines(
                &mut p.body,
                "",
                &[
                    comparison_report::disagreement_lines(&cmp),
                    crate::report::host_switch_lines(&ab.knob, &ab.host),
                    crate::report::plan_lines(r),
                ]
                .concat(),
            );
        }
    }
    if files.len() >= 2 && files.iter().all(|(_, r)| r.ab.is_none()) {
        let (first, base) = &files[0];
        for (i, (name, other)) in files.iter().enumerate().skip(1) {
            p.section(
                &format!("comparison-{i}"),
                &format!("Comparison: {first} → {name}"),
            );
            let cmp = compare::compare(base, other, crate::stats::model::THRESHOLD_PCT);
            lines(&mut p.body, "warn", &cmp.warnings);
            comparison_table(&mut p.body, &cmp, &["before".into(), "after".into()]);
        }
    }
    let mut footnotes = Footnotes::default();
    for (i, s) in series.iter().enumerate() {
        p.section(
            &format!("summary-{}", i + 1),
            &format!("Summary: {}", s.label),
        );
        summary_table(&mut p.body, s, &mut footnotes);
        details(&mut p.body, s);
    }
    p.section("distributions", "Distributions");
    p.body.push_str("<p>CDF of the paired net cycles per iteration (sample minus the empty loop measured just before it in the same VM; raw cycles for <code>loop_overhead</code>), all rounds; the x axis spans the 5th to the 95th percentile, the tails beyond are drawn at the edges.</p>\n");
    // One legend for every plot (each series has the same colour in all of them), kept
    // out of the plots so that it covers no data.
    let keys: Vec<(String, RGBColor)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.label.clone(), COLOURS[i % COLOURS.len()]))
        .collect();
    legend(&mut p.body, &keys);
    p.body.push_str("<div class=\"plots\">");
    for name in test_names(&series) {
        // The plot's own caption names the test; no second name under it.
        if let Some(svg) = cdf_svg(&name, &series) {
            let _ = writeln!(
                p.body,
                "<figure class=\"cdf\" data-test=\"{}\">{svg}</figure>",
                esc(&name)
            );
        }
    }
    p.body.push_str("</div>\n");
    p.section("phases", "Phases of a userspace exit");
    match phases_svg(&series) {
        Some(svg) => {
            let _ = writeln!(
                p.body,
                "<p>Median host cycles from the guest's exiting instruction to the VMM seeing the exit (exit leg), in the VMM (handling), and from re-entering KVM_RUN to the guest resuming (entry leg). The bars share a logarithmic axis, so that the VMM's short share shows beside the long legs; the table gives the figures.</p>"
            );
            let keys: Vec<(String, RGBColor)> = PHASE_NAMES
                .iter()
                .zip(COLOURS)
                .map(|(n, c)| (n.to_string(), c))
                .collect();
            legend(&mut p.body, &keys);
            let _ = writeln!(
                p.body,
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
                p.body,
                "<p class=\"no-phases\">Not measured: {}</p>",
                esc(&why)
            );
        }
    }
    let mut page = String::from(HEAD);
    page.push_str("<h1>exitlab report</h1>\n");
    caveat(&mut page, files);
    page.push_str("<nav class=\"contents\"><b>Contents</b>");
    for (id, title) in &p.contents {
        let _ = write!(page, " <a href=\"#{id}\">{}</a>", esc(title));
    }
    page.push_str("</nav>\n");
    page.push_str(&p.body);
    page.push_str("</body></html>\n");
    page
}

const HEAD: &str = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>exitlab report</title>\n<style>\nbody{font-family:sans-serif;margin:1.5em;color:#222;max-width:1400px}\ntable{border-collapse:collapse;margin:.5em 0 1em;font-size:.92em}\nth,td{border:1px solid #ccc;padding:.15em .4em;text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\ntable.summary{font-size:.84em}\nth:first-child,td:first-child,th.text,td.text{text-align:left}\nth{background:#f0f0f0;white-space:normal}\n.slower{color:#b00;font-weight:bold}.faster{color:#070;font-weight:bold}\n.warn li{color:#a60}\n.fail{color:#b00;font-weight:bold}\n.caveat{background:#fff4d6;border-left:4px solid #d90;padding:.4em .8em}\n.contents a{margin-left:.8em}\nul.lines{margin:.3em 0 1em;padding-left:1.2em}\npre{background:#f7f7f7;padding:.5em;white-space:pre-wrap}\nh3{font-size:1em;margin:1em 0 .2em}\ndl{display:grid;grid-template-columns:max-content auto;gap:.1em 1em}dt{font-weight:bold}dd{margin:0}\n.plots{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0}\n.legend{display:flex;flex-wrap:wrap;gap:.3em 1.5em;font-size:.9em}.key{display:inline-block;width:1.6em;height:.7em;margin-right:.4em;vertical-align:middle}\n.phases-wrap{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}\n.footnote{font-size:.9em}\n</style></head><body>\n";

/// The files whose host's exit costs are not hardware figures, said before anything
/// else in the text report's words ([`crate::format::caveat`]), once per caveat.
fn caveat(page: &mut String, files: &[(String, Results)]) {
    let mut hosts: Vec<(String, Vec<&str>)> = Vec::new();
    for (name, r) in files {
        let Some(c) = crate::format::caveat(&r.host) else {
            continue;
        };
        let why = c
            .strip_prefix("not hardware figures: ")
            .unwrap_or(&c)
            .to_string();
        match hosts.iter_mut().find(|(w, _)| *w == why) {
            Some((_, names)) => names.push(name),
            None => hosts.push((why, vec![name])),
        }
    }
    for (why, names) in hosts {
        let _ = writeln!(
            page,
            "<p class=\"caveat\"><b>Not hardware figures</b> ({}): {}</p>",
            esc(&names.join(", ")),
            esc(&why)
        );
    }
}

/// A knob's value as the text report says it (`cpus` 0: as each test needs).
fn knob_value(name: &str, value: &str) -> String {
    match (name, value) {
        ("cpus", "0") => "as each test needs".to_string(),
        _ => value.to_string(),
    }
}

fn host_and_config(page: &mut String, r: &Results) {
    page.push_str("<dl>\n");
    let mut row = |k: &str, v: String, class: &str| {
        let _ = writeln!(
            page,
            "<dt>{}</dt><dd class=\"{class}\">{}</dd>",
            esc(k),
            esc(&v)
        );
    };
    row(
        "run",
        format!(
            "{}, {:.1} s wall",
            fmt_unix_utc(r.started_at_unix),
            r.wall_seconds
        ),
        "",
    );
    row("run id", crate::identity::run_id(r), "");
    row("exitlab", r.tool.version.clone(), "");
    if let Some(p) = &r.provenance {
        row("revision", p.git_revision.clone(), "");
        row("command", p.command_line.join(" "), "");
        if let Some(h) = &p.hostname {
            row("host name", h.clone(), "");
        }
    }
    for (pointer, what) in [
        ("/cpu/model_name", "CPU"),
        ("/cpu/microcode", "microcode"),
        ("/kernel/release", "kernel"),
    ] {
        if let Some(v) = host_str(&r.host, pointer) {
            row(what, v.to_string(), "");
        }
    }
    let (kind, hardware) = crate::identity::host_kind(r);
    if let Some(v) = host_str(&r.host, "/virtualization/summary") {
        let class = if hardware == "no" { "caveat" } else { "" };
        row("virtualization", format!("{v} (host kind: {kind})"), class);
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
        "",
    );
    if let Some(irq) = &c.irq {
        let describe = irq.describe();
        let v = describe.strip_prefix("interrupts: ").unwrap_or(&describe);
        row("interrupts", v.to_string(), "");
    }
    if !c.knobs.is_empty() {
        row(
            "knobs",
            c.knobs
                .iter()
                .map(|(k, v)| format!("{k}={}", knob_value(k, v)))
                .collect::<Vec<_>>()
                .join(", "),
            "",
        );
    }
    if let Some(why) = &r.incomplete {
        row("INCOMPLETE", why.clone(), "fail");
    }
    // The virtualization row says already what a note repeating the host's summary would.
    for n in r.notes_beyond_host() {
        row("note", n.clone(), "");
    }
    page.push_str("</dl>\n");
}

/// The VMM-overhead experiment of a run (against the bare loop, and the in-process
/// stamps), as the text report prints it.
fn overhead(page: &mut String, r: &Results) {
    let mut text = Vec::new();
    if let Some(f) = &r.floor {
        text.extend(crate::report::render_floor(f));
    }
    if let Some(o) = &r.vmm_overhead {
        text.extend(crate::report::stamp_lines(o));
    }
    if !text.is_empty() {
        let _ = writeln!(
            page,
            "<h3>VMM overhead</h3><pre class=\"overhead\">{}</pre>",
            esc(&text.join("\n"))
        );
    }
}

/// A subsection of `lines` under `title` (nothing when there are none).
fn subsection(page: &mut String, title: &str, class: &str, body: &[String]) {
    if !body.is_empty() {
        let _ = writeln!(page, "<h3>{}</h3>", esc(title));
        lines(page, class, body);
    }
}

/// `lines` as a list of class `class` (nothing when there are none).
fn lines(page: &mut String, class: &str, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    let _ = write!(page, "<ul class=\"lines {class}\">");
    for l in lines {
        let _ = write!(page, "<li>{}</li>", esc(l.trim_start()));
    }
    page.push_str("</ul>\n");
}

/// What the text report prints below its table, for one series, in subsections:
/// tests skipped or stopped (with a stuck vCPU's registers and stack folded), where the
/// exits were handled, the exit checks, the KVM counters' cross-check, the signs, the
/// plan, and the host's view of each exit.
fn details(page: &mut String, s: &Series) {
    let r = &s.results;
    let tests = &r.tests;
    let stopped: Vec<&TestResult> = tests
        .iter()
        .filter(|t| t.status.reason().is_some())
        .collect();
    if !stopped.is_empty() {
        let _ = writeln!(
            page,
            "<h3>Skipped or not completed</h3><ul class=\"lines stopped\">"
        );
        for t in stopped {
            let reason = t.status.reason().unwrap_or_default();
            let (first, rest) = reason.split_once('\n').unwrap_or((reason, ""));
            let _ = write!(
                page,
                "<li>{} {}: {}",
                esc(&t.name),
                t.status.word(),
                esc(first)
            );
            if !rest.trim().is_empty() {
                let _ = write!(
                    page,
                    "<details><summary>registers and stack</summary><pre>{}</pre></details>",
                    esc(rest.trim_end())
                );
            }
            page.push_str("</li>\n");
        }
        page.push_str("</ul>\n");
    }
    subsection(
        page,
        "Where the exits were handled",
        "",
        &report::handling_lines(tests)
            .into_iter()
            // The text report's footnote mark: here the lines are a section of their own.
            .map(|l| l.strip_prefix("* ").map_or(l.clone(), str::to_string))
            .chain(report::per_vcpu_lines(tests))
            .collect::<Vec<_>>(),
    );
    let checks = report::exit_check_lines(tests);
    let failed = checks.iter().any(|l| l.contains("FAILED"));
    subsection(
        page,
        "Exit checks",
        if failed { "fail" } else { "" },
        &checks,
    );
    subsection(page, "KVM counters", "", &report::kvm_counter_lines(r));
    let signs: Vec<String> = report::round_spread_line(r)
        .into_iter()
        .chain(report::signs_lines(tests))
        .collect();
    subsection(
        page,
        "Signs (reported beside the figures, never set aside)",
        "",
        &signs,
    );
    if !s.ab_side {
        subsection(page, "Plan", "", &report::plan_lines(r));
    }
    let host: Vec<String> = tests.iter().filter_map(report::host_time_line).collect();
    subsection(page, "KVM_RUN and the VMM, per exit", "", &host);
}

/// The summary tables' footnotes, each under the first table that needs it.
#[derive(Default)]
struct Footnotes {
    figure: bool,
    starred: bool,
}

fn summary_table(page: &mut String, s: &Series, footnotes: &mut Footnotes) {
    // The text report's columns, the figure's first, with its interval and its rounds
    // beside it: test, observed, apic | net median, 95% CI, median ns, rounds | the raw
    // statistics of all samples.
    let text = report::TABLE_HEADERS;
    let at = |h: &str| text.iter().position(|x| *x == h).unwrap_or(0);
    let (net, ns) = (at("net median"), at("median ns"));
    let order = |cells: Vec<String>, ci: String, rounds: String| -> Vec<String> {
        let mut out: Vec<String> = cells[..3].to_vec();
        out.extend([cells[net].clone(), ci, cells[ns].clone(), rounds]);
        out.extend(
            cells
                .iter()
                .enumerate()
                .filter(|(i, _)| *i >= 3 && *i != net && *i != ns)
                .map(|(_, c)| c.clone()),
        );
        out
    };
    let headers = order(
        text.iter().map(|h| h.to_string()).collect(),
        "95% CI (rounds)".into(),
        "rounds".into(),
    );
    page.push_str("<table class=\"summary\"><tr>");
    for (i, h) in headers.iter().enumerate() {
        let class = if i < 3 { " class=\"text\"" } else { "" };
        let _ = write!(page, "<th{class}>{}</th>", esc(h));
    }
    page.push_str("</tr>\n");
    let mut starred = false;
    for t in &s.results.tests {
        let ci = crate::stats::units::central(t)
            .and_then(|c| c.interval())
            .map_or("-".into(), |[lo, hi]| {
                format!("{}..{}", fmt_cycles(lo), fmt_cycles(hi))
            });
        let handled = report::handled_cell(t);
        starred |= handled.ends_with('*');
        let mut cells = vec![t.name.clone(), handled, report::apic_cell(t)];
        cells.extend(report::numeric_cells(t, s.results.config.tsc_khz));
        page.push_str("<tr>");
        for (i, c) in order(cells, ci, t.rounds.len().to_string())
            .iter()
            .enumerate()
        {
            let class = if i < 3 { " class=\"text\"" } else { "" };
            let _ = write!(page, "<td{class}>{}</td>", esc(c));
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</table>\n");
    if !std::mem::replace(&mut footnotes.figure, true) {
        let _ = writeln!(
        page,
        "<p class=\"footnote\">{}; 95% CI (rounds): its 95% interval with rounds as units; median to sd: raw cycles per iteration over all samples, the empty loop not subtracted.</p>",
        esc(report::FIGURE_LINE)
    );
    }
    if let Some(line) = report::vmexit_line(&s.results) {
        let _ = writeln!(page, "<p class=\"footnote\">{}</p>", esc(&line));
    }
    if starred && !std::mem::replace(&mut footnotes.starred, true) {
        page.push_str(
            "<p class=\"footnote\">* observed differs from where the exit is expected to be \
             handled (<code>bench --list</code>, column <i>expected</i>); <i>not observed</i>: \
             no userspace exit, and KVM's exit counter counted none beyond the empty loop's, so \
             where it was handled could not be seen.</p>\n",
        );
    }
}

fn comparison_table(page: &mut String, cmp: &Comparison, labels: &[String; 2]) {
    let _ = writeln!(page, "<p>{}</p>", esc(&comparison_report::figure_line(cmp)));
    let units = cmp
        .tests
        .first()
        .map_or("rounds", |t| t.change.unit.name(2));
    let _ = writeln!(
        page,
        "<table class=\"verdicts\"><tr><th class=\"text\">test</th><th>{}</th><th>{}</th><th>change</th><th>95% CI</th><th>min detectable</th><th>{units}</th><th class=\"text\">verdict</th></tr>",
        esc(&labels[0]),
        esc(&labels[1]),
    );
    for t in &cmp.tests {
        let c = &t.change;
        let class = match c.verdict {
            Verdict::Slower => " slower",
            Verdict::Faster => " faster",
            _ => "",
        };
        let name = if t.figure == Figure::Raw {
            format!("{} (raw)", t.name)
        } else {
            t.name.clone()
        };
        let units = if c.units[0] == c.units[1] {
            c.units[0].to_string()
        } else {
            format!("{}/{}", c.units[0], c.units[1])
        };
        let _ = writeln!(
            page,
            "<tr><td class=\"text\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{units}</td><td class=\"text{class}\">{}</td></tr>",
            esc(&name),
            fmt_cycles(c.figures[0]),
            fmt_cycles(c.figures[1]),
            c.pct.map_or("-".into(), fmt_pct_signed),
            esc(&fmt_ci_pct(c.ci95_pct)),
            esc(&fmt_mdc(c.min_detectable_pct)),
            c.verdict.as_str()
        );
    }
    page.push_str("</table>\n");
    if !cmp.tests.is_empty() {
        let _ = writeln!(
            page,
            "<p class=\"footnote\">{}</p>",
            esc(&comparison_report::verdict_rule_line(cmp))
        );
    }
    lines(
        page,
        "notes",
        &comparison_report::comparison_notes(cmp, [labels[0].as_str(), labels[1].as_str()]),
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
        assert!(!page.contains("* observed differs"), "{page}");
        let t = r
            .tests
            .iter_mut()
            .find(|t| t.name == "inl_from_qemu")
            .unwrap();
        t.handled = Some(crate::results::Handling::NotObserved);
        let page = render(&[("a.json".into(), r)]);
        assert!(
            page.contains("<td class=\"text\">not observed*</td>"),
            "{page}"
        );
        assert!(
            page.contains("<p class=\"footnote\">* observed differs from where the exit"),
            "{page}"
        );
    }

    #[test]
    fn a_note_that_repeats_the_virtualization_row_is_shown_once() {
        let mut r = sample_results();
        let summary = "nested, paravirtual: exit costs are not hardware figures";
        r.host = serde_json::json!({ "virtualization": { "summary": summary, "kind": "nested" } });
        r.notes = vec![summary.to_string(), "another note".to_string()];
        let page = render(&[("a.json".into(), r)]);
        // Once in the host's rows, never as a note; the caveat is in the text's words.
        assert_eq!(page.matches(summary).count(), 1, "{page}");
        assert!(
            page.contains("<b>Not hardware figures</b> (a.json): this host is a VM"),
            "{page}"
        );
        assert!(
            !page.contains(&format!("<dt>note</dt><dd class=\"\">{summary}")),
            "{page}"
        );
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
        let r = crate::openmetrics::tests::ab_run(1.5);
        let page = render(&[("ab.json".into(), r)]);
        assert!(page.contains("A/B: ring = 0 vs 3"));
        assert!(
            page.contains("<td class=\"text slower\">slower</td>"),
            "{page}"
        );
        assert!(page.contains("ring=0 (A)") && page.contains("ring=3 (B)"));
    }

    /// The page's rows of the table of class `class`, each as its cells' (tag, class,
    /// text): `th` or `td`.
    fn rows<'a>(page: &'a str, class: &str) -> Vec<Vec<(&'a str, &'a str, &'a str)>> {
        let start = page
            .find(&format!("<table class=\"{class}\">"))
            .unwrap_or_else(|| panic!("no {class} table: {page}"));
        let table = &page[start..start + page[start..].find("</table>").unwrap()];
        table
            .split("<tr>")
            .skip(1)
            .map(|row| {
                row.split("</t")
                    .filter_map(|c| {
                        let at = c.rfind("<t")?;
                        let (open, text) = c[at..].split_once('>')?;
                        let tag = &open[1..3];
                        let class = open
                            .split_once("class=\"")
                            .map_or("", |(_, rest)| rest.split('"').next().unwrap_or(""));
                        Some((tag, class, text))
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_host_whose_figures_are_not_hardware_figures_is_said_at_the_top() {
        let mut r = sample_results();
        let summary = "KVM here is paravirtual (kvm_pvm): exit costs are not hardware figures";
        r.host = serde_json::json!({
            "virtualization": { "kind": "nested_paravirtual", "summary": summary }
        });
        let page = render(&[("a.json".into(), r.clone()), ("b.json".into(), r.clone())]);
        let caveat = page
            .find("<p class=\"caveat\"><b>Not hardware figures</b> (a.json, b.json): ")
            .unwrap_or_else(|| panic!("{page}"));
        // Before anything else on the page, once for both files.
        assert!(caveat < page.find("<nav").unwrap(), "{page}");
        assert_eq!(page.matches("<p class=\"caveat\">").count(), 1, "{page}");
        assert!(page.contains("(host kind: nested_paravirtual)"), "{page}");
        r.host = serde_json::json!({
            "virtualization": { "kind": "bare_metal", "summary": "bare metal: VT-x" }
        });
        let page = render(&[("a.json".into(), r)]);
        assert!(!page.contains("Not hardware figures"), "{page}");
    }

    #[test]
    fn knobs_read_as_the_text_report_says_them_and_the_run_has_its_id() {
        let mut r = sample_results();
        r.config.knobs.insert("cpus".into(), "0".into());
        r.config.knobs.insert("apic".into(), "xapic".into());
        let page = render(&[("a.json".into(), r.clone())]);
        assert!(page.contains("cpus=as each test needs"), "{page}");
        assert!(!page.contains("cpus=0"), "{page}");
        assert!(
            page.contains(&format!(
                "<dt>run id</dt><dd class=\"\">{}</dd>",
                crate::identity::run_id(&r)
            )),
            "{page}"
        );
    }

    #[test]
    fn the_comparison_table_lines_up_and_says_what_the_text_says_under_it() {
        let a = sample_results();
        let mut b = sample_results();
        for t in &mut b.tests {
            for rf in &mut t.rounds {
                rf.net_median = rf.net_median.map(|n| n * 1.5);
                rf.median *= 1.5;
            }
        }
        let page = render(&[("a.json".into(), a.clone()), ("b.json".into(), b.clone())]);
        let rows = rows(&page, "verdicts");
        let header = &rows[0];
        assert_eq!(header.len(), 8, "{rows:?}");
        assert!(header.iter().all(|c| c.0 == "th"), "{rows:?}");
        for row in &rows[1..] {
            assert_eq!(row.len(), header.len(), "{row:?}");
            // Text columns (the test, the verdict) left, the figures right, in the header
            // as in every row.
            for (h, c) in header.iter().zip(row) {
                assert_eq!(h.1, c.1.split(' ').next().unwrap_or(""), "{h:?} {c:?}");
            }
        }
        assert_eq!(header[7], ("th", "text", "verdict"));
        assert_eq!(header[6].2, "rounds");
        // The empty loop's figure is raw, and the row says so, as the text's does.
        assert!(
            rows.iter().any(|r| r[0].2 == "loop_overhead (raw)"),
            "{rows:?}"
        );
        let cmp = compare::compare(&a, &b, crate::stats::model::THRESHOLD_PCT);
        for line in comparison_report::comparison_notes(&cmp, ["before", "after"])
            .into_iter()
            .chain([
                comparison_report::verdict_rule_line(&cmp),
                comparison_report::figure_line(&cmp),
            ])
        {
            assert!(page.contains(&esc(&line)), "{line}: {page}");
        }
        assert!(
            page.contains("screen: one run a side cannot gate"),
            "{page}"
        );
        assert!(page.contains("slower in this screen: "), "{page}");
    }

    #[test]
    fn what_the_text_report_prints_below_its_table_has_a_section_on_the_page() {
        let mut r = sample_results();
        let dnc = r.tests.iter_mut().find(|t| t.name == "ipi").unwrap();
        dnc.status = crate::results::TestStatus::DidNotComplete {
            reason: "no progress for 3.0 s\nvCPU registers when stopped:\nrip=0x100883 <b>".into(),
        };
        let cpuid = r.tests.iter_mut().find(|t| t.name == "cpuid").unwrap();
        cpuid.exit_check = Some(crate::results::ExitCheck {
            expected_user_exits: 0,
            observed_user_exits: 7,
            passed: false,
            detail: "kernel-handled".into(),
            observed: Some(true),
        });
        cpuid.kvm_counters = Some(crate::results::KvmCounters {
            deltas: Default::default(),
            checks: vec![crate::results::CounterCheck {
                counter: "io_exits".into(),
                kvm: 3,
                exitlab: 7,
                verdict: crate::results::CounterVerdict::Mismatch,
            }],
        });
        // A round far out: a sign.
        cpuid.rounds[0].net_median = Some(90_000.0);
        r.plan = Some(crate::results::Plan {
            target_pct: 1.0,
            by_default: false,
            budget_seconds: 60.0,
            pilot_units: 10,
            seconds: 12.0,
            tests: Vec::new(),
        });
        r.floor = Some(crate::results::FloorView::NotMeasured {
            reason: "tracefs is not mounted".into(),
        });
        let page = render(&[("a.json".into(), r.clone())]);
        let mut want: Vec<String> = [
            report::exit_check_lines(&r.tests),
            report::kvm_counter_lines(&r),
            report::signs_lines(&r.tests),
            report::plan_lines(&r),
            report::render_floor(r.floor.as_ref().unwrap()),
        ]
        .concat();
        want.push("ipi did-not-complete: no progress for 3.0 s".into());
        want.push("vmcall skipped: vmcall never completes on this host".into());
        for line in want {
            assert!(page.contains(&esc(line.trim_start())), "{line}: {page}");
        }
        for section in [
            "Skipped or not completed",
            "Exit checks",
            "KVM counters",
            "Signs (reported beside the figures, never set aside)",
            "Plan",
            "VMM overhead",
        ] {
            assert!(
                page.contains(&format!(">{section}</h3>")),
                "{section}: {page}"
            );
        }
        // A stuck vCPU's registers, escaped, folded under its test.
        assert!(
            page.contains("<details><summary>registers and stack</summary><pre>vCPU registers when stopped:\nrip=0x100883 &lt;b&gt;</pre></details>"),
            "{page}"
        );
        assert!(page.contains("<ul class=\"lines fail\">"), "{page}");
        // Every section is in the page's contents.
        let nav = &page[page.find("<nav").unwrap()..page.find("</nav>").unwrap()];
        for id in ["run-1", "summary-1", "distributions", "phases"] {
            assert!(nav.contains(&format!("href=\"#{id}\"")), "{nav}");
            assert!(page.contains(&format!(" id=\"{id}\"")), "{id}");
        }
    }
}

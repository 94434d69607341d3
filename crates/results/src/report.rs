//! Human-readable renderings of a [`Results`]: a fixed-width terminal table
//! and a GitHub-flavoured Markdown table.
//!
//! Cycle counts are shown as whole numbers with `,` thousands separators.

use std::fmt::Write as _;

use crate::results::{CounterVerdict, Handling, KvmCounters, Results, TestResult, TestStatus};
use crate::stats::Summary;

/// Column alignment in [`layout`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Padded on the right.
    Left,
    /// Padded on the left (numbers).
    Right,
}

/// Lays out a fixed-width table: a header row, a rule, then the rows.
/// Columns are separated by two spaces; trailing spaces are trimmed.
pub fn layout(headers: &[&str], aligns: &[Align], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, cell) in cells.enumerate() {
            let width = widths.get(i).copied().unwrap_or(0);
            let pad = width.saturating_sub(cell.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if aligns.get(i) == Some(&Align::Right) {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                s.push_str(&" ".repeat(pad));
            }
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
        s
    };
    let mut out = line(&mut headers.iter().copied());
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    out.push_str(&line(&mut rule.iter().map(String::as_str)));
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// A number of cycles as a whole number with thousands separators;
/// `-` for NaN or infinite values.
pub fn fmt_cycles(value: f64) -> String {
    if !value.is_finite() {
        return "-".to_string();
    }
    let rounded = value.round();
    let negative = rounded < 0.0;
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if negative {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration in nanoseconds: two decimals below 10, one below 1000,
/// whole numbers with separators above; `-` for non-finite values.
pub fn fmt_ns(value: f64) -> String {
    if !value.is_finite() {
        "-".to_string()
    } else if value.abs() < 10.0 {
        format!("{value:.2}")
    } else if value.abs() < 1000.0 {
        format!("{value:.1}")
    } else {
        fmt_cycles(value)
    }
}

/// A signed percentage with one decimal, e.g. `+4.2%`.
pub(crate) fn fmt_pct_signed(value: f64) -> String {
    if value.is_finite() {
        format!("{value:+.1}%")
    } else {
        "-".to_string()
    }
}

/// A signed number of cycles with thousands separators, e.g. `+1,234` or `-52`.
fn fmt_cycles_signed(value: f64) -> String {
    if value.is_finite() && value >= 0.0 {
        format!("+{}", fmt_cycles(value))
    } else {
        fmt_cycles(value)
    }
}

/// A Unix time as `YYYY-MM-DD HH:MM:SS UTC` (through the `time` crate); a time beyond
/// what it represents (year 9999) is shown as seconds since the epoch.
pub(crate) fn fmt_unix_utc(secs: u64) -> String {
    const FORMAT: &[time::format_description::FormatItem<'static>] =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(FORMAT).ok())
        .unwrap_or_else(|| format!("{secs} s after 1970-01-01 UTC"))
}

/// A string from the host block at a JSON pointer, if present and non-empty.
pub(crate) fn host_str<'a>(host: &'a serde_json::Value, pointer: &str) -> Option<&'a str> {
    host.pointer(pointer)
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// The "handled" cell: the observed handling (with `*` when it differs
/// from the expected one), or the status word for tests that are not ok.
fn handled_cell(t: &TestResult) -> String {
    match &t.status {
        TestStatus::Ok => match t.handled {
            Some(h) if !h.agrees_with(t.expected_handling) => format!("{}*", h.label()),
            Some(h) => h.label(),
            None => "?".to_string(),
        },
        other => other.word().to_string(),
    }
}

fn opt_cycles(v: Option<f64>) -> String {
    v.map(fmt_cycles).unwrap_or_else(|| "-".to_string())
}

fn median_ns_cell(t: &TestResult) -> String {
    match crate::central::figure_ns(t) {
        Some((ns, true)) => fmt_ns(ns),
        Some((ns, false)) => format!("{} (raw)", fmt_ns(ns)),
        None => "-".to_string(),
    }
}

/// Host and configuration summary lines shared by both renderings.
fn summary_lines(results: &Results) -> Vec<String> {
    let mut lines = Vec::new();
    lines.push(format!(
        "{} {} bench, started {}, {:.1} s wall",
        results.tool.name,
        results.tool.version,
        fmt_unix_utc(results.started_at_unix),
        results.wall_seconds
    ));
    let mut host = Vec::new();
    if let Some(cpu) = host_str(&results.host, "/cpu/model_name") {
        host.push(cpu.to_string());
    }
    if let Some(kernel) = host_str(&results.host, "/kernel/release") {
        host.push(format!("kernel {kernel}"));
    }
    if let Some(virt) = host_str(&results.host, "/virtualization/summary") {
        host.push(virt.to_string());
    }
    if !host.is_empty() {
        lines.push(format!("host: {}", host.join("; ")));
    }
    let c = &results.config;
    let mut cfg = format!(
        "TSC {} kHz ({}); ring {}; {} samples x {} iterations; warmup {}",
        fmt_cycles(c.tsc_khz as f64),
        c.tsc_khz_source,
        c.ring,
        fmt_cycles(c.samples as f64),
        fmt_cycles(c.batch as f64),
        fmt_cycles(c.warmup as f64)
    );
    if let Some(cpu) = c.pin {
        let _ = write!(cfg, "; pinned to CPU {cpu}");
    }
    lines.push(cfg);
    if let Some(irq) = &c.irq {
        lines.push(irq.describe());
    }
    lines
}

/// One phase of a round trip: label, median cycles, percent of the round trip.
type PhaseShare = (&'static str, f64, f64);

/// Round-trip share of each phase and the round trip, which is the sum of
/// the three phase medians.
fn phase_shares(t: &TestResult) -> Option<(Vec<PhaseShare>, f64)> {
    let p = t.phases.as_ref()?;
    let parts = [
        ("exit leg", p.exit_leg.median),
        ("VMM handling", p.handling.median),
        ("entry leg", p.entry_leg.median),
    ];
    let total: f64 = parts.iter().map(|(_, m)| m).sum();
    let shares = parts
        .iter()
        .map(|&(label, m)| {
            let pct = if total > 0.0 {
                100.0 * m / total
            } else {
                f64::NAN
            };
            (label, m, pct)
        })
        .collect();
    Some((shares, total))
}

/// How the rounds of each test agreed: the spread (max / min − 1) of the rounds'
/// medians, as its median over the tests and its worst test.
fn round_spread_line(results: &Results) -> Option<String> {
    let mut spreads: Vec<(f64, &str)> = results
        .tests
        .iter()
        .filter_map(|t| {
            let s = t.round_spread.as_ref()?;
            s.spread.is_finite().then_some((s.spread, t.name.as_str()))
        })
        .collect();
    if spreads.is_empty() {
        return None;
    }
    spreads.sort_by(|a, b| a.0.total_cmp(&b.0));
    let sorted: Vec<f64> = spreads.iter().map(|s| s.0).collect();
    let mid = crate::stats::percentile(&sorted, 50.0);
    let (worst, name) = spreads[spreads.len() - 1];
    Some(format!(
        "spread of the rounds' medians (max/min - 1, {} tests): median {:.1}%, worst {:.1}% ({name})",
        spreads.len(),
        100.0 * mid,
        100.0 * worst
    ))
}

/// The cross-check of KVM's counters with exitlab's counts: how many tests were checked,
/// one line per mismatch, and one line per counter the host did not count, naming each
/// test and what exitlab saw. Counters that agree or only add the kernel's exits are
/// not listed.
fn kvm_counter_lines(results: &Results) -> Vec<String> {
    let checked: Vec<(&TestResult, &KvmCounters)> = results
        .tests
        .iter()
        .filter_map(|t| Some((t, t.kvm_counters.as_ref()?)))
        .filter(|(_, k)| !k.checks.is_empty())
        .collect();
    if checked.is_empty() {
        return Vec::new();
    }
    let mut lines = Vec::new();
    let mut mismatches = 0;
    // Counter name -> the tests whose exits it did not count, with exitlab's counts.
    let mut uncounted: Vec<(&str, Vec<String>)> = Vec::new();
    for (t, k) in &checked {
        for c in &k.checks {
            match c.verdict {
                CounterVerdict::Agree | CounterVerdict::KernelHandled => {}
                CounterVerdict::NotCounted => {
                    let entry = format!("{} ({})", t.name, fmt_cycles(c.exitlab as f64));
                    match uncounted.iter_mut().find(|(n, _)| *n == c.counter) {
                        Some((_, tests)) => tests.push(entry),
                        None => uncounted.push((&c.counter, vec![entry])),
                    }
                }
                CounterVerdict::Mismatch => {
                    mismatches += 1;
                    lines.push(format!(
                        "  MISMATCH {}: {} KVM {}, exitlab {}",
                        t.name,
                        c.counter,
                        fmt_cycles(c.kvm as f64),
                        fmt_cycles(c.exitlab as f64)
                    ));
                }
            }
        }
    }
    for (counter, tests) in uncounted {
        lines.push(format!(
            "  {counter} not counted by the host (KVM 0) in {} tests, exitlab saw: {}",
            tests.len(),
            tests.join(", ")
        ));
    }
    let head = if mismatches == 0 {
        format!(
            "KVM counters (binary stats) against exitlab's counts, {} tests: no mismatch",
            checked.len()
        )
    } else {
        format!(
            "KVM counters (binary stats) against exitlab's counts, {} tests: {mismatches} MISMATCH(ES)",
            checked.len()
        )
    };
    lines.insert(0, head);
    lines
}

/// The lines printed below the table (reasons, handling mismatches, phases,
/// VMM-side timings, overhead, exit checks, notes).
fn detail_lines(results: &Results) -> Vec<String> {
    let mut lines = Vec::new();
    for t in &results.tests {
        if let Some(reason) = t.status.reason() {
            lines.push(format!("{} {}: {}", t.name, t.status.word(), reason));
        }
    }
    lines.extend(crate::irq::per_vcpu_lines(&results.tests));
    let mut not_observed = Vec::new();
    for t in &results.tests {
        if let (TestStatus::Ok, Some(h)) = (&t.status, t.handled) {
            if h == Handling::NotObserved && !h.agrees_with(t.expected_handling) {
                not_observed.push(format!(
                    "{} (expected {})",
                    t.name,
                    t.expected_handling.as_str()
                ));
            } else if !h.agrees_with(t.expected_handling) {
                lines.push(format!(
                    "* {}: handled in {}, expected {}",
                    t.name,
                    h.label(),
                    t.expected_handling.as_str()
                ));
            }
        }
    }
    if !not_observed.is_empty() {
        lines.push(format!(
            "* where it was handled was not observed (no userspace exit, and KVM's exit counter counted none beyond the empty loop's): {}",
            not_observed.join(", ")
        ));
    }
    lines.extend(kvm_counter_lines(results));
    lines.extend(round_spread_line(results));
    lines.extend(crate::central::outliers_line(&results.tests));
    if results
        .tests
        .iter()
        .any(|t| t.median_ns.is_some() && !t.median_ns_is_net)
    {
        lines.push(
            "(raw): nanoseconds of the raw median; the loop overhead is not subtracted".to_string(),
        );
    }
    for t in &results.tests {
        if let Some((shares, total)) = phase_shares(t) {
            let parts: Vec<String> = shares
                .iter()
                .map(|(label, m, pct)| {
                    if pct.is_finite() {
                        format!("{label} {} ({pct:.1}%)", fmt_cycles(*m))
                    } else {
                        format!("{label} {}", fmt_cycles(*m))
                    }
                })
                .collect();
            lines.push(format!(
                "{} phases (median cycles): {}; round trip {}",
                t.name,
                parts.join(", "),
                fmt_cycles(total)
            ));
        }
    }
    for t in &results.tests {
        let mut parts = Vec::new();
        if let Some(s) = &t.kvm_run_cycles {
            parts.push(format!("KVM_RUN median {} cycles", fmt_cycles(s.median)));
        }
        if let Some(s) = &t.userspace_share {
            parts.push(format!(
                "VMM userspace per exit median {} cycles",
                fmt_cycles(s.median)
            ));
        }
        if !parts.is_empty() {
            lines.push(format!("{}: {}", t.name, parts.join("; ")));
        }
    }
    if let Some(o) = &results.vmm_overhead {
        let bus = match o.bus_devices {
            Some(n) => format!(
                ", on the PC platform's bus ({n} devices, the measured port claimed by one)"
            ),
            None => ", on an unpopulated bus".to_string(),
        };
        lines.push(format!(
            "VMM overhead ({}{bus}), userspace cycles per exit:",
            o.test
        ));
        let rows = vec![
            vec![
                "full VMM".to_string(),
                fmt_cycles(o.full.p10),
                fmt_cycles(o.full.median),
            ],
            vec![
                "bare loop".to_string(),
                fmt_cycles(o.bare.p10),
                fmt_cycles(o.bare.median),
            ],
            vec![
                "ratio".to_string(),
                fmt_ratio(o.ratio_p10),
                fmt_ratio(o.ratio_median),
            ],
        ];
        let table = layout(
            &["", "p10", "median"],
            &[Align::Left, Align::Right, Align::Right],
            &rows,
        );
        lines.extend(table.lines().map(|l| format!("  {l}")));
        lines.extend(overhead_resolution(o));
    }
    let checked: Vec<&TestResult> = results
        .tests
        .iter()
        .filter(|t| t.exit_check.is_some())
        .collect();
    let failed: Vec<&TestResult> = checked
        .iter()
        .copied()
        .filter(|t| t.exit_check.as_ref().is_some_and(|c| !c.passed))
        .collect();
    if failed.is_empty() {
        if !checked.is_empty() {
            lines.push(format!(
                "exit check: all {} checked test{} passed",
                checked.len(),
                if checked.len() == 1 { "" } else { "s" }
            ));
        }
    } else {
        for t in failed {
            if let Some(c) = &t.exit_check {
                lines.push(format!(
                    "exit check FAILED for {}: expected {} userspace exits, observed {}{}",
                    t.name,
                    c.expected_user_exits,
                    c.observed_user_exits,
                    if c.detail.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", c.detail)
                    }
                ));
            }
        }
    }
    if let Some(p) = &results.process {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        lines.push(format!(
            "process memory: {:.1} MiB resident outside guest RAM at most (peak RSS {:.1} MiB including guest RAM)",
            mib(p.vmm_rss_outside_guest_bytes),
            mib(p.peak_rss_bytes)
        ));
    }
    for note in &results.notes {
        lines.push(format!("note: {note}"));
    }
    lines
}

/// What the overhead ratio rests on: the difference full − bare in cycles and in steps
/// of the stamps' resolution, and a warning when the bare loop's share is so few steps
/// that one step moves the ratio by more than 10 %.
fn overhead_resolution(o: &crate::results::Overhead) -> Vec<String> {
    let Some(step) = o.stamp_step_cycles.filter(|s| *s > 0) else {
        return Vec::new();
    };
    let step = step as f64;
    let d10 = o.full.p10 - o.bare.p10;
    let dmed = o.full.median - o.bare.median;
    if !(d10.is_finite() && dmed.is_finite()) {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "  full - bare: {} cycles at p10, {} at the median ({:.0} and {:.0} steps of {} cycles, the finest step between these stamps)",
        fmt_cycles_signed(d10),
        fmt_cycles_signed(dmed),
        d10 / step,
        dmed / step,
        fmt_cycles(step)
    )];
    let bare_steps = o.bare.p10 / step;
    if bare_steps.is_finite() && bare_steps < 10.0 {
        lines.push(format!(
            "  coarse: the bare loop's share is {bare_steps:.0} step(s) of the host's clock, so one step moves the ratio by {:.0}%; read the difference in cycles, and the kernel's view of the whole userspace share (a note from bench run as root with tracefs)",
            100.0 / bare_steps.max(1.0)
        ));
    }
    lines
}

fn fmt_ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}x")
    } else {
        "-".to_string()
    }
}

/// The APIC mode of a test's VM, with its vCPU count when it had more than one.
fn apic_cell(t: &TestResult) -> String {
    match &t.irq {
        Some(i) if i.cpus > 1 => format!("{} x{}", i.apic.name(), i.cpus),
        Some(i) => i.apic.name().to_string(),
        None => "-".into(),
    }
}

/// The numeric cells of one row, in the order of [`TABLE_HEADERS`] after
/// "test" and "handled".
fn numeric_cells(t: &TestResult) -> Vec<String> {
    let s: Option<&Summary> = t.cycles.as_ref();
    let pick = |f: fn(&Summary) -> f64| s.map(f).map(fmt_cycles).unwrap_or_else(|| "-".into());
    vec![
        pick(|s| s.median),
        pick(|s| s.p10),
        pick(|s| s.p90),
        pick(|s| s.p99),
        pick(|s| s.mean),
        pick(|s| s.stddev),
        fmt_cycles(t.samples as f64),
        opt_cycles(crate::central::net_figure(t)),
        median_ns_cell(t),
    ]
}

const TABLE_HEADERS: [&str; 12] = [
    "test",
    "handled",
    "apic",
    "median",
    "p10",
    "p90",
    "p99",
    "mean",
    "sd",
    "samples",
    "net median",
    "median ns",
];

/// Renders `results` as a fixed-width terminal table (cycles per iteration)
/// preceded by a host/configuration header and followed by details: reasons
/// for tests that did not run to completion, phase breakdowns, VMM-side
/// timings, the VMM overhead block, exit checks and notes.
pub fn render_table(results: &Results) -> String {
    let mut out = String::new();
    for line in summary_lines(results) {
        out.push_str(&line);
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "cycles per iteration; \"net median\": {}\n",
        crate::central::DESCRIPTION
    );
    let rows: Vec<Vec<String>> = results
        .tests
        .iter()
        .map(|t| {
            let mut row = vec![t.name.clone(), handled_cell(t), apic_cell(t)];
            row.extend(numeric_cells(t));
            row
        })
        .collect();
    let mut aligns = vec![Align::Right; TABLE_HEADERS.len()];
    aligns[0] = Align::Left;
    aligns[1] = Align::Left;
    aligns[2] = Align::Left;
    if rows.is_empty() {
        out.push_str("(no tests)\n");
    } else {
        out.push_str(&layout(&TABLE_HEADERS, &aligns, &rows));
    }
    let details = detail_lines(results);
    if !details.is_empty() {
        out.push('\n');
        for line in details {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// Escapes text for a Markdown table cell.
pub(crate) fn md_cell(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

/// Renders `results` as GitHub-flavoured Markdown: a short host and
/// configuration summary, a table of the tests, and the details.
pub fn render_markdown(results: &Results) -> String {
    let mut out = String::new();
    for line in summary_lines(results) {
        let _ = writeln!(out, "- {}", md_cell(&line));
    }
    out.push('\n');
    out.push_str("| test | handled | apic | median | p10 | p90 | p99 | mean | sd | samples | net median | median ns |\n");
    out.push_str("|:-----|:--------|:-----|-------:|----:|----:|----:|-----:|---:|--------:|-----------:|----------:|\n");
    for t in &results.tests {
        let mut cells = vec![
            format!("`{}`", t.name.replace('`', "'")),
            handled_cell(t),
            apic_cell(t),
        ];
        cells.extend(numeric_cells(t));
        let cells: Vec<String> = cells.iter().map(|c| md_cell(c)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    let _ = writeln!(
        out,
        "\nCycles per iteration; *net median*: {}.",
        crate::central::DESCRIPTION
    );
    let details = detail_lines(results);
    if !details.is_empty() {
        out.push_str("\n```\n");
        for line in details {
            out.push_str(&line);
            out.push('\n');
        }
        out.push_str("```\n");
    }
    out
}

/// The A/B table of an A/B run: per test the medians of both sides, the change with
/// its 95 % interval, the minimum detectable change and the verdict (rounds paired).
/// `None` for a results file that is not an A/B run.
pub fn render_ab(results: &Results) -> Option<String> {
    let ab = results.ab.as_ref()?;
    let (a, b) = results.ab_sides()?;
    let cmp = crate::compare::compare_ab(&a, &b, 0.0);
    let labels = [
        format!("{}={}", ab.knob, ab.a),
        format!("{}={}", ab.knob, ab.b),
    ];
    let mut out = format!(
        "A/B: {} = {} (A) vs {} (B), {} round(s) interleaved (A B, B A, ...), each side in fresh VMs\n",
        ab.knob, ab.a, ab.b, results.config.rounds
    );
    out.push_str(&crate::compare::render_comparison(
        &cmp,
        [labels[0].as_str(), labels[1].as_str()],
    ));
    Some(out)
}

/// The A/B run the way the seeds print it: run by run (one row per round) with the net
/// median cycles of each side, then the averages and the `%Reduction` of B against A.
pub fn render_seed(results: &Results) -> Option<String> {
    let ab = results.ab.as_ref()?;
    let tests: Vec<(&TestResult, &TestResult)> = results
        .tests
        .iter()
        .filter(|t| t.name != "loop_overhead" && t.status.is_ok())
        .filter_map(|a| {
            Some((
                a,
                ab.b_tests
                    .iter()
                    .find(|b| b.name == a.name && b.status.is_ok())?,
            ))
        })
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Cycles per iteration (net median of each round), {} = {} vs {}",
        ab.knob, ab.a, ab.b
    );
    let mut headers = vec!["test".to_string()];
    for (t, _) in &tests {
        headers.push(format!("{} {}={}", t.name, ab.knob, ab.a));
        headers.push(format!("{}={}", ab.knob, ab.b));
    }
    let rounds = tests
        .iter()
        .map(|(a, b)| a.rounds.len().min(b.rounds.len()))
        .max()
        .unwrap_or(0);
    let figure = |t: &TestResult, i: usize| t.rounds.get(i).and_then(|r| r.net_median);
    let mut rows = Vec::new();
    for i in 0..rounds {
        let mut row = vec![(i + 1).to_string()];
        for (a, b) in &tests {
            row.push(figure(a, i).map_or("-".into(), fmt_cycles));
            row.push(figure(b, i).map_or("-".into(), fmt_cycles));
        }
        rows.push(row);
    }
    let mean = |t: &TestResult| {
        let v: Vec<f64> = t.rounds.iter().filter_map(|r| r.net_median).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let mut avg = vec!["Average cycles".to_string()];
    let mut red = vec!["%Reduction".to_string()];
    for (a, b) in &tests {
        let (ma, mb) = (mean(a), mean(b));
        avg.push(ma.map_or("-".into(), |m| format!("{m:.1}")));
        avg.push(mb.map_or("-".into(), |m| format!("{m:.1}")));
        red.push(String::new());
        red.push(match (ma, mb) {
            (Some(x), Some(y)) if x > 0.0 => format!("{:+.2}%", (y - x) / x * 100.0),
            _ => "-".into(),
        });
    }
    rows.push(avg);
    rows.push(red);
    let hdr: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut aligns = vec![Align::Right; hdr.len()];
    aligns[0] = Align::Left;
    out.push_str(&layout(&hdr, &aligns, &rows));
    Some(out)
}

/// A CSV field, quoted when it holds a comma, quote or line break.
fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

/// Every test of every file (both sides of an A/B run) as CSV for spreadsheets: one row
/// per test, plain numbers (no separators), empty cells where there is no figure.
pub fn render_csv(files: &[(String, Results)]) -> String {
    let mut out = String::from(
        "file,side,test,ring,status,handled,samples,rounds,median,p10,p90,p99,mean,stddev,median_ci95_low,median_ci95_high,net_median,median_ns\n",
    );
    let num = |v: Option<f64>| {
        v.filter(|x| x.is_finite())
            .map_or(String::new(), |x| format!("{x}"))
    };
    for (name, r) in files {
        let sides: Vec<(String, Results)> = match (r.ab_sides(), &r.ab) {
            (Some((a, b)), Some(ab)) => vec![
                (format!("{}={}", ab.knob, ab.a), a),
                (format!("{}={}", ab.knob, ab.b), b),
            ],
            _ => vec![(String::new(), r.clone())],
        };
        for (side, res) in &sides {
            for t in &res.tests {
                let c = t.cycles.as_ref();
                let cells = [
                    csv_field(name),
                    csv_field(side),
                    csv_field(&t.name),
                    t.ring.to_string(),
                    t.status.word().to_string(),
                    t.handled.map_or(String::new(), |h| h.as_str().to_string()),
                    t.samples.to_string(),
                    t.rounds.len().to_string(),
                    num(c.map(|c| c.median)),
                    num(c.map(|c| c.p10)),
                    num(c.map(|c| c.p90)),
                    num(c.map(|c| c.p99)),
                    num(c.map(|c| c.mean)),
                    num(c.map(|c| c.stddev)),
                    num(c.map(|c| c.median_ci95[0])),
                    num(c.map(|c| c.median_ci95[1])),
                    num(crate::central::net_figure(t)),
                    num(crate::central::figure_ns(t).map(|f| f.0)),
                ];
                out.push_str(&cells.join(","));
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::{ok_test, sample_results};
    use crate::results::{ExitCheck, Handling, Overhead};

    #[test]
    fn number_formats() {
        assert_eq!(fmt_cycles(0.0), "0");
        assert_eq!(fmt_cycles(999.4), "999");
        assert_eq!(fmt_cycles(999.5), "1,000");
        assert_eq!(fmt_cycles(1234567.0), "1,234,567");
        assert_eq!(fmt_cycles(-1234.0), "-1,234");
        assert_eq!(fmt_cycles(-0.2), "0");
        assert_eq!(fmt_cycles(f64::NAN), "-");
        assert_eq!(fmt_cycles(1e20), "100,000,000,000,000,000,000");
        assert_eq!(fmt_ns(1.23456), "1.23");
        assert_eq!(fmt_ns(123.456), "123.5");
        assert_eq!(fmt_ns(12345.6), "12,346");
        assert_eq!(fmt_ns(f64::INFINITY), "-");
        assert_eq!(fmt_pct_signed(4.25), "+4.2%");
        assert_eq!(fmt_pct_signed(-0.04), "-0.0%");
    }

    #[test]
    fn csv_has_one_row_per_test_and_quotes() {
        let r = sample_results();
        let csv = render_csv(&[("a,b.json".into(), r.clone())]);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + r.tests.len());
        let cols = lines[0].split(',').count();
        assert!(
            lines[2].starts_with("\"a,b.json\",,cpuid,3,ok,kernel,101,6,1250,"),
            "{}",
            lines[2]
        );
        assert!(
            lines[4].contains(",vmcall,3,skipped,,0,6,,"),
            "{}",
            lines[4]
        );
        for l in &lines[1..] {
            assert_eq!(
                l.replace("\"a,b.json\"", "f").split(',').count(),
                cols,
                "{l}"
            );
        }
    }

    #[test]
    fn dates() {
        assert_eq!(fmt_unix_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(fmt_unix_utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(fmt_unix_utc(951_782_400), "2000-02-29 00:00:00 UTC");
        // Must not panic on absurd values.
        let _ = fmt_unix_utc(u64::MAX);
    }

    #[test]
    fn layout_aligns_columns() {
        let t = layout(
            &["a", "num"],
            &[Align::Left, Align::Right],
            &[
                vec!["long name".into(), "1".into()],
                vec!["x".into(), "1,000".into()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "a            num");
        assert_eq!(lines[1], "---------  -----");
        assert_eq!(lines[2], "long name      1");
        assert_eq!(lines[3], "x          1,000");
    }

    #[test]
    fn table_contents() {
        let results = sample_results();
        let text = render_table(&results);
        assert!(text.contains("Test CPU @ 3.00GHz"), "{text}");
        assert!(text.contains("nested, paravirtual"));
        assert!(text.contains("kernel 6.8.0-test"));
        assert!(text.contains("TSC 3,000,000 kHz (KVM_GET_TSC_KHZ)"));
        assert!(text.contains("ring 3; 101 samples x 100 iterations"));
        assert!(text.contains("2023-11-14 22:13:20 UTC"));
        // Rows in the given order with a common width.
        let table: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("test "))
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(table.len(), 2 + results.tests.len(), "{text}");
        let names: Vec<&str> = table[2..]
            .iter()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "loop_overhead",
                "cpuid",
                "inl_from_qemu",
                "vmcall",
                "ipi",
                "wr_tsc_adjust_msr"
            ]
        );
        let cpuid = table.iter().find(|l| l.starts_with("cpuid")).unwrap();
        // cpuid: values 1200..=1300, median 1250, p10 1210, p90 1290, p99 1299.
        for needle in ["kernel", "1,250", "1,210", "1,290", "1,299", "1,240"] {
            assert!(cpuid.contains(needle), "{needle} missing in {cpuid}");
        }
        let lo = table
            .iter()
            .find(|l| l.starts_with("loop_overhead"))
            .unwrap();
        assert!(lo.contains("(raw)"), "{lo}");
        let skipped = table.iter().find(|l| l.starts_with("vmcall")).unwrap();
        assert!(skipped.contains("skipped"));
        assert!(table.iter().any(|l| l.contains("did-not-complete")));
        // Details.
        assert!(text.contains("vmcall skipped: vmcall never completes on this host"));
        assert!(text.contains("ipi did-not-complete: timed out after 10 s"));
        assert!(text.contains("wr_tsc_adjust_msr failed: emulation failure"));
        assert!(text.contains(
            "inl_from_qemu phases (median cycles): exit leg 1,050 (22.6%), VMM handling 2,050 (44.1%), entry leg 1,550 (33.3%); round trip 4,650"
        ), "{text}");
        assert!(text.contains("inl_from_qemu: KVM_RUN median 4,050 cycles; VMM userspace per exit median 1,850 cycles"));
        assert!(text.contains("VMM overhead (inl_from_qemu, on an unpopulated bus)"));
        assert!(text.contains("1.95x"), "{text}");
        assert!(text.contains("exit check: all 1 checked test passed"));
        assert!(text.contains("note: this host is nested/paravirtual"));
    }

    #[test]
    fn overhead_says_what_its_ratio_rests_on() {
        let mut results = sample_results();
        let base = results.vmm_overhead.as_ref().unwrap().full.clone();
        let summary = |p10: f64, median: f64| Summary {
            p10,
            median,
            ..base.clone()
        };
        // Stamps read in 26-cycle steps: 104 against 52 is a ratio of 2.00 that rests
        // on a difference of two steps and a bare share of two steps.
        let mut o = Overhead::new("inl_from_user", summary(104.0, 130.0), summary(52.0, 78.0));
        o.stamp_step_cycles = Some(26);
        results.vmm_overhead = Some(o.clone());
        let text = render_table(&results);
        assert!(text.contains("2.00x"), "{text}");
        assert!(
            text.contains(
                "full - bare: +52 cycles at p10, +52 at the median (2 and 2 steps of 26 cycles"
            ),
            "{text}"
        );
        assert!(
            text.contains("coarse: the bare loop's share is 2 step(s) of the host's clock, so one step moves the ratio by 50%"),
            "{text}"
        );
        // A bare share of many steps is not called coarse; the difference is still shown.
        let mut fine = Overhead::new(
            "inl_from_user",
            summary(2_262.0, 2_418.0),
            summary(2_184.0, 2_392.0),
        );
        fine.stamp_step_cycles = Some(26);
        results.vmm_overhead = Some(fine);
        let text = render_table(&results);
        assert!(
            text.contains("full - bare: +78 cycles at p10, +26 at the median (3 and 1 steps"),
            "{text}"
        );
        assert!(!text.contains("coarse"), "{text}");
        // Files from before the step was recorded show the table alone.
        o.stamp_step_cycles = None;
        results.vmm_overhead = Some(o);
        let text = render_table(&results);
        assert!(
            !text.contains("full - bare") && !text.contains("coarse"),
            "{text}"
        );
    }

    #[test]
    fn handling_mismatch_and_failed_exit_check() {
        let mut results = sample_results();
        let t = &mut results.tests[1];
        t.handled = Some(Handling::User);
        t.exit_check = Some(ExitCheck {
            expected_user_exits: 0,
            observed_user_exits: 10_100,
            passed: false,
            detail: "cpuid went to userspace".into(),
        });
        let text = render_table(&results);
        assert!(text.contains("user*"), "{text}");
        assert!(text.contains("* cpuid: handled in user, expected kernel"));
        assert!(text.contains(
            "exit check FAILED for cpuid: expected 0 userspace exits, observed 10100 (cpuid went to userspace)"
        ));
        assert!(!text.contains("all 2 checked"));
    }

    #[test]
    fn missing_host_keys_and_empty_results_do_not_panic() {
        let mut results = sample_results();
        for host in [
            serde_json::Value::Null,
            serde_json::json!({}),
            serde_json::json!({"cpu": 5, "virtualization": []}),
            serde_json::json!({"cpu": {"model_name": null}}),
            serde_json::json!("text"),
        ] {
            results.host = host;
            let text = render_table(&results);
            assert!(!text.contains("host:"), "{text}");
            let _ = render_markdown(&results);
        }
        results.tests.clear();
        results.vmm_overhead = None;
        results.notes.clear();
        results.config.pin = None;
        let text = render_table(&results);
        assert!(text.contains("(no tests)"));
        assert!(!text.contains("exit check"));
        assert!(!text.contains("pinned"));
        let md = render_markdown(&results);
        assert!(md.contains("| test |"));
    }

    #[test]
    fn phases_with_zero_total() {
        let mut results = sample_results();
        let mut t = ok_test("zero", 0.0);
        let mut z = crate::stats::summarize(&[0.0]).unwrap();
        z.median = 0.0;
        t.phases = Some(crate::results::Phases {
            exit_leg: z.clone(),
            handling: z.clone(),
            entry_leg: z,
        });
        results.tests = vec![t];
        let text = render_table(&results);
        assert!(text.contains("zero phases (median cycles): exit leg 0, VMM handling 0, entry leg 0; round trip 0"), "{text}");
    }

    #[test]
    fn markdown_table() {
        let mut results = sample_results();
        results.tests[0].name = "odd|name".into();
        let md = render_markdown(&results);
        assert!(
            md.contains("- host: Test CPU @ 3.00GHz; kernel 6.8.0-test; nested, paravirtual"),
            "{md}"
        );
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(rows.len(), 2 + results.tests.len());
        let columns = rows[0].matches(" | ").count();
        for row in &rows[2..] {
            // Escaped pipes do not count as separators.
            assert_eq!(
                row.replace("\\|", "").matches(" | ").count(),
                columns,
                "{row}"
            );
        }
        assert!(md.contains("`odd\\|name`"), "{md}");
        assert!(md.contains("| `cpuid` | kernel | - | 1,250 |"), "{md}");
        assert!(md.contains("note: this host is nested/paravirtual"));
    }

    #[test]
    fn observations_counter_checks_and_round_spread_are_reported() {
        use crate::results::{CounterCheck, KvmCounters, RoundSpread};
        let mut results = sample_results();
        let check = |counter: &str, kvm, exitlab, verdict| CounterCheck {
            counter: counter.into(),
            kvm,
            exitlab,
            verdict,
        };
        results.tests[1].handled = Some(Handling::NotObserved);
        results.tests[1].kvm_counters = Some(KvmCounters {
            deltas: Default::default(),
            checks: vec![check("io_exits", 0, 4, CounterVerdict::NotCounted)],
        });
        results.tests[2].handled = Some(Handling::Mixed {
            user: 6_000,
            kernel: 4_100,
        });
        results.tests[2].kvm_counters = Some(KvmCounters {
            deltas: Default::default(),
            checks: vec![
                check("exits", 10_200, 10_101, CounterVerdict::KernelHandled),
                check("io_exits", 0, 10_101, CounterVerdict::NotCounted),
                check("mmio_exits", 3, 0, CounterVerdict::Mismatch),
            ],
        });
        results.tests[1].round_spread = Some(RoundSpread {
            rounds: 8,
            dropped_samples: 10,
            spread: 0.012,
            outlier_rounds: 0,
        });
        results.tests[2].round_spread = Some(RoundSpread {
            rounds: 8,
            dropped_samples: 0,
            spread: 0.034,
            outlier_rounds: 0,
        });
        let text = render_table(&results);
        assert!(text.contains("mixed (user 6000, kernel 4100)*"), "{text}");
        assert!(text.contains(
            "* where it was handled was not observed (no userspace exit, and KVM's exit counter counted none beyond the empty loop's): cpuid (expected kernel)"
        ), "{text}");
        assert!(
            text.contains(
                "KVM counters (binary stats) against exitlab's counts, 2 tests: 1 MISMATCH(ES)"
            ),
            "{text}"
        );
        assert!(
            text.contains("  MISMATCH inl_from_qemu: mmio_exits KVM 3, exitlab 0"),
            "{text}"
        );
        assert!(text.contains(
            "  io_exits not counted by the host (KVM 0) in 2 tests, exitlab saw: cpuid (4), inl_from_qemu (10,101)"
        ), "{text}");
        assert!(
            !text.contains("  exits"),
            "agreeing counters are not listed: {text}"
        );
        assert!(text.contains(
            "spread of the rounds' medians (max/min - 1, 2 tests): median 2.3%, worst 3.4% (inl_from_qemu)"
        ), "{text}");
    }
}

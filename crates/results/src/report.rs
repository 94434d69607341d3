//! Human-readable renderings of a [`Results`]: a fixed-width terminal table
//! and a GitHub-flavoured Markdown table.
//!
//! Cycle counts are shown as whole numbers with `,` thousands separators.

use std::fmt::Write as _;

use crate::format::{fmt_cycles, fmt_cycles_signed, fmt_ns, fmt_unix_utc, host_str, layout, Align};
use crate::results::{
    CounterVerdict, ExitCheck, Handling, KvmCounters, Results, TestResult, TestStatus,
};
use crate::stats::describe::Summary;

/// The "observed" cell: where the exit was observed to be handled (with `*` when it differs
/// from the expected one), or the status word for tests that are not ok.
pub(crate) fn handled_cell(t: &TestResult) -> String {
    match &t.status {
        TestStatus::Ok => match t.handled {
            Some(h) if !h.agrees_with(t.expected_handling) => format!("{}*", h.label()),
            Some(h) => h.label(),
            None => "?".to_string(),
        },
        other => other.word().to_string(),
    }
}

/// The central figure in cycles, "(raw)" where it is not net
/// ([`crate::stats::units::figure_cycles`]).
fn figure_cell(t: &TestResult) -> String {
    match crate::stats::units::figure_cycles(t) {
        Some((c, true)) => fmt_cycles(c),
        Some((c, false)) => format!("{} (raw)", fmt_cycles(c)),
        None => "-".to_string(),
    }
}

fn median_ns_cell(t: &TestResult, tsc_khz: u64) -> String {
    match crate::stats::units::figure_ns(t, tsc_khz) {
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
    if !host.is_empty() {
        lines.push(format!("host: {}", host.join("; ")));
    }
    lines.extend(crate::format::caveat(&results.host));
    let c = &results.config;
    let mut cfg = format!(
        "TSC {} kHz ({}); ring {}; {} samples x {} iterations; warmup {}",
        fmt_cycles(c.tsc_khz as f64),
        c.tsc_khz_source,
        c.ring,
        fmt_cycles(c.samples as f64),
        crate::results::batch_header(results),
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
pub(crate) fn round_spread_line(results: &Results) -> Option<String> {
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
    let mid = crate::stats::describe::percentile(&sorted, 50.0);
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
pub(crate) fn kvm_counter_lines(results: &Results) -> Vec<String> {
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

/// The first line of a test's reason, for the table's details: what follows it (a
/// stuck vCPU's registers and stack) stays in the results file, and `bench -v` and
/// `report -v` print it ([`reason_details`]).
fn reason_line(reason: &str) -> String {
    match reason.split_once('\n') {
        Some((first, _)) => {
            format!("{first} (registers and stack: in the results file, or with -v)")
        }
        None => reason.to_string(),
    }
}

/// The multi-line parts of the tests' reasons (a stuck vCPU's registers and stack), each
/// headed by its test; empty when no reason has any.
pub fn reason_details(results: &Results) -> String {
    let mut out = String::new();
    for t in &results.tests {
        if let Some((_, rest)) = t.status.reason().and_then(|r| r.split_once('\n')) {
            let _ = writeln!(out, "{} {}:\n{}", t.name, t.status.word(), rest.trim_end());
        }
    }
    out
}

/// What the table's figures are, in one line, and where the model is written.
pub const FIGURE_LINE: &str = "cycles per iteration; raw columns include each sample's empty loop (one loop per batch); net median: over rounds, of (sample - its loop); docs/model.md";

/// The 95 % interval over rounds of a test's net figure (`None` for a raw figure or
/// too few rounds).
pub(crate) fn net_interval(t: &TestResult) -> Option<[f64; 2]> {
    crate::stats::units::central(t)
        .filter(|c| c.figure == crate::stats::units::Figure::Net)?
        .interval()
}

/// The signs of trouble in one run, one line per kind, naming the tests: outlier rounds,
/// rounds at another host speed, rounds in two groups ([`crate::stats::diagnostics`]).
/// They are reported only: every figure rests on all its rounds.
pub fn signs_lines(tests: &[TestResult]) -> Vec<String> {
    use crate::stats::diagnostics;
    let (mut outliers, mut speed, mut groups) = (Vec::new(), Vec::new(), Vec::new());
    for t in tests {
        let Some(c) = crate::stats::units::central(t) else {
            continue;
        };
        let n = c.rounds.len();
        let count = |v: Vec<bool>| v.iter().filter(|x| **x).count();
        let o = count(diagnostics::outliers(&c.rounds));
        if o > 0 {
            outliers.push(format!("{} {o} of {n}", t.name));
        }
        let s = count(diagnostics::host_speed_rounds(
            &crate::stats::units::round_loops(t),
        ));
        if s > 0 {
            speed.push(format!("{} {s} of {n}", t.name));
        }
        if let Some(g) = diagnostics::groups(&c.rounds) {
            groups.push(format!(
                "{} ({} and {}, {:.1}x apart)",
                t.name, g.low, g.high, g.ratio
            ));
        }
    }
    let mut out = Vec::new();
    if !outliers.is_empty() {
        out.push(format!(
            "sign: outlier rounds (over {} robust SDs from the test's median round; kept): {}",
            crate::stats::model::OUTLIER_K,
            outliers.join(", ")
        ));
    }
    if !speed.is_empty() {
        out.push(format!(
            "sign: host speed: rounds whose empty loop ran over {}x the test's median (kept): {}",
            crate::stats::model::HOST_SPEED_FACTOR,
            speed.join(", ")
        ));
    }
    if !groups.is_empty() {
        out.push(format!(
            "sign: rounds in two groups far apart: {}",
            groups.join(", ")
        ));
    }
    out
}

/// The lines on a planned design (`bench --precision`, `bench --ab`'s default): the
/// target, the pilot, and the tests whose target needed more units than the budget gave.
pub fn plan_lines(results: &Results) -> Vec<String> {
    let Some(p) = &results.plan else {
        return Vec::new();
    };
    let what = if results.ab.is_some() {
        "each change's"
    } else {
        "each figure's"
    };
    let whose = if p.by_default {
        " (bench --ab's default)"
    } else {
        ""
    };
    let mut lines = vec![format!(
        "plan{whose}: {what} 95% interval within ±{}: a pilot of {} units, then a fixed number per test within {:.0} s; took {:.1} s",
        crate::format::fmt_pct_plain(p.target_pct),
        p.pilot_units,
        p.budget_seconds,
        p.seconds
    )];
    let short: Vec<String> = p
        .tests
        .iter()
        .filter(|t| t.planned < t.needed || t.units < t.planned)
        .map(|t| match t.half_width_pct {
            Some(h) => format!("{} ±{h:.1}% ({} of {} units)", t.name, t.units, t.needed),
            None => format!("{} (no interval, {} units)", t.name, t.units),
        })
        .collect();
    if !short.is_empty() {
        lines.push(format!(
            "plan: short of the target (budget or interruption): {}",
            short.join(", ")
        ));
    }
    lines
}

/// The samples a test kept figures from: its sample count, or "-" when it has no
/// figures (it did not complete, or was skipped).
pub(crate) fn samples_cell(t: &TestResult) -> String {
    match t.cycles {
        Some(_) => fmt_cycles(t.samples as f64),
        None => "-".to_string(),
    }
}

/// The lines printed below the table (reasons, handling mismatches, phases,
/// VMM-side timings, overhead, exit checks, notes).
fn detail_lines(results: &Results) -> Vec<String> {
    let tests = &results.tests;
    let mut lines = Vec::new();
    for t in tests {
        if let Some(reason) = t.status.reason() {
            lines.push(format!(
                "{} {}: {}",
                t.name,
                t.status.word(),
                reason_line(reason)
            ));
        }
    }
    lines.extend(per_vcpu_lines(tests));
    lines.extend(handling_lines(tests));
    lines.extend(kvm_counter_lines(results));
    lines.extend(round_spread_line(results));
    lines.extend(signs_lines(&results.tests));
    // An A/B run's plan lines go with its A/B table ([`render_ab`]), which every report
    // of the file prints after this one.
    if results.ab.is_none() {
        lines.extend(plan_lines(results));
    }
    if tests
        .iter()
        .any(|t| t.median_ns.is_some() && !t.median_ns_is_net)
    {
        lines.push(
            "(raw): nanoseconds of the raw median; the loop overhead is not subtracted".to_string(),
        );
    }
    lines.extend(vmexit_line(results));
    lines.extend(tests.iter().filter_map(phase_line));
    lines.extend(tests.iter().filter_map(host_time_line));
    if let Some(f) = &results.floor {
        lines.extend(render_floor(f));
    }
    if let Some(o) = &results.vmm_overhead {
        lines.extend(stamp_lines(o));
    }
    lines.extend(exit_check_lines(tests));
    if let Some(p) = &results.process {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let private = p
            .vmm_private_outside_guest_bytes
            .map_or(String::new(), |b| {
                format!(", {:.1} MiB of it private", mib(b))
            });
        lines.push(format!(
            "process memory: {:.1} MiB resident outside guest RAM at most{private} (peak RSS {:.1} MiB including guest RAM)",
            mib(p.vmm_rss_outside_guest_bytes),
            mib(p.peak_rss_bytes)
        ));
    }
    for note in results.notes_beyond_host() {
        lines.push(format!("note: {note}"));
    }
    lines
}

/// Completed tests handled elsewhere than expected, one line each, and one line for
/// those whose handling was not observed at all.
pub(crate) fn handling_lines(tests: &[TestResult]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut not_observed = Vec::new();
    for t in tests {
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
            "* not observed: where the exit was handled could not be seen (no userspace exit, and KVM's exit counter counted none beyond the empty loop's); where each is expected to be handled (bench --list, column \"expected\"): {}",
            not_observed.join(", ")
        ));
    }
    lines
}

/// A test's phase breakdown (median cycles and shares of the round trip), if it has one.
fn phase_line(t: &TestResult) -> Option<String> {
    let (shares, total) = phase_shares(t)?;
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
    Some(format!(
        "{} phases (median cycles; they add up to the raw round trip): {}; round trip {}",
        t.name,
        parts.join(", "),
        fmt_cycles(total)
    ))
}

/// A test's KVM_RUN and VMM userspace medians, if it has either.
pub(crate) fn host_time_line(t: &TestResult) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(s) = &t.kvm_run_cycles {
        parts.push(format!(
            "KVM_RUN per call median {} cycles (the guest's time between exits included)",
            fmt_cycles(s.median)
        ));
    }
    if let Some(s) = &t.userspace_share {
        parts.push(format!(
            "VMM handling per exit median {} cycles (in-process stamps)",
            fmt_cycles(s.median)
        ));
    }
    (!parts.is_empty()).then(|| format!("{}: {}", t.name, parts.join("; ")))
}

/// A bare share of fewer steps of the stamps' resolution than this is coarse (one step
/// moves it by more than 5 %), and is said to be.
pub const FINE_STEPS: f64 = 20.0;

/// Whether a share of `steps` steps of the stamps' resolution is too coarse for a ratio
/// (fewer than [`FINE_STEPS`], or not a number).
fn coarse_steps(steps: f64) -> bool {
    steps.is_nan() || steps < FINE_STEPS
}

/// The overhead experiment's headline: exitlab as users run it against the independent
/// bare loop, from the kernel's side (or why that was not measured).
pub fn render_floor(f: &crate::results::FloorView) -> Vec<String> {
    use crate::results::FloorView;
    let c = match f {
        FloorView::NotMeasured { reason } => {
            return vec![format!(
            "VMM overhead against the independent bare loop (exitlab-floor) not measured: {reason}"
        )]
        }
        FloorView::Measured(c) => c,
    };
    let mut lines = vec![format!(
        "VMM overhead, userspace cycles per exit in the kernel's view (return to userspace and next entry included), exitlab against the bare loop ({}; guest: {}; {} round{} interleaved):",
        c.method,
        c.guest,
        c.rounds,
        if c.rounds == 1 { "" } else { "s" }
    )];
    let row = |name: &str, s: &crate::results::FloorSide| {
        vec![
            name.to_string(),
            fmt_cycles(s.user.p10),
            fmt_cycles(s.user.median),
            fmt_cycles(s.exits as f64),
            s.command.clone(),
        ]
    };
    let ratio_row = |name: &str, p10: f64, median: f64| {
        vec![
            name.to_string(),
            fmt_ratio(p10),
            fmt_ratio(median),
            String::new(),
            String::new(),
        ]
    };
    let mut rows = vec![row("exitlab", &c.exitlab), row("bare loop", &c.floor)];
    if let Some(f) = &c.filtered_floor {
        rows.push(row("bare loop, allow-all filter", f));
    }
    rows.push(ratio_row("ratio", c.ratio_p10, c.ratio_median));
    if let Some((p10, median)) = c.ratio_filtered {
        rows.push(ratio_row("ratio to the filtered loop", p10, median));
    }
    let table = layout(
        &["", "p10", "median", "exits", "command"],
        &[
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Left,
        ],
        &rows,
    );
    lines.extend(table.lines().map(|l| format!("  {}", l.trim_end())));
    if let Some((p10, median)) = c.filter_cost() {
        lines.push(format!(
            "  any seccomp filter costs the bare loop {} cycles at p10, {} at the median here (one allow-all rule); exitlab's filter pays it too (--no-seccomp: off)",
            fmt_cycles_signed(p10),
            fmt_cycles_signed(median)
        ));
    }
    for s in [&c.exitlab, &c.floor].into_iter().chain(&c.filtered_floor) {
        if s.exits != s.exits_expected {
            lines.push(format!(
                "  warning: the trace saw {} exits of {} where the guest makes {}: the figures are incomplete",
                fmt_cycles(s.exits as f64),
                s.command,
                fmt_cycles(s.exits_expected as f64)
            ));
        }
    }
    if c.lost_events > 0 {
        lines.push(format!(
            "  warning: the kernel dropped {} trace events",
            fmt_cycles(c.lost_events as f64)
        ));
    }
    lines
}

/// The in-process stamps of the overhead experiment, a diagnostic: full and bare and
/// their difference, never a ratio.
pub(crate) fn stamp_lines(o: &crate::results::Overhead) -> Vec<String> {
    let bus = match o.bus_devices {
        Some(n) => {
            format!(", on the PC platform's bus ({n} devices, the measured port claimed by one)")
        }
        None => ", on an unpopulated bus".to_string(),
    };
    let mut lines = vec![format!(
        "VMM overhead, in-process stamps ({}{bus}), handling cycles per exit; a diagnostic: the full loop against the bare handler:",
        o.test
    )];
    // No ratio: the stamps see only the VMM's own share of the window between two
    // KVM_RUN calls, which is no measure of the whole userspace share (the kernel view
    // above is), and on a host whose TSC advances in steps a ratio of a few steps moves
    // by whole steps.
    let rows = vec![
        vec![
            "full VMM".to_string(),
            fmt_cycles(o.full.p10),
            fmt_cycles(o.full.median),
        ],
        vec![
            "bare handler".to_string(),
            fmt_cycles(o.bare.p10),
            fmt_cycles(o.bare.median),
        ],
    ];
    let table = layout(
        &["", "p10", "median"],
        &[Align::Left, Align::Right, Align::Right],
        &rows,
    );
    lines.extend(table.lines().map(|l| format!("  {l}")));
    lines.extend(overhead_resolution(o));
    lines
}

/// The exit check: one line counting the tests checked (a failure: one line each after
/// it) and those that could not be: a test whose check passed without seeing where its
/// exits went ([`ExitCheck::was_observed`]: no userspace exit was expected, and KVM's
/// counters counted none) is not counted as checked.
pub(crate) fn exit_check_lines(tests: &[TestResult]) -> Vec<String> {
    let with: Vec<(&TestResult, &ExitCheck)> = tests
        .iter()
        .filter_map(|t| Some((t, t.exit_check.as_ref()?)))
        .collect();
    if with.is_empty() {
        return Vec::new();
    }
    let failed: Vec<(&TestResult, &ExitCheck)> =
        with.iter().copied().filter(|(_, c)| !c.passed).collect();
    let unseen = with
        .iter()
        .filter(|(t, c)| c.passed && !c.was_observed(t))
        .count();
    let checked = with.len() - unseen;
    let tests_word = |n: usize| if n == 1 { "test" } else { "tests" };
    let mut head = match (checked, failed.len()) {
        (0, _) => "exit check: no test checked".to_string(),
        (n, 0) => format!("exit check: {n} {} checked, all passed", tests_word(n)),
        (n, f) => format!("exit check: {n} {} checked, {f} FAILED", tests_word(n)),
    };
    if unseen > 0 {
        let _ = write!(
            head,
            "; {unseen} could not be checked (no userspace exit expected, and KVM's counters counted none here: where {} exits went was not observed)",
            if unseen == 1 { "its" } else { "their" }
        );
    }
    let mut lines = vec![head];
    lines.extend(failed.into_iter().map(|(t, c)| {
        format!(
            "exit check FAILED for {}: expected {} userspace exits, observed {}{}",
            t.name,
            c.expected_user_exits,
            c.observed_user_exits,
            if c.detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", c.detail)
            }
        )
    }));
    lines
}

/// How the table's figures relate to kvm-unit-tests' `vmexit`, which uses the same test
/// names: its figure is the raw median's (cycles per iteration, its loop included), and
/// the net median subtracts each sample's own empty loop per iteration (a batched test's
/// loop divided by its batch), whose raw median at batch 1 this run gives. `None`
/// without a test with a figure beside the empty loop.
pub fn vmexit_line(results: &Results) -> Option<String> {
    results
        .tests
        .iter()
        .find(|t| !t.baseline && t.cycles.is_some())?;
    let here = results
        .tests
        .iter()
        .find(|t| t.baseline)
        .and_then(|t| t.cycles.as_ref())
        .map_or(String::new(), |c| {
            format!(" ({} cycles at batch 1)", fmt_cycles(c.median))
        });
    Some(format!(
        "median (raw, per iteration) is what kvm-unit-tests' vmexit prints; net median subtracts each sample's own empty loop per iteration{here}"
    ))
}

/// What the in-process difference rests on: full − bare in cycles and in steps of the
/// stamps' resolution, and a warning when the bare loop's share is so few steps that
/// one step moves it by more than 5 %.
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
    if coarse_steps(bare_steps) {
        lines.push(format!(
            "  coarse: the bare handler's share is {bare_steps:.0} step(s) of the host's clock, so one step moves it by {:.0}%; read the difference in cycles, and the kernel's view above",
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
pub(crate) fn apic_cell(t: &TestResult) -> String {
    match &t.irq {
        Some(i) if i.cpus > 1 => format!("{} x{}", i.apic.name(), i.cpus),
        Some(i) => i.apic.name().to_string(),
        None => "-".into(),
    }
}

/// The numeric cells of one row, in the order of [`TABLE_HEADERS`] after
/// "test", "observed" and "apic"; nanoseconds at `tsc_khz`, the run's TSC frequency.
pub(crate) fn numeric_cells(t: &TestResult, tsc_khz: u64) -> Vec<String> {
    let s: Option<&Summary> = t.cycles.as_ref();
    let pick = |f: fn(&Summary) -> f64| s.map(f).map(fmt_cycles).unwrap_or_else(|| "-".into());
    vec![
        pick(|s| s.median),
        pick(|s| s.p10),
        pick(|s| s.p90),
        pick(|s| s.p99),
        pick(|s| s.mean),
        pick(|s| s.stddev),
        samples_cell(t),
        figure_cell(t),
        median_ns_cell(t, tsc_khz),
    ]
}

pub(crate) const TABLE_HEADERS: [&str; 12] = [
    "test",
    "observed",
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
    let _ = writeln!(out, "{FIGURE_LINE}\n");
    let rows: Vec<Vec<String>> = results
        .tests
        .iter()
        .map(|t| {
            let mut row = vec![t.name.clone(), handled_cell(t), apic_cell(t)];
            row.extend(numeric_cells(t, results.config.tsc_khz));
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
    crate::format::wrap(&out, crate::format::MAX_LINE)
}

pub use crate::format::md_cell;

/// Renders `results` as GitHub-flavoured Markdown: a short host and
/// configuration summary, a table of the tests, and the details.
pub fn render_markdown(results: &Results) -> String {
    let mut out = String::new();
    for line in summary_lines(results) {
        let _ = writeln!(out, "- {}", md_cell(&line));
    }
    out.push('\n');
    out.push_str("| test | observed | apic | median | p10 | p90 | p99 | mean | sd | samples | net median | median ns |\n");
    out.push_str("|:-----|:---------|:-----|-------:|----:|----:|----:|-----:|---:|--------:|-----------:|----------:|\n");
    for t in &results.tests {
        let mut cells = vec![
            format!("`{}`", t.name.replace('`', "'")),
            handled_cell(t),
            apic_cell(t),
        ];
        cells.extend(numeric_cells(t, results.config.tsc_khz));
        let cells: Vec<String> = cells.iter().map(|c| md_cell(c)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    let _ = writeln!(out, "\n{FIGURE_LINE}");
    let details = detail_lines(results);
    if !details.is_empty() {
        out.push_str("\n```\n");
        let text: String = details.iter().map(|l| format!("{l}\n")).collect();
        out.push_str(&crate::format::wrap(&text, crate::format::MAX_LINE));
        out.push_str("```\n");
    }
    if let Some(ab) = render_ab_markdown(results) {
        out.push('\n');
        out.push_str(&ab);
    }
    out
}

/// An A/B run's knob, its comparison and its sides' labels (`KNOB=VALUE`).
fn ab_comparison(
    results: &Results,
) -> Option<(
    &crate::results::AbRun,
    crate::compare::Comparison,
    [String; 2],
)> {
    let ab = results.ab.as_ref()?;
    let cmp = crate::compare::compare_ab_run(results, crate::stats::model::THRESHOLD_PCT)?;
    let labels = [
        format!("{}={}", ab.knob, ab.a),
        format!("{}={}", ab.knob, ab.b),
    ];
    Some((ab, cmp, labels))
}

/// An A/B run's comparison as Markdown: the knob, a table of the tests' figures, changes
/// and verdicts, and its lines (signs, gate, plan) in a code block.
pub fn render_ab_markdown(results: &Results) -> Option<String> {
    let (ab, cmp, labels) = ab_comparison(results)?;
    let mut out = format!(
        "### A/B: `{}` = {} (A) vs {} (B)\n\n{} pairs of rounds at most, each test's two sides back to back.\n\n",
        md_cell(&ab.knob),
        md_cell(&ab.a),
        md_cell(&ab.b),
        results.config.rounds
    );
    out.push_str(&crate::comparison_report::render_comparison_md(
        &cmp,
        [labels[0].as_str(), labels[1].as_str()],
    ));
    Some(out)
}

/// Several runs of one build (`bench --runs N`): per test, each run's figure, their
/// geometric mean and its 95 % interval with runs as units ([`crate::stats::interval::runs_figure`]),
/// and the spread of the runs (max / min − 1). `runs`: each run's name and results.
pub fn render_runs(runs: &[(String, Results)]) -> String {
    use crate::stats::{interval, units};
    let Some((_, first)) = runs.first() else {
        return String::from("(no runs)\n");
    };
    let mut headers: Vec<String> = vec!["test".into()];
    headers.extend((1..=runs.len()).map(|i| format!("run {i}")));
    headers.extend(["geo. mean".into(), "95% CI (runs)".into(), "spread".into()]);
    let rows: Vec<Vec<String>> = first
        .tests
        .iter()
        .map(|t0| {
            let figures: Vec<Option<units::Central>> = runs
                .iter()
                .map(|(_, r)| r.test(&t0.name).and_then(units::central))
                .collect();
            let mut row = vec![t0.name.clone()];
            row.extend(
                figures
                    .iter()
                    .map(|c| c.as_ref().map_or("-".into(), |c| fmt_cycles(c.value))),
            );
            let rounds: Vec<Vec<f64>> =
                figures.iter().flatten().map(|c| c.rounds.clone()).collect();
            let values: Vec<f64> = figures.iter().flatten().map(|c| c.value).collect();
            match interval::runs_figure(&rounds) {
                Ok(e) => {
                    let [lo, hi] = e.value_bounds();
                    row.push(fmt_cycles(e.value()));
                    row.push(format!("{}..{}", fmt_cycles(lo), fmt_cycles(hi)));
                }
                Err(_) => row.extend(["-".to_string(), "-".to_string()]),
            }
            let (lo, hi) = values
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                    (a.min(*v), b.max(*v))
                });
            row.push(if values.len() > 1 && lo > 0.0 {
                format!("{:.1}%", (hi / lo - 1.0) * 100.0)
            } else {
                "-".into()
            });
            row
        })
        .collect();
    let hdr: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut aligns = vec![Align::Right; hdr.len()];
    aligns[0] = Align::Left;
    let mut out = format!(
        "{} runs; each run's figure: net median cycles per iteration; over the runs: geometric mean, 95% interval with runs as units (docs/model.md)\n",
        runs.len()
    );
    out.push_str(&layout(&hdr, &aligns, &rows));
    out
}

/// The A/B table of an A/B run: per test the medians of both sides, the change with
/// its 95 % interval, the minimum detectable change and the verdict (rounds paired).
/// `None` for a results file that is not an A/B run.
pub fn render_ab(results: &Results) -> Option<String> {
    let (ab, cmp, labels) = ab_comparison(results)?;
    let mut out = format!(
        "A/B: {} = {} (A) vs {} (B), {} round(s), each test's two sides back to back (A B, then B A), each in a fresh VM\n",
        ab.knob, ab.a, ab.b, results.config.rounds
    );
    // The comparison's lines open with the host's caveat.
    out.push_str(&crate::comparison_report::render_comparison(
        &cmp,
        [labels[0].as_str(), labels[1].as_str()],
    ));
    for line in crate::comparison_report::disagreement_lines(&cmp) {
        out.push_str(&line);
        out.push('\n');
    }
    for line in host_switch_lines(&ab.knob, &ab.host) {
        out.push_str(&line);
        out.push('\n');
    }
    for line in plan_lines(results) {
        out.push_str(&line);
        out.push('\n');
    }
    Some(crate::format::wrap(&out, crate::format::MAX_LINE))
}

/// The report's lines on an A/B run whose knob changes the host: how many switches, how
/// many reloaded the module, each switch's time and all of them, the values in force on
/// each side, and what moved besides the knob.
pub fn host_switch_lines(knob: &str, sides: &[crate::results::HostSide]) -> Vec<String> {
    if sides.is_empty() {
        return Vec::new();
    }
    let switches: Vec<&crate::results::HostSide> = sides.iter().filter(|s| s.switched).collect();
    let total: f64 = switches.iter().map(|s| s.seconds).sum();
    let reloads = switches.iter().filter(|s| s.reloaded).count();
    let in_force = |side: &str| -> String {
        let mut v: Vec<&str> = sides
            .iter()
            .filter(|s| s.side == side)
            .map(|s| s.in_force.as_str())
            .collect();
        v.dedup();
        v.join("/")
    };
    let mut out = vec![format!(
        "host knob {}: {} switch{} ({reloads} by reloading the module), {total:.1} s in all; in force: A {}, B {}",
        knob,
        switches.len(),
        if switches.len() == 1 { "" } else { "es" },
        in_force("a"),
        in_force("b")
    )];
    let each: Vec<String> = switches
        .iter()
        .map(|s| format!("{:.2}", s.seconds))
        .collect();
    for chunk in each.chunks(16) {
        out.push(format!("  switch seconds: {}", chunk.join(" ")));
    }
    for s in sides {
        for w in &s.warnings {
            out.push(format!("  round {} {}: {w}", s.round, s.side));
        }
    }
    out
}

/// The A/B run the way the seeds print it: run by run (one row per pair of rounds) with
/// the net cycles of each side, then each side's average (the mean of its rounds, as
/// cover letters give it) and the `%Reduction` of B against A, positive when B is quicker:
/// (A - B) / A. Under the table, each test's change by the model (the median of the
/// pairs' ratios, its 95 % interval and the verdict), which is what to quote.
pub fn render_seed(results: &Results) -> Option<String> {
    let ab = results.ab.as_ref()?;
    let cmp = crate::compare::compare_ab_run(results, crate::stats::model::THRESHOLD_PCT)?;
    let tests: Vec<(&TestResult, &TestResult)> = results
        .tests
        .iter()
        .filter(|t| !t.baseline && t.net_median_cycles.is_some() && t.status.is_ok())
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
        "Cycles per iteration (net of the empty loop, each round's median), {} = {} (A) vs {} (B)",
        ab.knob, ab.a, ab.b
    );
    if let Some(c) = crate::format::caveat(&results.host) {
        let _ = writeln!(out, "{c}");
    }
    let mut headers = vec!["run".to_string()];
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
    let mut avg = vec!["Average".to_string()];
    let mut red = vec!["%Reduction".to_string()];
    for (a, b) in &tests {
        let (ma, mb) = (mean(a), mean(b));
        avg.push(ma.map_or("-".into(), fmt_cycles));
        avg.push(mb.map_or("-".into(), fmt_cycles));
        red.push(String::new());
        red.push(match (ma, mb) {
            (Some(x), Some(y)) if x > 0.0 => format!("{:+.2}%", (x - y) / x * 100.0),
            _ => "-".into(),
        });
    }
    rows.push(avg);
    rows.push(red);
    let hdr: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut aligns = vec![Align::Right; hdr.len()];
    aligns[0] = Align::Left;
    out.push_str(&layout(&hdr, &aligns, &rows));
    let _ = writeln!(
        out,
        "%Reduction: (A - B) / A of the averages, positive when B is quicker"
    );
    for t in cmp.tests.iter().filter(|t| !t.baseline) {
        let c = &t.change;
        let _ = writeln!(
            out,
            "{}: change B vs A {} (95% CI {}), {} pairs: {}",
            t.name,
            c.pct.map_or("-".into(), crate::format::fmt_pct_signed),
            crate::comparison_report::fmt_ci_pct(c.ci95_pct),
            c.units[0],
            match c.verdict.reason() {
                Some(why) => format!("no verdict ({why})"),
                None => c.verdict.as_str().to_string(),
            }
        );
    }
    let _ = writeln!(
        out,
        "the change is the median of the pairs' ratios (docs/model.md), which the averages above need not match"
    );
    for line in plan_lines(results) {
        out.push_str(&line);
        out.push('\n');
    }
    Some(crate::format::wrap(&out, crate::format::MAX_LINE))
}

/// A CSV field, quoted when it holds a comma, quote or line break.
/// A number for machine-readable output (CSV, OpenMetrics): rounded to 9 significant
/// digits, then written in the shortest form that reads back as that value, so that
/// sums like 26236.60000000001 appear as 26236.6.
pub fn plain_number(v: f64) -> String {
    let rounded: f64 = format!("{v:.8e}").parse().unwrap_or(v);
    // -0 is written 0.
    format!("{}", rounded + 0.0)
}

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
        "file,side,test,ring,batch,status,handled,samples,rounds,median,p10,p90,p99,mean,stddev,net_median,net_ci95_low,net_ci95_high,median_ns,incomplete,not_hardware_figures\n",
    );
    let num = |v: Option<f64>| {
        v.filter(|x| x.is_finite())
            .map_or(String::new(), plain_number)
    };
    for (name, r) in files {
        let sides: Vec<(String, Results)> = match (crate::stats::units::ab_sides(r), &r.ab) {
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
                    // Iterations per sample: figures of different batches are not
                    // comparable (each test's own unless `--batch` set one).
                    t.batch.to_string(),
                    t.status.word().to_string(),
                    t.handled.map_or(String::new(), |h| h.as_str().to_string()),
                    // As in the table: no sample count beside a test without figures.
                    c.map_or(String::new(), |_| t.samples.to_string()),
                    t.rounds.len().to_string(),
                    num(c.map(|c| c.median)),
                    num(c.map(|c| c.p10)),
                    num(c.map(|c| c.p90)),
                    num(c.map(|c| c.p99)),
                    num(c.map(|c| c.mean)),
                    num(c.map(|c| c.stddev)),
                    num(crate::stats::units::net_figure(t)),
                    num(net_interval(t).map(|i| i[0])),
                    num(net_interval(t).map(|i| i[1])),
                    num(crate::stats::units::figure_ns(t, r.config.tsc_khz).map(|f| f.0)),
                    // Why the file's run was cut short (the same on each of its rows):
                    // its rows then cover only the rounds that completed.
                    csv_field(r.incomplete.as_deref().unwrap_or("")),
                    // Empty on bare metal; why the figures are not hardware figures
                    // otherwise (a nested host, paravirtual KVM).
                    csv_field(crate::format::caveat(&r.host).as_deref().unwrap_or("")),
                ];
                out.push_str(&cells.join(","));
                out.push('\n');
            }
        }
    }
    out
}

/// Report lines: the exits of each vCPU of every test that ran on more than one.
pub(crate) fn per_vcpu_lines(tests: &[TestResult]) -> Vec<String> {
    let mut out = Vec::new();
    for t in tests {
        let Some(irq) = &t.irq else { continue };
        if irq.per_vcpu.len() < 2 {
            continue;
        }
        let parts: Vec<String> = irq
            .per_vcpu
            .iter()
            .map(|v| {
                let opt = |x: Option<u64>| x.map_or("-".into(), |n| n.to_string());
                format!(
                    "vCPU {}: {} userspace, {} KVM exits, {} HLT exits",
                    v.vcpu,
                    v.user.total(),
                    opt(v.kvm_exits),
                    opt(v.halt_exits)
                )
            })
            .collect();
        out.push(format!(
            "{} ({}, {} vCPUs) exits per vCPU: {}",
            t.name,
            irq.apic.name(),
            irq.cpus,
            parts.join("; ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    /// Whether `text` holds `needle` once lines wrapped at 160 characters are joined
    /// again (whitespace runs compared as one space).
    fn has(text: &str, needle: &str) -> bool {
        let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        norm(text).contains(&norm(needle))
    }

    use super::*;
    use crate::results::tests::{ok_test, sample_results};
    use crate::results::{ExitCheck, Handling, Overhead};

    #[test]
    fn plain_numbers_are_rounded_to_nine_digits() {
        assert_eq!(plain_number(26236.60000000001), "26236.6");
        assert_eq!(plain_number(1240.0), "1240");
        assert_eq!(plain_number(1.2345678912e-5), "0.0000123456789");
        assert_eq!(plain_number(-0.0), "0");
        assert_eq!(plain_number(0.1 + 0.2), "0.3");
    }

    #[test]
    fn csv_has_one_row_per_test_and_quotes() {
        let r = sample_results();
        let csv = render_csv(&[("a,b.json".into(), r.clone())]);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + r.tests.len());
        let cols = lines[0].split(',').count();
        assert!(
            lines[2].starts_with("\"a,b.json\",,cpuid,3,100,ok,kernel,101,6,1250,"),
            "{}",
            lines[2]
        );
        assert!(
            lines[4].contains(",vmcall,3,100,skipped,,,6,,"),
            "{}",
            lines[4]
        );
        // A test that did not complete has samples configured but no figures: its
        // samples cell is empty, as the table's is "-".
        let ipi = r.tests.iter().find(|t| t.name == "ipi").unwrap();
        assert!(ipi.samples > 0 && ipi.cycles.is_none());
        let row = lines.iter().find(|l| l.contains(",ipi,")).unwrap();
        assert!(row.contains(",ipi,3,100,did-not-complete,,,"), "{row}");
        for l in &lines[1..] {
            assert_eq!(
                l.replace("\"a,b.json\"", "f").split(',').count(),
                cols,
                "{l}"
            );
        }
    }

    #[test]
    fn csv_marks_every_row_of_an_incomplete_file() {
        let mut r = sample_results();
        let done = render_csv(&[("done.json".into(), r.clone())]);
        assert!(done
            .lines()
            .next()
            .unwrap()
            .ends_with(",incomplete,not_hardware_figures"));
        // Not incomplete; the sample file's host is nested and paravirtual.
        assert!(
            done.lines().skip(1).all(|l| l.ends_with(",not hardware figures: this host is a VM and its KVM is paravirtual (kvm_pvm): guest ring 0 is emulated")),
            "{done}"
        );
        r.incomplete = Some("interrupted during round 2 of 6: kept 3 test(s), each".into());
        let cut = render_csv(&[("cut.json".into(), r.clone())]);
        let rows: Vec<&str> = cut.lines().skip(1).collect();
        assert_eq!(rows.len(), r.tests.len());
        for row in rows {
            assert!(
                row.contains(",\"interrupted during round 2 of 6: kept 3 test(s), each\","),
                "{row}"
            );
        }
    }

    #[test]
    fn a_stuck_test_gets_one_line_and_no_samples_in_the_table() {
        let mut r = sample_results();
        let ipi = r.tests.iter_mut().find(|t| t.name == "ipi").unwrap();
        assert!(ipi.samples > 0);
        ipi.status = TestStatus::DidNotComplete {
            reason: "no progress for 3.0 s\nvCPU registers when stopped:\nrip=0x100883\nstack (rsp upwards):\n  0000".into(),
        };
        let text = render_table(&r);
        assert!(
            has(&text, "ipi did-not-complete: no progress for 3.0 s (registers and stack: in the results file, or with -v)\n"),
            "{text}"
        );
        assert!(!has(&text, "rip=") && !has(&text, "stack (rsp"), "{text}");
        let row = text.lines().find(|l| l.starts_with("ipi ")).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        // test, observed (the status), apic, then median .. sd, samples: all "-".
        assert!(cells[3..].iter().all(|c| *c == "-"), "{row}");
        let details = reason_details(&r);
        assert_eq!(
            details,
            "ipi did-not-complete:\nvCPU registers when stopped:\nrip=0x100883\nstack (rsp upwards):\n  0000\n"
        );
        // The header names what the column holds.
        let header = text.lines().find(|l| l.starts_with("test ")).unwrap();
        assert!(
            header.contains(" observed ") && !header.contains("handled"),
            "{header}"
        );
    }

    #[test]
    fn a_host_that_is_not_bare_metal_gets_its_caveat_once_and_its_summary_note_is_not_repeated() {
        let mut r = sample_results();
        let summary = "nested, paravirtual: exit costs are not hardware figures";
        r.host["virtualization"] = serde_json::json!({ "summary": summary, "kind": "nested" });
        r.notes = vec![summary.to_string(), "another note".to_string()];
        for text in [render_table(&r), render_markdown(&r)] {
            assert_eq!(
                text.matches("not hardware figures: this host is a VM")
                    .count(),
                1,
                "{text}"
            );
            assert_eq!(text.matches(summary).count(), 0, "{text}");
            assert!(has(&text, "note: another note"), "{text}");
        }
        r.host["virtualization"]["kind"] = "bare_metal".into();
        assert!(!render_table(&r).contains("not hardware figures"));
    }

    #[test]
    fn process_memory_line_gives_the_private_part_when_the_file_has_it() {
        let mut results = sample_results();
        let text = render_table(&results);
        assert!(
            has(&text, "process memory: 6.0 MiB resident outside guest RAM at most, 1.0 MiB of it private (peak RSS 7.0 MiB including guest RAM)"),
            "{text}"
        );
        // Files written before the private figure existed.
        results
            .process
            .as_mut()
            .unwrap()
            .vmm_private_outside_guest_bytes = None;
        let text = render_table(&results);
        assert!(
            has(&text, "process memory: 6.0 MiB resident outside guest RAM at most (peak RSS 7.0 MiB including guest RAM)"),
            "{text}"
        );
    }

    #[test]
    fn table_contents() {
        let results = sample_results();
        let text = render_table(&results);
        assert!(has(&text, "Test CPU @ 3.00GHz"), "{text}");
        assert!(has(
            &text,
            "not hardware figures: this host is a VM and its KVM is paravirtual"
        ));
        assert!(has(&text, "kernel 6.8.0-test"));
        assert!(has(&text, "TSC 3,000,000 kHz (KVM_GET_TSC_KHZ)"));
        assert!(has(&text, "ring 3; 101 samples x 100 iterations"));
        assert!(has(&text, "2023-11-14 22:13:20 UTC"));
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
        assert!(has(
            &text,
            "vmcall skipped: vmcall never completes on this host"
        ));
        assert!(has(&text, "ipi did-not-complete: timed out after 10 s"));
        assert!(has(&text, "wr_tsc_adjust_msr failed: emulation failure"));
        assert!(has(&text,
            "inl_from_qemu phases (median cycles; they add up to the raw round trip): exit leg 1,050 (22.6%), VMM handling 2,050 (44.1%), entry leg 1,550 (33.3%); round trip 4,650"
        ), "{text}");
        assert!(has(&text, "inl_from_qemu: KVM_RUN per call median 4,050 cycles (the guest's time between exits included); VMM handling per exit median 1,850 cycles (in-process stamps)"));
        assert!(
            has(&text, "VMM overhead, in-process stamps (inl_from_qemu, on an unpopulated bus), handling cycles per exit; a diagnostic"),
            "{text}"
        );
        assert!(!has(&text, "1.95x"), "no in-process ratio: {text}");
        assert!(
            has(&text, "exit check: 1 test checked, all passed"),
            "{text}"
        );
        assert!(has(&text, "note: this host is nested/paravirtual"));
    }

    #[test]
    fn the_floor_comparison_heads_the_overhead_block_and_says_when_it_is_missing() {
        use crate::results::{FloorComparison, FloorSide, FloorView};
        let mut results = sample_results();
        let base = results.vmm_overhead.as_ref().unwrap().full.clone();
        let side = |cmd: &str, p10: f64, median: f64, exits: u64| FloorSide {
            command: cmd.into(),
            user: Summary {
                p10,
                median,
                ..base.clone()
            },
            exits,
            exits_expected: 100_000,
            round_medians: vec![median; 5],
        };
        let c = FloorComparison::new(
            "kernel view".into(),
            "harness ins=20000".into(),
            5,
            20_000,
            side("exitlab run x", 1_664.0, 1_690.0, 100_000),
            side("exitlab-floor x", 1_600.0, 1_625.0, 100_000),
            0,
        );
        assert!(c.counts_agree());
        assert_eq!(c.filter_cost(), None);
        results.floor = Some(FloorView::Measured(Box::new(c.clone())));
        let text = render_table(&results);
        assert!(
            !has(&text, "filter"),
            "no filter row unless measured: {text}"
        );
        // With the bare loop under the one-rule filter measured in the same rounds:
        // its row, exitlab's ratio to it, and what any filter costs.
        let filtered = c.clone().with_filtered_floor(side(
            "exitlab-floor --seccomp x",
            1_700.0,
            1_690.0,
            100_000,
        ));
        assert_eq!(filtered.ratio_filtered, Some((1_664.0 / 1_700.0, 1.0)));
        assert_eq!(filtered.filter_cost(), Some((100.0, 65.0)));
        results.floor = Some(FloorView::Measured(Box::new(filtered.clone())));
        let with = render_table(&results);
        for needle in [
            "bare loop, allow-all filter",
            "exitlab-floor --seccomp x",
            "ratio to the filtered loop",
            "0.98x",
            "any seccomp filter costs the bare loop +100 cycles at p10, +65 at the median",
        ] {
            assert!(has(&with, needle), "{needle}: {with}");
        }
        let mut short = filtered;
        short.filtered_floor.as_mut().unwrap().exits = 5;
        assert!(
            !short.counts_agree(),
            "the filtered side's exits are checked too"
        );
        // A file from before the filtered side was measured reads back without it.
        let mut old = serde_json::to_value(&c).unwrap();
        old.as_object_mut().unwrap().remove("filtered_floor");
        let back: FloorComparison = serde_json::from_value(old).unwrap();
        assert_eq!((back.filtered_floor, back.ratio_filtered), (None, None));
        let block = text
            .split("VMM overhead, userspace cycles per exit in the kernel's view")
            .nth(1)
            .unwrap_or_else(|| panic!("{text}"));
        for needle in [
            "1,664",
            "1,600",
            "1.04x",
            "100,000",
            "exitlab-floor x",
            "5 rounds",
        ] {
            assert!(block.contains(needle), "{needle}: {text}");
        }
        assert!(!has(&text, "warning: the trace saw"), "{text}");
        // An exit the trace did not see is said, not hidden.
        let mut short = c;
        short.exitlab.exits = 99_998;
        assert!(!short.counts_agree());
        results.floor = Some(FloorView::Measured(Box::new(short)));
        let text = render_table(&results);
        assert!(
            has(&text, "warning: the trace saw 99,998 exits of exitlab run x where the guest makes 100,000"),
            "{text}"
        );
        results.floor = Some(FloorView::NotMeasured {
            reason: "the kernel view is not available: tracefs ...".into(),
        });
        let text = render_table(&results);
        assert!(has(&text, "VMM overhead against the independent bare loop (exitlab-floor) not measured: the kernel view is not available"), "{text}");
        // The view survives the results file.
        let json = serde_json::to_string(&results).unwrap();
        assert!(json.contains("\"status\":\"not_measured\""), "{json}");
        let back: Results = serde_json::from_str(&json).unwrap();
        assert_eq!(back.floor, results.floor);
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
        // Stamps read in 26-cycle steps: 104 against 52 would be a ratio of 2.00 that
        // rests on a difference of two steps and a bare share of two steps: no ratio is
        // printed, the difference in cycles is.
        let mut o = Overhead::new("inl_from_user", summary(104.0, 130.0), summary(52.0, 78.0));
        o.stamp_step_cycles = Some(26);
        results.vmm_overhead = Some(o.clone());
        let text = render_table(&results);
        assert!(
            !has(&text, "2.00x") && !text.contains("\n  ratio"),
            "{text}"
        );
        assert!(
            has(
                &text,
                "full - bare: +52 cycles at p10, +52 at the median (2 and 2 steps of 26 cycles"
            ),
            "{text}"
        );
        assert!(
            has(&text, "coarse: the bare handler's share is 2 step(s) of the host's clock, so one step moves it by 50%"),
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
            !has(&text, "1.04x"),
            "84 steps: still no in-process ratio\n{text}"
        );
        assert!(
            has(
                &text,
                "full - bare: +78 cycles at p10, +26 at the median (3 and 1 steps"
            ),
            "{text}"
        );
        assert!(!has(&text, "coarse"), "{text}");
        // Files from before the step was recorded show the table alone.
        o.stamp_step_cycles = None;
        results.vmm_overhead = Some(o);
        let text = render_table(&results);
        assert!(
            !has(&text, "full - bare") && !has(&text, "coarse"),
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
            observed: Some(true),
        });
        let text = render_table(&results);
        assert!(has(&text, "user*"), "{text}");
        assert!(has(&text, "* cpuid: handled in user, expected kernel"));
        assert!(has(&text,
            "exit check FAILED for cpuid: expected 0 userspace exits, observed 10100 (cpuid went to userspace)"
        ));
        assert!(
            has(&text, "exit check: 2 tests checked, 1 FAILED"),
            "{text}"
        );
        assert!(!text.contains("all passed"));
    }

    #[test]
    fn exit_checks_that_could_not_see_where_the_exits_went_are_not_counted_as_checked() {
        let mut results = sample_results();
        let check = |observed| ExitCheck {
            expected_user_exits: 0,
            observed_user_exits: 0,
            passed: true,
            detail: "no userspace exit in 500 iterations (besides 1 doorbells)".into(),
            observed,
        };
        // The empty loop: nothing to see but the absence of exits; cpuid: KVM's counters
        // counted none of its exits; wr_tsc_adjust_msr, from a file written before the
        // field: its `handled` says the same.
        results.tests[0].exit_check = Some(check(Some(true)));
        results.tests[1].handled = Some(Handling::NotObserved);
        results.tests[1].exit_check = Some(check(Some(false)));
        let old = results
            .tests
            .iter_mut()
            .find(|t| t.name == "wr_tsc_adjust_msr")
            .unwrap();
        old.status = TestStatus::Ok;
        old.expected_handling = Handling::Kernel;
        old.handled = Some(Handling::NotObserved);
        old.exit_check = Some(check(None));
        let text = render_table(&results);
        assert!(
            has(&text, "exit check: 2 tests checked, all passed; 2 could not be checked (no userspace exit expected, and KVM's counters counted none here: where their exits went was not observed)"),
            "{text}"
        );
        // Counted by KVM: checked.
        results.tests[1].handled = Some(Handling::Kernel);
        results.tests[1].exit_check = Some(check(Some(true)));
        let text = render_table(&results);
        assert!(
            has(&text, "exit check: 3 tests checked, all passed; 1 could not be checked (no userspace exit expected, and KVM's counters counted none here: where its exits went was not observed)"),
            "{text}"
        );
        // None could be.
        for t in &mut results.tests {
            t.exit_check = None;
        }
        results.tests[1].handled = Some(Handling::NotObserved);
        results.tests[1].exit_check = Some(check(Some(false)));
        assert!(
            render_table(&results).contains("exit check: no test checked; 1 could not be checked")
        );
    }

    #[test]
    fn a_line_says_how_the_figures_relate_to_kvm_unit_tests_vmexit() {
        let mut results = sample_results();
        let empty = results.tests[0].cycles.as_ref().unwrap().median;
        let line = vmexit_line(&results).unwrap();
        assert_eq!(
            line,
            format!(
                "median (raw, per iteration) is what kvm-unit-tests' vmexit prints; net median subtracts each sample's own empty loop per iteration ({} cycles at batch 1)",
                fmt_cycles(empty)
            )
        );
        assert!(line.chars().count() <= 160, "{}", line.len());
        assert_eq!(render_table(&results).matches(&line).count(), 1);
        // Without the empty loop's figure the line still says what the columns are.
        results.tests[0].cycles = None;
        assert!(vmexit_line(&results)
            .unwrap()
            .ends_with("net median subtracts each sample's own empty loop per iteration"));
        // Nothing but the empty loop: nothing to relate.
        results.tests.truncate(1);
        assert_eq!(vmexit_line(&results), None);
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
            assert!(!has(&text, "host:"), "{text}");
            let _ = render_markdown(&results);
        }
        results.tests.clear();
        results.vmm_overhead = None;
        results.notes.clear();
        results.config.pin = None;
        let text = render_table(&results);
        assert!(has(&text, "(no tests)"));
        assert!(!has(&text, "exit check"));
        assert!(!has(&text, "pinned"));
        let md = render_markdown(&results);
        assert!(has(&md, "| test |"));
    }

    #[test]
    fn phases_with_zero_total() {
        let mut results = sample_results();
        let mut t = ok_test("zero", 0.0);
        let mut z = crate::stats::describe::summarize(&[0.0]).unwrap();
        z.median = 0.0;
        t.phases = Some(crate::results::Phases {
            exit_leg: z.clone(),
            handling: z.clone(),
            entry_leg: z,
        });
        results.tests = vec![t];
        let text = render_table(&results);
        assert!(has(&text, "zero phases (median cycles; they add up to the raw round trip): exit leg 0, VMM handling 0, entry leg 0; round trip 0"), "{text}");
    }

    #[test]
    fn markdown_table() {
        let mut results = sample_results();
        results.tests[0].name = "odd|name".into();
        let md = render_markdown(&results);
        assert!(
            md.contains("- host: Test CPU @ 3.00GHz; kernel 6.8.0-test\n- not hardware figures: "),
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
        assert!(has(&md, "`odd\\|name`"), "{md}");
        assert!(has(&md, "| `cpuid` | kernel | - | 1,250 |"), "{md}");
        assert!(has(&md, "note: this host is nested/paravirtual"));
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
            spread: 0.012,
        });
        results.tests[2].round_spread = Some(RoundSpread {
            rounds: 8,
            spread: 0.034,
        });
        let text = render_table(&results);
        assert!(has(&text, "mixed (user 6000, kernel 4100)*"), "{text}");
        assert!(has(&text,
            "* not observed: where the exit was handled could not be seen (no userspace exit, and KVM's exit counter counted none beyond the empty loop's); where each is expected to be handled (bench --list, column \"expected\"): cpuid (expected kernel)"
        ), "{text}");
        assert!(
            has(
                &text,
                "KVM counters (binary stats) against exitlab's counts, 2 tests: 1 MISMATCH(ES)"
            ),
            "{text}"
        );
        assert!(
            has(
                &text,
                "  MISMATCH inl_from_qemu: mmio_exits KVM 3, exitlab 0"
            ),
            "{text}"
        );
        assert!(has(&text,
            "  io_exits not counted by the host (KVM 0) in 2 tests, exitlab saw: cpuid (4), inl_from_qemu (10,101)"
        ), "{text}");
        assert!(
            !text.contains("  exits"),
            "agreeing counters are not listed: {text}"
        );
        assert!(has(&text,
            "spread of the rounds' medians (max/min - 1, 2 tests): median 2.3%, worst 3.4% (inl_from_qemu)"
        ), "{text}");
    }

    #[test]
    fn per_vcpu_lines_cover_only_tests_on_several_vcpus() {
        use crate::irq::{ApicMode, IrqResult, VcpuExits};
        let vcpu = |n: u32, hlt: u64, kvm: Option<u64>| VcpuExits {
            vcpu: n,
            user: exitlab_counts::ExitCounts {
                hlt,
                doorbell: 1,
                ..Default::default()
            },
            kvm_exits: kvm,
            halt_exits: kvm.map(|_| hlt),
        };
        let mut two = ok_test("ipi", 1000.0);
        two.irq = Some(IrqResult {
            apic: ApicMode::X2apic,
            cpus: 2,
            per_vcpu: vec![vcpu(0, 3, Some(40)), vcpu(1, 5, None)],
        });
        let mut one = ok_test("cpuid", 1000.0);
        one.irq = Some(IrqResult {
            apic: ApicMode::Xapic,
            cpus: 1,
            per_vcpu: vec![vcpu(0, 0, Some(1))],
        });
        let lines = per_vcpu_lines(&[one, two, ok_test("hlt", 1.0)]);
        assert_eq!(
            lines,
            vec![
                "ipi (x2apic, 2 vCPUs) exits per vCPU: vCPU 0: 4 userspace, 40 KVM exits, 3 HLT exits; vCPU 1: 6 userspace, - KVM exits, - HLT exits"
                    .to_string()
            ]
        );
    }
}

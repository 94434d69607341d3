//! `exitlab report` and `exitlab compare`: read results files and print them.

use std::path::Path;

use exitlab_lab::results::Results;
use exitlab_lab::{compare, report, results};

use crate::exit::usage_error;

/// Largest results file `report` and `compare` read.
pub const MAX_RESULTS_BYTES: u64 = 256 << 20;

/// Refuses results files that are not regular files or are too big, before the results
/// reader opens them (it would block on a FIFO and read /dev/zero forever).
fn check_results_file(p: &Path) -> Result<(), String> {
    crate::input::open_regular(p, "the results file", MAX_RESULTS_BYTES).map(drop)
}

/// Refuses results whose cycle figures are negative or not finite (a tampered or
/// corrupt file): every number in the cycle summaries, phases, KVM_RUN durations,
/// userspace shares and the overhead experiment, and the ns medians, must be a finite
/// value >= 0. (Net figures, differences of two measurements, may be negative.)
pub fn check_figures(r: &Results, path: &Path) -> Result<(), String> {
    fn walk(v: &serde_json::Value, at: &str, bad: &mut Vec<String>) {
        match v {
            serde_json::Value::Number(n) => match n.as_f64() {
                Some(x) if x.is_finite() && x >= 0.0 => {}
                _ => bad.push(format!("{at} = {n}")),
            },
            serde_json::Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, &format!("{at}[{i}]"), bad);
                }
            }
            serde_json::Value::Object(o) => {
                for (k, x) in o {
                    walk(x, &format!("{at}.{k}"), bad);
                }
            }
            _ => {}
        }
    }
    let mut bad = Vec::new();
    for t in &r.tests {
        let at = format!("test {}", sanitize(&t.name));
        for (field, v) in [
            ("cycles", serde_json::to_value(&t.cycles)),
            ("kvm_run_cycles", serde_json::to_value(&t.kvm_run_cycles)),
            ("userspace_share", serde_json::to_value(&t.userspace_share)),
            ("phases", serde_json::to_value(&t.phases)),
            ("median_ns", serde_json::to_value(t.median_ns)),
            ("raw_samples", serde_json::to_value(&t.raw_samples)),
        ] {
            walk(&v.unwrap_or_default(), &format!("{at}: {field}"), &mut bad);
        }
        if t.net_median_cycles.is_some_and(|x| !x.is_finite()) {
            bad.push(format!("{at}: net_median_cycles is not finite"));
        }
    }
    walk(
        &serde_json::to_value(&r.vmm_overhead).unwrap_or_default(),
        "vmm_overhead",
        &mut bad,
    );
    if !(r.wall_seconds.is_finite() && r.wall_seconds >= 0.0) {
        bad.push(format!("wall_seconds = {}", r.wall_seconds));
    }
    if bad.is_empty() {
        Ok(())
    } else {
        bad.truncate(5);
        Err(format!(
            "{}: cycle figures must be finite and not negative; found {}: the file is corrupt \
             or was edited",
            path.display(),
            bad.join(", ")
        ))
    }
}

/// Removes terminal control sequences from text read from a file before it is printed:
/// ESC and every other C0/C1 control character except newline and tab.
pub fn sanitize(s: &str) -> String {
    s.chars()
        .filter(|&c| {
            c == '\n' || c == '\t' || !(c.is_control() || ('\u{80}'..='\u{9f}').contains(&c))
        })
        .collect()
}

/// Reads a results file for printing: bounded, regular file, sane figures.
fn load(p: &Path) -> Result<Results, String> {
    check_results_file(p)?;
    let r = results::read(p).map_err(|e| e.to_string())?;
    check_figures(&r, p)?;
    Ok(r)
}

/// `exitlab compare BEFORE AFTER`.
pub fn compare_cmd(before: &Path, after: &Path) -> i32 {
    let b = match load(before) {
        Ok(r) => r,
        Err(e) => return usage_error(sanitize(&e)),
    };
    let a = match load(after) {
        Ok(r) => r,
        Err(e) => return usage_error(sanitize(&e)),
    };
    print!(
        "{}",
        sanitize(&compare::render_comparison(&compare::compare(&b, &a)))
    );
    0
}

/// `exitlab report FILE`.
pub fn report_cmd(file: &Path, markdown: bool) -> i32 {
    match load(file) {
        Ok(r) => {
            if markdown {
                print!("{}", sanitize(&report::render_markdown(&r)));
            } else {
                print!("{}", sanitize(&report::render_table(&r)));
            }
            0
        }
        Err(e) => usage_error(sanitize(&e)),
    }
}

//! `exitlab report` and `exitlab compare`: read results files and render them.

use std::path::{Path, PathBuf};

use exitlab_results::results::Results;
use exitlab_results::{
    compare, comparison_report, differences, html, openmetrics, report, results,
};

use crate::status::{usage_error, EXIT_CANT_WRITE, EXIT_NO_VERDICT, EXIT_REGRESSION};

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
    walk(
        &serde_json::to_value(&r.floor).unwrap_or_default(),
        "floor",
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

/// Most runs `compare` reads for one side.
pub const MAX_RUNS_PER_SIDE: usize = 500;

/// The results files of one side of `compare`: the file itself, or every `*.json` file of
/// a directory (sorted by name; several runs of one build). A/B runs are refused there:
/// their two sides are compared by `report`.
fn side_files(p: &Path, label: &str) -> Result<Vec<PathBuf>, String> {
    if !p.is_dir() {
        return Ok(vec![p.to_path_buf()]);
    }
    let entries = std::fs::read_dir(p)
        .map_err(|e| format!("cannot read the {label} directory {}: {e}", p.display()))?;
    let mut files = Vec::new();
    for e in entries {
        let e = e.map_err(|e| format!("cannot read the {label} directory {}: {e}", p.display()))?;
        let path = e.path();
        if path.extension().is_some_and(|x| x == "json") && !path.is_dir() {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(format!(
            "the {label} directory {} holds no results file (*.json); give a results file, or a directory of results files of one build written by `exitlab bench --json`",
            p.display()
        ));
    }
    if files.len() > MAX_RUNS_PER_SIDE {
        return Err(format!(
            "the {label} directory {} holds {} results files; compare reads at most {MAX_RUNS_PER_SIDE} a side",
            p.display(),
            files.len()
        ));
    }
    Ok(files)
}

/// Loads one side of `compare` ([`side_files`]). Two files of a directory with the same
/// bytes are one run counted twice, whose zero spread would narrow the interval: refused.
fn load_side(p: &Path, label: &str) -> Result<Vec<(String, Results)>, String> {
    let dir = p.is_dir();
    let mut out = Vec::new();
    let mut seen: Vec<(u64, PathBuf)> = Vec::new();
    for f in side_files(p, label)? {
        if dir {
            use std::hash::{Hash, Hasher};
            let bytes =
                std::fs::read(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            let key = h.finish();
            if let Some((_, twin)) = seen
                .iter()
                .find(|(k, other)| *k == key && std::fs::read(other).is_ok_and(|b| b == bytes))
            {
                return Err(format!(
                    "{} and {} in the {label} directory are the same run, byte for byte: a run counted twice would narrow the interval; remove the copy",
                    twin.display(),
                    f.display()
                ));
            }
            seen.push((key, f.clone()));
        }
        let r = load(&f)?;
        if dir && r.ab.is_some() {
            return Err(format!(
                "{} is an A/B run (bench --ab): a directory of runs to compare holds runs of one build; render an A/B run with `exitlab report`",
                f.display()
            ));
        }
        out.push((f.display().to_string(), r));
    }
    Ok(out)
}

/// The runs of one side as [`compare::compare_runs`] takes them.
fn runs_of(side: &[(String, Results)]) -> Vec<compare::Run<'_>> {
    side.iter()
        .map(|(name, results)| compare::Run { name, results })
        .collect()
}

/// What a gate judges and whether a missing verdict fails it (`compare`, `bench --ab`).
#[derive(Debug, Clone, Default)]
pub struct GateArgs {
    /// `--gate`: the tests the gate judges (empty: every test but the empty loop).
    pub only: Vec<String>,
    /// `--accept-no-verdict`.
    pub accept_no_verdict: bool,
}

/// The gate's lines for `--gate` and the exit status of a comparison: 4 when the gate
/// fires, 12 (no verdict) when a test it judges has none or the design cannot gate
/// (unless accepted), 0 otherwise.
pub fn gate_status(cmp: &compare::Comparison, args: &GateArgs) -> (Vec<String>, i32) {
    let only = (!args.only.is_empty()).then_some(args.only.as_slice());
    let mut lines = Vec::new();
    if !cmp.design.gates() {
        let code = if args.accept_no_verdict {
            0
        } else {
            EXIT_NO_VERDICT
        };
        if code != 0 {
            lines
                .push("exit 12: two single files cannot gate (--accept-no-verdict: exit 0)".into());
        }
        return (lines, code);
    }
    let g = cmp.gate(only);
    if only.is_some() {
        lines.push(format!("--gate {}:", args.only.join(",")));
        lines.extend(comparison_report::gate_lines(cmp, &g));
    }
    let code = if g.fires() {
        EXIT_REGRESSION
    } else if (!g.no_verdict.is_empty() || g.judged.is_empty()) && !args.accept_no_verdict {
        if g.judged.is_empty() && g.no_verdict.is_empty() {
            lines.push("exit 12: the gate judged no test".into());
        } else {
            lines.push(
                "exit 12: a test the gate judges has no verdict (--accept-no-verdict: exit 0)"
                    .into(),
            );
        }
        EXIT_NO_VERDICT
    } else {
        0
    };
    (lines, code)
}

/// `exitlab compare BEFORE AFTER [--threshold PCT] [--gate TESTS] [--accept-no-verdict]`:
/// two directories of runs are compared with runs as units and gate; two single files
/// are a screen ([`compare::compare`]). See [`gate_status`] for the exit status.
pub fn compare_cmd(
    before: &Path,
    after: &Path,
    threshold: Option<f64>,
    gate: &GateArgs,
    changed: &[String],
) -> i32 {
    if let Some(t) = threshold.filter(|t| !(t.is_finite() && (0.0..=1000.0).contains(t))) {
        return usage_error(format!(
            "--threshold {t}: expected a percentage from 0 to 1000"
        ));
    }
    let b = match load_side(before, "before") {
        Ok(r) => r,
        Err(e) => return usage_error(sanitize(&e)),
    };
    let a = match load_side(after, "after") {
        Ok(r) => r,
        Err(e) => return usage_error(sanitize(&e)),
    };
    for (name, r) in b.iter().chain(&a) {
        if r.ab.is_some() {
            return usage_error(sanitize(&format!(
                "{name} is an A/B run (bench --ab): its two sides are compared by `exitlab report {name}`; compare takes plain runs"
            )));
        }
    }
    let threshold = threshold.unwrap_or(compare::DEFAULT_THRESHOLD_PCT);
    // A directory is a set of runs, however many it holds (a CI whose runs partly failed
    // to write must not fall back to a screen of one run).
    let several = b.len() > 1 || a.len() > 1 || before.is_dir() || after.is_dir();
    let mut cmp = if several {
        compare::compare_runs(&runs_of(&b), &runs_of(&a), threshold)
    } else {
        compare::compare(&b[0].1, &a[0].1, threshold)
    };
    differences::declare_changed(&mut cmp.warnings, &b[0].1, &a[0].1, changed);
    print!(
        "{}",
        sanitize(&comparison_report::render_comparison(
            &cmp,
            ["before", "after"]
        ))
    );
    let (lines, code) = gate_status(&cmp, gate);
    for line in lines {
        println!("{}", sanitize(&line));
    }
    code
}

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Results files written by `exitlab bench --json` (several are overlaid in the
    /// HTML plots and listed one after the other in the text formats).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Output format: `text` (terminal table), `md` (Markdown for a cover letter), `csv`
    /// (one row per test and file), `openmetrics` (for Prometheus' pushgateway or
    /// node_exporter's textfile collector), `html` (one self-contained page). Without it,
    /// -o's extension decides: .md, .csv, .prom or .om (OpenMetrics), .html or .htm;
    /// any other file, and standard output, get text.
    #[arg(long, value_parser = ["text", "md", "csv", "openmetrics", "html"])]
    format: Option<String>,
    /// Same as --format md.
    #[arg(long)]
    markdown: bool,
    /// Write to this file instead of standard output, in the format its extension names
    /// unless --format says otherwise (refused when the two contradict each other).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

/// The format an output file's extension names (`report -o`), if any: `.md`/`.markdown`,
/// `.csv`, `.prom`/`.om` (OpenMetrics text, as node_exporter's textfile collector reads
/// `*.prom`), `.html`/`.htm`. Any other extension names none (text by default).
fn format_of_extension(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "md" | "markdown" => "md",
        "csv" => "csv",
        "prom" | "om" => "openmetrics",
        "html" | "htm" => "html",
        _ => return None,
    })
}

/// The format `report` writes: `--format` (or `--markdown`) when given, else the one
/// `-o`'s extension names, else text. An error when the format asked for contradicts the
/// extension (`--format csv -o r.md`), which would otherwise write a file whose name
/// says otherwise.
fn output_format(
    format: Option<&str>,
    markdown: bool,
    output: Option<&Path>,
) -> Result<&'static str, String> {
    let asked = match (format, markdown) {
        (Some(f), true) if f != "md" => {
            return Err(format!(
                "--markdown contradicts --format {f}: give one of them"
            ))
        }
        (Some(f), _) => Some(f),
        (None, true) => Some("md"),
        (None, false) => None,
    };
    let named = output.and_then(|o| format_of_extension(o).map(|f| (o, f)));
    match (asked, named) {
        (Some(a), Some((o, n))) if a != n => Err(format!(
            "--format {a} contradicts the output file {}, whose extension names {n}: give \
             a file name that fits the format, or leave out --format",
            o.display()
        )),
        (_, Some((_, n))) => Ok(n),
        (Some(a), None) => ["text", "md", "csv", "openmetrics", "html"]
            .into_iter()
            .find(|f| *f == a)
            .ok_or_else(|| format!("unknown --format {a}")),
        (None, None) => Ok("text"),
    }
}

/// `exitlab report FILE... [--format F] [-o OUT]`.
pub fn report_cmd(a: ReportArgs) -> i32 {
    let format = match output_format(a.format.as_deref(), a.markdown, a.output.as_deref()) {
        Ok(f) => f,
        Err(e) => return usage_error(e),
    };
    let mut all = Vec::new();
    for f in &a.files {
        match load(f) {
            Ok(r) => all.push((f.display().to_string(), r)),
            Err(e) => return usage_error(sanitize(&e)),
        }
    }
    let text = match format {
        "html" => html::render(&all),
        "csv" => report::render_csv(&all),
        "openmetrics" => openmetrics::render(&all),
        "md" => {
            // One section per file under its own heading, then, for two or more plain
            // files, each compared with the first (a screen: one run a side).
            let mut s: String = all
                .iter()
                .map(|(name, r)| {
                    let mut s = format!("## {}\n\n", report::md_cell(name));
                    s.push_str(&report::render_markdown(r));
                    if let Some(why) = &r.incomplete {
                        s.push_str(&format!("\nIncomplete: {}\n", report::md_cell(why)));
                    }
                    s
                })
                .collect::<Vec<_>>()
                .join("\n");
            if all.len() >= 2 && all.iter().all(|(_, r)| r.ab.is_none()) {
                let (first, base) = &all[0];
                for (name, other) in &all[1..] {
                    let cmp = compare::compare(base, other, compare::DEFAULT_THRESHOLD_PCT);
                    s.push_str(&format!(
                        "\n## Comparison: {} → {}\n\n",
                        report::md_cell(first),
                        report::md_cell(name)
                    ));
                    s.push_str(&comparison_report::render_comparison_md(
                        &cmp,
                        ["before", "after"],
                    ));
                }
            }
            s
        }
        _ => all
            .iter()
            .map(|(name, r)| {
                let mut s = String::new();
                if all.len() > 1 {
                    s.push_str(&format!("== {name}\n"));
                }
                s.push_str(&report::render_table(r));
                if let Some(ab) = report::render_ab(r) {
                    s.push('\n');
                    s.push_str(&ab);
                }
                if let Some(why) = &r.incomplete {
                    s.push_str(&format!("incomplete: {why}\n"));
                }
                s
            })
            .collect::<Vec<_>>()
            .join("\n"),
    };
    // Every string in a results file is the file's; none reaches a terminal or a page
    // with control characters in it.
    let text = sanitize(&text);
    if crate::verbosity::level() > 0 {
        // A stuck test's registers and stack, which the table leaves out.
        for (name, r) in &all {
            let details = report::reason_details(r);
            if !details.is_empty() {
                eprint!("{}:\n{}", name, sanitize(&details));
            }
        }
    }
    match &a.output {
        Some(path) => match std::fs::write(path, text) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("exitlab: cannot write {}: {e}", path.display());
                EXIT_CANT_WRITE
            }
        },
        None => {
            print!("{text}");
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_files_extension_chooses_the_format_unless_format_is_given() {
        let f = |format: Option<&str>, markdown: bool, out: Option<&str>| {
            output_format(format, markdown, out.map(Path::new))
        };
        for (out, want) in [
            ("r.md", "md"),
            ("r.MD", "md"),
            ("r.markdown", "md"),
            ("r.csv", "csv"),
            ("r.prom", "openmetrics"),
            ("dir/r.om", "openmetrics"),
            ("r.html", "html"),
            ("r.htm", "html"),
            ("r.txt", "text"),
            ("r", "text"),
            ("r.json", "text"),
        ] {
            assert_eq!(f(None, false, Some(out)), Ok(want), "{out}");
            // The same format given as well: no contradiction.
            assert_eq!(f(Some(want), false, Some(out)), Ok(want), "{out}");
        }
        assert_eq!(f(None, false, None), Ok("text"));
        assert_eq!(f(None, true, None), Ok("md"));
        assert_eq!(f(Some("csv"), false, None), Ok("csv"));
        // An extension that names no format takes any.
        assert_eq!(f(Some("csv"), false, Some("r.txt")), Ok("csv"));
        assert_eq!(f(None, true, Some("notes.txt")), Ok("md"));
        assert_eq!(f(None, true, Some("r.md")), Ok("md"));
        for (format, markdown, out) in [
            (Some("csv"), false, "r.md"),
            (Some("text"), false, "r.html"),
            (Some("html"), false, "r.prom"),
            (Some("md"), false, "r.csv"),
            (None, true, "r.csv"),
        ] {
            let e = f(format, markdown, Some(out)).unwrap_err();
            assert!(e.contains("contradicts") && e.contains(out), "{e}");
        }
        assert!(f(Some("csv"), true, None)
            .unwrap_err()
            .contains("--markdown"));
    }
}

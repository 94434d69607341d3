//! `exitlab report` and `exitlab compare`: read results files and render them.

use std::path::{Path, PathBuf};

use exitlab_lab::{compare, html, openmetrics, report, results};

use crate::exit::{usage_error, EXIT_REGRESSION};

/// `exitlab compare BEFORE AFTER [--threshold PCT]`: 1 when some test is slower beyond
/// the threshold with confidence, 0 otherwise.
pub fn compare_cmd(before: &Path, after: &Path, threshold: f64) -> i32 {
    if !(threshold.is_finite() && (0.0..=1000.0).contains(&threshold)) {
        return usage_error(format!(
            "--threshold {threshold}: expected a percentage from 0 to 1000"
        ));
    }
    let b = match results::read(before) {
        Ok(r) => r,
        Err(e) => return usage_error(e),
    };
    let a = match results::read(after) {
        Ok(r) => r,
        Err(e) => return usage_error(e),
    };
    let cmp = compare::compare(&b, &a, threshold);
    print!("{}", compare::render_comparison(&cmp, ["before", "after"]));
    if cmp.regressions().is_empty() {
        0
    } else {
        EXIT_REGRESSION
    }
}

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Results files written by `exitlab bench --json` (several are overlaid in the
    /// HTML plots and listed one after the other in the text formats).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Output format: `text` (terminal table), `md` (Markdown for a cover letter), `csv`
    /// (one row per test and file), `openmetrics` (for Prometheus' pushgateway or
    /// node_exporter's textfile collector), `html` (one self-contained page; the default
    /// when -o names a .html file).
    #[arg(long, value_parser = ["text", "md", "csv", "openmetrics", "html"])]
    format: Option<String>,
    /// Same as --format md.
    #[arg(long)]
    markdown: bool,
    /// Write to this file instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

/// `exitlab report FILE... [--format F] [-o OUT]`.
pub fn report_cmd(a: ReportArgs) -> i32 {
    let mut all = Vec::new();
    for f in &a.files {
        match results::read(f) {
            Ok(r) => all.push((f.display().to_string(), r)),
            Err(e) => return usage_error(e),
        }
    }
    let format = match (&a.format, a.markdown, &a.output) {
        (Some(f), _, _) => f.as_str(),
        (None, true, _) => "md",
        (None, false, Some(o)) if o.extension().is_some_and(|e| e == "html" || e == "htm") => {
            "html"
        }
        _ => "text",
    };
    let text = match format {
        "html" => html::render(&all),
        "csv" => report::render_csv(&all),
        "openmetrics" => openmetrics::render(&all),
        _ => all
            .iter()
            .map(|(name, r)| {
                let mut s = String::new();
                if all.len() > 1 {
                    s.push_str(&format!("== {name}\n"));
                }
                s.push_str(&if format == "md" {
                    report::render_markdown(r)
                } else {
                    report::render_table(r)
                });
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
    match &a.output {
        Some(path) => match std::fs::write(path, text) {
            Ok(()) => 0,
            Err(e) => usage_error(format!("cannot write {}: {e}", path.display())),
        },
        None => {
            print!("{text}");
            0
        }
    }
}

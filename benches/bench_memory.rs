//! Footprint of `exitlab bench`: the resident memory outside guest RAM that the default
//! run reports (the largest over every VM it ran, the VMM overhead experiment's
//! included) and its peak RSS, over repeated default runs, as median and spread.
//!
//!     cargo bench --bench bench_memory [-- --runs N] [-- --baseline PATH/TO/OTHER/exitlab]
//!
//! With `--baseline`, the other binary's runs are interleaved with this one's, so that
//! both see the same host (a busy host gets extra rounds, which hold more samples), and
//! the ratio of the medians is printed. Goal: 10 MiB or less outside guest RAM. A run
//! takes 15-30 s on a nested host; the default is 3 runs each.
#![deny(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{line, verdict};

/// Goal for resident memory outside guest RAM during `exitlab bench`.
const GOAL_MIB: f64 = 10.0;

/// What one run reported, MiB.
#[derive(Debug, Clone, Copy)]
struct Run {
    outside_mib: f64,
    peak_mib: f64,
}

fn run(exe: &Path, json: &Path) -> Result<Run, String> {
    let out = Command::new(exe)
        .args(["bench", "--quiet", "--json"])
        .arg(json)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    // 0, or 4 when an exit-count check failed on a noisy host: the footprint still counts.
    if !matches!(out.status.code(), Some(0) | Some(4)) {
        return Err(format!(
            "{} bench ended with {:?}:\n{}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = std::fs::read_to_string(json).map_err(|e| format!("{}: {e}", json.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let mib = |key: &str| {
        v["process"][key]
            .as_u64()
            .map(|b| b as f64 / (1u64 << 20) as f64)
            .ok_or_else(|| format!("no process.{key} in the results of {}", exe.display()))
    };
    Ok(Run {
        outside_mib: mib("vmm_rss_outside_guest_bytes")?,
        peak_mib: mib("peak_rss_bytes")?,
    })
}

fn report(name: &str, runs: &[Run]) -> Option<f64> {
    println!("{name}:");
    let outside = line(
        "resident outside guest RAM",
        "MiB",
        "runs",
        runs.iter().map(|r| r.outside_mib).collect(),
    );
    line(
        "peak RSS (guest RAM included)",
        "MiB",
        "runs",
        runs.iter().map(|r| r.peak_mib).collect(),
    );
    outside
}

fn main() {
    let mut runs = 3usize;
    let mut baseline: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().and_then(|n| n.parse().ok()).unwrap_or(3),
            "--baseline" => baseline = args.next().map(PathBuf::from),
            _ => {} // cargo passes --bench
        }
    }
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_exitlab"));
    let json =
        std::env::temp_dir().join(format!("exitlab-bench-memory-{}.json", std::process::id()));
    let mut this = Vec::new();
    let mut other = Vec::new();
    let mut failed = None;
    'runs: for _ in 0..runs {
        for (exe, into) in [(Some(&exe), &mut this), (baseline.as_ref(), &mut other)] {
            let Some(exe) = exe else { continue };
            match run(exe, &json) {
                Ok(r) => into.push(r),
                Err(e) => {
                    failed = Some(e);
                    break 'runs;
                }
            }
        }
    }
    let _ = std::fs::remove_file(&json);
    if let Some(e) = failed {
        eprintln!("bench memory benchmark failed: {e}");
        std::process::exit(1);
    }
    println!("exitlab bench (default settings) memory, {runs} runs");
    let outside = report(&exe.display().to_string(), &this);
    if let Some(b) = &baseline {
        if let (Some(a), Some(b)) = (outside, report(&b.display().to_string(), &other)) {
            println!(
                "ratio of medians outside guest RAM (this / baseline): {:.2}x",
                a / b
            );
        }
    }
    verdict(
        "memory outside guest RAM during bench",
        outside,
        GOAL_MIB,
        "MiB",
    );
}

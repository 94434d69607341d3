//! Startup and footprint of `exitlab run`: time from `main` to the first guest instruction,
//! whole-process wall time, and resident memory outside guest RAM, over repeated starts of
//! the conformance kernel, as median and spread.
//!
//!     cargo bench --bench startup [-- --starts N] [-- --baseline PATH/TO/OTHER/exitlab]
//!
//! With `--baseline`, the other binary's starts are interleaved with this one's, so that
//! both see the same host, and the ratio of the medians is printed. Goals (issue 18):
//! 3 ms or less to the first guest instruction, 5 MiB or less outside guest RAM.
#![deny(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

mod common;
use common::{line, verdict};

/// Goal for the time from `main` to the first guest instruction.
const GOAL_MS: f64 = 3.0;
/// Goal for resident memory outside guest RAM.
const GOAL_MIB: f64 = 5.0;

/// What one start reported.
#[derive(Debug, Clone, Copy, Default)]
struct Start {
    /// `run -v`: first guest instruction, ms after `main`.
    first_ms: Option<f64>,
    /// `run -v`: resident memory outside guest RAM, MiB.
    outside_mib: Option<f64>,
    /// Spawn to exit, as the parent saw it (ms), guest run included.
    wall_ms: f64,
}

/// The number after `key` and before `unit` in `line`, e.g. `4.7` in "... instruction 4.7 ms".
fn number_before(line: &str, key: &str, unit: &str) -> Option<f64> {
    let rest = &line[line.find(key)? + key.len()..];
    let rest = rest.trim_start();
    let end = rest.find(unit)?;
    rest[..end].trim().parse().ok()
}

/// Parses the `run -v` summary line.
fn parse(stderr: &str) -> (Option<f64>, Option<f64>) {
    let Some(line) = stderr
        .lines()
        .find(|l| l.contains("first guest instruction"))
    else {
        return (None, None);
    };
    let first = number_before(line, "first guest instruction", "ms");
    let outside = line
        .split(';')
        .find(|p| p.contains("resident outside guest RAM"))
        .and_then(|p| p.split_whitespace().next()?.parse().ok());
    (first, outside)
}

fn start(exe: &Path, kernel: &Path) -> Result<Start, String> {
    let t = Instant::now();
    let out = Command::new(exe)
        .args(["run", "-v", "--serial", "none", "--cmdline", "mbinfo"])
        .arg(kernel)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    let wall_ms = t.elapsed().as_secs_f64() * 1e3;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // mbinfo ends with debug-exit 0, which `run` turns into exit code 1.
    if out.status.code() != Some(1) {
        return Err(format!(
            "{} run ended with {:?}:\n{stderr}",
            exe.display(),
            out.status
        ));
    }
    let (first_ms, outside_mib) = parse(&stderr);
    if first_ms.is_none() {
        return Err(format!("no startup figure in:\n{stderr}"));
    }
    Ok(Start {
        first_ms,
        outside_mib,
        wall_ms,
    })
}

fn report(name: &str, starts: &[Start]) -> (Option<f64>, Option<f64>) {
    println!("{name}:");
    let first = line(
        "first guest instruction after main",
        "ms",
        "starts",
        starts.iter().filter_map(|s| s.first_ms).collect(),
    );
    let outside = line(
        "resident outside guest RAM",
        "MiB",
        "starts",
        starts.iter().filter_map(|s| s.outside_mib).collect(),
    );
    line(
        "process wall (spawn to exit)",
        "ms",
        "starts",
        starts.iter().map(|s| s.wall_ms).collect(),
    );
    (first, outside)
}

fn main() {
    let mut starts = 20usize;
    let mut baseline: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--starts" => starts = args.next().and_then(|n| n.parse().ok()).unwrap_or(20),
            "--baseline" => baseline = args.next().map(PathBuf::from),
            _ => {} // cargo passes --bench
        }
    }
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_exitlab"));
    let kernel = std::env::temp_dir().join(format!("exitlab-startup-{}.elf", std::process::id()));
    if let Err(e) = std::fs::write(&kernel, exitlab_guest::CONFORMANCE_MULTIBOOT) {
        eprintln!("cannot write {}: {e}", kernel.display());
        std::process::exit(1);
    }
    let mut this = Vec::new();
    let mut other = Vec::new();
    let mut failed = None;
    // One warm-up start each (page cache, KVM module state), then interleaved starts.
    for i in 0..=starts {
        for (exe, into) in [(Some(&exe), &mut this), (baseline.as_ref(), &mut other)] {
            let Some(exe) = exe else { continue };
            match start(exe, &kernel) {
                Ok(s) if i > 0 => into.push(s),
                Ok(_) => {}
                Err(e) => failed = Some(e),
            }
        }
        if failed.is_some() {
            break;
        }
    }
    let _ = std::fs::remove_file(&kernel);
    if let Some(e) = failed {
        eprintln!("startup benchmark failed: {e}");
        std::process::exit(1);
    }
    println!("exitlab run startup, conformance kernel (multiboot), default --mem, {starts} starts");
    let (first, outside) = report(&exe.display().to_string(), &this);
    if let Some(b) = &baseline {
        let (b_first, _) = report(&b.display().to_string(), &other);
        if let (Some(a), Some(b)) = (first, b_first) {
            println!("ratio of medians (this / baseline): {:.2}x", a / b);
        }
    }
    verdict("first guest instruction", first, GOAL_MS, "ms");
    verdict("memory outside guest RAM", outside, GOAL_MIB, "MiB");
}

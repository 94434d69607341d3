//! `exitlab bench`: run the exit test suite and print (and optionally save) its results.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use exitlab_lab::bench::{self, BenchOptions, Progress};
use exitlab_lab::catalogue::{self, TestDef, Where};
use exitlab_lab::report;
use exitlab_lab::results::{self, TestStatus};
use exitlab_lab::runner::RunParams;

use crate::exit::{usage_error, EXIT_CANT_WRITE, EXIT_NO_KVM, EXIT_TEST_FAILED, EXIT_VMM_FAILED};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// List the tests and exit.
    #[arg(long)]
    list: bool,
    /// Tests to run, comma-separated (names from --list); default: the whole suite.
    #[arg(long, value_delimiter = ',')]
    tests: Vec<String>,
    /// Samples per test.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    samples: u64,
    /// Iterations of the measured instruction per sample.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    batch: u64,
    /// Unmeasured iterations before the first sample.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    warmup: u64,
    /// Guest privilege level of the measured loop: 0 or 3 (instructions that need ring 0 are skipped at ring 3).
    #[arg(long, default_value = "0", value_parser = clap::builder::TypedValueParser::try_map(clap::builder::PossibleValuesParser::new(["0", "3"]), |s| s.parse::<u8>()))]
    ring: u8,
    /// Write the results as JSON to this file (atomically).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Keep every sample in the JSON.
    #[arg(long)]
    raw: bool,
    /// Pin the vCPU thread to this host CPU.
    #[arg(long)]
    pin: Option<usize>,
    /// Stop a test that makes no progress for this many seconds.
    #[arg(long, default_value_t = 3.0)]
    timeout: f64,
    /// Skip the VMM overhead experiment (full exit loop vs bare KVM_RUN loop).
    #[arg(long)]
    no_overhead: bool,
    /// Spread each test's samples over this many rounds of the whole suite (each test in
    /// a fresh VM every round), so that host drift affects all tests alike.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,
}

fn list_tests() {
    println!("{:<22} {:<8} {:<6} what", "test", "handled", "ring3");
    for t in catalogue::TESTS {
        let w = match t.expected {
            Where::Kernel => "kernel",
            Where::User => "user",
            Where::Nowhere => "none",
        };
        println!(
            "{:<22} {:<8} {:<6} {}",
            t.name,
            w,
            if t.ring3 { "yes" } else { "no" },
            t.what
        );
    }
}

fn select_tests(names: &[String]) -> Result<Vec<&'static TestDef>, String> {
    if names.is_empty() {
        return Ok(catalogue::default_suite());
    }
    let mut out = Vec::new();
    for n in names {
        let n = n.trim();
        if n.is_empty() {
            continue;
        }
        match catalogue::TESTS.iter().find(|t| t.name == n) {
            Some(t) if !out.contains(&t) => out.push(t),
            Some(_) => {}
            None => {
                let valid: Vec<&str> = catalogue::TESTS.iter().map(|t| t.name).collect();
                return Err(format!(
                    "unknown test '{n}'; valid tests: {}",
                    valid.join(", ")
                ));
            }
        }
    }
    if out.is_empty() {
        return Err("--tests names no test".into());
    }
    Ok(out)
}

pub fn bench_cmd(a: BenchArgs) -> i32 {
    if a.list {
        list_tests();
        return 0;
    }
    let tests = match select_tests(&a.tests) {
        Ok(t) => t,
        Err(e) => return usage_error(e),
    };
    if a.ring != 0 && a.ring != 3 {
        return usage_error(format!("--ring {} is not supported: use 0 or 3", a.ring));
    }
    if !(a.timeout.is_finite() && a.timeout > 0.0 && a.timeout <= 3600.0) {
        return usage_error(format!(
            "--timeout {} must be a number of seconds in (0, 3600]",
            a.timeout
        ));
    }
    if a.samples.checked_mul(a.batch).is_none_or(|n| n > 1 << 32) {
        return usage_error("--samples times --batch must not exceed 2^32 iterations");
    }
    if let Err(e) = a.pin.map_or(Ok(()), crate::input::check_pin) {
        return usage_error(e);
    }
    if let Some(p) = &a.json {
        if let Err(e) = results::check_writable(p) {
            return usage_error(e);
        }
    }
    let kvm = match exitlab_vmm::open_kvm() {
        Ok(k) => Arc::new(k),
        Err(e) => {
            eprintln!("exitlab: {e}");
            return EXIT_NO_KVM;
        }
    };
    let host = exitlab_vmm::host::probe();
    let mut notes = Vec::new();
    if host.is_nested_or_paravirtual() {
        notes.push(format!(
            "This host is itself virtualized: {}. Its figures are not hardware figures.",
            host.virtualization.summary
        ));
    }
    let host_json = serde_json::to_value(&host).unwrap_or(serde_json::Value::Null);
    let opts = BenchOptions {
        tests,
        params: RunParams {
            ring: a.ring,
            samples: a.samples,
            batch: a.batch,
            warmup: a.warmup,
            timeout: Duration::from_secs_f64(a.timeout),
            pin: a.pin,
            bare: false,
        },
        raw: a.raw,
        overhead: !a.no_overhead,
        rounds: a.rounds,
    };
    let mut stderr = std::io::stderr();
    // One line per round with a mark per test, then one line per overhead step.
    let mut in_rounds = false;
    let quiet = crate::cli::verbosity() < 0;
    let mut progress = |p: Progress<'_>| {
        if quiet {
            return;
        }
        match p {
            Progress::Round(r, n) => {
                let _ = write!(
                    stderr,
                    "{}  round {r}/{n} ",
                    if in_rounds { "\n" } else { "" }
                );
                in_rounds = true;
            }
            Progress::Start(name) if !in_rounds || name.contains('(') => {
                if in_rounds {
                    let _ = writeln!(stderr);
                    in_rounds = false;
                }
                let _ = write!(stderr, "  {name:<40} ");
            }
            Progress::Start(_) => {}
            Progress::Done(name, status) if !in_rounds || name.contains('(') => {
                let _ = writeln!(stderr, "{}", status.word());
            }
            Progress::Done(_, status) => {
                let mark = match status {
                    TestStatus::Ok => ".",
                    TestStatus::Skipped { .. } => "s",
                    TestStatus::DidNotComplete { .. } => "T",
                    TestStatus::Failed { .. } => "F",
                };
                let _ = write!(stderr, "{mark}");
            }
        }
        let _ = stderr.flush();
    };
    eprintln!(
        "exitlab bench: {} test(s), ring {}, {} samples x {} iteration(s)",
        opts.tests.len(),
        a.ring,
        a.samples,
        a.batch
    );
    let res = match bench::run(
        &kvm,
        exitlab_guest::IMAGE,
        &opts,
        host_json,
        notes,
        &mut progress,
    ) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("exitlab: {e}");
            return EXIT_VMM_FAILED;
        }
    };
    print!("{}", report::render_table(&res));
    if let Some(p) = &a.json {
        if let Err(e) = results::write_atomic(p, &res) {
            eprintln!("exitlab: {e}");
            return EXIT_CANT_WRITE;
        }
        eprintln!("results written to {}", p.display());
    }
    let failed = res
        .tests
        .iter()
        .any(|t| matches!(t.status, TestStatus::Failed { .. }))
        || res
            .tests
            .iter()
            .any(|t| t.exit_check.as_ref().is_some_and(|c| !c.passed));
    if failed {
        EXIT_TEST_FAILED
    } else {
        0
    }
}

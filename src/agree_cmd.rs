//! `exitlab agree`: exitlab's bench figures against the second, independent harness
//! kernel on the same host, in interleaved rounds.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use exitlab_lab::agreement::{self, AgreeOptions};
use exitlab_lab::bench::Progress;
use exitlab_lab::runner::RunParams;

use crate::status::{usage_error, EXIT_TEST_FAILED};

#[derive(clap::Args, Debug)]
pub struct AgreeArgs {
    /// Interleaved rounds (the harness, then exitlab's bench, per round).
    #[arg(long, default_value_t = 4)]
    rounds: u32,
    /// The harness times blocks of 2^K iterations.
    #[arg(long, default_value_t = 4)]
    k: u32,
    /// Harness blocks per test per round.
    #[arg(long, default_value_t = 101)]
    reps: u32,
    /// exitlab samples per test per round.
    #[arg(long, default_value_t = 250)]
    samples: u64,
    #[command(flatten)]
    json: crate::common::JsonArg,
    /// Only boot the harness once with this command line under the bare KVM_RUN loop
    /// (no devices), for `exitlab trace` to measure the floor on the same guest.
    #[arg(long, value_name = "CMDLINE")]
    bare_run: Option<String>,
    #[command(flatten)]
    filter: crate::common::VcpuFilter,
}

/// Runs `exitlab agree`; returns the process exit code.
pub fn agree_cmd(a: AgreeArgs) -> i32 {
    if a.k > 20 || a.reps == 0 || a.reps > 1000 || a.rounds == 0 || a.rounds > 100 {
        return usage_error("use --k 0..=20, --reps 1..=1000 and --rounds 1..=100");
    }
    if a.samples == 0 || a.samples > 1 << 20 {
        return usage_error("--samples must be in 1..=1048576");
    }
    if let Err(e) = a.json.check() {
        return usage_error(e);
    }
    a.filter.apply();
    let kvm = match exitlab_vmm::open_kvm() {
        Ok(k) => Arc::new(k),
        Err(e) => return crate::common::kvm_unusable(&e),
    };
    if let Some(cmdline) = &a.bare_run {
        return match agreement::run_harness_bare(&kvm, cmdline, 120) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("exitlab: {e}");
                EXIT_TEST_FAILED
            }
        };
    }
    let opts = AgreeOptions {
        rounds: a.rounds,
        k: a.k,
        reps: a.reps,
        params: RunParams {
            ring: 0,
            samples: a.samples,
            batch: 1,
            warmup: 50,
            timeout: Duration::from_secs(3),
            pin: None,
            bare: false,
            irq: Default::default(),
            inject_cycles: 0,
            guest_cycles: 0,
        },
        harness_timeout_s: 120,
    };
    let mut err = std::io::stderr();
    let mut progress = |p: Progress<'_>| {
        let _ = match p {
            Progress::Round(r, n) => write!(err, "\n  round {r}/{n} "),
            Progress::PrecisionRound(r, _) | Progress::AbPrecisionRound(r, _) => {
                write!(err, "\n  planned round {r} ")
            }
            Progress::Start(_) => Ok(()),
            Progress::Done(_, s) => write!(err, "{}", if s.reason().is_none() { "." } else { "F" }),
        };
        let _ = err.flush();
    };
    let res = match agreement::run(&kvm, exitlab_guest::IMAGE, &opts, &mut progress) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("\nexitlab: {e}");
            return EXIT_TEST_FAILED;
        }
    };
    eprintln!();
    if !a.json.to_stdout() {
        print!("{}", res.render());
    }
    if let Err(code) = a.json.write(&res, "agreement table") {
        return code;
    }
    // A missing figure fails the command unless a side named the host limit behind it.
    let unexplained = |r: &agreement::AgreementRow| {
        (r.harness.is_none() || r.exitlab_net_median.is_none()) && !r.verdict.contains("skipped")
    };
    if res.rows.iter().any(unexplained) {
        EXIT_TEST_FAILED
    } else {
        0
    }
}

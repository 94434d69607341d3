//! Known-answer trials of the central figure's estimators and outlier rule
//! (`docs/statistics.md`): coverage of the 95 % interval, false alarms and the detection
//! rate of a small change, on doctored copies of real results files and on synthetic
//! rounds with outlier rounds.
//!
//! `cargo run --release -p exitlab-results --example estimators -- FILE.json...`
//! (default bench runs of one build on one host; at least two files).

use exitlab_results::central::{self, Estimator, Interval, Method};
use exitlab_results::results::Results;
use exitlab_results::trials::{self, Model, Tally};
use exitlab_results::verdict::Pairing;

fn methods() -> Vec<Method> {
    let mut m = Vec::new();
    for reject_outliers in [false, true] {
        for estimator in Estimator::ALL {
            m.push(Method {
                estimator,
                reject_outliers,
                interval: Interval::Bootstrap,
            });
        }
        m.push(Method {
            estimator: Estimator::Mean,
            reject_outliers,
            interval: Interval::StudentT,
        });
        m.push(Method {
            estimator: Estimator::Median,
            reject_outliers,
            interval: Interval::SignTest,
        });
    }
    m
}

fn row(name: &str, t: &Tally) -> String {
    format!(
        "| {name} | {:.1}% | {:.1}% | {:.2}% | {:.1}% | {:.1}% | {:.2}% |",
        100.0 * t.coverage(),
        100.0 * t.false_alarm_rate(),
        t.median_half_width(),
        100.0 * t.detection_rate(),
        100.0 * t.detection_rate_at_threshold(),
        t.median_mdc(),
    )
}

const HEADER: &str = "| method | coverage (95% CI holds the shift) | false alarms at 0 (thr) | median half-width | detects +2% (thr 0) | detects +2% (thr) | median min detectable (thr) |\n|:--|--:|--:|--:|--:|--:|--:|";

fn main() {
    let files: Vec<String> = std::env::args().skip(1).collect();
    let runs: Vec<Results> = files
        .iter()
        .filter_map(
            |f| match exitlab_results::results::read(std::path::Path::new(f)) {
                Ok(r) => Some(r),
                Err(e) => {
                    eprintln!("{f}: {e}");
                    None
                }
            },
        )
        .collect();
    let threshold = exitlab_results::compare::DEFAULT_THRESHOLD_PCT;
    if runs.len() >= 2 {
        let (names, rounds) = trials::rounds_by_test(&runs);
        println!(
            "## Doctored copies of {} real runs ({} tests; every ordered pair of runs, +2 % injected into the second's rounds; threshold {threshold}%)\n",
            runs.len(),
            names.len()
        );
        println!("{HEADER}");
        for m in methods() {
            let t = trials::doctored(&rounds, m, 0.02, threshold);
            println!("{}", row(&m.name(), &t));
        }
        println!(
            "\n### The chosen method ({}) by threshold: real pairs of runs\n",
            central::CHOSEN.name()
        );
        println!("| threshold | false alarms (test comparisons) | pairs of runs with a flagged test | detects +2% | detects +3% | detects +5% |\n|--:|--:|--:|--:|--:|--:|");
        for thr in [0.0, 1.0, 2.0, 3.0, 5.0, 10.0] {
            let s = trials::sweep(&rounds, central::CHOSEN, thr);
            println!(
                "| {thr:.0}% | {}/{} | {}/{} | {:.0}% | {:.0}% | {:.0}% |",
                s.false_alarms,
                s.comparisons,
                s.pairs_flagged,
                s.pairs,
                100.0 * s.detected[0],
                100.0 * s.detected[1],
                100.0 * s.detected[2]
            );
        }
        println!("\n### The data: per test, rounds over all runs, robust spread and share of outlier rounds\n");
        println!("| test | rounds | robust sd of rounds | sd of rounds | outlier rounds | spread of run medians |\n|:--|--:|--:|--:|--:|--:|");
        for (name, per_run) in names.iter().zip(&rounds) {
            let s = trials::describe(per_run);
            println!(
                "| {name} | {} | {:.2}% | {:.2}% | {} | {:.2}% |",
                s.rounds,
                100.0 * s.robust_sd,
                100.0 * s.sd,
                s.outliers,
                100.0 * s.run_spread
            );
        }
    }
    for (label, pairing) in [
        ("independent runs", Pairing::Independent),
        ("paired A/B rounds", Pairing::Paired),
    ] {
        let model = Model::this_host();
        println!(
            "\n## Synthetic rounds, {label}: {} rounds a side, round sd {:.1}%, {:.0}% of rounds {:.0}-{:.0}% high, between-run sd {:.1}%, +2 % shift, 400 seeded trials, threshold {threshold}%\n",
            model.rounds,
            100.0 * model.round_sd,
            100.0 * model.outlier_share,
            100.0 * model.outlier_low,
            100.0 * model.outlier_high,
            100.0 * model.run_sd
        );
        println!("{HEADER}");
        for m in methods() {
            let t = trials::synthetic(&model, pairing, m, 0.02, threshold, 400);
            println!("{}", row(&m.name(), &t));
        }
    }
}

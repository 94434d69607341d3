//! Known-answer trials of the A/B change's estimator and interval on real `bench --ab`
//! runs (`docs/statistics.md`): per method, how often the 95 % interval holds the true
//! change, how often a change is called, and how wide the interval is.
//!
//! `cargo run --release -p exitlab-results --example ab_methods -- FILE.json...`
//!
//! The truth of each test comes from the run itself: for `--ab inject-cycles=A,B`, a
//! userspace-handled test (its catalogue row's expected handling) changes by the nominal
//! `B - A` cycles on its side-A figure (and, second, by the mean wait the VMM actually
//! spun, from the run's note), every other test by nothing; for any other knob, every
//! test by nothing, so give only A/A runs (such as `--ab warmup=200,201`) of other knobs.
//! Every method judges the same pairs of rounds, those [`central::paired_figures`] keeps.

use exitlab_results::central::{self, Estimator, Interval, Method};
use exitlab_results::results::{Handling, Results};
use exitlab_results::verdict::{self, Pairing, Verdict};

fn methods() -> Vec<Method> {
    let m = |estimator, interval| Method {
        estimator,
        reject_outliers: true,
        interval,
    };
    vec![
        m(Estimator::Median, Interval::Bootstrap),
        m(Estimator::Median, Interval::SignTest),
        m(Estimator::HodgesLehmann, Interval::Bootstrap),
        m(Estimator::HodgesLehmann, Interval::SignedRank),
        m(Estimator::Mean, Interval::StudentT),
    ]
}

/// The mean wait per exit of each side, from the run's injected-waits note.
fn mean_waits(run: &Results, nominal: [f64; 2]) -> [f64; 2] {
    let Some(note) = run.notes.iter().find(|n| n.starts_with("injected waits")) else {
        return nominal;
    };
    let mean_after = |label: &str| -> Option<f64> {
        let rest = &note[note.find(label)? + label.len()..];
        let rest = rest.strip_prefix(": a mean ")?;
        let end = rest.find(' ')?;
        rest[..end].replace(',', "").parse().ok()
    };
    let a = &run.ab.as_ref().expect("an A/B run").a;
    let b = &run.ab.as_ref().expect("an A/B run").b;
    [
        mean_after(&format!("inject-cycles {a}")).unwrap_or(nominal[0]),
        mean_after(&format!("inject-cycles {b}")).unwrap_or(nominal[1]),
    ]
}

#[derive(Default)]
struct Tally {
    n: usize,
    covered_nominal: usize,
    covered_mean: usize,
    covered_handling: usize,
    called_right: usize,
    called_wrong: usize,
    half: Vec<f64>,
}

fn main() {
    let mut tallies: Vec<Vec<(String, bool, Tally)>> =
        methods().iter().map(|_| Vec::new()).collect();
    let mut files = 0;
    for f in std::env::args().skip(1) {
        let run = match exitlab_results::results::read(std::path::Path::new(&f)) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{f}: {e}");
                continue;
            }
        };
        let Some(ab) = run.ab.clone() else {
            eprintln!("{f}: not an A/B run");
            continue;
        };
        let Some((a, b)) = central::ab_sides(&run) else {
            continue;
        };
        files += 1;
        let injected = ab.knob == "inject-cycles";
        let nominal = if injected {
            [ab.a.parse().unwrap_or(0.0), ab.b.parse().unwrap_or(0.0)]
        } else {
            [0.0, 0.0]
        };
        let waits = if injected {
            mean_waits(&run, nominal)
        } else {
            nominal
        };
        for ta in a.tests.iter().filter(|t| !t.baseline) {
            let Some(tb) = b.test(&ta.name) else { continue };
            let Some((va, vb, _, _)) = central::paired_figures(ta, tb) else {
                continue;
            };
            let Some(fa) = central::central(ta).map(|c| c.value) else {
                continue;
            };
            let user = injected && ta.expected_handling == Handling::User;
            let truth = |w: [f64; 2]| {
                if user {
                    100.0 * (w[1] - w[0]) / fa
                } else {
                    0.0
                }
            };
            let (t_nominal, t_mean) = (truth(nominal), truth(waits));
            // The change of the VMM's handling phase (its stamps around its handling of
            // each exit, the wait included): median B - median A.
            let handling = |t: &exitlab_results::results::TestResult| {
                t.phases.as_ref().map(|p| p.handling.median)
            };
            let t_handling = match (user, handling(ta), handling(tb)) {
                (true, Some(ha), Some(hb)) => 100.0 * (hb - ha) / fa,
                (true, _, _) => f64::NAN,
                (false, _, _) => 0.0,
            };
            for (i, m) in methods().into_iter().enumerate() {
                let c = verdict::change_with(&va, &vb, Pairing::Paired, 0.0, m, 7);
                let Some([lo, hi]) = c.ci95_pct else { continue };
                let list = &mut tallies[i];
                let pos = match list
                    .iter()
                    .position(|(n, u, _)| *n == ta.name && *u == user)
                {
                    Some(p) => p,
                    None => {
                        list.push((ta.name.clone(), user, Tally::default()));
                        list.len() - 1
                    }
                };
                let t = &mut list[pos].2;
                t.n += 1;
                t.covered_nominal += usize::from(lo <= t_nominal && t_nominal <= hi);
                t.covered_mean += usize::from(lo <= t_mean && t_mean <= hi);
                t.covered_handling += usize::from(lo <= t_handling && t_handling <= hi);
                let right = if t_nominal > 0.0 {
                    Verdict::Slower
                } else {
                    Verdict::NoDetectableChange
                };
                match &c.verdict {
                    v if *v == right && t_nominal > 0.0 => t.called_right += 1,
                    Verdict::Slower | Verdict::Faster => t.called_wrong += 1,
                    _ => {}
                }
                t.half.push((hi - lo) / 2.0);
            }
        }
    }
    println!("{files} A/B runs; threshold 0; per method and test: intervals that hold the nominal change, the mean wait's and the change of the VMM's handling phase (its stamps around the handling of each exit, wait included; round 1 of each side), changes called rightly (a known change found) and wrongly (a change called where there is none, or the wrong way), median half-width\n");
    println!("| method | test | truth | runs | covers nominal | covers mean wait | covers handling change | detected | false calls | median half-width |\n|:--|:--|:--|--:|--:|--:|--:|--:|--:|--:|");
    for (m, list) in methods().iter().zip(&tallies) {
        for (name, user, t) in list {
            let mut h = t.half.clone();
            h.sort_unstable_by(f64::total_cmp);
            let med = if h.is_empty() {
                f64::NAN
            } else {
                h[h.len() / 2]
            };
            println!(
                "| {} | {name} | {} | {} | {} | {} | {} | {} | {} | {med:.2}% |",
                m.name(),
                if *user { "injected" } else { "none" },
                t.n,
                t.covered_nominal,
                t.covered_mean,
                t.covered_handling,
                t.called_right,
                t.called_wrong,
            );
        }
    }
}

//! Tallies of the known-answer suite (`tools/campaign/acceptance.sh`): reads results
//! files and says, with the model's own code (`exitlab_results::compare`), how often a
//! gate fired, how often a known change was called slower and covered by its interval,
//! how often an unchanged test came out equivalent; and writes doctored copies. Research
//! code: not part of exitlab's command line.
//!
//! ```text
//! tally ab [--truth-cycles N] [--tests a,b] FILE...        A/B runs, one verdict table each
//! tally runs [--truth-cycles N] [--tests a,b] A_DIR B_DIR [A_DIR B_DIR ...]
//! tally screen [--truth-cycles N] [--tests a,b] A.json B.json [A.json B.json ...]
//! tally doctor IN.json OUT.json TEST=PCT...                 scale a test's exit figure
//! tally spread FILE...                                      each test's figure over runs
//! ```
//!
//! `--truth-cycles N`: the known answer, N cycles per iteration added to the tests named by
//! `--tests` (the userspace-handled ones with `inject-cycles`); its truth in percent is N
//! over side A's figure of that test. `--truth TEST=PCT,...`: a known change in percent
//! per test (doctored copies). The other tests' truth is no change. The output is one
//! JSON object per line (one per comparison), then a summary line starting `summary`.

use std::collections::BTreeMap;
use std::path::Path;

use exitlab_results::compare::{self, Comparison, Run};
use exitlab_results::results::{self, Results};
use exitlab_results::stats::model::THRESHOLD_PCT;
use exitlab_results::stats::units;
use exitlab_results::stats::verdict::Verdict;

fn load(p: &str) -> Results {
    results::read(Path::new(p)).unwrap_or_else(|e| {
        eprintln!("tally: {e}");
        std::process::exit(2)
    })
}

fn load_dir(d: &str) -> Vec<(String, Results)> {
    let mut files: Vec<String> = std::fs::read_dir(d)
        .unwrap_or_else(|e| {
            eprintln!("tally: {d}: {e}");
            std::process::exit(2)
        })
        .filter_map(|e| e.ok())
        .map(|e| e.path().display().to_string())
        .filter(|p| p.ends_with(".json"))
        .collect();
    files.sort();
    files.into_iter().map(|f| (f.clone(), load(&f))).collect()
}

/// What every comparison of a campaign adds up to.
#[derive(Default)]
struct Tally {
    comparisons: usize,
    gates: usize,
    fired: usize,
    no_verdict_gates: usize,
    /// Tests with a known change: test-comparisons, called slower, covered.
    changed: usize,
    slower: usize,
    covered: usize,
    /// Tests without a change: test-comparisons, equivalent, called slower or faster.
    unchanged: usize,
    equivalent: usize,
    flagged: usize,
    /// Minimum detectable changes, percent.
    mdc: Vec<f64>,
}

impl Tally {
    fn add(&mut self, name: &str, cmp: &Comparison, truth: &Truth) {
        self.comparisons += 1;
        let mut per_test = BTreeMap::new();
        if cmp.design.gates() {
            let g = cmp.gate(None);
            self.gates += 1;
            self.fired += usize::from(g.fires());
            self.no_verdict_gates += usize::from(!g.no_verdict.is_empty());
        }
        for t in cmp.tests.iter().filter(|t| !t.baseline) {
            let c = &t.change;
            let truth = truth.pct(&t.name, c.figures[0]);
            let known = truth != 0.0;
            let covered = c
                .ci95_pct
                .is_some_and(|[lo, hi]| lo <= truth && truth <= hi);
            if matches!(c.verdict, Verdict::NoVerdict(_)) {
                continue;
            }
            if known {
                self.changed += 1;
                self.slower += usize::from(c.verdict == Verdict::Slower);
                self.covered += usize::from(covered);
            } else {
                self.unchanged += 1;
                self.equivalent += usize::from(c.verdict == Verdict::Equivalent);
                self.flagged += usize::from(matches!(c.verdict, Verdict::Slower | Verdict::Faster));
            }
            if let Some(m) = c.min_detectable_pct {
                self.mdc.push(m);
            }
            per_test.insert(
                t.name.clone(),
                serde_json::json!({
                    "verdict": c.verdict.as_str(),
                    "pct": c.pct,
                    "ci95_pct": c.ci95_pct,
                    "min_detectable_pct": c.min_detectable_pct,
                    "truth_pct": truth,
                    "covered": covered,
                    "units": c.units,
                }),
            );
        }
        let gate = cmp.design.gates().then(|| {
            let g = cmp.gate(None);
            serde_json::json!({"fired": g.fires(), "slower": g.slower, "unconfirmed": g.unconfirmed, "no_verdict": g.no_verdict})
        });
        println!(
            "{}",
            serde_json::json!({"comparison": name, "gate": gate, "tests": per_test, "signs": cmp.signs})
        );
    }

    fn summary(&self) -> String {
        let mut m = self.mdc.clone();
        m.sort_by(f64::total_cmp);
        let median = if m.is_empty() {
            f64::NAN
        } else {
            m[m.len() / 2]
        };
        format!(
            "summary: comparisons {}; gates fired {} of {}; gates without a verdict {}; changed test-comparisons {}: slower {}, covered {}; unchanged {}: equivalent {}, slower or faster {}; median min detectable {:.2}%",
            self.comparisons,
            self.fired,
            self.gates,
            self.no_verdict_gates,
            self.changed,
            self.slower,
            self.covered,
            self.unchanged,
            self.equivalent,
            self.flagged,
            median
        )
    }
}

/// The known answer of a campaign: cycles added to some tests, or percent per test.
#[derive(Default)]
struct Truth {
    cycles: f64,
    tests: Vec<String>,
    pct: BTreeMap<String, f64>,
}

impl Truth {
    /// The true change of `test` in percent, whose side-A figure is `figure`.
    fn pct(&self, test: &str, figure: f64) -> f64 {
        if let Some(p) = self.pct.get(test) {
            *p
        } else if self.cycles != 0.0 && self.tests.iter().any(|t| t == test) {
            self.cycles / figure * 100.0
        } else {
            0.0
        }
    }
}

/// `--truth-cycles N`, `--tests a,b` and `--truth TEST=PCT,...` from `args`, and the rest.
fn options(args: &[String]) -> (Truth, Vec<String>) {
    let (mut truth, mut rest) = (Truth::default(), Vec::new());
    let mut it = args.iter();
    let list = |v: Option<&String>| -> Vec<String> {
        v.map(|v| v.split(',').map(str::to_string).collect())
            .unwrap_or_default()
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--truth-cycles" => {
                truth.cycles = it.next().and_then(|v| v.parse().ok()).unwrap_or(0.0)
            }
            "--tests" => truth.tests = list(it.next()),
            "--truth" => {
                for kv in list(it.next()) {
                    if let Some((k, v)) = kv.split_once('=') {
                        truth.pct.insert(k.to_string(), v.parse().unwrap_or(0.0));
                    }
                }
            }
            _ => rest.push(a.clone()),
        }
    }
    (truth, rest)
}

/// Scales test `name`'s exit figure in `r` (every round's net figure and raw median by
/// the same cycles, so the empty loop is kept) by `factor`; in an A/B run, side B's.
fn doctor(r: &mut Results, name: &str, factor: f64) {
    let tests = match r.ab.as_mut() {
        Some(ab) => &mut ab.b_tests,
        None => &mut r.tests,
    };
    for t in tests.iter_mut().filter(|t| t.name == name) {
        for round in &mut t.rounds {
            if let Some(net) = round.net_median {
                let added = net * (factor - 1.0);
                round.net_median = Some(net + added);
                round.median += added;
            }
        }
        if let Some(n) = t.net_median_cycles.as_mut() {
            *n *= factor;
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("usage: tally ab|runs|screen|doctor|spread ...");
        std::process::exit(2);
    };
    let (truth, files) = options(rest);
    let mut tally = Tally::default();
    match cmd.as_str() {
        "ab" => {
            for f in &files {
                let r = load(f);
                match compare::compare_ab_run(&r, THRESHOLD_PCT) {
                    Some(cmp) => tally.add(f, &cmp, &truth),
                    None => eprintln!("tally: {f} is not an A/B run"),
                }
            }
        }
        "runs" | "screen" => {
            for pair in files.chunks(2) {
                let [a, b] = pair else {
                    eprintln!("tally: {cmd} takes pairs of sides");
                    std::process::exit(2);
                };
                let cmp = if cmd == "runs" {
                    let (ra, rb) = (load_dir(a), load_dir(b));
                    let va: Vec<Run> = ra
                        .iter()
                        .map(|(n, r)| Run {
                            name: n,
                            results: r,
                        })
                        .collect();
                    let vb: Vec<Run> = rb
                        .iter()
                        .map(|(n, r)| Run {
                            name: n,
                            results: r,
                        })
                        .collect();
                    compare::compare_runs(&va, &vb, THRESHOLD_PCT)
                } else {
                    compare::compare(&load(a), &load(b), THRESHOLD_PCT)
                };
                tally.add(&format!("{a} {b}"), &cmp, &truth);
            }
        }
        "doctor" => {
            let [input, output, scales @ ..] = files.as_slice() else {
                eprintln!("usage: tally doctor IN.json OUT.json TEST=PCT...");
                std::process::exit(2);
            };
            let mut r = load(input);
            for s in scales {
                let (name, pct) = s.split_once('=').unwrap_or((s, "0"));
                let pct: f64 = pct.parse().unwrap_or(0.0);
                doctor(&mut r, name, 1.0 + pct / 100.0);
            }
            if let Err(e) = results::write_atomic(Path::new(output), &r) {
                eprintln!("tally: {e}");
                std::process::exit(1);
            }
            return;
        }
        "spread" => {
            let runs: Vec<Results> = files.iter().map(|f| load(f)).collect();
            let Some(first) = runs.first() else { return };
            for t in &first.tests {
                let v: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| r.test(&t.name).and_then(units::central).map(|c| c.value))
                    .collect();
                let (lo, hi) = v
                    .iter()
                    .fold((f64::INFINITY, 0.0f64), |(a, b), x| (a.min(*x), b.max(*x)));
                println!(
                    "{}",
                    serde_json::json!({"test": t.name, "runs": v.len(), "spread_pct": (hi / lo - 1.0) * 100.0, "figures": v})
                );
            }
            return;
        }
        other => {
            eprintln!("tally: unknown command {other}");
            std::process::exit(2);
        }
    }
    println!("{}", tally.summary());
}

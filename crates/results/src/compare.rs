//! Comparisons, in the three designs of the model (`docs/model.md`): the two sides of an
//! A/B run (pairs), two sets of runs (directories), and two single runs (a screen that
//! cannot gate). Each test walks one way: its units ([`crate::stats::units`]) → the
//! interval ([`crate::stats::interval`]) → the verdict ([`crate::stats::verdict`]), with
//! the signs of [`crate::stats::diagnostics`] reported beside it. Differences of host or
//! configuration between the files are listed as warnings.

use crate::differences::{
    batches_differ, host_and_config_warnings, incomplete_warnings, side_warnings,
};
use crate::format::{fmt_cycles, fmt_pct_signed};
use crate::results::{Results, TestResult};
use crate::stats::diagnostics;
use crate::stats::interval::{self, Unit};
use crate::stats::model::AB_TARGET_HALF_WIDTH_PCT;
use crate::stats::plan;
use crate::stats::units::{self, central, Figure};
use crate::stats::verdict::{self, gate, Change, Gate};

pub use crate::stats::model::THRESHOLD_PCT as DEFAULT_THRESHOLD_PCT;

/// How the two sides' units relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    /// The two sides of an A/B run: round `i` of each ran back to back; pairs are units.
    Pairs,
    /// Several runs a side; runs are units.
    Runs,
    /// One run a side: rounds are units, and the interval cannot see how runs differ. A
    /// screen: it does not gate.
    Screen,
}

impl Design {
    /// Whether a verdict of this design may set an exit status.
    pub fn gates(self) -> bool {
        self != Design::Screen
    }
}

/// One test compared.
#[derive(Debug, Clone, PartialEq)]
pub struct TestComparison {
    /// Test name.
    pub name: String,
    /// Which figure was compared.
    pub figure: Figure,
    /// The change and its verdict.
    pub change: Change,
    /// Whether this is the empty loop (guest code, no exit): its change is the host's
    /// speed, never a regression of an exit, so it does not gate.
    pub baseline: bool,
}

/// A test present on both sides that could not be compared: it did not complete on a
/// side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotCompared {
    /// Test name.
    pub name: String,
    /// Status word before (side A).
    pub before: String,
    /// Status word after (side B).
    pub after: String,
}

impl NotCompared {
    /// Whether it completed on one side (a gate fails closed on it) rather than on
    /// neither (the host cannot run it).
    pub fn one_sided(&self) -> bool {
        self.before.starts_with("ok") != self.after.starts_with("ok")
    }
}

/// A comparison of two sides.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The design.
    pub design: Design,
    /// Tests compared, in the first side's order.
    pub tests: Vec<TestComparison>,
    /// Tests on both sides that did not complete on at least one.
    pub not_compared: Vec<NotCompared>,
    /// Tests only on the first side.
    pub only_before: Vec<String>,
    /// Tests only on the second side.
    pub only_after: Vec<String>,
    /// Differences of host or configuration between the sides, incomplete runs.
    pub warnings: Vec<String>,
    /// Signs of trouble, reported beside the verdicts ([`diagnostics`]).
    pub signs: Vec<String>,
    /// δ, percent.
    pub threshold_pct: f64,
    /// For runs: the runs given on each side.
    pub runs: Option<[usize; 2]>,
    /// Why the figures are not hardware figures (a side's host is nested or its KVM
    /// paravirtual), once per distinct reason.
    pub caveats: Vec<String>,
    /// For runs: the runs a side the compared tests' spread of runs asks for an interval
    /// of ±[`AB_TARGET_HALF_WIDTH_PCT`] on every test, and the test that asks most.
    pub runs_needed: Option<(usize, String)>,
}

impl Comparison {
    /// The verdict-bearing tests a gate judges: every compared test but the empty loop,
    /// or only those named in `only`.
    fn gated<'a>(&'a self, only: Option<&'a [String]>) -> impl Iterator<Item = &'a TestComparison> {
        self.tests
            .iter()
            .filter(move |t| !t.baseline && only.is_none_or(|o| o.contains(&t.name)))
    }

    /// The gate over the compared tests (or those of `only`): Holm's step-down over
    /// their verdicts. A test that completed on one side only, or that a side lacks, has
    /// no verdict and the gate fails closed on it; a test the host ran on neither side is
    /// not judged.
    pub fn gate(&self, only: Option<&[String]>) -> Gate {
        let mut g = gate(self.gated(only).map(|t| (t.name.as_str(), &t.change)));
        let wanted = |n: &String| only.is_none_or(|o| o.contains(n));
        g.no_verdict.extend(
            self.not_compared
                .iter()
                .filter(|n| n.one_sided() && wanted(&n.name))
                .map(|n| n.name.clone()),
        );
        g.no_verdict.extend(
            self.only_before
                .iter()
                .chain(&self.only_after)
                .filter(|n| wanted(n))
                .cloned(),
        );
        if let Some(o) = only {
            let known = |n: &String| {
                self.tests.iter().any(|t| &t.name == n)
                    || self.not_compared.iter().any(|t| &t.name == n)
                    || self.only_before.contains(n)
                    || self.only_after.contains(n)
            };
            g.no_verdict.extend(o.iter().filter(|n| !known(n)).cloned());
        }
        g
    }

    /// The tests whose verdict is slower (at 95 %, each on its own).
    pub fn slower(&self) -> Vec<&str> {
        self.gated(None)
            .filter(|t| t.change.is_slower())
            .map(|t| t.name.as_str())
            .collect()
    }
}

/// Status word of a test, noting a missing cycle summary.
pub(crate) fn status_word(t: &TestResult) -> String {
    if t.status.is_ok() && t.cycles.is_none() {
        "ok (no cycles)".to_string()
    } else {
        t.status.word().to_string()
    }
}

/// The names of `b`'s tests missing from `a`.
fn missing(b: &Results, a: &Results) -> Vec<String> {
    b.tests
        .iter()
        .filter(|t| a.test(&t.name).is_none())
        .map(|t| t.name.clone())
        .collect()
}

/// Why one test of two runs (or two sets of runs) is not judged: figures taken at
/// another batch, or a file without per-round figures.
fn test_refusal(before: &[&TestResult], after: &[&TestResult]) -> Option<String> {
    let batches = |s: &[&TestResult]| s.iter().map(|t| t.batch).collect::<Vec<_>>();
    batches_differ(&batches(before), &batches(after)).or_else(|| {
        before.iter().chain(after).any(|t| t.rounds.is_empty()).then(|| {
            "a file has no per-round figures (written by an older exitlab, results schema 1); re-run bench with this exitlab".to_string()
        })
    })
}

/// Compares the two sides of an A/B run, pair by pair. `None` for a file that is not
/// an A/B run.
pub fn compare_ab_run(run: &Results, threshold_pct: f64) -> Option<Comparison> {
    let (a, b) = units::ab_sides(run)?;
    Some(compare_pairs(&a, &b, threshold_pct))
}

/// Compares two sides whose round `i` ran back to back (an A/B run's sides).
pub fn compare_pairs(a: &Results, b: &Results, threshold_pct: f64) -> Comparison {
    let mut cmp = empty(Design::Pairs, a, b, threshold_pct);
    let mut groups = Vec::new();
    let mut outliers = Vec::new();
    for ta in &a.tests {
        let Some(tb) = b.test(&ta.name) else { continue };
        let Some((va, vb, figure)) = units::pairs(ta, tb) else {
            cmp.not_compared.push(not_compared(ta, tb));
            continue;
        };
        let figures = [ta, tb].map(|t| central(t).map_or(f64::NAN, |c| c.value));
        let change = verdict::judge(
            figures,
            interval::pairs(&va, &vb),
            Unit::Pair,
            threshold_pct,
        );
        let ratios: Vec<f64> = va.iter().zip(&vb).map(|(x, y)| (y / x).ln()).collect();
        let n = diagnostics::outliers(&ratios)
            .iter()
            .filter(|o| **o)
            .count();
        if n > 0 {
            outliers.push(format!("{} {n} of {}", ta.name, ratios.len()));
        }
        for (t, side) in [(ta, "A"), (tb, "B")] {
            groups.extend(group_sign(t, side));
        }
        cmp.tests.push(TestComparison {
            name: ta.name.clone(),
            figure,
            change,
            baseline: ta.baseline,
        });
    }
    if !outliers.is_empty() {
        cmp.signs.push(format!(
            "outlier pairs (log ratio over {} robust SDs from the others): {}",
            crate::stats::model::OUTLIER_K,
            outliers.join(", ")
        ));
    }
    cmp.signs.extend(groups);
    cmp.signs.extend(speed_sign(a, b, "A", "B"));
    cmp
}

/// Compares two single runs: a screen whose intervals are within one run.
pub fn compare(before: &Results, after: &Results, threshold_pct: f64) -> Comparison {
    let mut cmp = empty(Design::Screen, before, after, threshold_pct);
    cmp.warnings = host_and_config_warnings(before, after);
    cmp.warnings.extend(incomplete_warnings(before, after));
    let mut outliers = Vec::new();
    for b in &before.tests {
        let Some(a) = after.test(&b.name) else {
            continue;
        };
        if b.ring != a.ring {
            cmp.warnings.push(format!(
                "{} ran in ring {} before and ring {} after",
                b.name, b.ring, a.ring
            ));
        }
        let (Some(cb), Some(ca)) = (central(b), central(a)) else {
            cmp.not_compared.push(not_compared(b, a));
            continue;
        };
        let figures = [cb.value, ca.value];
        let change = match test_refusal(&[b], &[a]) {
            Some(why) => Change::no_verdict(figures, Unit::Round, why),
            None => verdict::judge(
                figures,
                interval::two_runs(&cb.rounds, &ca.rounds),
                Unit::Round,
                threshold_pct,
            ),
        };
        for (c, when) in [(&cb, "before"), (&ca, "after")] {
            let n = diagnostics::outliers(&c.rounds)
                .iter()
                .filter(|o| **o)
                .count();
            if n > 0 {
                outliers.push(format!("{} {n} of {} {when}", b.name, c.rounds.len()));
            }
        }
        for (t, when) in [(b, "before"), (a, "after")] {
            cmp.signs.extend(group_sign(t, when));
        }
        cmp.tests.push(TestComparison {
            name: b.name.clone(),
            figure: cb.figure,
            change,
            baseline: b.baseline,
        });
    }
    if !outliers.is_empty() {
        cmp.signs.insert(
            0,
            format!(
                "outlier rounds (over {} robust SDs from the test's median round): {}",
                crate::stats::model::OUTLIER_K,
                outliers.join(", ")
            ),
        );
    }
    cmp.signs
        .extend(speed_sign(before, after, "before", "after"));
    cmp
}

/// One run of a side of [`compare_runs`]: what it is called (its file) and its results.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    /// The name the warnings use (the file's path).
    pub name: &'a str,
    /// The run's results.
    pub results: &'a Results,
}

/// Compares several runs a side, test by test, with runs as units: each run's figure is
/// its own table's, each side's the geometric mean of its runs'.
pub fn compare_runs<'a>(before: &[Run<'a>], after: &[Run<'a>], threshold_pct: f64) -> Comparison {
    let mut cmp = Comparison {
        design: Design::Runs,
        tests: Vec::new(),
        not_compared: Vec::new(),
        only_before: Vec::new(),
        only_after: Vec::new(),
        warnings: Vec::new(),
        signs: Vec::new(),
        threshold_pct,
        runs: None,
        caveats: Vec::new(),
        runs_needed: None,
    };
    cmp.runs = Some([before.len(), after.len()]);
    cmp.caveats = caveats(before.iter().chain(after).map(|r| r.results));
    let named = |side: &[Run<'a>]| -> Vec<(&'a str, &'a Results)> {
        side.iter().map(|r| (r.name, r.results)).collect()
    };
    let (nb, na) = (named(before), named(after));
    cmp.warnings = side_warnings(&nb, &na);
    let names = test_names(before);
    cmp.only_before = names
        .iter()
        .filter(|n| !after.iter().any(|r| r.results.test(n).is_some()))
        .cloned()
        .collect();
    cmp.only_after = test_names(after)
        .into_iter()
        .filter(|n| !before.iter().any(|r| r.results.test(n).is_some()))
        .collect();
    let mut odd = Vec::new();
    for name in names.iter().filter(|n| !cmp.only_before.contains(n)) {
        let ((tb, fb), (ta, fa)) = (run_figures(before, name), run_figures(after, name));
        if fb.is_empty() || fa.is_empty() {
            let words = |t: &[&TestResult]| t.first().map_or("missing".into(), |t| status_word(t));
            cmp.not_compared.push(NotCompared {
                name: name.clone(),
                before: if fb.is_empty() {
                    words(&tb)
                } else {
                    "ok".into()
                },
                after: if fa.is_empty() {
                    words(&ta)
                } else {
                    "ok".into()
                },
            });
            continue;
        }
        for (side, label, figs) in [(before, "before", &fb), (after, "after", &fa)] {
            let short = side.len() - figs.len();
            if short > 0 {
                cmp.warnings.push(format!(
                    "{name} has no figure in {short} of the {} {label} runs; the others are compared",
                    side.len()
                ));
            }
            let values: Vec<f64> = figs.iter().map(|f| f.2).collect();
            for (f, is_odd) in figs.iter().zip(diagnostics::odd_runs(&values)) {
                if is_odd {
                    odd.push(format!("{name} {label} {} ({})", f.0, fmt_cycles(f.2)));
                }
            }
        }
        let geo = |f: &[(String, Vec<f64>, f64)]| {
            (f.iter().map(|x| x.2.ln()).sum::<f64>() / f.len() as f64).exp()
        };
        let figures = [geo(&fb), geo(&fa)];
        let rounds =
            |f: &[(String, Vec<f64>, f64)]| f.iter().map(|x| x.1.clone()).collect::<Vec<_>>();
        let change = match test_refusal(&tb, &ta) {
            Some(why) => Change::no_verdict(figures, Unit::Run, why),
            None => {
                let est = interval::runs(&rounds(&fb), &rounds(&fa));
                if let (Ok(e), false) = (&est, tb[0].baseline) {
                    let m = plan::runs_for(e, AB_TARGET_HALF_WIDTH_PCT);
                    if cmp.runs_needed.as_ref().is_none_or(|(n, _)| m > *n) {
                        cmp.runs_needed = Some((m, name.clone()));
                    }
                }
                verdict::judge(figures, est, Unit::Run, threshold_pct)
            }
        };
        let figure = central(tb[0]).map_or(Figure::Net, |c| c.figure);
        cmp.tests.push(TestComparison {
            name: name.clone(),
            figure,
            change,
            baseline: tb[0].baseline,
        });
    }
    if !odd.is_empty() {
        cmp.signs.push(format!(
            "odd runs (over {}% from their side's median run): {}",
            crate::stats::model::ODD_RUN_PCT,
            odd.join(", ")
        ));
    }
    let loops = |side: &[Run]| -> Vec<f64> {
        side.iter()
            .filter_map(|r| baseline_value(r.results))
            .collect()
    };
    if let Some(pct) = diagnostics::host_speed_apart(&loops(before), &loops(after)) {
        cmp.signs
            .push(speed_words(pct, "the before runs", "the after runs"));
    }
    cmp
}

/// Test `name`'s results in the runs of a side, and each run's name, round figures and
/// figure where it has one.
#[allow(clippy::type_complexity)]
fn run_figures<'a>(
    runs: &[Run<'a>],
    name: &str,
) -> (Vec<&'a TestResult>, Vec<(String, Vec<f64>, f64)>) {
    let tests = runs.iter().filter_map(|r| r.results.test(name)).collect();
    let figures = runs
        .iter()
        .filter_map(|r| {
            let c = central(r.results.test(name)?)?;
            Some((r.name.to_string(), c.rounds, c.value))
        })
        .collect();
    (tests, figures)
}

/// A comparison of `before` and `after` with no test compared yet.
fn empty(design: Design, before: &Results, after: &Results, threshold_pct: f64) -> Comparison {
    Comparison {
        design,
        tests: Vec::new(),
        not_compared: Vec::new(),
        only_before: missing(before, after),
        only_after: missing(after, before),
        warnings: Vec::new(),
        signs: Vec::new(),
        threshold_pct,
        runs: None,
        caveats: caveats([before, after]),
        runs_needed: None,
    }
}

/// The "not hardware figures" caveats of the hosts of `sides`, each said once.
fn caveats<'a>(sides: impl IntoIterator<Item = &'a Results>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in sides
        .into_iter()
        .filter_map(|r| crate::format::caveat(&r.host))
    {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

fn not_compared(b: &TestResult, a: &TestResult) -> NotCompared {
    NotCompared {
        name: b.name.clone(),
        before: status_word(b),
        after: status_word(a),
    }
}

/// The figure of a run's empty loop (its baseline test).
fn baseline_value(r: &Results) -> Option<f64> {
    r.tests
        .iter()
        .find(|t| t.baseline)
        .and_then(central)
        .map(|c| c.value)
}

fn speed_words(pct: f64, a: &str, b: &str) -> String {
    format!(
        "host speed: the guest's empty loop (no exit) took {} in {b} against {a}; exit figures move with the host's speed",
        fmt_pct_signed(pct)
    )
}

/// The host-speed sign between two sides, by their empty loops.
fn speed_sign(a: &Results, b: &Results, la: &str, lb: &str) -> Option<String> {
    let (x, y) = (baseline_value(a)?, baseline_value(b)?);
    let same_batch = a.tests.iter().find(|t| t.baseline).map(|t| t.batch)
        == b.tests.iter().find(|t| t.baseline).map(|t| t.batch);
    let pct = diagnostics::host_speed_apart(&[x], &[y])?;
    same_batch.then(|| speed_words(pct, la, lb))
}

/// The groups sign of one test's rounds, if they fall into two groups far apart.
fn group_sign(t: &TestResult, side: &str) -> Option<String> {
    let c = central(t)?;
    let g = diagnostics::groups(&c.rounds)?;
    Some(format!(
        "{} ({side}): rounds in two groups {:.1}x apart ({} low, {} high); the figure is their median",
        t.name, g.ratio, g.low, g.high
    ))
}

/// The names of the tests of `runs`, in the order they first appear.
fn test_names(runs: &[Run]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for t in runs.iter().flat_map(|r| &r.results.tests) {
        if !names.contains(&t.name) {
            names.push(t.name.clone());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::comparison_report::{disagreement_lines, render_comparison};
    use crate::results::tests::{ok_test, sample_results};
    use crate::results::{AbRun, RoundFigure};
    use crate::stats::model::THRESHOLD_PCT;

    /// A standard normal draw (sum of twelve uniforms).
    fn z(rng: &mut SmallRng) -> f64 {
        (0..12).map(|_| rng.random::<f64>()).sum::<f64>() - 6.0
    }

    /// The host the synthetic rounds run on: a round's figure is its test's level times
    /// the host's state while it ran, times 1 ± `noise` (normal); the host holds a slow
    /// state (1.3-1.6x every figure) in episodes of 2 to 12 rounds that begin in a round
    /// with probability `episodes`; and `outliers` of rounds are hit by interference on
    /// their own (1.15-1.3x).
    struct Host {
        noise: f64,
        episodes: f64,
        outliers: f64,
        state: f64,
        left: u32,
    }

    impl Host {
        fn new(noise: f64, episodes: f64, outliers: f64) -> Host {
            Host {
                noise,
                episodes,
                outliers,
                state: 1.0,
                left: 0,
            }
        }

        /// Moves the host's state on by one round.
        fn tick(&mut self, rng: &mut SmallRng) {
            if self.left == 0 {
                self.state = 1.0;
                if rng.random_bool(self.episodes) {
                    self.left = rng.random_range(2..=12);
                    self.state = rng.random_range(1.3..1.6);
                }
            } else {
                self.left -= 1;
            }
        }

        /// One round of a test at `level`.
        fn round(&self, rng: &mut SmallRng, level: f64) -> RoundFigure {
            let hit = if rng.random_bool(self.outliers) {
                rng.random_range(1.15..1.3)
            } else {
                1.0
            };
            let net = level * self.state * hit * (1.0 + self.noise * z(rng));
            let empty = 20_000.0 * self.state * (1.0 + 0.005 * z(rng));
            RoundFigure {
                samples: 50,
                median: net + empty,
                net_median: Some(net),
                loop_median: Some(empty),
                ..Default::default()
            }
        }
    }

    /// Sixteen tests at levels from 2,000 to 32,000 cycles.
    const TESTS: usize = 16;

    fn level(i: usize) -> f64 {
        2_000.0 * (1 + i) as f64
    }

    fn name(i: usize) -> String {
        format!("t{i:02}")
    }

    /// An A/B run of [`TESTS`] tests over `pairs` pairs on `host` (the sides of a pair run
    /// back to back, one round apart), side B's test 0 at `factor` times side A's.
    fn ab_run(rng: &mut SmallRng, host: &mut Host, pairs: usize, factor: f64) -> Results {
        let mut a: Vec<TestResult> = (0..TESTS).map(|i| ok_test(&name(i), level(i))).collect();
        let mut b = a.clone();
        for t in a.iter_mut().chain(b.iter_mut()) {
            t.rounds.clear();
        }
        for p in 0..pairs {
            let order = if p % 2 == 0 { [0, 1] } else { [1, 0] };
            for side in order {
                host.tick(rng);
                let tests = if side == 0 { &mut a } else { &mut b };
                for (i, t) in tests.iter_mut().enumerate() {
                    let f = if side == 1 && i == 0 { factor } else { 1.0 };
                    t.rounds.push(host.round(rng, level(i) * f));
                }
            }
        }
        let mut r = sample_results();
        r.tests = a;
        r.ab = Some(AbRun {
            knob: "warmup".into(),
            a: "200".into(),
            b: "201".into(),
            b_tests: b,
            order: Vec::new(),
            host: Vec::new(),
        });
        r
    }

    /// One run of [`TESTS`] tests, `rounds` rounds, on `host`, test 0 at `factor`.
    fn one_run(rng: &mut SmallRng, host: &mut Host, rounds: usize, factor: f64) -> Results {
        let mut r = sample_results();
        r.tests = (0..TESTS)
            .map(|i| {
                let mut t = ok_test(&name(i), level(i));
                t.rounds.clear();
                t
            })
            .collect();
        for _ in 0..rounds {
            host.tick(rng);
            for (i, t) in r.tests.iter_mut().enumerate() {
                let f = if i == 0 { factor } else { 1.0 };
                t.rounds.push(host.round(rng, level(i) * f));
            }
        }
        r
    }

    /// Whether test 0's interval covers `truth` (percent).
    fn covers(c: &Comparison, truth: f64) -> bool {
        c.tests[0]
            .change
            .ci95_pct
            .is_some_and(|[lo, hi]| lo <= truth && truth <= hi)
    }

    #[test]
    fn ab_gates_rarely_fire_on_unchanged_builds_and_find_a_known_change_despite_host_states_and_outliers(
    ) {
        let mut rng = SmallRng::seed_from_u64(35);
        let mut host = Host::new(0.02, 0.08, 0.03);
        // A/A: 60 runs of 16 tests, 30 pairs each, on a host with slow-state episodes and
        // outlier rounds: the gate fires in at most 5 % of them.
        let fired = (0..60)
            .filter(|_| {
                let r = ab_run(&mut rng, &mut host, 30, 1.0);
                compare_ab_run(&r, THRESHOLD_PCT)
                    .unwrap()
                    .gate(None)
                    .fires()
            })
            .count();
        assert!(fired <= 3, "{fired} of 60 A/A gates fired");
        // A known answer of +6 % on test 0: called slower and covered most of the time.
        let (mut slower, mut covered) = (0, 0);
        for _ in 0..60 {
            let r = ab_run(&mut rng, &mut host, 30, 1.06);
            let c = compare_ab_run(&r, THRESHOLD_PCT).unwrap();
            slower += usize::from(c.tests[0].change.is_slower());
            covered += usize::from(covers(&c, 6.0));
        }
        assert!(slower >= 48, "slower in {slower} of 60");
        assert!(covered >= 54, "covered in {covered} of 60");
        // The signs report the host: rounds in another state are named, none set aside.
        let r = ab_run(&mut rng, &mut Host::new(0.02, 0.3, 0.05), 30, 1.0);
        let c = compare_ab_run(&r, THRESHOLD_PCT).unwrap();
        assert!(
            c.tests.iter().all(|t| t.change.units == [30, 30]),
            "every pair counts"
        );
    }

    #[test]
    fn runs_gates_rarely_fire_on_unchanged_builds_and_find_a_five_percent_change() {
        let mut rng = SmallRng::seed_from_u64(36);
        // Runs whose host state lasts a whole run (each run's state 1 ± 1 %), with outlier
        // rounds within runs, and slow-state episodes that begin in a round with
        // probability `episodes` (one run in two has one at 0.03: its figure may move by
        // tens of percent, and the interval widens with it).
        let side = |rng: &mut SmallRng, factor: f64, episodes: f64| -> Vec<Results> {
            (0..3)
                .map(|_| {
                    let mut host = Host::new(0.02, episodes, 0.03);
                    let shift = 1.0 + 0.01 * z(rng);
                    let mut r = one_run(rng, &mut host, 24, factor);
                    for t in &mut r.tests {
                        for round in &mut t.rounds {
                            round.net_median = round.net_median.map(|v| v * shift);
                        }
                    }
                    r
                })
                .collect()
        };
        fn runs<'a>(s: &'a [Results], names: &'a [String]) -> Vec<Run<'a>> {
            s.iter()
                .zip(names)
                .map(|(r, name)| Run { name, results: r })
                .collect()
        }
        let compare_sides = |a: &[Results], b: &[Results]| {
            let names: Vec<String> = (0..a.len().max(b.len()))
                .map(|i| format!("run{i}"))
                .collect();
            let (ra, rb) = (runs(a, &names), runs(b, &names));
            let c = compare_runs(&ra, &rb, THRESHOLD_PCT);
            (
                c.gate(None).fires(),
                c.tests[0].change.is_slower(),
                covers(&c, 5.0),
            )
        };
        let mut fired = 0;
        let (mut slower, mut covered) = (0, 0);
        for _ in 0..40 {
            // A/A on the host with episodes: the gate holds.
            let (a, b) = (side(&mut rng, 1.0, 0.03), side(&mut rng, 1.0, 0.03));
            fired += usize::from(compare_sides(&a, &b).0);
            // A known +5 % between two sides of runs without episodes.
            let (a, c) = (side(&mut rng, 1.0, 0.0), side(&mut rng, 1.05, 0.0));
            let (_, s, cov) = compare_sides(&a, &c);
            slower += usize::from(s);
            covered += usize::from(cov);
        }
        assert!(fired <= 2, "{fired} of 40 A/A gates of runs fired");
        assert!(slower >= 32, "a 5 % change slower in {slower} of 40");
        assert!(covered >= 37, "covered in {covered} of 40");
    }

    #[test]
    fn a_comparison_of_runs_says_how_many_runs_its_spread_asks_for() {
        let mut rng = SmallRng::seed_from_u64(37);
        // Three runs a side whose figures move together by `sd` per run (the run's host
        // state), rounds quiet within a run: the planner follows the runs' spread.
        let side = |rng: &mut SmallRng, sd: f64| -> Vec<Results> {
            (0..3)
                .map(|_| {
                    let mut host = Host::new(0.002, 0.0, 0.0);
                    let shift = 1.0 + sd * z(rng);
                    let mut r = one_run(rng, &mut host, 24, 1.0);
                    for t in &mut r.tests {
                        for round in &mut t.rounds {
                            round.net_median = round.net_median.map(|v| v * shift);
                        }
                    }
                    r
                })
                .collect()
        };
        let names: Vec<String> = (0..3).map(|i| format!("run{i}")).collect();
        let needed = |a: &[Results], b: &[Results]| {
            let ra: Vec<Run> = a
                .iter()
                .zip(&names)
                .map(|(r, name)| Run { name, results: r })
                .collect();
            let rb: Vec<Run> = b
                .iter()
                .zip(&names)
                .map(|(r, name)| Run { name, results: r })
                .collect();
            let c = compare_runs(&ra, &rb, THRESHOLD_PCT);
            let text = render_comparison(&c, ["before", "after"]);
            let (m, test) = c.runs_needed.clone().expect("runs give a plan");
            assert!(
                text.contains(&format!("planner: {m} runs a side")),
                "{text}"
            );
            assert!(
                !c.tests.iter().any(|t| t.baseline && t.name == test),
                "the empty loop is not planned for"
            );
            m
        };
        let quiet = needed(&side(&mut rng, 0.001), &side(&mut rng, 0.001));
        let noisy = needed(&side(&mut rng, 0.03), &side(&mut rng, 0.03));
        assert_eq!(
            quiet,
            crate::stats::model::MIN_RUNS,
            "runs 0.1 % apart need no more than 3"
        );
        assert!(noisy > 10, "runs 3 % apart need many more: {noisy}");
        // Pairs and screens have no runs to plan.
        assert!(compare_ab_run(
            &ab_run(&mut rng, &mut Host::new(0.02, 0.0, 0.0), 10, 1.0),
            THRESHOLD_PCT
        )
        .unwrap()
        .runs_needed
        .is_none());
    }

    #[test]
    fn a_gate_fails_closed_on_a_test_missing_or_failed_on_one_side_but_not_on_one_the_host_never_ran(
    ) {
        let r = sample_results();
        // vmcall skipped on both sides, ipi stalled on both: the host ran neither.
        let c = compare_pairs(&r, &r, THRESHOLD_PCT);
        let g = c.gate(None);
        assert!(g.no_verdict.is_empty(), "{g:?}");
        // ipi completed on side B only: no verdict, and the gate cannot pass.
        let mut b = r.clone();
        let ok = ok_test("ipi", 9_000.0);
        *b.tests.iter_mut().find(|t| t.name == "ipi").unwrap() = ok;
        let g = compare_pairs(&r, &b, THRESHOLD_PCT).gate(None);
        assert_eq!(g.no_verdict, ["ipi"]);
        // A test only one side has, or one --gate names that neither has.
        let mut short = r.clone();
        short.tests.retain(|t| t.name != "cpuid");
        let c = compare(&r, &short, THRESHOLD_PCT);
        assert!(c.gate(None).no_verdict.contains(&"cpuid".to_string()));
        let only = ["inl_from_qemu".to_string(), "nosuch".to_string()];
        assert_eq!(c.gate(Some(&only)).no_verdict, ["nosuch"]);
        // Two single files never gate.
        assert!(!c.design.gates());
    }

    #[test]
    fn an_ab_table_whose_side_medians_disagree_with_its_pairs_says_why_and_a_vm_host_is_named() {
        // Rounds in two groups 8.7x apart, each pair in one group: the sides' medians
        // fall in different groups while every pair's ratio is about 1.
        let mut rng = SmallRng::seed_from_u64(37);
        let mut r = ab_run(&mut rng, &mut Host::new(0.01, 0.0, 0.0), 20, 1.0);
        let ab = r.ab.as_mut().unwrap();
        for (i, (a, b)) in r.tests[0]
            .rounds
            .iter_mut()
            .zip(&mut ab.b_tests[0].rounds)
            .enumerate()
        {
            let g = if i < 9 { 8.7 } else { 1.0 };
            let g_b = if i < 11 { 8.7 } else { 1.0 };
            a.net_median = a.net_median.map(|v| v * g);
            b.net_median = b.net_median.map(|v| v * g_b);
        }
        let cmp = compare_ab_run(&r, THRESHOLD_PCT).unwrap();
        let lines = disagreement_lines(&cmp);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("t00: the sides' medians differ by +"),
            "{}",
            lines[0]
        );
        // Every report of the comparison carries the host's caveat.
        r.host = serde_json::json!({"virtualization": {"kind": "nested"}});
        let text = render_comparison(&compare_ab_run(&r, THRESHOLD_PCT).unwrap(), ["A", "B"]);
        assert!(
            text.starts_with("not hardware figures: this host is a VM"),
            "{text}"
        );
    }

    #[test]
    fn one_file_gives_one_figure_in_every_rendering() {
        use crate::format::fmt_cycles;
        let mut r = sample_results();
        let t = r.tests.iter_mut().find(|t| t.name == "cpuid").unwrap();
        // A stored net median the rounds do not give, and a round far out: every
        // rendering shows the median of all six rounds.
        t.net_median_cycles = Some(1111.0);
        for (round, v) in t
            .rounds
            .iter_mut()
            .zip([12_345.0, 12_340.0, 12_350.0, 16_000.0, 12_345.0, 12_348.0])
        {
            round.net_median = Some(v);
        }
        let c = units::central(r.test("cpuid").unwrap()).unwrap();
        assert_eq!(c.value, 12_346.5);
        let shown = fmt_cycles(c.value);
        let row = |text: &str| -> String {
            text.lines()
                .find(|l| l.contains("cpuid"))
                .unwrap_or_default()
                .to_string()
        };
        let table = crate::report::render_table(&r);
        assert!(
            row(&table).contains(&shown) && !table.contains("1,111"),
            "{table}"
        );
        assert!(row(&crate::report::render_markdown(&r)).contains(&shown));
        let files = [("f.json".to_string(), r.clone())];
        assert!(row(&crate::report::render_csv(&files)).contains(",12346.5,"));
        let html = crate::html::render(&files);
        assert!(
            html.lines()
                .any(|l| l.contains(">cpuid</td>") && l.contains(&format!("<td>{shown}</td>"))),
            "{html}"
        );
        let om = crate::openmetrics::render(&files);
        assert!(
            om.lines()
                .any(|l| l.starts_with("exitlab_exit_net_median_cycles{")
                    && l.contains("test=\"cpuid\"")
                    && l.ends_with(" 12346.5")),
            "{om}"
        );
        let cmp = compare(&r, &r, THRESHOLD_PCT);
        let cc = &cmp.tests.iter().find(|t| t.name == "cpuid").unwrap().change;
        assert_eq!(cc.figures, [12_346.5, 12_346.5]);
        assert!(row(&render_comparison(&cmp, ["before", "after"])).contains(&shown));
        // The round far out is named beside the figure, not set aside.
        let signs = crate::report::signs_lines(&r.tests).join("\n");
        assert!(
            signs.contains("outlier rounds") && signs.contains("cpuid 1 of 6"),
            "{signs}"
        );
    }
}

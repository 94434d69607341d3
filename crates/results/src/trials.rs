//! Known-answer trials of the verdicts: a known change is injected into rounds (real
//! rounds from results files, or synthetic rounds drawn from a model of this host with
//! outlier rounds), and the tally says how often the 95 % interval held the change, how
//! often no change was called a change, and how often a small change was found. These
//! trials chose the central figure's estimator and outlier rule (`docs/statistics.md`),
//! and the tests check the chosen method with them. Seeded: one answer per input.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::central::{round_figures, Figure, Method};
use crate::results::Results;
use crate::stats::percentile;
use crate::verdict::{change_with, Change, Pairing, Verdict};

/// The outcome of many trials of one method.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Trials with the shift injected that gave an interval.
    pub shifted: usize,
    /// Of those, how many intervals held the true change.
    pub covered: usize,
    /// Of those, how many were called slower at threshold 0.
    pub detected: usize,
    /// Of those, how many were called slower at the trial's threshold.
    pub detected_at_threshold: usize,
    /// Trials without a shift that gave an interval.
    pub null: usize,
    /// Of those, how many intervals held 0.
    pub null_covered: usize,
    /// Of those, how many were called slower or faster at the threshold.
    pub false_alarms: usize,
    /// Half-widths of the intervals (percent), all trials.
    pub half_widths: Vec<f64>,
    /// Minimum detectable changes at the threshold (percent), all trials.
    pub mdcs: Vec<f64>,
}

impl Tally {
    /// Share of intervals that held the true change (shifted and null trials together).
    pub fn coverage(&self) -> f64 {
        ratio(self.covered + self.null_covered, self.shifted + self.null)
    }
    /// Share of null trials called slower or faster at the threshold.
    pub fn false_alarm_rate(&self) -> f64 {
        ratio(self.false_alarms, self.null)
    }
    /// Share of shifted trials called slower at threshold 0.
    pub fn detection_rate(&self) -> f64 {
        ratio(self.detected, self.shifted)
    }
    /// Share of shifted trials called slower at the threshold.
    pub fn detection_rate_at_threshold(&self) -> f64 {
        ratio(self.detected_at_threshold, self.shifted)
    }
    /// Median half-width of the intervals, percent.
    pub fn median_half_width(&self) -> f64 {
        median(&self.half_widths)
    }
    /// Median minimum detectable change at the threshold, percent.
    pub fn median_mdc(&self) -> f64 {
        median(&self.mdcs)
    }

    /// Counts a trial without a shift (`c` at the threshold).
    fn null_trial(&mut self, c: &Change) {
        let Some([lo, hi]) = c.ci95_pct else { return };
        self.null += 1;
        self.null_covered += usize::from(lo <= 0.0 && 0.0 <= hi);
        self.false_alarms += usize::from(matches!(c.verdict, Verdict::Slower | Verdict::Faster));
        self.half_widths.push((hi - lo) / 2.0);
        self.mdcs.extend(c.min_detectable_pct);
    }

    /// Counts a trial with a true change of `true_pct` (`at`: its verdict at the
    /// threshold).
    fn shifted_trial(&mut self, at: &Change, true_pct: f64) {
        let Some([lo, hi]) = at.ci95_pct else { return };
        self.shifted += 1;
        self.covered += usize::from(lo <= true_pct && true_pct <= hi);
        self.detected += usize::from(lo > 0.0);
        self.detected_at_threshold += usize::from(at.verdict == Verdict::Slower);
        self.half_widths.push((hi - lo) / 2.0);
        self.mdcs.extend(at.min_detectable_pct);
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_unstable_by(f64::total_cmp);
    percentile(&s, 50.0)
}

/// The net round figures of every test in `runs` that has at least five in every run:
/// test names, and per test the rounds of each run.
pub fn rounds_by_test(runs: &[Results]) -> (Vec<String>, Vec<Vec<Vec<f64>>>) {
    let mut names = Vec::new();
    let mut all = Vec::new();
    let Some(first) = runs.first() else {
        return (names, all);
    };
    for t in &first.tests {
        let per_run: Option<Vec<Vec<f64>>> = runs
            .iter()
            .map(|r| {
                let (v, figure) = round_figures(r.test(&t.name)?)?;
                (figure == Figure::Net && v.len() >= 5 && v.iter().all(|x| *x > 0.0)).then_some(v)
            })
            .collect();
        if let Some(per_run) = per_run {
            names.push(t.name.clone());
            all.push(per_run);
        }
    }
    (names, all)
}

/// Trials on doctored copies of real runs: for every test and every ordered pair of runs
/// (i, j), run j's rounds against run i's as they are (a null trial) and with every
/// round of run j scaled by `1 + shift` (the copy whose true change is `shift`).
pub fn doctored(rounds: &[Vec<Vec<f64>>], method: Method, shift: f64, threshold_pct: f64) -> Tally {
    let mut t = Tally::default();
    let mut seed = 1u64;
    for per_run in rounds {
        for (i, a) in per_run.iter().enumerate() {
            for (j, b) in per_run.iter().enumerate() {
                if i == j {
                    continue;
                }
                seed += 1;
                let c = change_with(a, b, Pairing::Independent, threshold_pct, method, seed);
                t.null_trial(&c);
                let shifted: Vec<f64> = b.iter().map(|x| x * (1.0 + shift)).collect();
                let at = change_with(
                    a,
                    &shifted,
                    Pairing::Independent,
                    threshold_pct,
                    method,
                    seed,
                );
                t.shifted_trial(&at, 100.0 * shift);
            }
        }
    }
    t
}

/// False alarms and detection at one threshold over real pairs of runs.
#[derive(Debug, Clone, Default)]
pub struct Sweep {
    /// Test comparisons (tests × unordered pairs of runs).
    pub comparisons: usize,
    /// Of those, called slower or faster.
    pub false_alarms: usize,
    /// Unordered pairs of runs.
    pub pairs: usize,
    /// Pairs in which some test was called slower or faster.
    pub pairs_flagged: usize,
    /// Share of doctored comparisons (+2 %, +3 %, +5 %) called slower.
    pub detected: [f64; 3],
}

/// [`Sweep`] of `method` at `threshold_pct` over every unordered pair of runs.
pub fn sweep(rounds: &[Vec<Vec<f64>>], method: Method, threshold_pct: f64) -> Sweep {
    let mut s = Sweep::default();
    let runs = rounds.first().map_or(0, |r| r.len());
    let mut found = [0usize; 3];
    for i in 0..runs {
        for j in i + 1..runs {
            s.pairs += 1;
            let mut flagged = false;
            for per_run in rounds {
                let (a, b) = (&per_run[i], &per_run[j]);
                let seed = (i * 1000 + j) as u64;
                let c = change_with(a, b, Pairing::Independent, threshold_pct, method, seed);
                s.comparisons += 1;
                if matches!(c.verdict, Verdict::Slower | Verdict::Faster) {
                    s.false_alarms += 1;
                    flagged = true;
                }
                for (k, shift) in [0.02, 0.03, 0.05].into_iter().enumerate() {
                    let b: Vec<f64> = b.iter().map(|x| x * (1.0 + shift)).collect();
                    let c = change_with(a, &b, Pairing::Independent, threshold_pct, method, seed);
                    found[k] += usize::from(c.verdict == Verdict::Slower);
                }
            }
            s.pairs_flagged += usize::from(flagged);
        }
    }
    s.detected = found.map(|f| ratio(f, s.comparisons));
    s
}

/// What one test's rounds over several runs look like.
#[derive(Debug, Clone)]
pub struct Description {
    /// Rounds over all runs.
    pub rounds: usize,
    /// 1.4826 × MAD of each run's rounds around that run's median, relative to it,
    /// pooled over runs (median).
    pub robust_sd: f64,
    /// Standard deviation of the rounds relative to their run's median, pooled.
    pub sd: f64,
    /// Rounds the outlier rule sets aside, over all runs.
    pub outliers: usize,
    /// max / min − 1 of the runs' medians of rounds.
    pub run_spread: f64,
}

/// Describes one test's rounds over several runs.
pub fn describe(per_run: &[Vec<f64>]) -> Description {
    let mut rel = Vec::new();
    let mut robust = Vec::new();
    let mut outliers = 0;
    let mut medians = Vec::new();
    for r in per_run {
        let mut s = r.clone();
        s.sort_unstable_by(f64::total_cmp);
        let m = percentile(&s, 50.0);
        medians.push(m);
        let mut dev: Vec<f64> = r.iter().map(|x| (x / m - 1.0).abs()).collect();
        dev.sort_unstable_by(f64::total_cmp);
        robust.push(1.4826 * percentile(&dev, 50.0));
        rel.extend(r.iter().map(|x| x / m - 1.0));
        outliers += crate::central::outlier_rounds(r)
            .iter()
            .filter(|o| **o)
            .count();
    }
    let mean = rel.iter().sum::<f64>() / rel.len().max(1) as f64;
    let sd = (rel.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (rel.len().max(2) - 1) as f64)
        .sqrt();
    let lo = medians.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = medians.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Description {
        rounds: rel.len(),
        robust_sd: median(&robust),
        sd,
        outliers,
        run_spread: hi / lo - 1.0,
    }
}

/// A model of one test's rounds on a host: each round is the test's level times
/// `1 + N(0, round_sd)`, a share of rounds land `outlier_low..outlier_high` high (host
/// interference on the exit path), and each run (a side of an independent comparison)
/// sits at its own level, `N(0, run_sd)` off.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// Rounds per side.
    pub rounds: usize,
    /// Relative standard deviation of a clean round.
    pub round_sd: f64,
    /// Share of rounds that are outliers.
    pub outlier_share: f64,
    /// Smallest outlier excess (relative).
    pub outlier_low: f64,
    /// Largest outlier excess (relative).
    pub outlier_high: f64,
    /// Relative standard deviation of a run's level (between runs; paired rounds share
    /// it).
    pub run_sd: f64,
}

impl Model {
    /// This project's development host as measured (HOST.md, `docs/statistics.md`): six
    /// rounds, a robust spread of about 1 %, one round in ten 15-30 % high.
    pub fn this_host() -> Model {
        Model {
            rounds: 6,
            round_sd: 0.01,
            outlier_share: 0.1,
            outlier_low: 0.15,
            outlier_high: 0.30,
            run_sd: 0.005,
        }
    }

    fn normal(rng: &mut SmallRng) -> f64 {
        (0..12).map(|_| rng.random::<f64>()).sum::<f64>() - 6.0
    }

    fn round(&self, rng: &mut SmallRng, level: f64) -> f64 {
        let mut x = level * (1.0 + self.round_sd * Self::normal(rng));
        if rng.random::<f64>() < self.outlier_share {
            x *= 1.0 + rng.random_range(self.outlier_low..=self.outlier_high);
        }
        x
    }

    /// Two sides' rounds, the second `1 + shift` times the first's level. Paired sides
    /// share each round's host state (half of the round variance); independent sides
    /// each have their own run level.
    pub fn sides(&self, rng: &mut SmallRng, pairing: Pairing, shift: f64) -> [Vec<f64>; 2] {
        let level = 20_000.0;
        match pairing {
            Pairing::Independent => {
                let la = level * (1.0 + self.run_sd * Self::normal(rng));
                let lb = level * (1.0 + shift) * (1.0 + self.run_sd * Self::normal(rng));
                [
                    (0..self.rounds).map(|_| self.round(rng, la)).collect(),
                    (0..self.rounds).map(|_| self.round(rng, lb)).collect(),
                ]
            }
            Pairing::Paired => {
                let half = Model {
                    round_sd: self.round_sd / std::f64::consts::SQRT_2,
                    ..*self
                };
                let mut a = Vec::new();
                let mut b = Vec::new();
                for _ in 0..self.rounds {
                    let shared = level * (1.0 + half.round_sd * Self::normal(rng));
                    a.push(half.round(rng, shared));
                    b.push(half.round(rng, shared * (1.0 + shift)));
                }
                [a, b]
            }
        }
    }
}

/// `trials` seeded trials of `method` on `model`'s rounds: each a null trial (same
/// level) and a trial with the second side `1 + shift` slower.
pub fn synthetic(
    model: &Model,
    pairing: Pairing,
    method: Method,
    shift: f64,
    threshold_pct: f64,
    trials: u64,
) -> Tally {
    let mut t = Tally::default();
    for seed in 0..trials {
        let mut rng = SmallRng::seed_from_u64(0x7472_6961_6c73 ^ seed);
        let [a, b] = model.sides(&mut rng, pairing, 0.0);
        t.null_trial(&change_with(&a, &b, pairing, threshold_pct, method, seed));
        let [a, b] = model.sides(&mut rng, pairing, shift);
        let at = change_with(&a, &b, pairing, threshold_pct, method, seed);
        t.shifted_trial(&at, 100.0 * shift);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::central::{Estimator, Interval, CHOSEN};

    const PLAIN_MEDIAN: Method = Method {
        estimator: Estimator::Median,
        reject_outliers: false,
        interval: Interval::Bootstrap,
    };

    #[test]
    fn the_chosen_method_holds_coverage_and_finds_2_percent_despite_outlier_rounds() {
        // Synthetic rounds like this host's: 1 % spread, one round in ten 15-30 % high;
        // seeded, so the rates are the same every time.
        let model = Model::this_host();
        let paired = synthetic(&model, Pairing::Paired, CHOSEN, 0.02, 0.0, 300);
        assert!(paired.coverage() >= 0.90, "coverage {}", paired.coverage());
        assert!(
            paired.detection_rate() >= 0.75,
            "detects 2 % in {}",
            paired.detection_rate()
        );
        assert!(
            paired.false_alarm_rate() <= 0.10,
            "{}",
            paired.false_alarm_rate()
        );
        let independent = synthetic(&model, Pairing::Independent, CHOSEN, 0.02, 0.0, 300);
        assert!(independent.coverage() >= 0.93, "{}", independent.coverage());
        // Without setting outlier rounds aside, the median's interval is several times
        // wider and a 2 % change is mostly missed.
        let plain = synthetic(&model, Pairing::Paired, PLAIN_MEDIAN, 0.02, 0.0, 300);
        assert!(
            plain.median_half_width() > 3.0 * paired.median_half_width(),
            "{} vs {}",
            plain.median_half_width(),
            paired.median_half_width()
        );
        assert!(plain.detection_rate() < 0.6, "{}", plain.detection_rate());
    }

    #[test]
    fn more_rounds_bring_a_b_coverage_to_95_percent() {
        let model = Model {
            rounds: 12,
            ..Model::this_host()
        };
        let t = synthetic(&model, Pairing::Paired, CHOSEN, 0.02, 0.0, 300);
        assert!(t.coverage() >= 0.95, "coverage {}", t.coverage());
        assert!(t.detection_rate() >= 0.95, "{}", t.detection_rate());
    }

    #[test]
    fn doctored_real_rounds_keep_their_coverage() {
        // Three runs' rounds of one test shaped like this host's (net cycles about 1 %
        // apart; the third run has a round 30 % high): every ordered pair, with and
        // without a 3 % shift.
        let rounds = vec![vec![
            vec![2978.0, 2950.0, 2990.0, 3010.0, 2965.0, 2981.0],
            vec![2990.0, 3002.0, 2971.0, 2984.0, 2995.0, 3040.0],
            vec![2970.0, 2985.0, 3860.0, 2962.0, 2999.0, 2980.0],
        ]];
        let t = doctored(&rounds, CHOSEN, 0.03, 1.0);
        assert_eq!(t.shifted, 6);
        assert_eq!(t.covered, 6, "{t:?}");
        assert_eq!(t.detected, 6, "{t:?}");
        assert_eq!(t.false_alarms, 0, "{t:?}");
    }
}

//! The one interval procedure: an estimate on logarithms, its standard error from one
//! seeded bootstrap over the design's independent units, and Student's t at the units'
//! degrees of freedom.
//!
//! - **One run** (a test's figure): the units are its rounds; the figure is the median of
//!   the round figures; `n − 1` degrees of freedom.
//! - **Pairs** (`bench --ab`): the units are the pairs of back-to-back rounds; the change
//!   is the median of the pairs' log ratios `ln(B_i / A_i)`; `n − 1`.
//! - **Runs** (directories of runs): the units are the runs; a run's figure is the median
//!   of its rounds, a side's the mean of its runs' log figures, the change their
//!   difference; each bootstrap resample draws runs, then rounds within each drawn run;
//!   `m_a + m_b − 2`.
//! - **Two single runs** (a screen, which cannot gate): each side's rounds are drawn on
//!   their own; the change is the log ratio of the two figures; `n_a + n_b − 2`. The
//!   interval is *within one run*: it cannot see how runs differ.
//!
//! The bootstrap's variance of a statistic of `n` units is scaled by `n / (n − 1)`, its
//! known shortfall for a mean of `n` values; the interval is the estimate ± t × the
//! standard error. The seed comes from the data, so one input always gives one answer.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::describe::percentile;
use super::model::{CONFIDENCE, MIN_RUNS, MIN_UNITS, RESAMPLES};

/// What a design's independent unit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// One round (a fresh VM) of one run.
    Round,
    /// A pair of back-to-back rounds of an A/B run.
    Pair,
    /// A run.
    Run,
}

impl Unit {
    /// The unit's name, singular or plural.
    pub fn name(self, n: usize) -> &'static str {
        match (self, n == 1) {
            (Unit::Round, true) => "round",
            (Unit::Round, false) => "rounds",
            (Unit::Pair, true) => "pair",
            (Unit::Pair, false) => "pairs",
            (Unit::Run, true) => "run",
            (Unit::Run, false) => "runs",
        }
    }
}

/// Why the data give no interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoInterval {
    /// Fewer units than the design needs (`have`: each side's; one-sided designs give the
    /// same count twice).
    TooFew {
        /// The units there are, per side.
        have: [usize; 2],
        /// The fewest a side needs.
        need: usize,
        /// Which unit.
        unit: Unit,
    },
    /// A figure is zero or negative (the test cost no more than the empty loop), so no
    /// ratio or logarithm exists.
    NotPositive,
}

impl std::fmt::Display for NoInterval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoInterval::TooFew { have, need, unit } => {
                if have[0] == have[1] {
                    write!(f, "{} {}", have[0], unit.name(have[0]))?;
                } else {
                    write!(f, "{} and {} {}", have[0], have[1], unit.name(2))?;
                }
                write!(f, "; at least {need} a side are needed")
            }
            NoInterval::NotPositive => f.write_str(
                "a figure is not positive (the test costs no more than the empty loop), so a change in percent means nothing",
            ),
        }
    }
}

/// An estimate on the natural-log scale (of a figure, or of a ratio B/A) with its
/// standard error and degrees of freedom.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The estimate, `ln` of the figure or of the ratio.
    pub log: f64,
    /// Its standard error.
    pub se: f64,
    /// Student's degrees of freedom.
    pub df: f64,
    /// The units it rests on, per side (one-sided designs: the same count twice).
    pub units: [usize; 2],
    /// Which unit.
    pub unit: Unit,
}

/// The `p` quantile of Student's t with `df` degrees of freedom (the normal's beyond a
/// million).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    StudentsT::new(0.0, 1.0, df.clamp(1.0, 1e6))
        .map(|t| t.inverse_cdf(p))
        .unwrap_or(f64::NAN)
}

impl Estimate {
    /// The two-sided quantile of the interval.
    pub fn t(&self) -> f64 {
        t_quantile(0.5 + CONFIDENCE / 2.0, self.df)
    }

    /// The interval's half-width on the log scale.
    pub fn half_log(&self) -> f64 {
        self.t() * self.se
    }

    /// The 95 % interval on the log scale.
    pub fn bounds(&self) -> [f64; 2] {
        let h = self.half_log();
        [self.log - h, self.log + h]
    }

    /// The estimate as a figure or ratio (`e^log`).
    pub fn value(&self) -> f64 {
        self.log.exp()
    }

    /// The interval as figures or ratios.
    pub fn value_bounds(&self) -> [f64; 2] {
        self.bounds().map(f64::exp)
    }

    /// The interval's half-width in percent of the estimate (the mean of its two sides
    /// in percent, which differ on a log scale).
    pub fn half_width_pct(&self) -> f64 {
        let h = self.half_log();
        (h.exp() - (-h).exp()) / 2.0 * 100.0
    }

    /// One-sided p-value of "the true value is at most `e^log0`": how often the estimate
    /// would lie this far above it by chance.
    pub fn p_above(&self, log0: f64) -> f64 {
        if self.se > 0.0 {
            StudentsT::new(0.0, 1.0, self.df.clamp(1.0, 1e6))
                .map(|t| 1.0 - t.cdf((self.log - log0) / self.se))
                .unwrap_or(f64::NAN)
        } else if self.log > log0 {
            0.0
        } else {
            1.0
        }
    }
}

/// A seed that depends on the data only.
fn seed_of<'a>(values: impl IntoIterator<Item = &'a f64>) -> u64 {
    values.into_iter().fold(0x6578_6974_6c61_6233, |h, v| {
        (h ^ v.to_bits())
            .rotate_left(23)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
    })
}

/// The ascending finite values of `v`.
fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_unstable_by(f64::total_cmp);
    s
}

/// The median of one resample (with replacement) of ascending `sorted` values: the
/// resample is drawn as counts per rank, so no sort is needed (`counts` is scratch).
fn resampled_median(sorted: &[f64], counts: &mut Vec<u32>, rng: &mut SmallRng) -> f64 {
    let n = sorted.len();
    counts.clear();
    counts.resize(n, 0);
    for _ in 0..n {
        counts[rng.random_range(0..n)] += 1;
    }
    // Type 7 median: 0-based ranks (n - 1) / 2 and n / 2, averaged.
    let (lo_rank, hi_rank) = ((n - 1) / 2, n / 2);
    let (mut seen, mut lo) = (0usize, None);
    for (i, &c) in counts.iter().enumerate() {
        seen += c as usize;
        if lo.is_none() && seen > lo_rank {
            lo = Some(sorted[i]);
        }
        if seen > hi_rank {
            let l = lo.unwrap_or(sorted[i]);
            return l + (sorted[i] - l) / 2.0;
        }
    }
    sorted[n - 1]
}

/// The sample variance of `v`.
fn variance(v: &[f64]) -> f64 {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)
}

/// The bootstrap variance of the log median of `values` (positive, at least two),
/// scaled by `n / (n − 1)`.
fn log_median_variance(values: &[f64], rng: &mut SmallRng) -> f64 {
    let s = sorted(values);
    let n = s.len() as f64;
    let mut counts = Vec::new();
    let boot: Vec<f64> = (0..RESAMPLES)
        .map(|_| resampled_median(&s, &mut counts, rng).ln())
        .collect();
    variance(&boot) * n / (n - 1.0)
}

fn too_few(have: [usize; 2], need: usize, unit: Unit) -> Result<(), NoInterval> {
    if have[0].min(have[1]) < need {
        Err(NoInterval::TooFew { have, need, unit })
    } else {
        Ok(())
    }
}

fn positive(values: &[f64]) -> Result<(), NoInterval> {
    if values.iter().all(|v| *v > 0.0 && v.is_finite()) {
        Ok(())
    } else {
        Err(NoInterval::NotPositive)
    }
}

/// One run's figure of a test from its round figures: the median of the rounds, with
/// rounds as units.
pub fn one_run(rounds: &[f64]) -> Result<Estimate, NoInterval> {
    let n = rounds.len();
    too_few([n, n], MIN_UNITS, Unit::Round)?;
    positive(rounds)?;
    let mut rng = SmallRng::seed_from_u64(seed_of(rounds));
    let s = sorted(rounds);
    Ok(Estimate {
        log: percentile(&s, 50.0).ln(),
        se: log_median_variance(rounds, &mut rng).sqrt(),
        df: (n - 1) as f64,
        units: [n, n],
        unit: Unit::Round,
    })
}

/// The change B/A of an A/B run from its pairs of round figures (`a[i]` and `b[i]` ran
/// back to back): the median of the pairs' log ratios, with pairs as units.
pub fn pairs(a: &[f64], b: &[f64]) -> Result<Estimate, NoInterval> {
    let n = a.len().min(b.len());
    too_few([n, n], MIN_UNITS, Unit::Pair)?;
    positive(&a[..n])?;
    positive(&b[..n])?;
    let logs: Vec<f64> = (0..n).map(|i| (b[i] / a[i]).ln()).collect();
    let s = sorted(&logs);
    let mut rng = SmallRng::seed_from_u64(seed_of(&logs));
    let mut counts = Vec::new();
    let boot: Vec<f64> = (0..RESAMPLES)
        .map(|_| resampled_median(&s, &mut counts, &mut rng))
        .collect();
    Ok(Estimate {
        log: percentile(&s, 50.0),
        se: (variance(&boot) * n as f64 / (n as f64 - 1.0)).sqrt(),
        df: (n - 1) as f64,
        units: [n, n],
        unit: Unit::Pair,
    })
}

/// The change B/A between two single runs from their round figures: the log ratio of
/// their figures (medians), each side's rounds drawn on their own. A screen: the
/// interval is within one run and cannot see how runs differ.
pub fn two_runs(a: &[f64], b: &[f64]) -> Result<Estimate, NoInterval> {
    let (na, nb) = (a.len(), b.len());
    too_few([na, nb], MIN_UNITS, Unit::Round)?;
    positive(a)?;
    positive(b)?;
    let mut rng = SmallRng::seed_from_u64(seed_of(a.iter().chain(b)));
    let var = log_median_variance(a, &mut rng) + log_median_variance(b, &mut rng);
    Ok(Estimate {
        log: percentile(&sorted(b), 50.0).ln() - percentile(&sorted(a), 50.0).ln(),
        se: var.sqrt(),
        df: (na + nb - 2) as f64,
        units: [na, nb],
        unit: Unit::Round,
    })
}

/// The mean of the runs' log figures (each run's figure the median of its rounds) and
/// the bootstrap variance of that mean, drawing runs and then rounds within each drawn
/// run, scaled by `m / (m − 1)`.
fn runs_side(runs: &[Vec<f64>], rng: &mut SmallRng) -> (f64, f64) {
    let sorted_runs: Vec<Vec<f64>> = runs.iter().map(|r| sorted(r)).collect();
    let m = runs.len();
    let mean = sorted_runs
        .iter()
        .map(|r| percentile(r, 50.0).ln())
        .sum::<f64>()
        / m as f64;
    let mut counts = Vec::new();
    let boot: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            (0..m)
                .map(|_| {
                    let run = &sorted_runs[rng.random_range(0..m)];
                    resampled_median(run, &mut counts, rng).ln()
                })
                .sum::<f64>()
                / m as f64
        })
        .collect();
    (mean, variance(&boot) * m as f64 / (m as f64 - 1.0))
}

/// Whether `runs` (each run's round figures) can be units: enough of them (`have`, per
/// side), none without rounds, every figure positive.
fn usable_runs(runs: &[Vec<f64>], have: [usize; 2]) -> Result<(), NoInterval> {
    too_few(have, MIN_RUNS, Unit::Run)?;
    if runs.iter().any(Vec::is_empty) {
        return Err(NoInterval::TooFew {
            have,
            need: MIN_RUNS,
            unit: Unit::Run,
        });
    }
    runs.iter().try_for_each(|r| positive(r))
}

/// One side's figure from its runs (`runs`: each run's round figures): the geometric
/// mean of the runs' figures (each the median of its rounds), with runs as units and
/// `m − 1` degrees of freedom.
pub fn runs_figure(runs: &[Vec<f64>]) -> Result<Estimate, NoInterval> {
    let m = runs.len();
    usable_runs(runs, [m, m])?;
    let mut rng = SmallRng::seed_from_u64(seed_of(runs.iter().flatten()));
    let (log, var) = runs_side(runs, &mut rng);
    Ok(Estimate {
        log,
        se: var.sqrt(),
        df: (m - 1) as f64,
        units: [m, m],
        unit: Unit::Run,
    })
}

/// The change B/A between two sets of runs (`a`, `b`: each run's round figures): the
/// difference of the two sides' mean log run figures, with runs as units.
pub fn runs(a: &[Vec<f64>], b: &[Vec<f64>]) -> Result<Estimate, NoInterval> {
    let (ma, mb) = (a.len(), b.len());
    usable_runs(a, [ma, mb])?;
    usable_runs(b, [ma, mb])?;
    let mut rng = SmallRng::seed_from_u64(seed_of(a.iter().chain(b).flatten()));
    let (la, va) = runs_side(a, &mut rng);
    let (lb, vb) = runs_side(b, &mut rng);
    Ok(Estimate {
        log: lb - la,
        se: (va + vb).sqrt(),
        df: (ma + mb - 2) as f64,
        units: [ma, mb],
        unit: Unit::Run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// `n` values around `level` with a relative spread `sd` (normal), seeded.
    pub(crate) fn around(level: f64, sd: f64, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                // Sum of twelve uniforms minus six: close enough to a standard normal.
                let z: f64 = (0..12).map(|_| rng.random::<f64>()).sum::<f64>() - 6.0;
                level * (1.0 + sd * z)
            })
            .collect()
    }

    #[test]
    fn t_quantiles_are_students() {
        assert!((t_quantile(0.975, 4.0) - 2.776).abs() < 1e-3);
        assert!((t_quantile(0.975, 23.0) - 2.069).abs() < 1e-3);
        assert!((t_quantile(0.975, 1e9) - 1.960).abs() < 1e-3);
    }

    #[test]
    fn one_run_estimates_the_median_with_a_standard_error_of_the_right_size() {
        // 400 rounds at 1 % spread: the median's standard error is about
        // 1.2533 × 1 % / 20 = 0.063 % on the log scale.
        let r = around(20_000.0, 0.01, 400, 1);
        let e = one_run(&r).unwrap();
        assert!((e.value() / 20_000.0 - 1.0).abs() < 0.003, "{e:?}");
        assert!(e.se > 0.0004 && e.se < 0.0009, "{e:?}");
        assert_eq!((e.df, e.units, e.unit), (399.0, [400, 400], Unit::Round));
        // The same input gives the same answer.
        assert_eq!(one_run(&r).unwrap(), e);
    }

    #[test]
    fn too_few_units_or_a_figure_that_is_not_positive_give_no_interval() {
        let few = [1.0, 2.0, 3.0, 4.0];
        let e = one_run(&few).unwrap_err();
        assert_eq!(
            e,
            NoInterval::TooFew {
                have: [4, 4],
                need: MIN_UNITS,
                unit: Unit::Round
            }
        );
        assert_eq!(e.to_string(), "4 rounds; at least 5 a side are needed");
        assert_eq!(
            one_run(&[1.0, 2.0, -3.0, 4.0, 5.0]).unwrap_err(),
            NoInterval::NotPositive
        );
        let six = around(100.0, 0.01, 6, 2);
        assert!(pairs(&six, &six[..4]).is_err());
        assert!(two_runs(&six, &six[..4])
            .unwrap_err()
            .to_string()
            .starts_with("6 and 4 rounds"));
        assert!(matches!(
            runs(&vec![six.clone(); 2], &vec![six.clone(); 3]),
            Err(NoInterval::TooFew {
                have: [2, 3],
                need: 3,
                unit: Unit::Run
            })
        ));
    }

    #[test]
    fn pairs_cancel_what_both_rounds_of_a_pair_share() {
        // Each pair ran in its own host state (0.7x to 1.5x), B 3 % above A within every
        // pair, with 0.5 % of noise: the pairs see 3 % with a narrow interval, while the
        // two sides' rounds taken apart are 20 % wide.
        let mut rng = SmallRng::seed_from_u64(3);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..30 {
            let state: f64 = rng.random_range(0.7..1.5);
            let z = |rng: &mut SmallRng| 1.0 + 0.005 * (rng.random::<f64>() - 0.5) * 3.46;
            a.push(20_000.0 * state * z(&mut rng));
            b.push(20_600.0 * state * z(&mut rng));
        }
        let e = pairs(&a, &b).unwrap();
        assert!((e.value() - 1.03).abs() < 0.003, "{e:?}");
        assert!(e.half_width_pct() < 0.5, "{}", e.half_width_pct());
        let apart = two_runs(&a, &b).unwrap();
        assert!(apart.half_width_pct() > 5.0, "{}", apart.half_width_pct());
    }

    #[test]
    fn runs_are_as_wide_as_runs_differ_and_not_narrower_than_their_rounds() {
        // Three runs a side whose figures differ by a few percent between runs: the
        // interval holds that spread, far wider than any run's rounds show.
        let run = |level: f64, seed: u64| around(level, 0.005, 24, seed);
        let a = vec![run(20_000.0, 1), run(20_800.0, 2), run(19_400.0, 3)];
        let b = vec![run(20_300.0, 4), run(19_700.0, 5), run(21_000.0, 6)];
        let e = runs(&a, &b).unwrap();
        assert!(e.half_width_pct() > 3.0, "{}", e.half_width_pct());
        assert_eq!((e.df, e.units), (4.0, [3, 3]));
        // Runs that agree to the cycle still get the width of their rounds (drawn within
        // each run), never an interval of no width.
        let same = vec![run(20_000.0, 7); 3];
        let e = runs(&same, &same).unwrap();
        assert_eq!(e.log, 0.0);
        assert!(e.se > 0.0 && e.half_width_pct() < 1.0, "{e:?}");
    }

    #[test]
    fn the_p_value_of_no_slowdown_matches_the_interval() {
        let e = Estimate {
            log: 0.02,
            se: 0.01,
            df: 20.0,
            units: [21, 21],
            unit: Unit::Pair,
        };
        // The lower bound lies above 0 exactly when p < 2.5 %.
        let [lo, _] = e.bounds();
        assert_eq!(lo > 0.0, e.p_above(0.0) < 0.025);
        assert!((e.p_above(0.02) - 0.5).abs() < 1e-12);
        let flat = Estimate { se: 0.0, ..e };
        assert_eq!((flat.p_above(0.0), flat.p_above(0.05)), (0.0, 1.0));
    }
}

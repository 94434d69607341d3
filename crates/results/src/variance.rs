//! Variance components of a test's figure and what they say about how to spend wall
//! time (Kalibera & Jones, "Rigorous benchmarking in reasonable time", ISMM 2013).
//!
//! A test's figure varies at two levels: between the samples of one round (one VM) and
//! between rounds (fresh VMs: placement, caches, host state). K&J's two-level
//! random-effects estimators separate the two:
//! - `S1²`, the **within-round** variance: the rounds' sample variances, pooled;
//! - `S2²`, the variance of the rounds' figures; the **between-round** variance is
//!   `T2² = S2² − S1²/n` (what is left once the within-round scatter a round figure of
//!   `n` samples carries is taken off), clamped at 0.
//!
//! exitlab's round figure is a median, not a mean (see [`crate::central`]), and its
//! samples have long tails (an interrupt now and then), so the moments are the robust
//! ones: a round's scatter is its robust standard deviation (1.4826 × MAD), and a median
//! of `n` values carries [`MEDIAN_VARIANCE_FACTOR`]` · S1²/n` of it (π/2, the median's
//! variance relative to the mean's for normal values) instead of K&J's `S1²/n`.
//!
//! With a round costing `c2` seconds (VM start and warm-up) and a sample `c1`, K&J's
//! optimal number of samples per round is `n* = sqrt((c2 / c1) · (v1 / T2²))`, with `v1`
//! the per-sample variance a round figure carries: it minimises the interval's width
//! for a given wall time. The rounds then set the interval's width.

pub use crate::results::{PrecisionRun, PrecisionTest, VarianceComponents};
use crate::results::{Results, TestResult};
use crate::stats::percentile;

/// The variance of the median of `n` values relative to that of their mean (`π/2` for
/// normal values): a round figure of `n` samples carries `π/2 · S1² / n` of the
/// within-round variance.
pub const MEDIAN_VARIANCE_FACTOR: f64 = std::f64::consts::FRAC_PI_2;

/// `z` of a two-sided 95 % interval.
const Z_975: f64 = 1.959_964;

impl VarianceComponents {
    /// The per-sample variance a round figure carries (`π/2 · S1²`).
    fn per_sample(&self) -> f64 {
        MEDIAN_VARIANCE_FACTOR * self.within_variance
    }

    /// The variance of one round's figure with `n` samples per round.
    pub fn round_variance(&self, n: f64) -> f64 {
        self.between_variance + self.per_sample() / n.max(1.0)
    }

    /// The share of a round figure's variance that lies between rounds, at the
    /// samples per round these rounds had.
    pub fn between_share(&self) -> f64 {
        let total = self.round_variance(self.samples_per_round);
        if total > 0.0 {
            self.between_variance / total
        } else {
            0.0
        }
    }

    /// Rounds of `n` samples each for a 95 % interval of the central figure (a median
    /// of rounds) within `±pct` percent, and the seconds they take; `None` without
    /// costs or a positive figure.
    pub fn plan(&self, pct: f64, n: f64) -> Option<Plan> {
        let (c2, c1) = (self.round_seconds?, self.sample_seconds?);
        if self.figure <= 0.0 || pct <= 0.0 {
            return None;
        }
        let half = pct / 100.0 * self.figure;
        let rounds = rounds_for(self.round_variance(n), half);
        Some(Plan {
            samples_per_round: n,
            rounds,
            seconds: rounds as f64 * (c2 + n * c1),
        })
    }
}

/// A number of rounds and samples per round, and the wall time they take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// Samples per round.
    pub samples_per_round: f64,
    /// Rounds.
    pub rounds: u64,
    /// Wall seconds of that many rounds of one test.
    pub seconds: f64,
}

/// Rounds whose median has a 95 % interval of half-width `half` when one round's figure
/// has variance `round_variance` (normal approximation: a median of rounds carries
/// `π/2` times the mean's variance).
pub fn rounds_for(round_variance: f64, half: f64) -> u64 {
    let r = Z_975 * Z_975 * MEDIAN_VARIANCE_FACTOR * round_variance / (half * half);
    (r.ceil() as u64).max(1)
}

/// K&J's optimal repetitions at the lower level: `sqrt((c_upper / c_lower) · (v_lower /
/// v_upper))`, with `v_lower` the per-sample variance a round figure carries, `v_upper`
/// the between-round variance, and the costs of a round (`round_cost`, besides its
/// samples) and of a sample. `None` when `v_upper` or a cost is not positive.
pub fn optimal_samples(
    per_sample_variance: f64,
    between_variance: f64,
    round_cost: f64,
    sample_cost: f64,
) -> Option<f64> {
    if between_variance <= 0.0 || sample_cost <= 0.0 || round_cost < 0.0 {
        return None;
    }
    Some(((round_cost / sample_cost) * (per_sample_variance / between_variance)).sqrt())
}

/// One round's inputs to the estimators: its samples, its figure (a median) and the
/// robust standard deviation of its values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundMoments {
    /// Samples in the round.
    pub samples: u64,
    /// The round's figure.
    pub figure: f64,
    /// The robust standard deviation of the round's values.
    pub robust_sd: f64,
}

/// K&J's estimators over `rounds` (at least two with samples): `(S1², T2², n)`, with
/// `n` the harmonic mean of the rounds' samples. `None` with fewer than two usable
/// rounds.
pub fn estimate(rounds: &[RoundMoments]) -> Option<(f64, f64, f64)> {
    let used: Vec<&RoundMoments> = rounds
        .iter()
        .filter(|r| r.samples > 0 && r.figure.is_finite() && r.robust_sd.is_finite())
        .collect();
    let k = used.len();
    if k < 2 {
        return None;
    }
    let total: u64 = used.iter().map(|r| r.samples).sum();
    let within = used
        .iter()
        .map(|r| r.samples as f64 * r.robust_sd * r.robust_sd)
        .sum::<f64>()
        / total as f64;
    let n = k as f64 / used.iter().map(|r| 1.0 / r.samples as f64).sum::<f64>();
    let mean = used.iter().map(|r| r.figure).sum::<f64>() / k as f64;
    let s2 = used.iter().map(|r| (r.figure - mean).powi(2)).sum::<f64>() / (k as f64 - 1.0);
    let between = (s2 - MEDIAN_VARIANCE_FACTOR * within / n).max(0.0);
    Some((within, between, n))
}

/// The robust standard deviation of `values`: 1.4826 × their median absolute deviation
/// (NaN for none).
pub fn robust_sd(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_unstable_by(f64::total_cmp);
    let med = percentile(&v, 50.0);
    let mut dev: Vec<f64> = v.iter().map(|x| (x - med).abs()).collect();
    dev.sort_unstable_by(f64::total_cmp);
    1.4826 * percentile(&dev, 50.0)
}

/// The variance components of `t` from its kept rounds (those the central figure rests
/// on) that recorded their scatter; `None` for a test that did not complete or has
/// fewer than two such rounds (files written before rounds recorded their scatter).
pub fn components(t: &TestResult) -> Option<VarianceComponents> {
    let c = crate::central::central(t)?;
    if c.rounds.is_empty() {
        return None;
    }
    of_rounds(&t.rounds, c.figure)
}

/// The variance components of a test's rounds (`figure`: which of their figures the
/// central figure uses), from the rounds the central figure keeps
/// ([`crate::central::kept_mask`]); `None` when
/// a round has no such figure or fewer than two recorded their scatter.
pub fn of_rounds(
    rounds: &[crate::results::RoundFigure],
    figure: crate::central::Figure,
) -> Option<VarianceComponents> {
    let values: Vec<f64> = rounds
        .iter()
        .map(|r| crate::central::round_value(r, figure))
        .collect();
    if values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let kept_flags = crate::central::kept_mask(rounds, figure);
    let mut kept_values: Vec<f64> = values
        .iter()
        .zip(&kept_flags)
        .filter_map(|(v, k)| k.then_some(*v))
        .collect();
    if kept_values.is_empty() {
        return None;
    }
    let value = crate::central::CHOSEN.estimator.of(&mut kept_values);
    let kept: Vec<(&crate::results::RoundFigure, f64)> = rounds
        .iter()
        .zip(&values)
        .zip(&kept_flags)
        .filter_map(|((r, v), k)| k.then_some((r, *v)))
        .collect();
    let moments: Vec<RoundMoments> = kept
        .iter()
        .filter_map(|(r, figure)| {
            Some(RoundMoments {
                samples: r.samples,
                figure: *figure,
                robust_sd: r.robust_sd?,
            })
        })
        .collect();
    let kept: Vec<&crate::results::RoundFigure> = kept.into_iter().map(|(r, _)| r).collect();
    let (within, between, n) = estimate(&moments)?;
    let timed: Vec<(f64, f64, u64)> = kept
        .iter()
        .filter_map(|r| Some((r.seconds?, r.sampling_seconds?, r.samples)))
        .collect();
    let (round_seconds, sample_seconds) = if timed.is_empty() {
        (None, None)
    } else {
        let k = timed.len() as f64;
        let sampling: f64 = timed.iter().map(|t| t.1).sum();
        let samples: u64 = timed.iter().map(|t| t.2).sum();
        let overhead = timed.iter().map(|t| (t.0 - t.1).max(0.0)).sum::<f64>() / k;
        (
            Some(overhead),
            (samples > 0).then(|| sampling / samples as f64),
        )
    };
    let mut v = VarianceComponents {
        rounds: moments.len() as u32,
        samples_per_round: n,
        figure: value,
        within_variance: within,
        between_variance: between,
        round_seconds,
        sample_seconds,
        optimal_samples_per_round: None,
    };
    v.optimal_samples_per_round = optimal_samples(
        v.per_sample(),
        between,
        round_seconds.unwrap_or(f64::NAN),
        sample_seconds.unwrap_or(f64::NAN),
    )
    .filter(|n| n.is_finite());
    Some(v)
}

/// The 95 % interval's half-width of a test's central figure, percent of the figure
/// (the farther of its two ends); `None` with too few rounds (see
/// [`crate::verdict::central_interval`]).
pub fn half_width_pct(t: &TestResult) -> Option<f64> {
    half_width_of(&crate::central::state_figures(t)?.0)
}

/// [`half_width_pct`] of a test's round figures.
pub fn half_width_of(rounds: &[f64]) -> Option<f64> {
    let (value, [lo, hi]) = crate::verdict::central_interval(rounds)?;
    Some((value - lo).max(hi - value) / value * 100.0)
}

impl PrecisionRun {
    /// The tests that did not reach the target.
    pub fn unreached(&self) -> impl Iterator<Item = &PrecisionTest> {
        self.tests.iter().filter(|t| !t.reached)
    }
}

/// Whether a half-width reaches `target_pct`.
pub fn reaches(half_width_pct: Option<f64>, target_pct: f64) -> bool {
    half_width_pct.is_some_and(|h| h <= target_pct)
}

/// The report's lines on a `--precision` run: the target, whether every test reached
/// it, and the ones that did not with their half-widths.
pub fn precision_lines(results: &Results) -> Vec<String> {
    let Some(p) = &results.precision else {
        return Vec::new();
    };
    let reached = p.tests.iter().filter(|t| t.reached).count();
    let of = if results.ab.is_some() {
        format!(
            "95 % interval of each test's change B vs A, so that a change of {} is found 80 % of the time",
            crate::format::fmt_pct_plain(crate::verdict::detectable_with(p.target_pct))
        )
    } else {
        "95 % interval of the central figure".to_string()
    };
    let whose = if p.by_default {
        " (--ab's default without --precision or --rounds)"
    } else {
        ""
    };
    let mut lines = vec![format!(
        "precision{whose}: target ±{} ({of}), budget {:.0} s: {reached} of {} tests reached it in {:.1} s, {} rounds at most",
        crate::format::fmt_pct_plain(p.target_pct),
        p.budget_seconds,
        p.tests.len(),
        p.seconds,
        p.rounds
    )];
    let missed: Vec<String> = p
        .unreached()
        .map(|t| match t.half_width_pct {
            Some(h) => format!("{} ±{h:.2}% ({} rounds)", t.name, t.rounds),
            None => format!("{} (no interval: too few rounds, {})", t.name, t.rounds),
        })
        .collect();
    if results.ab.is_some() {
        lines.push(format!(
            "precision: an interval of a change narrower than ±{0} is shown widened to ±{0} about the change (a test stops as soon as its interval is within the target, so an interval that narrow is often narrow by chance)",
            crate::format::fmt_pct_plain(p.target_pct)
        ));
    }
    if !missed.is_empty() {
        let when = if results.incomplete.is_some() {
            "the run was interrupted"
        } else {
            "the budget ended"
        };
        lines.push(format!(
            "precision not reached when {when}: {}",
            missed.join(", ")
        ));
    }
    lines
}

/// The variance components of every test that has them, one line each (for `report
/// -v` and `bench -v`); `None` when no test has them.
pub fn render_components(results: &Results) -> Option<String> {
    use std::fmt::Write as _;
    let rows: Vec<(&str, &VarianceComponents)> = results
        .tests
        .iter()
        .filter_map(|t| Some((t.name.as_str(), t.variance.as_ref()?)))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let mut out = String::from(
        "variance components (Kalibera & Jones; robust sd in % of the figure): within a round, between rounds, share between, s per round (VM start + warm-up), us per sample, optimal samples per round, rounds for ±1% at that\n",
    );
    for (name, v) in rows {
        let pct = |var: f64| var.sqrt() / v.figure * 100.0;
        let opt = v.optimal_samples_per_round;
        let plan = v.plan(1.0, opt.unwrap_or(v.samples_per_round));
        let _ = writeln!(
            out,
            "  {name:<22} within {:>6.2}%  between {:>6.2}%  {:>4.0}%  {}  {}  {}  {}",
            pct(v.within_variance),
            pct(v.between_variance),
            v.between_share() * 100.0,
            v.round_seconds
                .map_or("-".into(), |s| format!("{:.4} s", s)),
            v.sample_seconds
                .map_or("-".into(), |s| format!("{:.1} us", s * 1e6)),
            opt.map_or("n* -".into(), |n| format!("n* {n:.0}")),
            plan.map_or("-".into(), |p| format!(
                "{} rounds, {:.1} s",
                p.rounds, p.seconds
            )),
        );
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// A standard normal draw (Box–Muller).
    fn normal(rng: &mut SmallRng) -> f64 {
        let u: f64 = rng.random_range(f64::EPSILON..1.0);
        let v: f64 = rng.random_range(0.0..1.0);
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    /// `rounds` rounds of `n` values each: level 10,000 plus a round effect of sd
    /// `between_sd` plus a within-round scatter of sd `within_sd`, summarised as the
    /// round's median and robust sd.
    fn synthetic(
        rounds: usize,
        n: usize,
        within_sd: f64,
        between_sd: f64,
        seed: u64,
    ) -> Vec<RoundMoments> {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..rounds)
            .map(|_| {
                let level = 10_000.0 + between_sd * normal(&mut rng);
                let mut v: Vec<f64> = (0..n)
                    .map(|_| level + within_sd * normal(&mut rng))
                    .collect();
                v.sort_unstable_by(f64::total_cmp);
                RoundMoments {
                    samples: n as u64,
                    figure: percentile(&v, 50.0),
                    robust_sd: robust_sd(&v),
                }
            })
            .collect()
    }

    #[test]
    fn the_estimators_recover_known_within_and_between_variances() {
        // Within sd 300 (9e4), between sd 100 (1e4), 200 rounds of 300 samples.
        let (within, between, n) = estimate(&synthetic(200, 300, 300.0, 100.0, 7)).unwrap();
        assert!((n - 300.0).abs() < 1e-9, "n {n}");
        assert!((within / 9e4 - 1.0).abs() < 0.05, "within {within}");
        assert!((between / 1e4 - 1.0).abs() < 0.3, "between {between}");
        // The within-round share of a round figure (π/2 · 9e4 / 300 ≈ 471) is taken
        // off: without it the between estimate would be ~1.05e4 + 471.
        // No round effect: the between estimate is near 0 and never negative.
        let (within, between, _) = estimate(&synthetic(200, 300, 300.0, 0.0, 8)).unwrap();
        assert!((within / 9e4 - 1.0).abs() < 0.05, "within {within}");
        assert!((0.0..150.0).contains(&between), "between {between}");
        // Between-round variance dominating.
        let (_, between, _) = estimate(&synthetic(200, 100, 50.0, 400.0, 9)).unwrap();
        assert!((between / 1.6e5 - 1.0).abs() < 0.3, "between {between}");
    }

    #[test]
    fn the_estimators_need_two_rounds() {
        assert!(estimate(&synthetic(1, 100, 1.0, 1.0, 1)).is_none());
        assert!(estimate(&[]).is_none());
    }

    #[test]
    fn the_optimal_samples_per_round_follow_k_and_j() {
        // sqrt((c2 / c1) · (v1 / v2)): a round costs 100 samples, the per-sample
        // variance is 4 times the between-round one: sqrt(100 · 4) = 20.
        assert_eq!(optimal_samples(4.0, 1.0, 0.01, 0.0001), Some(20.0));
        // Rounds four times dearer: twice the samples.
        assert_eq!(optimal_samples(4.0, 1.0, 0.04, 0.0001), Some(40.0));
        // No between-round variance left: no finite optimum.
        assert_eq!(optimal_samples(4.0, 0.0, 0.01, 0.0001), None);
        // The optimum minimises the round variance times the round cost, i.e. the
        // interval's width for a given wall time.
        let cost = |n: f64| (1.0 + 4.0 / n) * (0.01 + n * 0.0001);
        assert!(cost(20.0) < cost(15.0) && cost(20.0) < cost(25.0));
    }

    #[test]
    fn a_plan_gives_rounds_for_the_target() {
        let v = VarianceComponents {
            rounds: 6,
            samples_per_round: 100.0,
            figure: 10_000.0,
            within_variance: 0.0,
            between_variance: 100.0 * 100.0, // 1 % of the figure
            round_seconds: Some(0.05),
            sample_seconds: Some(0.0001),
            optimal_samples_per_round: None,
        };
        // Half-width 1 % = 100 cycles: 1.96² · π/2 · 1e4 / 1e4 = 6.03 → 7 rounds.
        let p = v.plan(1.0, 100.0).unwrap();
        assert_eq!(p.rounds, 7);
        assert!((p.seconds - 7.0 * 0.06).abs() < 1e-9);
        // Twice the half-width: a quarter of the rounds (rounded up).
        assert_eq!(v.plan(2.0, 100.0).unwrap().rounds, 2);
        assert!(v.plan(0.0, 100.0).is_none());
    }

    #[test]
    fn components_of_a_test_use_its_kept_rounds_and_their_costs() {
        let mut t = crate::results::tests::ok_test("cpuid", 1000.0);
        for (i, r) in t.rounds.iter_mut().enumerate() {
            r.robust_sd = Some(20.0);
            r.seconds = Some(0.03);
            r.sampling_seconds = Some(0.01);
            if i == 2 {
                // An outlier round, set aside by the central figure: not counted.
                r.net_median = Some(5000.0);
                r.robust_sd = Some(4000.0);
            }
        }
        let v = components(&t).unwrap();
        assert_eq!(v.rounds, 5);
        assert_eq!(v.within_variance, 400.0);
        assert!((v.round_seconds.unwrap() - 0.02).abs() < 1e-12);
        assert!((v.sample_seconds.unwrap() - 0.01 / 17.0).abs() < 1e-12);
        // A file without the rounds' scatter (older) has no components.
        let old = crate::results::tests::ok_test("cpuid", 1000.0);
        assert!(components(&old).is_none());
    }

    #[test]
    fn precision_lines_name_the_tests_that_missed() {
        let mut r = crate::results::tests::sample_results();
        assert!(precision_lines(&r).is_empty());
        r.precision = Some(PrecisionRun {
            target_pct: 1.0,
            by_default: false,
            budget_seconds: 60.0,
            seconds: 59.5,
            rounds: 30,
            tests: vec![
                PrecisionTest {
                    name: "cpuid".into(),
                    rounds: 8,
                    half_width_pct: Some(0.8),
                    reached: true,
                },
                PrecisionTest {
                    name: "hlt".into(),
                    rounds: 30,
                    half_width_pct: Some(1.73),
                    reached: false,
                },
            ],
        });
        let lines = precision_lines(&r);
        assert!(lines[0].contains("1 of 2 tests reached it"), "{lines:?}");
        assert_eq!(
            lines[1],
            "precision not reached when the budget ended: hlt ±1.73% (30 rounds)"
        );
        assert!(
            lines[0].starts_with("precision: target ±1% (95 % interval of the central figure)"),
            "{lines:?}"
        );
        // An A/B run's default target says so, and what change it lets the run find.
        r.ab = Some(crate::results::AbRun {
            knob: "warmup".into(),
            a: "200".into(),
            b: "201".into(),
            b_tests: r.tests.clone(),
            order: Vec::new(),
            per_loop: false,
        });
        if let Some(p) = r.precision.as_mut() {
            p.target_pct = crate::verdict::half_width_detecting(2.0);
            p.by_default = true;
            p.budget_seconds = 20.0;
        }
        let lines = precision_lines(&r);
        assert!(
            lines[0].starts_with(
                "precision (--ab's default without --precision or --rounds): target ±1.4% (95 % interval of each test's change B vs A, so that a change of 2% is found 80 % of the time), budget 20 s: 1 of 2 tests reached it"
            ),
            "{lines:?}"
        );
        // And that no interval it shows is narrower than the target.
        assert!(
            lines.contains(&"precision: an interval of a change narrower than ±1.4% is shown widened to ±1.4% about the change (a test stops as soon as its interval is within the target, so an interval that narrow is often narrow by chance)".to_string()),
            "{lines:?}"
        );
        // Older files have no by_default: the target was asked for.
        let mut v = serde_json::to_value(r.precision.as_ref().unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("by_default");
        let old: PrecisionRun = serde_json::from_value(v).unwrap();
        assert!(!old.by_default);
    }
}

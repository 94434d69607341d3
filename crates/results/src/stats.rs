//! Descriptive statistics for benchmark samples.
//!
//! Everything here is deterministic: the same input always gives the same
//! [`Summary`], including its bootstrap confidence interval, so two runs of the
//! report over one results file agree to the last digit. Resampling draws from
//! `rand`'s `SmallRng` seeded with a fixed value.
//!
//! Percentiles use linear interpolation between closest ranks, the "type 7"
//! definition of Hyndman & Fan (the default of R, NumPy and most
//! spreadsheets): for `n` sorted values `x[0..n]` and a fraction `q` in
//! `[0, 1]`, let `h = (n - 1) * q`; the percentile is
//! `x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])`.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Number of bootstrap resamples used for [`Summary::median_ci95`].
pub const BOOTSTRAP_RESAMPLES: usize = 1000;

/// Largest sample count for which [`Summary::median_ci95`] is a bootstrap
/// interval; above it the distribution-free order-statistic interval is used.
pub const BOOTSTRAP_MAX_N: usize = 20_000;

/// Seed of the bootstrap's pseudo-random generator (mixed with the sample count).
const BOOTSTRAP_SEED: u64 = 0x6578_6974_6c61_6221;

/// Two-sided 97.5 % quantile of the standard normal distribution.
const Z_975: f64 = 1.959_963_984_540_054;

/// Why a set of values could not be summarized.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum StatsError {
    /// No values at all.
    #[error("no samples to summarize; the benchmark produced no measurements (run more samples)")]
    Empty,
    /// A value is NaN or infinite.
    #[error("sample {index} is not a finite number ({value}); the measurement is corrupt and cannot be summarized")]
    NonFinite {
        /// Position of the offending value in the input.
        index: usize,
        /// The offending value.
        value: f64,
    },
    /// The values are finite but so large that the mean or the standard
    /// deviation overflows.
    #[error("samples are too large to summarize (the mean or standard deviation overflows); check the measurement's units")]
    OutOfRange,
}

/// Summary statistics of one set of measurements.
///
/// Percentiles follow the type 7 definition described in the module
/// documentation. All fields are finite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    /// Number of values.
    pub n: u64,
    /// Smallest value.
    pub min: f64,
    /// 10th percentile.
    pub p10: f64,
    /// 50th percentile.
    pub median: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest value.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (divisor `n - 1`; 0 when `n == 1`).
    pub stddev: f64,
    /// 95 % confidence interval of the median, `[low, high]`.
    ///
    /// For `n <=` [`BOOTSTRAP_MAX_N`] this is the bootstrap percentile
    /// interval: [`BOOTSTRAP_RESAMPLES`] resamples drawn with a fixed-seed
    /// generator, the interval being the 2.5th and 97.5th percentiles of
    /// their medians. For larger `n` it is the distribution-free
    /// order-statistic interval `[x(j), x(k)]` with the ranks taken from the
    /// normal approximation of Binomial(n, 1/2): `j = floor(n/2 - 1.96 sqrt(n)/2)`
    /// and `k = ceil(1 + n/2 + 1.96 sqrt(n)/2)` (1-based, clamped to `1..=n`),
    /// which is what the bootstrap converges to for large `n`.
    pub median_ci95: [f64; 2],
}

impl Summary {
    /// Whether this summary's median confidence interval overlaps `other`'s.
    pub fn median_ci_overlaps(&self, other: &Summary) -> bool {
        self.median_ci95[0] <= other.median_ci95[1] && other.median_ci95[0] <= self.median_ci95[1]
    }
}

/// Summarizes `values` (in any order).
///
/// Fails on empty input and on any NaN or infinite value. Sorting is
/// `O(n log n)` (a copy of the input is sorted with `f64::total_cmp`); the
/// median confidence interval costs at most about
/// `BOOTSTRAP_RESAMPLES * 3 * BOOTSTRAP_MAX_N` simple operations.
pub fn summarize(values: &[f64]) -> Result<Summary, StatsError> {
    if values.is_empty() {
        return Err(StatsError::Empty);
    }
    if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(StatsError::NonFinite { index, value });
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    summarize_sorted(&sorted)
}

/// Summarizes integer measurements such as cycle counts.
///
/// Values above 2^53 lose precision in the conversion to `f64`.
pub fn summarize_u64(values: &[u64]) -> Result<Summary, StatsError> {
    if values.is_empty() {
        return Err(StatsError::Empty);
    }
    let mut sorted: Vec<f64> = values.iter().map(|&v| v as f64).collect();
    sorted.sort_unstable_by(f64::total_cmp);
    summarize_sorted(&sorted)
}

/// Summarizes finite values that are already sorted in ascending order.
fn summarize_sorted(sorted: &[f64]) -> Result<Summary, StatsError> {
    let n = sorted.len();
    let count = n as f64;
    let mean = sorted.iter().sum::<f64>() / count;
    let stddev = if n > 1 {
        let ss: f64 = sorted.iter().map(|v| (v - mean) * (v - mean)).sum();
        (ss / (count - 1.0)).sqrt()
    } else {
        0.0
    };
    if !mean.is_finite() || !stddev.is_finite() {
        return Err(StatsError::OutOfRange);
    }
    Ok(Summary {
        n: n as u64,
        min: sorted[0],
        p10: percentile(sorted, 10.0),
        median: percentile(sorted, 50.0),
        p90: percentile(sorted, 90.0),
        p99: percentile(sorted, 99.0),
        max: sorted[n - 1],
        mean,
        stddev,
        median_ci95: median_ci95(sorted),
    })
}

/// The resolution of a set of TSC differences: the smallest positive gap between two
/// distinct values (cycles), `None` when there are fewer than two distinct values.
pub fn stamp_step(values: impl IntoIterator<Item = f64>) -> Option<u64> {
    let mut v: Vec<u64> = values
        .into_iter()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .map(|x| x as u64)
        .collect();
    v.sort_unstable();
    v.dedup();
    v.windows(2).map(|w| w[1] - w[0]).min()
}

/// The `p`-th percentile (`p` in percent, `0..=100`) of ascending `sorted`
/// values, by linear interpolation between closest ranks (type 7).
///
/// `p` is clamped to `0..=100`. Returns NaN for an empty slice or a NaN `p`.
/// The slice must be sorted ascending; this is not checked.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() || p.is_nan() {
        return f64::NAN;
    }
    let q = p.clamp(0.0, 100.0) / 100.0;
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor();
    let i = lo as usize;
    let frac = h - lo;
    match sorted.get(i + 1) {
        Some(&next) if frac > 0.0 => sorted[i] + frac * (next - sorted[i]),
        _ => sorted[i],
    }
}

/// Empirical cumulative distribution of `values`, as at most `points` pairs
/// `[x, F(x)]` where `F(x)` is the fraction of values `<= x` at that rank.
///
/// The pairs are taken at ranks spread evenly from the smallest to the
/// largest value (both included), so the first pair is `[min, 1/n]` and the
/// last `[max, 1]`; when `points >= n` every value gives one pair. Non-finite
/// values are ignored. Returns an empty vector when `points == 0` or there is
/// no finite value.
pub fn cdf_points(values: &[f64], points: usize) -> Vec<[f64; 2]> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() || points == 0 {
        return Vec::new();
    }
    sorted.sort_unstable_by(f64::total_cmp);
    let n = sorted.len();
    let count = n as f64;
    if points >= n {
        return sorted
            .iter()
            .enumerate()
            .map(|(i, &x)| [x, (i + 1) as f64 / count])
            .collect();
    }
    if points == 1 {
        return vec![[sorted[n - 1], 1.0]];
    }
    (0..points)
        .map(|k| {
            // Evenly spaced ranks with exact integer rounding; k = 0 gives 0
            // and k = points - 1 gives n - 1.
            let num = k as u128 * (n - 1) as u128;
            let den = (points - 1) as u128;
            let idx = ((2 * num + den) / (2 * den)) as usize;
            [sorted[idx], (idx + 1) as f64 / count]
        })
        .collect()
}

/// 95 % confidence interval of the median of ascending `sorted` values.
fn median_ci95(sorted: &[f64]) -> [f64; 2] {
    let n = sorted.len();
    if n == 1 {
        return [sorted[0], sorted[0]];
    }
    if n <= BOOTSTRAP_MAX_N {
        bootstrap_median_ci95(sorted)
    } else {
        order_statistic_median_ci95(sorted)
    }
}

/// Bootstrap percentile interval of the median.
///
/// Because `sorted` is ascending, the median of a resample is determined by
/// the resampled *ranks* alone, so each resample only counts how often each
/// rank was drawn and walks the counts up to the middle: `O(n)` per resample
/// with no sorting.
fn bootstrap_median_ci95(sorted: &[f64]) -> [f64; 2] {
    let n = sorted.len();
    let mut rng = SmallRng::seed_from_u64(BOOTSTRAP_SEED ^ n as u64);
    let mut counts = vec![0u32; n];
    let mut medians = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    // Type 7 median: 0-based ranks (n - 1) / 2 and n / 2, averaged.
    let lo_rank = (n - 1) / 2;
    let hi_rank = n / 2;
    for _ in 0..BOOTSTRAP_RESAMPLES {
        counts.iter_mut().for_each(|c| *c = 0);
        for _ in 0..n {
            counts[rng.random_range(0..n)] += 1;
        }
        let mut lo_value = None;
        let mut seen = 0usize;
        let mut median = sorted[n - 1];
        for (i, &c) in counts.iter().enumerate() {
            seen += c as usize;
            if lo_value.is_none() && seen > lo_rank {
                lo_value = Some(sorted[i]);
            }
            if seen > hi_rank {
                let lo = lo_value.unwrap_or(sorted[i]);
                median = lo + (sorted[i] - lo) / 2.0;
                break;
            }
        }
        medians.push(median);
    }
    medians.sort_unstable_by(f64::total_cmp);
    [percentile(&medians, 2.5), percentile(&medians, 97.5)]
}

/// Distribution-free order-statistic interval of the median (normal
/// approximation of Binomial(n, 1/2) for the ranks).
fn order_statistic_median_ci95(sorted: &[f64]) -> [f64; 2] {
    let n = sorted.len();
    let half = n as f64 / 2.0;
    let spread = Z_975 * (n as f64).sqrt() / 2.0;
    let j = ((half - spread).floor() as usize).clamp(1, n);
    let k = ((1.0 + half + spread).ceil() as usize).clamp(1, n);
    [sorted[j - 1], sorted[k - 1]]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn stamp_step_is_the_finest_gap_between_distinct_values() {
        // Stamps read in 26-cycle steps, with repeats and a gap of two steps.
        assert_eq!(stamp_step([52.0, 78.0, 52.0, 130.0, 104.0]), Some(26));
        assert_eq!(stamp_step([100.0, 103.0, 250.0]), Some(3));
        // One distinct value (or none) has no measurable step.
        assert_eq!(stamp_step([52.0, 52.0]), None);
        assert_eq!(stamp_step([]), None);
        // Non-finite values are left out.
        assert_eq!(stamp_step([f64::NAN, 10.0, f64::INFINITY, 30.0]), Some(20));
    }

    #[test]
    fn rejects_empty_and_non_finite() {
        assert_eq!(summarize(&[]), Err(StatsError::Empty));
        assert_eq!(summarize_u64(&[]), Err(StatsError::Empty));
        match summarize(&[1.0, f64::NAN, 2.0]) {
            Err(StatsError::NonFinite { index: 1, value }) => assert!(value.is_nan()),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            summarize(&[f64::INFINITY]),
            Err(StatsError::NonFinite { index: 0, .. })
        ));
        assert!(matches!(
            summarize(&[1.0, f64::NEG_INFINITY]),
            Err(StatsError::NonFinite { index: 1, .. })
        ));
        assert_eq!(
            summarize(&[f64::MAX, f64::MAX]),
            Err(StatsError::OutOfRange)
        );
    }

    #[test]
    fn percentile_type7_matches_reference_values() {
        // Reference values from R: quantile(c(1,2,3,4,5,6,7,8,9,10), type = 7).
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert!(close(percentile(&v, 0.0), 1.0));
        assert!(close(percentile(&v, 10.0), 1.9));
        assert!(close(percentile(&v, 25.0), 3.25));
        assert!(close(percentile(&v, 50.0), 5.5));
        assert!(close(percentile(&v, 90.0), 9.1));
        assert!(close(percentile(&v, 99.0), 9.91));
        assert!(close(percentile(&v, 100.0), 10.0));
        // Clamping and degenerate inputs.
        assert!(close(percentile(&v, -5.0), 1.0));
        assert!(close(percentile(&v, 150.0), 10.0));
        assert!(percentile(&[], 50.0).is_nan());
        assert!(percentile(&v, f64::NAN).is_nan());
        assert_eq!(percentile(&[7.0], 33.0), 7.0);
        // Odd count: exact middle.
        assert_eq!(percentile(&[1.0, 2.0, 30.0], 50.0), 2.0);
    }

    #[test]
    fn summary_of_small_set() {
        let s = summarize(&[4.0, 1.0, 3.0, 2.0, 5.0]).unwrap();
        assert_eq!(s.n, 5);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 5.0);
        assert_eq!(s.median, 3.0);
        assert!(close(s.p10, 1.4));
        assert!(close(s.p90, 4.6));
        assert!(close(s.p99, 4.96));
        assert!(close(s.mean, 3.0));
        // Sample variance of 1..=5 is 2.5.
        assert!(close(s.stddev, 2.5f64.sqrt()));
        assert!(s.median_ci95[0] <= s.median && s.median <= s.median_ci95[1]);
        assert!(s.median_ci95[0] >= 1.0 && s.median_ci95[1] <= 5.0);
    }

    #[test]
    fn single_value() {
        let s = summarize(&[42.0]).unwrap();
        assert_eq!(s.n, 1);
        assert_eq!(s.stddev, 0.0);
        for v in [s.min, s.p10, s.median, s.p90, s.p99, s.max, s.mean] {
            assert_eq!(v, 42.0);
        }
        assert_eq!(s.median_ci95, [42.0, 42.0]);
    }

    #[test]
    fn constant_values_have_degenerate_interval() {
        let s = summarize(&[3.0; 5000]).unwrap();
        assert_eq!(s.median_ci95, [3.0, 3.0]);
        assert_eq!(s.stddev, 0.0);
        let s = summarize(&vec![3.0; BOOTSTRAP_MAX_N + 1]).unwrap();
        assert_eq!(s.median_ci95, [3.0, 3.0]);
    }

    #[test]
    fn summarize_u64_agrees_with_f64() {
        let ints: Vec<u64> = (0..1000u64).map(|i| (i * 7919) % 1009 + 100).collect();
        let floats: Vec<f64> = ints.iter().map(|&v| v as f64).collect();
        assert_eq!(summarize_u64(&ints).unwrap(), summarize(&floats).unwrap());
    }

    #[test]
    fn order_does_not_matter_and_result_is_deterministic() {
        let mut v: Vec<f64> = (0..3001u64)
            .map(|i| ((i * 2654435761) % 10007) as f64)
            .collect();
        let a = summarize(&v).unwrap();
        v.reverse();
        let b = summarize(&v).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, summarize(&v).unwrap());
    }

    /// Deterministic pseudo-normal data: sum of 12 uniforms minus 6.
    fn normalish(n: usize, seed: u64, mean: f64, sd: f64) -> Vec<f64> {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let s: f64 = (0..12).map(|_| rng.random::<f64>()).sum();
                mean + sd * (s - 6.0)
            })
            .collect()
    }

    #[test]
    fn bootstrap_interval_has_plausible_width() {
        // For normal data the median's standard error is about
        // 1.2533 * sd / sqrt(n), so the 95 % interval is about
        // 2 * 1.96 * 1.2533 * sd / sqrt(n) wide.
        let n = 2000;
        let v = normalish(n, 1, 1000.0, 50.0);
        let s = summarize(&v).unwrap();
        let expected = 2.0 * 1.96 * 1.2533 * 50.0 / (n as f64).sqrt();
        let width = s.median_ci95[1] - s.median_ci95[0];
        assert!(
            width > 0.6 * expected && width < 1.6 * expected,
            "width {width} vs {expected}"
        );
        assert!(s.median_ci95[0] <= s.median && s.median <= s.median_ci95[1]);
    }

    #[test]
    fn interval_methods_agree_at_the_threshold() {
        let v = normalish(BOOTSTRAP_MAX_N, 2, 500.0, 20.0);
        let mut sorted = v.clone();
        sorted.sort_unstable_by(f64::total_cmp);
        let boot = bootstrap_median_ci95(&sorted);
        let order = order_statistic_median_ci95(&sorted);
        let width_b = boot[1] - boot[0];
        let width_o = order[1] - order[0];
        assert!(
            (width_b / width_o - 1.0).abs() < 0.35,
            "bootstrap {boot:?} vs order statistic {order:?}"
        );
        let med = percentile(&sorted, 50.0);
        assert!(order[0] <= med && med <= order[1]);
    }

    #[test]
    fn large_input_uses_order_statistics() {
        let n = 1_000_000;
        let v: Vec<f64> = (0..n as u64)
            .map(|i| ((i * 2654435761) % 1_000_003) as f64)
            .collect();
        let s = summarize(&v).unwrap();
        assert_eq!(s.n, n as u64);
        let mut sorted = v.clone();
        sorted.sort_unstable_by(f64::total_cmp);
        assert_eq!(s.median_ci95, order_statistic_median_ci95(&sorted));
        assert!(s.median_ci95[0] < s.median && s.median < s.median_ci95[1]);
    }

    #[test]
    fn summarize_200k_is_fast() {
        let v = normalish(200_000, 3, 3000.0, 300.0);
        let start = std::time::Instant::now();
        let s = summarize(&v).unwrap();
        let took = start.elapsed();
        assert_eq!(s.n, 200_000);
        // Only meaningful for optimized builds.
        if !cfg!(debug_assertions) {
            assert!(took.as_secs_f64() < 0.25, "took {took:?}");
        }
        // The worst case for the bootstrap is n at the threshold.
        let v = normalish(BOOTSTRAP_MAX_N, 4, 3000.0, 300.0);
        let start = std::time::Instant::now();
        summarize(&v).unwrap();
        let took = start.elapsed();
        if !cfg!(debug_assertions) {
            assert!(took.as_secs_f64() < 0.25, "took {took:?}");
        }
    }

    #[test]
    fn cdf_points_shapes() {
        assert!(cdf_points(&[], 10).is_empty());
        assert!(cdf_points(&[1.0], 0).is_empty());
        assert!(cdf_points(&[f64::NAN], 5).is_empty());
        assert_eq!(
            cdf_points(&[3.0, 1.0, f64::NAN, 2.0], 10),
            vec![[1.0, 1.0 / 3.0], [2.0, 2.0 / 3.0], [3.0, 1.0]]
        );
        assert_eq!(cdf_points(&[3.0, 1.0, 2.0], 1), vec![[3.0, 1.0]]);
        let v: Vec<f64> = (0..1001).map(f64::from).collect();
        let pts = cdf_points(&v, 11);
        assert_eq!(pts.len(), 11);
        assert_eq!(pts[0], [0.0, 1.0 / 1001.0]);
        assert_eq!(pts[5], [500.0, 501.0 / 1001.0]);
        assert_eq!(pts[10], [1000.0, 1.0]);
        assert!(pts
            .windows(2)
            .all(|w| w[0][0] <= w[1][0] && w[0][1] < w[1][1]));
    }

    #[test]
    fn ci_overlap() {
        let mut a = summarize(&[1.0, 2.0, 3.0]).unwrap();
        let mut b = a.clone();
        a.median_ci95 = [1.0, 2.0];
        b.median_ci95 = [2.0, 3.0];
        assert!(a.median_ci_overlaps(&b));
        b.median_ci95 = [2.5, 3.0];
        assert!(!a.median_ci_overlaps(&b));
        assert!(!b.median_ci_overlaps(&a));
    }

    #[test]
    fn summary_serde_round_trip() {
        let s = summarize(&[1.5, 2.25, 1000.125]).unwrap();
        let json = serde_json::to_string(&s).unwrap();
        let back: Summary = serde_json::from_str(&json).unwrap();
        assert_eq!(s, back);
    }
}

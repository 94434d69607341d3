//! Descriptive statistics for benchmark samples.
//!
//! These describe the samples of one test (its distribution), never the uncertainty of
//! a figure: that is [`super::interval`]'s, over independent units (rounds, pairs, runs),
//! never over samples, which share their VM and are not independent.
//!
//! Percentiles use linear interpolation between closest ranks, the "type 7"
//! definition of Hyndman & Fan (the default of R, NumPy and most
//! spreadsheets): for `n` sorted values `x[0..n]` and a fraction `q` in
//! `[0, 1]`, let `h = (n - 1) * q`; the percentile is
//! `x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])`.

use thiserror::Error;

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

/// Summary statistics of one set of measurements: the results file's type
/// ([`crate::results::Summary`]), filled in here.
pub use crate::results::Summary;

/// Summarizes `values` (in any order).
///
/// Fails on empty input and on any NaN or infinite value. Sorting is
/// `O(n log n)` (a copy of the input is sorted with `f64::total_cmp`).
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

/// The median (type 7) of the finite `values`, in any order; NaN for none.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_unstable_by(f64::total_cmp);
    percentile(&v, 50.0)
}

/// The robust standard deviation of `values`: 1.4826 × their median absolute deviation
/// from their median (NaN for none).
pub fn robust_sd(values: &[f64]) -> f64 {
    let med = median(values);
    let dev: Vec<f64> = values.iter().map(|x| (x - med).abs()).collect();
    1.4826 * median(&dev)
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
    }

    #[test]
    fn single_value() {
        let s = summarize(&[42.0]).unwrap();
        assert_eq!(s.n, 1);
        assert_eq!(s.stddev, 0.0);
        for v in [s.min, s.p10, s.median, s.p90, s.p99, s.max, s.mean] {
            assert_eq!(v, 42.0);
        }
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
    fn summary_serde_round_trip() {
        let s = summarize(&[1.5, 2.25, 1000.125]).unwrap();
        let json = serde_json::to_string(&s).unwrap();
        let back: Summary = serde_json::from_str(&json).unwrap();
        assert_eq!(s, back);
    }
}

//! Signs of trouble, reported beside a figure or a verdict. None of them filters data or
//! changes a verdict: they say what the host did while the units were taken, so that a
//! reader can judge how far to trust a figure.
//!
//! - **host speed**: the guest's empty loop (guest code, no exit) ran at another speed:
//!   rounds whose loop ran over [`HOST_SPEED_FACTOR`] × the test's median loop, or two
//!   sides whose loops lie over [`HOST_SPEED_PCT`] apart. Exit figures move with it.
//! - **outlier rounds**: rounds whose figure lies over [`OUTLIER_K`] robust standard
//!   deviations from the test's median round.
//! - **groups**: rounds that fall into two groups far apart ([`GROUP_GAP_FACTOR`]), such
//!   as an interrupt test whose target vCPU waited for a host CPU in some rounds.
//! - **odd runs**: runs whose figure lies over [`ODD_RUN_PCT`] from their side's median.

use super::describe::{median, robust_sd};
use super::model::{
    GROUP_GAP_FACTOR, GROUP_MIN_SHARE, HOST_SPEED_FACTOR, HOST_SPEED_PCT, ODD_RUN_PCT, OUTLIER_K,
    SPREAD_FLOOR,
};

/// Which of `values` lie over [`OUTLIER_K`] robust standard deviations (at least
/// [`SPREAD_FLOOR`] of the median) from their median.
pub fn outliers(values: &[f64]) -> Vec<bool> {
    let med = median(values);
    let sd = robust_sd(values).max(SPREAD_FLOOR * med.abs());
    values
        .iter()
        .map(|v| v.is_finite() && (v - med).abs() > OUTLIER_K * sd)
        .collect()
}

/// Which rounds ran at another host speed: their empty loop (`loops`, each round's
/// median, `None` where not recorded) over [`HOST_SPEED_FACTOR`] × the median loop.
pub fn host_speed_rounds(loops: &[Option<f64>]) -> Vec<bool> {
    let known: Vec<f64> = loops.iter().flatten().copied().collect();
    let med = median(&known);
    loops
        .iter()
        .map(|l| l.is_some_and(|l| med > 0.0 && l > HOST_SPEED_FACTOR * med))
        .collect()
}

/// How far apart (percent, B against A) two sides' median empty loops lie, where beyond
/// [`HOST_SPEED_PCT`].
pub fn host_speed_apart(loops_a: &[f64], loops_b: &[f64]) -> Option<f64> {
    let (a, b) = (median(loops_a), median(loops_b));
    let pct = (b / a - 1.0) * 100.0;
    (a > 0.0 && pct.is_finite() && pct.abs() > HOST_SPEED_PCT).then_some(pct)
}

/// Two groups of rounds far apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Groups {
    /// Rounds in the lower group.
    pub low: usize,
    /// Rounds in the upper group.
    pub high: usize,
    /// The upper group's median over the lower's.
    pub ratio: f64,
}

/// Whether `values` (positive) fall into two groups: the largest ratio between
/// neighbours in sorted order exceeds [`GROUP_GAP_FACTOR`] and each side holds at least
/// [`GROUP_MIN_SHARE`] of them (and one value).
pub fn groups(values: &[f64]) -> Option<Groups> {
    let mut v: Vec<f64> = values
        .iter()
        .copied()
        .filter(|x| *x > 0.0 && x.is_finite())
        .collect();
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len();
    let least = ((n as f64 * GROUP_MIN_SHARE).ceil() as usize).max(1);
    let (at, gap) = (least..=n.saturating_sub(least))
        .filter(|&i| i > 0 && i < n)
        .map(|i| (i, v[i] / v[i - 1]))
        .max_by(|x, y| x.1.total_cmp(&y.1))?;
    (gap > GROUP_GAP_FACTOR).then(|| Groups {
        low: at,
        high: n - at,
        ratio: median(&v[at..]) / median(&v[..at]),
    })
}

/// Which runs' figures lie over [`ODD_RUN_PCT`] from the median of `figures`.
pub fn odd_runs(figures: &[f64]) -> Vec<bool> {
    let med = median(figures);
    figures
        .iter()
        .map(|f| med > 0.0 && ((f / med - 1.0) * 100.0).abs() > ODD_RUN_PCT)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outlier_is_far_from_the_others_in_robust_units() {
        let v = [20_000.0, 20_100.0, 19_950.0, 25_000.0, 20_050.0, 19_980.0];
        assert_eq!(outliers(&v), [false, false, false, true, false, false]);
        // Within the spread floor (1 % of the median): none.
        let tight = [1000.0, 1000.1, 999.9, 1000.0, 1040.0, 1000.05];
        assert!(outliers(&tight).iter().all(|o| !o));
    }

    #[test]
    fn host_speed_shows_in_rounds_and_between_sides() {
        let loops = [Some(100.0), Some(101.0), None, Some(99.0), Some(125.0)];
        assert_eq!(
            host_speed_rounds(&loops),
            [false, false, false, false, true]
        );
        assert_eq!(host_speed_apart(&[100.0, 100.0], &[102.0, 102.0]), None);
        let apart = host_speed_apart(&[100.0, 100.0], &[110.0, 110.0]).unwrap();
        assert!((apart - 10.0).abs() < 1e-9);
    }

    #[test]
    fn rounds_in_two_groups_far_apart_are_found_and_one_stray_is_not() {
        let mut v = vec![1.4e6; 12];
        v.extend([20.6e6; 8]);
        let g = groups(&v).unwrap();
        assert_eq!((g.low, g.high), (12, 8));
        assert!((g.ratio - 20.6 / 1.4).abs() < 1e-9);
        // One stray round of twenty is an outlier, not a group.
        let mut one = vec![1.4e6; 19];
        one.push(20.6e6);
        assert_eq!(groups(&one), None);
        assert_eq!(groups(&[1.0, 1.1, 1.05, 0.98]), None);
        assert_eq!(groups(&[]), None);
    }

    #[test]
    fn odd_runs_lie_far_from_their_side() {
        assert_eq!(odd_runs(&[100.0, 101.0, 108.0]), [false, false, true]);
    }
}

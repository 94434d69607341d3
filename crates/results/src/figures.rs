//! The figures a test's result carries for comparisons and plots: one per round (fresh
//! VM), which is the unit comparisons resample ([`crate::stats`]), and the percentiles of the paired
//! net cycles, which is what the report's CDFs draw.

use exitlab_abi::Sample;

use crate::results::RoundFigure;
use crate::samples::{paired_net, per_iteration};
use crate::stats::describe::percentile;

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_unstable_by(f64::total_cmp);
    v
}

/// The figure of one completed round of a test: its raw median cycles per iteration and,
/// when the test has a net figure (`net`; not the empty loop itself), the median of its
/// paired net cycles. `None` for a round without plausible samples.
pub fn round_figure(samples: &[Sample], batch: u64, net: bool) -> Option<RoundFigure> {
    let raw = sorted(per_iteration(samples, batch).ok()?);
    if raw.is_empty() {
        return None;
    }
    let net = net
        .then(|| sorted(paired_net(samples, batch)))
        .filter(|n| !n.is_empty());
    let loops = sorted(
        samples
            .iter()
            .map(|s| s.g_loop as f64 / batch.max(1) as f64)
            .collect(),
    );
    Some(RoundFigure {
        samples: samples.len() as u64,
        median: percentile(&raw, 50.0),
        net_median: net.map(|n| percentile(&n, 50.0)),
        loop_median: Some(percentile(&loops, 50.0)),
        ..Default::default()
    })
}

/// The 0th..100th percentiles of a completed test's paired net cycles per iteration
/// (raw cycles when it has no net figure: `net` false, the empty loop itself).
pub fn net_percentiles(samples: &[Sample], batch: u64, net: bool) -> Option<Vec<f64>> {
    let values = if net {
        paired_net(samples, batch)
    } else {
        per_iteration(samples, batch).ok()?
    };
    let v = sorted(values);
    (!v.is_empty()).then(|| (0..=100).map(|p| percentile(&v, f64::from(p))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample of `total` cycles with a paired empty loop of `g_loop`.
    fn sample(total: u64, g_loop: u64) -> Sample {
        crate::testing::sample(1_000, total, g_loop, 0, 0, 0)
    }

    #[test]
    fn a_round_figure_has_the_raw_and_the_net_median() {
        // Totals 300, 100, 200 with loops 50, 10, 20, batch 2: per iteration 150, 50,
        // 100 (median 100), net (300-50)/2, (100-10)/2, (200-20)/2 = 125, 45, 90 (median 90).
        let s = [sample(300, 50), sample(100, 10), sample(200, 20)];
        let f = round_figure(&s, 2, true).unwrap();
        assert_eq!((f.samples, f.median, f.net_median), (3, 100.0, Some(90.0)));
        // Loops 50, 10, 20 over a batch of 2: 25, 5, 10 per iteration, median 10.
        assert_eq!(f.loop_median, Some(10.0));
        assert_eq!(round_figure(&s, 2, false).unwrap().net_median, None);
    }

    #[test]
    fn a_round_without_plausible_samples_has_no_figure() {
        assert!(round_figure(&[], 1, true).is_none());
        let backwards = Sample {
            g_end: 0,
            ..sample(10, 0)
        };
        assert!(round_figure(&[backwards], 1, true).is_none());
    }

    #[test]
    fn percentiles_run_from_the_minimum_to_the_maximum() {
        // Net cycles 1..=101: percentile p is p + 1.
        let s: Vec<Sample> = (1..=101).map(|n| sample(n + 7, 7)).collect();
        let p = net_percentiles(&s, 1, true).unwrap();
        assert_eq!(p.len(), 101);
        assert_eq!((p[0], p[50], p[100]), (1.0, 51.0, 101.0));
        // Without a net figure, the raw cycles.
        let raw = net_percentiles(&s, 1, false).unwrap();
        assert_eq!((raw[0], raw[100]), (8.0, 108.0));
        assert!(net_percentiles(&[], 1, true).is_none());
    }
}

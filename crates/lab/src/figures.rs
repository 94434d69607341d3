//! The figures a test's result carries for comparisons and plots: one per round (fresh
//! VM), which is the unit [`crate::verdict`] resamples, and the percentiles of the paired
//! net cycles, which is what the report's CDFs draw.

use crate::analysis::{paired_net, per_iteration};
use crate::results::RoundFigure;
use crate::runner::{Measurement, Outcome};
use crate::stats::percentile;

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_unstable_by(f64::total_cmp);
    v
}

/// One figure per completed round of a test, in the order the rounds ran.
/// `loop_overhead` has no net figure (it is the empty loop itself).
pub fn round_figures(rounds: &[Measurement]) -> Vec<RoundFigure> {
    rounds
        .iter()
        .take_while(|m| m.outcome == Outcome::Completed)
        .filter_map(|m| {
            let batch = m.params.batch;
            let raw = sorted(per_iteration(&m.samples, batch).ok()?);
            if raw.is_empty() {
                return None;
            }
            let net = (m.def.name != "loop_overhead")
                .then(|| sorted(paired_net(&m.samples, batch)))
                .filter(|n| !n.is_empty())
                .map(|n| percentile(&n, 50.0));
            Some(RoundFigure {
                samples: m.samples.len() as u64,
                median: percentile(&raw, 50.0),
                net_median: net,
            })
        })
        .collect()
}

/// The 0th..100th percentiles of a completed measurement's paired net cycles per
/// iteration (raw cycles for `loop_overhead`, which has no net figure).
pub fn net_percentiles(m: &Measurement) -> Option<Vec<f64>> {
    if m.outcome != Outcome::Completed {
        return None;
    }
    let values = if m.def.name == "loop_overhead" {
        per_iteration(&m.samples, m.params.batch).ok()?
    } else {
        paired_net(&m.samples, m.params.batch)
    };
    let v = sorted(values);
    (!v.is_empty()).then(|| (0..=100).map(|p| percentile(&v, f64::from(p))).collect())
}

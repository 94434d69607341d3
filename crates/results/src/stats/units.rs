//! A test's figure and the units it rests on: one figure per round (fresh VM), the median
//! of its samples' net cycles per iteration (each sample minus the empty loop the guest
//! timed just before it; the raw cycles for the empty loop itself). The test's figure
//! in one run is the median of its rounds' figures: bench's table, `report` in every
//! format, `compare`, `--ab` and the plots all show this one number.

use super::describe::median;
use super::interval::{self, Estimate};
use crate::results::{Results, RoundFigure, TestResult};

/// Which figure of its rounds a test is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    /// The paired net cycles per iteration (sample minus the empty loop before it).
    Net,
    /// The raw cycles per iteration (the empty loop itself, or a test without a net
    /// figure).
    Raw,
}

impl Figure {
    /// `net` or `raw`.
    pub fn as_str(self) -> &'static str {
        match self {
            Figure::Net => "net",
            Figure::Raw => "raw",
        }
    }
}

/// Which figure a test that completed is judged by; `None` when it did not complete or
/// has no cycles.
pub fn figure_of(t: &TestResult) -> Option<Figure> {
    if !t.status.is_ok() || t.cycles.is_none() {
        return None;
    }
    let has_net = t.rounds.iter().any(|r| r.net_median.is_some());
    Some(
        if t.baseline || (!has_net && t.net_median_cycles.is_none()) {
            Figure::Raw
        } else {
            Figure::Net
        },
    )
}

/// A round's `figure`, NaN when it has none.
pub fn round_value(r: &RoundFigure, figure: Figure) -> f64 {
    match figure {
        Figure::Net => r.net_median.unwrap_or(f64::NAN),
        Figure::Raw => r.median,
    }
}

/// The finite figures of a test's rounds, in the order they ran, and which figure they
/// are; `None` when the test did not complete.
pub fn round_figures(t: &TestResult) -> Option<(Vec<f64>, Figure)> {
    let figure = figure_of(t)?;
    let values = t
        .rounds
        .iter()
        .map(|r| round_value(r, figure))
        .filter(|v| v.is_finite())
        .collect();
    Some((values, figure))
}

/// The figure of one test in one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Central {
    /// Net or raw.
    pub figure: Figure,
    /// Each round's figure, in the order they ran (empty in a file without per-round
    /// figures, results schema 1).
    pub rounds: Vec<f64>,
    /// The figure: the median of the rounds (the stored figure of a schema-1 file).
    pub value: f64,
    /// Its interval over the rounds, where there are enough.
    pub estimate: Option<Estimate>,
}

impl Central {
    /// The 95 % interval of the figure, cycles.
    pub fn interval(&self) -> Option<[f64; 2]> {
        self.estimate.as_ref().map(Estimate::value_bounds)
    }
}

/// The figure of `t`; `None` when the test did not complete.
pub fn central(t: &TestResult) -> Option<Central> {
    let (rounds, figure) = round_figures(t)?;
    if rounds.is_empty() {
        let value = match figure {
            Figure::Net => t.net_median_cycles?,
            Figure::Raw => t.cycles.as_ref()?.median,
        };
        return Some(Central {
            figure,
            rounds,
            value,
            estimate: None,
        });
    }
    Some(Central {
        figure,
        value: median(&rounds),
        estimate: interval::one_run(&rounds).ok(),
        rounds,
    })
}

/// The figure in cycles and whether it is net.
pub fn figure_cycles(t: &TestResult) -> Option<(f64, bool)> {
    central(t).map(|c| (c.value, c.figure == Figure::Net))
}

/// The net figure of `t` (`None` for a test judged on its raw figure).
pub fn net_figure(t: &TestResult) -> Option<f64> {
    central(t)
        .filter(|c| c.figure == Figure::Net)
        .map(|c| c.value)
}

/// Writes `t`'s figure into its stored fields, so that a reader of the JSON finds the
/// figure every renderer shows: `net_median_cycles` and `median_ns` (converted at
/// `tsc_khz`; left alone when it is 0).
pub fn store(t: &mut TestResult, tsc_khz: u64) {
    let Some(c) = central(t).filter(|c| !c.rounds.is_empty()) else {
        return;
    };
    if c.figure == Figure::Net {
        t.net_median_cycles = Some(c.value);
    }
    if tsc_khz > 0 {
        t.median_ns = Some(c.value * 1e6 / tsc_khz as f64);
        t.median_ns_is_net = c.figure == Figure::Net;
    }
}

/// The figure of `t` in nanoseconds at the run's TSC frequency (`tsc_khz`; `None` when
/// it is 0), and whether it is net: the figure the cycles column shows, converted, so
/// that the two columns never tell two figures (whatever older files stored).
pub fn figure_ns(t: &TestResult, tsc_khz: u64) -> Option<(f64, bool)> {
    let c = central(t)?;
    (tsc_khz > 0 && !c.rounds.is_empty())
        .then(|| (c.value * 1e6 / tsc_khz as f64, c.figure == Figure::Net))
}

/// The pairs of an A/B run's test: the figures of rounds `i` of both sides where both
/// have one (they ran back to back), in order, and which figure. `None` when a side did
/// not complete.
pub fn pairs(a: &TestResult, b: &TestResult) -> Option<(Vec<f64>, Vec<f64>, Figure)> {
    let figure = figure_of(a)?;
    figure_of(b)?;
    let (va, vb) = a
        .rounds
        .iter()
        .zip(&b.rounds)
        .map(|(x, y)| (round_value(x, figure), round_value(y, figure)))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .unzip();
    Some((va, vb, figure))
}

/// The two sides of an A/B run as results of their own (side A, side B), each with its
/// knob value recorded in `config.knobs`.
pub fn ab_sides(run: &Results) -> Option<(Results, Results)> {
    let ab = run.ab.as_ref()?;
    let side = |value: &str, tests: &[TestResult]| {
        let mut r = run.clone();
        r.ab = None;
        r.tests = tests.to_vec();
        r.config.knobs.insert(ab.knob.clone(), value.to_string());
        r
    };
    Some((side(&ab.a, &run.tests), side(&ab.b, &ab.b_tests)))
}

/// The empty loops of a test's rounds (each round's median), aligned with its rounds.
pub fn round_loops(t: &TestResult) -> Vec<Option<f64>> {
    t.rounds.iter().map(|r| r.loop_median).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::{ok_test, sample_results};

    #[test]
    fn a_test_s_figure_is_the_median_of_its_rounds_with_nothing_set_aside() {
        let mut t = ok_test("cpuid", 3_000.0);
        for (r, v) in t
            .rounds
            .iter_mut()
            .zip([3_000.0, 3_010.0, 2_990.0, 4_500.0, 3_005.0, 2_995.0])
        {
            r.net_median = Some(v);
        }
        let c = central(&t).unwrap();
        // Six rounds, the 4,500 one included: median of 2,990..3,010 and 4,500.
        assert_eq!(c.value, 3_002.5);
        assert_eq!(c.rounds.len(), 6);
        let [lo, hi] = c.interval().unwrap();
        assert!(lo < c.value && c.value < hi);
    }

    #[test]
    fn the_baseline_row_not_its_name_makes_a_raw_figure() {
        let mut empty = ok_test("empty_loop_by_another_name", 100.0);
        empty.baseline = true;
        let (values, figure) = round_figures(&empty).unwrap();
        assert_eq!(figure, Figure::Raw);
        assert_eq!(
            values,
            empty.rounds.iter().map(|r| r.median).collect::<Vec<_>>()
        );
        let named = ok_test("loop_overhead", 100.0);
        assert_eq!(round_figures(&named).unwrap().1, Figure::Net);
    }

    #[test]
    fn store_writes_the_figure_every_renderer_shows() {
        let r = sample_results();
        let mut t = r.tests[1].clone();
        let c = central(&t).unwrap();
        store(&mut t, 3_000_000);
        assert_eq!(t.net_median_cycles, Some(c.value));
        assert_eq!(t.median_ns, Some(c.value / 3.0));
        assert_eq!(figure_ns(&t, 3_000_000).map(|f| f.0), Some(c.value / 3.0));
        // A raw figure too: the nanoseconds are the cycles column's figure, not the
        // pooled samples' median.
        let mut raw = r.tests[0].clone();
        // Rounds slower than the pooled samples say, as when rounds hold different
        // sample counts: the figure (the rounds' median) and the pooled median differ.
        for round in &mut raw.rounds {
            round.median *= 1.5;
        }
        let c = central(&raw).unwrap();
        assert_eq!(c.figure, Figure::Raw);
        assert_ne!(
            raw.cycles.as_ref().unwrap().median,
            c.value,
            "the pooled median must differ from the rounds' for this check to bite"
        );
        store(&mut raw, 3_000_000);
        assert_eq!(figure_ns(&raw, 3_000_000), Some((c.value / 3.0, false)));
        assert_eq!(raw.median_ns, Some(c.value / 3.0));
        assert_eq!(figure_ns(&raw, 0), None);
    }

    #[test]
    fn pairs_are_matched_round_by_round_where_both_have_a_figure() {
        let a = ok_test("inl_from_user", 20_000.0);
        let mut b = ok_test("inl_from_user", 21_000.0);
        b.rounds[2].net_median = None;
        let (va, vb, figure) = pairs(&a, &b).unwrap();
        assert_eq!(figure, Figure::Net);
        assert_eq!(va.len(), a.rounds.len() - 1);
        assert_eq!(vb.len(), va.len());
    }
}

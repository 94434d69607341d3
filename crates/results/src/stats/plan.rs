//! A planned design: a pilot of [`PILOT_UNITS`] units, then a fixed number of units per
//! test chosen from the pilot's spread (the upper level of Kalibera & Jones: units for a
//! target half-width), within a wall-time budget. The plan is made once; the run then
//! takes exactly that many units and no interval is stopped early or widened afterwards.
//! Every test gets at least [`MIN_PLANNED_UNITS`] units, the pilot's included, so that
//! its interval does not rest on the pilot alone.

use super::interval::{t_quantile, Estimate};
use super::model::{CONFIDENCE, MIN_PLANNED_UNITS, MIN_RUNS, PILOT_UNITS};

/// What the pilot says of one test.
#[derive(Debug, Clone, PartialEq)]
pub struct Pilot {
    /// The test.
    pub name: String,
    /// The pilot's estimate (`None`: too few units or no positive figure).
    pub estimate: Option<Estimate>,
    /// Wall seconds one more unit of this test costs.
    pub unit_seconds: f64,
}

/// The units one test gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The test.
    pub name: String,
    /// Its units in all, the pilot's included.
    pub units: usize,
    /// The units its target needs (its pilot's spread at the target half-width).
    pub needed: usize,
}

impl Planned {
    /// Whether the plan gives the test what its target needs.
    pub fn enough(&self) -> bool {
        self.units >= self.needed
    }
}

/// Units whose 95 % interval has a half-width of `target_pct` percent when one unit has
/// the spread the estimate `e` shows (its standard error times the square root of its
/// units), with Student's quantile at the planned count.
pub fn units_for(e: &Estimate, target_pct: f64) -> usize {
    let sd = e.se * (e.units[0].min(e.units[1]) as f64).sqrt();
    let h = (target_pct / 100.0).ln_1p();
    if !(sd.is_finite() && h > 0.0) {
        return MIN_PLANNED_UNITS;
    }
    let mut n = 2.0_f64;
    for _ in 0..4 {
        let t = t_quantile(0.5 + CONFIDENCE / 2.0, (n - 1.0).max(1.0));
        n = ((t * sd / h).powi(2)).ceil().max(2.0);
    }
    n.min(1e6) as usize
}

/// Runs a side whose 95 % interval of the change between two sets of runs has a
/// half-width of `target_pct` percent, when one run has the spread the estimate `e` of a
/// comparison of runs shows (its standard error over `sqrt(1/m_a + 1/m_b)`), with
/// Student's quantile at `2m − 2` degrees of freedom; at least [`MIN_RUNS`].
pub fn runs_for(e: &Estimate, target_pct: f64) -> usize {
    let [ma, mb] = e.units;
    let sd = e.se / (1.0 / ma.max(1) as f64 + 1.0 / mb.max(1) as f64).sqrt();
    let h = (target_pct / 100.0).ln_1p();
    if !(sd.is_finite() && h > 0.0) {
        return MIN_RUNS;
    }
    let mut m = MIN_RUNS as f64;
    for _ in 0..6 {
        let t = t_quantile(0.5 + CONFIDENCE / 2.0, 2.0 * m - 2.0);
        m = (2.0 * (t * sd / h).powi(2)).ceil().max(MIN_RUNS as f64);
    }
    m.min(1e6) as usize
}

/// The pilot's costs as the wall clock saw them: each test's unit cost and the round's
/// own cost (`round_seconds`) scaled by the pilot's wall time over what its `pilot_units`
/// units' own times add up to, never below 1, so that what the units do not time (VM
/// creation and teardown, the harness between rounds) is in the plan's budget too.
pub fn on_the_wall(
    pilots: &mut [Pilot],
    round_seconds: &mut f64,
    pilot_units: usize,
    wall_seconds: f64,
) {
    let timed = pilot_units as f64
        * (*round_seconds + pilots.iter().map(|p| p.unit_seconds.max(0.0)).sum::<f64>());
    let scale = if timed > 0.0 && wall_seconds.is_finite() {
        (wall_seconds / timed).max(1.0)
    } else {
        1.0
    };
    for p in pilots.iter_mut() {
        p.unit_seconds *= scale;
    }
    *round_seconds *= scale;
}

/// The units each of `pilots` gets: what its target needs ([`units_for`]), at least
/// [`MIN_PLANNED_UNITS`], and, where that does not fit in `budget_seconds`, as many as
/// fit when every test is held to one common ceiling (those that need fewer keep their
/// count). `round_seconds` is what each round costs besides its tests' units (the empty
/// loop every round runs). A test without a pilot estimate gets [`MIN_PLANNED_UNITS`].
pub fn plan(
    pilots: &[Pilot],
    pilot_units: usize,
    target_pct: f64,
    round_seconds: f64,
    budget_seconds: f64,
) -> Vec<Planned> {
    let needed: Vec<usize> = pilots
        .iter()
        .map(|p| {
            p.estimate
                .as_ref()
                .map_or(MIN_PLANNED_UNITS, |e| units_for(e, target_pct))
        })
        .collect();
    let wanted: Vec<usize> = needed
        .iter()
        .map(|n| (*n).max(MIN_PLANNED_UNITS).max(pilot_units))
        .collect();
    let cost = |ceiling: usize| -> f64 {
        let mut rounds = 0;
        let mut s = 0.0;
        for (p, w) in pilots.iter().zip(&wanted) {
            let extra = (*w).min(ceiling).saturating_sub(pilot_units);
            rounds = rounds.max(extra);
            s += extra as f64 * p.unit_seconds.max(0.0);
        }
        s + rounds as f64 * round_seconds.max(0.0)
    };
    let top = wanted.iter().copied().max().unwrap_or(pilot_units);
    // The highest ceiling that fits: the cost grows with it.
    let (mut lo, mut hi) = (pilot_units, top);
    if cost(top) <= budget_seconds {
        lo = top;
    } else {
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if cost(mid) <= budget_seconds {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
    }
    pilots
        .iter()
        .zip(wanted.iter().zip(&needed))
        .map(|(p, (w, n))| Planned {
            name: p.name.clone(),
            units: (*w).min(lo).max(pilot_units),
            needed: *n,
        })
        .collect()
}

/// The pilot's size for `rounds` asked for: [`PILOT_UNITS`], or fewer when the whole run
/// is shorter.
pub fn pilot_size(planned_rounds: usize) -> usize {
    PILOT_UNITS.min(planned_rounds.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::interval::Unit;

    fn pilot(name: &str, sd_pct: f64, n: usize, secs: f64) -> Pilot {
        Pilot {
            name: name.into(),
            estimate: Some(Estimate {
                log: 0.0,
                se: sd_pct / 100.0 / (n as f64).sqrt(),
                df: (n - 1) as f64,
                units: [n, n],
                unit: Unit::Pair,
            }),
            unit_seconds: secs,
        }
    }

    #[test]
    fn units_for_a_target_follow_the_square_of_the_spread() {
        // A unit spread of 3 %: (2.0 × 3 / 1.2)² ≈ 26 units for ±1.2 %.
        let e = pilot("a", 3.0, 10, 0.1).estimate.unwrap();
        let n = units_for(&e, 1.2);
        assert!((25..=28).contains(&n), "{n}");
        // Twice the spread, four times the units.
        let e2 = pilot("a", 6.0, 10, 0.1).estimate.unwrap();
        let n2 = units_for(&e2, 1.2);
        assert!((n2 as f64 / n as f64 - 4.0).abs() < 0.3, "{n} {n2}");
    }

    #[test]
    fn runs_for_a_target_follow_the_spread_of_runs() {
        // Three runs a side whose run figures spread by 2 %: se = 2 % × sqrt(2/3).
        let e = Estimate {
            log: 0.0,
            se: 0.02 * (2.0_f64 / 3.0).sqrt(),
            df: 4.0,
            units: [3, 3],
            unit: Unit::Run,
        };
        // m = 2 (t × 2 / 1.2)² with t ≈ 2.0 at 2m − 2 ≈ 24 df: about 24 runs a side.
        let m = runs_for(&e, 1.2);
        assert!((22..=26).contains(&m), "{m}");
        // A target already met asks for no more than the fewest runs a verdict needs.
        assert_eq!(runs_for(&e, 50.0), MIN_RUNS);
        // Unequal sides: the spread of one run is the same, so is the answer.
        let e2 = Estimate {
            se: 0.02 * (1.0_f64 / 3.0 + 1.0 / 6.0).sqrt(),
            units: [3, 6],
            ..e
        };
        assert_eq!(runs_for(&e2, 1.2), m);
    }

    #[test]
    fn the_wall_clock_scales_what_the_units_timed() {
        // Ten pilot units of two tests timed 0.1 s and 0.3 s each, rounds 0.1 s: 5 s
        // timed; the pilot took 10 s on the wall, so every cost doubles.
        let mut pilots = [pilot("a", 1.0, 10, 0.1), pilot("b", 1.0, 10, 0.3)];
        let mut round = 0.1;
        on_the_wall(&mut pilots, &mut round, 10, 10.0);
        assert!((pilots[0].unit_seconds - 0.2).abs() < 1e-9);
        assert!((pilots[1].unit_seconds - 0.6).abs() < 1e-9);
        assert!((round - 0.2).abs() < 1e-9);
        // A wall quicker than the units' own times (a clock step) changes nothing.
        on_the_wall(&mut pilots, &mut round, 10, 1.0);
        assert!((pilots[0].unit_seconds - 0.2).abs() < 1e-9);
    }

    #[test]
    fn a_plan_gives_every_test_its_need_at_least_the_minimum_and_fits_the_budget() {
        let pilots = [
            pilot("quiet", 1.0, 10, 0.02),
            pilot("noisy", 6.0, 10, 0.02),
            Pilot {
                name: "none".into(),
                estimate: None,
                unit_seconds: 0.02,
            },
        ];
        let free = plan(&pilots, 10, 1.2, 0.01, 1e9);
        assert_eq!(free[0].units, MIN_PLANNED_UNITS);
        assert!(free[1].units > 90 && free[1].enough());
        assert_eq!(free[2].units, MIN_PLANNED_UNITS);
        // A budget of 1 s: the noisy test is held to a ceiling, the others keep theirs.
        let tight = plan(&pilots, 10, 1.2, 0.01, 1.0);
        assert_eq!(tight[0].units, MIN_PLANNED_UNITS);
        assert!(!tight[1].enough() && tight[1].units >= MIN_PLANNED_UNITS);
        let extra = |p: &Planned| (p.units - 10) as f64 * 0.02;
        let rounds = tight.iter().map(|p| p.units - 10).max().unwrap() as f64;
        let spent: f64 = tight.iter().map(extra).sum::<f64>() + rounds * 0.01;
        assert!(spent <= 1.0, "{spent}");
        // No budget at all: the pilot is what there is.
        assert!(plan(&pilots, 10, 1.2, 0.01, 0.0)
            .iter()
            .all(|p| p.units == 10));
    }
}

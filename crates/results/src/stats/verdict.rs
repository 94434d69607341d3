//! From an interval to a verdict with the one threshold δ, and from the verdicts of
//! several tests to a gate.
//!
//! - **slower** (**faster**): the change is more than +δ (less than −δ) and its 95 %
//!   interval lies wholly above (below) no change;
//! - **equivalent**: the whole interval lies within ±δ;
//! - **inconclusive**: otherwise: the data neither show a change beyond δ nor rule one out;
//! - **no verdict**: the data cannot support one (too few units, a missing side, figures
//!   taken at another batch, a figure that is not positive); a gate fails closed on it.
//!
//! The gate (exit 4) judges many tests at once: it fires when some test is slower and its
//! one-sided p-value of "no slowdown" passes Holm's step-down at [`GATE_ALPHA`] over the
//! tests it judges, so that an unchanged build fires it at most that often, however many
//! tests there are.

use serde::{Deserialize, Serialize};

use super::interval::{Estimate, NoInterval, Unit};
use super::model::{GATE_ALPHA, POWER, THRESHOLD_PCT};

/// What a comparison concludes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", content = "reason", rename_all = "snake_case")]
pub enum Verdict {
    /// Beyond −δ, interval below no change.
    Faster,
    /// Beyond +δ, interval above no change.
    Slower,
    /// The interval lies within ±δ.
    Equivalent,
    /// Neither.
    Inconclusive,
    /// The data cannot support a verdict; the reason says why.
    NoVerdict(String),
}

impl Verdict {
    /// The words used in tables.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::Equivalent => "equivalent",
            Verdict::Inconclusive => "inconclusive",
            Verdict::NoVerdict(_) => "no verdict",
        }
    }

    /// The reason of a missing verdict.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Verdict::NoVerdict(why) => Some(why),
            _ => None,
        }
    }
}

/// The change of one test's figure between two sides, and its verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Each side's figure (cycles per iteration), as its own table shows it.
    pub figures: [f64; 2],
    /// The units the change rests on, per side.
    pub units: [usize; 2],
    /// Which unit.
    pub unit: Unit,
    /// The change in percent (positive: slower); `None` without an interval.
    pub pct: Option<f64>,
    /// Its 95 % interval in percent.
    pub ci95_pct: Option<[f64; 2]>,
    /// The smallest true change this design calls slower [`POWER`] of the time, percent.
    pub min_detectable_pct: Option<f64>,
    /// One-sided p-value of "no slowdown" (the gate's).
    pub p_slower: Option<f64>,
    /// δ, percent.
    pub threshold_pct: f64,
    /// The verdict.
    pub verdict: Verdict,
}

impl Change {
    /// A change without an interval: no verdict, for `why`.
    pub fn no_verdict(figures: [f64; 2], unit: Unit, why: impl Into<String>) -> Change {
        Change {
            figures,
            units: [0, 0],
            unit,
            pct: None,
            ci95_pct: None,
            min_detectable_pct: None,
            p_slower: None,
            threshold_pct: THRESHOLD_PCT,
            verdict: Verdict::NoVerdict(why.into()),
        }
    }

    /// Whether the verdict is slower.
    pub fn is_slower(&self) -> bool {
        self.verdict == Verdict::Slower
    }
}

/// `ln(1 + pct / 100)`.
fn log_of_pct(pct: f64) -> f64 {
    (pct / 100.0).ln_1p()
}

/// `(e^x − 1) × 100`.
fn pct_of_log(x: f64) -> f64 {
    x.exp_m1() * 100.0
}

/// The verdict of an estimate of a change at threshold `threshold_pct` (δ).
pub fn verdict_of(e: &Estimate, threshold_pct: f64) -> Verdict {
    let d = log_of_pct(threshold_pct.max(0.0));
    let [lo, hi] = e.bounds();
    if e.log > d && lo > 0.0 {
        Verdict::Slower
    } else if e.log < -d && hi < 0.0 {
        Verdict::Faster
    } else if -d < lo && hi < d {
        Verdict::Equivalent
    } else {
        Verdict::Inconclusive
    }
}

/// The smallest true change (percent) that an estimate with `e`'s standard error and
/// degrees of freedom calls slower [`POWER`] of the time at threshold `threshold_pct`: the
/// estimate must clear both δ and the interval's half-width.
pub fn min_detectable_pct(e: &Estimate, threshold_pct: f64) -> f64 {
    let z = super::interval::t_quantile(POWER, e.df);
    pct_of_log(log_of_pct(threshold_pct.max(0.0)).max(e.half_log()) + z * e.se)
}

/// The change between two sides whose figures are `figures`, from the estimate of their
/// ratio (or why there is none), at threshold `threshold_pct`.
pub fn judge(
    figures: [f64; 2],
    estimate: Result<Estimate, NoInterval>,
    unit: Unit,
    threshold_pct: f64,
) -> Change {
    let e = match estimate {
        Ok(e) => e,
        Err(why) => {
            let mut c = Change::no_verdict(figures, unit, why.to_string());
            c.threshold_pct = threshold_pct;
            if let NoInterval::TooFew { have, .. } = why {
                c.units = have;
            }
            return c;
        }
    };
    let [lo, hi] = e.bounds();
    Change {
        figures,
        units: e.units,
        unit: e.unit,
        pct: Some(pct_of_log(e.log)),
        ci95_pct: Some([pct_of_log(lo), pct_of_log(hi)]),
        min_detectable_pct: Some(min_detectable_pct(&e, threshold_pct)),
        p_slower: Some(e.p_above(0.0)),
        threshold_pct,
        verdict: verdict_of(&e, threshold_pct),
    }
}

/// What a gate over several tests decided.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Gate {
    /// The tests it judged (with a verdict), in order.
    pub judged: Vec<String>,
    /// Slower, confirmed by Holm's step-down: the gate fires on these.
    pub slower: Vec<String>,
    /// Slower at 95 % on its own, not confirmed over the tests judged.
    pub unconfirmed: Vec<String>,
    /// Tests the gate was to judge that have no verdict (it fails closed on them).
    pub no_verdict: Vec<String>,
}

impl Gate {
    /// Whether the gate fires (exit 4).
    pub fn fires(&self) -> bool {
        !self.slower.is_empty()
    }
}

/// The gate over `tests` (name, change): Holm's step-down on their one-sided p-values of
/// "no slowdown" at [`GATE_ALPHA`]; a test fires it when Holm rejects it and its verdict
/// is slower.
pub fn gate<'a>(tests: impl IntoIterator<Item = (&'a str, &'a Change)>) -> Gate {
    let mut g = Gate::default();
    let mut ps: Vec<(f64, &str, bool)> = Vec::new();
    for (name, c) in tests {
        match (&c.verdict, c.p_slower) {
            (Verdict::NoVerdict(_), _) | (_, None) => g.no_verdict.push(name.to_string()),
            (v, Some(p)) => {
                g.judged.push(name.to_string());
                ps.push((p, name, *v == Verdict::Slower));
            }
        }
    }
    ps.sort_by(|x, y| x.0.total_cmp(&y.0));
    let m = ps.len();
    let mut rejected: Vec<&str> = Vec::new();
    for (k, (p, name, _)) in ps.iter().enumerate() {
        if *p <= GATE_ALPHA / (m - k) as f64 {
            rejected.push(name);
        } else {
            break;
        }
    }
    for (_, name, slower) in &ps {
        if !slower {
            continue;
        }
        if rejected.contains(name) {
            g.slower.push(name.to_string());
        } else {
            g.unconfirmed.push(name.to_string());
        }
    }
    // In the tests' own order.
    let order = |v: &mut Vec<String>, judged: &[String]| {
        v.sort_by_key(|n| judged.iter().position(|j| j == n));
    };
    let judged = g.judged.clone();
    order(&mut g.slower, &judged);
    order(&mut g.unconfirmed, &judged);
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(pct: f64, half_pct: f64, df: f64) -> Estimate {
        let log = log_of_pct(pct);
        let t = super::super::interval::t_quantile(0.975, df);
        Estimate {
            log,
            se: half_pct / 100.0 / t,
            df,
            units: [df as usize + 1; 2],
            unit: Unit::Pair,
        }
    }

    #[test]
    fn one_threshold_gives_four_verdicts() {
        let v = |pct, half| verdict_of(&est(pct, half, 30.0), 2.0);
        assert_eq!(v(3.0, 0.8), Verdict::Slower);
        assert_eq!(v(-3.0, 0.8), Verdict::Faster);
        // Beyond δ but an interval that reaches no change: not slower.
        assert_eq!(v(3.0, 3.5), Verdict::Inconclusive);
        // A real change smaller than δ, its interval reaching past δ: inconclusive.
        assert_eq!(v(1.5, 0.8), Verdict::Inconclusive);
        assert_eq!(v(0.2, 1.0), Verdict::Equivalent);
        assert_eq!(v(-1.0, 0.9), Verdict::Equivalent);
        assert_eq!(v(0.0, 2.5), Verdict::Inconclusive);
    }

    #[test]
    fn the_minimum_detectable_change_clears_the_threshold_and_the_half_width() {
        // Half-width 1.2 % at 40 pairs: the standard error is 0.59 %, so a change of
        // 2 % + 0.85 × 0.59 % = 2.5 % is found 80 % of the time.
        let e = est(0.0, 1.2, 39.0);
        let m = min_detectable_pct(&e, 2.0);
        assert!((m - 2.52).abs() < 0.03, "{m}");
        // A wide interval: the half-width, not δ, is what must be cleared.
        let wide = est(0.0, 5.0, 39.0);
        assert!(min_detectable_pct(&wide, 2.0) > 7.0);
    }

    #[test]
    fn judge_records_the_interval_or_why_there_is_none() {
        let c = judge([100.0, 103.0], Ok(est(3.0, 0.8, 30.0)), Unit::Pair, 2.0);
        assert_eq!(c.verdict, Verdict::Slower);
        let [lo, hi] = c.ci95_pct.unwrap();
        assert!((c.pct.unwrap() - 3.0).abs() < 1e-9 && lo < 3.0 && hi > 3.0);
        let none = judge(
            [100.0, 103.0],
            Err(NoInterval::TooFew {
                have: [3, 3],
                need: 5,
                unit: Unit::Pair,
            }),
            Unit::Pair,
            2.0,
        );
        assert_eq!(
            none.verdict.reason(),
            Some("3 pairs; at least 5 a side are needed")
        );
        assert_eq!(none.units, [3, 3]);
    }

    #[test]
    fn the_gate_confirms_slower_tests_with_holm_over_the_tests_it_judges() {
        let c = |pct: f64, half: f64| judge([1.0, 1.0], Ok(est(pct, half, 30.0)), Unit::Pair, 2.0);
        // One test far beyond: p tiny, confirmed whatever the number of tests.
        let clear = c(6.0, 1.0);
        // Slower at 95 % on its own, p about 1 %: not after Holm over 16 tests.
        let marginal = c(2.5, 2.3);
        assert_eq!(marginal.verdict, Verdict::Slower);
        let flat = c(0.0, 1.0);
        let mut tests: Vec<(String, Change)> =
            vec![("a".into(), clear.clone()), ("b".into(), marginal.clone())];
        tests.extend((0..14).map(|i| (format!("t{i}"), flat.clone())));
        tests.push((
            "none".into(),
            Change::no_verdict([1.0, 1.0], Unit::Pair, "1 pair"),
        ));
        let g = gate(tests.iter().map(|(n, c)| (n.as_str(), c)));
        assert_eq!(g.slower, ["a"]);
        assert_eq!(g.unconfirmed, ["b"]);
        assert_eq!(g.no_verdict, ["none"]);
        assert_eq!(g.judged.len(), 16);
        assert!(g.fires());
        // Judged alone, the marginal test is the verdict's own level and fires.
        let alone = gate([("b", &marginal)]);
        assert_eq!(alone.slower, ["b"]);
        // A significant change smaller than δ does not fire the gate.
        let small = c(1.5, 0.5);
        assert!(!gate([("s", &small)]).fires());
    }
}

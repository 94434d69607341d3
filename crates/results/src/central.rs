//! The central figure of a test: the one number that bench's table, `report` (text,
//! Markdown, CSV, HTML, OpenMetrics), `compare`, `--ab` and the CDF plots all show as
//! "the" cycles of a test, and the rounds it rests on.
//!
//! The unit is the **round** (one fresh VM): each round has one figure, the median of its
//! paired net cycles per iteration (the raw median for `loop_overhead`, the empty loop
//! itself). The central figure is [`CHOSEN`] applied to those round figures: rounds whose
//! figure lies far from the others are set aside ([`outlier_rounds`]), and the rest are
//! summarised by the estimator. Why this estimator and this rule, with the trials that
//! chose them, is written down in `docs/statistics.md`.
//!
//! Every renderer calls [`central`]; nothing reads a stored "net median" on its own, so
//! one file gives one figure everywhere.

use crate::results::{Probes, Results, RoundFigure, TestResult};
use crate::stats::percentile;

/// How a set of round figures is summarised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimator {
    /// The median of the round figures.
    Median,
    /// The Hodges–Lehmann estimate: the median of all pairwise means (Walsh averages).
    HodgesLehmann,
    /// The mean of the middle 60 % (20 % trimmed from each end).
    TrimmedMean,
    /// The mean of the round figures.
    Mean,
    /// The 25th percentile: host interference only ever slows a round down.
    LowQuartile,
}

impl Estimator {
    /// Every estimator, for the trials that compare them.
    pub const ALL: [Estimator; 5] = [
        Estimator::Median,
        Estimator::HodgesLehmann,
        Estimator::TrimmedMean,
        Estimator::Mean,
        Estimator::LowQuartile,
    ];

    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Estimator::Median => "median",
            Estimator::HodgesLehmann => "Hodges-Lehmann",
            Estimator::TrimmedMean => "20% trimmed mean",
            Estimator::Mean => "mean",
            Estimator::LowQuartile => "25th percentile",
        }
    }

    /// The estimate of `values` (finite, non-empty); reorders them.
    pub fn of(self, values: &mut [f64]) -> f64 {
        values.sort_unstable_by(f64::total_cmp);
        let n = values.len();
        match self {
            Estimator::Median => percentile(values, 50.0),
            Estimator::LowQuartile => percentile(values, 25.0),
            Estimator::Mean => values.iter().sum::<f64>() / n as f64,
            Estimator::TrimmedMean => {
                let cut = (n as f64 * 0.2).floor() as usize;
                let middle = &values[cut..n - cut];
                middle.iter().sum::<f64>() / middle.len() as f64
            }
            Estimator::HodgesLehmann => {
                let mut walsh = Vec::with_capacity(n * (n + 1) / 2);
                for i in 0..n {
                    for j in i..n {
                        walsh.push((values[i] + values[j]) / 2.0);
                    }
                }
                walsh.sort_unstable_by(f64::total_cmp);
                percentile(&walsh, 50.0)
            }
        }
    }
}

/// How the 95 % interval of a change is drawn from the kept rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    /// The expanded percentile bootstrap of the estimator (rounds resampled).
    Bootstrap,
    /// For A/B rounds, the distribution-free interval of the median of the rounds'
    /// ratios (order statistics, sign test), whose coverage holds for any distribution;
    /// for two runs, the bootstrap.
    SignTest,
    /// Student's t on the logarithms of the rounds (Welch's for two runs, the paired
    /// interval for A/B rounds): an interval for the mean, whatever the estimator.
    StudentT,
    /// For A/B rounds, the Hodges–Lehmann estimate of the rounds' log ratios (the median
    /// of their pairwise averages) and its distribution-free interval from the signed-rank
    /// statistic (Wilcoxon), which holds for any distribution symmetric about its centre,
    /// as the ratios of rounds run in alternating order (A B, B A) are without a change;
    /// for two runs, the bootstrap.
    SignedRank,
}

/// An estimator, whether outlier rounds are set aside first, and the interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Method {
    /// How the kept rounds are summarised.
    pub estimator: Estimator,
    /// Whether [`outlier_rounds`] are set aside before.
    pub reject_outliers: bool,
    /// How the interval of a change is drawn.
    pub interval: Interval,
}

impl Method {
    /// A short name for tables.
    pub fn name(self) -> String {
        let mut s = self.estimator.name().to_string();
        if self.reject_outliers {
            s.push_str(", outliers set aside");
        }
        match self.interval {
            Interval::Bootstrap => {}
            Interval::StudentT => s.push_str(", t interval"),
            Interval::SignTest => s.push_str(", sign-test interval (A/B)"),
            Interval::SignedRank => s.push_str(", signed-rank interval (A/B)"),
        }
        s
    }

    /// Which of `values` this method keeps (all, or all but the outliers).
    pub fn kept(self, values: &[f64]) -> Vec<bool> {
        if self.reject_outliers {
            outlier_rounds(values).iter().map(|o| !o).collect()
        } else {
            vec![true; values.len()]
        }
    }

    /// The estimate of `values` after setting aside what this method sets aside; NaN for
    /// no values.
    pub fn estimate(self, values: &[f64]) -> f64 {
        let mut kept: Vec<f64> = values
            .iter()
            .zip(self.kept(values))
            .filter_map(|(v, k)| k.then_some(*v))
            .collect();
        if kept.is_empty() {
            f64::NAN
        } else {
            self.estimator.of(&mut kept)
        }
    }
}

/// What the central figure is, in words, for every rendering's legend.
pub const DESCRIPTION: &str = "the median over rounds (fresh VMs) of each round's median of (sample - the empty loop measured just before it in the same VM), rounds of the test's other host state (by the empty loop: over 1.2x that of the test's second-quickest round, or of its 10th-percentile round from 20 rounds on; or by the exit-path probes, port writes the kernel absorbs (an ioeventfd) and doorbells the VMM answers, timed just before and after the test: one kind over 1.1x the same reference of its own at both ends; or not; the state with at least 5 rounds, the quick one first) and rounds far from the others (host interference) set aside";

/// The method every figure and verdict uses (chosen in `docs/statistics.md`).
pub const CHOSEN: Method = Method {
    estimator: Estimator::Median,
    reject_outliers: true,
    interval: Interval::Bootstrap,
};

/// A round is an outlier when its figure lies more than this many robust standard
/// deviations (1.4826 × the median absolute deviation) from the median of the rounds.
pub const OUTLIER_K: f64 = 5.0;

/// The robust standard deviation used by [`outlier_rounds`] is at least this share of
/// the median, so that rounds that agree to a fraction of a percent do not make a
/// round 1 % away an outlier.
pub const SPREAD_FLOOR: f64 = 0.01;

/// Fewest rounds for the outlier rule to apply: with fewer, the median and its spread
/// say too little about which round is odd.
pub const OUTLIER_MIN_ROUNDS: usize = 5;

/// How much slower than the test's quick rounds (its [`state_reference`]) a round's
/// empty loop (the guest code with no exit timed before every sample,
/// [`RoundFigure::loop_median`]) must run for the round to count as taken in a slower
/// host state. This project's development host has
/// such a state: the loop took 10,450-11,230 cycles in 37 of 40 default runs and
/// 16,400-17,800 in the others, every figure exits included ~1.5x, and 15 % of all
/// rounds ran in it (`docs/statistics.md`, "Forty default runs"). Runs of one state keep
/// their rounds' loops within 8 % of each other.
pub const SLOW_STATE_FACTOR: f64 = 1.2;

/// Fewest rounds in one host state for the figure to rest on that state's rounds alone:
/// as many as a verdict needs (the verdict's `MIN_ROUNDS`, which a test there holds
/// equal), so that setting rounds aside never leaves a short run without one.
pub const MIN_QUICK_ROUNDS: usize = 5;

/// Which share of a test's rounds may run freakishly fast without moving the loop the
/// others are measured against: [`state_reference`] is the loop at this percentile of
/// the rounds' loops (by rank, never the quickest round's).
pub const REFERENCE_PERCENTILE: f64 = 10.0;

/// The empty loop a test's rounds are measured against to tell their host state: the
/// loop of the round at the [`REFERENCE_PERCENTILE`]th percentile of `loops` by rank,
/// and never the quickest (the second-quickest round's in a run of fewer than 20); the
/// quickest round's when only one has a loop. `None` when none has a usable loop.
///
/// Why not the quickest round's, as at first: one round whose loop ran freakishly fast
/// then set the line below the quick state itself. With a quick state at 11,000 cycles
/// and one round at 9,100, every round above 10,920 counted as slow, so most of the
/// quick state was set aside and the figure rested on a mix of the two states. A rank
/// ignores up to a tenth of the rounds (at least one) lying anywhere below the others.
/// Why not a higher percentile (the 25th, the median): the reference must lie in the
/// quick state whenever the quick state can carry the figure, which it does from a
/// quarter of the rounds on. At the 10th percentile a quick state of more than a tenth
/// of the rounds (and at least two) sets the reference; one of fewer could not carry the
/// figure anyway (fewer than a quarter of the rounds), and with the reference in the
/// slow state its rounds count with the slow ones, where the outlier rule takes them by
/// their figure if it lies far (it does in this host's slow state, every figure ~1.5x).
/// Why not the split at the largest gap between the sorted loops: a freak far below the
/// others makes the largest gap its own, and a round that straddled a change of state
/// (its median loop between the two) halves the gap between the states.
pub fn state_reference(loops: &[Option<f64>]) -> Option<f64> {
    let mut usable: Vec<f64> = loops
        .iter()
        .flatten()
        .copied()
        .filter(|l| l.is_finite() && *l > 0.0)
        .collect();
    usable.sort_unstable_by(f64::total_cmp);
    let n = usable.len();
    let rank = ((n as f64 * REFERENCE_PERCENTILE / 100.0) as usize).max(1);
    usable.get(rank.min(n.checked_sub(1)?)).copied()
}

/// How much slower than the test's quick rounds (the [`state_reference`] of the same
/// probe over its rounds) one of a round's exit-path probes must run, both before the
/// test and after its last sample, for the round to count as taken in a slower host
/// state. The guest times them outside the counted part of the round: port writes an
/// ioeventfd absorbs in the kernel, and doorbells the VMM answers in userspace
/// ([`RoundFigure::probes`]). This project's development host has a state that slows
/// the exit path but not the guest's own code, so that the empty loop cannot see it;
/// there the kernel probe took 11,000-16,700 cycles per write against 9,700-9,900 in
/// quick rounds, the userspace one 31,000-43,000 against 25,000-26,500, and the round's
/// userspace exits ~20 % longer (`docs/statistics.md`, "The exit-path probes"). One slow
/// end alone is a state that began or ended during the test's samples: the figure of
/// such a round showed it in under half the cases, and it is not set aside for it.
pub const PROBE_STATE_FACTOR: f64 = 1.1;

/// What tells the host state a round ran in: its empty loop and its exit-path probes,
/// each `None` where the round did not record it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StateSigns {
    /// [`RoundFigure::loop_median`].
    pub loop_median: Option<f64>,
    /// [`RoundFigure::probes`].
    pub probes: Option<Probes>,
}

impl StateSigns {
    /// A round's signs.
    pub fn of(r: &RoundFigure) -> StateSigns {
        StateSigns {
            loop_median: r.loop_median,
            probes: r.probes,
        }
    }

    /// The signs of a round that recorded only its empty loop.
    pub fn loop_only(loop_median: Option<f64>) -> StateSigns {
        StateSigns {
            loop_median,
            ..StateSigns::default()
        }
    }

    /// Whether the round recorded any sign.
    fn any(&self) -> bool {
        self.loop_median.is_some() || self.probes.is_some()
    }
}

/// Which of `values` (one sign of each round) lie more than `factor` times their own
/// [`state_reference`] above it.
fn slow_by(values: &[Option<f64>], factor: f64) -> Vec<bool> {
    let Some(reference) = state_reference(values) else {
        return vec![false; values.len()];
    };
    values
        .iter()
        .map(|v| v.is_some_and(|v| v > reference * factor))
        .collect()
}

/// Which of `rounds` (aligned with them) their signs call slow (see [`other_state_of`]),
/// whichever state the test's figure then rests on.
pub fn slow_rounds(rounds: &[RoundFigure]) -> Vec<bool> {
    slow_signs(&rounds.iter().map(StateSigns::of).collect::<Vec<_>>())
}

/// Which of `loops` (each round's empty loop) lie beyond [`SLOW_STATE_FACTOR`] times
/// their [`state_reference`]: the rounds the loop alone calls slow.
pub fn loop_slow(loops: &[Option<f64>]) -> Vec<bool> {
    slow_by(loops, SLOW_STATE_FACTOR)
}

/// Which rounds a sign calls slow: the empty loop beyond [`SLOW_STATE_FACTOR`], or one
/// of the exit-path probes beyond [`PROBE_STATE_FACTOR`] both before and after the
/// test, each against its own reference.
fn slow_signs(signs: &[StateSigns]) -> Vec<bool> {
    let loops = loop_slow(&signs.iter().map(|s| s.loop_median).collect::<Vec<_>>());
    probes_slow(signs)
        .into_iter()
        .zip(loops)
        .map(|(p, l)| p || l)
        .collect()
}

/// Which rounds the exit-path probes call slow: one kind beyond [`PROBE_STATE_FACTOR`]
/// times its own reference both before and after the test.
fn probes_slow(signs: &[StateSigns]) -> Vec<bool> {
    let series = |f: fn(&Probes) -> f64| {
        let v: Vec<Option<f64>> = signs.iter().map(|s| s.probes.as_ref().map(f)).collect();
        slow_by(&v, PROBE_STATE_FACTOR)
    };
    let (kb, ka) = (series(|p| p.kernel_before), series(|p| p.kernel_after));
    let (ub, ua) = (series(|p| p.user_before), series(|p| p.user_after));
    (0..signs.len())
        .map(|i| (kb[i] && ka[i]) || (ub[i] && ua[i]))
        .collect()
}

/// Which rounds ran in another host state than the one the test's figure rests on, by
/// each round's own empty loop (`loops`; a round without one is always kept): see
/// [`other_state_of`], for rounds without exit-path probes.
pub fn other_state_rounds(loops: &[Option<f64>]) -> Vec<bool> {
    let signs: Vec<StateSigns> = loops.iter().map(|l| StateSigns::loop_only(*l)).collect();
    other_state_of(&signs)
}

/// Which rounds ran in another host state than the one the test's figure rests on, by
/// each round's own signs (`signs`; a round without any is always kept). The quick
/// rounds are those whose loop ran within [`SLOW_STATE_FACTOR`] times the test's
/// [`state_reference`] of the loops, and whose probes ran within [`PROBE_STATE_FACTOR`]
/// times theirs. The figure rests on them, and the slow ones are set aside, when at least
/// [`MIN_QUICK_ROUNDS`] and a quarter of the rounds are quick; otherwise the test ran
/// mostly in the slow state, and the figure rests on the slow rounds when at least
/// [`MIN_QUICK_ROUNDS`] of them ran (the quick ones set aside), on every round if not
/// (a short run then mixes the states rather than lose its verdict).
/// A figure thus mixes the states only where neither has five rounds (as in a run of
/// fewer than ten), and compare tells by the kept state's loops whether two runs'
/// figures of a test rest on the same state.
pub fn other_state_of(signs: &[StateSigns]) -> Vec<bool> {
    choose_state(signs, &slow_signs(signs))
}

/// The state choice of [`other_state_of`] from each round's `slow` flag.
fn choose_state(signs: &[StateSigns], slow: &[bool]) -> Vec<bool> {
    let n = signs.len();
    let quick = slow.iter().filter(|s| !**s).count();
    if quick >= MIN_QUICK_ROUNDS && quick * 4 >= n {
        return slow.to_vec();
    }
    if n - quick >= MIN_QUICK_ROUNDS {
        // Mostly slow: the quick rounds (with a sign) are the other state.
        return signs.iter().zip(slow).map(|(g, s)| g.any() && !s).collect();
    }
    vec![false; n]
}

/// Which rounds are outliers (see [`OUTLIER_K`]); never more than a third of them (a
/// test whose rounds fall in two groups keeps both), none with fewer than
/// [`OUTLIER_MIN_ROUNDS`].
pub fn outlier_rounds(values: &[f64]) -> Vec<bool> {
    let n = values.len();
    let mut out = vec![false; n];
    if n < OUTLIER_MIN_ROUNDS || values.iter().any(|v| !v.is_finite()) {
        return out;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    let med = percentile(&sorted, 50.0);
    let mut dev: Vec<f64> = values.iter().map(|v| (v - med).abs()).collect();
    dev.sort_unstable_by(f64::total_cmp);
    let sd = (1.4826 * percentile(&dev, 50.0)).max(SPREAD_FLOOR * med.abs());
    let far: Vec<usize> = (0..n)
        .filter(|&i| (values[i] - med).abs() > OUTLIER_K * sd)
        .collect();
    if far.len() * 3 <= n {
        for i in far {
            out[i] = true;
        }
    }
    out
}

/// Which figure of a test's rounds is its central figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    /// The paired net cycles per iteration (sample minus the empty loop before it).
    Net,
    /// The raw cycles per iteration (`loop_overhead`, or a test without a net figure).
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

/// The central figure of one test and the rounds it rests on.
#[derive(Debug, Clone, PartialEq)]
pub struct Central {
    /// Net or raw.
    pub figure: Figure,
    /// The figure of each round, in the order they ran (empty for a file without
    /// per-round figures).
    pub rounds: Vec<f64>,
    /// Each round's empty loop ([`RoundFigure::loop_median`]), aligned with `rounds`.
    pub loops: Vec<Option<f64>>,
    /// Which rounds the figure rests on (`false`: set aside, as taken in the test's
    /// other host state or as outliers).
    pub kept: Vec<bool>,
    /// Which rounds ran in another host state than the figure rests on
    /// ([`other_state_of`]): the slow ones, or the quick ones of a test that ran
    /// mostly in the slow state.
    pub other_state: Vec<bool>,
    /// Which rounds their own signs (empty loop, exit-path probes) call slow, aligned
    /// with `rounds`, whichever state the figure rests on.
    pub slow: Vec<bool>,
    /// The central figure, cycles per iteration.
    pub value: f64,
}

impl Central {
    /// Rounds set aside as outliers (those of the test's kept host state).
    pub fn outliers(&self) -> usize {
        self.kept
            .iter()
            .zip(self.other_state.iter().chain(std::iter::repeat(&false)))
            .filter(|(k, s)| !**k && !**s)
            .count()
    }

    /// Rounds set aside as taken in another host state.
    pub fn other_state_count(&self) -> usize {
        self.other_state.iter().filter(|s| **s).count()
    }

    /// The kept rounds' figures.
    pub fn kept_rounds(&self) -> Vec<f64> {
        self.rounds
            .iter()
            .zip(&self.kept)
            .filter_map(|(v, k)| k.then_some(*v))
            .collect()
    }
}

/// Which figure of its rounds a test that completed is judged by: net, or raw for a
/// test without a net figure. `None` when the test did not complete or has no cycles.
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

/// The round figures of a test that completed, the rounds with a finite figure in the
/// order they ran: net, or raw for a test without a net figure. `None` when the test did
/// not complete or has no cycles.
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

/// The round figures a comparison of `t` rests on: [`round_figures`] without the rounds
/// of the other host state ([`other_state_rounds`]; outliers are the verdict's to set
/// aside), and how many of those there were.
pub fn state_figures(t: &TestResult) -> Option<(Vec<f64>, Figure, usize)> {
    let figure = figure_of(t)?;
    let (values, _, other) = state_points(t, figure);
    let kept = values
        .iter()
        .zip(&other)
        .filter_map(|(v, o)| (!o).then_some(*v))
        .collect();
    Some((kept, figure, other.iter().filter(|o| **o).count()))
}

/// The finite `figure`s of `rounds` but those of the other host state
/// ([`other_state_rounds`]), and how many of those there were.
pub fn state_values(rounds: &[RoundFigure], figure: Figure) -> (Vec<f64>, usize) {
    let (values, signs) = points(rounds, figure);
    let other = other_state_of(&signs);
    let kept = values
        .iter()
        .zip(&other)
        .filter_map(|(v, o)| (!o).then_some(*v))
        .collect();
    (kept, other.iter().filter(|o| **o).count())
}

/// The finite figures of `rounds` and each one's state signs, aligned.
fn points(rounds: &[RoundFigure], figure: Figure) -> (Vec<f64>, Vec<StateSigns>) {
    rounds
        .iter()
        .map(|r| (round_value(r, figure), StateSigns::of(r)))
        .filter(|(v, _)| v.is_finite())
        .unzip()
}

/// [`points`] of `t`'s rounds and which of them ran in another host state than its
/// figure rests on: the A/B sides' joint choice where `t` carries one
/// ([`TestResult::paired_other_state`]), else its own rounds' ([`other_state_rounds`]).
fn state_points(t: &TestResult, figure: Figure) -> (Vec<f64>, Vec<StateSigns>, Vec<bool>) {
    let (values, signs) = points(&t.rounds, figure);
    let other = match joint_flags(t) {
        Some(joint) => t
            .rounds
            .iter()
            .zip(joint)
            .filter(|(r, _)| round_value(r, figure).is_finite())
            .map(|(_, o)| *o)
            .collect(),
        None => other_state_of(&signs),
    };
    (values, signs, other)
}

/// `t`'s joint A/B choice of host state, aligned with its rounds, if it carries one.
fn joint_flags(t: &TestResult) -> Option<&[bool]> {
    t.paired_other_state
        .as_deref()
        .filter(|j| j.len() == t.rounds.len())
}

/// Which of `rounds` the central figure rests on (aligned with them: a round without a
/// finite figure is never kept): not in the test's other host state, then not an outlier among
/// the rest ([`CHOSEN`]).
pub fn kept_mask(rounds: &[RoundFigure], figure: Figure) -> Vec<bool> {
    mask_of(rounds, figure, None)
}

/// [`kept_mask`] of `t`'s rounds by `figure`, honouring an A/B run's joint choice of
/// host state ([`TestResult::paired_other_state`]).
pub fn test_kept_mask(t: &TestResult, figure: Figure) -> Vec<bool> {
    mask_of(&t.rounds, figure, joint_flags(t))
}

/// [`kept_mask`] with the other host state's rounds given (`joint`, aligned with
/// `rounds`) or, without, chosen from the rounds' loops.
fn mask_of(rounds: &[RoundFigure], figure: Figure, joint: Option<&[bool]>) -> Vec<bool> {
    let values: Vec<f64> = rounds.iter().map(|r| round_value(r, figure)).collect();
    let finite: Vec<usize> = (0..rounds.len())
        .filter(|&i| values[i].is_finite())
        .collect();
    let other = match joint {
        Some(j) => finite.iter().map(|&i| j[i]).collect(),
        None => other_state_of(
            &finite
                .iter()
                .map(|&i| StateSigns::of(&rounds[i]))
                .collect::<Vec<_>>(),
        ),
    };
    let (_, kept) = rest_on(
        &finite.iter().map(|&i| values[i]).collect::<Vec<_>>(),
        &other,
        CHOSEN,
    );
    let mut mask = vec![false; rounds.len()];
    for (&i, k) in finite.iter().zip(kept) {
        mask[i] = k;
    }
    mask
}

/// The empty-loop medians of the rounds of the host state `t`'s central figure rests on
/// ([`other_state_rounds`], before outliers are set aside; rounds that recorded one): the
/// state the figure was taken in.
pub fn state_loops(t: &TestResult) -> Vec<f64> {
    let Some(figure) = figure_of(t) else {
        return Vec::new();
    };
    let (_, signs, other) = state_points(t, figure);
    signs
        .iter()
        .zip(other)
        .filter_map(|(g, o)| (!o).then_some(g.loop_median).flatten())
        .collect()
}

/// The joint choice of host state of the two sides of an A/B run (round `i` of each
/// ran back to back): which pairs of rounds are set aside, for each `i` up to the
/// shorter side's rounds. Each side choosing on its own could rest side A on its quick
/// rounds and side B on its slow ones. The state is chosen over both sides' rounds
/// together ([`other_state_rounds`] on all of their loops, so one reference and one
/// count), and a pair is kept when both its rounds are in that state; where fewer than
/// [`MIN_QUICK_ROUNDS`] pairs are, the pairs wholly in the other state are kept if there
/// are enough of those, and every pair otherwise (a short A/B run keeps its verdict; a
/// state both sides of a pair shared cancels in its ratio, and the ratio outlier rule
/// takes a pair that straddled a change). Pairs without a finite figure on both sides
/// are no pair and are not set aside here. `None` when a side did not complete.
pub fn paired_other_state(a: &TestResult, b: &TestResult) -> Option<Vec<bool>> {
    let figure = figure_of(a)?;
    figure_of(b)?;
    let pairs: Vec<usize> = (0..a.rounds.len().min(b.rounds.len()))
        .filter(|&i| {
            round_value(&a.rounds[i], figure).is_finite()
                && round_value(&b.rounds[i], figure).is_finite()
        })
        .collect();
    let n = pairs.len();
    let signs: Vec<StateSigns> = [&a.rounds, &b.rounds]
        .iter()
        .flat_map(|side| pairs.iter().map(|&i| StateSigns::of(&side[i])))
        .collect();
    // The loops of both sides against one reference where the knob under test does not
    // run in the empty loop, each side's against its own where it does (another batch
    // shares a sample's clock reads among another number of iterations, another ring
    // runs the loop there); each side's probes against its own, because the knob may
    // change the exit path the probes time.
    let loops: Vec<Option<f64>> = signs.iter().map(|g| g.loop_median).collect();
    let mut slow = if a.batch == b.batch && a.ring == b.ring {
        loop_slow(&loops)
    } else {
        let mut s = loop_slow(&loops[..n]);
        s.extend(loop_slow(&loops[n..]));
        s
    };
    for side in [0..n, n..2 * n] {
        let probes = probes_slow(&signs[side.clone()]);
        for (s, p) in slow[side].iter_mut().zip(probes) {
            *s |= p;
        }
    }
    let other = choose_state(&signs, &slow);
    let (side_a, side_b) = other.split_at(n);
    let kept = (0..n).filter(|&i| !side_a[i] && !side_b[i]).count();
    let other_kept = (0..n).filter(|&i| side_a[i] && side_b[i]).count();
    let set_aside: Vec<bool> = if kept >= MIN_QUICK_ROUNDS {
        (0..n).map(|i| side_a[i] || side_b[i]).collect()
    } else if other_kept >= MIN_QUICK_ROUNDS {
        (0..n).map(|i| !(side_a[i] && side_b[i])).collect()
    } else {
        vec![false; n]
    };
    let mut mask = vec![false; a.rounds.len().min(b.rounds.len())];
    for (&i, s) in pairs.iter().zip(set_aside) {
        mask[i] = s;
    }
    Some(mask)
}

/// Gives each test of side `a` of an A/B run and its namesake of side `b` their joint
/// choice of host state ([`paired_other_state`], in
/// [`TestResult::paired_other_state`]), so that each side's central figure, its kept
/// rounds and the comparison rest on the same pairs of rounds.
pub fn pair_states(a: &mut [TestResult], b: &mut [TestResult]) {
    for ta in a.iter_mut() {
        let Some(tb) = b.iter_mut().find(|t| t.name == ta.name) else {
            continue;
        };
        let joint = paired_other_state(ta, tb);
        for t in [&mut *ta, &mut *tb] {
            t.paired_other_state = joint.as_ref().map(|j| {
                let mut m = j.clone();
                m.resize(t.rounds.len(), false);
                m
            });
        }
    }
}

/// The figures of two sides of an A/B run, pair by pair (round `i` of each ran back to
/// back): the pairs in which both sides have a finite figure and that the sides' joint
/// choice of host state keeps ([`paired_other_state`]), in order, and how many pairs
/// that choice set aside.
pub fn paired_figures(
    a: &TestResult,
    b: &TestResult,
) -> Option<(Vec<f64>, Vec<f64>, Figure, usize)> {
    let figure = figure_of(a)?;
    figure_of(b)?;
    let set_aside = paired_other_state(a, b)?;
    let (va, vb) = a
        .rounds
        .iter()
        .zip(&b.rounds)
        .zip(&set_aside)
        .filter(|(_, s)| !**s)
        .map(|((x, y), _)| (round_value(x, figure), round_value(y, figure)))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .unzip();
    Some((va, vb, figure, set_aside.iter().filter(|s| **s).count()))
}

/// The rounds (finite `values`) a method's figure rests on: those of the other host
/// state (`other`) set aside, then the method's outliers among the rest. Returns the
/// estimate and the kept flags.
fn rest_on(values: &[f64], other: &[bool], method: Method) -> (f64, Vec<bool>) {
    let state: Vec<f64> = values
        .iter()
        .zip(other)
        .filter_map(|(v, o)| (!o).then_some(*v))
        .collect();
    let mut flags = method.kept(&state).into_iter();
    let kept: Vec<bool> = other
        .iter()
        .map(|o| !o && flags.next().unwrap_or(false))
        .collect();
    (method.estimate(&state), kept)
}

/// The central figure of `t` with [`CHOSEN`]: from its rounds, or, in a file without
/// per-round figures (results schema 1), the stored net median (raw median without one).
/// `None` when the test did not complete.
pub fn central(t: &TestResult) -> Option<Central> {
    central_with(t, CHOSEN)
}

/// [`central`] with another method (for the trials that compare methods).
pub fn central_with(t: &TestResult, method: Method) -> Option<Central> {
    let figure = figure_of(t)?;
    let (rounds, signs, other_state) = state_points(t, figure);
    let loops: Vec<Option<f64>> = signs.iter().map(|g| g.loop_median).collect();
    let slow = slow_signs(&signs);
    if rounds.is_empty() {
        let value = match figure {
            Figure::Net => t.net_median_cycles?,
            Figure::Raw => t.cycles.as_ref()?.median,
        };
        return Some(Central {
            figure,
            rounds,
            loops,
            kept: Vec::new(),
            other_state,
            slow,
            value,
        });
    }
    let (value, kept) = rest_on(&rounds, &other_state, method);
    Some(Central {
        figure,
        rounds,
        loops,
        kept,
        other_state,
        slow,
        value,
    })
}

/// The central figure in cycles and whether it is net: the one `compare` and `--ab`
/// judge, also for a test judged on its raw figure (the empty loop), which the tables
/// show marked "(raw)" in the net median column rather than leave it to the samples'
/// pooled median, a different number.
pub fn figure_cycles(t: &TestResult) -> Option<(f64, bool)> {
    central(t).map(|c| (c.value, c.figure == Figure::Net))
}

/// The net central figure of `t` (`None` for a test without a net figure): what the
/// tables' "net" column shows.
pub fn net_figure(t: &TestResult) -> Option<f64> {
    central(t)
        .filter(|c| c.figure == Figure::Net)
        .map(|c| c.value)
}

/// The report's line on outlier rounds: which tests had rounds set aside, how many of
/// how many, and why; `None` when no test had one.
pub fn outliers_line(tests: &[TestResult]) -> Option<String> {
    let list = |count: fn(&Central) -> usize| -> Vec<String> {
        tests
            .iter()
            .filter_map(|t| {
                let c = central(t)?;
                let n = count(&c);
                (n > 0).then(|| format!("{} {} of {}", t.name, n, c.rounds.len()))
            })
            .collect()
    };
    let (outliers, other) = (list(Central::outliers), list(Central::other_state_count));
    let mut parts = Vec::new();
    if !other.is_empty() {
        parts.push(format!(
            "rounds of another host state set aside (a test's figure rests on its rounds whose empty loop ran within {:.0}% of its second-quickest round's (of its 10th-percentile round's from 20 rounds on), and neither of whose exit-path probes ran over {:.0}% above its own reference both before and after the test, where at least 5 and a quarter of them did, otherwise on its slower rounds where at least 5 did; every figure of a slow round is higher): {}",
            (SLOW_STATE_FACTOR - 1.0) * 100.0,
            (PROBE_STATE_FACTOR - 1.0) * 100.0,
            other.join(", ")
        ));
    }
    if !outliers.is_empty() {
        parts.push(format!(
            "outlier rounds set aside (figure more than {OUTLIER_K} robust SDs from the test's other rounds: host interference on the exit path): {}",
            outliers.join(", ")
        ));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "{}; each replaced by an extra round while the budget lasted",
            parts.join("; ")
        )
    })
}

/// Writes `t`'s central figure into its stored fields, so that a reader of the JSON
/// finds the same figure as every renderer: `net_median_cycles` (tests with a net
/// figure) and `median_ns` (converted at `tsc_khz`; left alone when it is 0).
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

/// The central figure of `t` in nanoseconds, and whether it is the net one: the stored
/// nanoseconds scaled from the figure they were converted from to the central figure
/// (so the TSC frequency the run used is kept). `None` without a stored conversion.
pub fn figure_ns(t: &TestResult) -> Option<(f64, bool)> {
    let ns = t.median_ns?;
    let c = central(t)?;
    let basis = if t.median_ns_is_net {
        t.net_median_cycles?
    } else {
        t.cycles.as_ref()?.median
    };
    let is_net = c.figure == Figure::Net;
    if is_net != t.median_ns_is_net || basis.is_nan() || basis <= 0.0 {
        return None;
    }
    Some((c.value * ns / basis, is_net))
}

/// The two sides of an A/B run as results of their own (side A, side B), each with
/// its knob value recorded in `config.knobs`, each test with the sides' joint choice
/// of host state ([`pair_states`]).
pub fn ab_sides(run: &Results) -> Option<(Results, Results)> {
    let ab = run.ab.as_ref()?;
    let side = |value: &str, tests: &[TestResult]| {
        let mut r = run.clone();
        r.ab = None;
        r.tests = tests.to_vec();
        r.config.knobs.insert(ab.knob.clone(), value.to_string());
        r
    };
    let (mut a, mut b) = (side(&ab.a, &run.tests), side(&ab.b, &ab.b_tests));
    pair_states(&mut a.tests, &mut b.tests);
    Some((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimators_on_known_values() {
        let v = [1.0, 2.0, 3.0, 4.0, 100.0];
        assert_eq!(Estimator::Median.of(&mut v.clone()), 3.0);
        assert_eq!(Estimator::Mean.of(&mut v.clone()), 22.0);
        // 20 % of 5 is one value from each end: mean of 2, 3, 4.
        assert_eq!(Estimator::TrimmedMean.of(&mut v.clone()), 3.0);
        assert_eq!(Estimator::LowQuartile.of(&mut v.clone()), 2.0);
        // Walsh averages of 1, 2, 3: 1, 1.5, 2, 2, 2.5, 3: median 2.
        assert_eq!(Estimator::HodgesLehmann.of(&mut [3.0, 1.0, 2.0]), 2.0);
    }

    #[test]
    fn a_round_far_out_is_an_outlier_but_a_second_group_is_not() {
        // Five rounds within 1 %, one 25 % high.
        let v = [20_000.0, 20_100.0, 19_950.0, 25_000.0, 20_050.0, 19_980.0];
        assert_eq!(
            outlier_rounds(&v),
            vec![false, false, false, true, false, false]
        );
        assert_eq!(CHOSEN.estimate(&v), 20_000.0);
        // Rounds 1 % apart are not outliers (the floor of the spread).
        let tight = [1000.0, 1000.1, 999.9, 1000.0, 1010.0, 1000.05];
        assert!(outlier_rounds(&tight).iter().all(|o| !o));
        // Two groups of three: neither is set aside.
        let two = [100.0, 100.0, 100.0, 130.0, 130.0, 130.0];
        assert!(outlier_rounds(&two).iter().all(|o| !o));
        // Too few rounds to tell.
        assert!(outlier_rounds(&[1.0, 1.0, 1.0, 9.0]).iter().all(|o| !o));
    }

    #[test]
    fn a_figure_rests_on_the_quick_state_with_five_rounds_else_on_the_slow_one() {
        let l = |v: f64| Some(v);
        // Ten rounds near 11,000 and two at 16,500: the two are slow.
        let mut loops = vec![l(11_000.0); 10];
        loops[3] = l(10_800.0);
        loops.extend([l(16_500.0), l(16_900.0)]);
        let slow = other_state_rounds(&loops);
        assert_eq!(slow.iter().filter(|s| **s).count(), 2);
        assert!(slow[10] && slow[11] && !slow[3]);
        // 1.19x the reference (the second-quickest round's loop) is not slow; a round
        // without a loop never is.
        assert_eq!(
            other_state_rounds(&[
                l(100.0),
                l(119.0),
                None,
                l(100.0),
                l(101.0),
                l(130.0),
                l(100.0)
            ]),
            vec![false, false, false, false, false, true, false]
        );
        // Two quick rounds of twelve: the test ran mostly in the slow state, its figure
        // rests on the ten slow rounds and the two quick ones are set aside.
        let mostly_slow: Vec<Option<f64>> = (0..12)
            .map(|i| l(if i < 2 { 11_000.0 } else { 16_500.0 }))
            .collect();
        assert_eq!(
            other_state_rounds(&mostly_slow),
            [vec![true; 2], vec![false; 10]].concat()
        );
        // Four of each in eight rounds: neither state has five rounds; all are kept.
        let halves: Vec<Option<f64>> = (0..8)
            .map(|i| l(if i % 2 == 0 { 100.0 } else { 150.0 }))
            .collect();
        assert!(other_state_rounds(&halves).iter().all(|s| !s));
        // Five quick of twelve: the seven slow ones are set aside.
        let five: Vec<Option<f64>> = (0..12)
            .map(|i| l(if i < 5 { 11_000.0 } else { 16_500.0 }))
            .collect();
        assert_eq!(other_state_rounds(&five).iter().filter(|s| **s).count(), 7);
        // Four quick and one slow in a five-round run: neither state has five rounds,
        // so all five count (a verdict needs five).
        let short = [l(100.0), l(100.0), l(150.0), l(100.0), l(100.0)];
        assert!(other_state_rounds(&short).iter().all(|s| !s));
        assert!(other_state_rounds(&[]).is_empty());
    }

    #[test]
    fn a_freakishly_fast_round_does_not_move_the_states_but_two_real_states_still_split() {
        let l = |v: f64| Some(v);
        // One state, twelve rounds at 10,700-11,300 cycles, and one round at 9,200. With
        // the quickest round as the reference, every round above 11,040 counted as slow
        // and six rounds of the one state were set aside; now none is.
        let one_state: Vec<Option<f64>> =
            (0..12).map(|i| l(10_700.0 + 50.0 * f64::from(i))).collect();
        let mut with_freak = one_state.clone();
        with_freak.insert(5, l(9_200.0));
        assert_eq!(state_reference(&with_freak), Some(10_700.0));
        assert!(other_state_rounds(&one_state).iter().all(|o| !o));
        assert!(other_state_rounds(&with_freak).iter().all(|o| !o));
        // Two states, 8 rounds at ~11,000 and 4 at ~16,500: the 4 slow ones are set aside,
        // with a freak at 9,100 as without it (the freak counts with the quick rounds).
        let two_states: Vec<Option<f64>> = (0..12)
            .map(|i| l(if i % 3 == 2 { 16_500.0 } else { 11_000.0 } + f64::from(i)))
            .collect();
        let split = other_state_rounds(&two_states);
        assert_eq!(
            split,
            (0..12).map(|i| i % 3 == 2).collect::<Vec<_>>(),
            "{two_states:?}"
        );
        let mut with_freak = two_states.clone();
        with_freak.push(l(9_100.0));
        assert_eq!(
            other_state_rounds(&with_freak),
            [split, vec![false]].concat()
        );
        // Mostly slow with a freak: two quick rounds and ten slow ones still rest on the
        // slow ones, the quick ones and the freak set aside.
        let mut mostly_slow: Vec<Option<f64>> = (0..12)
            .map(|i| l(if i < 2 { 11_000.0 } else { 16_500.0 }))
            .collect();
        mostly_slow.push(l(9_100.0));
        assert_eq!(
            other_state_rounds(&mostly_slow),
            [vec![true; 2], vec![false; 10], vec![true]].concat()
        );
        // From 20 rounds on the reference is the 10th percentile's round: 24 rounds
        // ignore two freaks (rank 2 of 0..24).
        let mut many: Vec<Option<f64>> = (0..22)
            .map(|i| l(if i < 14 { 11_000.0 } else { 16_500.0 }))
            .collect();
        many.extend([l(8_000.0), l(9_000.0)]);
        assert_eq!(state_reference(&many), Some(11_000.0));
        assert_eq!(other_state_rounds(&many).iter().filter(|o| **o).count(), 8);
        // A lone quick round with eleven slow ones cannot be told from a freak: it counts
        // with them (the outlier rule judges its figure).
        let lone: Vec<Option<f64>> = (0..12)
            .map(|i| l(if i == 0 { 11_000.0 } else { 16_500.0 }))
            .collect();
        assert_eq!(state_reference(&lone), Some(16_500.0));
        assert!(other_state_rounds(&lone).iter().all(|o| !o));
        assert_eq!(state_reference(&[None, l(5.0)]), Some(5.0));
        assert_eq!(state_reference(&[None, l(f64::NAN)]), None);
    }

    /// A round of `net` cycles with an empty loop of 20,000, kernel probes `kernel`
    /// (before, after) and userspace probes `user`.
    fn probed(net: f64, kernel: (f64, f64), user: (f64, f64)) -> RoundFigure {
        RoundFigure {
            samples: 100,
            median: net + 20_000.0,
            net_median: Some(net),
            loop_median: Some(20_000.0),
            probes: Some(Probes {
                kernel_before: kernel.0,
                kernel_after: kernel.1,
                user_before: user.0,
                user_after: user.1,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_round_whose_exit_path_probes_ran_slow_is_set_aside_though_its_loop_did_not() {
        use crate::results::tests::ok_test;
        const K: (f64, f64) = (1_220.0, 1_225.0);
        const U: (f64, f64) = (3_140.0, 3_150.0);
        // Nine rounds at ~21,500 with quick probes, and five whose loops ran as fast
        // but whose exits took ~26,800: the kernel probe ran slow before and after two
        // of them, the userspace probe around two, both around the fifth. Five of
        // fourteen are more than the outlier rule may set aside.
        let mut t = ok_test("inl_from_user", 21_500.0);
        t.rounds = (0..9)
            .map(|i| probed(21_480.0 + 10.0 * f64::from(i), (K.0 + f64::from(i), K.1), U))
            .chain([
                probed(26_900.0, (1_650.0, 1_700.0), U),
                probed(26_700.0, (1_500.0, 1_480.0), U),
                probed(26_800.0, K, (3_900.0, 4_000.0)),
                probed(26_600.0, K, (3_600.0, 3_700.0)),
                probed(27_000.0, (1_500.0, 1_480.0), (3_900.0, 4_100.0)),
            ])
            .collect();
        let c = central(&t).unwrap();
        assert_eq!((c.other_state_count(), c.outliers()), (5, 0));
        assert_eq!(c.value, 21_520.0);
        // One slow end is a state that began or ended during the test: the round's
        // figure may or may not show it, and the probe alone does not set it aside.
        let mut one_end = t.clone();
        one_end
            .rounds
            .push(probed(21_600.0, (1_650.0, K.1), (U.0, 4_000.0)));
        assert_eq!(central(&one_end).unwrap().other_state_count(), 5);
        // 1.09x the reference at both ends is the same state; 1.11x is not.
        let mut edge = t.rounds[..9].to_vec();
        edge.push(probed(21_600.0, (1_221.0 * 1.09, 1_225.0 * 1.09), U));
        edge.push(probed(23_600.0, (1_221.0 * 1.11, 1_225.0 * 1.11), U));
        assert_eq!(
            kept_mask(&edge, Figure::Net),
            [vec![true; 10], vec![false]].concat()
        );
        // The same rounds without probes (an older file, a host without ioeventfds):
        // every round counts, and the figure is pulled up.
        for r in &mut t.rounds {
            r.probes = None;
        }
        let c = central(&t).unwrap();
        assert_eq!((c.other_state_count(), c.outliers()), (0, 0));
        assert_eq!(c.value, 21_545.0);
    }

    #[test]
    fn the_sides_of_an_ab_run_judge_their_probes_each_against_its_own_rounds() {
        use crate::results::tests::ok_test;
        // Side B's knob slows the exit path the probes time by 30 % in every round: that
        // is the knob, not a host state, and no pair is set aside for it. One pair in
        // which side B's probe alone ran slow beyond that is set aside.
        let mut a = ok_test("inl_from_user", 21_500.0);
        let mut b = ok_test("inl_from_user", 27_900.0);
        let k = |x: f64| (1_220.0 * x, 1_225.0 * x);
        let u = |x: f64| (3_140.0 * x, 3_150.0 * x);
        a.rounds = (0..12)
            .map(|i| probed(21_500.0 + f64::from(i), k(1.0), u(1.0)))
            .collect();
        b.rounds = (0..12)
            .map(|i| probed(27_900.0 + f64::from(i), k(1.0), u(1.3)))
            .collect();
        assert_eq!(paired_other_state(&a, &b), Some(vec![false; 12]));
        b.rounds[4] = probed(33_400.0, k(1.0), u(1.3 * 1.2));
        let joint = paired_other_state(&a, &b).unwrap();
        assert_eq!(joint, (0..12).map(|i| i == 4).collect::<Vec<_>>());
        // Pooled like the loops, side B's userspace probes would all have counted as slow.
        let pooled: Vec<Option<f64>> = a
            .rounds
            .iter()
            .chain(&b.rounds)
            .map(|r| r.probes.map(|p| p.user_before))
            .collect();
        assert!(slow_by(&pooled, PROBE_STATE_FACTOR)[12..]
            .iter()
            .all(|s| *s));
    }

    #[test]
    fn the_central_figure_rests_on_the_quick_state_rounds() {
        use crate::results::tests::ok_test;
        // Eight rounds at ~3,000 net cycles and five in the slow state at ~4,500 (too many
        // for the outlier rule, which sets aside at most a third): the plain median of
        // the thirteen is pulled towards the slow ones; the central figure is the quick
        // rounds' median.
        let mut t = ok_test("cpuid", 3_000.0);
        let quick = [
            2_990.0, 3_000.0, 3_010.0, 3_005.0, 2_995.0, 3_000.0, 3_020.0, 2_980.0,
        ];
        t.rounds = quick
            .iter()
            .map(|&v| (v, 11_000.0))
            .chain([(4_500.0, 16_600.0); 5])
            .map(|(net, empty)| RoundFigure {
                samples: 100,
                median: net + empty,
                net_median: Some(net),
                loop_median: Some(empty),
                ..Default::default()
            })
            .collect();
        let c = central(&t).unwrap();
        assert_eq!(c.value, 3_000.0);
        assert_eq!((c.other_state_count(), c.outliers()), (5, 0));
        assert_eq!(c.kept.iter().filter(|k| **k).count(), 8);
        assert_eq!(
            kept_mask(&t.rounds, Figure::Net),
            [vec![true; 8], vec![false; 5]].concat()
        );
        let line = outliers_line(std::slice::from_ref(&t)).unwrap();
        assert!(
            line.contains("rounds of another host state set aside")
                && line.contains("cpuid 5 of 13"),
            "{line}"
        );
        // Without recorded loops (an older file) every round counts.
        for r in &mut t.rounds {
            r.loop_median = None;
        }
        let c = central(&t).unwrap();
        assert_eq!(c.other_state_count(), 0);
        assert_eq!(c.value, 3_010.0);
    }

    #[test]
    fn the_baseline_row_not_its_name_makes_a_raw_figure() {
        use crate::results::tests::ok_test;
        // A test that is the paired empty loop gives raw round medians, whatever its name.
        let mut empty = ok_test("empty_loop_by_another_name", 100.0);
        empty.baseline = true;
        let (values, figure) = round_figures(&empty).unwrap();
        assert_eq!(figure, Figure::Raw);
        let raw: Vec<f64> = empty.rounds.iter().map(|r| r.median).collect();
        assert_eq!(values, raw);
        // A test named like the old empty loop but not marked baseline keeps its net figure.
        let named = ok_test("loop_overhead", 100.0);
        let (values, figure) = round_figures(&named).unwrap();
        assert_eq!(figure, Figure::Net);
        let net: Vec<f64> = named.rounds.iter().filter_map(|r| r.net_median).collect();
        assert_eq!(values, net);
    }

    #[test]
    fn one_file_gives_one_central_figure_in_every_rendering() {
        use crate::format::fmt_cycles;
        use crate::results::tests::sample_results;
        let mut r = sample_results();
        // cpuid: the stored net median (as the noise filter's kept samples gave it) is
        // 1,111, while its rounds say 12,345, one of them far out (a disturbed host).
        let t = &mut r.tests[1];
        assert_eq!(t.name, "cpuid");
        t.net_median_cycles = Some(1111.0);
        t.median_ns = Some(1111.0 / 3.0);
        for (round, v) in t
            .rounds
            .iter_mut()
            .zip([12_345.0, 12_340.0, 12_350.0, 16_000.0, 12_345.0, 12_348.0])
        {
            round.net_median = Some(v);
        }
        let c = central(&r.tests[1]).unwrap();
        assert_eq!((c.value, c.outliers()), (12_345.0, 1));
        let shown = fmt_cycles(c.value);
        assert_eq!(shown, "12,345");
        let row = |text: &str| -> String {
            text.lines()
                .find(|l| l.contains("cpuid"))
                .unwrap_or_default()
                .to_string()
        };
        let table = crate::report::render_table(&r);
        assert!(row(&table).contains(&shown), "{table}");
        assert!(!table.contains("1,111"), "{table}");
        assert!(
            table.contains("host interference on the exit path): cpuid 1 of 6; each replaced by an extra round while the budget lasted"),
            "{table}"
        );
        let md = crate::report::render_markdown(&r);
        assert!(row(&md).contains(&shown), "{md}");
        let csv = crate::report::render_csv(&[("f.json".into(), r.clone())]);
        assert!(row(&csv).contains(",12345,"), "{csv}");
        let html = crate::html::render(&[("f.json".into(), r.clone())]);
        assert!(
            html.lines()
                .any(|l| l.contains("<td>cpuid</td>") && l.contains(&format!("<td>{shown}</td>"))),
            "{html}"
        );
        let om = crate::openmetrics::render(&[("f.json".into(), r.clone())]);
        assert!(
            om.lines().any(|l| l.starts_with("exitlab_exit_net_cycles{")
                && l.contains("test=\"cpuid\"")
                && l.ends_with(" 12345")),
            "{om}"
        );
        // The nanoseconds follow the figure (3 GHz: 4,115 ns).
        assert!(
            om.lines()
                .any(|l| l.starts_with("exitlab_exit_net_seconds{")
                    && l.contains("test=\"cpuid\"")
                    && l.ends_with(" 0.000004115")),
            "{om}"
        );
        let cmp = crate::compare::compare(&r, &r, 0.0);
        let cc = &cmp.tests.iter().find(|t| t.name == "cpuid").unwrap().change;
        assert_eq!((cc.median_before, cc.outliers_before), (12_345.0, 1));
        let text = crate::compare::render_comparison(&cmp, ["before", "after"]);
        assert!(row(&text).contains(&shown), "{text}");
        // The empty loop is judged on its raw figure: the tables show that figure, marked
        // raw, in the net median column, the one compare shows, not the samples' median.
        let lo = r.tests.iter().find(|t| t.baseline).unwrap();
        let raw = central(lo).unwrap();
        assert_eq!(raw.figure, Figure::Raw);
        let raw_shown = fmt_cycles(raw.value);
        let lo_row = |text: &str| -> String {
            text.lines()
                .find(|l| l.contains(&lo.name))
                .unwrap_or_default()
                .to_string()
        };
        assert!(
            lo_row(&table).contains(&format!("{raw_shown} (raw)")),
            "{table}"
        );
        assert!(
            html.lines()
                .any(|l| l.contains(&format!("<td>{}</td>", lo.name))
                    && l.contains(&format!("<td>{raw_shown} (raw)</td>"))),
            "{html}"
        );
        let lc = &cmp.tests.iter().find(|t| t.baseline).unwrap().change;
        assert_eq!(lc.median_before, raw.value);
        assert!(lo_row(&text).contains(&raw_shown), "{text}");
        // The A/B table shows it too.
        let mut ab = r.clone();
        ab.ab = Some(crate::results::AbRun {
            knob: "ring".into(),
            a: "0".into(),
            b: "3".into(),
            b_tests: r.tests.clone(),
            order: Vec::new(),
            per_loop: false,
        });
        let text = crate::report::render_ab(&ab).unwrap();
        assert!(row(&text).contains(&shown), "{text}");
        // store() writes the same figure into the file's fields.
        let mut t = r.tests[1].clone();
        store(&mut t, 3_000_000);
        assert_eq!(t.net_median_cycles, Some(12_345.0));
        assert_eq!(t.median_ns, Some(4115.0));
    }
}

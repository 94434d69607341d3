//! Comparison of several separate runs a side (`exitlab compare BEFORE_DIR AFTER_DIR`).
//!
//! A host can hold a state that slows one kind of exit for longer than a whole run
//! (`docs/statistics.md`, 27 Nov 2026: episodes of 2-40 s on this project's development
//! host, in 62 of 200 short runs), and every round of that run shares it. One run's
//! rounds then cannot show how far a second run may differ, and two single runs of one
//! build are called different. With several runs a side, the runs are the independent
//! units (the upper level of Kalibera & Jones 2013): each run gives its central figure
//! per test ([`crate::central`], the same figure as in its own table), and the change is
//! judged on those figures ([`crate::verdict::runs_change`]), so the interval is as wide
//! as the runs of each side differ.
//!
//! Host states the empty loop shows are handled run by run: a run whose test figure
//! rests on rounds whose empty loop ran over [`RUNS_SPEED_FACTOR`] times the quickest
//! run's is in another state; the runs of the quick state are compared where each side
//! has one and there are [`MIN_RUNS`] in all, those of the slow state where not, and
//! otherwise there is no conclusion. The kept runs' empty loops must then lie within
//! [`HOST_STATE_LIMIT_PCT`] of each other between the sides, as for two single runs.

use crate::central::central;
use crate::compare::{
    host_and_config_warnings, median_state_loop, status_word, Comparison, NotCompared,
    TestComparison, HOST_STATE_LIMIT_PCT,
};
use crate::format::{fmt_cycles, fmt_pct_signed};
use crate::results::{Results, TestResult};
use crate::verdict::{runs_change, Pairing, Verdict, MIN_RUNS};

/// Default `--threshold` of `exitlab compare` with several runs a side, in percent. Their
/// interval holds the spread between runs, which two single runs' cannot see and which
/// [`crate::compare::DEFAULT_THRESHOLD_PCT`] (2 %) is there to absorb. Chosen from A/A
/// pairs and doctored copies of default runs on this project's development host
/// (`docs/statistics.md`, "Several runs a side", 27 Nov 2026).
pub const DEFAULT_RUNS_THRESHOLD_PCT: f64 = 1.0;

/// A run whose test figure rests on rounds whose empty loop ran over this many times the
/// quickest run's (median loop of those rounds) ran in another host state than the
/// quickest runs. Tighter than a round's [`crate::central::SLOW_STATE_FACTOR`] (1.2): a
/// run's median loop of one state is steady to ±0.5 % on this project's development host
/// (20.0-20.3k cycles in 100 of 120 runs), while runs at 4-15 % over it carried changes of
/// 13-23 % into exit figures of one build (`docs/statistics.md`, "Several runs a side").
pub const RUNS_SPEED_FACTOR: f64 = 1.05;

/// How far apart, in percent, the empty loops of the two sides' kept runs may lie with
/// 95 % confidence before [`compare_runs`] says the host ran at another speed and draws
/// no conclusion for the test. The runs' loops of one host speed agreed within ±0.5 % on
/// this project's development host, and sides 4-12 % apart carried changes of 13-23 %
/// into the exit figures of one build (`docs/statistics.md`, "Several runs a side"). As
/// small as the default threshold: a host speed within it moves no figure past it.
pub const RUNS_SPEED_LIMIT_PCT: f64 = 1.0;

/// How far from its side's median run figure, in percent, a run's figure of a test is
/// named in a warning: past the 5 % a run of one build was seen to stay within on this
/// project's development host outside the exit-specific host states.
pub const RUN_AT_ODDS_PCT: f64 = 5.0;

/// One run of a side: what it is called (its file) and its results.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    /// The name the warnings use (the file's path).
    pub name: &'a str,
    /// The run's results.
    pub results: &'a Results,
}

/// One test's figure in one run.
struct RunFigure<'a> {
    run: &'a str,
    value: f64,
    /// Median empty loop of the rounds the figure rests on.
    state_loop: Option<f64>,
    /// Half-width of the figure's 95 % interval from its own rounds, percent.
    half_width_pct: Option<f64>,
}

/// Compares the runs `before` with the runs `after` (at least one a side), test by
/// test, on each run's central figure. See the module documentation.
pub fn compare_runs(before: &[Run], after: &[Run], threshold_pct: f64) -> Comparison {
    let mut warnings = side_warnings(before, after);
    let names = test_names(before);
    let mut tests = Vec::new();
    let mut not_compared = Vec::new();
    let mut only_before = Vec::new();
    // Runs set aside as of another host state: (counts, tests), said once per counts.
    let mut set_aside_by: Vec<(String, Vec<String>)> = Vec::new();
    for name in &names {
        if !after.iter().any(|r| r.results.test(name).is_some()) {
            only_before.push(name.clone());
            continue;
        }
        for (side, label) in [(before, "before"), (after, "after")] {
            let missing: Vec<&str> = side
                .iter()
                .filter(|r| r.results.test(name).is_none())
                .map(|r| r.name)
                .collect();
            if !missing.is_empty() {
                warnings.push(format!(
                    "{name} is missing from {} of the {} {label} runs ({})",
                    missing.len(),
                    side.len(),
                    missing.join(", ")
                ));
            }
        }
        let (fb, sb) = figures(before, name);
        let (fa, sa) = figures(after, name);
        if fb.is_empty() || fa.is_empty() {
            not_compared.push(NotCompared {
                name: name.clone(),
                before: sb,
                after: sa,
            });
            continue;
        }
        let baseline = first_test(before, name).is_some_and(|t| t.baseline);
        let figure = first_test(before, name)
            .and_then(crate::central::figure_of)
            .map_or("net", |f| f.as_str());
        let (kb, ka, set_aside, state) = choose_runs(&fb, &fa);
        for (kept, label) in [(&kb, "before"), (&ka, "after")] {
            warnings.extend(at_odds(name, kept, label));
        }
        let values = |v: &[&RunFigure]| v.iter().map(|f| f.value).collect::<Vec<_>>();
        let mut change = runs_change(
            &values(&kb),
            &values(&ka),
            within_sd(kb.iter().chain(&ka)),
            threshold_pct,
        );
        [change.other_state_before, change.other_state_after] = set_aside;
        if let Some(why) = state
            .or_else(|| states_apart(&kb, &ka))
            .or_else(|| speeds_apart(&kb, &ka))
        {
            change.verdict = Verdict::NoConclusion(why);
        } else if !set_aside.iter().all(|n| *n == 0) {
            let counts = format!(
                "{} of {} before and {} of {} after",
                set_aside[0],
                fb.len(),
                set_aside[1],
                fa.len()
            );
            match set_aside_by.iter_mut().find(|(c, _)| *c == counts) {
                Some((_, names)) => names.push(name.clone()),
                None => set_aside_by.push((counts, vec![name.clone()])),
            }
        }
        tests.push(TestComparison {
            name: name.clone(),
            figure,
            change,
            baseline,
        });
    }
    for (counts, names) in set_aside_by {
        warnings.push(format!(
            "{counts} runs ran in another host state (the empty loop before the test's samples over {RUNS_SPEED_FACTOR}x the quickest run's) and were set aside for: {}",
            names.join(", ")
        ));
    }
    let only_after = test_names(after)
        .into_iter()
        .filter(|n| !before.iter().any(|r| r.results.test(n).is_some()))
        .collect();
    Comparison {
        tests,
        not_compared,
        only_before,
        only_after,
        warnings,
        threshold_pct,
        pairing: Pairing::Independent,
        per_loop: None,
        runs: Some([before.len(), after.len()]),
    }
}

/// Host and configuration differences: between the sides (their first runs), and
/// within each side (its first run against each other one), each said once.
fn side_warnings(before: &[Run], after: &[Run]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |w: String| {
        if !out.contains(&w) {
            out.push(w);
        }
    };
    if let (Some(b), Some(a)) = (before.first(), after.first()) {
        for w in host_and_config_warnings(b.results, a.results) {
            push(w);
        }
    }
    for (side, label) in [(before, "before"), (after, "after")] {
        let Some(first) = side.first() else { continue };
        for other in &side[1..] {
            for w in host_and_config_warnings(first.results, other.results) {
                // The pair's own words are "before" and "after": say which runs they are.
                push(format!(
                    "within the {label} runs, {} (\"before\") and {} (\"after\"): {w}",
                    first.name, other.name
                ));
            }
        }
    }
    out
}

/// The names of the tests of `runs`, in the order they first appear.
fn test_names(runs: &[Run]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for t in runs.iter().flat_map(|r| &r.results.tests) {
        if !names.contains(&t.name) {
            names.push(t.name.clone());
        }
    }
    names
}

fn first_test<'a>(runs: &[Run<'a>], name: &str) -> Option<&'a TestResult> {
    runs.iter().find_map(|r| r.results.test(name))
}

/// The figure of test `name` in each run of `side` that completed it, and the status
/// words of the runs that did not (for "not compared").
fn figures<'a>(side: &[Run<'a>], name: &str) -> (Vec<RunFigure<'a>>, String) {
    let mut out = Vec::new();
    let mut statuses: Vec<String> = Vec::new();
    for r in side {
        let Some(t) = r.results.test(name) else {
            continue;
        };
        match central(t) {
            Some(c) if c.value.is_finite() => out.push(RunFigure {
                run: r.name,
                value: c.value,
                state_loop: median_state_loop(t),
                half_width_pct: crate::variance::half_width_pct(t),
            }),
            _ => {
                let w = status_word(t);
                if !statuses.contains(&w) {
                    statuses.push(w);
                }
            }
        }
    }
    (out, statuses.join("/"))
}

/// The standard deviation, in log units, of one run's figure from its own rounds: the
/// root mean square over the runs of their intervals' half-widths / 1.96 (NaN where no
/// run has one).
fn within_sd<'r>(runs: impl Iterator<Item = &'r &'r RunFigure<'r>>) -> f64 {
    let sds: Vec<f64> = runs
        .filter_map(|f| f.half_width_pct)
        .map(|h| (1.0 + h / 100.0).ln() / 1.959_964)
        .collect();
    if sds.is_empty() {
        return f64::NAN;
    }
    (sds.iter().map(|s| s * s).sum::<f64>() / sds.len() as f64).sqrt()
}

/// Which runs of each side a test is judged on: those of the quick host state when each
/// side has one and there are [`MIN_RUNS`] in all, else those of the slow state, else
/// none (with the reason). Runs without an empty loop are always kept. Returns the kept
/// runs, how many were set aside on each side, and the reason for no conclusion.
#[allow(clippy::type_complexity)]
fn choose_runs<'r, 'a>(
    before: &'r [RunFigure<'a>],
    after: &'r [RunFigure<'a>],
) -> (
    Vec<&'r RunFigure<'a>>,
    Vec<&'r RunFigure<'a>>,
    [usize; 2],
    Option<String>,
) {
    let quickest = before
        .iter()
        .chain(after)
        .filter_map(|f| f.state_loop)
        .filter(|l| *l > 0.0)
        .fold(f64::INFINITY, f64::min);
    let slow = |f: &RunFigure| {
        f.state_loop
            .is_some_and(|l| l > RUNS_SPEED_FACTOR * quickest)
    };
    let pick = |side: &'r [RunFigure<'a>], want_slow: bool| -> Vec<&'r RunFigure<'a>> {
        side.iter()
            .filter(|f| f.state_loop.is_none() || slow(f) == want_slow)
            .collect()
    };
    let enough = |b: &[&RunFigure], a: &[&RunFigure]| {
        !b.is_empty() && !a.is_empty() && b.len() + a.len() >= MIN_RUNS
    };
    for want_slow in [false, true] {
        let (kb, ka) = (pick(before, want_slow), pick(after, want_slow));
        if enough(&kb, &ka) {
            let set_aside = [before.len() - kb.len(), after.len() - ka.len()];
            return (kb, ka, set_aside, None);
        }
    }
    let loops = |side: &[RunFigure]| {
        side.iter()
            .map(|f| f.state_loop.map_or("-".to_string(), fmt_cycles))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let why = format!(
        "the runs do not share a host state: the empty loop before its samples took {} cycles in the before runs and {} in the after runs (a run over {RUNS_SPEED_FACTOR}x the quickest is in another state), and no state has a run on each side and {MIN_RUNS} in all; re-run on a quiet host, or use bench --ab, whose rounds are paired",
        loops(before),
        loops(after)
    );
    let all = |side: &'r [RunFigure<'a>]| side.iter().collect::<Vec<_>>();
    (all(before), all(after), [0, 0], Some(why))
}

/// Why the kept runs of the two sides rest on different host states, if they do: the
/// medians of their empty loops lie more than [`HOST_STATE_LIMIT_PCT`] apart.
fn states_apart(before: &[&RunFigure], after: &[&RunFigure]) -> Option<String> {
    let median = |v: &[&RunFigure]| {
        let mut l: Vec<f64> = v.iter().filter_map(|f| f.state_loop).collect();
        l.sort_unstable_by(f64::total_cmp);
        (!l.is_empty()).then(|| crate::stats::percentile(&l, 50.0))
    };
    let (mb, ma) = (median(before)?, median(after)?);
    ((ma / mb - 1.0).abs() * 100.0 > HOST_STATE_LIMIT_PCT).then(|| {
        format!(
            "its figures rest on runs of different host states: the empty loop before its samples took {} cycles before and {} after (medians over the runs, {}); re-run both on a quiet host, or use bench --ab, whose rounds are paired",
            fmt_cycles(mb),
            fmt_cycles(ma),
            fmt_pct_signed((ma / mb - 1.0) * 100.0),
        )
    })
}

/// Why the kept runs of the two sides ran at different host speeds, if they did: their
/// empty loops (guest code without an exit, which no change to a VMM or to KVM's exit
/// handling moves) changed by more than [`RUNS_SPEED_LIMIT_PCT`] with 95 % confidence
/// ([`runs_change`] on the runs' loops). Within one host state the tests move in
/// proportion to the loop (`docs/statistics.md`, "Figures per empty loop"), so a host
/// speed that differs between the sides moves every figure with it.
fn speeds_apart(before: &[&RunFigure], after: &[&RunFigure]) -> Option<String> {
    let loops = |v: &[&RunFigure]| v.iter().filter_map(|f| f.state_loop).collect::<Vec<_>>();
    let (lb, la) = (loops(before), loops(after));
    let c = runs_change(&lb, &la, 0.0, RUNS_SPEED_LIMIT_PCT);
    matches!(c.verdict, Verdict::Slower | Verdict::Faster).then(|| {
        format!(
            "the host ran at another speed: the empty loop before its samples took {} cycles before and {} after (geometric means over the runs, {}, beyond the {RUNS_SPEED_LIMIT_PCT}% the runs of one host speed stay within, with 95% confidence); re-run both on a quiet host, or use bench --ab, whose rounds are paired",
            fmt_cycles(c.median_before),
            fmt_cycles(c.median_after),
            fmt_pct_signed(c.pct.unwrap_or(f64::NAN)),
        )
    })
}

/// A warning for each run of a side (three or more runs) whose figure of test `name`
/// lies over [`RUN_AT_ODDS_PCT`] from the median of that side's runs. Such a run is kept:
/// with three runs a side, the odd one out is as often the one in the usual state (two
/// of three runs of one side in a host state of one exit were seen on this project's
/// development host, and setting the third aside called the same build 14 % faster).
fn at_odds(name: &str, kept: &[&RunFigure], label: &str) -> Vec<String> {
    if kept.len() < 3 {
        return Vec::new();
    }
    let mut v: Vec<f64> = kept.iter().map(|f| f.value).collect();
    v.sort_unstable_by(f64::total_cmp);
    let median = crate::stats::percentile(&v, 50.0);
    if median <= 0.0 {
        return Vec::new();
    }
    kept.iter()
        .filter_map(|f| {
            let off = (f.value / median - 1.0) * 100.0;
            (off.abs() > RUN_AT_ODDS_PCT).then(|| {
                format!(
                    "{name}: the {label} run {} is {} from the median of the {label} runs ({} against {} cycles), a host state of this exit that lasted the run, or a change in some runs only; it widens the interval",
                    f.run,
                    fmt_pct_signed(off),
                    fmt_cycles(f.value),
                    fmt_cycles(median)
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::sample_results;
    use crate::results::RoundFigure;

    /// A run of the sample file whose loop_overhead, cpuid and inl_from_qemu have 12
    /// rounds each: the empty loop at `speed` x 11,000 cycles, cpuid at `cpuid` cycles and
    /// inl_from_qemu at 24,000 (both x `speed`), each round within ±0.5 %.
    fn run(cpuid: f64, speed: f64) -> Results {
        let mut r = sample_results();
        let wobble = [0.0, 0.004, -0.003, 0.002, -0.005, 0.001];
        let rounds = |level: f64| -> Vec<RoundFigure> {
            (0..12)
                .map(|i| {
                    let w = 1.0 + wobble[i % wobble.len()];
                    RoundFigure {
                        samples: 100,
                        median: (level + 11_000.0) * speed * w,
                        net_median: (level > 0.0).then_some(level * speed * w),
                        loop_median: Some(11_000.0 * speed),
                        ..Default::default()
                    }
                })
                .collect()
        };
        for t in &mut r.tests {
            match t.name.as_str() {
                "loop_overhead" => t.rounds = rounds(0.0),
                "cpuid" => t.rounds = rounds(cpuid),
                "inl_from_qemu" => t.rounds = rounds(24_000.0),
                _ => {}
            }
        }
        r
    }

    fn side<'a>(names: &'a [String], runs: &'a [Results]) -> Vec<Run<'a>> {
        names
            .iter()
            .zip(runs)
            .map(|(name, results)| Run { name, results })
            .collect()
    }

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("{prefix}/run{i}.json")).collect()
    }

    fn test_of<'c>(c: &'c Comparison, name: &str) -> &'c TestComparison {
        c.tests.iter().find(|t| t.name == name).unwrap()
    }

    #[test]
    fn a_change_in_every_run_is_named_with_an_interval_that_holds_it() {
        let before: Vec<Results> = [3000.0, 3030.0, 2985.0].map(|c| run(c, 1.0)).into();
        let after: Vec<Results> = [3150.0, 3175.0, 3140.0].map(|c| run(c, 1.0)).into();
        let (nb, na) = (names("b", 3), names("a", 3));
        let c = compare_runs(&side(&nb, &before), &side(&na, &after), 2.0);
        let cpuid = &test_of(&c, "cpuid").change;
        assert_eq!(cpuid.verdict, Verdict::Slower, "{cpuid:?}");
        let [lo, hi] = cpuid.ci95_pct.unwrap();
        assert!(lo < 5.0 && 5.0 < hi, "{lo}..{hi}");
        assert_eq!((cpuid.rounds_before, cpuid.rounds_after), (3, 3));
        assert_eq!(c.regressions(), vec!["cpuid"]);
        assert_eq!(
            test_of(&c, "inl_from_qemu").change.verdict,
            Verdict::NoDetectableChange
        );
        assert_eq!(c.runs, Some([3, 3]));
        let text = crate::compare::render_comparison(&c, ["before", "after"]);
        assert!(
            text.contains("geometric mean of its runs' (3 before, 3 after)"),
            "{text}"
        );
        assert!(
            text.contains("Student's t over the runs' figures"),
            "{text}"
        );
        assert!(text.contains(" runs "), "{text}");
        assert!(
            text.contains("slower beyond 2.0% with 95% confidence: cpuid"),
            "{text}"
        );
        // Same build: no call, and nothing set aside or at odds.
        let c = compare_runs(&side(&nb, &before), &side(&nb, &before), 2.0);
        assert!(c.regressions().is_empty() && c.warnings.is_empty(), "{c:?}");
    }

    #[test]
    fn a_run_at_odds_with_its_side_is_named_and_widens_the_interval_instead_of_an_alarm() {
        // One after run holds cpuid 30 % slower for its whole length (a host state of
        // that exit): two single runs would be called different; three a side are not.
        let before: Vec<Results> = [3000.0, 3015.0, 2990.0].map(|c| run(c, 1.0)).into();
        let after: Vec<Results> = [3005.0, 3900.0, 2995.0].map(|c| run(c, 1.0)).into();
        let (nb, na) = (names("b", 3), names("a", 3));
        let c = compare_runs(&side(&nb, &before), &side(&na, &after), 2.0);
        let cpuid = &test_of(&c, "cpuid").change;
        assert_eq!(cpuid.verdict, Verdict::NoDetectableChange, "{cpuid:?}");
        assert!(cpuid.ci95_pct.unwrap()[1] > 20.0, "{cpuid:?}");
        let odd: Vec<&String> = c
            .warnings
            .iter()
            .filter(|w| w.contains("a/run2.json"))
            .collect();
        assert_eq!(odd.len(), 1, "{:?}", c.warnings);
        assert!(
            odd[0].starts_with("cpuid: the after run a/run2.json is +29.8%"),
            "{odd:?}"
        );
        // The single-run comparison of the odd run calls it.
        let single = crate::compare::compare(&before[0], &after[1], 2.0);
        let cpuid = single.tests.iter().find(|t| t.name == "cpuid").unwrap();
        assert_eq!(cpuid.change.verdict, Verdict::Slower);
    }

    #[test]
    fn runs_of_another_host_state_or_speed_are_set_aside_or_get_no_conclusion_and_say_why() {
        // The second before run ran wholly in a state 1.5x as slow.
        let before = vec![run(3000.0, 1.0), run(3000.0, 1.5), run(3010.0, 1.0)];
        let after = vec![run(3005.0, 1.0), run(2995.0, 1.0), run(3000.0, 1.0)];
        let (nb, na) = (names("b", 3), names("a", 3));
        let c = compare_runs(&side(&nb, &before), &side(&na, &after), 2.0);
        let cpuid = &test_of(&c, "cpuid").change;
        assert_eq!(cpuid.verdict, Verdict::NoDetectableChange, "{cpuid:?}");
        assert_eq!((cpuid.rounds_before, cpuid.other_state_before), (2, 1));
        assert!(
            (cpuid.median_before / 3005.0 - 1.0).abs() < 0.01,
            "{cpuid:?}"
        );
        let said: Vec<&String> = c
            .warnings
            .iter()
            .filter(|w| w.contains("set aside for"))
            .collect();
        assert_eq!(said.len(), 1, "{:?}", c.warnings);
        assert!(
            said[0].starts_with("1 of 3 before and 0 of 3 after runs ran in another host state")
                && said[0].ends_with("loop_overhead, cpuid, inl_from_qemu"),
            "{said:?}"
        );
        // Every before run quick, every after run slow: no state has a run on each side.
        let slow = vec![run(3000.0, 1.5), run(3000.0, 1.5)];
        let ns = names("s", 2);
        let c = compare_runs(&side(&nb, &after), &side(&ns, &slow), 2.0);
        let cpuid = &test_of(&c, "cpuid").change;
        assert!(
            matches!(&cpuid.verdict, Verdict::NoConclusion(why) if why.starts_with("the runs do not share a host state")),
            "{cpuid:?}"
        );
        assert!(c.regressions().is_empty());
        // Every run in one state, the after runs' loops 3 % slower than the before runs'
        // (within the 5 % of one state), and the figures with them: another host speed.
        let faster = vec![run(3000.0, 1.0), run(3000.0, 1.002), run(3000.0, 0.998)];
        let slower = vec![run(3000.0, 1.03), run(3000.0, 1.032), run(3000.0, 1.028)];
        let c = compare_runs(&side(&nb, &faster), &side(&na, &slower), 0.0);
        let cpuid = &test_of(&c, "cpuid").change;
        assert!(
            matches!(&cpuid.verdict, Verdict::NoConclusion(why) if why.starts_with("the host ran at another speed: the empty loop before its samples took 11,000 cycles before and 11,330 after")),
            "{cpuid:?}"
        );
        assert_eq!((cpuid.other_state_before, cpuid.other_state_after), (0, 0));
        // Slow runs both sides, a quick one too few: the slow runs are compared.
        let mixed = vec![run(3000.0, 1.5), run(3000.0, 1.0)];
        let c = compare_runs(&side(&ns, &slow), &side(&ns, &mixed), 2.0);
        let cpuid = &test_of(&c, "cpuid").change;
        assert_eq!(
            (cpuid.rounds_before, cpuid.rounds_after),
            (2, 1),
            "{cpuid:?}"
        );
        assert_eq!(cpuid.other_state_after, 1);
    }

    #[test]
    fn a_test_missing_from_a_run_is_said_and_a_side_without_a_figure_is_not_compared() {
        let before = vec![run(3000.0, 1.0), run(3010.0, 1.0), run(2990.0, 1.0)];
        let mut after = vec![run(3000.0, 1.0), run(3010.0, 1.0)];
        after[1].tests.retain(|t| t.name != "inl_from_qemu");
        let (nb, na) = (names("b", 3), names("a", 2));
        let c = compare_runs(&side(&nb, &before), &side(&na, &after), 2.0);
        assert!(
            c.warnings.contains(
                &"inl_from_qemu is missing from 1 of the 2 after runs (a/run2.json)".to_string()
            ),
            "{:?}",
            c.warnings
        );
        assert_eq!(test_of(&c, "inl_from_qemu").change.rounds_after, 1);
        // vmcall was skipped in every run: not compared, with the status words.
        assert_eq!(c.not_compared[0].name, "vmcall");
        assert_eq!(c.not_compared[0].before, "skipped");
        // A configuration that differs within a side is said with the runs' names.
        let mut odd = run(3000.0, 1.0);
        odd.config.rounds += 1;
        let before = vec![run(3000.0, 1.0), odd];
        let c = compare_runs(&side(&nb, &before), &side(&na, &after), 2.0);
        assert!(
            c.warnings.iter().any(|w| w.starts_with(
                "within the before runs, b/run1.json (\"before\") and b/run2.json (\"after\"): config rounds differs"
            )),
            "{:?}",
            c.warnings
        );
    }
}

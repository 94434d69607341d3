//! Every number the statistical model uses, in one place, and the table of them that
//! `docs/model.md` carries (a test checks that the page shows exactly this table).
//!
//! The model itself is stated in one paragraph on that page: what a unit of evidence is
//! in each design, how its figure and the change are taken, the one interval procedure
//! and the one threshold that turns it into a verdict. Nothing here sets data aside.

/// δ, the one threshold (percent): a change is **slower** or **faster** when it is beyond
/// ±δ and its 95 % interval excludes no change, and **equivalent** when the whole interval
/// lies within ±δ. With [`AB_TARGET_HALF_WIDTH_PCT`] it makes the default A/B design find
/// a 2.5 % change (the seeds' smallest effect) 80 % of the time and call an unchanged test
/// equivalent 80 % of the time.
pub const THRESHOLD_PCT: f64 = 2.0;

/// Confidence of every interval exitlab shows.
pub const CONFIDENCE: f64 = 0.95;

/// Family-wise error of the gate (exit 4), one-sided: Holm's step-down over the tests a
/// gate judges, so that an unchanged build fires the gate at most this often whatever
/// the number of tests. With one test it is the verdict's own level (a 95 % interval
/// above no change).
pub const GATE_ALPHA: f64 = (1.0 - CONFIDENCE) / 2.0;

/// Bootstrap resamples of the units behind every standard error.
pub const RESAMPLES: usize = 2000;

/// Fewest units (rounds of one run, or pairs of an A/B run) a figure's interval or a
/// change needs; fewer give no verdict.
pub const MIN_UNITS: usize = 5;

/// Fewest runs a side for a comparison of runs; fewer give no verdict.
pub const MIN_RUNS: usize = 3;

/// The power the minimum detectable change is quoted at: the smallest true change the
/// design calls slower this often.
pub const POWER: f64 = 0.8;

/// Rounds of a plain `bench` (each test in this many fresh VMs).
pub const DEFAULT_ROUNDS: u32 = 24;

/// Units (rounds, or pairs) of the pilot a planned design takes before it fixes how many
/// units each test gets.
pub const PILOT_UNITS: usize = 10;

/// Fewest units a planned design gives any test, the pilot included, so that every
/// test's interval rests on at least this many pairs or rounds beyond what chose the plan.
pub const MIN_PLANNED_UNITS: usize = 20;

/// Half-width (percent) of each test's 95 % interval of the change that `bench --ab`
/// plans for when not given `--rounds` or `--precision`.
pub const AB_TARGET_HALF_WIDTH_PCT: f64 = 1.2;

/// Wall-time budget (seconds) of `bench --ab`'s default planned design, the pilot
/// included.
pub const AB_BUDGET_SECONDS: f64 = 25.0;

/// Wall-time budget (seconds) of `bench --precision` when not given `--budget`.
pub const PRECISION_BUDGET_SECONDS: f64 = 60.0;

/// Diagnostic: a round whose figure lies more than this many robust standard deviations
/// (1.4826 × MAD, at least [`SPREAD_FLOOR`] of the median) from its test's median round
/// is named an outlier round. Reported only.
pub const OUTLIER_K: f64 = 5.0;

/// Diagnostic: the robust standard deviation behind [`OUTLIER_K`] is at least this
/// share of the median.
pub const SPREAD_FLOOR: f64 = 0.01;

/// Diagnostic: a round whose empty loop (guest code, no exit) ran more than this many
/// times its test's median loop ran at another host speed. Reported only.
pub const HOST_SPEED_FACTOR: f64 = 1.2;

/// Diagnostic: two sides (files, runs or the halves of an A/B run) whose empty loops
/// differ by more than this (percent) ran at another host speed. Reported only.
pub const HOST_SPEED_PCT: f64 = 3.0;

/// Diagnostic: a run whose figure lies more than this (percent) from its side's median
/// run is named an odd run. Reported only.
pub const ODD_RUN_PCT: f64 = 5.0;

/// Diagnostic: a test's rounds fall into groups far apart when its sorted round figures
/// have a gap of more than this factor, with at least [`GROUP_MIN_SHARE`] of the rounds
/// on each side of it. Reported only.
pub const GROUP_GAP_FACTOR: f64 = 1.5;

/// Diagnostic: the smaller of two groups of rounds holds at least this share of them.
pub const GROUP_MIN_SHARE: f64 = 0.1;

/// One named constant of the model: its name, its value as the page shows it, and what
/// it is.
#[derive(Debug, Clone, Copy)]
pub struct Constant {
    /// The name in this module.
    pub name: &'static str,
    /// The value, formatted.
    pub value: &'static str,
    /// What it decides, in a few words.
    pub meaning: &'static str,
}

/// Every constant of the model, in the order the page lists them. A unit test checks
/// each value against the constant it names.
pub const CONSTANTS: &[Constant] = &[
    Constant {
        name: "THRESHOLD_PCT",
        value: "2 %",
        meaning: "δ: slower/faster beyond it; equivalent within it",
    },
    Constant {
        name: "CONFIDENCE",
        value: "95 %",
        meaning: "every interval",
    },
    Constant {
        name: "GATE_ALPHA",
        value: "2.5 %",
        meaning: "family-wise error of the gate, one-sided, Holm",
    },
    Constant {
        name: "RESAMPLES",
        value: "2,000",
        meaning: "bootstrap resamples behind every standard error",
    },
    Constant {
        name: "MIN_UNITS",
        value: "5",
        meaning: "fewest rounds or pairs for a verdict",
    },
    Constant {
        name: "MIN_RUNS",
        value: "3",
        meaning: "fewest runs a side for a verdict",
    },
    Constant {
        name: "POWER",
        value: "80 %",
        meaning: "the minimum detectable change is found this often",
    },
    Constant {
        name: "DEFAULT_ROUNDS",
        value: "24",
        meaning: "rounds of a plain bench",
    },
    Constant {
        name: "PILOT_UNITS",
        value: "10",
        meaning: "units of a planned design's pilot",
    },
    Constant {
        name: "MIN_PLANNED_UNITS",
        value: "20",
        meaning: "fewest units a planned design gives a test",
    },
    Constant {
        name: "AB_TARGET_HALF_WIDTH_PCT",
        value: "1.2 %",
        meaning: "half-width bench --ab plans for by default",
    },
    Constant {
        name: "AB_BUDGET_SECONDS",
        value: "25 s",
        meaning: "budget of bench --ab's default design",
    },
    Constant {
        name: "PRECISION_BUDGET_SECONDS",
        value: "60 s",
        meaning: "budget of bench --precision by default",
    },
    Constant {
        name: "OUTLIER_K",
        value: "5",
        meaning: "sign: an outlier round, in robust SDs from the median",
    },
    Constant {
        name: "SPREAD_FLOOR",
        value: "1 %",
        meaning: "sign: least robust SD, share of the median",
    },
    Constant {
        name: "HOST_SPEED_FACTOR",
        value: "1.2",
        meaning: "sign: a round's empty loop over this × the test's median",
    },
    Constant {
        name: "HOST_SPEED_PCT",
        value: "3 %",
        meaning: "sign: two sides' empty loops this far apart",
    },
    Constant {
        name: "ODD_RUN_PCT",
        value: "5 %",
        meaning: "sign: a run this far from its side's median run",
    },
    Constant {
        name: "GROUP_GAP_FACTOR",
        value: "1.5",
        meaning: "sign: rounds in groups this far apart",
    },
    Constant {
        name: "GROUP_MIN_SHARE",
        value: "10 %",
        meaning: "sign: the smaller group holds at least this share",
    },
];

/// The constants as the Markdown table `docs/model.md` carries.
pub fn constants_table() -> String {
    let mut out = String::from("| constant | value | what it decides |\n|---|--:|---|\n");
    for c in CONSTANTS {
        out.push_str(&format!("| `{}` | {} | {} |\n", c.name, c.value, c.meaning));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value each constant of [`CONSTANTS`] shows, from the constant itself.
    fn shown(name: &str) -> String {
        let pct = |v: f64| {
            format!(
                "{} %",
                crate::format::fmt_pct_plain(v).trim_end_matches('%')
            )
        };
        match name {
            "THRESHOLD_PCT" => pct(THRESHOLD_PCT),
            "CONFIDENCE" => pct(CONFIDENCE * 100.0),
            "GATE_ALPHA" => pct(GATE_ALPHA * 100.0),
            "RESAMPLES" => crate::format::fmt_cycles(RESAMPLES as f64),
            "MIN_UNITS" => MIN_UNITS.to_string(),
            "MIN_RUNS" => MIN_RUNS.to_string(),
            "POWER" => pct(POWER * 100.0),
            "DEFAULT_ROUNDS" => DEFAULT_ROUNDS.to_string(),
            "PILOT_UNITS" => PILOT_UNITS.to_string(),
            "MIN_PLANNED_UNITS" => MIN_PLANNED_UNITS.to_string(),
            "AB_TARGET_HALF_WIDTH_PCT" => pct(AB_TARGET_HALF_WIDTH_PCT),
            "AB_BUDGET_SECONDS" => format!("{AB_BUDGET_SECONDS} s"),
            "PRECISION_BUDGET_SECONDS" => format!("{PRECISION_BUDGET_SECONDS} s"),
            "OUTLIER_K" => OUTLIER_K.to_string(),
            "SPREAD_FLOOR" => pct(SPREAD_FLOOR * 100.0),
            "HOST_SPEED_FACTOR" => HOST_SPEED_FACTOR.to_string(),
            "HOST_SPEED_PCT" => pct(HOST_SPEED_PCT),
            "ODD_RUN_PCT" => pct(ODD_RUN_PCT),
            "GROUP_GAP_FACTOR" => GROUP_GAP_FACTOR.to_string(),
            "GROUP_MIN_SHARE" => pct(GROUP_MIN_SHARE * 100.0),
            other => panic!("{other} is in CONSTANTS but not checked here"),
        }
    }

    #[test]
    fn the_table_shows_each_constant_at_its_value() {
        for c in CONSTANTS {
            assert_eq!(c.value, shown(c.name), "{}", c.name);
        }
    }

    #[test]
    fn the_model_page_carries_the_constants_table() {
        let page = include_str!("../../../../docs/model.md");
        let table = constants_table();
        assert!(
            page.contains(&table),
            "docs/model.md must carry the constants table exactly as the code has it:\n{table}"
        );
    }
}

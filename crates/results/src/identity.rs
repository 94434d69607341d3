//! What identifies a run and what its figures are, for every renderer: the run's
//! stable id (the `run` label of OpenMetrics, a row of the HTML page), which does not
//! depend on how its file is named, and whether its host's exit costs are hardware
//! figures.

use crate::format::host_str;
use crate::results::Results;

/// 64-bit FNV-1a over `bytes`, continued from `h`.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The stable identity of a run, whatever its file is called (`./a.json`, `a.json`,
/// `/abs/path/a.json` and a copy of it are one run): its start time in UTC
/// (`20260509T072933Z`), a `-`, then 12 hex digits of a 64-bit FNV-1a hash of what makes
/// the run that run: its start and wall time, the exitlab version and git revision, the
/// host name, the command line, and every test's name, status, samples and per-round
/// medians (both sides of an A/B run). Two distinct runs differ there; so does a run
/// whose figures were edited by hand.
pub fn run_id(r: &Results) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325;
    let mut add = |bytes: &[u8]| {
        h = fnv1a(h, bytes);
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        h = fnv1a(h, &[0xff]);
    };
    add(&r.started_at_unix.to_le_bytes());
    add(&r.wall_seconds.to_bits().to_le_bytes());
    add(r.tool.version.as_bytes());
    if let Some(p) = &r.provenance {
        add(p.git_revision.as_bytes());
        add(p.hostname.as_deref().unwrap_or("").as_bytes());
        for arg in &p.command_line {
            add(arg.as_bytes());
        }
    }
    let b_tests = r.ab.iter().flat_map(|ab| &ab.b_tests);
    for t in r.tests.iter().chain(b_tests) {
        add(t.name.as_bytes());
        add(t.status.word().as_bytes());
        add(&t.samples.to_le_bytes());
        for round in &t.rounds {
            add(&round.median.to_bits().to_le_bytes());
            add(&round.net_median.unwrap_or(f64::NAN).to_bits().to_le_bytes());
        }
    }
    const STAMP: &[time::format_description::FormatItem<'static>] =
        time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let started = i64::try_from(r.started_at_unix)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(STAMP).ok())
        .unwrap_or_else(|| r.started_at_unix.to_string());
    format!("{started}-{:012x}", h & 0xffff_ffff_ffff)
}

/// What a host's figures are: its kind (the survey's `virtualization.kind`) and
/// whether exit costs measured there are hardware figures: `yes` on bare metal, `no`
/// where every report carries [`crate::format::caveat`], `unknown` where the survey does
/// not say.
pub fn host_kind(r: &Results) -> (String, &'static str) {
    let kind = host_str(&r.host, "/virtualization/kind");
    let hardware = match (kind, crate::format::caveat(&r.host)) {
        (None, _) => "unknown",
        (Some(_), Some(_)) => "no",
        (Some(_), None) => "yes",
    };
    (kind.unwrap_or("unknown").to_string(), hardware)
}

//! Did-you-mean for names the user typed: the closest known name to one that is not
//! known (a test, a knob, a built-in kernel), by edit distance (`strsim`, which clap's
//! own suggestions use too).

/// The known name closest to `name`, when one is close enough to be what was meant:
/// their normalized Damerau-Levenshtein similarity (1 − edits / length of the longer,
/// a swap of two neighbours counting as one edit, case ignored) is at least 0.7, i.e.
/// about one edit in three characters; failing that, a known name of 3 or more
/// characters that `name` starts with (`apic-mode` for `apic`). The first of equally
/// close names.
pub fn closest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    const CLOSE: f64 = 0.7;
    let name = name.trim().to_lowercase();
    let mut best: Option<(f64, &str)> = None;
    for k in known {
        let lower = k.to_lowercase();
        let mut score = strsim::normalized_damerau_levenshtein(&name, &lower);
        if score < CLOSE && lower.len() >= 3 && name.starts_with(&lower) {
            score = CLOSE;
        }
        if score >= CLOSE && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, k));
        }
    }
    best.map(|(_, k)| k)
}

/// `" (did you mean 'NAME'?)"` for the closest known name, or nothing.
pub fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    closest(name, known).map_or(String::new(), |k| format!(" (did you mean '{k}'?)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_near_miss_gets_the_closest_name_and_nonsense_gets_none() {
        let tests = ["cpuid", "inl_from_user", "inl_from_kernel", "outl_to_user"];
        assert_eq!(closest("inl_from_usr", tests), Some("inl_from_user"));
        assert_eq!(closest("INL_FROM_USER ", tests), Some("inl_from_user"));
        assert_eq!(closest("cpudi", tests), Some("cpuid"));
        assert_eq!(closest("outl_to_usr", tests), Some("outl_to_user"));
        assert_eq!(closest("nosuchtest", tests), None);
        assert_eq!(closest("", tests), None);
        let knobs = ["ring", "pin", "apic", "cpus", "pv-ipi", "irqchip"];
        assert_eq!(closest("apci", knobs), Some("apic"));
        assert_eq!(closest("cpu", knobs), Some("cpus"));
        assert_eq!(closest("pv_ipi", knobs), Some("pv-ipi"));
        assert_eq!(closest("volume", knobs), None);
        assert_eq!(closest("apic-mode", knobs), Some("apic"));
        assert_eq!(closest("ringo-star", knobs), Some("ring"));
        assert_eq!(did_you_mean("irqchp", knobs), " (did you mean 'irqchip'?)");
        assert_eq!(did_you_mean("volume", knobs), "");
    }
}

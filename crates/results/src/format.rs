//! The number, date and table formats every rendering shares: cycles with thousands
//! separators, nanoseconds, signed percentages, UTC dates, fixed-width tables, and the
//! host block's strings.

/// Column alignment in [`layout`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Padded on the right.
    Left,
    /// Padded on the left (numbers).
    Right,
}

/// The widest line a terminal report prints: longer lines are wrapped ([`wrap`]).
pub const MAX_LINE: usize = 160;

/// `text` with every line longer than `width` characters wrapped at spaces, the
/// continuation lines indented two spaces more than the line they continue (a word
/// longer than the width stays whole). Lines that fit are left as they are.
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        if body.chars().count() <= width {
            out.push_str(line);
            continue;
        }
        let indent = body.len() - body.trim_start().len();
        let cont = " ".repeat(indent + 2);
        let mut cur = String::new();
        let mut first = true;
        for word in body.trim_start().split(' ') {
            let lead = if first {
                " ".repeat(indent)
            } else {
                cont.clone()
            };
            if cur.is_empty() {
                cur = format!("{lead}{word}");
            } else if cur.chars().count() + 1 + word.chars().count() <= width {
                cur.push(' ');
                cur.push_str(word);
            } else {
                out.push_str(&cur);
                out.push('\n');
                first = false;
                cur = format!("{cont}{word}");
            }
        }
        out.push_str(&cur);
        out.push_str(nl);
    }
    out
}

/// The caveat every report carries on a host whose figures are not hardware figures
/// (nested, or a paravirtual KVM), from the host survey; `None` on bare metal or when
/// the survey does not say.
pub fn caveat(host: &serde_json::Value) -> Option<String> {
    let kind = host_str(host, "/virtualization/kind")?;
    let what = match kind {
        "bare_metal" => return None,
        "nested" => "this host is a VM (nested hardware virtualization)",
        "paravirtual" => "KVM here is paravirtual (kvm_pvm): guest ring 0 is emulated",
        "nested_paravirtual" => {
            "this host is a VM and its KVM is paravirtual (kvm_pvm): guest ring 0 is emulated"
        }
        other => return Some(format!("not hardware figures: virtualization {other}")),
    };
    Some(format!("not hardware figures: {what}"))
}

/// Lays out a fixed-width table: a header row, a rule, then the rows.
/// Columns are separated by two spaces; trailing spaces are trimmed.
pub fn layout(headers: &[&str], aligns: &[Align], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, cell) in cells.enumerate() {
            let width = widths.get(i).copied().unwrap_or(0);
            let pad = width.saturating_sub(cell.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if aligns.get(i) == Some(&Align::Right) {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                s.push_str(&" ".repeat(pad));
            }
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
        s
    };
    let mut out = line(&mut headers.iter().copied());
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    out.push_str(&line(&mut rule.iter().map(String::as_str)));
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// A number of cycles as a whole number with thousands separators;
/// `-` for NaN or infinite values.
pub fn fmt_cycles(value: f64) -> String {
    if !value.is_finite() {
        return "-".to_string();
    }
    let rounded = value.round();
    let negative = rounded < 0.0;
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if negative {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration in nanoseconds: two decimals below 10, one below 1000,
/// whole numbers with separators above; `-` for non-finite values.
pub fn fmt_ns(value: f64) -> String {
    if !value.is_finite() {
        "-".to_string()
    } else if value.abs() < 10.0 {
        format!("{value:.2}")
    } else if value.abs() < 1000.0 {
        format!("{value:.1}")
    } else {
        fmt_cycles(value)
    }
}

/// A signed percentage with one decimal, e.g. `+4.2%`.
pub fn fmt_pct_signed(value: f64) -> String {
    if value.is_finite() {
        format!("{value:+.1}%")
    } else {
        "-".to_string()
    }
}

/// A percentage with three significant digits (at least two decimals) and no trailing
/// zeros, e.g. `1.4%`, `0.8%`, `2%`, `0.004%`, `71.47%`.
pub fn fmt_pct_plain(value: f64) -> String {
    if !value.is_finite() {
        return "-".to_string();
    }
    let magnitude = if value == 0.0 {
        0.0
    } else {
        value.abs().log10().floor()
    };
    let decimals = (2.0 - magnitude).clamp(2.0, 12.0) as usize;
    let s = format!("{value:.decimals$}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}%")
}

/// A signed number of cycles with thousands separators, e.g. `+1,234` or `-52`.
pub fn fmt_cycles_signed(value: f64) -> String {
    if value.is_finite() && value >= 0.0 {
        format!("+{}", fmt_cycles(value))
    } else {
        fmt_cycles(value)
    }
}

/// A Unix time as `YYYY-MM-DD HH:MM:SS UTC` (through the `time` crate); a time beyond
/// what it represents (year 9999) is shown as seconds since the epoch.
pub fn fmt_unix_utc(secs: u64) -> String {
    const FORMAT: &[time::format_description::FormatItem<'static>] =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(FORMAT).ok())
        .unwrap_or_else(|| format!("{secs} s after 1970-01-01 UTC"))
}

/// A string from the host block at a JSON pointer, if present and non-empty.
pub fn host_str<'a>(host: &'a serde_json::Value, pointer: &str) -> Option<&'a str> {
    host.pointer(pointer)
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_lines_are_wrapped_at_spaces_with_a_hanging_indent_and_short_ones_kept() {
        let long = format!("  {}", ["word"; 60].join(" "));
        let text = format!("short\n{long}\nlast");
        let w = super::wrap(&text, 40);
        let lines: Vec<&str> = w.lines().collect();
        assert_eq!(lines[0], "short");
        assert_eq!(*lines.last().unwrap(), "last");
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{w}");
        assert!(
            lines[1].starts_with("  word") && lines[2].starts_with("    word"),
            "{w}"
        );
        assert_eq!(
            w.split_whitespace().count(),
            text.split_whitespace().count()
        );
        // A word longer than the width stays whole, on a line of its own.
        let one = "x".repeat(50);
        assert_eq!(
            super::wrap(&format!("a {one} b"), 10),
            format!("a\n  {one}\n  b")
        );
    }

    #[test]
    fn the_caveat_names_nested_and_paravirtual_hosts_and_not_bare_metal() {
        let host = |kind: &str| serde_json::json!({"virtualization": {"kind": kind}});
        assert_eq!(super::caveat(&host("bare_metal")), None);
        assert!(super::caveat(&host("nested_paravirtual"))
            .unwrap()
            .starts_with("not hardware figures: "));
        assert!(super::caveat(&host("paravirtual"))
            .unwrap()
            .contains("kvm_pvm"));
        assert_eq!(super::caveat(&serde_json::json!({})), None);
    }

    use super::*;

    #[test]
    fn number_formats() {
        for (v, s) in [
            (1.399_18, "1.4"),
            (0.8, "0.8"),
            (2.0, "2"),
            (71.468, "71.47"),
            (0.004, "0.004"),
            (0.0001, "0.0001"),
            (0.0, "0"),
            (150.0, "150"),
        ] {
            assert_eq!(fmt_pct_plain(v), format!("{s}%"), "{v}");
        }
        assert_eq!(fmt_pct_plain(f64::NAN), "-");
        assert_eq!(fmt_cycles(0.0), "0");
        assert_eq!(fmt_cycles(999.4), "999");
        assert_eq!(fmt_cycles(999.5), "1,000");
        assert_eq!(fmt_cycles(1234567.0), "1,234,567");
        assert_eq!(fmt_cycles(-1234.0), "-1,234");
        assert_eq!(fmt_cycles(-0.2), "0");
        assert_eq!(fmt_cycles(f64::NAN), "-");
        assert_eq!(fmt_cycles(1e20), "100,000,000,000,000,000,000");
        assert_eq!(fmt_ns(1.23456), "1.23");
        assert_eq!(fmt_ns(123.456), "123.5");
        assert_eq!(fmt_ns(12345.6), "12,346");
        assert_eq!(fmt_ns(f64::INFINITY), "-");
        assert_eq!(fmt_pct_signed(4.25), "+4.2%");
        assert_eq!(fmt_pct_signed(-0.04), "-0.0%");
    }

    #[test]
    fn dates() {
        assert_eq!(fmt_unix_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(fmt_unix_utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(fmt_unix_utc(951_782_400), "2000-02-29 00:00:00 UTC");
        // Must not panic on absurd values.
        let _ = fmt_unix_utc(u64::MAX);
    }

    #[test]
    fn layout_aligns_columns() {
        let t = layout(
            &["a", "num"],
            &[Align::Left, Align::Right],
            &[
                vec!["long name".into(), "1".into()],
                vec!["x".into(), "1,000".into()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "a            num");
        assert_eq!(lines[1], "---------  -----");
        assert_eq!(lines[2], "long name      1");
        assert_eq!(lines[3], "x          1,000");
    }
}

//! The host report (the survey of `exitlab-host`, which the lab completes with what KVM
//! itself reports), rendered as text for `exitlab host`, as JSON for `exitlab host
//! --json` and every results file, and summed up in the notes and flags a benchmark run
//! needs (not hardware figures; phases off on an unstable TSC).

use std::fmt::Write as _;

use exitlab_host::HostReport;

/// The report as JSON (it carries its `schema_version`).
pub fn to_json(report: &HostReport) -> serde_json::Value {
    serde_json::to_value(report).unwrap_or(serde_json::Value::Null)
}

/// Why phase figures (exit leg, handling, entry leg: guest and host stamps compared)
/// cannot be trusted on this host, if they cannot.
pub fn phases_off_reason(report: &HostReport) -> Option<String> {
    (!report.tsc.stable).then(|| {
        format!(
            "phase figures are off: they compare guest and host TSC stamps, and this host's \
             TSC is not stable ({})",
            report.tsc.unstable_reasons.join("; ")
        )
    })
}

/// The remarks every results file of this host carries.
pub fn notes(report: &HostReport) -> Vec<String> {
    let mut notes = Vec::new();
    if report.is_nested_or_paravirtual() {
        // The summary may say already that the figures are not hardware figures (a
        // paravirtual KVM does); the note says it once.
        let summary = &report.virtualization.summary;
        notes.push(if summary.contains("not hardware figures") {
            summary.clone()
        } else {
            format!("{summary}: exit costs measured here are not hardware figures")
        });
    }
    if let Some(why) = phases_off_reason(report) {
        notes.push(why);
    }
    notes
}

/// Rows of one titled block.
type Rows = Vec<(String, String)>;

fn row(key: impl Into<String>, value: impl Into<String>) -> (String, String) {
    (key.into(), value.into())
}

/// The `exitlab host` report: grouped, aligned, human readable.
pub fn render_text(report: &HostReport) -> String {
    let mut out = String::new();
    if report.is_nested_or_paravirtual() {
        out.push_str("NOTE: exit costs measured on this host are not hardware figures.\n\n");
    }
    if let Some(d) = &report.kvm.diagnosis {
        out.push_str(&format!(
            "KVM IS NOT USABLE: {}\nWhat to do: {}\n\n",
            d.reason, d.advice
        ));
    }
    if let Some(pending) = &report.pending_restore {
        out.push_str(&format!("KVM MODULE PARAMETERS: {pending}\n\n"));
    }
    section(&mut out, "CPU", &cpu_rows(report));
    section(&mut out, "Kernel", &kernel_rows(report));
    section(&mut out, "Virtualization", &virtualization_rows(report));
    section(&mut out, "KVM", &kvm_rows(report));
    section(&mut out, "TSC", &tsc_rows(report));
    module_sections(&mut out, report);
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

fn cpu_rows(report: &HostReport) -> Rows {
    let c = &report.cpu;
    let mut rows = vec![
        row("vendor", c.vendor.clone()),
        row("model name", c.model_name.clone()),
        row(
            "family/model/stepping",
            format!(
                "{:#x}/{:#x}/{} ({}/{}/{}), signature {:#010x}",
                c.family, c.model, c.stepping, c.family, c.model, c.stepping, c.signature
            ),
        ),
        row("microcode", opt_str(c.microcode.as_deref())),
        row(
            "logical CPUs",
            format!(
                "{} available to this process; online {} ({})",
                opt_display(c.available_parallelism),
                opt_str(c.online.as_deref()),
                opt_display(c.online_count)
            ),
        ),
    ];
    match &c.flags {
        Some(flags) => {
            let with = |present: bool| -> Vec<&str> {
                flags
                    .iter()
                    .filter(|(_, v)| **v == present)
                    .map(|(k, _)| k.as_str())
                    .collect()
            };
            rows.push(row("flags present", join_or_none(&with(true))));
            rows.push(row("flags absent", join_or_none(&with(false))));
        }
        None => rows.push(row("flags", "unknown (/proc/cpuinfo unreadable)")),
    }
    if let Some(bugs) = &c.bugs {
        let bugs: Vec<&str> = bugs.iter().map(String::as_str).collect();
        rows.push(row("bugs", join_or_none(&bugs)));
    }
    rows
}

fn kernel_rows(report: &HostReport) -> Rows {
    let k = &report.kernel;
    let mut rows = vec![
        row("release", k.release.clone()),
        row("version", k.version.clone()),
        row("machine", format!("{} {}", k.sysname, k.machine)),
        row("build id", opt_str(report.build_ids.kernel.as_deref())),
        row(
            "cmdline (relevant)",
            join_or_none(
                &k.relevant_cmdline
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            ),
        ),
    ];
    if !k.vulnerabilities.is_empty() {
        let mitigated: Rows = k
            .vulnerabilities
            .iter()
            .filter(|(_, v)| v.as_str() != "Not affected")
            .map(|(name, v)| row(format!("  {name}"), v.clone()))
            .collect();
        rows.push(row(
            "vulnerabilities",
            format!(
                "{} listed, {} not 'Not affected':",
                k.vulnerabilities.len(),
                mitigated.len()
            ),
        ));
        rows.extend(mitigated);
    }
    rows
}

fn virtualization_rows(report: &HostReport) -> Rows {
    let v = &report.virtualization;
    let signature = match (&v.hypervisor_signature, &v.hypervisor_name) {
        (Some(sig), Some(name)) => format!(
            "'{sig}' ({name}), max leaf {}",
            opt_hex(v.hypervisor_max_leaf)
        ),
        (Some(sig), None) => format!("'{sig}', max leaf {}", opt_hex(v.hypervisor_max_leaf)),
        _ => "none".into(),
    };
    let hardware = match (v.vmx, v.svm) {
        (true, true) => "VT-x and AMD-V",
        (true, false) => "VT-x (vmx)",
        (false, true) => "AMD-V (svm)",
        (false, false) => "none (no vmx/svm flag)",
    };
    let modules = if v.kvm_modules.is_empty() {
        "none loaded".to_string()
    } else {
        v.kvm_modules.join(", ")
    };
    vec![
        row("summary", v.summary.clone()),
        row("kind", v.kind.as_str()),
        row("hypervisor bit", yes_no(v.hypervisor_bit)),
        row("hypervisor signature", signature),
        row("hardware virt", hardware),
        row("KVM modules", modules),
    ]
}

fn kvm_rows(report: &HostReport) -> Rows {
    let kv = &report.kvm;
    let state = if kv.available {
        "available"
    } else if kv.device_exists {
        "present but not usable"
    } else {
        "missing"
    };
    let mut rows = vec![row(kv.device.clone(), state)];
    if let Some(e) = &kv.error {
        rows.push(row("error", e.clone()));
    }
    if let Some(a) = &kv.advice {
        rows.push(row("advice", a.clone()));
    }
    if let Some(d) = &kv.diagnosis {
        rows.extend(d.evidence.iter().map(|e| row("  evidence", e.clone())));
    }
    rows.push(row("API version", opt_display(kv.api_version)));
    rows.push(row(
        "vCPUs per VM",
        format!(
            "{} recommended (NR_VCPUS), {} max (MAX_VCPUS)",
            opt_display(kv.nr_vcpus),
            opt_display(kv.max_vcpus)
        ),
    ));
    if let Some(from) = &kv.capabilities_from {
        rows.push(row("capabilities", format!("checked on the {from} fd")));
        for (name, value) in &kv.capabilities {
            let shown = match kv.capability_bits.get(name) {
                Some(bits) => format!("{value} ({bits})"),
                None if *value == 0 => "0 (not supported)".into(),
                None => value.to_string(),
            };
            rows.push(row(format!("  {name}"), shown));
        }
    }
    rows
}

fn tsc_rows(report: &HostReport) -> Rows {
    let t = &report.tsc;
    let mut rows = vec![row(
        "frequency",
        match t.khz {
            Some(khz) => format!("{khz} kHz ({}) from {}", mhz(khz), t.source),
            None => format!("unknown ({})", t.source),
        },
    )];
    if !t.sources.is_empty() {
        let all: Vec<String> = t
            .sources
            .iter()
            .map(|(src, khz)| format!("{khz} kHz from {src}"))
            .collect();
        rows.push(row("all sources", all.join("; ")));
    }
    rows.push(row("invariant", t.invariant.map_or("unknown", yes_no)));
    rows.push(row("clocksource", opt_str(t.clocksource.as_deref())));
    if t.stable {
        rows.push(row("stable", "yes: phase figures are trustworthy"));
    } else {
        rows.push(row("stable", "NO: phase figures are turned off"));
        rows.extend(
            t.unstable_reasons
                .iter()
                .map(|r| row("  because", r.clone())),
        );
    }
    rows
}

/// The notable KVM parameters, then every parameter of every KVM module.
fn module_sections(out: &mut String, report: &HostReport) {
    let rows: Rows = report
        .kvm_params
        .entries()
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| row(name, v)))
        .collect();
    if rows.is_empty() {
        section(
            out,
            "Notable KVM parameters",
            &[row("none", "no KVM module parameters found")],
        );
    } else {
        section(out, "Notable KVM parameters", &rows);
    }
    for (module, params) in &report.module_params {
        let mut rows: Rows = params
            .iter()
            .map(|(k, v)| row(k.clone(), v.clone()))
            .collect();
        if let Some(id) = report.build_ids.modules.get(module) {
            rows.insert(0, row("(build id)", id.clone()));
        }
        section(out, &format!("/sys/module/{module}/parameters"), &rows);
    }
}

/// Appends a titled block of aligned `key  value` rows; a value too long for a terminal
/// report's line goes on under its own column.
fn section(out: &mut String, title: &str, rows: &[(String, String)]) {
    let _ = writeln!(out, "{title}");
    let width = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    // The text before a value's first word, less the space each word brings.
    let column = " ".repeat(2 + width + 1);
    for (k, v) in rows {
        let mut line = format!("  {k:<width$} ");
        for word in v.split(' ') {
            if line.chars().count() + 1 + word.chars().count() > crate::format::MAX_LINE
                && line.chars().count() > column.len()
            {
                let _ = writeln!(out, "{line}");
                line = column.clone();
            }
            line.push(' ');
            line.push_str(word);
        }
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out);
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn opt_str(v: Option<&str>) -> String {
    v.unwrap_or("unknown").to_string()
}

fn opt_display<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "unknown".to_string(), |v| v.to_string())
}

fn opt_hex(v: Option<u32>) -> String {
    v.map_or_else(|| "unknown".to_string(), |v| format!("{v:#x}"))
}

fn join_or_none(items: &[&str]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(" ")
    }
}

fn mhz(khz: u64) -> String {
    format!("{}.{:03} MHz", khz / 1000, khz % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use exitlab_host::{Diagnosis, Problem};

    /// Whether `text` has a row `key  ...  value` (keys are padded to their block's width).
    fn has_row(text: &str, key: &str, value: &str) -> bool {
        text.lines().any(|l| {
            l.strip_prefix("  ")
                .and_then(|l| l.strip_prefix(key))
                .is_some_and(|rest| rest.trim_start() == value)
        })
    }

    /// This machine's survey, with the parts a test sets replaced.
    fn base() -> HostReport {
        exitlab_host::survey()
    }

    #[test]
    fn a_long_value_goes_on_under_its_column_within_a_line() {
        let flags: Vec<String> = (0..60).map(|i| format!("flag_{i}")).collect();
        let rows = vec![
            ("flags absent".to_string(), flags.join(" ")),
            ("model".to_string(), "short".to_string()),
        ];
        let mut out = String::new();
        section(&mut out, "CPU", &rows);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() > 4, "{out}");
        for l in &lines {
            assert!(l.chars().count() <= crate::format::MAX_LINE, "{l}");
        }
        assert!(
            lines[1].starts_with("  flags absent  flag_0 flag_1"),
            "{out}"
        );
        assert!(lines[2].starts_with("                flag_"), "{out}");
        assert!(out.contains("  model         short\n"), "{out}");
        let words: usize = lines.iter().map(|l| l.matches("flag_").count()).sum();
        assert_eq!(words, 60, "{out}");
    }

    #[test]
    fn sections_in_order_and_no_trailing_blank_line() {
        let text = render_text(&base());
        let at = |s: &str| {
            text.find(s)
                .unwrap_or_else(|| panic!("{s} missing:\n{text}"))
        };
        assert!(at("CPU\n") < at("Kernel\n"));
        assert!(at("Kernel\n") < at("Virtualization\n"));
        assert!(at("Virtualization\n") < at("KVM\n"));
        assert!(at("KVM\n") < at("TSC\n"));
        assert!(at("TSC\n") < at("Notable KVM parameters\n"));
        assert!(!text.ends_with("\n\n"));
    }

    #[test]
    fn a_diagnosis_leads_the_report_with_its_evidence() {
        let mut r = base();
        r.kvm.available = false;
        r.kvm.diagnosis = Some(Diagnosis {
            problem: Problem::PermissionDenied,
            reason: "permission denied opening /dev/kvm".into(),
            advice: "run as root".into(),
            evidence: vec!["/dev/kvm: crw-rw---- 10:232".into()],
        });
        let text = render_text(&r);
        assert!(
            text.contains(
                "KVM IS NOT USABLE: permission denied opening /dev/kvm\nWhat to do: run as root\n"
            ),
            "{text}"
        );
        assert!(
            has_row(&text, "  evidence", "/dev/kvm: crw-rw---- 10:232"),
            "{text}"
        );
    }

    #[test]
    fn the_virtualization_note_says_not_hardware_figures_once() {
        let mut r = base();
        r.virtualization.hypervisor_bit = true;
        for summary in [
            "nested: this host is a KVM guest; KVM here is paravirtual (kvm_pvm): guest ring-0 \
             code is emulated and exit costs are not hardware figures",
            "nested: this host is a KVM guest (hypervisor bit set)",
        ] {
            r.virtualization.summary = summary.to_string();
            let n = notes(&r);
            assert_eq!(n[0].matches("not hardware figures").count(), 1, "{n:?}");
            assert!(
                n[0].starts_with("nested: this host is a KVM guest"),
                "{n:?}"
            );
        }
    }

    #[test]
    fn an_unstable_tsc_turns_phases_off_with_its_reasons() {
        let mut r = base();
        r.tsc.stable = true;
        r.tsc.unstable_reasons.clear();
        assert_eq!(phases_off_reason(&r), None);
        assert!(render_text(&r).contains("phase figures are trustworthy"));
        r.tsc.stable = false;
        r.tsc.unstable_reasons = vec!["the kernel was booted with tsc=unstable".into()];
        let why = phases_off_reason(&r).unwrap();
        assert!(why.starts_with("phase figures are off"), "{why}");
        assert!(why.contains("tsc=unstable"), "{why}");
        assert!(notes(&r).contains(&why));
        let text = render_text(&r);
        assert!(text.contains("NO: phase figures are turned off"), "{text}");
        assert!(
            has_row(
                &text,
                "  because",
                "the kernel was booted with tsc=unstable"
            ),
            "{text}"
        );
    }

    #[test]
    fn capability_bits_are_shown_next_to_the_value() {
        let mut r = base();
        r.kvm.capabilities_from = Some("VM".into());
        r.kvm.capabilities = [("X86_DISABLE_EXITS".to_string(), 14), ("PIT2".into(), 0)]
            .into_iter()
            .collect();
        r.kvm.capability_bits = [("X86_DISABLE_EXITS".to_string(), "HLT|PAUSE|CSTATE".into())]
            .into_iter()
            .collect();
        let text = render_text(&r);
        assert!(
            has_row(&text, "  X86_DISABLE_EXITS", "14 (HLT|PAUSE|CSTATE)"),
            "{text}"
        );
        assert!(has_row(&text, "  PIT2", "0 (not supported)"), "{text}");
    }

    #[test]
    fn build_ids_and_a_pending_restore_are_shown() {
        let mut r = base();
        r.build_ids.kernel = Some("48dc540c".into());
        r.module_params.insert(
            "kvm_amd".into(),
            [("npt".to_string(), "Y".to_string())].into(),
        );
        r.build_ids
            .modules
            .insert("kvm_amd".into(), "abcd1234".into());
        r.pending_restore = Some("a restore of KVM module parameters is pending: x".into());
        let text = render_text(&r);
        assert!(has_row(&text, "build id", "48dc540c"), "{text}");
        assert!(has_row(&text, "(build id)", "abcd1234"), "{text}");
        assert!(
            text.contains(
                "KVM MODULE PARAMETERS: a restore of KVM module parameters is pending: x\n"
            ),
            "{text}"
        );
        let json = to_json(&r);
        assert_eq!(json["build_ids"]["modules"]["kvm_amd"], "abcd1234");
        assert_eq!(
            json["pending_restore"],
            "a restore of KVM module parameters is pending: x"
        );
    }

    #[test]
    fn json_carries_the_schema_version() {
        let v = to_json(&base());
        assert_eq!(v["schema_version"], exitlab_host::SCHEMA_VERSION);
        assert!(v["kvm"]["device"].is_string());
    }
}

//! The HTML report opened in headless Chromium: it renders, logs nothing to the console,
//! holds the summary table, the A/B verdicts and one SVG plot per test, and its
//! screenshot is not blank. Needs Debian's `chromium` (installed by `.ci/run`) and
//! /dev/kvm (the report is made from real runs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn exitlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_exitlab"))
        .args(args)
        .output()
        .expect("the exitlab binary runs")
}

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("exitlab-html-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs headless Chromium on `page` with the given extra flags, a fresh profile, and
/// console messages logged to stderr.
fn chromium(dir: &Path, page: &Path, extra: &[&str]) -> Output {
    let profile = dir.join(format!("profile-{}", extra.join("").len()));
    let url = format!("file://{}", page.display());
    let mut args = vec![
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--no-first-run".into(),
        "--enable-logging=stderr".into(),
        "--v=0".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push(url);
    Command::new("chromium")
        .args(&args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run chromium ({e}): this test needs Debian's chromium package \
             (apt-get install chromium; .ci/run installs it)"
            )
        })
}

/// Console messages Chromium logged (each line tagged `CONSOLE`).
fn console_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect()
}

/// Fraction of pixels that are not white, and the number of distinct colours.
fn ink(png_path: &Path) -> (f64, usize) {
    let decoder = png::Decoder::new(std::fs::File::open(png_path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let pixels = &buf[..info.buffer_size()];
    let mut colours = std::collections::HashSet::new();
    let mut inked = 0usize;
    let total = pixels.len() / channels;
    for px in pixels.chunks(channels) {
        if px[..3.min(channels)].iter().any(|&c| c < 240) {
            inked += 1;
        }
        colours.insert(px.to_vec());
    }
    (inked as f64 / total as f64, colours.len())
}

#[test]
fn html_report_renders_in_headless_chromium() {
    let dir = scratch();
    let plain = dir.join("plain.json");
    let ab = dir.join("ab.json");
    let common = [
        "bench",
        "--tests",
        "cpuid,inl_from_user,outl_to_user",
        "--samples",
        "150",
        "--ring",
        "3",
        "--quiet",
        "--no-overhead",
    ];
    let o = exitlab(
        &[
            &common[..],
            &["--rounds", "5", "--json", plain.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = exitlab(
        &[
            &common[..],
            &[
                "--rounds",
                "5",
                "--ab",
                "batch=1,2",
                "--json",
                ab.to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let page = dir.join("report.html");
    let o = exitlab(&[
        "report",
        plain.to_str().unwrap(),
        ab.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // The console check is itself checked: a page with an error is caught.
    let broken = dir.join("broken.html");
    std::fs::write(
        &broken,
        "<html><body><script>console.error('planted')</script></body></html>",
    )
    .unwrap();
    let b = chromium(&dir, &broken, &["--dump-dom"]);
    assert!(
        console_lines(&b).iter().any(|l| l.contains("planted")),
        "the console check does not see console errors: {}",
        String::from_utf8_lossy(&b.stderr)
    );

    // The DOM as rendered: tables and one SVG per test (4 tests with loop_overhead).
    let d = chromium(&dir, &page, &["--dump-dom"]);
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
    assert_eq!(console_lines(&d), Vec::<String>::new());
    let dom = String::from_utf8_lossy(&d.stdout);
    assert!(dom.contains("<table class=\"summary\">"), "{dom}");
    assert!(dom.contains("<table class=\"verdicts\">"), "{dom}");
    assert!(dom.contains("A/B: batch = 1 vs 2"), "{dom}");
    for test in ["loop_overhead", "cpuid", "inl_from_user", "outl_to_user"] {
        let at = dom
            .find(&format!("<figure class=\"cdf\" data-test=\"{test}\">"))
            .unwrap_or_else(|| panic!("no CDF figure for {test}"));
        let figure = &dom[at..at + dom[at..].find("</figure>").unwrap()];
        assert_eq!(figure.matches("<svg").count(), 1, "{test}: {figure}");
        // Three series: the plain run and both A/B sides.
        assert!(figure.matches("<polyline").count() >= 3, "{test}: {figure}");
    }
    assert_eq!(dom.matches("<figure class=\"cdf\"").count(), 4);
    assert!(dom.contains("Phases of a userspace exit"), "{dom}");
    // Phases where the host's TSC allows them (the bench turns them off, with the reason
    // in its notes, where it does not: an emulated L1, for one); the page says which.
    let plain_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&plain).unwrap()).unwrap();
    let measured = plain_json["tests"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| !t["phases"].is_null());
    if measured {
        assert!(dom.contains("<figure class=\"phases\">"), "{dom}");
    } else {
        assert!(
            dom.contains("<p class=\"no-phases\">Not measured: phase figures are off"),
            "{dom}"
        );
    }

    // A screenshot that is not blank.
    let shot = dir.join("report.png");
    let s = chromium(
        &dir,
        &page,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1400,2400",
            "--hide-scrollbars",
        ],
    );
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
    assert_eq!(console_lines(&s), Vec::<String>::new());
    let (inked, colours) = ink(&shot);
    assert!(
        inked > 0.02,
        "only {:.3} of the screenshot is not white",
        inked
    );
    assert!(colours > 20, "only {colours} colours in the screenshot");
    if let Ok(keep) = std::env::var("EXITLAB_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

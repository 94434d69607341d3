//! The HTML report opened in headless Chromium: it renders, logs nothing to the console,
//! holds the summary table, the A/B verdicts and one SVG plot per test, no legend covers
//! a plot's data, no bar of a chart is under a pixel, every table's rows line up with
//! its header and fit the window, a host that gives no hardware figures is said on the
//! first screen, and its screenshot is not blank.
//! Needs Debian's `chromium` (installed by `.ci/run`) and /dev/kvm (the report is made
//! from real runs).

use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::{exitlab, Scratch};

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

/// Measures the page as Chromium lays it out, in screen pixels: every SVG's data (lines
/// drawn 2 px wide or more, filled rectangles) against every legend (a framed, unfilled
/// rectangle in an SVG, or an element of class `legend` in the page), and the size of
/// every filled rectangle. Appended to a copy of the page (the report itself has no
/// script); writes `{"svgs":..,"points":..,"bars":..,"legends":..,"problems":[..]}` into
/// `<pre id="layout-check">`, which `--dump-dom` shows. It also checks every table: each
/// row has as many cells as its header, each column is aligned alike in the header and
/// the rows, and no table runs past the window; and it says where the caveat of figures
/// that are not hardware figures is (`"caveat":{"top":..,"height":..,"text":..}`).
const LAYOUT_CHECK: &str = r#"<script>
(function () {
  const problems = [];
  const inside = (p, r) => p.x >= r.left && p.x <= r.right && p.y >= r.top && p.y <= r.bottom;
  const meet = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  const htmlLegends = [...document.querySelectorAll('.legend')].map(e => e.getBoundingClientRect());
  let points = 0, bars = 0, legends = htmlLegends.length;
  document.querySelectorAll('svg').forEach((svg, i) => {
    const fig = svg.closest('figure');
    const name = fig ? (fig.className + ' ' + (fig.dataset.test || '')).trim() : 'svg ' + i;
    const m = svg.getScreenCTM();
    const rects = [...svg.querySelectorAll('rect')];
    const frames = rects.filter(r => r.getAttribute('fill') === 'none'
        && (r.getAttribute('stroke') || 'none') !== 'none').map(r => r.getBoundingClientRect());
    const all = frames.concat(htmlLegends);
    legends += frames.length;
    const filled = rects.filter(r => {
      const f = (r.getAttribute('fill') || 'none').toUpperCase();
      return f !== 'NONE' && f !== '#FFFFFF' && f !== 'WHITE';
    }).map(r => r.getBoundingClientRect())
      .filter(b => !frames.some(L => inside({x: b.left, y: b.top}, L) && inside({x: b.right, y: b.bottom}, L)));
    const pts = [];
    svg.querySelectorAll('polyline').forEach(pl => {
      if (parseFloat(pl.getAttribute('stroke-width') || '1') >= 2) {
        // The line's vertices and points every pixel between them.
        const v = [...pl.points].map(p => new DOMPoint(p.x, p.y).matrixTransform(m));
        v.forEach((p, k) => {
          pts.push(p);
          const q = v[k + 1];
          if (!q) return;
          const steps = Math.ceil(Math.hypot(q.x - p.x, q.y - p.y));
          for (let j = 1; j < steps; j++) {
            pts.push({x: p.x + (q.x - p.x) * j / steps, y: p.y + (q.y - p.y) * j / steps});
          }
        });
      }
    });
    points += pts.length;
    bars += filled.length;
    filled.forEach(b => {
      if (b.width < 1 || b.height < 1) {
        problems.push(name + ': a bar of ' + b.width.toFixed(2) + ' x ' + b.height.toFixed(2) + ' px (under a pixel)');
      }
    });
    all.forEach(L => {
      if (pts.some(p => inside(p, L)) || filled.some(b => meet(b, L))) {
        problems.push(name + ': a legend covers data');
      }
    });
  });
  // Tables: every row has its header's cells, and each column is aligned alike in the
  // header and the rows.
  document.querySelectorAll('table').forEach((t, i) => {
    const rows = [...t.rows];
    const width = r => [...r.cells].reduce((n, c) => n + c.colSpan, 0);
    const head = rows[0];
    const name = 'table ' + (t.className || i);
    rows.slice(1).forEach((r, k) => {
      if (width(r) !== width(head)) {
        problems.push(name + ': row ' + (k + 1) + ' has ' + width(r) + ' cells, its header ' + width(head));
      }
      [...r.cells].forEach((c, j) => {
        const h = head.cells[j];
        const [ha, ca] = [h, c].map(e => e && getComputedStyle(e).textAlign);
        if (h && ha !== ca) {
          problems.push(name + ': column ' + h.textContent + ' is aligned ' + ha + ' in its header, ' + ca + ' in row ' + (k + 1));
        }
      });
    });
    const right = t.getBoundingClientRect().right;
    if (right > window.innerWidth) {
      problems.push(name + ': ends at ' + right.toFixed(0) + ' px, past the window (' + window.innerWidth + ' px)');
    }
  });
  // The caveat of figures that are not hardware figures: where it is, and its text.
  const c = document.querySelector('.caveat');
  const caveat = c ? {top: c.getBoundingClientRect().top, height: c.getBoundingClientRect().height, text: c.textContent} : null;
  const pre = document.createElement('pre');
  pre.id = 'layout-check';
  pre.textContent = JSON.stringify({svgs: document.querySelectorAll('svg').length, points, bars, legends, caveat, problems});
  document.body.appendChild(pre);
})();
</script>"#;

/// The layout check's findings for `page` (see [`LAYOUT_CHECK`]).
fn layout_check(dir: &Path, page: &Path) -> serde_json::Value {
    let html = std::fs::read_to_string(page).unwrap();
    let checked = dir.join(format!(
        "checked-{}",
        page.file_name().unwrap().to_string_lossy()
    ));
    let at = html.rfind("</body>").unwrap_or(html.len());
    std::fs::write(
        &checked,
        format!("{}{LAYOUT_CHECK}{}", &html[..at], &html[at..]),
    )
    .unwrap();
    let d = chromium(
        dir,
        &checked,
        &[
            "--dump-dom",
            "--window-size=1200,2400",
            "--virtual-time-budget=5000",
        ],
    );
    let dom = String::from_utf8_lossy(&d.stdout);
    let start = dom
        .find("<pre id=\"layout-check\">")
        .unwrap_or_else(|| panic!("the layout check did not run: {dom}"))
        + "<pre id=\"layout-check\">".len();
    let end = start + dom[start..].find("</pre>").unwrap();
    let text = dom[start..end]
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
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
    let dir = Scratch::new("html");
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
    ];
    // The plain run with the VMM-overhead experiment, which the page must show (measured,
    // or why not where tracefs is missing).
    let o = exitlab(
        &[
            &common[..],
            &[
                "--overhead",
                "--rounds",
                "5",
                "--json",
                plain.to_str().unwrap(),
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
    let o = exitlab(
        &[
            &common[..],
            &[
                "--no-overhead",
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
    // What the text report prints below its table has its sections, and the page says
    // the knobs as the text does (no "cpus=0" for "as each test needs").
    for section in [
        "Exit checks</h3>",
        "VMM overhead</h3>",
        "<nav class=\"contents\">",
    ] {
        assert!(dom.contains(section), "{section}: {dom}");
    }
    assert!(dom.contains("cpus=as each test needs"), "{dom}");
    assert!(!dom.contains("cpus=0"), "{dom}");
    assert!(dom.contains("<th class=\"text\">verdict</th>"), "{dom}");
    assert!(dom.contains("Phases of a userspace exit"), "{dom}");
    // Phases where the host's TSC allows them (the bench turns them off, with the reason
    // in its notes, where it does not: an emulated L1, for one); the page says which.
    let plain_json = common::read_results(&plain);
    common::read_results(&ab);
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

    // The layout check is itself checked: a legend over a line and over a bar, and a
    // bar under a pixel wide, are caught.
    let planted = dir.join("planted.html");
    std::fs::write(
        &planted,
        "<html><body><figure class=\"cdf\" data-test=\"planted\">\
         <svg width=\"200\" height=\"100\" xmlns=\"http://www.w3.org/2000/svg\">\
         <polyline fill=\"none\" stroke=\"#1F77B4\" stroke-width=\"2\" points=\"10,50 190,50\"/>\
         <rect x=\"20\" y=\"70\" width=\"0.4\" height=\"10\" fill=\"#D62728\"/>\
         <rect x=\"100\" y=\"40\" width=\"60\" height=\"20\" fill=\"none\" stroke=\"#000000\"/>\
         </svg></figure>\
         <table class=\"planted\"><tr><th>test</th><th style=\"text-align:right\">verdict</th></tr>\
         <tr><td>a</td><td style=\"text-align:left\">slower</td><td>extra</td></tr></table>\
         <table class=\"wide\" style=\"width:3000px\"><tr><th>a</th></tr><tr><td>1</td></tr></table>\
         </body></html>",
    )
    .unwrap();
    let planted = layout_check(&dir, &planted);
    let problems = planted["problems"].to_string();
    assert!(problems.contains("a legend covers data"), "{planted}");
    assert!(problems.contains("under a pixel"), "{planted}");
    assert!(
        problems.contains("table planted: row 1 has 3 cells, its header 2"),
        "{planted}"
    );
    assert!(
        problems.contains(
            "table planted: column verdict is aligned right in its header, left in row 1"
        ),
        "{planted}"
    );
    assert!(problems.contains("table wide: ends at"), "{planted}");
    assert_eq!(planted["caveat"], serde_json::Value::Null, "{planted}");

    // The report: no legend covers data, no bar is under a pixel; and the check saw
    // what it checks (the plots' lines, the phases' bars where measured, the legends).
    let layout = layout_check(&dir, &page);
    assert_eq!(layout["problems"], serde_json::json!([]), "{layout}");
    assert!(layout["svgs"].as_u64().unwrap() >= 4, "{layout}");
    assert!(layout["points"].as_u64().unwrap() > 100, "{layout}");
    assert!(layout["legends"].as_u64().unwrap() >= 1, "{layout}");
    if measured {
        assert!(layout["bars"].as_u64().unwrap() >= 3, "{layout}");
    }
    // A nested or paravirtual host's figures are not hardware figures: the page says so
    // first, on the first screen.
    let kind = plain_json["host"]["virtualization"]["kind"]
        .as_str()
        .unwrap_or("");
    if kind == "bare_metal" {
        assert_eq!(layout["caveat"], serde_json::Value::Null, "{layout}");
    } else {
        let caveat = &layout["caveat"];
        assert!(caveat["top"].as_f64().unwrap() < 300.0, "{layout}");
        assert!(caveat["height"].as_f64().unwrap() > 10.0, "{layout}");
        let text = caveat["text"].as_str().unwrap();
        assert!(text.starts_with("Not hardware figures ("), "{layout}");
        assert!(
            text.contains("plain.json, ") && text.contains("ab.json):"),
            "{layout}"
        );
    }
    // Each test is named once around its plot (the plot's own caption), and the raw
    // plot says so.
    for test in ["cpuid", "inl_from_user"] {
        let at = dom
            .find(&format!("<figure class=\"cdf\" data-test=\"{test}\">"))
            .unwrap();
        let figure = &dom[at..at + dom[at..].find("</figure>").unwrap()];
        let named = figure
            .split(['<', '>'])
            .filter(|text| text.trim() == test)
            .count();
        assert_eq!(named, 1, "{figure}");
        assert!(figure.contains("net cycles per iteration"), "{figure}");
    }
    let at = dom
        .find("<figure class=\"cdf\" data-test=\"loop_overhead\">")
        .unwrap();
    let figure = &dom[at..at + dom[at..].find("</figure>").unwrap()];
    assert!(figure.contains("raw cycles per iteration"), "{figure}");
    assert!(!figure.contains("net cycles"), "{figure}");

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
}

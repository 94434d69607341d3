//! The architecture's rules, checked on the source tree by `cargo test --workspace`:
//!
//! - No import cycle between the modules of any crate (`src/` and `crates/*/src/`): module
//!   A imports B when A's code (test modules left out) names `crate::B` — in a path, a
//!   `use` or a `use crate::{..}` group, or an item the crate root re-exports from B — or,
//!   at A's top level, `super::B`. Every cycle fails the test, except those listed in
//!   [`KNOWN_CYCLES`]; a listed cycle that no longer exists fails it too, so the list
//!   only shrinks.
//! - The crate graph points one way: `exitlab-results` depends on no KVM crate and on
//!   neither the VMM nor the lab (it must build and test without /dev/kvm), nor on a
//!   crate that compiles C (`cc`, so neither `exitlab-guest` nor `exitlab-floor`: it must
//!   build without gcc; the ABI's record types come from `exitlab-abi`), and the VMM
//!   depends on neither the lab nor the results (it knows nothing of statistics). Read
//!   from the workspace's manifests and Cargo.lock, transitively.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The cycles allowed to exist: (source directory, modules of the cycle, sorted). None
/// are left (the last, `crates/vmm/src: exit <-> vcpu`, went when the exit vocabulary
/// moved from vcpu.rs to hook.rs).
const KNOWN_CYCLES: &[(&str, &[&str])] = &[];

/// Crates that open or drive /dev/kvm.
const KVM_CRATES: &[&str] = &["kvm-ioctls", "kvm-bindings"];

/// The crates that compile C, so need a C toolchain to build: the `cc` driver, and the
/// workspace crates whose build scripts use it (the guest kernels, the floor).
const C_CRATES: &[&str] = &["cc", "exitlab-guest", "exitlab-floor"];

/// Module name -> (imported module -> first line that imports it).
type Graph = BTreeMap<String, BTreeMap<String, usize>>;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------------------
// Reading Rust source.

/// `src` with every comment and the inside of every string and character literal
/// replaced by spaces (line breaks kept, so line numbers still hold).
fn blank_comments_and_literals(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out: Vec<char> = Vec::with_capacity(c.len());
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        let ident_before = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        if at(i) == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if at(i) == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if i >= c.len() {
                    break;
                }
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    out.extend([' ', ' ']);
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    out.extend([' ', ' ']);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if !ident_before && (at(i) == 'r' || (at(i) == 'b' && at(i + 1) == 'r')) && {
            // A raw string: r"..", r#".."#, br#".."#.
            let mut k = i + if at(i) == 'b' { 2 } else { 1 };
            while at(k) == '#' {
                k += 1;
            }
            at(k) == '"'
        } {
            let mut k = i + if at(i) == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while at(k) == '#' {
                hashes += 1;
                k += 1;
            }
            out.extend(c[i..=k].iter().copied());
            i = k + 1;
            while i < c.len() {
                if c[i] == '"' && (1..=hashes).all(|h| at(i + h) == '#') {
                    out.push('"');
                    out.extend(std::iter::repeat_n('#', hashes));
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(c[i]));
                i += 1;
            }
        } else if at(i) == '"' {
            i = blank_quoted(&c, i, &mut out);
        } else if at(i) == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A character literal ('x', '\n', '\u{..}'); otherwise a lifetime.
            i = blank_quoted(&c, i, &mut out);
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// Copies the quoted literal that opens at `open` (a string or a character, escapes
/// included) to `out` with its inside blanked; returns the index just past it.
fn blank_quoted(c: &[char], open: usize, out: &mut Vec<char>) -> usize {
    let quote = c[open];
    out.push(quote);
    let mut i = open + 1;
    while i < c.len() && c[i] != quote {
        if c[i] == '\\' {
            out.push(' ');
            i += 1;
        }
        if i < c.len() {
            out.push(if c[i] == '\n' { '\n' } else { ' ' });
            i += 1;
        }
    }
    out.push(quote);
    i + 1
}

/// The index just past the `}` that closes the `{` at `open` (or the end).
fn matching_brace(c: &[char], open: usize) -> usize {
    let mut depth = 0;
    for (k, &ch) in c.iter().enumerate().skip(open) {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    c.len()
}

/// Blanked code without its `#[cfg(test)]` items (a test module, or a test-only item up
/// to its `;` or its closing brace).
fn without_test_items(code: &str) -> String {
    let mut c: Vec<char> = code.chars().collect();
    let attr: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + attr.len() <= c.len() {
        if c[i..i + attr.len()] != attr[..] {
            i += 1;
            continue;
        }
        let mut end = i + attr.len();
        while end < c.len() && c[end] != '{' && c[end] != ';' {
            end += 1;
        }
        let end = if end < c.len() && c[end] == '{' {
            matching_brace(&c, end)
        } else {
            (end + 1).min(c.len())
        };
        for ch in &mut c[i..end] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        i = end;
    }
    c.into_iter().collect()
}

/// Character ranges of the inline modules (`mod name { .. }`) of blanked code: there,
/// `super::` names the file's own module, not a sibling.
fn inline_modules(c: &[char]) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    let mut i = 0;
    while i + 4 < c.len() {
        let word_start = i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        if word_start && c[i..i + 4] == ['m', 'o', 'd', ' '] {
            let mut k = i + 4;
            while k < c.len() && (c[k].is_alphanumeric() || c[k] == '_' || c[k] == ' ') {
                k += 1;
            }
            if k < c.len() && c[k] == '{' {
                let end = matching_brace(c, k);
                ranges.push((i, end));
                i = end;
                continue;
            }
        }
        i += 1;
    }
    ranges
}

fn ident_at(c: &[char], mut k: usize) -> (String, usize) {
    while k < c.len() && c[k].is_whitespace() {
        k += 1;
    }
    let start = k;
    while k < c.len() && (c[k].is_alphanumeric() || c[k] == '_') {
        k += 1;
    }
    (c[start..k].iter().collect(), k)
}

/// The first path segment of each item of the `{ .. }` group opening at `open`.
fn group_heads(c: &[char], open: usize) -> Vec<String> {
    let close = matching_brace(c, open);
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    for k in open + 1..close.saturating_sub(1) {
        match c[k] {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            ch if item_start && !ch.is_whitespace() => {
                item_start = false;
                heads.push(ident_at(c, k).0);
            }
            _ => {}
        }
    }
    heads
}

/// The names one module's source uses from its crate: (name after `crate::` or a
/// top-level `super::`, line), test items, comments and literals left out.
fn crate_references(src: &str) -> Vec<(String, usize)> {
    let code = without_test_items(&blank_comments_and_literals(src));
    let c: Vec<char> = code.chars().collect();
    let inline = inline_modules(&c);
    let mut refs = Vec::new();
    let mut line = 1;
    for i in 0..c.len() {
        if c[i] == '\n' {
            line += 1;
            continue;
        }
        if i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_') {
            continue;
        }
        let rest = |s: &str| c[i..].iter().take(s.len()).copied().eq(s.chars());
        let prefix = if rest("crate::") {
            "crate::".len()
        } else if rest("super::") && !inline.iter().any(|&(a, b)| a < i && i < b) {
            "super::".len()
        } else {
            continue;
        };
        let mut k = i + prefix;
        while k < c.len() && c[k].is_whitespace() {
            k += 1;
        }
        if k < c.len() && c[k] == '{' {
            refs.extend(group_heads(&c, k).into_iter().map(|h| (h, line)));
        } else {
            refs.push((ident_at(&c, k).0, line));
        }
    }
    refs
}

/// What a crate root re-exports from its own modules: `pub use m::Item;`,
/// `pub use m::{A, B as C};` (name -> module).
fn root_reexports(root_src: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let code = without_test_items(&blank_comments_and_literals(root_src));
    let mut map = BTreeMap::new();
    for stmt in code.split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let path = path.trim();
        let path = path
            .strip_prefix("self::")
            .or_else(|| path.strip_prefix("crate::"))
            .unwrap_or(path);
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        if !modules.contains(module.trim()) {
            continue;
        }
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let name = match item.split_once(" as ") {
                Some((_, alias)) => alias,
                None => item.rsplit("::").next().unwrap_or(item),
            };
            let name = name.trim();
            if !name.is_empty() && name != "self" {
                map.insert(name.to_string(), module.trim().to_string());
            }
        }
    }
    map
}

/// The module import graph of one crate's flat source directory.
fn module_graph(dir: &Path) -> Graph {
    let mut files = BTreeMap::new();
    let mut root = String::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let src = std::fs::read_to_string(&path).unwrap();
        if stem == "lib" || stem == "main" {
            root = src;
        } else {
            files.insert(stem, src);
        }
    }
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let reexports = root_reexports(&root, &modules);
    let mut graph = Graph::new();
    for (module, src) in &files {
        let edges = graph.entry(module.clone()).or_default();
        for (name, line) in crate_references(src) {
            let target = if modules.contains(&name) {
                Some(&name)
            } else {
                reexports.get(&name)
            };
            if let Some(t) = target.filter(|t| *t != module) {
                edges.entry(t.clone()).or_insert(line);
            }
        }
    }
    graph
}

// ---------------------------------------------------------------------------------------
// Cycles.

/// The strongly connected components of more than one module (Tarjan), each sorted.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let graph = s.graph;
        for w in graph.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.found.push(scc);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found.sort();
    s.found
}

/// One closed path through the cycle `scc` (from its first module back to it), each
/// step with the line that makes it: `a -> b (line 3) -> a (line 9)`.
fn describe(graph: &Graph, scc: &[String]) -> String {
    let members: BTreeSet<&str> = scc.iter().map(String::as_str).collect();
    let start = scc[0].as_str();
    // Breadth-first from the start's successors back to the start, inside the cycle.
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    let mut seen = BTreeSet::new();
    'search: while let Some(v) = queue.pop_front() {
        for w in graph[v].keys().map(String::as_str) {
            if !members.contains(w) {
                continue;
            }
            if w == start {
                prev.insert(start, v);
                break 'search;
            }
            if seen.insert(w) {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    let mut path = vec![start];
    let mut at = start;
    while let Some(&p) = prev.get(at) {
        path.push(p);
        at = p;
        if p == start || path.len() > scc.len() + 1 {
            break;
        }
    }
    path.reverse();
    let mut out = start.to_string();
    for pair in path.windows(2) {
        out += &format!(
            " -> {} ({}.rs line {})",
            pair[1], pair[0], graph[pair[0]][pair[1]]
        );
    }
    out
}

#[test]
fn no_module_imports_itself_through_others() {
    let root = workspace_root();
    let mut dirs = vec![PathBuf::from("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("src").is_dir())
        .map(|p| p.strip_prefix(&root).unwrap().join("src"))
        .collect();
    crates.sort();
    dirs.extend(crates);
    let mut problems = Vec::new();
    let mut found_known = BTreeSet::new();
    for dir in &dirs {
        let graph = module_graph(&root.join(dir));
        // Crates of one or two files: counts, floor (a C program's carrier) and guest (C
        // kernels, with one Rust module beside its root).
        assert!(
            graph.len() > 1
                || dir.ends_with("counts/src")
                || dir.ends_with("floor/src")
                || dir.ends_with("guest/src"),
            "{dir:?}"
        );
        for scc in cycles(&graph) {
            let d = dir.to_string_lossy();
            let known = KNOWN_CYCLES
                .iter()
                .any(|(kd, m)| *kd == d && m.iter().copied().eq(scc.iter().map(String::as_str)));
            let line = format!("{d}: {} ({})", scc.join(" <-> "), describe(&graph, &scc));
            eprintln!("{}{line}", if known { "known cycle: " } else { "CYCLE: " });
            if known {
                found_known.insert((d.into_owned(), scc));
            } else {
                problems.push(format!("import cycle {line}"));
            }
        }
    }
    for (d, m) in KNOWN_CYCLES {
        let key = (d.to_string(), m.iter().map(|s| s.to_string()).collect());
        if !found_known.contains(&key) {
            problems.push(format!(
                "{d}: {} is listed in KNOWN_CYCLES but no longer exists: remove it from the list",
                m.join(" <-> ")
            ));
        }
    }
    eprintln!("{} source directories read", dirs.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------------
// The crate graph.

/// The dependency sections of a manifest: (dependency name, kind: "normal", "dev",
/// "build"), and the package's name.
fn manifest_deps(toml: &str) -> (String, Vec<(String, String)>) {
    let mut name = String::new();
    let mut section = String::new();
    let mut deps = Vec::new();
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_string();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if section == "package" && key == "name" {
            name = value.trim().trim_matches('"').to_string();
        }
        let target_section = section.starts_with("target.");
        if !target_section && section.contains('.') {
            continue;
        }
        let kind = match section.rsplit('.').next() {
            Some("dependencies") => "normal",
            Some("dev-dependencies") => "dev",
            Some("build-dependencies") => "build",
            _ => continue,
        };
        let dep = key.split('.').next().unwrap_or(key).trim_matches('"');
        deps.push((dep.to_string(), kind.to_string()));
    }
    (name, deps)
}

/// Every package's dependencies, by name: name -> (dependency name, its kinds). The
/// workspace's own packages come from their manifests (which tell dev-dependencies
/// apart), every other package from Cargo.lock (which holds only what they build with).
fn dependency_graph() -> BTreeMap<String, Vec<(String, Vec<String>)>> {
    let root = workspace_root();
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).expect("Cargo.lock");
    let mut graph: BTreeMap<String, Vec<(String, Vec<String>)>> = BTreeMap::new();
    for package in lock.split("[[package]]").skip(1) {
        let mut name = String::new();
        let mut deps = Vec::new();
        let mut in_deps = false;
        for line in package.lines().map(str::trim) {
            if let Some(v) = line.strip_prefix("name = ") {
                name = v.trim_matches('"').to_string();
            } else if line.starts_with("dependencies = [") {
                in_deps = true;
            } else if in_deps && line.starts_with(']') {
                in_deps = false;
            } else if in_deps {
                let dep = line.trim_matches(|c| c == '"' || c == ',');
                let dep = dep.split(' ').next().unwrap_or(dep);
                deps.push((dep.to_string(), vec!["normal".to_string()]));
            }
        }
        graph.entry(name).or_default().extend(deps);
    }
    let mut manifests = vec![root.join("Cargo.toml")];
    for e in std::fs::read_dir(root.join("crates")).unwrap() {
        let m = e.unwrap().path().join("Cargo.toml");
        if m.is_file() {
            manifests.push(m);
        }
    }
    for m in manifests {
        let (name, deps) = manifest_deps(&std::fs::read_to_string(&m).unwrap());
        let mut by_dep: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (d, kind) in deps {
            by_dep.entry(d).or_default().push(kind);
        }
        graph.insert(name, by_dep.into_iter().collect());
    }
    graph
}

/// What `package` needs to build (normal and build dependencies, transitively), plus its
/// own dev-dependencies when `with_dev`; each with the path that leads to it.
fn needs(
    graph: &BTreeMap<String, Vec<(String, Vec<String>)>>,
    package: &str,
    with_dev: bool,
) -> BTreeMap<String, String> {
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    let mut todo = vec![(package.to_string(), package.to_string())];
    while let Some((p, via)) = todo.pop() {
        for (d, kinds) in graph.get(&p).into_iter().flatten() {
            let dev_only = kinds.iter().all(|k| k == "dev");
            if dev_only && !(with_dev && p == package) {
                continue;
            }
            if !found.contains_key(d) {
                let path = format!("{via} -> {d}");
                found.insert(d.clone(), path.clone());
                todo.push((d.clone(), path));
            }
        }
    }
    found
}

#[test]
fn the_crate_graph_points_one_way() {
    let graph = dependency_graph();
    let mut problems = Vec::new();
    let results = needs(&graph, "exitlab-results", true);
    assert!(
        results.contains_key("serde"),
        "the graph was read: {results:?}"
    );
    for bad in KVM_CRATES
        .iter()
        .chain(C_CRATES)
        .chain(&["exitlab-vmm", "exitlab-lab", "exitlab"])
    {
        if let Some(path) = results.get(*bad) {
            problems.push(format!("exitlab-results must not need {bad}: {path}"));
        }
    }
    let vmm = needs(&graph, "exitlab-vmm", true);
    assert!(
        vmm.contains_key("kvm-ioctls"),
        "the graph was read: {vmm:?}"
    );
    for bad in ["exitlab-lab", "exitlab-results", "exitlab"] {
        if let Some(path) = vmm.get(bad) {
            problems.push(format!("exitlab-vmm must not need {bad}: {path}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------------
// The checks themselves, on small synthetic inputs with known answers.

fn graph_of(edges: &[(&str, &str)]) -> Graph {
    let mut g = Graph::new();
    for (a, b) in edges {
        g.entry(a.to_string()).or_default().insert(b.to_string(), 1);
        g.entry(b.to_string()).or_default();
    }
    g
}

#[test]
fn an_acyclic_graph_has_no_cycle() {
    let g = graph_of(&[
        ("cli", "lab"),
        ("lab", "vmm"),
        ("cli", "vmm"),
        ("lab", "stats"),
    ]);
    assert!(cycles(&g).is_empty());
}

#[test]
fn cycles_are_found_with_a_path_through_them() {
    let g = graph_of(&[
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
        ("c", "d"),
        ("d", "e"),
        ("e", "d"),
        ("x", "a"),
    ]);
    let found = cycles(&g);
    assert_eq!(found, vec![vec!["a", "b", "c"], vec!["d", "e"]]);
    assert_eq!(
        describe(&g, &found[0]),
        "a -> b (a.rs line 1) -> c (b.rs line 1) -> a (c.rs line 1)"
    );
    assert_eq!(
        describe(&g, &found[1]),
        "d -> e (d.rs line 1) -> d (e.rs line 1)"
    );
}

#[test]
fn references_are_read_from_code_only() {
    let src = r##"
//! Mentions crate::doc_comment in a doc comment.
use std::fmt;
use crate::alpha::A;
use crate::{beta, gamma::{G1, G2}, self};
/* crate::block_comment */
fn f() -> String {
    let _ = crate::delta::f();
    let _ = super::epsilon::E;
    let _ = 'x';
    let _ = '{';
    let s = "crate::in_a_string {";
    let r = r#"crate::in_a_raw_string"#;
    format!("{s}{r}")
}
fn lifetimes<'a>(x: &'a str) -> &'a str { x }
mod inline {
    use super::zeta;
    pub fn g() { crate::eta::h() }
}
#[cfg(test)]
mod tests {
    use crate::theta;
    use super::*;
}
fn after_tests() { crate::iota::i() }
"##;
    let names: Vec<(String, usize)> = crate_references(src);
    let just: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        just,
        ["alpha", "beta", "gamma", "self", "delta", "epsilon", "eta", "iota"]
    );
    assert_eq!(names[0].1, 4, "line numbers hold");
    assert_eq!(names[7].1, 26);
}

#[test]
fn root_reexports_map_items_to_their_modules() {
    let modules: BTreeSet<String> = ["caps", "vm", "error"].map(String::from).into();
    let map = root_reexports(
        "pub mod caps;\npub use caps::Capabilities;\npub use error::{VmmError, Other as O};\n\
         pub use kvm_ioctls::Kvm;\npub use vm::open_kvm;\n",
        &modules,
    );
    assert_eq!(map.get("Capabilities").map(String::as_str), Some("caps"));
    assert_eq!(map.get("VmmError").map(String::as_str), Some("error"));
    assert_eq!(map.get("O").map(String::as_str), Some("error"));
    assert_eq!(map.get("open_kvm").map(String::as_str), Some("vm"));
    assert!(!map.contains_key("Kvm"), "an external crate's item");
}

#[test]
fn dependency_closure_follows_normal_and_own_dev_edges_only() {
    let kinds = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut g = BTreeMap::new();
    g.insert(
        "top".to_string(),
        vec![
            ("mid".to_string(), kinds(&["normal"])),
            ("tester".to_string(), kinds(&["dev"])),
        ],
    );
    g.insert(
        "mid".to_string(),
        vec![
            ("leaf".to_string(), kinds(&["build"])),
            ("mids-tester".to_string(), kinds(&["dev"])),
        ],
    );
    let with_dev = needs(&g, "top", true);
    assert_eq!(
        with_dev.keys().collect::<Vec<_>>(),
        ["leaf", "mid", "tester"]
    );
    assert_eq!(with_dev["leaf"], "top -> mid -> leaf");
    assert!(!needs(&g, "top", false).contains_key("tester"));
}

#[test]
fn manifests_tell_dependency_kinds_apart() {
    let (name, deps) = manifest_deps(
        "[package]\nname = \"demo\"\nversion.workspace = true\n\n[dependencies]\n\
         serde.workspace = true\nrand = { version = \"0.9\" }\n\n[dev-dependencies]\n\
         png = \"0.17\"\n\n[build-dependencies]\ncc.workspace = true\n\n[lints]\n\
         workspace = true\n",
    );
    assert_eq!(name, "demo");
    let deps: Vec<(&str, &str)> = deps.iter().map(|(d, k)| (d.as_str(), k.as_str())).collect();
    assert_eq!(
        deps,
        [
            ("serde", "normal"),
            ("rand", "normal"),
            ("png", "dev"),
            ("cc", "build")
        ]
    );
}

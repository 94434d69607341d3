//! Records the git revision the lab is built from, so that every results file can say
//! which source produced its figures.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    let rev = git(&["describe", "--always", "--dirty", "--abbrev=12"]);
    println!(
        "cargo:rustc-env=EXITLAB_GIT_REVISION={}",
        rev.as_deref().unwrap_or("unknown")
    );
    // Rebuild when HEAD moves or the index changes (a commit, a checkout, a staged edit),
    // and when any source of the workspace changes: an edit not yet staged makes the tree
    // dirty too, and a binary built from it must not carry the clean revision.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for path in ["crates", "src", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
    for path in ["HEAD", "index"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &head_ref]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
}

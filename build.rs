//! Records the git commit the binary is built from, for `nanollm --version`:
//! `NANOLLM_GIT_COMMIT` (12 hex digits, `-dirty` when tracked files differ from it, or
//! `unknown` without git, outside a checkout, or in a copy inside another repository) and
//! `NANOLLM_GIT_DATE` (the commit's date, YYYY-MM-DD, or empty).
use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether this crate's folder is the top of the git checkout that holds it (not a copy
/// vendored inside another repository, whose HEAD says nothing of this source).
fn own_checkout() -> bool {
    let (Some(top), Ok(here)) = (
        git(&["rev-parse", "--show-toplevel"]),
        std::env::var("CARGO_MANIFEST_DIR"),
    ) else {
        return false;
    };
    match (
        Path::new(&top).canonicalize(),
        Path::new(&here).canonicalize(),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn main() {
    let own = own_checkout();
    let commit = own
        .then(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .flatten();
    let dirty = commit.is_some()
        && git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let commit = match commit {
        Some(c) if dirty => format!("{c}-dirty"),
        Some(c) => c,
        None => "unknown".to_string(),
    };
    let date = match own {
        true => git(&["log", "-1", "--format=%cs"]).unwrap_or_default(),
        false => String::new(),
    };
    println!("cargo:rustc-env=NANOLLM_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=NANOLLM_GIT_DATE={date}");

    // Run again when HEAD moves (a commit, a checkout), the index changes (git add), or a
    // tracked source changes (dirty or not). Only paths that exist: a missing one would
    // rebuild every time.
    let mut watch = vec![
        "src".to_string(),
        "Cargo.toml".to_string(),
        "build.rs".to_string(),
    ];
    // `--git-path` finds each file where git keeps it (a worktree's HEAD and index are its
    // own, its branches the main checkout's).
    let mut files = vec![
        "HEAD".to_string(),
        "index".to_string(),
        "packed-refs".to_string(),
    ];
    files.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for f in files.iter().filter(|_| own) {
        watch.extend(git(&["rev-parse", "--git-path", f]));
    }
    for path in watch.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
}

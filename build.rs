//! Records the git commit the binary is built from, for `nanollm --version`:
//! `NANOLLM_GIT_COMMIT` (12 hex digits, `-dirty` when tracked files differ from it, or
//! `unknown` outside a git checkout or without git) and `NANOLLM_GIT_DATE` (the commit's
//! date, YYYY-MM-DD, or empty).
use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]);
    let dirty = commit.is_some()
        && git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let commit = match commit {
        Some(c) if dirty => format!("{c}-dirty"),
        Some(c) => c,
        None => "unknown".to_string(),
    };
    let date = git(&["log", "-1", "--format=%cs"]).unwrap_or_default();
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
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for f in ["HEAD", "index", "packed-refs"] {
            watch.push(format!("{dir}/{f}"));
        }
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch.push(format!("{dir}/{head_ref}"));
        }
    }
    for path in watch.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
}

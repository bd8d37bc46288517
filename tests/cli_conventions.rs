//! What Rust CLI users expect of a tool: shell completions and manual pages generated from
//! the same clap definitions the parser uses, and `--version` naming the commit it was
//! built from and the kernels this CPU chose.
mod common;
use common::nanollm;

/// The subcommands every generated artefact must name.
const SUBCOMMANDS: &[&str] = &[
    "generate",
    "bench",
    "kv-size",
    "perplexity",
    "tokenize",
    "run-batch",
    "serve",
    "trace-svg",
    "completions",
    "man",
];

fn stdout_of(args: &[&str]) -> String {
    String::from_utf8(common::run_ok(args)).expect("UTF-8")
}

#[test]
fn completions_name_every_subcommand_and_flag() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let script = stdout_of(&["completions", shell]);
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell}: no {sub}");
        }
        for flag in [
            "--kv-cache-dtype",
            "--max-num-seqs",
            "--show-stats",
            "--dir",
        ] {
            assert!(script.contains(flag), "{shell}: no {flag}");
        }
    }
    // bash loads it and registers the completion for `nanollm`.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("nanollm.bash");
    std::fs::write(&file, stdout_of(&["completions", "bash"])).expect("write");
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && complete -p nanollm",
            file.display()
        ))
        .output()
        .expect("bash");
    let registered = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && registered.contains("nanollm"),
        "{registered} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An unknown shell is a usage error naming the value.
    let out = nanollm()
        .args(["completions", "tcsh"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
}

#[test]
fn man_pages_cover_every_command() {
    let top = stdout_of(&["man"]);
    assert!(top.contains(".TH nanollm 1"), "{top}");
    assert!(top.contains(".SH SUBCOMMANDS"), "{top}");
    for sub in SUBCOMMANDS {
        assert!(
            top.contains(&format!("nanollm\\-{}(1)", sub.replace('-', "\\-"))),
            "{sub}"
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let pages = dir.path().join("man1");
    let out = nanollm()
        .args(["man", "--dir"])
        .arg(&pages)
        .output()
        .expect("run");
    assert!(out.status.success());
    let mut names: Vec<String> = std::fs::read_dir(&pages)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut expected: Vec<String> = SUBCOMMANDS
        .iter()
        .map(|s| format!("nanollm-{s}.1"))
        .chain(["nanollm.1".to_string()])
        .collect();
    expected.sort();
    assert_eq!(names, expected);
    let generate = std::fs::read_to_string(pages.join("nanollm-generate.1")).expect("page");
    assert!(generate.contains(".SH NAME") && generate.contains("kv\\-cache\\-dtype"));
    // Every page names the version it documents (not this CPU's kernels), and its examples
    // stay line for line.
    let short = String::from_utf8(common::run_ok(&["-V"])).expect("utf-8");
    let version = short.trim_end().trim_start_matches("nanollm ");
    for name in &names {
        let page = std::fs::read_to_string(pages.join(name)).expect("page");
        let title = page
            .lines()
            .find(|l| l.starts_with(".TH "))
            .unwrap_or_default();
        assert!(
            title.contains(&format!("\"nanollm {version}\"")),
            "{name}: {title}"
        );
        assert!(
            !page.contains("kernels:") && !page.contains("avx"),
            "{name} names CPU features"
        );
    }
    assert!(
        generate.contains(".SH NOTES\n.nf\n"),
        "examples not kept line for line"
    );
    assert!(
        generate.contains("\n  nanollm generate \\-\\-show\\-stats"),
        "{generate}"
    );
    // `--dir -` is no folder; a page's name taken by a folder stops the run before any page
    // is written.
    common::fails_with(&["man", "--dir", "-"], "--dir -: expects a folder");
    let blocked = dir.path().join("blocked");
    std::fs::create_dir_all(blocked.join("nanollm-man.1")).expect("mkdir");
    common::fails_with(
        &["man", "--dir", blocked.to_str().expect("utf-8")],
        "nanollm-man.1 there is not a file",
    );
    assert_eq!(std::fs::read_dir(&blocked).expect("dir").count(), 1);
    // --dir naming a file: one error line, nothing written over it.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "keep").expect("write");
    common::fails_with(
        &["man", "--dir", file.to_str().expect("utf-8")],
        "is a file, not a folder",
    );
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "keep");
}

/// The features the kernels look for, as /proc/cpuinfo spells them.
fn cpuinfo_name(feature: &str) -> String {
    match feature {
        "avx512vnni" => "avx512_vnni".to_string(),
        f => f.to_string(),
    }
}

#[test]
fn version_names_the_commit_and_the_kernels() {
    let short = stdout_of(&["-V"]);
    let long = stdout_of(&["--version"]);
    let first = long.lines().next().unwrap_or_default();
    assert_eq!(short.trim_end(), first, "-V is --version's first line");
    assert!(
        first.starts_with(&format!("nanollm {} (", env!("CARGO_PKG_VERSION"))),
        "{first}"
    );
    // Built from this checkout: the commit is HEAD's (a build of changed files adds -dirty).
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    if let Some(head) = head.ok().filter(|o| o.status.success()) {
        let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
        assert!(
            first.contains(&format!("({head}")),
            "{first} vs HEAD {head}"
        );
    }
    let kernels = long
        .lines()
        .find(|l| l.starts_with("kernels: decode matvec "))
        .unwrap_or_else(|| panic!("no kernels line: {long}"));
    assert!(
        kernels.contains(", prefill GEMM ")
            && kernels.contains(", attention prefill ")
            && kernels.contains(", decode "),
        "{kernels}"
    );
    // The CPU line lists only features this CPU has.
    let cpu = long
        .lines()
        .find(|l| l.starts_with("cpu: "))
        .unwrap_or_else(|| panic!("no cpu line: {long}"));
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
        let flags: Vec<&str> = info
            .lines()
            .find(|l| l.starts_with("flags"))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_default();
        let listed = cpu.split_once(", ").map_or("", |(_, f)| f);
        if !listed.starts_with("none of") {
            for f in listed.split_whitespace() {
                assert!(
                    flags.contains(&cpuinfo_name(f).as_str()),
                    "{f} not in cpuinfo"
                );
            }
        }
        if flags.contains(&"avx2") && flags.contains(&"fma") && flags.contains(&"f16c") {
            assert!(!kernels.contains("portable"), "{kernels}");
        }
    }
    // --version and --help to a full disk: an error, not silence.
    if std::path::Path::new("/dev/full").exists() {
        for flag in ["--version", "--help"] {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_nanollm"))
                .arg(flag)
                .stdout(std::fs::File::create("/dev/full").expect("/dev/full"))
                .output()
                .expect("run");
            assert_eq!(out.status.code(), Some(1), "{flag} > /dev/full");
            assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: stdout: "));
        }
    }
    // Forced portable code: every family says so.
    let out = nanollm()
        .arg("--version")
        .env("NANOLLM_PORTABLE_KERNELS", "1")
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "kernels: decode matvec portable, prefill GEMM portable, attention prefill portable, decode portable (NANOLLM_PORTABLE_KERNELS set)"
        ),
        "{text}"
    );
}

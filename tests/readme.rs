//! The README's commands, kept true. Every fenced block whose info string starts with `sh`
//! is read: a plain ```` ```sh ```` block is run (bash, `-e -o pipefail`, in an empty
//! temporary folder, with this build's `nanollm` first on PATH and a 120 s limit) and must
//! exit 0; a ```` ```sh no-run ```` block (the set-up commands, a server, a long benchmark)
//! is not run, but each of its `nanollm …` and `cargo run --release -- …` commands is parsed
//! by clap, so a renamed or removed flag fails here. Also: the README stays short, its test
//! command is the one `.ci/run` runs, and every link into docs/ points at a file.
mod common;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The README's length the layout allows (the house issue: "at most 300 lines").
const MAX_README_LINES: usize = 300;
/// Wall-clock limit of one run block.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(120);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).expect("README.md")
}

/// A fenced code block: its info string, body, and the line of its opening fence (1-based).
struct Block {
    info: String,
    body: String,
    line: usize,
}

fn blocks(md: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in md.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match (&mut open, fence) {
            (None, true) => {
                open = Some(Block {
                    info: line.trim_start().trim_start_matches('`').trim().to_string(),
                    body: String::new(),
                    line: i + 1,
                })
            }
            (Some(_), true) => out.extend(open.take()),
            (Some(b), false) => {
                b.body.push_str(line);
                b.body.push('\n');
            }
            (None, false) => {}
        }
    }
    assert!(open.is_none(), "README.md: a code block is never closed");
    out
}

/// `sh` blocks, split into the ones to run and the ones to parse only.
fn sh_blocks() -> (Vec<Block>, Vec<Block>) {
    blocks(&readme())
        .into_iter()
        .filter(|b| b.info.split_whitespace().next() == Some("sh"))
        .partition(|b| !b.info.split_whitespace().any(|w| w == "no-run"))
}

/// The text of `line` before an unquoted `#` that starts a word (a shell comment).
fn without_comment(line: &str) -> &str {
    let (mut single, mut double, mut prev) = (false, false, ' ');
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return &line[..i],
            _ => {}
        }
        prev = c;
    }
    line
}

/// The commands of a block as words, each with its line in the README: continuation lines
/// joined, comments and here-document bodies skipped, split at `&&`, `||`, `;`, `|`, `&`.
fn commands(block: &Block) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut lines = block.body.lines().enumerate();
    let mut heredoc_end: Option<String> = None;
    while let Some((i, raw)) = lines.next() {
        if let Some(end) = &heredoc_end {
            if raw.trim() == end {
                heredoc_end = None;
            }
            continue;
        }
        let mut logical = without_comment(raw).trim_end().to_string();
        while logical.ends_with('\\') {
            logical.pop();
            match lines.next() {
                Some((_, next)) => logical.push_str(without_comment(next).trim_end()),
                None => break,
            }
        }
        if let Some(at) = logical.find("<<") {
            let tag = logical[at + 2..].trim_start_matches('-').trim();
            let tag: String = tag
                .trim_matches(|c| c == '\'' || c == '"')
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            heredoc_end = Some(tag);
        }
        let words = shlex::split(&logical).unwrap_or_else(|| {
            panic!("README.md:{}: cannot split {logical:?}", block.line + 1 + i)
        });
        for cmd in words.split(|w| ["&&", "||", ";", "|", "&"].contains(&w.as_str())) {
            if !cmd.is_empty() {
                out.push((block.line + 1 + i, cmd.to_vec()));
            }
        }
    }
    out
}

/// Whether `word` is a shell redirection (`>`, `>>`, `2>&1`, `<`, `>file`), and whether its
/// file is the next word (the operator alone).
fn redirection(word: &str) -> Option<bool> {
    let op = word.trim_start_matches(|c: char| c.is_ascii_digit());
    let rest = op
        .strip_prefix(">>")
        .or_else(|| op.strip_prefix('>'))
        .or_else(|| op.strip_prefix('<'))?;
    Some(rest.is_empty())
}

/// `cmd` without its redirections (the shell's, not the program's arguments).
fn without_redirections(cmd: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut words = cmd.iter();
    while let Some(w) = words.next() {
        match redirection(w) {
            Some(true) => {
                words.next();
            }
            Some(false) => {}
            None => out.push(w.clone()),
        }
    }
    out
}

/// The arguments after the program of a `nanollm …` or `cargo run --release -- …` command.
fn nanollm_args(cmd: &[String]) -> Option<Vec<String>> {
    let cmd = without_redirections(cmd);
    let words: Vec<&str> = cmd.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["nanollm", rest @ ..] => Some(rest.iter().map(|s| s.to_string()).collect()),
        ["cargo", "run", "--release", "--", rest @ ..] => {
            Some(rest.iter().map(|s| s.to_string()).collect())
        }
        _ => None,
    }
}

/// Parse every nanollm command of `blocks` with clap; returns how many were parsed.
fn parse_all(blocks: &[Block]) -> usize {
    let mut parsed = 0;
    for b in blocks {
        for (line, cmd) in commands(b) {
            let Some(args) = nanollm_args(&cmd) else {
                continue;
            };
            let argv = std::iter::once("nanollm".to_string()).chain(args);
            if let Err(e) = nanollm::cli::command().try_get_matches_from(argv) {
                use clap::error::ErrorKind;
                if !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                    panic!("README.md:{line}: `{}` does not parse: {e}", cmd.join(" "));
                }
            }
            parsed += 1;
        }
    }
    parsed
}

#[test]
fn every_nanollm_command_in_the_readme_parses() {
    let (run, no_run) = sh_blocks();
    let n = parse_all(&no_run) + parse_all(&run);
    assert!(
        n >= 8,
        "only {n} nanollm commands found in README.md's sh blocks"
    );
    // The parser sees what the shell would: a made-up flag fails.
    let fake = Block {
        info: "sh no-run".into(),
        body: "nanollm generate --no-such-flag x\n".into(),
        line: 0,
    };
    assert!(std::panic::catch_unwind(|| parse_all(&[fake])).is_err());
}

/// Run `script` with bash in `dir`, `nanollm` first on PATH, killed after [`BLOCK_TIMEOUT`].
/// Returns (exit status or None on timeout, stdout + stderr).
fn run_block(script: &str, dir: &Path, bin_dir: &Path) -> (Option<i32>, String) {
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash");
    // Drain both pipes while waiting, so a talkative block cannot fill one and stall.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.code(),
            Ok(None) if start.elapsed() > BLOCK_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("waiting for bash: {e}"),
        }
    };
    let text = out_reader.join().unwrap_or_default() + &err_reader.join().unwrap_or_default();
    (status, text)
}

#[test]
fn every_runnable_block_of_the_readme_runs() {
    common::model_path(); // the blocks use the default model: fail loudly without it
    let (run, _) = sh_blocks();
    assert!(
        run.len() >= 5,
        "only {} runnable sh blocks in README.md",
        run.len()
    );
    let bin_dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_nanollm"),
        bin_dir.path().join("nanollm"),
    )
    .expect("symlink");
    for b in &run {
        let dir = tempfile::tempdir().expect("tempdir");
        let (status, output) = run_block(&b.body, dir.path(), bin_dir.path());
        let tail: String = {
            let lines: Vec<&str> = output.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        };
        match status {
            Some(0) => {}
            Some(code) => panic!(
                "README.md:{}: the block exited {code}:\n{}\n---\n{tail}",
                b.line, b.body
            ),
            None => panic!(
                "README.md:{}: the block ran past {} s:\n{}\n---\n{tail}",
                b.line,
                BLOCK_TIMEOUT.as_secs(),
                b.body
            ),
        }
    }
}

#[test]
fn the_readme_is_short_and_its_test_command_is_ci_s() {
    let text = readme();
    let lines = text.lines().count();
    assert!(
        lines <= MAX_README_LINES,
        "README.md has {lines} lines; the layout keeps it within 300 (details go to docs/)"
    );
    // The README's test command is the last command of the set-up block; .ci/run runs the
    // same steps, in order.
    let test_line = text
        .lines()
        .find(|l| l.contains("cargo test --release") && !l.trim_start().starts_with('#'))
        .expect("a `cargo test --release` command in README.md");
    let ci = std::fs::read_to_string(root().join(".ci/run")).expect(".ci/run");
    let mut from = 0;
    for step in test_line.split("&&").map(str::trim) {
        let at = ci[from..]
            .find(step)
            .unwrap_or_else(|| panic!(".ci/run does not run `{step}` (after what came before) from README.md's test command"));
        from += at + step.len();
    }
}

/// Relative links of a Markdown text: the targets of `](target)` that are not URLs or
/// anchors, without their `#fragment`.
fn local_links(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = md;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = &after[..end];
        if !target.contains("://") && !target.starts_with('#') && !target.starts_with("mailto:") {
            let file = target.split('#').next().unwrap_or_default();
            if !file.is_empty() {
                out.push(file.to_string());
            }
        }
        rest = &after[end..];
    }
    out
}

#[test]
fn links_into_docs_point_at_files() {
    let mut pages = vec![root().join("README.md")];
    if let Ok(entries) = std::fs::read_dir(root().join("docs")) {
        pages.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "md")),
        );
    }
    let readme_links = local_links(&readme());
    assert!(
        readme_links.iter().any(|l| l.starts_with("docs/")),
        "README.md links no page of docs/"
    );
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("page");
        let base = page.parent().unwrap_or(Path::new("."));
        for link in local_links(&text) {
            assert!(
                base.join(&link).exists(),
                "{}: link to {link}, which does not exist",
                page.display()
            );
        }
    }
}

//! docs/architecture.md, kept true: every file or folder it names in backticks exists (a
//! path from the repository root, `tests/paged_kv.rs`, or from `src/`, `kv/pool/mod.rs`; a
//! lone folder name, `page/`, somewhere under `src/`), and its "Where is …" table answers
//! the questions a newcomer asks, each with a path.
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn doc() -> String {
    std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md")
}

/// The backticked spans of `md` that read as paths: no spaces or `::`, a `/` in them, and
/// ending in a file extension or `/`.
fn paths(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, span) in md.split('`').enumerate() {
        if i % 2 == 0 {
            continue; // outside backticks
        }
        let looks = !span.is_empty()
            && span.contains('/')
            && !span.contains("::")
            && !span.contains("://")
            && span
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./-*".contains(c))
            && (span.ends_with('/')
                || [".rs", ".md", ".sh", ".py", ".toml", ".html", ".js", ".css"]
                    .iter()
                    .any(|e| span.ends_with(e)));
        if looks {
            out.push(span.to_string());
        }
    }
    out
}

/// Whether `path` (maybe with one `*` in its last part) names something under `base`.
fn exists_under(base: &Path, path: &str) -> bool {
    let Some((dir, last)) = path.rsplit_once('/').or(Some(("", path))) else {
        return false;
    };
    if !last.contains('*') {
        return base.join(path).exists();
    }
    let (pre, post) = last.split_once('*').unwrap_or((last, ""));
    std::fs::read_dir(base.join(dir)).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(pre) && name.ends_with(post)
        })
    })
}

/// Whether a folder named `name` is somewhere under `dir`.
fn folder_somewhere(dir: &Path, name: &str) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let p = e.path();
            p.is_dir() && (e.file_name() == name || folder_somewhere(&p, name))
        })
    })
}

#[test]
fn every_path_the_architecture_doc_names_exists() {
    let md = doc();
    let named = paths(&md);
    assert!(named.len() >= 40, "only {} paths found", named.len());
    let missing: Vec<&String> = named
        .iter()
        .filter(|p| {
            let lone_folder = p.ends_with('/') && p.matches('/').count() == 1;
            let found = exists_under(&root(), p)
                || exists_under(&root().join("src"), p)
                || (lone_folder && folder_somewhere(&root().join("src"), &p[..p.len() - 1]));
            !found
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names paths that do not exist:\n{}",
        missing
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_where_is_table_answers_the_newcomers_questions() {
    let md = doc();
    let at = md.find("## Where is").expect("a \"## Where is …\" section");
    let section = &md[at..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |n| n + 3)];
    for question in [
        "K/V is appended",
        "TTFT is measured",
        "what runs in a step",
        "Q4_K dot product",
        "MoE",
        "disk tier names its files",
    ] {
        let row = section
            .lines()
            .find(|l| l.starts_with('|') && l.contains(question))
            .unwrap_or_else(|| panic!("no row for \"{question}\" in the Where is table"));
        assert!(
            !paths(row).is_empty(),
            "the row for \"{question}\" names no path: {row}"
        );
    }
}

/// The scanner: spans that are paths, and only those.
#[test]
fn the_scanner_reads_paths() {
    let md = "see `src/kv/pool/mod.rs`, `kernels/matmul/` and `a::b`, `--flag x`, `q4_k*.rs/`";
    assert_eq!(
        paths(md),
        vec!["src/kv/pool/mod.rs", "kernels/matmul/", "q4_k*.rs/"]
    );
    assert!(exists_under(&root(), "src/kv/"));
    assert!(!exists_under(&root(), "src/no_such_file.rs"));
    assert!(folder_somewhere(&root().join("src"), "llm_engine"));
    assert!(!folder_somewhere(&root().join("src"), "no_such_folder"));
}

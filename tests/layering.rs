//! The layers of the crate, checked on its source: each top-level module of `src/` may use
//! only modules on lower floors (docs/architecture.md draws them). A path written in code
//! (`crate::MODULE::…`, `use crate::{MODULE, …}`) counts; one in a comment does not.
//! Nothing outside `src/cli` uses `crate::cli`, and nothing in `src/roofline` uses
//! `crate::bench`, follow from the floors; they are also named on their own below.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Floor of each top-level module, ground first. On one floor modules do not use each other,
/// except the ground pair (`kv`'s rows and the attention kernels read each other's types).
const FLOORS: &[(&str, u32)] = &[
    ("units", 0),
    ("process", 0),
    ("heap", 0),
    ("kernels", 1),
    ("kv", 1),
    ("files", 1),
    ("sizing", 2),
    ("model", 3),
    ("engine", 4),
    ("eval", 5),
    ("openai", 5),
    ("roofline", 5),
    ("flags", 5),
    ("trace", 5),
    ("bench", 6),
    ("serve", 7),
    ("cli", 8),
];

/// Uses allowed on one floor.
const SAME_FLOOR_ALLOWED: &[(&str, &str)] = &[("kv", "kernels"), ("kernels", "kv")];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`src/kv/pool.rs` → `kv`, `src/units.rs`
/// → `units`); None for lib.rs and main.rs.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel
        .components()
        .next()?
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib" && name != "main").then_some(name)
}

/// The code of `text` without comments (`//` to the end of a line, `/* … */`); string
/// literals are kept, which can only add uses, never hide one.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let (mut i, mut in_str) = (0, false);
    while i < b.len() {
        if in_str {
            if b[i] == b'\\' && i + 1 < b.len() {
                out.push_str(&text[i..i + 2]);
                i += 2;
                continue;
            }
            if b[i] == b'"' {
                in_str = false;
            }
        } else if b[i] == b'"' {
            in_str = true;
        } else if text[i..].starts_with("//") {
            i = text[i..].find('\n').map_or(b.len(), |n| i + n);
            continue;
        } else if text[i..].starts_with("/*") {
            i = text[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
            continue;
        }
        let ch = text[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// The top-level modules `code` names through `crate::` (also inside `crate::{a, b::c}`).
fn crate_uses(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let preceded = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !preceded {
            if let Some(list) = after.strip_prefix('{') {
                let end = list.find('}').unwrap_or(list.len());
                for item in list[..end].split(',') {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        found.push(name);
                    }
                }
            } else {
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push(name);
                }
            }
        }
        rest = after;
    }
    found
}

/// Every (file, module it is in, module it uses) of `src/`.
fn uses() -> Vec<(PathBuf, String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut all = Vec::new();
    for f in files {
        let Some(module) = module_of(&src, &f) else {
            continue;
        };
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for used in crate_uses(&strip_comments(&text)) {
            if used != module {
                all.push((f.clone(), module.clone(), used));
            }
        }
    }
    all
}

#[test]
fn every_module_uses_only_lower_floors() {
    let floors: BTreeMap<&str, u32> = FLOORS.iter().copied().collect();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // Every top-level module has a floor: a new one must be placed.
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for f in &files {
        if let Some(m) = module_of(&src, f) {
            assert!(
                floors.contains_key(m.as_str()),
                "{}: module `{m}` has no floor in tests/layering.rs's FLOORS",
                f.display()
            );
        }
    }
    let mut wrong = Vec::new();
    for (file, module, used) in uses() {
        let (Some(&from), Some(&to)) = (floors.get(module.as_str()), floors.get(used.as_str()))
        else {
            continue; // a macro or a name that is not a module (crate::eprintln!)
        };
        let same_ok = SAME_FLOOR_ALLOWED.contains(&(module.as_str(), used.as_str()));
        if to > from || (to == from && !same_ok) {
            wrong.push(format!(
                "{}: `{module}` (floor {from}) uses `crate::{used}` (floor {to})",
                file.display()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "uses against the floors:\n{}",
        wrong.join("\n")
    );
}

/// The two rules the layering issue named, on their own.
#[test]
fn nothing_below_cli_uses_cli_and_roofline_does_not_use_bench() {
    for (file, module, used) in uses() {
        assert!(
            !(used == "cli" && module != "cli"),
            "{} uses crate::cli",
            file.display()
        );
        assert!(
            !(module == "roofline" && used == "bench"),
            "{} uses crate::bench",
            file.display()
        );
    }
}

/// The scanner itself: comments hide nothing that is code, lists are read.
#[test]
fn the_scanner_reads_paths_in_code_only() {
    let code = strip_comments(
        "use crate::cli::x; // crate::bench\n/* crate::serve */ let a = \"// not a comment\"; crate::{kv, model::Y};\nmy_crate::engine",
    );
    assert_eq!(crate_uses(&code), vec!["cli", "kv", "model"]);
}

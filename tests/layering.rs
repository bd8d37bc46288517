//! The layers of the crate, checked on its source: each top-level module of `src/` may use
//! only modules on lower floors (docs/architecture.md draws them); no file names its module's
//! file with `#[path]`; no two files of one folder use each other in a circle. A path written in code
//! (`crate::MODULE::…`, `use crate::{MODULE, …}`) counts; one in a comment does not.
//! Nothing outside `src/cli` uses `crate::cli`, and nothing in `src/roofline` uses
//! `crate::bench`, follow from the floors; they are also named on their own below.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Floor of each top-level module, ground first. On one floor modules do not use each other.
/// `kernels` stands above `kv`: the attention kernels read K/V rows in the pool's layout, and
/// nothing in `kv` uses a kernel (what both need of the CPU is in `cpu`, on the ground).
const FLOORS: &[(&str, u32)] = &[
    ("units", 0),
    ("process", 0),
    ("heap", 0),
    ("cpu", 0),
    ("kv", 1),
    ("files", 1),
    ("kernels", 2),
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
        if to >= from {
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

/// No `#[path]` attribute anywhere in `src/`: a module's file is where its name says
/// (`a/b.rs` or `a/b/mod.rs`), so the folder tree is the module tree.
#[test]
fn no_path_attributes() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for f in files {
        let code = strip_comments(&std::fs::read_to_string(&f).unwrap_or_default());
        if code.contains("#[path") {
            found.push(f.display().to_string());
        }
    }
    assert!(found.is_empty(), "#[path] in:\n{}", found.join("\n"));
}

/// The module path of a file of `src/`: `src/kv/pool/mod.rs` → ["kv", "pool"],
/// `src/kv/codec.rs` → ["kv", "codec"].
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.strip_suffix(".rs").unwrap_or(&last).to_string();
        if stem != "mod" && stem != "lib" && stem != "main" {
            parts.push(stem);
        }
    }
    parts
}

/// The names an item declaration at the start of `line` defines (`pub(crate) fn x` → x).
fn defined_name(line: &str) -> Option<String> {
    let mut rest = line.trim_start();
    for vis in ["pub(crate) ", "pub(super) ", "pub "] {
        if let Some(r) = rest.strip_prefix(vis) {
            rest = r;
            break;
        }
    }
    for kw in [
        "fn ",
        "struct ",
        "enum ",
        "const ",
        "static ",
        "type ",
        "trait ",
        "union ",
        "mod ",
        "unsafe fn ",
        "const fn ",
        "macro_rules! ",
    ] {
        if let Some(r) = rest.strip_prefix(kw) {
            let name: String = r
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            return (!name.is_empty()).then_some(name);
        }
    }
    None
}

/// The module paths `code` (of the file at module path `here`)
/// names, resolved to absolute paths with the item after them: `super::x::Y` in
/// `a/b.rs` → ["a", "x", "Y"]. Lists in braces are expanded one level.
fn paths_named(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let starts_word =
            i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b':');
        let rest = &code[i..];
        let root: Option<(Vec<String>, usize)> = if !starts_word {
            None
        } else if rest.starts_with("crate::") {
            Some((Vec::new(), "crate::".len()))
        } else if rest.starts_with("super::") || rest.starts_with("self::") {
            // `self` is the file's module; each `super` one up.
            let mut base: Vec<String> = here.to_vec();
            let mut at = 0;
            if rest.starts_with("self::") {
                at = "self::".len();
            }
            while code[i + at..].starts_with("super::") {
                base.pop();
                at += "super::".len();
            }
            Some((base, at))
        } else {
            None
        };
        let Some((base, at)) = root else {
            i += code[i..].chars().next().map_or(1, |c| c.len_utf8());
            continue;
        };
        let mut j = i + at;
        let mut segs = base.clone();
        loop {
            if code[j..].starts_with('{') {
                let end = code[j..].find('}').map_or(code.len(), |n| j + n);
                for item in code[j + 1..end].split(',') {
                    let mut p = segs.clone();
                    for s in item.trim().split("::") {
                        let name: String = s
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if name.is_empty() || name == "self" {
                            break;
                        }
                        p.push(name);
                    }
                    out.push(p);
                }
                j = end;
                break;
            }
            let name: String = code[j..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                break;
            }
            segs.push(name.clone());
            j += name.len();
            if code[j..].starts_with("::") {
                j += 2;
            } else {
                break;
            }
        }
        if segs.len() > base.len() {
            out.push(segs);
        }
        i = j.max(i + 1);
    }
    out
}

/// The folder check: inside each folder of `src/`, its files (and sub-folders, each one
/// unit) as nodes, an arrow where one names another's module or an item defined in it
/// (`mod.rs`'s `mod x;` and `pub use x::…` only declare and hand names on: no arrow).
/// Returns every circle (a strongly connected set of two or more nodes), with its arrows.
fn folder_circles() -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut dirs: Vec<PathBuf> = files
        .iter()
        .filter_map(|f| f.parent().map(Path::to_path_buf))
        .filter(|d| d != &src)
        .collect();
    dirs.sort();
    dirs.dedup();
    let mut circles = Vec::new();
    for dir in dirs {
        let folder = module_path(&src, &dir.join("mod.rs"));
        // node of each file: its first path component below `dir` ("mod" for dir/mod.rs).
        let node_of = |f: &Path| -> Option<String> {
            let rel = f.strip_prefix(&dir).ok()?;
            let first = rel
                .components()
                .next()?
                .as_os_str()
                .to_string_lossy()
                .into_owned();
            Some(first.strip_suffix(".rs").unwrap_or(&first).to_string())
        };
        let mine: Vec<&PathBuf> = files.iter().filter(|f| f.starts_with(&dir)).collect();
        let nodes: Vec<String> = {
            let mut n: Vec<String> = mine.iter().filter_map(|f| node_of(f)).collect();
            n.sort();
            n.dedup();
            n
        };
        if nodes.len() < 2 {
            continue;
        }
        // items defined at the top of each node's file (a sub-folder: its mod.rs)
        let mut defined: BTreeMap<String, String> = BTreeMap::new();
        for f in &mine {
            let Some(n) = node_of(f) else { continue };
            let direct = f.parent() == Some(dir.as_path())
                || f.file_name().is_some_and(|x| x == "mod.rs")
                    && f.parent().and_then(Path::parent) == Some(dir.as_path());
            if !direct {
                continue;
            }
            let text = std::fs::read_to_string(f).unwrap_or_default();
            for line in strip_comments(&text).lines() {
                if line.starts_with(|c: char| !c.is_whitespace()) {
                    if let Some(name) = defined_name(line) {
                        if !(n != "mod" && nodes.contains(&name)) {
                            defined.entry(name).or_insert_with(|| n.clone());
                        }
                    }
                }
            }
        }
        let mut arrows: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for f in &mine {
            let Some(from) = node_of(f) else { continue };
            // tests may use what they test from anywhere: a test file, or a file's
            // `#[cfg(test)] mod tests` block, draws no arrow
            if f.file_name().is_some_and(|x| x == "tests.rs")
                || f.components().any(|c| c.as_os_str() == "tests")
            {
                continue;
            }
            let here = module_path(&src, f);
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let text = match text.find("#[cfg(test)]\nmod tests") {
                Some(at) => text[..at].to_string(),
                None => text,
            };
            let mut code = String::new();
            for line in strip_comments(&text).lines() {
                let t = line.trim_start();
                let declares = from == "mod"
                    && (t.starts_with("pub use ")
                        || t.starts_with("pub(crate) use ")
                        || t.starts_with("mod ")
                        || t.starts_with("pub mod ")
                        || t.starts_with("pub(crate) mod "));
                if !declares {
                    code.push_str(line);
                    code.push('\n');
                }
            }
            let mut named = paths_named(&code, &here);
            // a mod.rs also names its children bare (`child::f()`)
            if from == "mod" {
                for n in &nodes {
                    let pat = format!("{n}::");
                    let mut rest = code.as_str();
                    while let Some(at) = rest.find(&pat) {
                        let before = rest[..at].chars().next_back();
                        if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                            let mut p = folder.clone();
                            p.push(n.clone());
                            named.push(p);
                        }
                        rest = &rest[at + pat.len()..];
                    }
                }
            }
            for p in named {
                if p.len() <= folder.len() || p[..folder.len()] != folder[..] {
                    continue;
                }
                let seg = &p[folder.len()];
                let to = if nodes.contains(seg) && seg != "mod" {
                    seg.clone()
                } else if let Some(n) = defined.get(seg) {
                    n.clone()
                } else {
                    continue;
                };
                if to != from {
                    arrows
                        .entry((from.clone(), to))
                        .or_default()
                        .push(p[folder.len()..].join("::"));
                }
            }
        }
        // strongly connected sets, by reachability (folders are small)
        let reach = |a: &str| -> Vec<String> {
            let mut seen = vec![a.to_string()];
            let mut stack = vec![a.to_string()];
            while let Some(x) = stack.pop() {
                for (from, to) in arrows.keys() {
                    if *from == x && !seen.contains(to) {
                        seen.push(to.clone());
                        stack.push(to.clone());
                    }
                }
            }
            seen
        };
        let mut done: Vec<String> = Vec::new();
        for n in &nodes {
            if done.contains(n) {
                continue;
            }
            let from_n = reach(n);
            let set: Vec<String> = from_n
                .iter()
                .filter(|m| reach(m).contains(n))
                .cloned()
                .collect();
            done.extend(set.iter().cloned());
            if set.len() > 1 {
                let mut lines = vec![format!("{}: {}", dir.display(), set.join(", "))];
                for ((a, b), names) in &arrows {
                    if set.contains(a) && set.contains(b) {
                        let mut names = names.clone();
                        names.sort();
                        names.dedup();
                        lines.push(format!("  {a} -> {b}: {}", names.join(", ")));
                    }
                }
                circles.push(lines.join("\n"));
            }
        }
    }
    circles
}

/// No two files (or sub-folders) of one folder use each other in a circle: a file split
/// from another takes its shared types into a file of their own.
#[test]
fn no_circles_inside_a_folder() {
    let circles = folder_circles();
    assert!(circles.is_empty(), "circles:\n{}", circles.join("\n"));
}

/// The folder check sees a circle through `super::`, through `crate::` and through a
/// mod.rs's own items, and none through a mod.rs's declarations.
#[test]
fn the_folder_check_resolves_paths() {
    let here: Vec<String> = vec!["a".into(), "b".into()];
    let got = paths_named("use super::{c::D, E};\ncrate::f::G; self::h::I;", &here);
    assert_eq!(
        got,
        vec![
            vec!["a".to_string(), "c".into(), "D".into()],
            vec!["a".to_string(), "E".into()],
            vec!["f".to_string(), "G".into()],
            vec!["a".to_string(), "b".into(), "h".into(), "I".into()],
        ]
    );
    assert_eq!(defined_name("pub(crate) fn go() {"), Some("go".into()));
    assert_eq!(defined_name("  let x = 1;"), None);
}

//! Refusing an output path that would replace what the run reads: the same file by any name
//! (symlinks, hard links, `./`), the input file of the run, or the model (its GGUF file, or
//! anything inside its Hugging Face folder).
use anyhow::{bail, Result};
use std::path::Path;

/// True when `a` and `b` name the same file: both exist as one file (on Unix: the same
/// device and inode, so hard links count; elsewhere both resolve, symlinks followed, to one
/// path), or, where one does not exist yet, the same name in the same canonical directory.
pub fn same_file(a: &Path, b: &Path) -> bool {
    // Two existing names of one file (a hard link too): the same device and inode.
    #[cfg(unix)]
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        use std::os::unix::fs::MetadataExt;
        return (x.dev(), x.ino()) == (y.dev(), y.ino());
    }
    if let (Ok(x), Ok(y)) = (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        return x == y;
    }
    let canonical = |p: &Path| {
        let parent = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::canonicalize(parent)
            .ok()
            .map(|d| d.join(p.file_name().unwrap_or_default()))
    };
    match (canonical(a), canonical(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Refuse an output path that is the input file (the run would replace its own input).
/// Errors: one line naming both flags.
pub fn check_not_input(out_flag: &str, out: &Path, in_flag: &str, input: &Path) -> Result<()> {
    if same_file(out, input) {
        bail!(
            "{out_flag} {}: the same file as {in_flag}; writing it would replace the input",
            out.display()
        );
    }
    Ok(())
}

/// Refuse an output path that is the model the run reads: its GGUF file, or any path inside
/// its Hugging Face folder (config.json, tokenizer.json, the safetensors, and the optional
/// files the loader reads when present: generation_config.json, chat_template.jinja...), or
/// one of the folder's files reached another way (a hub snapshot's links to blobs);
/// symlinks and hard links followed. `-` is checked as what stdout is (`--json - >> m.gguf`).
/// `model` is the resolved path ([`crate::model::source::resolve`]). Errors: one line naming
/// the flag, the output and the model.
pub fn check_not_model(out_flag: &str, out: &Path, model: &Path) -> Result<()> {
    let target = if out.as_os_str() == "-" {
        Path::new("/dev/stdout")
    } else {
        out
    };
    let clash = same_file(target, model)
        || (model.is_dir()
            && (inside(target, model) || {
                std::fs::read_dir(model)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|entry| same_file(target, &entry.path()))
            }));
    if clash {
        let what = if target == out {
            "a file of the model this run reads"
        } else {
            "stdout is a file of the model this run reads"
        };
        bail!(
            "{out_flag} {}: {what} ({}); writing it would replace the model",
            out.display(),
            model.display()
        );
    }
    Ok(())
}

/// Whether `path` (existing or not) lies inside directory `dir`, both resolved: its parent
/// directory, canonical, starts with `dir`'s.
fn inside(path: &Path, dir: &Path) -> bool {
    let parent = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match (std::fs::canonicalize(parent), std::fs::canonicalize(dir)) {
        (Ok(p), Ok(d)) => p.starts_with(d),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An output naming the model is refused — its GGUF file, through `./`, a symlink or a
    /// hard link, or any path inside its Hugging Face folder — while a new file beside it and
    /// another file are not.
    #[test]
    fn an_output_that_is_the_model_is_refused() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let gguf = dir.path().join("m.gguf");
        std::fs::write(&gguf, b"GGUF")?;
        let hf = dir.path().join("hf");
        std::fs::create_dir(&hf)?;
        std::fs::write(hf.join("config.json"), b"{}")?;
        #[cfg(unix)]
        std::os::unix::fs::symlink(&gguf, dir.path().join("link.gguf"))?;
        std::fs::hard_link(&gguf, dir.path().join("hard.gguf"))?;
        let refused = |out: &Path, model: &Path| {
            check_not_model("--json", out, model)
                .err()
                .map(|e| e.to_string())
        };
        let e = refused(&gguf, &gguf).unwrap_or_default();
        assert!(
            e.starts_with("--json ") && e.contains("would replace the model"),
            "{e}"
        );
        assert!(refused(&dir.path().join(".").join("m.gguf"), &gguf).is_some());
        #[cfg(unix)]
        assert!(refused(&dir.path().join("link.gguf"), &gguf).is_some());
        assert!(refused(&dir.path().join("hard.gguf"), &gguf).is_some());
        assert!(refused(&hf.join("config.json"), &hf).is_some());
        assert!(refused(&dir.path().join("out.json"), &gguf).is_none());
        // stdout is checked as the file it is: here the test harness's, not the model.
        assert!(refused(Path::new("-"), &gguf).is_none());
        // A file the loader would read if it existed (generation_config.json) is refused
        // too: any path inside the folder is.
        assert!(refused(&hf.join("generation_config.json"), &hf).is_some());
        assert!(refused(&hf.join("config.json"), &gguf).is_none());
        Ok(())
    }
}

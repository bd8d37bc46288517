//! Hugging Face model folders (config.json, safetensors weights, tokenizer.json, optional
//! tokenizer_config.json / chat_template.jinja / generation_config.json) and hub ids found in
//! the local HF cache.
pub mod cache;
pub mod config;
mod deepseek;
mod fields;
mod gemma;
mod gpt_oss;
pub mod rope;
pub mod tokenizer_config;

use crate::model::loaded::{Loaded, TokenizerFiles};
use crate::model::quantize_at_load::InSituLoad;
use crate::model::safetensors::Checkpoint;
use crate::model::{Decoder, Tokenizer};
use anyhow::{Context, Result};
use candle_core::Device;
use std::path::Path;

/// Load the model in folder `dir` onto `device`, weights in f32.
///
/// Errors: config.json missing or unsupported (see [`config::parse`]), tokenizer.json missing
/// or unreadable, config.json's `bos_token_id` or
/// `eos_token_id` past its `vocab_size`, weights missing or of the wrong shape (see [`Checkpoint::weights`]); each
/// message names the file.
pub fn load_folder(dir: &Path, device: &Device, quantize: Option<InSituLoad>) -> Result<Loaded> {
    let config_path = dir.join("config.json");
    if !config_path.is_file() {
        anyhow::bail!(
            "{}: no config.json (expected a .gguf file, or a Hugging Face model folder with config.json, model.safetensors and tokenizer.json)",
            dir.display()
        );
    }
    let hf = config::read(&config_path)?;
    let files = tokenizer_with(dir, &hf.eos_token_ids, hf.bos_token_id)?;
    // An end-of-sequence id the model cannot produce would never stop generation (and a BOS
    // past the embedding fails at the first prompt): refused here, as in a GGUF file.
    let vocab = hf.config.vocab_size;
    let specials = (hf.bos_token_id.map(|id| ("bos_token_id", id)).into_iter())
        .chain(hf.eos_token_ids.iter().map(|&id| ("eos_token_id", id)));
    for (what, id) in specials {
        if id as usize >= vocab {
            anyhow::bail!(
                "{}: {what} {id} is past the vocabulary of {vocab} tokens (config.json vocab_size)",
                dir.display()
            );
        }
    }
    let checkpoint = Checkpoint::open(dir)?;
    let (weights, fallbacks) = checkpoint.weights_with(&hf.config, device, quantize)?;
    // Matrices whose rows are not whole blocks of the --quantize type: said once.
    if let (Some(InSituLoad { t, .. }), false) = (quantize, fallbacks.is_empty()) {
        eprintln!(
            "warning: {}: --quantize {}: {} of {} weight matrices are not {}, their rows not being whole blocks of it (the type each took in brackets): {}",
            dir.display(),
            t.name().to_lowercase(),
            fallbacks.len(),
            7 * hf.config.num_hidden_layers + 1,
            t.name(),
            crate::model::quantize_at_load::name_all(&fallbacks)
        );
    }
    let decoder = Decoder::new(hf.config, weights, device)
        .with_context(|| format!("{}: cannot build the decoder", dir.display()))?;
    Ok(Loaded {
        path: dir.to_path_buf(),
        decoder,
        tokenizer: files.tokenizer,
        chat_template: files.chat_template,
        bos_token: files.bos_token,
        eos_token: files.eos_token,
    })
}

/// The tokenizer and chat template of the model folder `dir`, without the weights.
///
/// Errors: config.json missing or unsupported, tokenizer.json missing or unreadable, a side
/// file that is not valid JSON; each message names the file.
pub fn load_tokenizer(dir: &Path) -> Result<TokenizerFiles> {
    let config_path = dir.join("config.json");
    if !config_path.is_file() {
        anyhow::bail!(
            "{}: no config.json (expected a .gguf file, or a Hugging Face model folder with config.json and tokenizer.json)",
            dir.display()
        );
    }
    // Only the special token ids: the tokenizer needs nothing else of the model's config.
    let (eos_ids, bos_id) = config::read_special_ids(&config_path)?;
    tokenizer_with(dir, &eos_ids, bos_id)
}

/// The tokenizer of `dir` with config.json's `eos_token_ids` and `bos_token_id`.
fn tokenizer_with(dir: &Path, eos_ids: &[u32], bos_id: Option<u32>) -> Result<TokenizerFiles> {
    let side = tokenizer_config::read(dir)?;
    let tokenizer_path = dir.join("tokenizer.json");
    if !tokenizer_path.is_file() {
        anyhow::bail!("{}: no tokenizer.json", dir.display());
    }
    let mut eos = eos_ids.to_vec();
    eos.extend(
        side.generation_eos_ids
            .iter()
            .filter(|id| !eos_ids.contains(id)),
    );
    let mut tokenizer = Tokenizer::from_file(&tokenizer_path, &eos, bos_id, side.add_bos_token)?;
    if let Some(id) = side
        .eos_token
        .as_deref()
        .and_then(|t| tokenizer.token_to_id(t))
    {
        if !tokenizer.stop_token_ids.contains(&id) {
            tokenizer.stop_token_ids.push(id);
        }
    }
    if side.add_bos_token == Some(true) && tokenizer.add_bos.is_none() {
        tokenizer.add_bos = side
            .bos_token
            .as_deref()
            .and_then(|t| tokenizer.token_to_id(t));
    }
    Ok(TokenizerFiles {
        tokenizer,
        chat_template: side.chat_template,
        bos_token: side.bos_token,
        eos_token: side.eos_token,
    })
}

//! What loading hands back: a [`Loaded`] model (decoder, tokenizer, chat template) and a
//! model's [`TokenizerFiles`] alone; built by `source` (GGUF files) and `hf` (folders).
use crate::model::{Decoder, ModelConfig, Tokenizer};
use std::path::PathBuf;

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
    /// The BOS token's text the chat template sees as `bos_token` (GGUF: the vocabulary
    /// entry of `tokenizer.ggml.bos_token_id`; HF: tokenizer_config.json `bos_token`).
    pub bos_token: Option<String>,
    /// The EOS token's text the chat template sees as `eos_token` (GGUF:
    /// `tokenizer.ggml.eos_token_id`'s entry; HF: tokenizer_config.json `eos_token`).
    pub eos_token: Option<String>,
}

impl Loaded {
    /// The model's hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        self.decoder.config()
    }
}

/// A model's tokenizer with its chat template and the BOS/EOS texts the template sees.
pub struct TokenizerFiles {
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The Jinja chat template, if the model ships one.
    pub chat_template: Option<String>,
    /// The template's `bos_token` (see [`Loaded::bos_token`]).
    pub bos_token: Option<String>,
    /// The template's `eos_token` (see [`Loaded::eos_token`]).
    pub eos_token: Option<String>,
}

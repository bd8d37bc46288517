//! The tokenizer: built from a GGUF vocabulary exactly as llama.cpp builds it (byte-level
//! BPE with the pre-tokenizer of `tokenizer.ggml.pre` in [`bpe_pre`], SentencePiece BPE in
//! [`spm`], the metadata in `gguf_vocab`) or loaded from a tokenizer.json, and
//! [`TextStream`], which turns a stream of token ids into whole UTF-8 text.
pub mod bpe_pre;
mod control_text;
mod gguf_vocab;
mod special_text;
pub mod spm;
mod stream;

pub use gguf_vocab::SUPPORTED_MODELS;
pub use special_text::SpecialText;
pub use stream::TextStream;

use anyhow::Result;
use std::path::Path;
use std::sync::OnceLock;

/// Where a tokenizer came from, and so how its tokens read as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerKind {
    /// A Hugging Face `tokenizer.json`.
    HfJson,
    /// GGUF byte-level BPE (`tokenizer.ggml.model = gpt2`) with this `tokenizer.ggml.pre`.
    ByteLevelBpe {
        /// The `tokenizer.ggml.pre` value (`default` when absent).
        pre: String,
    },
    /// GGUF SentencePiece BPE (`tokenizer.ggml.model = llama`).
    SentencePiece,
}

impl TokenizerKind {
    /// A short description, e.g. `GGUF gpt2 BPE, pre llama-bpe`.
    pub fn describe(&self) -> String {
        match self {
            TokenizerKind::HfJson => "tokenizer.json".to_string(),
            TokenizerKind::ByteLevelBpe { pre } => format!("GGUF gpt2 byte-level BPE, pre {pre}"),
            TokenizerKind::SentencePiece => "GGUF llama SentencePiece BPE".to_string(),
        }
    }
}

/// A tokenizer plus the special ids the engine needs.
pub struct Tokenizer {
    /// The Hugging Face `tokenizers` pipeline (pre-tokenizer, BPE model, decoder).
    pub inner: tokenizers::Tokenizer,
    /// Ids that end generation: the EOS id and end-of-turn tokens present in the vocabulary.
    pub stop_token_ids: Vec<u32>,
    /// BOS id to prepend, when the model asks for one (`tokenizer.ggml.add_bos_token`).
    pub add_bos: Option<u32>,
    /// EOS id to append, when the model asks for one (GGUF `tokenizer.ggml.add_eos_token`,
    /// as llama.cpp does; rare for a chat model).
    pub add_eos: Option<u32>,
    /// Where it came from (how token pieces read as text).
    pub kind: TokenizerKind,
    /// The special tokens and the plain-text pipeline, built from `inner` on first use.
    special_text: OnceLock<SpecialText>,
}

impl Tokenizer {
    /// Load a Hugging Face `tokenizer.json`. Stop ids are `eos_ids` (config.json /
    /// generation_config.json `eos_token_id`) plus the end-of-turn tokens [`Tokenizer::with_stops`]
    /// finds. `add_bos`: `Some(true)` prepends `bos` (tokenizer_config.json
    /// `add_bos_token`), `Some(false)` never does; `None` follows the tokenizer's own
    /// post-processor (a BOS it adds to every encoding, as Llama's `TemplateProcessing` does).
    ///
    /// Errors: the file is missing or not a tokenizer.json this crate can read; the message
    /// names the file.
    pub fn from_file(
        path: &Path,
        eos_ids: &[u32],
        bos: Option<u32>,
        add_bos: Option<bool>,
    ) -> Result<Tokenizer> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot load the tokenizer ({e})", path.display()))?;
        let bos_to_add = match add_bos {
            Some(true) => bos.or_else(|| post_processor_bos(&inner)),
            Some(false) => None,
            None => post_processor_bos(&inner),
        };
        let mut tokenizer = Tokenizer::with_stops(inner, eos_ids.first().copied(), bos_to_add);
        for &id in eos_ids {
            if !tokenizer.stop_token_ids.contains(&id) {
                tokenizer.stop_token_ids.push(id);
            }
        }
        Ok(tokenizer)
    }

    /// Wrap a `tokenizers` pipeline; stop ids are `eos` plus any end-of-turn token the
    /// vocabulary has (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, `<|end|>`, `</s>`,
    /// `<|end_of_text|>`, Gemma's `<end_of_turn>`).
    pub fn with_stops(
        inner: tokenizers::Tokenizer,
        eos: Option<u32>,
        add_bos: Option<u32>,
    ) -> Tokenizer {
        let mut stop_token_ids: Vec<u32> = eos.into_iter().collect();
        for name in [
            "<|im_end|>",
            "<|endoftext|>",
            "<|eot_id|>",
            "<|end|>",
            "</s>",
            "<|end_of_text|>",
            "<end_of_turn>",
        ] {
            if let Some(id) = inner.token_to_id(name) {
                if !stop_token_ids.contains(&id) {
                    stop_token_ids.push(id);
                }
            }
        }
        Tokenizer {
            inner,
            stop_token_ids,
            add_bos,
            add_eos: None,
            kind: TokenizerKind::HfJson,
            special_text: OnceLock::new(),
        }
    }

    /// Token ids of `text`; special-token text such as `<|im_start|>` maps to its id (as in
    /// Hugging Face tokenizers, vLLM and llama.cpp) unless [`Tokenizer::set_parse_special`]
    /// turned that off. A BOS is prepended when the model asks for one.
    ///
    /// Errors: the tokenizer fails on the input.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_with(text, true)
    }

    /// Token ids of `text`, with the model's BOS (and EOS, when it asks for one) only when
    /// `add_special` (llama.cpp's `llama_tokenize(..., add_special, ...)`; its vocab tests use
    /// `false`).
    ///
    /// Errors: the tokenizer fails on the input.
    pub fn encode_with(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| anyhow::anyhow!("cannot tokenize the prompt: {e}"))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if add_special {
            ids.extend(self.add_bos);
        }
        ids.extend_from_slice(enc.get_ids());
        if add_special {
            ids.extend(self.add_eos);
        }
        Ok(ids)
    }

    /// Whether control tokens written in the text (`<|im_start|>`, `<s>`) map to their ids
    /// (`true`, the default) or are tokenized as plain text (llama.cpp `parse_special =
    /// false`, `llama-tokenize --no-parse-special`). User-defined tokens always map.
    pub fn set_parse_special(&mut self, parse_special: bool) {
        self.inner.set_encode_special_tokens(!parse_special);
    }

    /// The special (control) tokens' texts and ids, and a copy of the pipeline that reads
    /// their text as plain text, for [`Tokenizer::encode_plain`] and
    /// [`crate::model::chat::encode_messages`]. Built from `inner` the first time it is
    /// asked for (a clone of the pipeline: a few MB for a 49k vocabulary), then shared;
    /// later changes to `inner`'s vocabulary do not reach it.
    pub fn special_text(&self) -> &SpecialText {
        self.special_text
            .get_or_init(|| SpecialText::new(&self.inner))
    }

    /// Token ids of `text` with control-token text (`<|im_start|>`, `<s>`) read as plain
    /// text, as llama.cpp's `parse_special = false`; user-defined tokens still map. No BOS
    /// or EOS. Unlike [`Tokenizer::set_parse_special`] it needs no `&mut self`.
    ///
    /// Errors: the tokenizer fails on the input.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>> {
        self.special_text().encode_plain(text)
    }

    /// Text of `ids`, special tokens skipped. Errors: an id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, true)
            .map_err(|e| anyhow::anyhow!("cannot decode tokens: {e}"))
    }

    /// The token as it reads in running text (byte-level symbols decoded, SentencePiece `▁`
    /// as a space, `<0xNN>` as its byte; lossy for part of a character), for tables.
    pub fn token_text(&self, id: u32) -> String {
        match self.kind {
            TokenizerKind::SentencePiece => self
                .inner
                .id_to_token(id)
                .map(|t| spm::piece_text(&t))
                .unwrap_or_default(),
            _ => self.inner.decode(&[id], false).unwrap_or_default(),
        }
    }

    /// Look up a token's id by its vocabulary string.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}

/// The id a tokenizer's post-processor puts before every encoding (a BOS), if any: the
/// first id of `"a"` encoded with special tokens, when the rest equals the plain encoding.
fn post_processor_bos(inner: &tokenizers::Tokenizer) -> Option<u32> {
    let plain = inner.encode("a", false).ok()?;
    let with = inner.encode("a", true).ok()?;
    match with.get_ids().split_first() {
        Some((&first, rest)) if rest.starts_with(plain.get_ids()) && with.len() > plain.len() => {
            Some(first)
        }
        _ => None,
    }
}

//! The tokenizer: built from GGUF vocabulary and merges (or loaded from tokenizer.json), and
//! [`TextStream`], which turns a stream of token ids into whole UTF-8 text.
use crate::model::gguf::GgufFile;
use anyhow::{bail, Context, Result};
use std::path::Path;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::AddedToken;

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp `llama_token_type`).
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// A tokenizer plus the special ids the engine needs.
pub struct Tokenizer {
    /// The Hugging Face `tokenizers` pipeline (pre-tokenizer, BPE model, decoder).
    pub inner: tokenizers::Tokenizer,
    /// Ids that end generation: the EOS id and end-of-turn tokens present in the vocabulary.
    pub stop_token_ids: Vec<u32>,
    /// BOS id to prepend, when the model asks for one (`tokenizer.ggml.add_bos_token`).
    pub add_bos: Option<u32>,
}

impl Tokenizer {
    /// Build a byte-level BPE tokenizer from GGUF metadata (`tokenizer.ggml.model` = `gpt2`):
    /// `tokens`, `merges`, `token_type`, `pre`, `eos_token_id`, `bos_token_id`.
    ///
    /// The pre-tokenizer follows llama.cpp's choice for `pre`: `smollm` (and the other
    /// StarCoder-style vocabularies) split every digit apart, then apply the GPT-2 regex.
    ///
    /// Errors: another tokenizer model (SentencePiece `llama`), missing or malformed keys.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Tokenizer> {
        let model = gguf.meta_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            bail!("unsupported GGUF tokenizer model {model:?} (supported: gpt2 byte-level BPE)");
        }
        let strings = |key: &str| -> Result<Vec<String>> {
            let values = gguf
                .meta(key)?
                .to_vec()
                .map_err(|_| anyhow::anyhow!("{key} is not an array"))?;
            values
                .iter()
                .map(|v| {
                    v.to_string()
                        .cloned()
                        .map_err(|_| anyhow::anyhow!("{key} holds a non-string"))
                })
                .collect()
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let merges: Vec<(String, String)> = strings("tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| match m.split_once(' ') {
                Some((a, b)) => Ok((a.to_string(), b.to_string())),
                None => bail!("tokenizer.ggml.merges holds {m:?}, not two tokens"),
            })
            .collect::<Result<_>>()?;
        let types: Vec<i32> = match gguf.meta("tokenizer.ggml.token_type") {
            Ok(v) => v
                .to_vec()
                .map_err(|_| anyhow::anyhow!("tokenizer.ggml.token_type is not an array"))?
                .iter()
                .map(|t| t.to_i32().unwrap_or(1))
                .collect(),
            Err(_) => vec![1; tokens.len()],
        };
        let vocab: tokenizers::models::bpe::Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| anyhow::anyhow!("cannot build the BPE tokenizer: {e}"))?;
        let pre = gguf.meta_str("tokenizer.ggml.pre").unwrap_or("default");
        let byte_level = PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true));
        let pre_tokenizer = match pre {
            "smollm" | "starcoder" | "refact" | "codeshell" => {
                PreTokenizerWrapper::Sequence(Sequence::new(vec![
                    PreTokenizerWrapper::Digits(Digits::new(true)),
                    byte_level,
                ]))
            }
            _ => byte_level,
        };
        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre_tokenizer));
        inner.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
        let special: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|(_, &t)| t == TOKEN_TYPE_CONTROL || t == TOKEN_TYPE_USER_DEFINED)
            .map(|(tok, _)| AddedToken::from(tok.clone(), true))
            .collect();
        inner.add_special_tokens(&special);
        let eos = gguf.meta_u32("tokenizer.ggml.eos_token_id").ok();
        let add_bos = match gguf
            .meta("tokenizer.ggml.add_bos_token")
            .and_then(|v| Ok(v.to_bool()?))
        {
            Ok(true) => gguf.meta_u32("tokenizer.ggml.bos_token_id").ok(),
            _ => None,
        };
        Ok(Tokenizer::with_stops(inner, eos, add_bos))
    }

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
    /// vocabulary has (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, `<|end|>`, `</s>`).
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
        }
    }

    /// Token ids of `text`; special-token text such as `<|im_start|>` maps to its id (as in
    /// Hugging Face tokenizers and vLLM). A BOS is prepended when the model asks for one.
    ///
    /// Errors: the tokenizer fails on the input.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| anyhow::anyhow!("cannot tokenize the prompt: {e}"))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        ids.extend(self.add_bos);
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Text of `ids`, special tokens skipped. Errors: an id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, true)
            .map_err(|e| anyhow::anyhow!("cannot decode tokens: {e}"))
    }

    /// The token's vocabulary entry as text (byte-level symbols decoded), for tables.
    pub fn token_text(&self, id: u32) -> String {
        self.inner.decode(&[id], false).unwrap_or_default()
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

/// Incremental detokenizer: feed ids one at a time, get text only once it is whole UTF-8.
///
/// Decodes the window `ids[prefix..]` and emits what it adds past `ids[prefix..read]`, holding
/// back while the text ends in U+FFFD (a character split across tokens), the scheme of
/// Hugging Face text-generation-inference.
#[derive(Debug, Default)]
pub struct TextStream {
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
}

impl TextStream {
    /// An empty stream.
    pub fn new() -> TextStream {
        TextStream::default()
    }

    /// Add one generated id; returns the newly completed text (possibly empty).
    /// Errors: decoding fails.
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let before = tokenizer.decode(&self.ids[self.prefix..self.read])?;
        let now = tokenizer.decode(&self.ids[self.prefix..])?;
        if now.len() > before.len() && !now.ends_with('\u{FFFD}') {
            let delta = now
                .get(before.len()..)
                .context("decoded text changed under the stream")?
                .to_string();
            self.prefix = self.read;
            self.read = self.ids.len();
            Ok(delta)
        } else {
            Ok(String::new())
        }
    }

    /// Whatever is still held back at the end (an incomplete character decodes lossily).
    /// Errors: decoding fails.
    pub fn flush(&mut self, tokenizer: &Tokenizer) -> Result<String> {
        let before = tokenizer.decode(&self.ids[self.prefix..self.read])?;
        let now = tokenizer.decode(&self.ids[self.prefix..])?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(now.get(before.len()..).unwrap_or_default().to_string())
    }
}

//! Building the tokenizer from a GGUF file's `tokenizer.ggml.*` metadata, as llama.cpp does
//! (llama-vocab.cpp `llama_vocab::impl::load`): byte-level BPE (`model = gpt2`) with the
//! pre-tokenizer of `tokenizer.ggml.pre`, or SentencePiece BPE (`model = llama`). Anything
//! else is refused with the key and value named, never guessed.
use super::{bpe_pre, control_text, spm, Tokenizer, TokenizerKind};
use crate::model::gguf::GgufFile;
use anyhow::{anyhow, bail, Result};
use candle_core::quantized::gguf_file::Value;
use tokenizers::models::bpe::BPE;
use tokenizers::AddedToken;

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp `llama_token_type`).
const TOKEN_TYPE_NORMAL: i32 = 1;
const TOKEN_TYPE_UNKNOWN: i32 = 2;
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// The `tokenizer.ggml.model` values this build implements.
pub const SUPPORTED_MODELS: &[&str] = &["gpt2", "llama"];

impl Tokenizer {
    /// Build the tokenizer from GGUF metadata, exactly as llama.cpp does: byte-level BPE
    /// (`tokenizer.ggml.model = gpt2`) with the pre-tokenizer regexes of
    /// `tokenizer.ggml.pre` ([`bpe_pre`]), or SentencePiece BPE (`llama`, [`spm`]).
    ///
    /// Keys read: `tokenizer.ggml.model`, `pre`, `tokens`, `merges` (BPE), `scores` (SPM),
    /// `token_type`, `bos_token_id`, `eos_token_id`, `unknown_token_id`, `add_bos_token`,
    /// `add_eos_token`, `add_space_prefix`. BOS is added when `add_bos_token` says so, else by
    /// llama.cpp's default for the tokenizer (SentencePiece and the Llama 3 pre-tokenizers: yes;
    /// other BPE: no); EOS only when `add_eos_token` is true. As in llama.cpp, `pre` is ignored
    /// for SentencePiece (it has no pre-tokenizer).
    /// Control and unknown-type tokens are special (matched in text unless parsing of special
    /// tokens is off, skipped when decoding); user-defined tokens are always matched and kept.
    /// Tokens llama.cpp makes control by their text, and Phi-3's right strip, as
    /// `control_text.rs` describes.
    ///
    /// Errors: `tokenizer.ggml.model` or `tokenizer.ggml.pre` not supported (one line naming
    /// the key and value), missing or malformed keys.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Tokenizer> {
        let model = gguf.meta_str("tokenizer.ggml.model")?;
        if !SUPPORTED_MODELS.contains(&model) {
            bail!(
                "tokenizer.ggml.model = {model:?} is not supported (supported: \"gpt2\" byte-level BPE, \"llama\" SentencePiece BPE)"
            );
        }
        let pre = match gguf.meta("tokenizer.ggml.pre") {
            Ok(v) => Some(
                v.to_string()
                    .map_err(|_| anyhow!("tokenizer.ggml.pre is not a string"))?
                    .as_str(),
            ),
            Err(_) => None,
        };
        // Refuse an unknown pre-tokenizer before reading the vocabulary.
        let bpe_pre = match model {
            "gpt2" => Some(bpe_pre::for_pre(pre)?),
            _ => None,
        };
        let tokens = string_array(gguf, "tokenizer.ggml.tokens")?;
        let mut types: Vec<i32> = match gguf.meta("tokenizer.ggml.token_type") {
            Ok(v) => v
                .to_vec()
                .map_err(|_| anyhow!("tokenizer.ggml.token_type is not an array"))?
                .iter()
                .map(|t| t.to_i32().unwrap_or(TOKEN_TYPE_NORMAL))
                .collect(),
            Err(_) => vec![TOKEN_TYPE_NORMAL; tokens.len()],
        };
        // Control-looking tokens typed otherwise become control, as llama.cpp makes them.
        for id in control_text::control_looking(&tokens, |k| gguf.meta(k).is_ok()) {
            if let Some(t) = types.get_mut(id) {
                *t = TOKEN_TYPE_CONTROL;
            }
        }
        let strips_right = control_text::strips_right(gguf.meta_str("general.name").ok());
        let bool_key = |key: &str| gguf.meta(key).ok().and_then(|v| v.to_bool().ok());
        let (mut inner, kind, add_bos_default) = if let Some(pre_tokenizer) = bpe_pre {
            let merges: Vec<(String, String)> = string_array(gguf, "tokenizer.ggml.merges")?
                .into_iter()
                .map(|m| match m.split_once(' ') {
                    Some((a, b)) => Ok((a.to_string(), b.to_string())),
                    None => bail!("tokenizer.ggml.merges holds {m:?}, not two tokens"),
                })
                .collect::<Result<_>>()?;
            let vocab: tokenizers::models::bpe::Vocab = tokens
                .iter()
                .enumerate()
                .map(|(i, t)| (t.clone(), i as u32))
                .collect();
            let bpe = BPE::builder()
                .vocab_and_merges(vocab, merges)
                .ignore_merges(pre_tokenizer.ignore_merges)
                .build()
                .map_err(|e| anyhow!("cannot build the BPE tokenizer: {e}"))?;
            let mut inner = tokenizers::Tokenizer::new(bpe);
            inner.with_pre_tokenizer(Some(pre_tokenizer.pipeline()?));
            inner.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
            let kind = TokenizerKind::ByteLevelBpe {
                pre: pre.unwrap_or("default").to_string(),
            };
            (inner, kind, pre_tokenizer.add_bos_default)
        } else {
            // llama.cpp ignores tokenizer.ggml.pre for SentencePiece: it has no pre-tokenizer.
            let scores: Vec<f32> = match gguf.meta("tokenizer.ggml.scores") {
                Ok(v) => v
                    .to_vec()
                    .map_err(|_| anyhow!("tokenizer.ggml.scores is not an array"))?
                    .iter()
                    .map(|s| s.to_f32().unwrap_or(0.0))
                    .collect(),
                Err(_) => vec![0.0; tokens.len()],
            };
            let add_space_prefix = bool_key("tokenizer.ggml.add_space_prefix").unwrap_or(true);
            let merges = spm::merges_from_scores(&tokens, &scores, &|_| true);
            let unk = gguf
                .meta_u32("tokenizer.ggml.unknown_token_id")
                .ok()
                .and_then(|id| tokens.get(id as usize).cloned());
            let mut inner = tokenizers::Tokenizer::new(spm::model(&tokens, merges, unk)?);
            inner.with_normalizer(Some(spm::normalizer(add_space_prefix)?));
            inner.with_decoder(Some(spm::decoder(add_space_prefix)?));
            (inner, TokenizerKind::SentencePiece, true)
        };
        let mut added: Vec<AddedToken> = Vec::new();
        for (tok, &t) in tokens.iter().zip(&types) {
            let token = match t {
                TOKEN_TYPE_CONTROL | TOKEN_TYPE_UNKNOWN => AddedToken::from(tok.clone(), true),
                TOKEN_TYPE_USER_DEFINED => AddedToken::from(tok.clone(), false).normalized(false),
                _ => continue,
            };
            added.push(token.rstrip(strips_right && control_text::rstrip(tok)));
        }
        let (special, plain): (Vec<AddedToken>, Vec<AddedToken>) =
            added.into_iter().partition(|t| t.special);
        inner.add_special_tokens(&special);
        inner.add_tokens(&plain);
        let eos = special_id(gguf, "tokenizer.ggml.eos_token_id", tokens.len())?;
        let bos = special_id(gguf, "tokenizer.ggml.bos_token_id", tokens.len())?;
        let add_bos = match bool_key("tokenizer.ggml.add_bos_token").unwrap_or(add_bos_default) {
            true => bos,
            false => None,
        };
        let mut tokenizer = Tokenizer::with_stops(inner, eos, add_bos);
        if bool_key("tokenizer.ggml.add_eos_token") == Some(true) {
            tokenizer.add_eos = eos;
        }
        tokenizer.kind = kind;
        Ok(tokenizer)
    }
}

/// A special token id key (`tokenizer.ggml.eos_token_id`, ...): `None` when absent or
/// negative (llama.cpp's "no such token"). Errors: not an integer, or an id past the
/// vocabulary of `vocab` tokens (llama.cpp warns "bad special token" and drops it; a file
/// like that is damaged).
fn special_id(gguf: &GgufFile, key: &str, vocab: usize) -> Result<Option<u32>> {
    use candle_core::quantized::gguf_file::Value as V;
    match gguf.content.metadata.get(key) {
        None | Some(V::I32(..0)) | Some(V::I64(..0)) => Ok(None),
        Some(_) => {
            let id = gguf.meta_u32(key)?;
            if id as usize >= vocab {
                bail!("{key} is {id}, past the vocabulary of {vocab} tokens");
            }
            Ok(Some(id))
        }
    }
}

/// A GGUF array of strings. Errors: absent, not an array, or holding a non-string.
fn string_array(gguf: &GgufFile, key: &str) -> Result<Vec<String>> {
    gguf.meta(key)?
        .to_vec()
        .map_err(|_| anyhow!("{key} is not an array"))?
        .iter()
        .map(|v: &Value| {
            v.to_string()
                .cloned()
                .map_err(|_| anyhow!("{key} holds a non-string"))
        })
        .collect()
}

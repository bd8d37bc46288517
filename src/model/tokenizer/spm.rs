//! SentencePiece BPE from a GGUF vocabulary (`tokenizer.ggml.model = llama`: Llama 2,
//! Mistral 7B, TinyLlama, Phi-3), expressed as a Hugging Face `tokenizers` BPE.
//!
//! llama.cpp's algorithm (llama-vocab.cpp, `llm_tokenizer_spm_session`): spaces become `▁`
//! (U+2581), a `▁` is put in front of each text fragment that starts the input or follows a
//! special token (`add_space_prefix`), the fragment is split into characters, and the
//! adjacent pair whose concatenation is a token with the highest score merges first (ties:
//! leftmost), until no pair is a token; a character that is not a token becomes its UTF-8
//! bytes as `<0xNN>` tokens (byte fallback).
//!
//! The same thing as a `tokenizers` pipeline: normalizer `Prepend("▁")` + `Replace(" ", "▁")`
//! (normalizers run per fragment between added tokens, which gives the leading-space rule),
//! no pre-tokenizer (the fragment is one word), and a BPE whose merges are every split
//! `(a, b)` of every token `a + b` with `a` and `b` tokens too, ranked by the merged token's
//! score (higher first), with `byte_fallback`. Decoding reverses it: `▁` → space, `<0xNN>`
//! → bytes, and the prefix space dropped.
use anyhow::{anyhow, Result};
use std::collections::HashMap;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{NormalizerWrapper, Prepend, Replace, Sequence};

/// SentencePiece's word-boundary mark, U+2581.
pub const SPACE_MARK: &str = "\u{2581}";

/// The BPE merges SentencePiece scoring implies: every `(a, b)` with `a`, `b` and `a + b` all
/// in `tokens`, ordered by the score of `a + b` (highest first), then by its id, then by the
/// split position. `scores[i]` is the score of `tokens[i]`; tokens of other types than
/// `mergeable` (normal tokens) never take part.
pub fn merges_from_scores(
    tokens: &[String],
    scores: &[f32],
    mergeable: &dyn Fn(usize) -> bool,
) -> Vec<(String, String)> {
    let index: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| mergeable(*i))
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let mut found: Vec<(f32, usize, usize)> = Vec::new();
    for (id, token) in tokens.iter().enumerate() {
        if !mergeable(id) {
            continue;
        }
        for (split, _) in token.char_indices().skip(1) {
            let (a, b) = token.split_at(split);
            if index.contains_key(a) && index.contains_key(b) {
                found.push((scores.get(id).copied().unwrap_or(0.0), id, split));
            }
        }
    }
    found.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
    found
        .into_iter()
        .map(|(_, id, split)| {
            let (a, b) = tokens[id].split_at(split);
            (a.to_string(), b.to_string())
        })
        .collect()
}

/// The `tokenizers` BPE model for a SentencePiece vocabulary (ids are positions in `tokens`);
/// `unk` is the token for a byte whose `<0xNN>` token is missing.
///
/// Errors: the vocabulary and merges do not make a BPE (a merge names an unknown token).
pub fn model(tokens: &[String], merges: Vec<(String, String)>, unk: Option<String>) -> Result<BPE> {
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true);
    if let Some(unk) = unk {
        builder = builder.unk_token(unk);
    }
    builder
        .build()
        .map_err(|e| anyhow!("cannot build the SentencePiece BPE tokenizer: {e}"))
}

/// Normalizer: `▁` in front (when `add_space_prefix`) and spaces as `▁`.
///
/// Errors: none in practice (the patterns are fixed strings).
pub fn normalizer(add_space_prefix: bool) -> Result<NormalizerWrapper> {
    let mut steps = Vec::new();
    if add_space_prefix {
        steps.push(NormalizerWrapper::Prepend(Prepend::new(SPACE_MARK.into())));
    }
    steps.push(NormalizerWrapper::Replace(
        Replace::new(" ", SPACE_MARK).map_err(|e| anyhow!("SentencePiece normalizer: {e}"))?,
    ));
    Ok(NormalizerWrapper::Sequence(Sequence::new(steps)))
}

/// Decoder: `▁` → space, `<0xNN>` → byte, then the prefix space removed (when
/// `add_space_prefix`), as llama.cpp's detokenizer does.
///
/// Errors: none in practice.
pub fn decoder(add_space_prefix: bool) -> Result<DecoderWrapper> {
    let mut steps = vec![
        DecoderWrapper::Replace(
            Replace::new(SPACE_MARK, " ").map_err(|e| anyhow!("SentencePiece decoder: {e}"))?,
        ),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ];
    if add_space_prefix {
        steps.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
    }
    Ok(DecoderWrapper::Sequence(DecoderSequence::new(steps)))
}

/// The text of one SentencePiece token as it reads in running text: `▁` as a space, a byte
/// token `<0xNN>` as that byte (lossy when it is part of a longer character).
pub fn piece_text(token: &str) -> String {
    if let Some(hex) = token
        .strip_prefix("<0x")
        .and_then(|h| h.strip_suffix('>'))
        .filter(|h| h.len() == 2)
    {
        if let Ok(byte) = u8::from_str_radix(hex, 16) {
            return String::from_utf8_lossy(&[byte]).into_owned();
        }
    }
    token.replace(SPACE_MARK, " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_rank_by_the_merged_tokens_score() {
        let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let scores = [0.0, 0.0, 0.0, -2.0, -1.0, -3.0];
        let merges = merges_from_scores(&tokens, &scores, &|_| true);
        let pairs: Vec<(&str, &str)> = merges
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        assert_eq!(pairs, [("b", "c"), ("a", "b"), ("a", "bc"), ("ab", "c")]);
    }

    #[test]
    fn byte_pieces_read_as_bytes() {
        assert_eq!(piece_text("<0x0A>"), "\n");
        assert_eq!(piece_text("\u{2581}Hello"), " Hello");
        assert_eq!(piece_text("<0xZZ>"), "<0xZZ>");
    }
}

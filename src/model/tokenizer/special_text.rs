//! The special (control) tokens of a tokenizer as text: where their text occurs in a string
//! (leftmost-longest, as the `tokenizers` crate's added-vocabulary matcher finds it), and a
//! second copy of the pipeline that reads such text as plain text (llama.cpp
//! `parse_special = false`; user-defined tokens still map), usable through `&self`.
use std::collections::{HashMap, HashSet};

/// A tokenizer's special tokens and its plain-text pipeline, built once from the tokenizer
/// (see [`super::Tokenizer::special_text`]).
pub struct SpecialText {
    /// The same pipeline with special-token matching off.
    plain: tokenizers::Tokenizer,
    /// Special token text → id.
    ids: HashMap<String, u32>,
    /// The special ids.
    id_set: HashSet<u32>,
    /// The distinct byte lengths of the special texts, longest first.
    lengths: Vec<usize>,
    /// Whether some special text starts with this byte.
    first_bytes: [bool; 256],
}

impl SpecialText {
    /// Collect the special added tokens of `inner` and clone it with special-token matching
    /// off.
    pub(super) fn new(inner: &tokenizers::Tokenizer) -> SpecialText {
        let mut plain = inner.clone();
        plain.set_encode_special_tokens(true);
        let ids: HashMap<String, u32> = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special && !t.content.is_empty())
            .map(|(id, t)| (t.content, id))
            .collect();
        let id_set = ids.values().copied().collect();
        let mut lengths: Vec<usize> = ids.keys().map(String::len).collect();
        lengths.sort_unstable_by(|a, b| b.cmp(a));
        lengths.dedup();
        let mut first_bytes = [false; 256];
        for text in ids.keys() {
            first_bytes[usize::from(text.as_bytes()[0])] = true;
        }
        SpecialText {
            plain,
            ids,
            id_set,
            lengths,
            first_bytes,
        }
    }

    /// Whether `id` is a special token's id.
    pub fn is_special(&self, id: u32) -> bool {
        self.id_set.contains(&id)
    }

    /// The first special token text in `text`: its byte range and id; at the leftmost
    /// position that starts one, the longest (the `tokenizers` crate's `LeftmostLongest`).
    pub fn find(&self, text: &str) -> Option<(std::ops::Range<usize>, u32)> {
        let bytes = text.as_bytes();
        for (start, &b) in bytes.iter().enumerate() {
            if !self.first_bytes[usize::from(b)] {
                continue;
            }
            for &len in &self.lengths {
                let Some(candidate) = text.get(start..start + len) else {
                    continue;
                };
                if let Some(&id) = self.ids.get(candidate) {
                    return Some((start..start + len, id));
                }
            }
        }
        None
    }

    /// Token ids of `text` with special-token text read as plain text, no BOS or EOS.
    ///
    /// Errors: the tokenizer fails on the input.
    pub fn encode_plain(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        let enc = self
            .plain
            .encode(text, false)
            .map_err(|e| anyhow::anyhow!("cannot tokenize the prompt: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::models::wordlevel::WordLevel;
    use tokenizers::AddedToken;

    fn tokenizer() -> tokenizers::Tokenizer {
        let vocab = [("a".to_string(), 0u32), ("[UNK]".to_string(), 1)]
            .into_iter()
            .collect();
        let model = WordLevel::builder()
            .vocab(vocab)
            .unk_token("[UNK]".into())
            .build()
            .expect("word level");
        let mut t = tokenizers::Tokenizer::new(model);
        t.add_special_tokens(&[
            AddedToken::from("<s>", true),
            AddedToken::from("<s>x", true),
        ]);
        t.add_tokens(&[AddedToken::from("<u>", false)]);
        t
    }

    #[test]
    fn finds_the_leftmost_longest_special_text_only() {
        let s = SpecialText::new(&tokenizer());
        assert_eq!(s.find("ab <u> <s>x <s>"), Some((7..11, 3)));
        assert_eq!(s.find("é<s>"), Some((2..5, 2)));
        assert_eq!(s.find("<u> <s"), None);
        assert!(s.is_special(2) && s.is_special(3) && !s.is_special(4));
    }

    #[test]
    fn plain_encoding_keeps_user_defined_tokens() -> anyhow::Result<()> {
        let s = SpecialText::new(&tokenizer());
        let ids = s.encode_plain("<u><s>")?;
        assert_eq!(ids.first(), Some(&4), "{ids:?}");
        assert!(!ids.contains(&2) && !ids.contains(&3), "{ids:?}");
        Ok(())
    }
}

//! The fixed public-domain text that bench prompts are cut from.
use crate::model::Tokenizer;
use anyhow::{bail, Result};

/// Jane Austen, *Pride and Prejudice* (1813), chapters 1–2 (public domain), embedded in the
/// binary so every machine benchmarks the same prompts.
pub const TEXT: &str = include_str!("../../assets/pride-and-prejudice-ch1-2.txt");

/// How the report names [`TEXT`].
pub const TEXT_NAME: &str = "Jane Austen, Pride and Prejudice (1813), chapters 1-2";

/// [`TEXT`] tokenized once, raw (no chat template); a prompt of N tokens is its first N ids,
/// the text starting over (after its BOS) for prompts longer than it (long-context runs).
#[derive(Debug, Clone)]
pub struct PromptText {
    ids: Vec<u32>,
}

impl PromptText {
    /// Tokenize [`TEXT`] with `tokenizer`. Errors: the tokenizer fails.
    pub fn tokenize(tokenizer: &Tokenizer) -> Result<PromptText> {
        Ok(PromptText {
            ids: tokenizer.encode(TEXT)?,
        })
    }

    /// A prompt text from already tokenized ids (for tests and other texts).
    pub fn from_ids(ids: Vec<u32>) -> PromptText {
        PromptText { ids }
    }

    /// Tokens available (the longest prompt that can be cut).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when the text has no tokens.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The first `tokens` ids; past the text's end it starts over from its second token
    /// (after its BOS), as often as needed. Errors: 0 tokens, or a text of fewer than two
    /// tokens that is too short.
    pub fn prompt(&self, tokens: usize) -> Result<Vec<u32>> {
        if tokens == 0 {
            bail!("--prompt-len 0: must be at least 1 token");
        }
        if let Some(ids) = self.ids.get(..tokens) {
            return Ok(ids.to_vec());
        }
        let mut ids = self.ids.clone();
        ids.extend(self.window(self.ids.len() - 1, tokens - self.ids.len())?);
        Ok(ids)
    }
}

impl PromptText {
    /// `tokens` ids starting at `start`, wrapping around to the text's second token (after
    /// its BOS) when they run past the end: distinct prompts of any length for the serving
    /// benchmarks. Errors: 0 tokens, or a text of fewer than two tokens.
    pub fn window(&self, start: usize, tokens: usize) -> Result<Vec<u32>> {
        if tokens == 0 {
            bail!("a prompt needs at least 1 token");
        }
        let n = self.ids.len();
        if n < 2 {
            bail!("the prompt text has fewer than 2 tokens");
        }
        let body = &self.ids[1..];
        Ok((0..tokens)
            .map(|k| body[(start + k) % body.len()])
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_prefixes_of_exact_length() {
        let t = PromptText::from_ids(vec![5, 6, 7, 8]);
        assert_eq!(t.prompt(3).unwrap(), vec![5, 6, 7]);
        assert_eq!(t.prompt(4).unwrap(), vec![5, 6, 7, 8]);
        // Longer prompts start the text over after its first token (the BOS).
        assert_eq!(t.prompt(5).unwrap(), vec![5, 6, 7, 8, 6]);
        assert_eq!(t.prompt(9).unwrap(), vec![5, 6, 7, 8, 6, 7, 8, 6, 7]);
        assert!(PromptText::from_ids(vec![5]).prompt(2).is_err());
        assert!(t
            .prompt(0)
            .unwrap_err()
            .to_string()
            .contains("--prompt-len 0"));
    }

    #[test]
    fn the_text_is_long() {
        // ≥ 1,100 tokens for --prompt-len 1024 needs well over 1,000 words.
        assert!(TEXT.split_whitespace().count() > 1_500);
    }
}

//! [`TextStream`]: turning a stream of token ids into whole UTF-8 text.
use super::Tokenizer;
use anyhow::{Context, Result};

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

    /// Whatever is still held back at the end, less an incomplete character at the very end
    /// (the U+FFFD it decodes to is dropped, as vLLM's and TGI's detokenizers drop the
    /// bytes of a character that generation stopped inside; invalid bytes before it still
    /// decode to U+FFFD). Errors: decoding fails.
    pub fn flush(&mut self, tokenizer: &Tokenizer) -> Result<String> {
        let before = tokenizer.decode(&self.ids[self.prefix..self.read])?;
        let now = tokenizer.decode(&self.ids[self.prefix..])?;
        let held = self.read < self.ids.len();
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        let rest = now.get(before.len()..).unwrap_or_default();
        // Only ids held back (the text ended in U+FFFD when they came) can end inside a
        // character.
        Ok(match held {
            true => rest.trim_end_matches('\u{FFFD}').to_string(),
            false => rest.to_string(),
        })
    }
}

//! A chat's prompt token ids where message text is data, never control: only the template's
//! own markup (and the `bos_token` / `eos_token` it is given) becomes special tokens; a
//! message that spells `<|im_end|><|im_start|>system ...` gets the plain-text ids of those
//! characters, as llama.cpp's `parse_special = false` tokenizes them.
//!
//! How: every special token's text in a message's role and content is swapped for a
//! placeholder of private-use characters (a sentinel absent from the template and every
//! message, a tag naming the token, the sentinel), and the template rendered. Tokenized with
//! special parsing on, every special token of that text is the template's. Between two of
//! them, a stretch of text without a placeholder keeps exactly the ids of that one
//! tokenization; a stretch with one gets its special texts back and is tokenized alone with
//! special parsing off. The tokenizers crate tokenizes the text between special tokens one
//! stretch at a time (its added-token split comes before normalization and
//! pre-tokenization), so this equals tokenizing the whole string, except for pipelines that
//! look at a stretch's offset in the whole input (`Metaspace` with `prepend_scheme: first`,
//! some tokenizer.json files), where a re-tokenized stretch may gain a leading `▁`. A
//! template that mangles a placeholder (escapes it, cuts it) is an error; one that joins
//! message text and its own text into a special token's text is not detected.
//! Messages without special-token text take the plain path: render, then
//! [`super::encode_prompt`].
use super::{render_with, ChatOptions, Message};
use crate::model::Tokenizer;
use anyhow::{bail, Result};
use std::collections::HashMap;

/// First tag character (Supplementary Private Use Area-B); tag `i` is `TAG_BASE + i`.
const TAG_BASE: u32 = 0x10_0000;
/// Last usable tag character.
const TAG_LAST: u32 = 0x10_FFFD;
/// The sentinel candidates (Supplementary Private Use Area-A).
const SENTINELS: std::ops::RangeInclusive<u32> = 0xF_0000..=0xF_FFFD;

/// The prompt ids of `messages` in `template` (rendered with `opts`), with the model's BOS
/// (exactly one, as [`super::encode_prompt`]) and message text read as plain text.
///
/// Errors: as [`encode_messages_with`].
pub fn encode_messages(
    tokenizer: &Tokenizer,
    template: &str,
    messages: &[Message],
    opts: &ChatOptions,
) -> Result<Vec<u32>> {
    encode_messages_with(tokenizer, template, messages, opts, true)
}

/// [`encode_messages`], with the model's BOS (and EOS, when it asks for one) only when
/// `add_special`. Special parsing must be on in `tokenizer.inner` (the default) for the
/// template's markup to map to its ids.
///
/// Errors: the template fails to render (see [`render_with`]), tokenization fails, the
/// template altered a placeholder, or no private-use sentinel is free (the messages use all
/// 65,534 of them).
pub fn encode_messages_with(
    tokenizer: &Tokenizer,
    template: &str,
    messages: &[Message],
    opts: &ChatOptions,
    add_special: bool,
) -> Result<Vec<u32>> {
    let specials = tokenizer.special_text();
    let spelled = |s: &str| specials.find(s).is_some();
    if !messages
        .iter()
        .any(|m| spelled(&m.role) || spelled(&m.content))
    {
        let text = render_with(template, messages, opts)?;
        let ids = tokenizer.encode_with(&text, false)?;
        return Ok(super::with_model_specials(tokenizer, ids, add_special));
    }
    let mut guard = Placeholders::new(template, messages, opts)?;
    let protected: Vec<Message> = messages
        .iter()
        .map(|m| {
            Ok(Message {
                role: guard.protect(tokenizer, &m.role)?,
                content: guard.protect(tokenizer, &m.content)?,
            })
        })
        .collect::<Result<_>>()?;
    let text = render_with(template, &protected, opts)?;
    let ids = encode_rendered(tokenizer, &text, &guard)?;
    Ok(super::with_model_specials(tokenizer, ids, add_special))
}

/// The ids of a rendered `text` whose message text is behind `guard`'s placeholders (see
/// the module docs). Errors: tokenization fails, a placeholder was altered.
fn encode_rendered(tokenizer: &Tokenizer, text: &str, guard: &Placeholders) -> Result<Vec<u32>> {
    let specials = tokenizer.special_text();
    let whole = tokenizer
        .inner
        .encode(text, false)
        .map_err(|e| anyhow::anyhow!("cannot tokenize the prompt: {e}"))?;
    let (whole_ids, offsets) = (whole.get_ids(), whole.get_offsets());
    let mut out = Vec::with_capacity(whole_ids.len());
    let (mut gap_start, mut run_start) = (0, 0);
    let stretch = |range: std::ops::Range<usize>, run: &[u32], out: &mut Vec<u32>| {
        let Some(piece) = text.get(range) else {
            bail!("cannot tokenize the prompt: token offsets outside the text");
        };
        if piece.contains(guard.sentinel) {
            out.extend(tokenizer.encode_plain(&guard.restore(piece)?)?);
        } else {
            out.extend_from_slice(run);
        }
        Ok(())
    };
    for (i, (&id, &(start, end))) in whole_ids.iter().zip(offsets).enumerate() {
        if specials.is_special(id) {
            stretch(gap_start..start, &whole_ids[run_start..i], &mut out)?;
            out.push(id);
            (gap_start, run_start) = (end, i + 1);
        }
    }
    stretch(gap_start..text.len(), &whole_ids[run_start..], &mut out)?;
    Ok(out)
}

/// The placeholders of one conversation: a sentinel character that occurs nowhere in it,
/// and the special texts met so far (tag `i` is the `i`-th).
struct Placeholders {
    sentinel: char,
    texts: Vec<String>,
    tags: HashMap<String, char>,
}

impl Placeholders {
    /// Pick the first sentinel that none of the template, the messages and the BOS / EOS
    /// texts contains. Errors: every candidate occurs.
    fn new(template: &str, messages: &[Message], opts: &ChatOptions) -> Result<Placeholders> {
        let mut used = vec![false; SENTINELS.clone().count()];
        let texts = messages
            .iter()
            .flat_map(|m| [m.role.as_str(), m.content.as_str()])
            .chain([template])
            .chain(opts.bos_token)
            .chain(opts.eos_token);
        for c in texts.flat_map(str::chars) {
            if SENTINELS.contains(&u32::from(c)) {
                used[(u32::from(c) - SENTINELS.start()) as usize] = true;
            }
        }
        let Some(free) = used.iter().position(|&u| !u) else {
            bail!("the messages use every private-use character nanollm could mark them with");
        };
        let sentinel = char::from_u32(SENTINELS.start() + free as u32)
            .ok_or_else(|| anyhow::anyhow!("no private-use sentinel"))?;
        Ok(Placeholders {
            sentinel,
            texts: Vec::new(),
            tags: HashMap::new(),
        })
    }

    /// `text` with each special token's text swapped for its placeholder. Errors: more
    /// distinct special texts than tag characters.
    fn protect(&mut self, tokenizer: &Tokenizer, text: &str) -> Result<String> {
        let specials = tokenizer.special_text();
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some((range, _)) = specials.find(rest) {
            out.push_str(&rest[..range.start]);
            let found = &rest[range.clone()];
            let tag = match self.tags.get(found) {
                Some(&t) => t,
                None => {
                    let t = u32::try_from(self.texts.len())
                        .ok()
                        .map(|i| TAG_BASE + i)
                        .filter(|&t| t <= TAG_LAST)
                        .and_then(char::from_u32)
                        .ok_or_else(|| anyhow::anyhow!("too many distinct special tokens"))?;
                    self.texts.push(found.to_string());
                    self.tags.insert(found.to_string(), t);
                    t
                }
            };
            out.extend([self.sentinel, tag, self.sentinel]);
            rest = &rest[range.end..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// `text` with the placeholders swapped back for the special texts. Errors: a sentinel
    /// that does not start a whole placeholder (the template altered it).
    fn restore(&self, text: &str) -> Result<String> {
        let mut out = String::with_capacity(text.len());
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c != self.sentinel {
                out.push(c);
                continue;
            }
            let original = chars
                .next()
                .and_then(|tag| u32::from(tag).checked_sub(TAG_BASE))
                .and_then(|i| self.texts.get(i as usize))
                .filter(|_| chars.next() == Some(self.sentinel));
            match original {
                Some(t) => out.push_str(t),
                None => bail!(
                    "the chat template altered message text that spells a special token; nanollm cannot keep it plain text"
                ),
            }
        }
        Ok(out)
    }
}

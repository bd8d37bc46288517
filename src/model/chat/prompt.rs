//! Prompts as chat turns: one user turn (after an optional system turn) in the model's chat
//! template, as text for display or as token ids with message text kept as data; and a
//! loaded model's messages as prompt ids (`run-batch`, `serve`, `bench --scenario chat`).
use super::{self as chat, ChatOptions, Message};
use crate::model::Loaded;
use anyhow::{Context, Result};

/// The error of `--chat` on a model without a chat template.
pub const NO_TEMPLATE_FOR_CHAT: &str =
    "--chat: this model has no chat template; drop --chat to send raw text";

/// `prompt` as one user turn, after a system turn when `system` is given.
pub fn prompt_messages(prompt: &str, system: Option<&str>) -> Vec<Message> {
    let mut messages = Vec::new();
    if let Some(sys) = system {
        messages.push(Message {
            role: "system".into(),
            content: sys.into(),
        });
    }
    messages.push(Message {
        role: "user".into(),
        content: prompt.into(),
    });
    messages
}

/// `prompt` as one user turn (after a system turn when `system` is given) in the model's
/// chat `template` (which sees the model's BOS and EOS texts), ready for the assistant's
/// answer: the text, for display (`tokenize --chat`); the ids come from
/// [`chat::encode_messages`].
///
/// Errors: no template (`--chat` on a model without one), or the template fails to render.
pub fn apply_chat(
    template: Option<&str>,
    (bos_token, eos_token): (Option<&str>, Option<&str>),
    prompt: &str,
    system: Option<&str>,
) -> Result<String> {
    let template = template.context(NO_TEMPLATE_FOR_CHAT)?;
    chat::render(
        template,
        &prompt_messages(prompt, system),
        bos_token,
        eos_token,
    )
}

/// The prompt ids of `messages` in `model`'s chat template, ready for the assistant's
/// answer; message text is data, never control (see [`chat::encode_messages`]).
///
/// Errors: the model has no chat template, the template fails to render, tokenization fails.
pub fn encode_chat_messages(model: &Loaded, messages: &[Message]) -> Result<Vec<u32>> {
    let template = model
        .chat_template
        .as_deref()
        .context("messages: this model has no chat template; send a raw prompt instead")?;
    chat::encode_messages(
        &model.tokenizer,
        template,
        messages,
        &ChatOptions::generation(model.bos_token.as_deref(), model.eos_token.as_deref()),
    )
}

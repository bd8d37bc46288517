//! A request's prompt as token ids, computed on the HTTP side (a blocking task, off the
//! engine thread) so a huge prompt never stalls the running batch's streams.
use crate::model::{chat, Loaded};
use crate::openai::{ApiError, PromptInput};

/// The prompt's token ids: raw text with special-token parsing (as llama.cpp's server),
/// token ids as given, or messages through the chat template with their content as data
/// (special-token text in a message stays plain text).
///
/// Errors (HTTP 400, `param` `prompt` or `messages`): tokenization fails, the model has no
/// chat template for messages, or the prompt is empty after tokenization.
pub fn prompt_ids(model: &Loaded, prompt: &PromptInput) -> Result<Vec<u32>, ApiError> {
    let ids = match prompt {
        PromptInput::TokenIds(ids) => ids.clone(),
        PromptInput::Text(t) => chat::encode_prompt(&model.tokenizer, t)
            .map_err(|e| ApiError::invalid(format!("prompt: {e:#}"), Some("prompt")))?,
        PromptInput::Messages(m) => crate::model::chat::encode_chat_messages(model, m)
            .map_err(|e| ApiError::invalid(format!("{e:#}"), Some("messages")))?,
    };
    if ids.is_empty() {
        return Err(ApiError::invalid(
            "the prompt is empty after tokenization",
            Some("prompt"),
        ));
    }
    Ok(ids)
}

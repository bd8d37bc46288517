//! The JSON the server answers: whole responses (`chat.completion`, `text_completion`) and
//! streamed chunks (`chat.completion.chunk`, `text_completion` chunks), shaped as OpenAI's
//! API reference and vLLM's server shape them.
use crate::engine::FinishReason;
use serde_json::{json, Value};

/// OpenAI's `finish_reason` for an engine finish: `stop` (end-of-turn token or a stop
/// string), `length` (`max_tokens` or the context window), `abort` (cancelled, as vLLM),
/// `error` (this request failed alone, as vLLM's).
pub fn finish_reason(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Eos | FinishReason::StopString => "stop",
        FinishReason::Length | FinishReason::ContextFull => "length",
        FinishReason::Interrupted => "abort",
        FinishReason::Error => "error",
    }
}

/// What every object of one response shares.
#[derive(Debug, Clone)]
pub struct Meta {
    /// `chatcmpl-…` or `cmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The served model name.
    pub model: String,
    /// `/v1/chat/completions` (else `/v1/completions`).
    pub chat: bool,
    /// `stream_options.include_usage`: every chunk but the usage chunk then carries
    /// `"usage": null` (OpenAI's API reference).
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats` (with `include_usage`): every chunk carries
    /// the usage so far ([`running_usage`]) instead of `null`.
    pub continuous_usage: bool,
}

/// `system_fingerprint`: this build (OpenAI's field for the backend configuration).
pub const SYSTEM_FINGERPRINT: &str = concat!("nanollm-", env!("CARGO_PKG_VERSION"));

/// `usage`: prompt, completion and total tokens, and the prompt tokens the prefix cache
/// served (`prompt_tokens_details.cached_tokens`, OpenAI's prompt-caching field).
pub fn usage(prompt: usize, completion: usize, cached: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

/// The `usage` of one chunk of a stream with `continuous_usage_stats` (vLLM's shape): the
/// prompt tokens and the tokens generated so far, this chunk's included.
pub fn running_usage(prompt: usize, completion: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

/// The whole (non-streamed) response.
pub fn full(meta: &Meta, text: &str, finish: &str, usage: Value) -> Value {
    let choice = if meta.chat {
        json!({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null, "finish_reason": finish})
    } else {
        json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
    };
    json!({
        "id": meta.id,
        "object": if meta.chat { "chat.completion" } else { "text_completion" },
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": [choice],
        "usage": usage,
    })
}

/// One streamed chunk: `text` as the delta (chat: with `role` on the first chunk),
/// `finish` on the last.
pub fn chunk(meta: &Meta, text: &str, first: bool, finish: Option<&str>) -> Value {
    let choice = if meta.chat {
        let delta = match (first, finish) {
            (true, _) => json!({"role": "assistant", "content": text}),
            (false, Some(_)) if text.is_empty() => json!({}),
            _ => json!({"content": text}),
        };
        json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
    } else {
        json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
    };
    let mut c = json!({
        "id": meta.id,
        "object": if meta.chat { "chat.completion.chunk" } else { "text_completion" },
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": [choice],
    });
    if meta.include_usage {
        c["usage"] = Value::Null;
    }
    c
}

/// The last chunk of a stream with `stream_options.include_usage`: no choices, the usage.
pub fn usage_chunk(meta: &Meta, usage: Value) -> Value {
    json!({
        "id": meta.id,
        "object": if meta.chat { "chat.completion.chunk" } else { "text_completion" },
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": [],
        "usage": usage,
    })
}

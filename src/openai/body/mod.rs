//! One OpenAI completion request body — `prompt` (`/v1/completions`) or `messages`
//! (`/v1/chat/completions`) plus `max_tokens`, sampling, `stop`, `stream` — parsed and
//! validated, with every error naming the field (OpenAI's `param`). Unknown fields are
//! ignored, as vLLM does.
use crate::engine::SamplingParams;
use crate::model::chat::Message;
use serde_json::{Map, Value};

pub use super::field_error::FieldError;
use super::field_error::Parsed;
use super::fields::{boolean, num, seed, uint, whole};
pub use super::fields::{random_bits, random_seed};
use super::unsupported::unsupported;

/// What a request asks to continue.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    /// Raw text (`/v1/completions` `prompt` as a string); special-token text in it parses
    /// as the control token, as llama.cpp and vLLM do for raw prompts.
    Text(String),
    /// Token ids (`/v1/completions` `prompt` as a list of integers), used as given.
    TokenIds(Vec<u32>),
    /// Chat messages, rendered with the model's chat template (`/v1/chat/completions`).
    Messages(Vec<Message>),
}

/// One parsed request body.
#[derive(Debug, Clone, PartialEq)]
pub struct Body {
    /// The prompt.
    pub prompt: PromptInput,
    /// `max_completion_tokens`, else `max_tokens`, when given (≥ 1); the caller picks the
    /// default.
    pub max_tokens: Option<usize>,
    /// Sampling settings (greedy unless `temperature` > 0).
    pub sampling: SamplingParams,
    /// True when no `seed` was given and one was drawn at random (temperature > 0).
    pub seed_drawn: bool,
    /// Stop strings (`stop`: a string or a list).
    pub stop: Vec<String>,
    /// `stream`: answer with Server-Sent Events.
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the usage.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats` (vLLM's extension), with `include_usage`: every
    /// chunk carries the usage so far, so a client can count the tokens in each chunk.
    pub continuous_usage: bool,
    /// `model`, when given.
    pub model: Option<String>,
    /// `ignore_eos` (vLLM's extension, used by serving benchmarks): generate exactly
    /// `max_tokens`, past end-of-sequence tokens.
    pub ignore_eos: bool,
    /// `stop_token_ids` (vLLM's extension): token ids that end the request as the model's
    /// end-of-sequence ids do (finish reason `stop`, the token not in the text).
    pub stop_token_ids: Vec<u32>,
    /// `speculative` (nanollm's extension): this request's speculative decoding, else the
    /// server's `--spec` ([`speculative::speculative`]).
    pub speculative: crate::engine::spec::SpecChoice,
}

/// Most stop strings one request may give (OpenAI allows 4; every one is checked after
/// every generated token).
pub const MAX_STOP_STRINGS: usize = 32;

/// Longest stop string (bytes): matching costs time in proportion to the stop bytes on every
/// token, on the engine thread that steps every request.
pub const MAX_STOP_BYTES: usize = 1024;

/// Parse an OpenAI request body `o`: exactly one of `prompt` / `messages`; optional
/// `max_tokens` (or `max_completion_tokens`, ≥ 1), `temperature`, `top_p`, `top_k`, `seed`,
/// `stop`, `n` (must be 1), `stream`, `stream_options.include_usage` and
/// `.continuous_usage_stats` (with `stream`),
/// `model`, vLLM's `ignore_eos` and `stop_token_ids`, and nanollm's `speculative`.
/// With `temperature` > 0 and no `seed`, a seed is drawn ([`random_seed`]) and reported.
///
/// Errors: the first field that is of the wrong type or out of range, as a [`FieldError`].
pub fn parse_body(o: &Map<String, Value>) -> Parsed<Body> {
    let prompt = match (o.get("prompt"), o.get("messages")) {
        (Some(_), Some(_)) => {
            return Err(FieldError::body("give either prompt or messages, not both"))
        }
        (Some(p), None) => prompt(p)?,
        (None, Some(m)) => PromptInput::Messages(messages(m)?),
        (None, None) => return Err(FieldError::body("no prompt or messages")),
    };
    unsupported(o)?;
    // `max_completion_tokens` replaced the deprecated `max_tokens` in OpenAI's chat API: when
    // both are given it wins (as vLLM's and SGLang's `max_completion_tokens or max_tokens`).
    let max_tokens = match (uint(o, "max_tokens")?, uint(o, "max_completion_tokens")?) {
        (Some(0), _) => return Err(FieldError::new("max_tokens", "must be at least 1")),
        (_, Some(0)) => {
            return Err(FieldError::new(
                "max_completion_tokens",
                "must be at least 1",
            ))
        }
        (_, Some(a)) | (Some(a), None) => Some(usize::try_from(a).unwrap_or(usize::MAX)),
        (None, None) => None,
    };
    if let Some(n) = uint(o, "n")? {
        if n != 1 {
            return Err(FieldError::new(
                "n",
                format!("{n} completions per request are not supported (give n = 1, or send the request again)"),
            ));
        }
    }
    let temperature = num(o, "temperature")?.unwrap_or(0.0);
    let seed = seed(o)?;
    let seed_drawn = seed.is_none() && temperature > 0.0;
    let top_k = match o.get("top_k") {
        // vLLM's "no top-k" values.
        Some(v) if v.as_f64() == Some(-1.0) || v.as_f64() == Some(0.0) => None,
        _ => uint(o, "top_k")?.map(|k| usize::try_from(k).unwrap_or(usize::MAX)),
    };
    let sampling = SamplingParams {
        temperature,
        top_k,
        top_p: num(o, "top_p")?,
        seed: seed.unwrap_or_else(|| {
            if seed_drawn {
                random_seed()
            } else {
                SamplingParams::greedy().seed
            }
        }),
        ..SamplingParams::greedy()
    };
    if let Err(e) = sampling.validate() {
        let text = e.to_string();
        let param = ["top_p", "top_k", "temperature"]
            .into_iter()
            .find(|p| text.contains(&format!("--{}", p.replace('_', "-"))))
            .unwrap_or("temperature");
        let flag = format!("--{} ", param.replace('_', "-"));
        let message = text.strip_prefix(&flag).unwrap_or(&text);
        return Err(FieldError::new(param, message));
    }
    let stop = match o.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| s.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| FieldError::new("stop", "expected a string or a list of strings"))?,
        Some(_) => {
            return Err(FieldError::new(
                "stop",
                "expected a string or a list of strings",
            ))
        }
    };
    let stop: Vec<String> = stop.into_iter().filter(|s| !s.is_empty()).collect();
    if let Some(long) = stop.iter().find(|s| s.len() > MAX_STOP_BYTES) {
        return Err(FieldError::new(
            "stop",
            format!(
                "a stop string of {} bytes: at most {MAX_STOP_BYTES} each",
                long.len()
            ),
        ));
    }
    if stop.len() > MAX_STOP_STRINGS {
        return Err(FieldError::new(
            "stop",
            format!(
                "{} stop strings: at most {MAX_STOP_STRINGS} (each is checked after every token)",
                stop.len()
            ),
        ));
    }
    let stream = boolean(o, "stream")?.unwrap_or(false);
    let (include_usage, continuous_usage) = match o.get("stream_options") {
        None | Some(Value::Null) => (false, false),
        Some(Value::Object(so)) => {
            let flag = |k: &str| {
                boolean(so, k)
                    .map_err(|e| FieldError::new(&format!("stream_options.{k}"), e.message))
                    .map(|b| b.unwrap_or(false))
            };
            let include = flag("include_usage")?;
            let continuous = flag("continuous_usage_stats")?;
            // As vLLM: per-chunk usage only together with the usage chunk.
            (include, include && continuous)
        }
        Some(_) => {
            return Err(FieldError::new(
                "stream_options",
                "expected an object such as {\"include_usage\": true}",
            ))
        }
    };
    if !stream && o.get("stream_options").is_some_and(|v| !v.is_null()) {
        // As OpenAI's and vLLM's servers: the options describe a stream.
        return Err(FieldError::new(
            "stream_options",
            "only allowed when stream is true",
        ));
    }
    let model = match o.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => {
            return Err(FieldError::new(
                "model",
                format!("expected a string, got {v}"),
            ))
        }
    };
    let ignore_eos = boolean(o, "ignore_eos")?.unwrap_or(false);
    let stop_token_ids = match o.get("stop_token_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_u64()
                    .or_else(|| whole(v))
                    .and_then(|id| u32::try_from(id).ok())
            })
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| {
                FieldError::new(
                    "stop_token_ids",
                    "expected a list of token ids (integers 0 ..= 4294967295)",
                )
            })?,
        Some(v) => {
            return Err(FieldError::new(
                "stop_token_ids",
                format!("expected a list of token ids, got {v}"),
            ))
        }
    };
    let speculative = speculative::speculative(o)?;
    Ok(Body {
        speculative,
        ignore_eos,
        stop_token_ids,
        prompt,
        max_tokens,
        sampling,
        seed_drawn,
        stop,
        stream,
        include_usage,
        continuous_usage,
        model,
    })
}

/// `prompt`: a non-empty string (whitespace is text), or a non-empty list of token ids (a
/// one-element list of either is unwrapped, as OpenAI's batch form with one prompt).
fn prompt(v: &Value) -> Parsed<PromptInput> {
    match v {
        Value::String(s) if s.is_empty() => Err(FieldError::new("prompt", "empty")),
        Value::String(s) => Ok(PromptInput::Text(s.clone())),
        Value::Array(items) if items.is_empty() => Err(FieldError::new("prompt", "empty")),
        Value::Array(items) if items.len() == 1 && !items[0].is_number() => prompt(&items[0]),
        Value::Array(items) => items
            .iter()
            .map(|t| {
                t.as_u64()
                    .or_else(|| whole(t))
                    .and_then(|t| u32::try_from(t).ok())
            })
            .collect::<Option<Vec<u32>>>()
            .map(PromptInput::TokenIds)
            .ok_or_else(|| {
                FieldError::new(
                    "prompt",
                    "expected a string or a list of token ids (one prompt per request)",
                )
            }),
        _ => Err(FieldError::new(
            "prompt",
            "expected a string or a list of token ids",
        )),
    }
}

/// `messages`: a non-empty list of `{role, content}`; `content` is a string, a list of
/// `{"type": "text", "text": ...}` parts (joined), or null (an empty turn).
fn messages(v: &Value) -> Parsed<Vec<Message>> {
    let Value::Array(items) = v else {
        return Err(FieldError::new(
            "messages",
            "expected a list of {\"role\", \"content\"} objects",
        ));
    };
    if items.is_empty() {
        return Err(FieldError::new("messages", "empty"));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m.get("role").and_then(Value::as_str).ok_or_else(|| {
                FieldError::new(&format!("messages[{i}].role"), "expected a string")
            })?;
            let content = content(m.get("content"))
                .map_err(|e| FieldError::new(&format!("messages[{i}].content"), e))?;
            Ok(Message {
                role: role.to_string(),
                content,
            })
        })
        .collect()
}

fn content(v: Option<&Value>) -> Result<String, String> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Null) => Ok(String::new()),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(
                |p| match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => Ok(t.as_str()),
                    (Some(kind), _) if kind != "text" => Err(format!(
                        "content parts of type {kind:?} are not supported (text only)"
                    )),
                    _ => Err("expected {\"type\": \"text\", \"text\": \"...\"} parts".to_string()),
                },
            )
            .collect::<Result<Vec<&str>, String>>()
            // One part per line, as vLLM and llama.cpp's server join text parts.
            .map(|t| t.join("\n")),
        None => Err("expected a string".to_string()),
        Some(_) => Err("expected a string or a list of text parts".to_string()),
    }
}

pub mod speculative;

#[cfg(test)]
mod tests;

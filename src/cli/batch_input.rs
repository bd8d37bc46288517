//! The request lines of `run-batch` (JSONL): parsing and validation, one clear error naming
//! the line and the field.
use crate::cli::generate::encode_chat_messages;
use crate::engine::SamplingParams;
use crate::model::chat::{self, Message};
use crate::model::Loaded;
use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

/// What a request line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    /// Raw text, as OpenAI's `/v1/completions` `prompt`.
    Text(String),
    /// Chat messages, rendered with the model's chat template (`/v1/chat/completions`).
    Messages(Vec<Message>),
}

/// One parsed request line.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRequest {
    /// 1-based line number in the input.
    pub line: usize,
    /// 0-based index among the requests (blank lines skipped).
    pub index: usize,
    /// The line's `custom_id`, echoed back (any JSON value; null when absent).
    pub custom_id: Value,
    /// The prompt.
    pub prompt: PromptInput,
    /// Most tokens to generate (`max_tokens` / `max_completion_tokens`).
    pub max_tokens: usize,
    /// Sampling settings (greedy unless `temperature` > 0).
    pub sampling: SamplingParams,
    /// True when no `seed` was given and one was drawn at random (temperature > 0).
    pub seed_drawn: bool,
    /// Stop strings.
    pub stop: Vec<String>,
}

impl BatchRequest {
    /// The prompt's token ids: raw text tokenized (with the model's BOS; special-token text
    /// maps to its ids, as llama.cpp), or the messages through the model's chat template
    /// (message text is data: special-token text in it stays plain text). Errors: a model
    /// without a chat template for `messages`, a template that fails, an empty prompt.
    pub fn prompt_ids(&self, model: &Loaded) -> Result<Vec<u32>> {
        let ids = match &self.prompt {
            PromptInput::Text(t) => chat::encode_prompt(&model.tokenizer, t)?,
            PromptInput::Messages(m) => encode_chat_messages(model, m)?,
        };
        if ids.is_empty() {
            bail!("the prompt is empty after tokenization");
        }
        Ok(ids)
    }
}

/// Parse every non-blank line of `text`; `default_max_tokens` applies where a line sets none.
/// Errors: the first bad line, as `--input line N: <field>: <what is wrong>`; no request.
pub fn parse_jsonl(text: &str, default_max_tokens: usize) -> Result<Vec<BatchRequest>> {
    let mut out: Vec<BatchRequest> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let line = i + 1;
        let index = out.len();
        let r = parse_line(raw, line, index, default_max_tokens)
            .with_context(|| format!("--input line {line}"))?;
        if !r.custom_id.is_null() {
            if let Some(prev) = out.iter().find(|p| p.custom_id == r.custom_id) {
                bail!(
                    "--input line {line}: custom_id {} repeats line {} (OpenAI batch files need unique ids)",
                    r.custom_id,
                    prev.line
                );
            }
        }
        out.push(r);
    }
    if out.is_empty() {
        bail!("--input: no request (expected one JSON object per line)");
    }
    Ok(out)
}

fn parse_line(raw: &str, line: usize, index: usize, default_max: usize) -> Result<BatchRequest> {
    let v: Value = serde_json::from_str(raw).map_err(|e| anyhow::anyhow!("not JSON: {e}"))?;
    let Value::Object(top) = v else {
        bail!("expected a JSON object");
    };
    let custom_id = top.get("custom_id").cloned().unwrap_or(Value::Null);
    let o = match top.get("body") {
        Some(Value::Object(b)) => b.clone(),
        Some(_) => bail!("body: expected a JSON object"),
        None => top,
    };
    let prompt = match (o.get("prompt"), o.get("messages")) {
        (Some(_), Some(_)) => bail!("give either prompt or messages, not both"),
        (Some(Value::String(s)), None) => PromptInput::Text(s.clone()),
        (Some(_), None) => bail!("prompt: expected a string"),
        (None, Some(m)) => PromptInput::Messages(messages(m)?),
        (None, None) => bail!("no prompt or messages"),
    };
    if matches!(&prompt, PromptInput::Text(s) if s.trim().is_empty()) {
        bail!("prompt: empty");
    }
    let max_tokens = match (uint(&o, "max_tokens")?, uint(&o, "max_completion_tokens")?) {
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => default_max as u64,
    };
    if max_tokens == 0 {
        bail!("max_tokens: must be at least 1");
    }
    if let Some(n) = uint(&o, "n")? {
        if n != 1 {
            bail!(
                "n: {n} completions per request are not supported (give n = 1, or repeat the line)"
            );
        }
    }
    let temperature = num(&o, "temperature")?.unwrap_or(0.0);
    let seed = uint(&o, "seed")?;
    let seed_drawn = seed.is_none() && temperature > 0.0;
    let sampling = SamplingParams {
        temperature,
        top_k: uint(&o, "top_k")?.map(|k| k as usize),
        top_p: num(&o, "top_p")?,
        seed: seed.unwrap_or_else(|| {
            if seed_drawn {
                random_seed()
            } else {
                SamplingParams::greedy().seed
            }
        }),
        ..SamplingParams::greedy()
    };
    sampling.validate().map_err(|e| {
        anyhow::anyhow!(
            "{}",
            e.to_string()
                .replace("--top-p", "top_p")
                .replace("--top-k", "top_k")
                .replace("--temperature", "temperature")
        )
    })?;
    let stop = match o.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| s.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .context("stop: expected a string or a list of strings")?,
        Some(_) => bail!("stop: expected a string or a list of strings"),
    };
    Ok(BatchRequest {
        line,
        index,
        custom_id,
        prompt,
        max_tokens: usize::try_from(max_tokens).unwrap_or(usize::MAX),
        sampling,
        seed_drawn,
        stop,
    })
}

/// `messages`: a non-empty list of `{role, content}` with string fields.
fn messages(v: &Value) -> Result<Vec<Message>> {
    let Value::Array(items) = v else {
        bail!("messages: expected a list of {{\"role\", \"content\"}} objects");
    };
    if items.is_empty() {
        bail!("messages: empty");
    }
    items
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let field = |k: &str| {
                m.get(k)
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .with_context(|| format!("messages[{i}].{k}: expected a string"))
            };
            Ok(Message {
                role: field("role")?,
                content: field("content")?,
            })
        })
        .collect()
}

/// An optional non-negative integer field.
fn uint(o: &Map<String, Value>, key: &str) -> Result<Option<u64>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .with_context(|| format!("{key}: expected a non-negative integer, got {v}")),
    }
}

/// An optional number field.
fn num(o: &Map<String, Value>, key: &str) -> Result<Option<f64>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .with_context(|| format!("{key}: expected a number, got {v}")),
    }
}

/// A seed drawn from the OS's randomness (std's per-process random hash keys, mixed with
/// the clock), for sampling requests that set none: reported so the run can be repeated.
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_defaults_and_openai_batch_bodies() -> Result<()> {
        let text = "{\"prompt\": \"hi\"}\n\n{\"custom_id\": \"a\", \"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"yo\"}], \"max_tokens\": 5, \"temperature\": 0.5, \"stop\": \"x\", \"extra\": 1}}\n";
        let r = parse_jsonl(text, 7)?;
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].line, r[0].index, r[0].max_tokens), (1, 0, 7));
        assert!(r[0].sampling.is_greedy() && !r[0].seed_drawn);
        assert_eq!((r[1].line, r[1].index, r[1].max_tokens), (3, 1, 5));
        assert_eq!(r[1].custom_id, Value::from("a"));
        assert_eq!(r[1].stop, vec!["x".to_string()]);
        assert!(r[1].seed_drawn, "temperature > 0 without a seed draws one");
        Ok(())
    }

    #[test]
    fn bad_lines_name_the_line_and_the_field() {
        let err = |t: &str| format!("{:#}", parse_jsonl(t, 4).unwrap_err());
        assert!(err("{\"prompt\": \"a\"}\n{oops").contains("--input line 2: not JSON"));
        assert!(err("{\"prompt\": 3}").contains("prompt: expected a string"));
        assert!(err("{\"prompt\": \"a\", \"max_tokens\": -1}")
            .contains("max_tokens: expected a non-negative integer"));
        assert!(err("{\"prompt\": \"a\", \"max_tokens\": 0}")
            .contains("max_tokens: must be at least 1"));
        assert!(err("{\"messages\": [{\"role\": \"user\"}]}").contains("messages[0].content"));
        assert!(err("{\"prompt\": \"a\", \"temperature\": -1}").contains("temperature"));
        assert!(err("[1]").contains("expected a JSON object"));
        assert!(err("{\"prompt\": \"a\", \"n\": 2}").contains("n: 2 completions"));
        assert!(err(
            "{\"prompt\": \"a\", \"custom_id\": 1}\n{\"prompt\": \"b\", \"custom_id\": 1}"
        )
        .contains("--input line 2: custom_id 1 repeats line 1"));
        assert!(err("\n\n").contains("no request"));
    }
}

//! The request lines of `run-batch` (JSONL): parsing and validation, one clear error naming
//! the line and the field.
use crate::engine::SamplingParams;
use crate::model::chat;
use crate::model::chat::encode_chat_messages;
use crate::model::Loaded;
pub use crate::openai::body::random_seed;
use crate::openai::parse_body;
pub use crate::openai::PromptInput;
use anyhow::{bail, Context, Result};
use serde_json::Value;

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
    /// `ignore_eos` (vLLM's extension): generate exactly `max_tokens`, past end-of-sequence.
    pub ignore_eos: bool,
    /// `stop_token_ids` (vLLM's extension): ids that end the request like end-of-sequence.
    pub stop_token_ids: Vec<u32>,
    /// `speculative` (nanollm's extension): this line's speculative decoding, else `--spec`.
    pub speculative: crate::engine::spec::SpecChoice,
    /// True when the line set `max_tokens` itself (false: `--max-tokens` filled it in).
    pub max_tokens_given: bool,
}

impl BatchRequest {
    /// The prompt's token ids: raw text tokenized (with the model's BOS; special-token text
    /// maps to its ids, as llama.cpp), or the messages through the model's chat template
    /// (message text is data: special-token text in it stays plain text). Errors: a model
    /// without a chat template for `messages`, a template that fails, an empty prompt.
    pub fn prompt_ids(&self, model: &Loaded) -> Result<Vec<u32>> {
        let ids = match &self.prompt {
            PromptInput::Text(t) => chat::encode_prompt(&model.tokenizer, t)?,
            PromptInput::TokenIds(ids) => ids.clone(),
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
    // custom_id (as JSON text) → its line: one lookup per line (a scan per line took 9 s
    // for 50,000 lines).
    let mut ids: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let line = i + 1;
        let index = out.len();
        let r = parse_line(raw, line, index, default_max_tokens)
            .with_context(|| format!("--input line {line}"))?;
        if !r.custom_id.is_null() {
            if let Some(prev) = ids.insert(r.custom_id.to_string(), line) {
                bail!(
                    "--input line {line}: custom_id {} repeats line {prev} (OpenAI batch files need unique ids)",
                    r.custom_id,
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
    if top.contains_key("body") {
        if let Some(key) = ["prompt", "messages"]
            .into_iter()
            .find(|k| top.contains_key(*k))
        {
            bail!("both body and a top-level {key}: give the request in one of them");
        }
    }
    // An OpenAI batch line's method and url, when given, must name what nanollm runs (vLLM
    // checks the body against the url's request type).
    if let Some(m) = top.get("method") {
        if m.as_str() != Some("POST") {
            bail!("method: {m} (expected \"POST\")");
        }
    }
    let url = match top.get("url") {
        None | Some(Value::Null) => None,
        Some(Value::String(u)) if u == "/v1/completions" || u == "/v1/chat/completions" => {
            Some(u.as_str())
        }
        Some(u) => bail!("url: {u} (expected \"/v1/completions\" or \"/v1/chat/completions\")"),
    };
    let body = match top.get("body") {
        Some(Value::Object(b)) => b,
        Some(_) => bail!("body: expected a JSON object"),
        None => &top,
    };
    match url {
        Some("/v1/chat/completions") if !body.contains_key("messages") => {
            bail!("url /v1/chat/completions: the body needs messages")
        }
        Some("/v1/completions") if !body.contains_key("prompt") => {
            bail!("url /v1/completions: the body needs a prompt")
        }
        _ => {}
    }
    if body.get("stream") == Some(&Value::Bool(true)) {
        bail!("stream: true is not for a batch (results are written when every request ends; vLLM refuses it too)");
    }
    let body = parse_body(body)?;
    Ok(BatchRequest {
        line,
        index,
        custom_id,
        prompt: body.prompt,
        max_tokens: body.max_tokens.unwrap_or(default_max),
        max_tokens_given: body.max_tokens.is_some(),
        sampling: body.sampling,
        seed_drawn: body.seed_drawn,
        stop: body.stop,
        ignore_eos: body.ignore_eos,
        stop_token_ids: body.stop_token_ids,
        speculative: body.speculative,
    })
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
        assert!(err("{\"prompt\": \"a\", \"max_tokens\": 1e20}")
            .contains("max_tokens: too large: expected an integer of at most 2^53"));
        assert!(err("{\"prompt\": \"a\", \"max_tokens\": 2.5}")
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
        assert!(err("{\"body\": {\"prompt\": \"a\"}, \"prompt\": \"b\"}")
            .contains("both body and a top-level prompt"));
        // An OpenAI batch line's url and method name what runs (they were ignored), and a
        // batch is not streamed (vLLM refuses it too).
        let batch = |url: &str, method: &str, body: &str| {
            format!(r#"{{"custom_id": "a", "method": "{method}", "url": "{url}", "body": {body}}}"#)
        };
        let msgs = r#"{"messages": [{"role": "user", "content": "hi"}]}"#;
        assert!(err(&batch("/v1/embeddings", "POST", msgs)).contains("url: \"/v1/embeddings\""));
        assert!(err(&batch("/v1/chat/completions", "GET", msgs)).contains("method: \"GET\""));
        assert!(err(&batch("/v1/completions", "POST", msgs))
            .contains("url /v1/completions: the body needs a prompt"));
        assert!(err(&batch(
            "/v1/chat/completions",
            "POST",
            r#"{"prompt": "hi"}"#
        ))
        .contains("url /v1/chat/completions: the body needs messages"));
        assert!(parse_jsonl(&batch("/v1/chat/completions", "POST", msgs), 4).is_ok());
        assert!(
            err(r#"{"prompt": "a", "stream": true}"#).contains("stream: true is not for a batch")
        );
    }

    /// Unique ids are checked with one lookup per line (a scan per line took 9 s for 50,000
    /// lines); a repeat still names both lines.
    #[test]
    fn many_unique_ids_parse_fast_and_a_repeat_names_both_lines() {
        let mut text: String = (0..50_000)
            .map(|i| format!("{{\"prompt\": \"a\", \"custom_id\": \"r{i}\"}}\n"))
            .collect();
        assert_eq!(parse_jsonl(&text, 4).map(|r| r.len()).unwrap_or(0), 50_000);
        text.push_str("{\"prompt\": \"b\", \"custom_id\": \"r7\"}\n");
        let e = format!("{:#}", parse_jsonl(&text, 4).unwrap_err());
        assert!(
            e.contains("--input line 50001: custom_id \"r7\" repeats line 8"),
            "{e}"
        );
    }
}

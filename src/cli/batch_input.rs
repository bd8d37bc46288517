//! The request lines of `run-batch` (JSONL): parsing and validation, one clear error naming
//! the line and the field.
use crate::cli::chat_prompt::encode_chat_messages;
use crate::engine::SamplingParams;
use crate::model::chat;
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
    if top.contains_key("body") {
        if let Some(key) = ["prompt", "messages"]
            .into_iter()
            .find(|k| top.contains_key(*k))
        {
            bail!("both body and a top-level {key}: give the request in one of them");
        }
    }
    let body = match top.get("body") {
        Some(Value::Object(b)) => parse_body(b),
        Some(_) => bail!("body: expected a JSON object"),
        None => parse_body(&top),
    }?;
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
    }
}

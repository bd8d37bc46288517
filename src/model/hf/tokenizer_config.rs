//! The tokenizer side files of a Hugging Face model folder: tokenizer_config.json (chat
//! template, `bos_token` / `eos_token`, `add_bos_token`), chat_template.jinja (newer
//! transformers save the template there) and generation_config.json (`eos_token_id`).
use anyhow::{anyhow, Context, Result};
use serde_json::Value;
use std::path::Path;

/// What the side files say; every field is optional, as every file is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenizerSettings {
    /// The Jinja chat template: chat_template.jinja, else tokenizer_config.json
    /// `chat_template` (a string, or the entry named `default` of a list of
    /// `{name, template}`).
    pub chat_template: Option<String>,
    /// tokenizer_config.json `bos_token` (a string or an AddedToken object's `content`).
    pub bos_token: Option<String>,
    /// tokenizer_config.json `eos_token`.
    pub eos_token: Option<String>,
    /// tokenizer_config.json `add_bos_token`.
    pub add_bos_token: Option<bool>,
    /// generation_config.json `eos_token_id` (an id or a list).
    pub generation_eos_ids: Vec<u32>,
}

/// Read the side files in `dir` (absent files are fine).
///
/// Errors: a file that exists but is unreadable or not valid JSON; the message names it.
pub fn read(dir: &Path) -> Result<TokenizerSettings> {
    let mut s = TokenizerSettings::default();
    if let Some(cfg) = json_file(&dir.join("tokenizer_config.json"))? {
        s.chat_template = template_field(cfg.get("chat_template"));
        s.bos_token = token_string(cfg.get("bos_token"));
        s.eos_token = token_string(cfg.get("eos_token"));
        s.add_bos_token = cfg.get("add_bos_token").and_then(Value::as_bool);
    }
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        let text = std::fs::read_to_string(&jinja)
            .with_context(|| format!("{}: cannot read", jinja.display()))?;
        s.chat_template = Some(text);
    }
    if let Some(gen) = json_file(&dir.join("generation_config.json"))? {
        s.generation_eos_ids = match gen.get("eos_token_id") {
            Some(Value::Array(ids)) => ids.iter().filter_map(as_id).collect(),
            Some(v) => as_id(v).into_iter().collect(),
            None => Vec::new(),
        };
    }
    Ok(s)
}

/// A JSON file's contents, `None` when the file does not exist.
fn json_file(path: &Path) -> Result<Option<Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| anyhow!("{}: not valid JSON ({e})", path.display()))
}

fn as_id(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

/// `chat_template` as a string, or the `default` entry of a list of named templates.
fn template_field(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    }
}

/// A special token written as a string or as an AddedToken object (`{"content": ...}`).
fn token_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

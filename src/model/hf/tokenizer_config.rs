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

/// Read the side files in `dir` (absent files and fields, and `null` fields, are fine).
///
/// Errors: a file that exists but is unreadable or not valid JSON, or a field of the wrong
/// type (`chat_template` 42, `add_bos_token` "no", `eos_token_id` "2"); the message names
/// the file, the field and its value.
pub fn read(dir: &Path) -> Result<TokenizerSettings> {
    let mut s = TokenizerSettings::default();
    let path = dir.join("tokenizer_config.json");
    if let Some(cfg) = json_file(&path)? {
        let wrong = |field: &str, v: &Value, want: &str| {
            anyhow!("{}: {field} is {v}, not {want}", path.display())
        };
        s.chat_template = match cfg.get("chat_template") {
            None | Some(Value::Null) => None,
            Some(v) => Some(template_field(v).ok_or_else(|| {
                wrong(
                    "chat_template",
                    v,
                    "a string or a list of {name, template} with a \"default\"",
                )
            })?),
        };
        for (field, slot) in [
            ("bos_token", &mut s.bos_token),
            ("eos_token", &mut s.eos_token),
        ] {
            *slot = match cfg.get(field) {
                None | Some(Value::Null) => None,
                Some(v) => Some(token_string(v).ok_or_else(|| {
                    wrong(field, v, "a string or an object with a string \"content\"")
                })?),
            };
        }
        s.add_bos_token = match cfg.get("add_bos_token") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(v) => return Err(wrong("add_bos_token", v, "true or false")),
        };
    }
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        let text = std::fs::read_to_string(&jinja)
            .with_context(|| format!("{}: cannot read", jinja.display()))?;
        s.chat_template = Some(text);
    }
    let path = dir.join("generation_config.json");
    if let Some(gen) = json_file(&path)? {
        let ids = match gen.get("eos_token_id") {
            None | Some(Value::Null) => Some(Vec::new()),
            Some(Value::Array(ids)) => ids.iter().map(as_id).collect(),
            Some(v) => as_id(v).map(|id| vec![id]),
        };
        s.generation_eos_ids = ids.ok_or_else(|| {
            anyhow!(
                "{}: eos_token_id is {}, not a token id or a list of them",
                path.display(),
                gen.get("eos_token_id").unwrap_or(&Value::Null)
            )
        })?;
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

/// `chat_template` as a string, or the `default` entry of a list of named templates; None
/// for any other value.
fn template_field(v: &Value) -> Option<String> {
    match v {
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

/// A special token written as a string or as an AddedToken object (`{"content": ...}`);
/// None for any other value.
fn token_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_files(files: &[(&str, &str)]) -> Result<TokenizerSettings> {
        let dir = tempfile::tempdir()?;
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text)?;
        }
        read(dir.path())
    }

    /// Fields of the right type (and `null` ones, as Qwen's `bos_token` is) are read; a
    /// field of the wrong type is one error naming the file, the field and the value,
    /// as config.json's are (not silently dropped: a number as the template sent prompts
    /// raw, a string EOS id ran past the end of sequence).
    #[test]
    fn wrong_types_are_errors_and_nulls_are_absent() -> Result<()> {
        let ok = with_files(&[
            (
                "tokenizer_config.json",
                r#"{"chat_template": "{{ x }}", "bos_token": null, "eos_token": {"content": "</s>"}, "add_bos_token": false}"#,
            ),
            ("generation_config.json", r#"{"eos_token_id": [2, 7]}"#),
        ])?;
        assert_eq!(ok.chat_template.as_deref(), Some("{{ x }}"));
        assert_eq!(ok.bos_token, None);
        assert_eq!(ok.eos_token.as_deref(), Some("</s>"));
        assert_eq!(ok.add_bos_token, Some(false));
        assert_eq!(ok.generation_eos_ids, vec![2, 7]);
        let nulls = with_files(&[("generation_config.json", r#"{"eos_token_id": null}"#)])?;
        assert!(nulls.generation_eos_ids.is_empty());
        for (file, text, needle) in [
            (
                "tokenizer_config.json",
                r#"{"chat_template": 42}"#,
                "chat_template is 42",
            ),
            (
                "tokenizer_config.json",
                r#"{"chat_template": [{"name": "tool_use", "template": "x"}]}"#,
                "chat_template is [",
            ),
            (
                "tokenizer_config.json",
                r#"{"eos_token": 5}"#,
                "eos_token is 5",
            ),
            (
                "tokenizer_config.json",
                r#"{"bos_token": {"id": 1}}"#,
                "bos_token is {",
            ),
            (
                "tokenizer_config.json",
                r#"{"add_bos_token": "no"}"#,
                "add_bos_token is \"no\"",
            ),
            (
                "generation_config.json",
                r#"{"eos_token_id": "52"}"#,
                "eos_token_id is \"52\"",
            ),
            (
                "generation_config.json",
                r#"{"eos_token_id": [2, -1]}"#,
                "eos_token_id is [2,-1]",
            ),
        ] {
            let e = with_files(&[(file, text)]).expect_err(text).to_string();
            assert!(e.contains(file) && e.contains(needle), "{text}: {e}");
        }
        Ok(())
    }
}

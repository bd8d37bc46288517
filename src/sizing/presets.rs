//! Built-in model presets for `kv-size`: the KV-relevant fields of published HF config.json
//! files (`presets.json`, one entry per model, each naming the config.json it came from).
use crate::sizing::spec::KvSpec;
use anyhow::{anyhow, Context, Result};
use serde::Deserialize;

/// The preset data, compiled in.
const PRESETS_JSON: &str = include_str!("presets.json");

/// One built-in model.
#[derive(Debug, Clone, Deserialize)]
pub struct Preset {
    /// Lowercase name used with `--model` (`qwen3-32b`).
    pub name: String,
    /// The HF config.json the fields were read from (`Qwen/Qwen3-32B/config.json`).
    pub source: String,
    /// Parameter count (model card), for the weights' size with `--gpu-mem`.
    pub num_parameters: Option<u64>,
    /// Anything a reader should know about the entry.
    pub note: Option<String>,
    /// The config.json fields, as published.
    pub config: serde_json::Value,
}

impl Preset {
    /// The HF repo id of the source (`Qwen/Qwen3-32B`).
    pub fn repo_id(&self) -> &str {
        self.source
            .strip_suffix("/config.json")
            .unwrap_or(&self.source)
    }

    /// The preset's [`KvSpec`], read from its config like any config.json.
    /// Errors: a malformed entry (names the preset).
    pub fn spec(&self) -> Result<KvSpec> {
        KvSpec::from_config_json(&self.config)
            .with_context(|| format!("preset {} ({})", self.name, self.source))
    }
}

#[derive(Deserialize)]
struct PresetFile {
    presets: Vec<Preset>,
}

/// All presets, in file order. Errors: the compiled-in file does not parse (a build defect;
/// the unit tests catch it).
pub fn all() -> Result<Vec<Preset>> {
    let file: PresetFile =
        serde_json::from_str(PRESETS_JSON).context("built-in presets.json does not parse")?;
    Ok(file.presets)
}

/// Lowercase letters and digits only: `Qwen3_32B` and `qwen3-32b` compare equal.
fn normalize(s: &str) -> String {
    s.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The preset named `name` (case-insensitive, punctuation ignored), or whose source repo is
/// `name` (`Qwen/Qwen3-32B`). `Ok(None)` when none matches.
pub fn find(name: &str) -> Result<Option<Preset>> {
    let key = normalize(name);
    if key.is_empty() {
        return Ok(None);
    }
    Ok(all()?.into_iter().find(|p| {
        normalize(&p.name) == key
            || normalize(p.repo_id()) == key
            || p.repo_id()
                .rsplit('/')
                .next()
                .is_some_and(|base| normalize(base) == key)
    }))
}

/// Edit distance between two strings (Levenshtein, by characters).
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Up to three preset names close to `name`: those that contain it or it contains, then the
/// nearest by edit distance (within a third of the name's length, at least 3).
pub fn suggest(name: &str) -> Vec<String> {
    let key = normalize(name);
    let Ok(presets) = all() else {
        return Vec::new();
    };
    let limit = (key.len() / 3).max(3);
    let mut scored: Vec<(usize, usize, String)> = presets
        .iter()
        .filter_map(|p| {
            let n = normalize(&p.name);
            let contains = !key.is_empty() && (n.contains(&key) || key.contains(&n));
            let d = distance(&key, &n);
            (contains || d <= limit).then(|| (usize::from(!contains), d, p.name.clone()))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, _, n)| n).collect()
}

/// The error for an unknown `--model`, with the closest preset names.
pub fn unknown(name: &str) -> anyhow::Error {
    let close = suggest(name);
    let hint = if close.is_empty() {
        "see `nanollm kv-size --list`".to_string()
    } else {
        format!(
            "did you mean {}? (see `nanollm kv-size --list`)",
            close.join(", ")
        )
    };
    anyhow!(
        "unknown model '{name}': not a file, a directory, a built-in preset, or a hub id in the local HF cache; {hint}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::shape::KvDtype;

    #[test]
    fn every_preset_parses_and_names_its_source() {
        let presets = all().unwrap();
        assert!(presets.len() >= 20);
        for p in &presets {
            assert!(p.source.ends_with("/config.json"), "{}", p.name);
            assert_eq!(p.name, p.name.to_ascii_lowercase());
            p.spec().unwrap();
        }
    }

    #[test]
    fn lookup_ignores_case_and_accepts_the_repo_id() {
        assert_eq!(find("Qwen3-32B").unwrap().unwrap().name, "qwen3-32b");
        assert_eq!(find("Qwen/Qwen2.5-7B").unwrap().unwrap().name, "qwen2.5-7b");
        assert!(find("qwen3-33b").unwrap().is_none());
        assert!(suggest("qwen3-33b").contains(&"qwen3-32b".to_string()));
    }

    fn bytes(name: &str, seq: u64) -> u64 {
        find(name)
            .unwrap()
            .unwrap()
            .spec()
            .unwrap()
            .bytes(seq, 1, KvDtype::Bf16)
            .unwrap()
    }

    #[test]
    fn published_figures() {
        assert_eq!(bytes("qwen3-32b", 131_072), 34_359_738_368);
        assert_eq!(bytes("qwen2.5-7b", 1), 57_344);
        assert_eq!(bytes("llama-2-70b", 4096), 1_342_177_280);
        // Falcon-7B: multi_query, one KV head of 64: 2 · 32 · 64 · 2 bytes.
        assert_eq!(bytes("falcon-7b", 1), 8192);
        // DeepSeek-V3 MLA: 61 · (512 + 64) · 2 bytes.
        assert_eq!(bytes("deepseek-v3", 1), 70_272);
        // Mistral-7B-v0.1: every layer holds at most 4096 tokens.
        assert_eq!(
            bytes("mistral-7b-v0.1", 32_768),
            bytes("mistral-7b-v0.1", 4096)
        );
    }
}

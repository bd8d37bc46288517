//! [`Fields`]: typed access to the fields of a config.json object, each error naming the
//! field; shared by the Llama-family reader (`config/`) and Gemma 3's (`gemma.rs`).
use anyhow::{anyhow, bail, Result};
use serde_json::{Map, Value};

/// Typed access to config.json fields; every error names the field.
pub(super) struct Fields<'a>(pub(super) &'a Map<String, Value>);

impl Fields<'_> {
    pub(super) fn present(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        self.present(key)
            .map(|v| {
                v.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| anyhow!("{key} is {v}, not a non-negative integer"))
            })
            .transpose()
    }

    pub(super) fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?
            .ok_or_else(|| anyhow!("{key} is missing"))
    }

    pub(super) fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        self.present(key)
            .map(|v| {
                v.as_f64()
                    .ok_or_else(|| anyhow!("{key} is {v}, not a number"))
            })
            .transpose()
    }

    pub(super) fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        self.present(key)
            .map(|v| {
                v.as_bool()
                    .ok_or_else(|| anyhow!("{key} is {v}, not true or false"))
            })
            .transpose()
    }

    pub(super) fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        self.present(key)
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| anyhow!("{key} is {v}, not a string"))
            })
            .transpose()
    }

    /// `layer_types` (transformers ≥ 4.53) as which layers slide; None when absent. Errors:
    /// not a list, another length than `layers`, an entry other than `sliding_attention` /
    /// `full_attention` (named by index).
    pub(super) fn sliding_layers(&self, layers: usize) -> Result<Option<Vec<bool>>> {
        let types = match self.present("layer_types") {
            None => return Ok(None),
            Some(Value::Array(types)) => types,
            Some(v) => bail!("layer_types is {v}, expected a list"),
        };
        if types.len() != layers {
            bail!(
                "layer_types has {} entries for num_hidden_layers {layers}",
                types.len()
            );
        }
        types
            .iter()
            .enumerate()
            .map(|(i, t)| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => bail!(
                    "layer_types[{i}] is {t}, not \"sliding_attention\" or \"full_attention\""
                ),
            })
            .collect::<Result<_>>()
            .map(Some)
    }
}

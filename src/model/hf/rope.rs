//! RoPE settings of an HF config.json: `rope_theta` and `rope_scaling` (transformers 4), or
//! `rope_parameters` (transformers 5, which moved `rope_theta` inside it).
//!
//! Source: transformers `modeling_rope_utils` (`RotaryEmbeddingConfigMixin
//! .convert_rope_params_to_dict` / `standardize_rope_params` and the `_validate_*` checks):
//! a non-null `rope_scaling` wins over `rope_parameters`; `rope_type` falls back to the legacy
//! `type`, then `default`; `rope_theta` is read from the dict, else the top level, else
//! 10,000; `original_max_position_embeddings` from the top level (Phi-3's exception), else the
//! dict, else `max_position_embeddings`.
use crate::model::rope::{RopeScaling, Yarn};
use anyhow::{anyhow, bail, Result};
use serde_json::{Map, Value};

/// The `rope_type` values this engine computes.
pub const SUPPORTED: &str = "default, linear, llama3, yarn";

/// `rope_theta` and the scaling a config declares.
///
/// `max_position_embeddings` is the config's own (before any window cap).
///
/// Errors (one line, naming the key and value): a `rope_type` outside [`SUPPORTED`] (e.g.
/// `dynamic`, `longrope`), per-layer-type (nested) `rope_parameters`, a
/// `partial_rotary_factor` other than 1, a missing or non-numeric parameter (`factor`,
/// `low_freq_factor`, ...), a factor that is not positive.
pub fn parse(
    obj: &Map<String, Value>,
    max_position_embeddings: usize,
) -> Result<(f64, RopeScaling)> {
    let present = |m: &Map<String, Value>, k: &str| m.get(k).filter(|v| !v.is_null()).cloned();
    let (key, params) = match (
        present(obj, "rope_scaling"),
        present(obj, "rope_parameters"),
    ) {
        (Some(v), _) => ("rope_scaling", v),
        (None, Some(v)) => ("rope_parameters", v),
        (None, None) => ("rope_scaling", Value::Object(Map::new())),
    };
    let p = params
        .as_object()
        .ok_or_else(|| anyhow!("{key} is {params}, expected an object"))?;
    let kind = match present(p, "rope_type").or_else(|| present(p, "type")) {
        Some(Value::String(s)) => s,
        Some(v) => bail!("{key}.rope_type is {v}, expected a string"),
        None if p.values().any(Value::is_object) => bail!(
            "{key} holds per-layer-type settings ({}): not supported",
            p.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
        None => "default".to_string(),
    };
    let number = |m: &Map<String, Value>, k: &str, what: &str| -> Result<Option<f64>> {
        present(m, k)
            .map(|v| {
                v.as_f64()
                    .ok_or_else(|| anyhow!("{what}{k} is {v}, expected a number"))
            })
            .transpose()
    };
    let inner = |k: &str| number(p, k, &format!("{key}."));
    let theta = match inner("rope_theta")? {
        Some(t) => t,
        None => number(obj, "rope_theta", "")?.unwrap_or(10_000.0),
    };
    for prf in [
        inner("partial_rotary_factor")?,
        number(obj, "partial_rotary_factor", "")?,
    ]
    .into_iter()
    .flatten()
    {
        if prf != 1.0 {
            bail!("partial_rotary_factor is {prf}: only full-width RoPE (1.0) is supported");
        }
    }
    let required = |k: &str| -> Result<f64> {
        let v = inner(k)?.ok_or_else(|| anyhow!("{key}.{k} is missing (rope_type {kind:?})"))?;
        if !(v.is_finite() && v > 0.0) {
            bail!("{key}.{k} is {v}, expected a positive number");
        }
        Ok(v)
    };
    let original = || -> Result<f64> {
        let v = match number(obj, "original_max_position_embeddings", "")? {
            Some(v) => v,
            None => {
                inner("original_max_position_embeddings")?.unwrap_or(max_position_embeddings as f64)
            }
        };
        if !(v.is_finite() && v > 0.0) {
            bail!("original_max_position_embeddings is {v}, expected a positive number");
        }
        Ok(v)
    };
    let scaling = match kind.as_str() {
        "default" => RopeScaling::Default,
        "linear" => RopeScaling::Linear {
            factor: required("factor")?,
        },
        "llama3" => {
            let (low, high) = (required("low_freq_factor")?, required("high_freq_factor")?);
            if high <= low {
                bail!("{key}.high_freq_factor {high} must exceed low_freq_factor {low}");
            }
            RopeScaling::Llama3 {
                factor: required("factor")?,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings: original()?,
            }
        }
        "yarn" => {
            let defaults = Yarn::new(required("factor")?, original()?);
            let or = |v: Option<f64>, d: f64| v.filter(|x| *x != 0.0).unwrap_or(d);
            let truncate = match present(p, "truncate") {
                None => true,
                Some(Value::Bool(b)) => b,
                Some(v) => bail!("{key}.truncate is {v}, expected true or false"),
            };
            RopeScaling::Yarn(Yarn {
                beta_fast: or(inner("beta_fast")?, defaults.beta_fast),
                beta_slow: or(inner("beta_slow")?, defaults.beta_slow),
                attention_factor: inner("attention_factor")?,
                mscale: inner("mscale")?,
                mscale_all_dim: inner("mscale_all_dim")?,
                truncate,
                ..defaults
            })
        }
        other => bail!("{key}.rope_type is {other:?}: not supported (supported: {SUPPORTED})"),
    };
    Ok((theta, scaling))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(v: Value) -> Result<(f64, RopeScaling)> {
        parse(v.as_object().expect("object"), 131072)
    }

    fn err(v: Value) -> String {
        format!("{:#}", run(v).unwrap_err())
    }

    const LLAMA3: RopeScaling = RopeScaling::Llama3 {
        factor: 32.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192.0,
    };

    /// Llama-3.2-1B's config.json (transformers 4), and the same in transformers 5's
    /// `rope_parameters`, with and without the legacy `type` key.
    #[test]
    fn both_spellings_of_llama_3_2() -> Result<()> {
        let scaling = json!({"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192, "rope_type": "llama3"});
        let v4 = json!({"rope_theta": 500000.0, "rope_scaling": scaling});
        assert_eq!(run(v4)?, (500000.0, LLAMA3));
        let mut p = scaling.clone();
        p["rope_theta"] = json!(500000.0);
        assert_eq!(run(json!({"rope_parameters": p}))?, (500000.0, LLAMA3));
        let mut legacy = scaling;
        legacy.as_object_mut().map(|o| o.remove("rope_type"));
        legacy["type"] = json!("llama3");
        let v = json!({"rope_theta": 500000.0, "rope_scaling": legacy});
        assert_eq!(run(v)?, (500000.0, LLAMA3));
        Ok(())
    }

    #[test]
    fn defaults() -> Result<()> {
        assert_eq!(run(json!({}))?, (10_000.0, RopeScaling::Default));
        assert_eq!(
            run(json!({"rope_theta": 1e6, "rope_scaling": null}))?,
            (1e6, RopeScaling::Default)
        );
        let v = json!({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}});
        assert_eq!(run(v)?, (1e6, RopeScaling::Default));
        let v = json!({"rope_scaling": {"type": "linear", "factor": 2.0}});
        assert_eq!(run(v)?, (10_000.0, RopeScaling::Linear { factor: 2.0 }));
        // Qwen2.5's published YaRN recipe (README: factor 4, original 32768).
        let v = json!({"rope_theta": 1e6, "max_position_embeddings": 131072, "rope_scaling":
            {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}});
        assert_eq!(run(v)?, (1e6, RopeScaling::Yarn(Yarn::new(4.0, 32768.0))));
        Ok(())
    }

    #[test]
    fn unsupported_and_malformed_are_named() {
        let e = err(json!({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}));
        assert!(
            e.contains("rope_scaling.rope_type") && e.contains("dynamic"),
            "{e}"
        );
        let e = err(json!({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}));
        assert!(
            e.contains("rope_parameters.rope_type") && e.contains("longrope"),
            "{e}"
        );
        let e = err(json!({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}));
        assert!(e.contains("low_freq_factor"), "{e}");
        let e = err(json!({"rope_scaling": {"rope_type": "linear", "factor": "2"}}));
        assert!(e.contains("rope_scaling.factor"), "{e}");
        let e = err(json!({"rope_parameters": {"full_attention": {"rope_type": "default"}}}));
        assert!(e.contains("per-layer-type"), "{e}");
        let e = err(json!({"partial_rotary_factor": 0.5}));
        assert!(e.contains("partial_rotary_factor"), "{e}");
        for e in [
            err(json!({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})),
            err(json!({"rope_scaling": 3})),
        ] {
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }
}

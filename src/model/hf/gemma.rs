//! Gemma 3's fields of config.json (transformers `Gemma3TextConfig`, model_type
//! `gemma3_text`): which layers slide, the sliding layers' RoPE base, the score scale and
//! soft-capping, with transformers' defaults where a key is absent.
//!
//! Layers: `layer_types` (transformers ≥ 4.53: `sliding_attention` / `full_attention` per
//! layer), else `sliding_window_pattern` (layer i slides iff (i + 1) mod n ≠ 0; default 6).
//! RoPE: `rope_theta` with `rope_scaling` for the global layers and `rope_local_base_freq`
//! (default 10,000) unscaled for the sliding ones; transformers 5 nests both in
//! `rope_parameters` by layer type.
use super::fields::Fields;
use super::rope;
use crate::model::rope::RopeScaling;
use anyhow::{anyhow, bail, Result};
use serde_json::{Map, Value};

/// What a Gemma 3 config adds to the Llama fields.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct GemmaFields {
    /// Per layer: its window, or `None` for a global layer.
    pub layer_windows: Vec<Option<usize>>,
    /// RoPE base of the sliding layers.
    pub rope_local_theta: f64,
    /// The global layers' `rope_theta` and scaling.
    pub rope: (f64, RopeScaling),
    /// `query_pre_attn_scalar` (default 256).
    pub query_pre_attn_scalar: f64,
    /// `final_logit_softcapping`, when set.
    pub final_logit_softcapping: Option<f64>,
}

/// Read them. Errors (naming the key): a `layer_types` entry other than
/// `sliding_attention` / `full_attention`, or a list of another length than the layers; a
/// `sliding_window` of 0 with a sliding layer; `attn_logit_softcapping` set (Gemma 2's,
/// not computed here); an activation other than `gelu_pytorch_tanh`; RoPE settings
/// [`rope::parse`] refuses.
pub(super) fn parse(
    obj: &Map<String, Value>,
    f: &Fields,
    layers: usize,
    max_position_embeddings: usize,
) -> Result<GemmaFields> {
    for key in ["hidden_activation", "hidden_act"] {
        if let Some(act) = f.opt_str(key)? {
            if !matches!(act, "gelu_pytorch_tanh" | "gelu_tanh") {
                bail!("{key} is {act:?}; Gemma 3 runs with \"gelu_pytorch_tanh\" only");
            }
        }
    }
    if let Some(c) = f.opt_f64("attn_logit_softcapping")? {
        bail!("attn_logit_softcapping is {c}: soft-capped attention scores (Gemma 2) are not supported");
    }
    let window = f.opt_usize("sliding_window")?.unwrap_or(4096);
    let slides: Vec<bool> = match f.sliding_layers(layers)? {
        Some(slides) => slides,
        None => {
            let n = f.opt_usize("sliding_window_pattern")?.unwrap_or(6);
            (0..layers)
                .map(|i| n != 0 && !(i + 1).is_multiple_of(n))
                .collect()
        }
    };
    if window == 0 && slides.contains(&true) {
        bail!("sliding_window is 0: a sliding-window layer must see at least its own token");
    }
    let layer_windows = slides.into_iter().map(|s| s.then_some(window)).collect();
    // transformers 5: rope_parameters = {"full_attention": {...}, "sliding_attention": {...}}.
    let nested = obj
        .get("rope_parameters")
        .and_then(Value::as_object)
        .filter(|p| p.contains_key("full_attention"));
    let (rope, rope_local_theta) = match nested {
        Some(p) => {
            let part = |k: &str| -> Result<Map<String, Value>> {
                let inner = p
                    .get(k)
                    .and_then(Value::as_object)
                    .ok_or_else(|| anyhow!("rope_parameters.{k} is missing or not an object"))?;
                let mut m = Map::new();
                m.insert("rope_parameters".into(), Value::Object(inner.clone()));
                Ok(m)
            };
            let global = rope::parse(&part("full_attention")?, max_position_embeddings)?;
            let local = match p.get("sliding_attention") {
                Some(_) => rope::parse(&part("sliding_attention")?, max_position_embeddings)?,
                None => (10_000.0, RopeScaling::Default),
            };
            if local.1 != RopeScaling::Default {
                bail!("rope_parameters.sliding_attention scales RoPE: only the default rope_type is supported on sliding layers");
            }
            (global, local.0)
        }
        None => (
            rope::parse(obj, max_position_embeddings)?,
            f.opt_f64("rope_local_base_freq")?.unwrap_or(10_000.0),
        ),
    };
    Ok(GemmaFields {
        layer_windows,
        rope_local_theta,
        rope,
        query_pre_attn_scalar: f.opt_f64("query_pre_attn_scalar")?.unwrap_or(256.0),
        final_logit_softcapping: f.opt_f64("final_logit_softcapping")?,
    })
}

//! gpt-oss's fields of config.json (transformers `GptOssConfig`, model_type `gpt_oss`; the
//! published openai/gpt-oss-20b and -120b configs): its experts, which layers slide, and
//! the MXFP4 `quantization_config` its checkpoints ship with.
//!
//! Experts: `num_local_experts`, `num_experts_per_tok` (the published configs also write
//! `experts_per_token`), each of `intermediate_size`; the router takes a softmax over its k
//! chosen logits, which is the renormalized top-k of the full softmax. Layers:
//! `layer_types`, else transformers' default, sliding on even layers and full on odd ones.
//! The clamped SwiGLU's limit is `swiglu_limit` (7; nanollm computes that one only).
use super::fields::Fields;
use crate::model::config::MoeConfig;
use anyhow::{bail, Result};
use serde_json::{Map, Value};

/// The SwiGLU limit nanollm computes (`HiddenAct::SwigluOai`, ggml's `swiglu_oai`).
const SWIGLU_LIMIT: f64 = 7.0;

/// The experts. Errors: a missing or mistyped field (named), numbers
/// `MoeConfig::validate` refuses, a `swiglu_limit` other than 7.
pub(super) fn moe(f: &Fields) -> Result<MoeConfig> {
    if let Some(limit) = f.opt_f64("swiglu_limit")? {
        if limit != SWIGLU_LIMIT {
            bail!("swiglu_limit is {limit}: gpt-oss's clamped SwiGLU runs with 7 only");
        }
    }
    let (used_key, used) = match f.opt_usize("num_experts_per_tok")? {
        Some(k) => ("num_experts_per_tok", k),
        None => ("experts_per_token", f.usize("experts_per_token")?),
    };
    let m = MoeConfig::plain(
        f.usize("num_local_experts")?,
        used,
        f.usize("intermediate_size")?,
        true,
    );
    m.validate("num_local_experts", used_key, "intermediate_size")?;
    Ok(m)
}

/// Each layer's window: `sliding_window` on the `sliding_attention` layers of
/// `layer_types`, else on the even layers. Errors: a `layer_types` list of another length
/// than the layers or with another entry; a window missing or 0 while a layer slides.
pub(super) fn layer_windows(f: &Fields, layers: usize) -> Result<Vec<Option<usize>>> {
    let slides = match f.sliding_layers(layers)? {
        Some(slides) => slides,
        None => (0..layers).map(|i| i % 2 == 0).collect(),
    };
    let window = f.opt_usize("sliding_window")?.filter(|&w| w > 0);
    if window.is_none() && slides.contains(&true) {
        bail!("sliding_window is missing or 0, but layers slide (layer_types, or gpt-oss's even layers when it is absent)");
    }
    Ok(slides
        .into_iter()
        .map(|s| s.then_some(window).flatten())
        .collect())
}

/// Whether `quantization_config` is one this loader reads: gpt-oss's own MXFP4 experts
/// (`quant_method` "mxfp4"; attention, router, embeddings and LM head stay bf16).
pub(super) fn quantization_is_ours(q: &Map<String, Value>) -> bool {
    q.get("quant_method").and_then(Value::as_str) == Some("mxfp4")
}

//! Each layer's role in a config.json model: full attention, a sliding window, or no KV — from
//! `layer_types`, a hybrid period (Jamba, Qwen3-Next) or the sliding-window rules (Qwen2,
//! Gemma 2/3, Cohere2).
use super::fields::{show, Fields};
use crate::sizing::spec::Mixer;
use anyhow::{anyhow, bail, Result};
use serde_json::Value;

/// One layer's role before it becomes a [`LayerKind`](crate::sizing::spec::LayerKind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Full,
    Window(u64),
    NoKv(Mixer),
}

/// The sliding window a config declares (`sliding_window`), `None` when absent or null.
fn window_field(cfg: &Fields) -> Result<Option<u64>> {
    cfg.positive("sliding_window")
}

/// Each layer's role, from `layer_types`, a hybrid period, or the sliding-window rules.
pub(super) fn layer_slots(
    cfg: &Fields,
    model_type: Option<&str>,
    layers: u64,
    notes: &mut Vec<String>,
) -> Result<Vec<Slot>> {
    let n = layers as usize; // layers <= MAX_LAYERS
    if let Some(types) = cfg.get("layer_types") {
        let types = types
            .as_array()
            .ok_or_else(|| anyhow!("layer_types is {}, expected a list of strings", show(types)))?;
        if types.len() as u64 != layers {
            bail!(
                "layer_types has {} entries but there are {layers} layers",
                types.len()
            );
        }
        return types
            .iter()
            .enumerate()
            .map(|(i, t)| layer_type_slot(cfg, i, t))
            .collect();
    }
    if let (Some(period), Some(offset)) = (
        cfg.positive("attn_layer_period")?,
        cfg.uint("attn_layer_offset")?,
    ) {
        // Jamba: layer i is attention when i % attn_layer_period == attn_layer_offset.
        let attention = window_field(cfg)?.map_or(Slot::Full, Slot::Window);
        return Ok((0..layers)
            .map(|i| {
                if i % period == offset {
                    attention
                } else {
                    Slot::NoKv(Mixer::Mamba)
                }
            })
            .collect());
    }
    if let Some(interval) = cfg.positive("full_attention_interval")? {
        // Qwen3-Next: every interval-th layer (1-based) is full attention, the rest linear.
        return Ok((1..=layers)
            .map(|i| {
                if i % interval == 0 {
                    Slot::Full
                } else {
                    Slot::NoKv(Mixer::LinearAttention)
                }
            })
            .collect());
    }
    let window = window_field(cfg)?;
    let pattern = |default: u64| -> Result<u64> {
        Ok(cfg.positive("sliding_window_pattern")?.unwrap_or(default))
    };
    let slots = match (window, model_type) {
        (None, _) => vec![Slot::Full; n],
        // Gemma 2: even layers local, odd layers global (transformers Gemma2Config).
        (Some(w), Some("gemma2")) => (0..n)
            .map(|i| {
                if i % 2 == 0 {
                    Slot::Window(w)
                } else {
                    Slot::Full
                }
            })
            .collect(),
        // Gemma 3 / Cohere2: every pattern-th layer (1-based) global, the others local.
        (Some(w), Some("gemma3" | "gemma3_text" | "cohere2")) => {
            let p = pattern(if model_type == Some("cohere2") { 4 } else { 6 })?;
            (1..=layers)
                .map(|i| {
                    if i % p == 0 {
                        Slot::Full
                    } else {
                        Slot::Window(w)
                    }
                })
                .collect()
        }
        (Some(w), _) => match cfg.bool("use_sliding_window")? {
            Some(false) => vec![Slot::Full; n],
            Some(true) => match cfg.uint("max_window_layers")? {
                // Qwen2: layers from max_window_layers on use the window.
                Some(m) => (0..layers)
                    .map(|i| if i >= m { Slot::Window(w) } else { Slot::Full })
                    .collect(),
                None => vec![Slot::Window(w); n],
            },
            None => vec![Slot::Window(w); n],
        },
    };
    if window.is_some() && slots.iter().all(|s| *s == Slot::Full) {
        notes.push(
            "sliding_window is set but no layer uses it (use_sliding_window is false)".into(),
        );
    }
    Ok(slots)
}

/// The role of layer `i` named by `layer_types[i]`.
fn layer_type_slot(cfg: &Fields, i: usize, t: &Value) -> Result<Slot> {
    let name = t
        .as_str()
        .ok_or_else(|| anyhow!("layer_types[{i}] is {}, expected a string", show(t)))?;
    let need = |key: &str| -> Result<u64> {
        cfg.positive(key)?
            .ok_or_else(|| anyhow!("layer_types[{i}] is \"{name}\" but {key} is missing"))
    };
    Ok(match name {
        "full_attention" | "attention" | "global_attention" | "global" => Slot::Full,
        "sliding_attention" | "sliding_window" | "local_attention" | "local" => {
            Slot::Window(need("sliding_window")?)
        }
        "chunked_attention" => Slot::Window(need("attention_chunk_size")?),
        "linear_attention" => Slot::NoKv(Mixer::LinearAttention),
        "mamba" | "mamba2" | "ssm" => Slot::NoKv(Mixer::Mamba),
        other => bail!(
            "layer_types[{i}] is \"{}\", not one of full_attention, sliding_attention, chunked_attention, linear_attention, mamba",
            show(&Value::String(other.to_string())).trim_matches('"')
        ),
    })
}

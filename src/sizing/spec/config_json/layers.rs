//! Each layer's role in a config.json model: full attention, a sliding window (or an
//! attention chunk), or no KV — from `layer_types`, a hybrid period (Jamba, Qwen3-Next), Llama
//! 4's chunked-attention rule or the sliding-window rules (Qwen2, Gemma 2/3, Cohere2); then
//! Gemma-3n's KV sharing (`num_kv_shared_layers`).
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

/// Each layer's role, from `layer_types`, a hybrid period, Llama 4's chunked attention or
/// the sliding-window rules; the last `num_kv_shared_layers` layers (Gemma-3n) then hold no
/// KV of their own.
pub(super) fn layer_slots(
    cfg: &Fields,
    model_type: Option<&str>,
    layers: u64,
    notes: &mut Vec<String>,
) -> Result<Vec<Slot>> {
    let mut slots = own_slots(cfg, model_type, layers, notes)?;
    share_kv(cfg, &mut slots)?;
    Ok(slots)
}

/// Gemma-3n (transformers `Gemma3nTextConfig.kv_sharing_modes`): the last
/// `num_kv_shared_layers` layers reuse the cache of the last earlier layer of their type and
/// hold none. Errors: more shared layers than layers.
fn share_kv(cfg: &Fields, slots: &mut [Slot]) -> Result<()> {
    let Some(shared) = cfg.uint("num_kv_shared_layers")? else {
        return Ok(());
    };
    let n = slots.len() as u64;
    if shared >= n && shared > 0 {
        bail!("num_kv_shared_layers is {shared} but there are {n} layers: some layer must hold the cache they share");
    }
    let first = (n - shared) as usize;
    for slot in &mut slots[first..] {
        *slot = Slot::NoKv(Mixer::SharedKv);
    }
    Ok(())
}

/// Llama 4 (transformers `Llama4TextConfig`): when `attention_chunk_size` is set, layers with
/// RoPE attend within chunks of that many tokens and hold at most one chunk, the NoPE layers
/// attend globally. `no_rope_layers[i]` is 1 for a RoPE (chunked) layer and 0 for a NoPE
/// (global) one; an absent or empty list means every `no_rope_layer_interval`-th layer
/// (default 4, 1-based) is NoPE. `None` when the config is not of this kind.
fn chunked_slots(
    cfg: &Fields,
    model_type: Option<&str>,
    layers: u64,
    notes: &mut Vec<String>,
) -> Result<Option<Vec<Slot>>> {
    let Some(chunk) = cfg.positive("attention_chunk_size")? else {
        return Ok(None);
    };
    let llama4 = model_type.is_some_and(|t| t.starts_with("llama4"))
        || cfg.get("no_rope_layers").is_some()
        || cfg.get("no_rope_layer_interval").is_some();
    if !llama4 {
        return Ok(None);
    }
    let listed: Vec<u64> = match cfg.get("no_rope_layers") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(
                |(i, v)| match v.as_u64().or_else(|| v.as_bool().map(u64::from)) {
                    Some(b @ (0 | 1)) => Ok(b),
                    _ => bail!("no_rope_layers[{i}] is {}, expected 0 or 1", show(v)),
                },
            )
            .collect::<Result<_>>()?,
        Some(v) => bail!("no_rope_layers is {}, expected a list of 0 and 1", show(v)),
    };
    let uses_rope: Vec<bool> = if listed.is_empty() {
        let every = cfg.positive("no_rope_layer_interval")?.unwrap_or(4);
        (1..=layers).map(|i| i % every != 0).collect()
    } else if listed.len() as u64 == layers {
        listed.iter().map(|&b| b == 1).collect()
    } else {
        bail!(
            "no_rope_layers has {} entries but there are {layers} layers",
            listed.len()
        );
    };
    let chunked = uses_rope.iter().filter(|&&r| r).count();
    let c = crate::units::group_digits(chunk);
    notes.push(format!(
        "chunked attention: {chunked} layers attend within chunks of attention_chunk_size {c} tokens and hold at most one chunk (shown as a window of {c})"
    ));
    Ok(Some(
        uses_rope
            .into_iter()
            .map(|rope| {
                if rope {
                    Slot::Window(chunk)
                } else {
                    Slot::Full
                }
            })
            .collect(),
    ))
}

/// Each layer's own role, before KV sharing.
fn own_slots(
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
    if let Some(slots) = hybrid_lists(cfg, layers)? {
        return Ok(slots);
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
    if let Some(slots) = chunked_slots(cfg, model_type, layers, notes)? {
        return Ok(slots);
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
        // Qwen's configs gate the window with use_sliding_window, false by default
        // (Qwen2Config, Qwen3Config, their MoE and VL variants); others apply it.
        (Some(w), _) => match cfg
            .bool("use_sliding_window")?
            .or(model_type.filter(|t| t.starts_with("qwen")).map(|_| false))
        {
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

/// Per-layer roles from the hybrid models' own lists, when the config has one:
/// Nemotron-H's `hybrid_override_pattern` (one character per layer: `*` attention, `M`
/// Mamba-2, `-` MLP, `E` MoE), MiniMax-Text-01's `attn_type_list` (1 softmax attention, 0
/// lightning attention, a linear attention), Zamba2's `layers_block_type` (`hybrid`: a Mamba
/// layer with the shared attention block, which keeps K/V; `mamba`). Errors: a list of the
/// wrong length or with an unknown entry, named.
fn hybrid_lists(cfg: &Fields, layers: u64) -> Result<Option<Vec<Slot>>> {
    let attention = window_field(cfg)?.map_or(Slot::Full, Slot::Window);
    let check_len = |key: &str, n: usize| -> Result<()> {
        if n as u64 != layers {
            bail!("{key} has {n} entries but there are {layers} layers");
        }
        Ok(())
    };
    if let Some(v) = cfg.get("hybrid_override_pattern") {
        let p = v
            .as_str()
            .ok_or_else(|| anyhow!("hybrid_override_pattern is {}, expected a string", show(v)))?;
        check_len("hybrid_override_pattern", p.chars().count())?;
        return p
            .chars()
            .enumerate()
            .map(|(i, c)| match c {
                '*' => Ok(attention),
                'M' => Ok(Slot::NoKv(Mixer::Mamba)),
                '-' | 'E' => Ok(Slot::NoKv(Mixer::MlpOnly)),
                other => bail!("hybrid_override_pattern[{i}] is {other:?}, expected *, M, - or E"),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some);
    }
    if let Some(v) = cfg.get("attn_type_list") {
        let list = v
            .as_array()
            .ok_or_else(|| anyhow!("attn_type_list is {}, expected a list of 0 and 1", show(v)))?;
        check_len("attn_type_list", list.len())?;
        return list
            .iter()
            .enumerate()
            .map(|(i, t)| match t.as_u64() {
                Some(1) => Ok(attention),
                Some(0) => Ok(Slot::NoKv(Mixer::LinearAttention)),
                _ => bail!("attn_type_list[{i}] is {}, expected 0 or 1", show(t)),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some);
    }
    if let Some(v) = cfg.get("layers_block_type") {
        let list = v.as_array().ok_or_else(|| {
            anyhow!(
                "layers_block_type is {}, expected a list of strings",
                show(v)
            )
        })?;
        check_len("layers_block_type", list.len())?;
        return list
            .iter()
            .enumerate()
            .map(|(i, t)| match t.as_str() {
                Some("hybrid" | "attention") => Ok(attention),
                Some("mamba") => Ok(Slot::NoKv(Mixer::Mamba)),
                _ => bail!(
                    "layers_block_type[{i}] is {}, expected \"mamba\" or \"hybrid\"",
                    show(t)
                ),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some);
    }
    Ok(None)
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

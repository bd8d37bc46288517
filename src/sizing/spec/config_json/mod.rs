//! [`KvSpec::from_config_json`]: a model's KV layout from an HF config.json — the layer count,
//! the attention of its attention layers (MHA/GQA/MQA or MLA), each layer's role (`layers`)
//! and the constant state of layers without KV (`state`).
mod defaults;
mod fields;
mod layers;
mod state;

use super::{check_gqa, group, note_unknown_state, to_usize, KvSpec, LayerKind, MAX_LAYERS};
use anyhow::{anyhow, bail, Result};
use defaults::{default_head_dim, default_kv_heads, default_max_positions};
use fields::Fields;
use layers::{layer_slots, Slot};
use serde_json::Value;
use state::state_values;

/// Field names for the layer count, in the order they are tried (HF, GPT-2, others).
const LAYER_KEYS: [&str; 3] = ["num_hidden_layers", "n_layer", "num_layers"];

/// What an attention layer of the model is, before sliding windows are applied.
#[derive(Debug, Clone, Copy)]
enum Attention {
    /// MHA/GQA/MQA with these K/V heads and head_dim.
    Plain {
        num_key_value_heads: usize,
        head_dim: usize,
    },
    /// DeepSeek MLA.
    Mla {
        kv_lora_rank: usize,
        qk_rope_head_dim: usize,
    },
}

impl Attention {
    /// The kind of an attention layer, windowed or not (MLA layers are never windowed).
    fn layer(self, window: Option<u64>) -> LayerKind {
        match (self, window) {
            (
                Attention::Mla {
                    kv_lora_rank,
                    qk_rope_head_dim,
                },
                _,
            ) => LayerKind::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
            },
            (
                Attention::Plain {
                    num_key_value_heads,
                    head_dim,
                },
                Some(window),
            ) => LayerKind::SlidingWindow {
                num_key_value_heads,
                head_dim,
                window,
            },
            (
                Attention::Plain {
                    num_key_value_heads,
                    head_dim,
                },
                None,
            ) => LayerKind::FullAttention {
                num_key_value_heads,
                head_dim,
            },
        }
    }
}

impl KvSpec {
    /// Read a model's KV layout from an HF config.json (already parsed).
    ///
    /// Fields used (with the names older configs use): `num_hidden_layers` (`n_layer`),
    /// `num_attention_heads` (`n_head`), `num_key_value_heads` (`num_kv_heads`; absent means
    /// `num_attention_heads`; Falcon's `multi_query: true` means 1), `head_dim` (absent means
    /// `hidden_size / num_attention_heads`), `max_position_embeddings`; MLA: `kv_lora_rank`,
    /// `qk_rope_head_dim` (DeepSeek-V2/V3); windows: `sliding_window`, `use_sliding_window`,
    /// `max_window_layers` (Qwen2), `sliding_window_pattern` (Gemma 3, default 6; Gemma 2
    /// alternates, starting with a local layer); `attention_chunk_size`; hybrids:
    /// `layer_types`, `full_attention_interval` (Qwen3-Next), `attn_layer_period` /
    /// `attn_layer_offset` (Jamba). A multimodal config's `text_config` is used when the top
    /// level has no layer count.
    ///
    /// Errors: a missing layer count, missing head counts, an MLA config without
    /// `kv_lora_rank` or `qk_rope_head_dim`, a field of the wrong type, an unknown layer type;
    /// each names the field.
    pub fn from_config_json(root: &Value) -> Result<KvSpec> {
        let top = Fields(
            root.as_object()
                .ok_or_else(|| anyhow!("not a JSON object"))?,
        );
        let cfg = match top.get("text_config") {
            Some(Value::Object(text)) if !top.has_any(&LAYER_KEYS) => Fields(text),
            _ => top,
        };
        let model_type = cfg.str("model_type").or(top.str("model_type"));
        let (layers_key, layers) = cfg.first_positive(&LAYER_KEYS)?.ok_or_else(|| {
            anyhow!("no num_hidden_layers (nor n_layer, num_layers): cannot tell how many layers hold a KV cache")
        })?;
        if layers > MAX_LAYERS {
            bail!("{layers_key} is {layers}, more than {MAX_LAYERS} layers is not a real model");
        }
        let heads = cfg.first_positive(&["num_attention_heads", "n_head", "num_heads"])?;
        let hidden = cfg.first_positive(&["hidden_size", "n_embd", "d_model"])?;
        let max_pos = cfg.first_positive(&["max_position_embeddings", "n_positions"])?;
        let attention = attention_of(&cfg, model_type, heads, hidden);
        let mut notes = Vec::new();
        let slots = layer_slots(&cfg, model_type, layers, &mut notes)?;

        let attention = || attention.clone().map_err(|e| anyhow!("{e}"));
        let kinds = slots
            .into_iter()
            .map(|slot| {
                Ok(match slot {
                    Slot::NoKv(mixer) => LayerKind::NoKv {
                        mixer,
                        state_values: state_values(&cfg, mixer, hidden)?,
                    },
                    Slot::Full => attention()?.layer(None),
                    Slot::Window(w) => attention()?.layer(Some(w)),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        note_unknown_state(&kinds, &mut notes);
        let default_max_positions = match max_pos {
            Some(_) => None,
            None => default_max_positions(model_type),
        };
        if let (Some(n), Some(t)) = (default_max_positions, model_type) {
            notes.push(format!(
                "max_position_embeddings is not in config.json: {}, the transformers default for model_type {t}",
                crate::units::group_digits(n)
            ));
        }
        // Falcon-H1 runs attention and a Mamba-2 mixer side by side in every layer: the K/V
        // above is all of its cache but not all of its per-sequence memory.
        if model_type == Some("falcon_h1") {
            notes.push(format!(
                "every layer also keeps a Mamba-2 state beside its attention ({layers} layers): not counted"
            ));
        }
        Ok(KvSpec {
            groups: group(kinds),
            hidden_size: hidden.map(|h| h.1),
            mha_head_dim: match is_mla(&cfg, model_type) {
                true => cfg.positive("v_head_dim")?,
                false => None,
            },
            num_attention_heads: heads.map(|h| h.1),
            max_position_embeddings: max_pos.map(|m| m.1).or(default_max_positions),
            model_type: model_type.map(str::to_string),
            notes,
        })
    }
}

/// True for DeepSeek-style MLA configs: a `kv_lora_rank` field (even `null`) or an MLA
/// model_type.
fn is_mla(cfg: &Fields, model_type: Option<&str>) -> bool {
    cfg.0.contains_key("kv_lora_rank")
        || matches!(
            model_type,
            Some("deepseek_v2" | "deepseek_v3" | "deepseek_v32" | "kimi_k2")
        )
}

/// The attention of this config's attention layers. The error is kept as text and raised
/// only if some layer needs attention (a config of only Mamba layers needs no head counts).
fn attention_of(
    cfg: &Fields,
    model_type: Option<&str>,
    heads: Option<(&str, u64)>,
    hidden: Option<(&str, u64)>,
) -> std::result::Result<Attention, String> {
    let mla = |cfg: &Fields| -> Result<Attention> {
        let what = model_type
            .map(|t| format!(" (model_type {t})"))
            .unwrap_or_default();
        let rank = cfg
            .positive("kv_lora_rank")?
            .ok_or_else(|| anyhow!("MLA config{what} has no kv_lora_rank"))?;
        let rope = cfg
            .positive("qk_rope_head_dim")?
            .ok_or_else(|| anyhow!("MLA config{what} has no qk_rope_head_dim"))?;
        super::check_mla("kv_lora_rank", rank, "qk_rope_head_dim", rope)?;
        Ok(Attention::Mla {
            kv_lora_rank: to_usize("kv_lora_rank", rank)?,
            qk_rope_head_dim: to_usize("qk_rope_head_dim", rope)?,
        })
    };
    let plain = |cfg: &Fields| -> Result<Attention> {
        let kv = if cfg.bool("new_decoder_architecture")? == Some(true) {
            let kv = cfg.positive("num_kv_heads")?.ok_or_else(|| {
                anyhow!("new_decoder_architecture is true but num_kv_heads is missing")
            })?;
            if let Some((hk, h)) = heads {
                check_gqa("num_kv_heads", kv, hk, h)?;
            }
            kv
        } else if cfg.bool("multi_query")? == Some(true) {
            1
        } else {
            match cfg.first_positive(&["num_key_value_heads", "num_kv_heads", "n_head_kv"])? {
                Some((kk, kv)) => {
                    if let Some((hk, h)) = heads {
                        check_gqa(kk, kv, hk, h)?;
                    }
                    kv
                }
                // Absent: the model type's transformers default where it has its own
                // (MistralConfig 8, Gemma*Config 16), else as many as the query heads.
                None => match (default_kv_heads(model_type), heads) {
                    (Some(kv), Some((hk, h))) => {
                        check_gqa("num_key_value_heads (its default)", kv, hk, h)?;
                        kv
                    }
                    (Some(kv), None) => kv,
                    (None, h) => h.map(|h| h.1).ok_or_else(|| {
                        anyhow!("no num_key_value_heads nor num_attention_heads: cannot tell how many K/V heads a layer has")
                    })?,
                },
            }
        };
        // Zamba2 names its attention block's head width attention_head_dim.
        let explicit = cfg.first_positive(&["head_dim", "attention_head_dim"])?;
        let head_dim = match explicit.map(|(_, d)| d).or(default_head_dim(model_type)) {
            Some(d) => d,
            None => match (hidden, heads) {
                (Some((_, h)), Some((_, n))) if h % n == 0 => h / n,
                (Some((hk, h)), Some((nk, n))) => {
                    bail!("no head_dim, and {hk} {h} is not a multiple of {nk} {n}")
                }
                _ => bail!(
                    "no head_dim, and hidden_size / num_attention_heads is unknown (needs both)"
                ),
            },
        };
        Ok(Attention::Plain {
            num_key_value_heads: to_usize("num_key_value_heads", kv)?,
            head_dim: to_usize("head_dim", head_dim)?,
        })
    };
    let result = if is_mla(cfg, model_type) {
        mla(cfg)
    } else {
        plain(cfg)
    };
    result.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;

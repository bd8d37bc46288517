//! [`KvSpec`]: what every layer of a model keeps per sequence.
//!
//! A model is a list of [`LayerGroup`]s: layers of one [`LayerKind`] (full attention, sliding
//! window, MLA, or no KV at all), counted. Built from an HF config.json
//! ([`KvSpec::from_config_json`]), GGUF metadata ([`KvSpec::from_gguf_metadata`]) or a plain
//! shape ([`KvSpec::plain`]). What each kind costs in bytes is in [`super::estimate`].
use super::shape::KvShape;
use anyhow::{anyhow, bail, Result};
use candle_core::quantized::gguf_file;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;

/// The token mixer of a layer that holds no KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mixer {
    /// Linear attention (Gated DeltaNet in Qwen3-Next): a conv state and a recurrent
    /// `num_value_heads · key_head_dim · value_head_dim` state per layer.
    LinearAttention,
    /// A Mamba / Mamba-2 state-space layer (Jamba, Granite 4, ...): a conv state and an SSM state.
    Mamba,
}

/// What one decoder layer keeps for each sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LayerKind {
    /// Full causal attention (MHA, GQA, MQA): K and V of every token,
    /// `2 · num_key_value_heads · head_dim` values per token (config `num_key_value_heads`,
    /// `head_dim`).
    FullAttention {
        /// K/V heads (`num_key_value_heads`; absent means `num_attention_heads`).
        num_key_value_heads: usize,
        /// Values per head (`head_dim`; absent means `hidden_size / num_attention_heads`).
        head_dim: usize,
    },
    /// Sliding-window attention (Mistral, Gemma 2/3 local layers): K and V of the last
    /// `min(T, window)` tokens (config `sliding_window`, or `attention_chunk_size` for chunked
    /// attention, which never holds more than one chunk).
    SlidingWindow {
        /// K/V heads.
        num_key_value_heads: usize,
        /// Values per head.
        head_dim: usize,
        /// Tokens the layer attends to, at most (`sliding_window`).
        window: u64,
    },
    /// Multi-head latent attention (DeepSeek-V2 paper, §2.1.2): one compressed latent of
    /// `kv_lora_rank` values plus the decoupled RoPE key of `qk_rope_head_dim` values per
    /// token, shared by all heads — no factor 2.
    Mla {
        /// Latent KV width (`kv_lora_rank`).
        kv_lora_rank: usize,
        /// Decoupled RoPE key width (`qk_rope_head_dim`).
        qk_rope_head_dim: usize,
    },
    /// A layer without attention (linear attention, Mamba): no KV cache, a constant state per
    /// sequence of `state_values` values when the config gives enough to compute it.
    NoKv {
        /// The token mixer.
        mixer: Mixer,
        /// Values of conv + recurrent state per sequence for this layer; `None` when unknown.
        state_values: Option<u64>,
    },
}

/// Layers of one kind: `layers` copies of `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayerGroup {
    /// What each of these layers keeps.
    #[serde(flatten)]
    pub kind: LayerKind,
    /// How many layers are of this kind.
    pub layers: u64,
}

impl LayerKind {
    /// A short human label: `full attention`, `sliding window 4,096`, `MLA`, `linear
    /// attention (no KV)`, `mamba (no KV)`.
    pub fn label(&self) -> String {
        match self {
            LayerKind::FullAttention {
                num_key_value_heads,
                head_dim,
            } => {
                format!("full attention ({num_key_value_heads} KV heads × head_dim {head_dim})")
            }
            LayerKind::SlidingWindow {
                num_key_value_heads,
                head_dim,
                window,
            } => format!(
                "sliding window {} ({num_key_value_heads} KV heads × head_dim {head_dim})",
                group_digits(*window)
            ),
            LayerKind::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
            } => {
                format!("MLA (kv_lora_rank {kv_lora_rank} + qk_rope_head_dim {qk_rope_head_dim})")
            }
            LayerKind::NoKv {
                mixer: Mixer::LinearAttention,
                ..
            } => "linear attention (no KV)".to_string(),
            LayerKind::NoKv {
                mixer: Mixer::Mamba,
                ..
            } => "mamba (no KV)".to_string(),
        }
    }
}

/// Per-layer attention kinds of a model, with the config fields the estimate reports.
///
/// Sources: an HF config.json (`num_hidden_layers`, `num_key_value_heads`, `head_dim`,
/// `sliding_window`, `layer_types`, `kv_lora_rank`, ...), GGUF metadata (`{arch}.block_count`,
/// `{arch}.attention.head_count_kv`, ...), or a plain shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvSpec {
    /// The layers, grouped by kind in order of first appearance; counts sum to
    /// `num_hidden_layers`.
    pub groups: Vec<LayerGroup>,
    /// `hidden_size` (GGUF `embedding_length`), for the "as if plain MHA" figure.
    pub hidden_size: Option<u64>,
    /// `num_attention_heads` (GGUF `attention.head_count`), checked against `--tp`.
    pub num_attention_heads: Option<u64>,
    /// `max_position_embeddings` (GGUF `context_length`): the trained context length.
    pub max_position_embeddings: Option<u64>,
    /// `model_type` (GGUF `general.architecture`).
    pub model_type: Option<String>,
    /// What the reader assumed or skipped, one sentence each.
    pub notes: Vec<String>,
}

impl KvSpec {
    /// A plain model: `num_layers` full-attention layers of `num_key_value_heads` K/V heads of
    /// `head_dim` values (an HF Llama-family config, or [`KvShape`]'s fields).
    pub fn plain(num_layers: usize, num_key_value_heads: usize, head_dim: usize) -> KvSpec {
        KvSpec::from_groups(vec![LayerGroup {
            kind: LayerKind::FullAttention {
                num_key_value_heads,
                head_dim,
            },
            layers: num_layers as u64,
        }])
    }

    /// The spec of a runtime cache's shape (the dtype is passed to [`KvSpec::bytes`]).
    pub fn from_shape(shape: &KvShape) -> KvSpec {
        KvSpec::plain(shape.num_layers, shape.num_key_value_heads, shape.head_dim)
    }

    /// A spec from layer groups, without the optional config fields.
    pub fn from_groups(groups: Vec<LayerGroup>) -> KvSpec {
        KvSpec {
            groups,
            hidden_size: None,
            num_attention_heads: None,
            max_position_embeddings: None,
            model_type: None,
            notes: Vec::new(),
        }
    }

    /// All layers (`num_hidden_layers`), including those without KV.
    pub fn num_layers(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| g.layers)
            .fold(0, u64::saturating_add)
    }

    /// True when some layer holds every token (full attention or MLA), so the cache grows
    /// without bound with the sequence.
    pub fn grows_with_seq(&self) -> bool {
        self.groups.iter().any(|g| {
            g.layers > 0
                && matches!(
                    g.kind,
                    LayerKind::FullAttention { .. } | LayerKind::Mla { .. }
                )
        })
    }
}

/// `1234567` as `1,234,567`.
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Most `num_hidden_layers` a config may declare (real models have a few hundred at most);
/// bounds the per-layer walk over a hostile file.
pub const MAX_LAYERS: u64 = 100_000;

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

/// One layer's role before it becomes a [`LayerKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Full,
    Window(u64),
    NoKv(Mixer),
}

/// Read access to the fields of a config.json object, with errors that name the field.
#[derive(Clone, Copy)]
struct Fields<'a>(&'a serde_json::Map<String, Value>);

impl<'a> Fields<'a> {
    /// The field, or `None` when absent or `null`.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn has_any(&self, keys: &[&str]) -> bool {
        keys.iter().any(|k| self.get(k).is_some())
    }

    /// A non-negative integer field (`128` or `128.0`). Errors: any other JSON value.
    fn uint(&self, key: &str) -> Result<Option<u64>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let n = v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9.007_199_254_740_992e15)
                .map(|f| f as u64)
        });
        match n {
            Some(n) => Ok(Some(n)),
            None => bail!("{key} is {}, expected a non-negative integer", show(v)),
        }
    }

    /// Like [`Fields::uint`], and at least 1.
    fn positive(&self, key: &str) -> Result<Option<u64>> {
        match self.uint(key)? {
            Some(0) => bail!("{key} is 0, expected at least 1"),
            other => Ok(other),
        }
    }

    /// The first of `keys` present, with its name.
    fn first_positive(&self, keys: &[&'static str]) -> Result<Option<(&'static str, u64)>> {
        for key in keys {
            if let Some(n) = self.positive(key)? {
                return Ok(Some((key, n)));
            }
        }
        Ok(None)
    }

    fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => bail!("{key} is {}, expected true or false", show(v)),
        }
    }

    fn str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Value::as_str)
    }
}

/// A JSON value for an error message, cut to 40 characters.
fn show(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

fn to_usize(key: &str, n: u64) -> Result<usize> {
    usize::try_from(n).map_err(|_| anyhow!("{key} {n} does not fit this machine's usize"))
}

/// `a · b`, or an error naming what overflowed.
fn mul(what: &str, a: u64, b: u64) -> Result<u64> {
    a.checked_mul(b)
        .ok_or_else(|| anyhow!("{what} overflows 64 bits"))
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
        Ok(KvSpec {
            groups: group(kinds),
            hidden_size: hidden.map(|h| h.1),
            num_attention_heads: heads.map(|h| h.1),
            max_position_embeddings: max_pos.map(|m| m.1),
            model_type: model_type.map(str::to_string),
            notes,
        })
    }
}

/// Note no-KV layers whose state could not be computed.
fn note_unknown_state(kinds: &[LayerKind], notes: &mut Vec<String>) {
    let unknown = kinds
        .iter()
        .filter(|k| {
            matches!(
                k,
                LayerKind::NoKv {
                    state_values: None,
                    ..
                }
            )
        })
        .count();
    if unknown > 0 {
        notes.push(format!(
            "the constant state of {unknown} layers without KV is not counted: the metadata lacks the fields to compute it"
        ));
    }
}

/// Group per-layer kinds, counting each, in order of first appearance.
fn group(kinds: Vec<LayerKind>) -> Vec<LayerGroup> {
    let mut groups: Vec<LayerGroup> = Vec::new();
    for kind in kinds {
        match groups.iter_mut().find(|g| g.kind == kind) {
            Some(g) => g.layers += 1,
            None => groups.push(LayerGroup { kind, layers: 1 }),
        }
    }
    groups
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
        Ok(Attention::Mla {
            kv_lora_rank: to_usize("kv_lora_rank", rank)?,
            qk_rope_head_dim: to_usize("qk_rope_head_dim", rope)?,
        })
    };
    let plain = |cfg: &Fields| -> Result<Attention> {
        let kv = if cfg.bool("new_decoder_architecture")? == Some(true) {
            cfg.positive("num_kv_heads")?.ok_or_else(|| {
                anyhow!("new_decoder_architecture is true but num_kv_heads is missing")
            })?
        } else if cfg.bool("multi_query")? == Some(true) {
            1
        } else {
            match cfg.first_positive(&["num_key_value_heads", "num_kv_heads", "n_head_kv"])? {
                Some((_, kv)) => kv,
                None => heads.map(|h| h.1).ok_or_else(|| {
                    anyhow!("no num_key_value_heads nor num_attention_heads: cannot tell how many K/V heads a layer has")
                })?,
            }
        };
        let head_dim = match cfg.positive("head_dim")? {
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

/// The sliding window a config declares (`sliding_window`), `None` when absent or null.
fn window_field(cfg: &Fields) -> Result<Option<u64>> {
    cfg.positive("sliding_window")
}

/// Each layer's role, from `layer_types`, a hybrid period, or the sliding-window rules.
fn layer_slots(
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

/// Values of constant state per sequence in one no-KV layer, when the config has the fields.
///
/// Linear attention (Qwen3-Next Gated DeltaNet): conv `(2·nk·dk + nv·dv) · (kernel − 1)` plus
/// recurrent `nv · dk · dv` (`linear_num_key_heads`, `linear_key_head_dim`,
/// `linear_num_value_heads`, `linear_value_head_dim`, `linear_conv_kernel_dim`).
/// Mamba (Jamba): `d_inner = mamba_expand · hidden_size`; conv `d_inner · (mamba_d_conv − 1)`
/// plus SSM `d_inner · mamba_d_state`. Mamba-2 (`mamba_n_heads`): conv
/// `(d_inner + 2 · mamba_n_groups · d_state) · (d_conv − 1)` plus SSM
/// `n_heads · mamba_d_head · d_state`. The conv window is `kernel − 1` as vLLM keeps it.
fn state_values(cfg: &Fields, mixer: Mixer, hidden: Option<(&str, u64)>) -> Result<Option<u64>> {
    let what = "state size";
    match mixer {
        Mixer::LinearAttention => {
            let f = |k| cfg.positive(k);
            let (Some(nk), Some(dk), Some(nv), Some(dv), Some(kernel)) = (
                f("linear_num_key_heads")?,
                f("linear_key_head_dim")?,
                f("linear_num_value_heads")?,
                f("linear_value_head_dim")?,
                f("linear_conv_kernel_dim")?,
            ) else {
                return Ok(None);
            };
            let conv_dim = mul(what, 2, mul(what, nk, dk)?)?
                .checked_add(mul(what, nv, dv)?)
                .ok_or_else(|| anyhow!("{what} overflows 64 bits"))?;
            let conv = mul(what, conv_dim, kernel - 1)?;
            let recurrent = mul(what, mul(what, nv, dk)?, dv)?;
            Ok(conv.checked_add(recurrent))
        }
        Mixer::Mamba => {
            let (Some(d_state), Some(d_conv), Some(expand), Some((_, hidden))) = (
                cfg.positive("mamba_d_state")?,
                cfg.positive("mamba_d_conv")?,
                cfg.positive("mamba_expand")?,
                hidden,
            ) else {
                return Ok(None);
            };
            let d_inner = mul(what, expand, hidden)?;
            if let Some(n_heads) = cfg.positive("mamba_n_heads")? {
                let groups = cfg.positive("mamba_n_groups")?.unwrap_or(1);
                let head = cfg.positive("mamba_d_head")?.unwrap_or(d_inner / n_heads);
                let conv_dim = d_inner
                    .checked_add(mul(what, 2, mul(what, groups, d_state)?)?)
                    .ok_or_else(|| anyhow!("{what} overflows 64 bits"))?;
                let conv = mul(what, conv_dim, d_conv - 1)?;
                let ssm = mul(what, mul(what, n_heads, head)?, d_state)?;
                return Ok(conv.checked_add(ssm));
            }
            let conv = mul(what, d_inner, d_conv - 1)?;
            let ssm = mul(what, d_inner, d_state)?;
            Ok(conv.checked_add(ssm))
        }
    }
}

/// A GGUF metadata integer (any unsigned or non-negative signed type), or `None`.
fn gguf_uint(v: &gguf_file::Value) -> Option<u64> {
    use gguf_file::Value as V;
    match *v {
        V::U8(x) => Some(x.into()),
        V::U16(x) => Some(x.into()),
        V::U32(x) => Some(x.into()),
        V::U64(x) => Some(x),
        V::I8(x) => u64::try_from(x).ok(),
        V::I16(x) => u64::try_from(x).ok(),
        V::I32(x) => u64::try_from(x).ok(),
        V::I64(x) => u64::try_from(x).ok(),
        _ => None,
    }
}

/// GGUF metadata of one architecture: `{arch}.{key}` lookups with errors naming the key.
struct Gguf<'a> {
    md: &'a HashMap<String, gguf_file::Value>,
    arch: &'a str,
}

impl Gguf<'_> {
    fn key(&self, key: &str) -> String {
        format!("{}.{key}", self.arch)
    }

    /// An integer key, `None` when absent. Errors: present but not an integer.
    fn uint(&self, key: &str) -> Result<Option<u64>> {
        let name = self.key(key);
        match self.md.get(&name) {
            None => Ok(None),
            Some(v) => match gguf_uint(v) {
                Some(n) => Ok(Some(n)),
                None => bail!("{name} is {v:?}, expected a non-negative integer"),
            },
        }
    }

    /// An integer key that may also be a per-layer array (llama.cpp allows both for head
    /// counts): one value per layer. Errors: wrong type or wrong array length.
    fn per_layer(&self, key: &str, layers: usize) -> Result<Option<Vec<u64>>> {
        let name = self.key(key);
        match self.md.get(&name) {
            None => Ok(None),
            Some(gguf_file::Value::Array(items)) => {
                if items.len() != layers {
                    bail!(
                        "{name} has {} entries but block_count is {layers}",
                        items.len()
                    );
                }
                items
                    .iter()
                    .map(|v| {
                        gguf_uint(v).ok_or_else(|| anyhow!("{name} holds {v:?}, expected integers"))
                    })
                    .collect::<Result<Vec<u64>>>()
                    .map(Some)
            }
            Some(_) => Ok(self.uint(key)?.map(|n| vec![n; layers])),
        }
    }
}

impl KvSpec {
    /// Read a model's KV layout from GGUF metadata (`Content::read` of a .gguf file; no
    /// weights are loaded).
    ///
    /// Keys (llama.cpp names, `{arch}` = `general.architecture`): `{arch}.block_count`,
    /// `{arch}.attention.head_count`, `{arch}.attention.head_count_kv` (absent means
    /// head_count; a per-layer array where 0 marks a recurrent layer),
    /// `{arch}.embedding_length`, `{arch}.attention.key_length` (absent means
    /// embedding_length / head_count), `{arch}.context_length`; MLA:
    /// `{arch}.attention.kv_lora_rank` with `{arch}.rope.dimension_count`; windows:
    /// `{arch}.attention.sliding_window`, applied the way llama.cpp does for gemma2
    /// (alternating), gemma3 (5 local : 1 global) and cohere2 (3 : 1) only.
    ///
    /// Errors: a missing architecture, block count or head count, or a key of the wrong type.
    pub fn from_gguf_metadata(md: &HashMap<String, gguf_file::Value>) -> Result<KvSpec> {
        let arch = match md.get("general.architecture") {
            Some(gguf_file::Value::String(s)) => s.as_str(),
            Some(v) => bail!("general.architecture is {v:?}, expected a string"),
            None => bail!("no general.architecture in the GGUF metadata"),
        };
        let g = Gguf { md, arch };
        let layers = g.uint("block_count")?.filter(|n| *n > 0).ok_or_else(|| {
            anyhow!(
                "no {} (or it is 0): cannot tell how many layers hold a KV cache",
                g.key("block_count")
            )
        })?;
        if layers > MAX_LAYERS {
            bail!(
                "{} is {layers}, more than {MAX_LAYERS} layers is not a real model",
                g.key("block_count")
            );
        }
        let n = layers as usize;
        let heads = g.per_layer("attention.head_count", n)?;
        let kv_heads = g.per_layer("attention.head_count_kv", n)?;
        let hidden = g.uint("embedding_length")?;
        let mut notes = Vec::new();

        let mla = match g.uint("attention.kv_lora_rank")? {
            Some(rank) => {
                let rope = g.uint("rope.dimension_count")?.ok_or_else(|| {
                    anyhow!(
                        "MLA model ({}) has no {}",
                        g.key("attention.kv_lora_rank"),
                        g.key("rope.dimension_count")
                    )
                })?;
                Some(LayerKind::Mla {
                    kv_lora_rank: to_usize("kv_lora_rank", rank)?,
                    qk_rope_head_dim: to_usize("rope.dimension_count", rope)?,
                })
            }
            None => None,
        };
        let window = g.uint("attention.sliding_window")?.filter(|w| *w > 0);
        let local = |i: u64| -> bool {
            match (window, arch) {
                (Some(_), "gemma2") => i.is_multiple_of(2),
                (Some(_), "gemma3") => !(i + 1).is_multiple_of(6),
                (Some(_), "cohere2") => !(i + 1).is_multiple_of(4),
                _ => false,
            }
        };
        if let (Some(w), false) = (window, matches!(arch, "gemma2" | "gemma3" | "cohere2")) {
            notes.push(format!(
                "{} {w} ignored: llama.cpp applies it only to gemma2, gemma3 and cohere2",
                g.key("attention.sliding_window")
            ));
        }

        let mut kinds = Vec::with_capacity(n);
        for i in 0..n {
            let h = heads.as_ref().map(|v| v[i]);
            let kv = kv_heads.as_ref().map(|v| v[i]).or(h);
            if kv == Some(0) {
                // llama.cpp marks recurrent (Mamba) layers of hybrids with head_count_kv 0.
                kinds.push(LayerKind::NoKv {
                    mixer: Mixer::Mamba,
                    state_values: None,
                });
                continue;
            }
            if let Some(mla) = &mla {
                kinds.push(mla.clone());
                continue;
            }
            let kv = kv.ok_or_else(|| {
                anyhow!(
                    "no {}: cannot tell how many K/V heads a layer has",
                    g.key("attention.head_count")
                )
            })?;
            let head_dim = gguf_head_dim(&g, hidden, h)?;
            let (num_key_value_heads, head_dim) = (
                to_usize("head_count_kv", kv)?,
                to_usize("key_length", head_dim)?,
            );
            kinds.push(match window {
                Some(w) if local(i as u64) => LayerKind::SlidingWindow {
                    num_key_value_heads,
                    head_dim,
                    window: w,
                },
                _ => LayerKind::FullAttention {
                    num_key_value_heads,
                    head_dim,
                },
            });
        }
        note_unknown_state(&kinds, &mut notes);
        Ok(KvSpec {
            groups: group(kinds),
            hidden_size: hidden,
            num_attention_heads: heads.as_ref().and_then(|v| v.iter().copied().max()),
            max_position_embeddings: g.uint("context_length")?,
            model_type: Some(arch.to_string()),
            notes,
        })
    }
}

/// head_dim of a GGUF model: `attention.key_length`, else embedding_length / head_count.
/// Errors: K and V of different widths (not a plain cache), or nothing to compute it from.
fn gguf_head_dim(g: &Gguf, hidden: Option<u64>, heads: Option<u64>) -> Result<u64> {
    let key = g.uint("attention.key_length")?;
    let value = g.uint("attention.value_length")?;
    if let (Some(k), Some(v)) = (key, value) {
        if k != v {
            bail!(
                "{} {k} differs from {} {v}: K and V of different widths are not supported",
                g.key("attention.key_length"),
                g.key("attention.value_length")
            );
        }
    }
    match (key, hidden, heads) {
        (Some(k), _, _) if k > 0 => Ok(k),
        (_, Some(h), Some(n)) if n > 0 && h % n == 0 && h > 0 => Ok(h / n),
        _ => bail!(
            "no {} and no {} divisible by {}: cannot tell head_dim",
            g.key("attention.key_length"),
            g.key("embedding_length"),
            g.key("attention.head_count")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> KvSpec {
        KvSpec::from_config_json(&v).unwrap()
    }

    fn err(v: Value) -> String {
        KvSpec::from_config_json(&v).unwrap_err().to_string()
    }

    fn full(kv: usize, hd: usize, layers: u64) -> LayerGroup {
        LayerGroup {
            kind: LayerKind::FullAttention {
                num_key_value_heads: kv,
                head_dim: hd,
            },
            layers,
        }
    }

    #[test]
    fn kv_heads_default_to_heads_and_head_dim_to_hidden_over_heads() {
        let s =
            spec(json!({"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096}));
        assert_eq!(s.groups, vec![full(32, 128, 32)]);
        // An explicit head_dim wins (Qwen3, Gemma).
        let s = spec(
            json!({"num_hidden_layers": 2, "num_attention_heads": 64, "num_key_value_heads": 8, "hidden_size": 5120, "head_dim": 128}),
        );
        assert_eq!(s.groups, vec![full(8, 128, 2)]);
        // GPT-2 names; Falcon's multi_query.
        let s = spec(json!({"n_layer": 12, "n_head": 12, "n_embd": 768}));
        assert_eq!(s.groups, vec![full(12, 64, 12)]);
        let s = spec(
            json!({"num_hidden_layers": 32, "num_attention_heads": 71, "hidden_size": 4544, "multi_query": true}),
        );
        assert_eq!(s.groups, vec![full(1, 64, 32)]);
    }

    #[test]
    fn qwen2_windows_only_layers_from_max_window_layers_when_enabled() {
        let base = json!({"num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 256,
            "sliding_window": 100, "max_window_layers": 3, "use_sliding_window": true});
        let s = spec(base.clone());
        assert_eq!(s.groups[0], full(4, 64, 3));
        assert_eq!(s.groups[1].layers, 1);
        let mut off = base;
        off["use_sliding_window"] = json!(false);
        assert_eq!(spec(off).groups, vec![full(4, 64, 4)]);
    }

    #[test]
    fn text_config_is_used_for_multimodal_configs() {
        let s = spec(
            json!({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text",
            "num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4,
            "head_dim": 256, "hidden_size": 2560, "sliding_window": 1024}}),
        );
        assert_eq!(s.groups.len(), 2);
        assert_eq!(s.groups[0].layers, 10); // sliding
        assert_eq!(s.groups[1], full(4, 256, 2));
    }

    #[test]
    fn bad_configs_name_the_field() {
        assert!(err(json!({"hidden_size": 64})).contains("no num_hidden_layers"));
        assert!(err(json!([1, 2])).contains("not a JSON object"));
        assert!(err(json!({"num_hidden_layers": -1})).contains("num_hidden_layers is -1"));
        assert!(err(json!({"num_hidden_layers": 0})).contains("num_hidden_layers is 0"));
        assert!(err(json!({"num_hidden_layers": 1e9})).contains("more than"));
        assert!(err(json!({"num_hidden_layers": 2})).contains("num_attention_heads"));
        assert!(err(
            json!({"num_hidden_layers": 2, "model_type": "deepseek_v2", "kv_lora_rank": null})
        )
        .contains("has no kv_lora_rank"));
        let types = json!({"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8,
            "layer_types": ["full_attention"]});
        assert!(err(types).contains("layer_types has 1 entries"));
        let types = json!({"num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 8,
            "layer_types": ["warp_attention"]});
        assert!(err(types).contains("warp_attention"));
        let types = json!({"num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 8,
            "layer_types": ["sliding_attention"]});
        assert!(err(types).contains("sliding_window is missing"));
    }

    #[test]
    fn gguf_per_layer_kv_heads_mark_recurrent_layers() {
        use gguf_file::Value as G;
        let md: HashMap<String, G> = [
            ("general.architecture", G::String("granitehybrid".into())),
            ("granitehybrid.block_count", G::U32(4)),
            ("granitehybrid.attention.head_count", G::U32(8)),
            (
                "granitehybrid.attention.head_count_kv",
                G::Array(vec![G::U32(0), G::U32(2), G::U32(0), G::U32(0)]),
            ),
            ("granitehybrid.embedding_length", G::U32(512)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let s = KvSpec::from_gguf_metadata(&md).unwrap();
        assert_eq!(s.groups[0].layers, 3);
        assert!(matches!(s.groups[0].kind, LayerKind::NoKv { .. }));
        assert_eq!(s.groups[1], full(2, 64, 1));
        assert!(KvSpec::from_gguf_metadata(&HashMap::new()).is_err());
    }

    #[test]
    fn digits_group_by_three() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(34_359_738_368), "34,359,738,368");
    }
}

//! [`KvSpec`]: what every layer of a model keeps per sequence.
//!
//! A model is a list of [`LayerGroup`]s: layers of one [`LayerKind`] (full attention, sliding
//! window, MLA, or no KV at all), counted. Built from an HF config.json
//! ([`KvSpec::from_config_json`]), GGUF metadata ([`KvSpec::from_gguf_metadata`]) or a plain
//! shape ([`KvSpec::plain`]). What each kind costs in bytes is in [`super::estimate`].
mod config_json;
pub(crate) mod gguf;

use crate::kv::shape::KvShape;
use crate::units::group_digits;
use anyhow::{anyhow, bail, Result};
use serde::Serialize;

/// The token mixer of a layer that holds no KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mixer {
    /// Linear attention (Gated DeltaNet in Qwen3-Next): a conv state and a recurrent
    /// `num_value_heads · key_head_dim · value_head_dim` state per layer.
    LinearAttention,
    /// A Mamba / Mamba-2 state-space layer (Jamba, Granite 4, ...): a conv state and an SSM state.
    Mamba,
    /// Attention over an earlier layer's K and V (Gemma-3n's last `num_kv_shared_layers`
    /// layers): no cache and no state of its own.
    SharedKv,
    /// No token mixer at all (Nemotron-H's MLP and MoE layers, `-` and `E` in its
    /// `hybrid_override_pattern`): no cache, no state.
    MlpOnly,
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
            LayerKind::NoKv {
                mixer: Mixer::SharedKv,
                ..
            } => "KV shared with an earlier layer (no KV)".to_string(),
            LayerKind::NoKv {
                mixer: Mixer::MlpOnly,
                ..
            } => "MLP only (no attention, no KV)".to_string(),
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
    /// The per-head width of the "as if plain MHA" figure when no plain-attention layer
    /// gives one: an MLA model's `v_head_dim` (the DeepSeek-V2 paper's d_h, whose MHA cache
    /// is 2 · n_h · d_h · l values per token).
    pub mha_head_dim: Option<u64>,
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
        KvSpec::from_kv_groups(shape, &crate::kv::KvGroups::single(shape.num_layers))
    }

    /// The spec of a runtime cache's shape whose layers are grouped by `groups` (a hybrid
    /// KV cache: full-attention and sliding-window groups; a latent cache's layers are MLA).
    pub fn from_kv_groups(shape: &KvShape, groups: &crate::kv::KvGroups) -> KvSpec {
        let (num_key_value_heads, head_dim) = (shape.num_key_value_heads, shape.head_dim);
        KvSpec::from_groups(
            groups
                .groups
                .iter()
                .map(|g| LayerGroup {
                    kind: match g.window {
                        // A latent row: its width is what the bytes need (the split between
                        // c_KV and the RoPE key does not change them).
                        None if shape.latent => LayerKind::Mla {
                            kv_lora_rank: head_dim,
                            qk_rope_head_dim: 0,
                        },
                        None => LayerKind::FullAttention {
                            num_key_value_heads,
                            head_dim,
                        },
                        Some(w) => LayerKind::SlidingWindow {
                            num_key_value_heads,
                            head_dim,
                            window: w as u64,
                        },
                    },
                    layers: g.layers.len() as u64,
                })
                .collect(),
        )
    }

    /// A spec from layer groups, without the optional config fields.
    pub fn from_groups(groups: Vec<LayerGroup>) -> KvSpec {
        KvSpec {
            groups,
            hidden_size: None,
            num_attention_heads: None,
            mha_head_dim: None,
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

/// Most `num_hidden_layers` a config may declare (real models have a few hundred at most);
/// bounds the per-layer walk over a hostile file.
pub const MAX_LAYERS: u64 = 100_000;

/// Check an MLA latent's widths as a model file gives them (`rank_key` = `rank`, `rope_key` =
/// `rope`): both positive, the RoPE part even, neither past 65,536 values (DeepSeek-V3's are
/// 512 and 64). Errors: one line naming the key.
fn check_mla(rank_key: &str, rank: u64, rope_key: &str, rope: u64) -> Result<()> {
    const MAX: u64 = 1 << 16;
    if rank == 0 || rank > MAX {
        bail!("{rank_key} is {rank}: an MLA latent has 1 to {MAX} values");
    }
    if rope == 0 || !rope.is_multiple_of(2) || rope > MAX {
        bail!("{rope_key} is {rope}: MLA's RoPE key must be even, 2 to {MAX} values");
    }
    Ok(())
}

fn to_usize(key: &str, n: u64) -> Result<usize> {
    usize::try_from(n).map_err(|_| anyhow!("{key} {n} does not fit this machine's usize"))
}

/// Check that `kv` K/V heads can serve `heads` attention heads: grouped-query attention
/// shares each K/V head among `heads / kv` query heads, so `kv` must not exceed `heads` and
/// must divide it. `kv_name` and `heads_name` are what the user wrote (`num_key_value_heads`,
/// `--kv-heads`, ...). Errors: one sentence naming both fields and values.
pub fn check_gqa(kv_name: &str, kv: u64, heads_name: &str, heads: u64) -> Result<()> {
    const WHY: &str =
        "grouped-query attention needs the attention heads to be a multiple of the K/V heads";
    if kv == 0 || heads == 0 {
        return Ok(()); // zero counts are refused where they are read
    }
    if kv > heads {
        bail!("{kv_name} {kv} exceeds {heads_name} {heads}: {WHY}");
    }
    if !heads.is_multiple_of(kv) {
        bail!("{heads_name} {heads} is not a multiple of {kv_name} {kv}: {WHY}");
    }
    Ok(())
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

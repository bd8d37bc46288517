//! The `kv-size` arithmetic: what each [`LayerKind`] holds in bytes, and an [`Estimate`] for a
//! model at a context length, batch, dtype, tensor-parallel degree and block size.
//!
//! Plain attention (MHA/GQA/MQA, and sliding-window layers) goes through [`KvShape`], the same
//! arithmetic the runtime cache ([`crate::kv::KvCache`]) allocates with, so the estimate for a
//! plain model equals what the engine really holds. Every sum is checked: an overflow is an
//! error (`None`), never a wrapped number.
use super::shape::{KvDtype, KvShape};
use super::spec::{group_digits, KvSpec, LayerKind};
use anyhow::{anyhow, bail, Result};
use serde::Serialize;

/// How the cache is laid out across GPUs and pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Tensor-parallel degree: KV heads are split across `tp` GPUs (replicated when
    /// `tp > num_key_value_heads`, as vLLM does); an MLA latent is replicated on every GPU.
    pub tp: u64,
    /// Paged allocation: every sequence's tokens round up to whole blocks of this many tokens
    /// (vLLM `--block-size`); `None` means a contiguous cache of exactly `T` tokens.
    pub block_size: Option<u64>,
}

impl Layout {
    /// One GPU, a contiguous cache: what `nanollm generate` allocates.
    pub const SINGLE: Layout = Layout {
        tp: 1,
        block_size: None,
    };
}

impl Default for Layout {
    fn default() -> Self {
        Layout::SINGLE
    }
}

/// The storage type of recurrent state: float KV dtypes apply to it; quantized KV dtypes
/// (fp8, int8, q8_0, q4_0) quantize the KV cache only, and the state stays bf16 (vLLM keeps
/// Mamba/linear-attention state in the model dtype).
pub fn state_dtype(kv: KvDtype) -> KvDtype {
    match kv {
        KvDtype::F32 | KvDtype::F16 | KvDtype::Bf16 => kv,
        _ => KvDtype::Bf16,
    }
}

/// K/V heads one GPU holds at tensor-parallel degree `tp`: `max(1, heads / tp)` (vLLM
/// replicates heads when `tp > heads`). Callers check divisibility first.
pub fn heads_per_gpu(num_key_value_heads: usize, tp: u64) -> usize {
    let tp = usize::try_from(tp).unwrap_or(usize::MAX).max(1);
    (num_key_value_heads / tp).max(1)
}

impl LayerKind {
    /// Tokens of one sequence this layer holds after `seq` tokens, before paging:
    /// `seq` for full attention and MLA, `min(seq, window)` for a sliding window, 0 for no KV.
    pub fn tokens_held(&self, seq: u64) -> u64 {
        match self {
            LayerKind::FullAttention { .. } | LayerKind::Mla { .. } => seq,
            LayerKind::SlidingWindow { window, .. } => seq.min(*window),
            LayerKind::NoKv { .. } => 0,
        }
    }

    /// Tokens held after `seq` tokens under `layout`: [`LayerKind::tokens_held`] rounded up to
    /// whole blocks when paged. `None` on overflow.
    pub fn tokens_allocated(&self, seq: u64, layout: Layout) -> Option<u64> {
        let held = self.tokens_held(seq);
        match layout.block_size {
            Some(b) if b > 0 => held.div_ceil(b).checked_mul(b),
            _ => Some(held),
        }
    }

    /// The plain-attention shape of `layers` such layers on one GPU, for the arithmetic.
    fn shape(&self, layers: u64, dtype: KvDtype, tp: u64) -> Option<KvShape> {
        match *self {
            LayerKind::FullAttention {
                num_key_value_heads,
                head_dim,
            }
            | LayerKind::SlidingWindow {
                num_key_value_heads,
                head_dim,
                ..
            } => Some(KvShape {
                num_layers: usize::try_from(layers).ok()?,
                num_key_value_heads: heads_per_gpu(num_key_value_heads, tp),
                head_dim,
                dtype,
            }),
            _ => None,
        }
    }

    /// Bytes one token adds to one such layer on one GPU (K and V, or the MLA latent), block
    /// formats rounded per head (per latent for MLA). 0 for no-KV layers; `None` on overflow.
    pub fn bytes_per_token_per_layer(&self, dtype: KvDtype, tp: u64) -> Option<u64> {
        match *self {
            LayerKind::FullAttention { .. } | LayerKind::SlidingWindow { .. } => {
                let per = self.shape(1, dtype, tp)?.bytes_per_token_per_layer();
                // KvShape saturates instead of wrapping; treat saturation as overflow.
                (per != u64::MAX).then_some(per)
            }
            LayerKind::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
            } => {
                let values = (kv_lora_rank as u64).checked_add(qk_rope_head_dim as u64)?;
                dtype.bytes_for(values)
            }
            LayerKind::NoKv { .. } => Some(0),
        }
    }

    /// KV bytes `layers` such layers hold on one GPU for `batch` sequences of `seq` tokens.
    /// Plain attention is [`KvShape::bytes`]. `None` on overflow.
    pub fn kv_bytes(
        &self,
        layers: u64,
        seq: u64,
        batch: u64,
        dtype: KvDtype,
        layout: Layout,
    ) -> Option<u64> {
        let tokens = self.tokens_allocated(seq, layout)?;
        let per_sequence = match self {
            LayerKind::FullAttention { .. } | LayerKind::SlidingWindow { .. } => {
                let shape = self.shape(layers, dtype, layout.tp)?;
                if shape.bytes_per_token_per_layer() == u64::MAX {
                    return None;
                }
                shape.bytes(tokens)?
            }
            LayerKind::Mla { .. } => self
                .bytes_per_token_per_layer(dtype, layout.tp)?
                .checked_mul(layers)?
                .checked_mul(tokens)?,
            LayerKind::NoKv { .. } => 0,
        };
        per_sequence.checked_mul(batch)
    }

    /// Constant state bytes `layers` such layers hold on one GPU for `batch` sequences
    /// (no-KV layers only; the state is split across `tp` GPUs). `Some(0)` when there is none
    /// or it is unknown; `None` on overflow.
    pub fn state_bytes(
        &self,
        layers: u64,
        batch: u64,
        dtype: KvDtype,
        layout: Layout,
    ) -> Option<u64> {
        match self {
            LayerKind::NoKv {
                state_values: Some(v),
                ..
            } => state_dtype(dtype)
                .bytes_for(v.div_ceil(layout.tp.max(1)))?
                .checked_mul(layers)?
                .checked_mul(batch),
            _ => Some(0),
        }
    }
}

impl KvSpec {
    /// KV-cache bytes for `batch` sequences of `seq` tokens each, stored as `dtype`, on one GPU
    /// in a contiguous cache — what the runtime cache allocates. Constant state of no-KV
    /// layers is not included (see [`KvSpec::state_bytes`]). `None` when it overflows 64 bits.
    pub fn bytes(&self, seq: u64, batch: u64, dtype: KvDtype) -> Option<u64> {
        self.kv_bytes(seq, batch, dtype, Layout::SINGLE)
    }

    /// KV-cache bytes per GPU under `layout` for `batch` sequences of `seq` tokens.
    /// `None` on overflow.
    pub fn kv_bytes(&self, seq: u64, batch: u64, dtype: KvDtype, layout: Layout) -> Option<u64> {
        self.groups.iter().try_fold(0u64, |sum, g| {
            sum.checked_add(g.kind.kv_bytes(g.layers, seq, batch, dtype, layout)?)
        })
    }

    /// Constant per-sequence state bytes per GPU of the no-KV layers, for `batch` sequences.
    /// `None` on overflow.
    pub fn state_bytes(&self, batch: u64, dtype: KvDtype, layout: Layout) -> Option<u64> {
        self.groups.iter().try_fold(0u64, |sum, g| {
            sum.checked_add(g.kind.state_bytes(g.layers, batch, dtype, layout)?)
        })
    }

    /// Bytes one more token adds to one sequence on one GPU while no window is full:
    /// the sum over KV layers of their per-token bytes. `None` on overflow.
    pub fn bytes_per_token(&self, dtype: KvDtype, tp: u64) -> Option<u64> {
        self.groups.iter().try_fold(0u64, |sum, g| {
            let per = g.kind.bytes_per_token_per_layer(dtype, tp)?;
            sum.checked_add(per.checked_mul(g.layers)?)
        })
    }

    /// Bytes per token "as if plain MHA" with K and V as wide as the model:
    /// `2 · num_hidden_layers · hidden_size · bytes` (the formula naive calculators use; falls
    /// back to `num_attention_heads · head_dim` when `hidden_size` is unknown). `None` when
    /// neither is known or on overflow.
    pub fn as_if_mha_bytes_per_token(&self, dtype: KvDtype) -> Option<u64> {
        let width = match self.hidden_size {
            Some(h) => h,
            None => {
                let heads = self.num_attention_heads?;
                let head_dim = self.groups.iter().find_map(|g| match g.kind {
                    LayerKind::FullAttention { head_dim, .. }
                    | LayerKind::SlidingWindow { head_dim, .. } => Some(head_dim as u64),
                    _ => None,
                })?;
                heads.checked_mul(head_dim)?
            }
        };
        let per_layer = dtype.bytes_for(width)?.checked_mul(2)?;
        per_layer.checked_mul(self.num_layers())
    }
}

/// One question: `batch` sequences of `seq` tokens each, cached as `dtype`, laid out as
/// `layout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    /// Tokens per sequence (prompt + generated), T.
    pub seq: u64,
    /// Concurrent sequences, B.
    pub batch: u64,
    /// Storage type of the KV cache.
    pub dtype: KvDtype,
    /// Tensor parallelism and paging.
    pub layout: Layout,
}

/// What one group of same-kind layers holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupEstimate {
    /// Human label of the kind (`sliding window 4,096 (8 KV heads × head_dim 128)`).
    pub label: String,
    /// The kind and its fields.
    #[serde(flatten)]
    pub kind: LayerKind,
    /// Layers of this kind.
    pub layers: u64,
    /// Tokens each of these layers holds per sequence (windowed, rounded up to blocks).
    pub tokens_held: u64,
    /// Bytes one token adds to one sequence across these layers, per GPU (before windows fill).
    pub bytes_per_token: u64,
    /// KV bytes of these layers for the whole batch, per GPU.
    pub kv_bytes: u64,
    /// Constant state bytes of these layers for the whole batch, per GPU (no-KV layers).
    pub state_bytes: u64,
}

/// KV-cache memory of a model for one [`Query`]. Bytes are exact; "per GPU" is one
/// tensor-parallel rank (all of it when `tp` is 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Estimate {
    /// Tokens per sequence.
    pub seq: u64,
    /// Concurrent sequences.
    pub batch: u64,
    /// KV dtype name (`bf16`, `q8_0`, ...).
    pub dtype: &'static str,
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Paging block size in tokens, if paged.
    pub block_size: Option<u64>,
    /// Bytes one token adds to one sequence, per GPU, while no window is full.
    pub bytes_per_token: u64,
    /// Per layer kind.
    pub groups: Vec<GroupEstimate>,
    /// KV-cache bytes, per GPU.
    pub kv_bytes: u64,
    /// Constant state bytes of no-KV layers, per GPU.
    pub state_bytes: u64,
    /// `kv_bytes + state_bytes`, per GPU.
    pub total_bytes: u64,
    /// `total_bytes · tp`: all GPUs together (replicated heads counted on every GPU).
    pub total_bytes_all_gpus: u64,
    /// The same batch and tokens "as if plain MHA" (`2 · layers · hidden_size · T · B · bytes`,
    /// one GPU, no paging): what the cache would be without GQA/MLA/windows/hybrid layers.
    pub as_if_mha_bytes: Option<u64>,
}

/// How many sequences fit in the memory a GPU has left after its share of the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Fit {
    /// Bytes per GPU left for the cache: `gpu_mem − weights / tp`.
    pub free_bytes: u64,
    /// Bytes one sequence of `seq` tokens needs per GPU (KV + state).
    pub bytes_per_sequence: u64,
    /// Sequences of `seq` tokens that fit at once; `None` when one costs nothing (unbounded).
    pub sequences: Option<u64>,
    /// Most tokens one sequence can reach alone; `None` when unbounded (every KV layer is
    /// windowed, so the cache stops growing).
    pub max_tokens: Option<u64>,
}

fn overflow(q: &Query) -> anyhow::Error {
    anyhow!(
        "the KV cache for {} tokens × batch {} overflows 64 bits of bytes",
        group_digits(q.seq),
        group_digits(q.batch)
    )
}

/// Check that `tp` splits the heads the way vLLM requires: `num_attention_heads` divisible by
/// `tp`, and K/V heads divisible by `tp` or `tp` divisible by them (then replicated).
/// Errors: a degree that does not divide; names both numbers.
pub fn check_tp(spec: &KvSpec, tp: u64) -> Result<()> {
    if tp == 0 {
        bail!("tensor-parallel degree 0: expected at least 1");
    }
    if let Some(heads) = spec.num_attention_heads {
        if heads % tp != 0 {
            bail!("tensor-parallel degree {tp} does not divide num_attention_heads {heads}");
        }
    }
    for g in &spec.groups {
        if let LayerKind::FullAttention {
            num_key_value_heads: kv,
            ..
        }
        | LayerKind::SlidingWindow {
            num_key_value_heads: kv,
            ..
        } = g.kind
        {
            let kv = kv as u64;
            if !kv.is_multiple_of(tp) && !tp.is_multiple_of(kv) {
                bail!("tensor-parallel degree {tp} and num_key_value_heads {kv}: neither divides the other");
            }
        }
    }
    Ok(())
}

/// The KV-cache memory of `spec` for `q`.
///
/// Errors: a `tp` that does not split the heads ([`check_tp`]), or a total that overflows 64
/// bits.
pub fn estimate(spec: &KvSpec, q: &Query) -> Result<Estimate> {
    check_tp(spec, q.layout.tp)?;
    let tp = q.layout.tp;
    let mut groups = Vec::with_capacity(spec.groups.len());
    for g in &spec.groups {
        let per_layer = g.kind.bytes_per_token_per_layer(q.dtype, tp);
        groups.push(GroupEstimate {
            label: g.kind.label(),
            kind: g.kind.clone(),
            layers: g.layers,
            tokens_held: g
                .kind
                .tokens_allocated(q.seq, q.layout)
                .ok_or_else(|| overflow(q))?,
            bytes_per_token: per_layer
                .and_then(|p| p.checked_mul(g.layers))
                .ok_or_else(|| overflow(q))?,
            kv_bytes: g
                .kind
                .kv_bytes(g.layers, q.seq, q.batch, q.dtype, q.layout)
                .ok_or_else(|| overflow(q))?,
            state_bytes: g
                .kind
                .state_bytes(g.layers, q.batch, q.dtype, q.layout)
                .ok_or_else(|| overflow(q))?,
        });
    }
    let sum = |f: fn(&GroupEstimate) -> u64| {
        groups
            .iter()
            .try_fold(0u64, |s, g| s.checked_add(f(g)))
            .ok_or_else(|| overflow(q))
    };
    let kv_bytes = sum(|g| g.kv_bytes)?;
    let state_bytes = sum(|g| g.state_bytes)?;
    let bytes_per_token = sum(|g| g.bytes_per_token)?;
    let total_bytes = kv_bytes
        .checked_add(state_bytes)
        .ok_or_else(|| overflow(q))?;
    Ok(Estimate {
        seq: q.seq,
        batch: q.batch,
        dtype: q.dtype.name(),
        tp,
        block_size: q.layout.block_size,
        bytes_per_token,
        kv_bytes,
        state_bytes,
        total_bytes,
        total_bytes_all_gpus: total_bytes.checked_mul(tp).ok_or_else(|| overflow(q))?,
        as_if_mha_bytes: spec
            .as_if_mha_bytes_per_token(q.dtype)
            .and_then(|b| b.checked_mul(q.seq)?.checked_mul(q.batch)),
        groups,
    })
}

/// Bytes per GPU left for the KV cache: `gpu_mem − ceil(weights / tp)`.
///
/// Errors: the weights' share does not fit in `gpu_mem`.
pub fn free_per_gpu(gpu_mem: u64, weights: u64, tp: u64) -> Result<u64> {
    let share = weights.div_ceil(tp.max(1));
    gpu_mem.checked_sub(share).ok_or_else(|| {
        let of = if tp > 1 {
            format!(" (1/{tp} of {})", group_digits(weights))
        } else {
            String::new()
        };
        anyhow!(
            "the weights need {} bytes per GPU{of}, more than the {} bytes of GPU memory",
            group_digits(share),
            group_digits(gpu_mem)
        )
    })
}

/// Bytes one sequence of `seq` tokens needs per GPU (KV + state). `None` on overflow.
fn sequence_bytes(spec: &KvSpec, seq: u64, q: &Query) -> Option<u64> {
    spec.kv_bytes(seq, 1, q.dtype, q.layout)?
        .checked_add(spec.state_bytes(1, q.dtype, q.layout)?)
}

/// How many sequences of `q.seq` tokens fit in `free_bytes` per GPU, and the most tokens one
/// sequence can reach (`q.batch` is not used). Errors: `tp` does not split the heads.
pub fn fit(spec: &KvSpec, q: &Query, free_bytes: u64) -> Result<Fit> {
    check_tp(spec, q.layout.tp)?;
    let per_sequence = sequence_bytes(spec, q.seq, q);
    let sequences = match per_sequence {
        None => Some(0),
        Some(0) => None,
        Some(b) => Some(free_bytes / b),
    };
    let fits = |t: u64| sequence_bytes(spec, t, q).is_some_and(|b| b <= free_bytes);
    let max_tokens = if !fits(0) {
        Some(0)
    } else if !spec.grows_with_seq() && fits(u64::MAX) {
        None
    } else {
        // Largest t with fits(t): cost grows monotonically with t.
        let (mut lo, mut hi) = (0u64, u64::MAX);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Some(lo)
    };
    Ok(Fit {
        free_bytes,
        bytes_per_sequence: per_sequence.unwrap_or(u64::MAX),
        sequences,
        max_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::spec::LayerGroup;
    use proptest::prelude::*;

    fn q(seq: u64, batch: u64, dtype: KvDtype) -> Query {
        Query {
            seq,
            batch,
            dtype,
            layout: Layout::SINGLE,
        }
    }

    #[test]
    fn qwen3_32b_at_128k_is_32_gib() {
        let spec = KvSpec::plain(64, 8, 128);
        assert_eq!(spec.bytes_per_token(KvDtype::Bf16, 1), Some(262_144));
        assert_eq!(spec.bytes(131_072, 1, KvDtype::Bf16), Some(34_359_738_368));
        assert_eq!(
            KvSpec::plain(64, 40, 128).bytes(131_072, 1, KvDtype::Bf16),
            Some(5 * 34_359_738_368)
        );
    }

    #[test]
    fn qwen2_5_7b_and_llama_2_70b() {
        let qwen = KvSpec::plain(28, 4, 128);
        assert_eq!(qwen.bytes_per_token(KvDtype::Bf16, 1), Some(57_344));
        assert_eq!(qwen.bytes(32_768, 8, KvDtype::Bf16), Some(15_032_385_536));
        assert_eq!(
            KvSpec::plain(80, 8, 128).bytes(4096, 1, KvDtype::Bf16),
            Some(1_342_177_280)
        );
    }

    #[test]
    fn plain_spec_goes_through_kv_shape() {
        let shape = KvShape {
            num_layers: 30,
            num_key_value_heads: 3,
            head_dim: 64,
            dtype: KvDtype::F32,
        };
        let spec = KvSpec::from_shape(&shape);
        for t in [0, 1, 17, 4096] {
            assert_eq!(spec.bytes(t, 1, KvDtype::F32), shape.bytes(t));
        }
        assert_eq!(
            spec.bytes_per_token(KvDtype::F32, 1),
            Some(shape.bytes_per_token())
        );
    }

    #[test]
    fn sliding_window_caps_tokens_and_paging_rounds_up() {
        let k = LayerKind::SlidingWindow {
            num_key_value_heads: 8,
            head_dim: 128,
            window: 4096,
        };
        assert_eq!(k.tokens_held(100), 100);
        assert_eq!(k.tokens_held(10_000), 4096);
        let paged = Layout {
            tp: 1,
            block_size: Some(16),
        };
        assert_eq!(k.tokens_allocated(100, paged), Some(112));
        assert_eq!(k.tokens_allocated(10_000, paged), Some(4096));
    }

    #[test]
    fn mla_has_no_factor_two_and_is_replicated_across_tp() {
        let k = LayerKind::Mla {
            kv_lora_rank: 512,
            qk_rope_head_dim: 64,
        };
        assert_eq!(k.bytes_per_token_per_layer(KvDtype::Bf16, 8), Some(1152));
        assert_eq!(
            k.kv_bytes(61, 10, 1, KvDtype::Bf16, Layout::SINGLE),
            Some(61 * 1152 * 10)
        );
    }

    #[test]
    fn tp_splits_replicates_and_rejects_bad_degrees() {
        assert_eq!(heads_per_gpu(8, 2), 4);
        assert_eq!(heads_per_gpu(8, 16), 1);
        assert_eq!(heads_per_gpu(1, 4), 1);
        let spec = KvSpec::plain(64, 8, 128);
        assert!(check_tp(&spec, 3).is_err());
        let tp2 = Query {
            layout: Layout {
                tp: 2,
                block_size: None,
            },
            ..q(1000, 1, KvDtype::Bf16)
        };
        let e = estimate(&spec, &tp2).unwrap();
        assert_eq!(
            e.total_bytes * 2,
            spec.bytes(1000, 1, KvDtype::Bf16).unwrap()
        );
    }

    #[test]
    fn overflow_is_none_not_a_wrap() {
        let spec = KvSpec::plain(usize::MAX, usize::MAX, usize::MAX);
        assert_eq!(spec.bytes(1, 1, KvDtype::Bf16), None);
        assert_eq!(
            KvSpec::plain(64, 8, 128).bytes(u64::MAX, 1, KvDtype::Bf16),
            None
        );
        assert!(estimate(&KvSpec::plain(64, 8, 128), &q(u64::MAX, 1, KvDtype::Bf16)).is_err());
    }

    #[test]
    fn fit_counts_sequences_and_max_tokens() {
        let spec = KvSpec::plain(64, 8, 128); // 262,144 bytes per token in bf16
        let f = fit(&spec, &q(131_072, 1, KvDtype::Bf16), 64 << 30).unwrap();
        assert_eq!(f.sequences, Some(2));
        assert_eq!(f.max_tokens, Some((64u64 << 30) / 262_144));
        let windowed = KvSpec::from_groups(vec![LayerGroup {
            kind: LayerKind::SlidingWindow {
                num_key_value_heads: 8,
                head_dim: 128,
                window: 4096,
            },
            layers: 32,
        }]);
        assert_eq!(
            fit(&windowed, &q(8192, 1, KvDtype::Bf16), 1 << 30)
                .unwrap()
                .max_tokens,
            None
        );
        assert!(free_per_gpu(10, 30, 2).is_err());
        assert_eq!(free_per_gpu(100, 30, 2).unwrap(), 85);
    }

    fn dtype() -> impl Strategy<Value = KvDtype> {
        prop::sample::select(vec![
            KvDtype::F32,
            KvDtype::F16,
            KvDtype::Bf16,
            KvDtype::Fp8,
            KvDtype::Int8,
            KvDtype::Q8_0,
            KvDtype::Q4_0,
        ])
    }

    proptest! {
        #[test]
        fn plain_bytes_equal_exact_arithmetic_or_none(
            layers in 0usize..100_000, kv in 1usize..1024, hd in 1usize..4096,
            seq in any::<u64>(), batch in 1u64..1_000_000, dt in dtype(),
        ) {
            let (bytes, per) = dt.block();
            let per_head = (hd as u128).div_ceil(per as u128) * bytes as u128;
            let exact = 2 * layers as u128 * kv as u128 * per_head * seq as u128 * batch as u128;
            let got = KvSpec::plain(layers, kv, hd).bytes(seq, batch, dt);
            prop_assert_eq!(got.map(u128::from), (exact <= u64::MAX as u128).then_some(exact));
        }

        #[test]
        fn bytes_grow_with_seq_batch_and_layers(
            layers in 1usize..200, kv in 1usize..64, hd in 1usize..512,
            seq in 0u64..1 << 40, batch in 1u64..1 << 12, dt in dtype(),
            window in 1u64..1 << 20, mla in any::<bool>(),
        ) {
            let spec = |l: usize| {
                let mut groups = vec![LayerGroup {
                    kind: LayerKind::SlidingWindow { num_key_value_heads: kv, head_dim: hd, window },
                    layers: l as u64,
                }];
                groups.push(LayerGroup {
                    kind: if mla {
                        LayerKind::Mla { kv_lora_rank: hd, qk_rope_head_dim: kv }
                    } else {
                        LayerKind::FullAttention { num_key_value_heads: kv, head_dim: hd }
                    },
                    layers: l as u64,
                });
                KvSpec::from_groups(groups)
            };
            let base = spec(layers).bytes(seq, batch, dt);
            let more = |b: Option<u64>| match (base, b) {
                (Some(x), Some(y)) => x <= y,
                (None, Some(_)) => false,
                _ => true,
            };
            prop_assert!(more(spec(layers).bytes(seq + 1, batch, dt)));
            prop_assert!(more(spec(layers).bytes(seq, batch + 1, dt)));
            prop_assert!(more(spec(layers + 1).bytes(seq, batch, dt)));
        }
    }
}

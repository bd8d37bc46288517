//! Bytes per layer kind and per model: what a [`LayerKind`] holds for a sequence length,
//! batch, dtype and [`Layout`], and the sums over a [`KvSpec`]'s layer groups.
use super::Layout;
use crate::kv::shape::{KvDtype, KvShape};
use crate::sizing::spec::{KvSpec, LayerKind};

/// The storage type of recurrent state: float KV dtypes apply to it; quantized KV dtypes
/// (fp8, int8, q8_0 and the 4-bit ones) quantize the KV cache only, and the state stays bf16 (vLLM keeps
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
    /// whole blocks when paged. A paged sliding window holds the blocks that intersect the
    /// window of the next token (positions `seq + 1 − W ..`), as nanollm's runtime and vLLM's
    /// sliding-window manager keep them: `⌈seq / B⌉ − ⌊(seq + 1 − W)⁺ / B⌋` blocks, one
    /// more than `⌈W / B⌉` when the window does not start on a block edge. `None` on overflow.
    pub fn tokens_allocated(&self, seq: u64, layout: Layout) -> Option<u64> {
        let held = self.tokens_held(seq);
        match (layout.block_size, self) {
            (Some(b), LayerKind::SlidingWindow { window, .. }) if b > 0 && seq > 0 => {
                let first = (seq + 1).saturating_sub(*window) / b;
                (seq.div_ceil(b) - first).checked_mul(b)
            }
            (Some(b), _) if b > 0 => held.div_ceil(b).checked_mul(b),
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
                latent: false,
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

    /// [`Self::kv_bytes`] of a sequence of `seq` tokens whose full-attention (and MLA)
    /// layers hold only `held` of them after token eviction (`--kv-evict`): those count
    /// `min(seq, held)` tokens, sliding-window layers their window of `seq` as before.
    /// `None` on overflow.
    pub fn kv_bytes_evicted(
        &self,
        seq: u64,
        held: u64,
        batch: u64,
        dtype: KvDtype,
        layout: Layout,
    ) -> Option<u64> {
        self.groups.iter().try_fold(0u64, |sum, g| {
            let t = match g.kind {
                LayerKind::SlidingWindow { .. } => seq,
                _ => seq.min(held),
            };
            sum.checked_add(g.kind.kv_bytes(g.layers, t, batch, dtype, layout)?)
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

    /// The `head_dim` of the first plain-attention group (full or sliding window), if any.
    pub fn attention_head_dim(&self) -> Option<u64> {
        self.groups.iter().find_map(|g| match g.kind {
            LayerKind::FullAttention { head_dim, .. }
            | LayerKind::SlidingWindow { head_dim, .. } => Some(head_dim as u64),
            _ => None,
        })
    }

    /// Bytes per token on one GPU at tensor-parallel degree `tp` "as if plain MHA": the same
    /// cache with `num_key_value_heads = num_attention_heads` in every layer,
    /// `2 · num_hidden_layers · (num_attention_heads / tp) · head_dim · bytes`; for an MLA
    /// model, head_dim is its `v_head_dim` (the DeepSeek-V2 paper's MHA baseline,
    /// 2 · n_h · d_h · l). Without `num_attention_heads` or a head width it falls back to
    /// `hidden_size / tp` as the width. `None` when neither is known or on overflow.
    pub fn as_if_mha_bytes_per_token(&self, dtype: KvDtype, tp: u64) -> Option<u64> {
        // Per head, like the real cache: block formats round each head row up to whole blocks.
        let head_dim = self.attention_head_dim().or(self.mha_head_dim);
        let per_layer = match (self.num_attention_heads, head_dim) {
            (Some(heads), Some(head_dim)) => {
                let heads = heads_per_gpu(usize::try_from(heads).ok()?, tp) as u64;
                dtype.bytes_for(head_dim)?.checked_mul(heads)?
            }
            _ => dtype.bytes_for(self.hidden_size?.div_ceil(tp.max(1)))?,
        }
        .checked_mul(2)?;
        per_layer.checked_mul(self.num_layers())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sizing::spec::LayerGroup;
    use proptest::prelude::*;

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
    fn as_if_mha_is_attention_heads_times_head_dim_per_gpu() {
        let mut spec = KvSpec::plain(64, 8, 128);
        spec.hidden_size = Some(5120);
        spec.num_attention_heads = Some(64);
        let gqa = spec.bytes_per_token(KvDtype::Bf16, 1).unwrap();
        assert_eq!(
            spec.as_if_mha_bytes_per_token(KvDtype::Bf16, 1),
            Some(8 * gqa)
        );
        let gqa2 = spec.bytes_per_token(KvDtype::Bf16, 2).unwrap();
        assert_eq!(
            spec.as_if_mha_bytes_per_token(KvDtype::Bf16, 2),
            Some(8 * gqa2)
        );
    }

    #[test]
    fn plain_spec_goes_through_kv_shape() {
        let shape = KvShape {
            num_layers: 30,
            num_key_value_heads: 3,
            head_dim: 64,
            dtype: KvDtype::F32,
            latent: false,
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

    fn dtype() -> impl Strategy<Value = KvDtype> {
        prop::sample::select(vec![
            KvDtype::F32,
            KvDtype::F16,
            KvDtype::Bf16,
            KvDtype::Fp8,
            KvDtype::Int8,
            KvDtype::Q8_0,
            KvDtype::Q4_0,
            KvDtype::Iq4Nl,
            KvDtype::Q4_0R,
            KvDtype::Iq4NlR,
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

//! One [`Query`] (sequence length, batch, dtype, layout) and its answer, the [`Estimate`]:
//! bytes per layer group and in total, checked against overflow.
use super::{check_tp, Layout};
use crate::kv::shape::KvDtype;
use crate::sizing::spec::{KvSpec, LayerKind};
use crate::units::group_digits;
use anyhow::{anyhow, Result};
use serde::Serialize;

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
    /// The same batch and tokens "as if plain MHA" (`2 · layers · num_attention_heads / tp ·
    /// head_dim · T · B · bytes`, per GPU like `kv_bytes`, no paging): what the cache would be
    /// without GQA/MLA/windows/hybrid layers (see [`KvSpec::as_if_mha_bytes_per_token`]).
    pub as_if_mha_bytes: Option<u64>,
}

fn overflow(q: &Query) -> anyhow::Error {
    anyhow!(
        "the KV cache for {} tokens × batch {} overflows 64 bits of bytes",
        group_digits(q.seq),
        group_digits(q.batch)
    )
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
        // Same rounding as the real cache: whole blocks when paged.
        as_if_mha_bytes: spec.as_if_mha_bytes_per_token(q.dtype, tp).and_then(|b| {
            let tokens = match q.layout.block_size {
                Some(bs) if bs > 0 => q.seq.div_ceil(bs).checked_mul(bs)?,
                _ => q.seq,
            };
            b.checked_mul(tokens)?.checked_mul(q.batch)
        }),
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sizing::estimate::heads_per_gpu;

    fn q(seq: u64, batch: u64, dtype: KvDtype) -> Query {
        Query {
            seq,
            batch,
            dtype,
            layout: Layout::SINGLE,
        }
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

    /// "As if MHA" rounds to whole blocks like the cache it is compared with.
    #[test]
    fn as_if_mha_rounds_to_blocks_when_paged() {
        // Plain attention over all heads (KvSpec::plain has no head count: MHA = itself).
        let mut spec = KvSpec::plain(30, 3, 64);
        spec.num_attention_heads = Some(9);
        let paged = Query {
            layout: Layout {
                tp: 1,
                block_size: Some(256),
            },
            ..q(84, 1, KvDtype::F16)
        };
        let e = estimate(&spec, &paged).unwrap();
        let per_token_mha = 2 * 30 * 9 * 64 * 2;
        assert_eq!(e.as_if_mha_bytes, Some(per_token_mha * 256));
        assert_eq!(e.kv_bytes, 2 * 30 * 3 * 64 * 2 * 256);
    }
}

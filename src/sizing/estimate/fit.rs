//! How many sequences fit in the memory a GPU has left after its share of the weights, and
//! the most tokens one sequence can reach.
use super::{check_tp, Query};
use crate::sizing::spec::KvSpec;
use crate::units::group_digits;
use anyhow::{anyhow, Result};
use serde::Serialize;

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
    use crate::kv::KvDtype;
    use crate::sizing::estimate::Layout;
    use crate::sizing::spec::{LayerGroup, LayerKind};

    fn q(seq: u64, batch: u64, dtype: KvDtype) -> Query {
        Query {
            seq,
            batch,
            dtype,
            layout: Layout::SINGLE,
        }
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
}

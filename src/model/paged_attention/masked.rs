//! The masking oracle's attention: each query row over the keys up to its own row that the
//! view's mask ([`LayerKv::masked`]) leaves in, computed straight from the formula in f64
//! (the sinks joining the denominator). Slow and plain on purpose: token eviction's
//! compacted cache is checked against it (`tests/hf_models/evict_mask.rs`).
use crate::kv::codec::decode_row;
use crate::kv::{KvPart, LayerKv};

/// One sequence's rows: `q` `[heads, n, head_dim]`, `n` rows from row `start`, its layer of
/// the pool, and its sliding window (None: every key).
pub(super) type MaskedSeq<'a, 'kv> = (&'a [f32], (usize, usize), &'a LayerKv<'kv>, Option<usize>);

/// `[Σ n, heads · head_dim]` for every sequence's rows, as [`super::paged_attention_batch`].
pub(super) fn attend(seqs: &[MaskedSeq], heads: usize, kv_heads: usize) -> Vec<f32> {
    let g = heads / kv_heads.max(1);
    let mut out = Vec::new();
    for &(q, (n, start), kv, window) in seqs {
        let d = kv.head_dim;
        let mut row = vec![0f32; d];
        for r in 0..n {
            let pos = start + r;
            let lo = window.map_or(0, |w| (pos + 1).saturating_sub(w));
            let mut o = vec![0f32; heads * d];
            for h in 0..heads {
                let kvh = h / g;
                let qh = &q[(h * n + r) * d..][..d];
                let keys: Vec<usize> = (lo..=pos).filter(|&j| !kv.is_masked(kvh, j)).collect();
                let logits: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        decode_row(kv.dtype, kv.row(KvPart::K, kvh, j), &mut row);
                        row.iter().zip(qh).map(|(&a, &b)| a as f64 * b as f64).sum()
                    })
                    .collect();
                let sink = kv.sinks.and_then(|s| s.get(h)).map(|&x| x as f64);
                let max = logits
                    .iter()
                    .copied()
                    .chain(sink)
                    .fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
                let z = weights.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
                let mut acc = vec![0f64; d];
                for (&j, w) in keys.iter().zip(&weights) {
                    decode_row(kv.dtype, kv.row(KvPart::V, kvh, j), &mut row);
                    for (a, &v) in acc.iter_mut().zip(&row) {
                        *a += w * v as f64;
                    }
                }
                for (x, a) in o[h * d..(h + 1) * d].iter_mut().zip(acc) {
                    *x = (a / z) as f32;
                }
            }
            out.extend(o);
        }
    }
    out
}

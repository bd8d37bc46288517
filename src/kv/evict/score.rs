//! Scores of one layer's KV head, one per row held (higher: keep), for each policy. Computed
//! in f64 from the rows as stored (decoded by [`crate::kv::codec`]) and the queries the
//! forward pass logged ([`crate::kv::evict::QueryLog`]); each depends on the sequence's own
//! rows and queries only, in a fixed order, so batched == alone and chunked == one-shot hold
//! bit for bit (design rules R1, R4).
use crate::kv::codec::decode_row;
use crate::kv::{KvPart, LayerKv};

/// SnapKV's smoothing of the scores over neighbouring keys (kvpress's `kernel_size`).
pub const SNAPKV_POOL: usize = 5;

/// StreamingLLM's score: the row index, so the newest rows win (the sinks are forced).
pub fn streaming(rows: usize) -> Vec<f64> {
    (0..rows).map(|i| i as f64).collect()
}

/// KNorm's score: minus the L2 norm of each key (low-norm keys draw attention; Devoto et al.
/// 2024). The norm of a rotated dtype's row is the norm of the key (the rotation is
/// orthonormal).
pub fn knorm(view: &LayerKv, head: usize, rows: usize) -> Vec<f64> {
    let mut k = vec![0f32; view.head_dim];
    (0..rows)
        .map(|r| {
            decode_row(view.dtype, view.row(KvPart::K, head, r), &mut k);
            -k.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt()
        })
        .collect()
}

/// The random baseline's score of each row: a hash of (`seed`, `layer`, `head`, the row's
/// position `first_pos + i` before this eviction — rows evicted earlier shift it), so a
/// sequence gets the same choice alone or batched.
pub fn random(seed: u64, layer: usize, head: usize, first_pos: usize, rows: usize) -> Vec<f64> {
    (0..rows)
        .map(|i| {
            let x = splitmix64(
                seed ^ (layer as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    ^ (head as u64).rotate_left(32)
                    ^ splitmix64((first_pos + i) as u64),
            );
            (x >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect()
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// KV head `head`'s first `rows` K rows as f32, `[rows, head_dim]` (in the stored space: a
/// rotated dtype's rows stay rotated, its queries are rotated to match).
pub fn keys(view: &LayerKv, head: usize, rows: usize) -> Vec<f32> {
    let d = view.head_dim;
    let mut out = vec![0f32; rows * d];
    for (r, dst) in out.chunks_exact_mut(d).enumerate() {
        decode_row(view.dtype, view.row(KvPart::K, head, r), dst);
    }
    out
}

/// Adds to `mass` (one entry per key row) the attention probabilities of query `q`
/// (`head_dim` values, scaled by the layer's score scale and rotated like the keys) at row
/// `at`: `softmax_j(q · k_j)` over keys `0 ..= at` (causal), in f64.
pub fn add_attention(keys: &[f32], d: usize, q: &[f32], at: usize, mass: &mut [f64]) {
    let n = (at + 1).min(keys.len() / d).min(mass.len());
    let logits: Vec<f64> = keys
        .chunks_exact(d)
        .take(n)
        .map(|k| k.iter().zip(q).map(|(&a, &b)| a as f64 * b as f64).sum())
        .collect();
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return;
    }
    let exps: Vec<f64> = logits.iter().map(|&l| (l - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    for (m, e) in mass.iter_mut().zip(exps) {
        *m += e / sum;
    }
}

/// SnapKV's smoothing: the mean over a window of [`SNAPKV_POOL`] keys centred on each (a
/// 1-D average pool with zero padding, counted in the divisor as PyTorch's `avg_pool1d`).
pub fn pool_mean(x: &[f64]) -> Vec<f64> {
    let half = SNAPKV_POOL / 2;
    (0..x.len())
        .map(|i| {
            let lo = i.saturating_sub(half);
            let hi = (i + half + 1).min(x.len());
            x[lo..hi].iter().sum::<f64>() / SNAPKV_POOL as f64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probabilities sum to one per query, follow the logits, and ignore keys past the query.
    #[test]
    fn attention_mass_is_a_causal_softmax() {
        let keys = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0, 5.0, 5.0];
        let mut mass = vec![0f64; 4];
        add_attention(&keys, 2, &[1.0, 0.0], 2, &mut mass);
        let e = [1f64.exp(), 1.0, 1f64.exp()];
        let s: f64 = e.iter().sum();
        for i in 0..3 {
            assert!((mass[i] - e[i] / s).abs() < 1e-15, "{mass:?}");
        }
        assert_eq!(mass[3], 0.0);
        assert_eq!(pool_mean(&[5.0, 0.0, 0.0]), vec![1.0, 1.0, 1.0]);
        assert!(random(1, 2, 3, 4, 5) == random(1, 2, 3, 4, 5));
        assert!(random(1, 2, 3, 4, 5) != random(2, 2, 3, 4, 5));
    }
}

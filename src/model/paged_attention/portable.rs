//! The portable attention kernel ([`attend_group_portable`]): every K and V row decoded to
//! f32 one at a time and a fixed-order dot product, for CPUs and head_dims the SIMD kernels
//! do not cover (and for the forced-portable oracle runs).
use super::scratch::Scratch;
use crate::kv::codec::decode_row;
use crate::kv::{KvPart, LayerKv};

/// Width of the partial sums in [`dot`]; a multiple of the SIMD width.
const LANES: usize = 16;

/// `Σ a[i]·b[i]` with a fixed summation order (LANES partial sums, then a tree).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = a.len() / LANES;
    for c in 0..chunks {
        let (x, y) = (
            &a[c * LANES..(c + 1) * LANES],
            &b[c * LANES..(c + 1) * LANES],
        );
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0f32;
    for i in chunks * LANES..a.len() {
        tail += a[i] * b[i];
    }
    acc.iter().sum::<f32>() + tail
}

/// Portable version of [`super::attend_group`]: rows decoded to f32 one at a time, keys
/// `lo .. end`.
pub(super) fn attend_group_portable(
    q: &[f32],
    g: usize,
    kv: &LayerKv,
    head: usize,
    (lo, end): (usize, usize),
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    let d = kv.head_dim;
    let len = end - lo;
    let Scratch {
        scores, row, inv, ..
    } = scratch;
    row.resize(d, 0.0);
    scores.clear();
    scores.resize(g * len, 0.0);
    let mut keys = kv.rows(KvPart::K, head);
    keys.skip(lo);
    for j in 0..len {
        decode_row(kv.dtype, keys.next_row(), row);
        for h in 0..g {
            scores[h * len + j] = dot(&q[h * d..][..d], row);
        }
    }
    inv.clear();
    inv.resize(g, 0.0);
    for (h, s) in scores.chunks_exact_mut(len).enumerate() {
        let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for x in s.iter_mut() {
            *x = (*x - max).exp();
            sum += *x;
        }
        inv[h] = 1.0 / sum;
    }
    out[..g * d].fill(0.0);
    let mut values = kv.rows(KvPart::V, head);
    values.skip(lo);
    for j in 0..len {
        decode_row(kv.dtype, values.next_row(), row);
        for h in 0..g {
            let w = scores[h * len + j] * inv[h];
            for (o, &x) in out[h * d..][..d].iter_mut().zip(row.iter()) {
                *o += w * x;
            }
        }
    }
}

/// Portable [`super::scan_masked`]: the scores of keys `0 .. lo`, computed and dropped.
pub(super) fn scan_portable(
    q: &[f32],
    g: usize,
    kv: &LayerKv,
    head: usize,
    lo: usize,
    row: &mut Vec<f32>,
) {
    let d = kv.head_dim;
    row.resize(d, 0.0);
    let mut keys = kv.rows(KvPart::K, head);
    let mut total = 0f32;
    for _ in 0..lo {
        decode_row(kv.dtype, keys.next_row(), row);
        for h in 0..g {
            total += dot(&q[h * d..][..d], row);
        }
    }
    std::hint::black_box(total);
}

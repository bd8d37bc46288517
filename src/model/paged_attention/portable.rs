//! The portable attention kernel ([`attend_group_portable`]): every K and V row decoded to
//! f32 one at a time, for CPUs and head_dims the SIMD kernels do not cover and for the
//! forced-portable oracle runs (`NANOLLM_PORTABLE_KERNELS=1`).
//!
//! It computes the AVX2 kernel's (`kernels::attention::avx2::attend_group`) bits, step for
//! step: each score one fused-multiply-add chain per lane over the eight-value chunks of
//! head_dim, then `fold8`'s lane order; per 256-key range (absolute positions) the range's
//! maximum, `exp(s − max)` with the kernels' own exp, the numerators' sum over eight lanes
//! folded the same way, and each value lane one FMA chain over the keys in position order;
//! the ranges merged in order as `Merge` does. Quantized activations magnify any last-bit
//! difference, so the portable oracle run must give the SIMD run's logits exactly.
use super::scratch::{Buffers, Scratch};
use crate::kernels::attention::sink::sink_scales;
use crate::kernels::rowwise::glu::exp1_in_range;
use crate::kv::codec::decode_row;
use crate::kv::{KvPart, LayerKv};

/// Lanes of the SIMD kernel's accumulators.
const LANES: usize = 8;

/// Keys per range, as the SIMD kernels' `RANGE_KEYS` (checked by a test).
pub(super) const RANGE_KEYS: usize = 256;

/// The sum of eight lanes in `fold8`'s order (`hadd`, `hadd`, then the two halves).
#[inline]
fn fold(a: [f32; LANES]) -> f32 {
    ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

/// `Σ a[i]·b[i]` as the SIMD scores pass: lane `i % 8` is one FMA chain over the chunks of
/// eight, in order, then [`fold`] (lanes past a short tail stay 0).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    for (x, y) in a.chunks(LANES).zip(b.chunks(LANES)) {
        for l in 0..x.len() {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    fold(acc)
}

/// The attention kernels' exp (`exp_neg`): the input clamped at −87.3 as `maxps(x, −87.3)`
/// (a NaN becomes −87.3), then one lane of the vector exp.
#[inline]
fn exp_neg(x: f32) -> f32 {
    exp1_in_range(if x > -87.3 { x } else { -87.3 })
}

/// One key range `j0 .. j1` (at most [`RANGE_KEYS`]) of KV head `head` for the `g` query
/// rows in `q`: per head the range's maximum, numerator sum and value sums, into `b`'s parts.
fn attend_range(
    q: &[f32],
    g: usize,
    kv: &LayerKv,
    head: usize,
    (j0, j1): (usize, usize),
    b: &mut Buffers,
) {
    let d = kv.head_dim;
    let n = j1 - j0;
    let Buffers {
        scores,
        row,
        part_max,
        part_sum,
        part_acc,
        ..
    } = b;
    row.resize(d, 0.0);
    scores.clear();
    scores.resize(g * n, 0.0);
    let mut keys = kv.rows(KvPart::K, head);
    keys.skip(j0);
    for j in 0..n {
        decode_row(kv.dtype, keys.next_row(), row);
        for h in 0..g {
            scores[h * n + j] = dot(&q[h * d..][..d], row);
        }
    }
    part_max.clear();
    part_sum.clear();
    for s in scores.chunks_exact_mut(n) {
        let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut total = [0f32; LANES];
        for (j, x) in s.iter_mut().enumerate() {
            *x = exp_neg(*x - max);
            total[j % LANES] += *x;
        }
        // The SIMD sum also adds the zero padding up to a multiple of eight.
        for j in n..n.div_ceil(LANES) * LANES {
            total[j % LANES] += 0.0;
        }
        part_max.push(max);
        part_sum.push(fold(total));
    }
    part_acc.clear();
    part_acc.resize(g * d, 0.0);
    let mut values = kv.rows(KvPart::V, head);
    values.skip(j0);
    for j in 0..n {
        decode_row(kv.dtype, values.next_row(), row);
        for h in 0..g {
            let p = scores[h * n + j];
            for (o, &x) in part_acc[h * d..][..d].iter_mut().zip(row.iter()) {
                *o = p.mul_add(x, *o);
            }
        }
    }
}

/// Fold the range in `b`'s parts into the merged state (`Merge::push_slices`, step for step).
fn merge(b: &mut Buffers, g: usize, d: usize, first: bool) {
    if first {
        b.max.clone_from(&b.part_max);
        b.sum.clone_from(&b.part_sum);
        b.acc.clone_from(&b.part_acc);
        return;
    }
    for h in 0..g {
        let m = b.max[h].max(b.part_max[h]);
        let (old, new) = (exp_neg(b.max[h] - m), exp_neg(b.part_max[h] - m));
        b.max[h] = m;
        b.sum[h] = b.sum[h] * old + b.part_sum[h] * new;
        for (a, &p) in b.acc[h * d..][..d]
            .iter_mut()
            .zip(&b.part_acc[h * d..][..d])
        {
            *a = *a * old + p * new;
        }
    }
}

/// Portable version of [`super::attend_group`]: keys `lo .. end` in [`RANGE_KEYS`] ranges by
/// absolute position (the first cut at `lo`), merged in order; the AVX2 kernel's bits.
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
    assert!(lo < end && out.len() >= g * d);
    let b = &mut scratch.portable;
    for r in lo / RANGE_KEYS..end.div_ceil(RANGE_KEYS) {
        let keys = ((r * RANGE_KEYS).max(lo), ((r + 1) * RANGE_KEYS).min(end));
        attend_range(q, g, kv, head, keys, b);
        merge(b, g, d, r == lo / RANGE_KEYS);
    }
    let sinks = kv.group_sinks(head, g);
    for (h, o) in out[..g * d].chunks_exact_mut(d).enumerate() {
        let (scale, sum) = sink_scales(b.max[h], b.sum[h], sinks.map(|s| s[h]));
        let inv = 1.0 / sum;
        for (x, &a) in o.iter_mut().zip(&b.acc[h * d..][..d]) {
            *x = a * scale * inv;
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

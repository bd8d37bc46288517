//! One decode row of attention split across threads: a decode step has a single query row,
//! so one task per KV head leaves threads idle; here its keys (score tasks) and head_dim
//! chunks (value tasks) are split instead, with the same kernels as the whole row.
use crate::kv::LayerKv;
use rayon::prelude::*;

/// Keys per score task of [`split_row`] (a multiple of 8).
const SPLIT_KEYS: usize = 256;

/// One query row (`len` keys) of every head, with its work split across threads: score tasks
/// per (KV head, range of [`SPLIT_KEYS`] keys), one softmax per head, value tasks per (KV
/// head, range of 256 keys), their sums added in position order. Each piece is the kernel [`attend_group`] runs, so the
/// result equals it bit for bit (`attend_group`). `out`: `[heads · head_dim]`.
#[allow(clippy::too_many_arguments)]
pub(super) fn split_row(
    q: &[f32],
    heads: usize,
    kv_heads: usize,
    n: usize,
    row: usize,
    len: usize,
    chunks: usize,
    kv: &LayerKv,
    out: &mut [f32],
) {
    use crate::kernels::attention_avx2 as x86;
    let d = kv.head_dim;
    let g = heads / kv_heads;
    let padded = len.div_ceil(8) * 8;
    let ranges = len.div_ceil(SPLIT_KEYS);
    let q_group = |kvh: usize| -> Vec<f32> {
        (kvh * g..(kvh + 1) * g)
            .flat_map(|h| q[(h * n + row) * d..][..d].iter().copied())
            .collect()
    };
    // Scores: [kv_heads][g][padded].
    let mut s = vec![0f32; kv_heads * g * padded];
    let parts: Vec<Vec<f32>> = (0..kv_heads * ranges)
        .into_par_iter()
        .map_init(Vec::new, |kbuf, unit| {
            let (kvh, r) = (unit / ranges, unit % ranges);
            let (j0, j1) = (r * SPLIT_KEYS, ((r + 1) * SPLIT_KEYS).min(len));
            let mut part = vec![0f32; g * SPLIT_KEYS];
            let qg = q_group(kvh);
            // SAFETY: Avx2 was detected with head_dim = 8·chunks, chunks in {4, 8, 12, 16};
            // j0 is a multiple of 8 and j1 ≤ len ≤ the table; part holds g · SPLIT_KEYS.
            unsafe {
                match chunks {
                    4 => x86::scores::<4>(&qg, g, kv, kvh, (j0, j1), kbuf, &mut part, SPLIT_KEYS),
                    8 => x86::scores::<8>(&qg, g, kv, kvh, (j0, j1), kbuf, &mut part, SPLIT_KEYS),
                    12 => x86::scores::<12>(&qg, g, kv, kvh, (j0, j1), kbuf, &mut part, SPLIT_KEYS),
                    _ => x86::scores::<16>(&qg, g, kv, kvh, (j0, j1), kbuf, &mut part, SPLIT_KEYS),
                }
            }
            part
        })
        .collect();
    for (unit, part) in parts.iter().enumerate() {
        let (kvh, r) = (unit / ranges, unit % ranges);
        let (j0, j1) = (r * SPLIT_KEYS, ((r + 1) * SPLIT_KEYS).min(len));
        for h in 0..g {
            s[(kvh * g + h) * padded + j0..][..j1 - j0]
                .copy_from_slice(&part[h * SPLIT_KEYS..][..j1 - j0]);
        }
    }
    // SAFETY: rows of `padded` (a multiple of 8 ≥ len ≥ 1) values.
    let inv: Vec<f32> = s
        .chunks_exact_mut(padded)
        .map(|r| unsafe { x86::softmax(r, len) })
        .collect();
    // Values: one task per (KV head, range of VALUE_KEYS keys), all head_dim chunks; the
    // ranges' sums are then added in position order, as attend_group adds them.
    let w = 8 * x86::VALUE_CHUNKS;
    let vranges = len.div_ceil(x86::VALUE_KEYS);
    let partials: Vec<Vec<f32>> = (0..kv_heads * vranges)
        .into_par_iter()
        .map(|unit| {
            let (kvh, r) = (unit / vranges, unit % vranges);
            let keys = (r * x86::VALUE_KEYS, ((r + 1) * x86::VALUE_KEYS).min(len));
            let probs = &s[kvh * g * padded..][..g * padded];
            let mut part = vec![0f32; g * d];
            let mut acc = vec![0f32; g * w];
            for c0 in (0..chunks).step_by(x86::VALUE_CHUNKS) {
                // SAFETY: c0 + 4 ≤ chunks; probs holds g · padded values; keys within len.
                unsafe { x86::values_heads(probs, padded, g, kv, kvh, keys, c0, &mut acc) };
                for hh in 0..g {
                    part[hh * d + 8 * c0..][..w].copy_from_slice(&acc[hh * w..][..w]);
                }
            }
            part
        })
        .collect();
    for (unit, part) in partials.iter().enumerate() {
        let (kvh, r) = (unit / vranges, unit % vranges);
        let o = &mut out[kvh * g * d..][..g * d];
        x86::add_partial(o, part, r == 0);
    }
    for (h, o) in out.chunks_exact_mut(d).enumerate() {
        for x in o.iter_mut() {
            *x *= inv[h];
        }
    }
}

//! One decode row of attention split across threads: a decode step has a single query row,
//! so one task per KV head leaves threads idle; here its keys (score tasks) and head_dim
//! chunks (value tasks) are split instead, with the same kernels as the whole row.
use crate::kv::LayerKv;
use rayon::prelude::*;

/// Keys per score task of [`split_row`] (a multiple of 8).
const SPLIT_KEYS: usize = 256;

/// One query row (`len` keys) of every head, with its work split across threads: score tasks
/// per (KV head, range of [`SPLIT_KEYS`] keys), one softmax per head, value tasks per (KV
/// head, range of head_dim chunks). Each piece is the kernel [`attend_group`] runs, so the
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
    let w = 8 * x86::VALUE_CHUNKS;
    let per_head = chunks / x86::VALUE_CHUNKS;
    let accs: Vec<Vec<f32>> = (0..kv_heads * per_head)
        .into_par_iter()
        .map(|unit| {
            let (kvh, c0) = (unit / per_head, (unit % per_head) * x86::VALUE_CHUNKS);
            let mut acc = vec![0f32; g * w];
            let probs = &s[kvh * g * padded..][..g * padded];
            // SAFETY: c0 + 4 ≤ chunks; probs holds g · padded values; len ≤ the table.
            unsafe { x86::values_heads(probs, padded, g, kv, kvh, len, c0, &mut acc) };
            acc
        })
        .collect();
    for (unit, acc) in accs.iter().enumerate() {
        let (kvh, c0) = (unit / per_head, (unit % per_head) * x86::VALUE_CHUNKS);
        for hh in 0..g {
            let h = kvh * g + hh;
            for (o, a) in out[h * d + 8 * c0..][..w]
                .iter_mut()
                .zip(&acc[hh * w..][..w])
            {
                *o = a * inv[h];
            }
        }
    }
}

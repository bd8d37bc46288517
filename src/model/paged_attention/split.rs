//! One decode row of attention split across threads: a decode step has a single query row,
//! so one task per KV head leaves threads idle; here each (KV head, range of 256 keys) is a
//! task instead, with the same kernel as the whole row, merged in the same order.
use crate::kernels::attention::avx2 as x86;
use crate::kv::LayerKv;
use rayon::prelude::*;

/// One query row (keys `lo .. len`) of every head, with its work split across threads: one task
/// per (KV head, key range of [`x86::RANGE_KEYS`]), each computing that range's part
/// ([`x86::attend_range`]), then per KV head the parts merged in position order
/// ([`x86::Merge`]) — exactly what `attend_group` does for a whole row, so the result equals
/// it bit for bit. `out`: `[heads · head_dim]`.
#[allow(clippy::too_many_arguments)]
pub(super) fn split_row(
    q: &[f32],
    heads: usize,
    kv_heads: usize,
    n: usize,
    row: usize,
    (lo, len): (usize, usize),
    chunks: usize,
    kv: &LayerKv,
    out: &mut [f32],
) {
    let d = kv.head_dim;
    let g = heads / kv_heads;
    let first = lo / x86::RANGE_KEYS;
    let ranges = len.div_ceil(x86::RANGE_KEYS) - first;
    let parts: Vec<x86::RangePart> = (0..kv_heads * ranges)
        .into_par_iter()
        .map_init(
            || (x86::Scratch::default(), Vec::new()),
            |(scratch, qg), unit| {
                let (kvh, r) = (unit / ranges, unit % ranges);
                let keys = x86::range_keys(first + r, lo, len);
                qg.clear();
                for h in kvh * g..(kvh + 1) * g {
                    qg.extend_from_slice(&q[(h * n + row) * d..][..d]);
                }
                let mut part = x86::RangePart::default();
                // SAFETY: Avx2 was detected (AVX2, FMA, F16C) with head_dim = 8·chunks,
                // chunks in {4, 8, 12, 16, 24, 32, 72}; the range is within len ≤ the table.
                unsafe { x86::attend_range_dyn(chunks, qg, g, kv, kvh, keys, scratch, &mut part) };
                part
            },
        )
        .collect();
    for (kvh, group) in parts.chunks(ranges).enumerate() {
        let mut merge = x86::Merge::new(g, d);
        for part in group {
            // SAFETY: AVX2 and FMA were detected.
            unsafe { merge.push(part) };
        }
        merge.finish(&mut out[kvh * g * d..][..g * d], kv.group_sinks(kvh, g));
    }
}

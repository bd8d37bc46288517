//! Prefill attention over a tile of consecutive query rows of one KV head, with AVX-512F:
//! the same arithmetic per row as [`crate::kernels::attention::avx2::attend_group`], so the same bits,
//! with each key and value row read and converted once for the whole tile.
//!
//! A prompt's query rows attend to nearly the same keys (row `i` to keys `0 ..= i`). One row
//! at a time, every row converts every K and V row it reads (f16 → f32) and runs its score
//! products on 8-lane vectors, 9 loads per 8 FMAs. Here the rows of a tile
//! ([`TILE_ROWS`] positions × the group's query heads) share the work:
//!
//! - **Scores**: eight keys' K rows are converted once into two-key 512-bit registers (key
//!   `2i` in the low 8 lanes, `2i + 1` in the high 8) and reused by [`SCORE_VECTORS`] query
//!   vectors at a time: per 8-value chunk of head_dim, 4 key loads and 6 query loads for 24
//!   FMAs of 16 lanes. Each lane runs the same FMA chain over the chunks as the 8-lane
//!   kernel, and each key's score is the same fixed fold of its 8 lanes
//!   ([`crate::kernels::attention::avx2::fold8`]).
//! - **Softmax**: per query vector over its own keys, by the same function.
//! - **Values**: each V row is converted once per [`VALUE_VECTORS`] query vectors; each
//!   output lane is one FMA chain over the vector's own keys in position order, from zero,
//!   as in [`crate::kernels::attention::avx512::values_512`]. A vector whose row ends before the others
//!   stops at its own last key (no zero-weight terms).
//! - Key ranges of [`RANGE_KEYS`] by absolute position and their merge are those of the
//!   one-row kernel, per row.
//!
//! So a row's output does not depend on the tile it falls in: naive (every step a full
//! prefill) and KV-cached decoding (one row at a time) stay bit-identical, tested in
//! `model::paged_attention`.
#![cfg(target_arch = "x86_64")]

use crate::kernels::attention::avx2::{fold8, key_rows, rows8, softmax, Merge, RANGE_KEYS};
use crate::kernels::attention::avx512::load_pair;
use crate::kernels::attention::values::{next_value_rows, value_rows, VALUE_CHUNKS};
use crate::kv::LayerKv;
use std::arch::x86_64::*;

/// Query rows (positions) per tile.
pub const TILE_ROWS: usize = 8;
/// Query vectors per pass of the score kernel: 6 × 4 accumulators + 4 key registers + 1
/// query register of the 32.
const SCORE_VECTORS: usize = 6;
/// Query vectors per pass of the values kernel: 12 × 2 accumulators + 2 value registers +
/// 1 weight register.
const VALUE_VECTORS: usize = 12;

/// Reusable buffers of [`attend_rows`].
#[derive(Debug, Default)]
pub struct TileScratch {
    scores: Vec<f32>,
    kbuf: Vec<f32>,
    kpair: Vec<f32>,
    acc: Vec<f32>,
    ends: Vec<usize>,
    starts: Vec<usize>,
    /// Per query vector: the range's score maximum and numerator sum.
    max: Vec<f32>,
    sum: Vec<f32>,
    merges: Vec<Merge>,
}

/// Whether this CPU runs the tile kernels (AVX-512F besides the one-row kernels' AVX2, FMA
/// and F16C, and the portable kernels not forced).
pub fn available() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
        && !crate::cpu::portable_forced()
}

/// Causal attention of `rows` consecutive query rows of one KV head's group: row `r` (at
/// position `first_len − 1 + r`) attends to keys `lo(r) .. first_len + r` of KV head `head`,
/// where `lo(r)` is 0, or with a sliding window of `W` keys `(first_len + r).saturating_sub(W)`.
///
/// - `q`: `[rows][g][8·chunks]`, scaled by 1/√head_dim and rotated (vector `r·g + h` is
///   query head `h` of the group for row `r`).
/// - `out`: `[rows][g][8·chunks]`, each row exactly what
///   [`crate::kernels::attention::avx2::attend_group`] gives it alone.
///
/// # Safety
/// [`available`] is true; `chunks` is 4, 8, 12, 16, 24, 32 or 72; `first_len ≥ 1`; `window`, if
/// any, ≥ 1; `first_len + rows − 1` within the table; `q` and `out` hold `rows · g · 8 ·
/// chunks` values.
#[allow(clippy::too_many_arguments)]
pub unsafe fn attend_rows(
    chunks: usize,
    q: &[f32],
    rows: usize,
    g: usize,
    kv: &LayerKv,
    head: usize,
    (first_len, window): (usize, Option<usize>),
    scratch: &mut TileScratch,
    out: &mut [f32],
) {
    let keys = (first_len, window);
    // SAFETY: forwarded from the caller.
    unsafe {
        match chunks {
            4 => attend_rows_nc::<4>(q, rows, g, kv, head, keys, scratch, out),
            8 => attend_rows_nc::<8>(q, rows, g, kv, head, keys, scratch, out),
            12 => attend_rows_nc::<12>(q, rows, g, kv, head, keys, scratch, out),
            16 => attend_rows_nc::<16>(q, rows, g, kv, head, keys, scratch, out),
            24 => attend_rows_nc::<24>(q, rows, g, kv, head, keys, scratch, out),
            32 => attend_rows_nc::<32>(q, rows, g, kv, head, keys, scratch, out),
            72 => attend_rows_nc::<72>(q, rows, g, kv, head, keys, scratch, out),
            _ => panic!("attend_rows: head_dim {} has no kernel", 8 * chunks),
        }
    }
}

/// [`attend_rows`] for head_dim = 8 · `NC`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn attend_rows_nc<const NC: usize>(
    q: &[f32],
    rows: usize,
    g: usize,
    kv: &LayerKv,
    head: usize,
    (first_len, window): (usize, Option<usize>),
    scratch: &mut TileScratch,
    out: &mut [f32],
) {
    let d = 8 * NC;
    assert!(rows >= 1 && first_len >= 1 && q.len() >= rows * g * d && out.len() >= rows * g * d);
    assert!(first_len + rows - 1 <= kv.capacity() && kv.head_dim == d);
    assert!(window != Some(0));
    let last_len = first_len + rows - 1;
    // Row r's keys: lo(r) .. first_len + r.
    let lo = |r: usize| window.map_or(0, |w| (first_len + r).saturating_sub(w));
    let TileScratch {
        scores,
        kbuf,
        kpair,
        acc,
        ends,
        starts,
        max,
        sum,
        merges,
    } = scratch;
    merges.resize_with(rows, Merge::default);
    for m in merges.iter_mut() {
        m.reset(g, d);
    }
    for range in lo(0) / RANGE_KEYS..last_len.div_ceil(RANGE_KEYS) {
        let j0 = range * RANGE_KEYS;
        // Row r's keys in this range: start(r) .. end(r); rows r0 .. r1 reach it (the later
        // ones have not slid past it).
        let end = |r: usize| (first_len + r).min(j0 + RANGE_KEYS);
        let start = |r: usize| lo(r).max(j0);
        let r0 = (j0 + 1).saturating_sub(first_len);
        let r1 = (0..rows)
            .rev()
            .find(|&r| lo(r) < j0 + RANGE_KEYS)
            .map_or(0, |r| r + 1);
        if r0 >= r1 {
            continue;
        }
        let (v0, nv) = (r0 * g, (r1 - r0) * g);
        // Scores of keys js .. je, shared by the rows; a row's scores start at its own key.
        let (js, je) = (start(r0), end(r1 - 1));
        let stride = (je - js).div_ceil(8) * 8 + 8;
        scores.resize(nv * stride, 0.0);
        // SAFETY: the vectors of rows r0.. are inside q; keys js .. je are within the
        // table (≤ last_len); scores holds nv rows of `stride ≥ je − js`.
        unsafe {
            scores_tile::<NC>(
                &q[v0 * d..],
                nv,
                kv,
                head,
                (js, je),
                kbuf,
                kpair,
                scores,
                stride,
            )
        };
        ends.clear();
        starts.clear();
        max.clear();
        sum.clear();
        for (a, s) in scores.chunks_exact_mut(stride).enumerate() {
            let r = r0 + a / g;
            let (b, e) = (start(r), end(r));
            let n = e - b;
            let at = b - js;
            // SAFETY: n ≥ 1 (row r reaches the range); at + n rounded up to 8 ≤ stride.
            let (m, l) = unsafe { softmax(&mut s[at..at + n.div_ceil(8) * 8], n) };
            max.push(m);
            sum.push(l);
            ends.push(e);
            starts.push(b);
        }
        acc.resize(nv * d, 0.0);
        for c0 in (0..NC).step_by(VALUE_CHUNKS) {
            let mut v = 0;
            while v < nv {
                let n = (nv - v).min(VALUE_VECTORS);
                let p = &scores[v * stride..];
                let k = (&starts[v..v + n], &ends[v..v + n], js);
                let o = &mut acc[v * d..];
                // SAFETY: chunks c0 .. c0 + 4 inside head_dim; each vector's keys within
                // the table; p holds n rows of `stride`, o n rows of d.
                unsafe {
                    match n {
                        1 => values_pass::<1>(p, stride, k, kv, head, c0, d, o),
                        2 => values_pass::<2>(p, stride, k, kv, head, c0, d, o),
                        3 => values_pass::<3>(p, stride, k, kv, head, c0, d, o),
                        4 => values_pass::<4>(p, stride, k, kv, head, c0, d, o),
                        5 => values_pass::<5>(p, stride, k, kv, head, c0, d, o),
                        6 => values_pass::<6>(p, stride, k, kv, head, c0, d, o),
                        7 => values_pass::<7>(p, stride, k, kv, head, c0, d, o),
                        8 => values_pass::<8>(p, stride, k, kv, head, c0, d, o),
                        9 => values_pass::<9>(p, stride, k, kv, head, c0, d, o),
                        10 => values_pass::<10>(p, stride, k, kv, head, c0, d, o),
                        11 => values_pass::<11>(p, stride, k, kv, head, c0, d, o),
                        _ => values_pass::<12>(p, stride, k, kv, head, c0, d, o),
                    }
                }
                v += n;
            }
        }
        // Per row, this range's part, merged after its earlier ranges (as attend_group).
        for (i, merge) in merges[r0..r1].iter_mut().enumerate() {
            let a = i * g;
            // SAFETY: AVX2 and FMA (this function's features); g, g and g·d values.
            unsafe { merge.push_slices(&max[a..a + g], &sum[a..a + g], &acc[a * d..(a + g) * d]) };
        }
    }
    for (r, m) in merges.iter().take(rows).enumerate() {
        m.finish(
            &mut out[r * g * d..(r + 1) * g * d],
            kv.group_sinks(head, g),
        );
    }
}

/// Scores `q_v · k_j` of the `nv` query vectors in `q` (`[nv][8·NC]`) for keys `j0 .. j1`
/// of KV head `head`, into `out[v · stride + (j − j0)]`: the bits of
/// [`crate::kernels::attention::avx2::scores`] for each vector.
///
/// # Safety
/// AVX-512F, AVX2, FMA, F16C; `j1` within the table; `q` holds `nv · 8·NC` values; `out`
/// `nv · stride` with `stride ≥ j1 − j0`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_tile<const NC: usize>(
    q: &[f32],
    nv: usize,
    kv: &LayerKv,
    head: usize,
    (j0, j1): (usize, usize),
    kbuf: &mut Vec<f32>,
    kpair: &mut Vec<f32>,
    out: &mut [f32],
    stride: usize,
) {
    let d = 8 * NC;
    assert!(q.len() >= nv * d && out.len() >= nv * stride && j1 - j0 <= stride);
    kbuf.resize(8 * d, 0.0);
    kpair.resize(8 * d, 0.0);
    let (mut rows, mut ahead) = key_rows(kv, head, j0);
    let mut j = j0;
    while j < j1 {
        let keys = (j1 - j).min(8);
        // SAFETY: AVX-512F seen by the caller; d = 8·NC; the keys are within the table.
        let krows = unsafe { rows8::<NC>(true, kv, &mut rows, &mut ahead, keys, kbuf) };
        // Keys 2i and 2i + 1 side by side per chunk: kpair[(c·4 + i)·16 ..][..16].
        for i in 0..4 {
            for c in 0..NC {
                let half = |t: usize| {
                    if t < keys {
                        // SAFETY: row t holds d = 8·NC values; c < NC.
                        unsafe { _mm256_loadu_ps(krows[t].add(8 * c)) }
                    } else {
                        _mm256_setzero_ps()
                    }
                };
                let both = _mm512_insertf64x4::<1>(
                    _mm512_castpd256_pd512(_mm256_castps_pd(half(2 * i))),
                    _mm256_castps_pd(half(2 * i + 1)),
                );
                // SAFETY: (c·4 + i)·16 + 16 ≤ 64·NC = kpair.len().
                unsafe {
                    _mm512_storeu_ps(
                        kpair.as_mut_ptr().add((c * 4 + i) * 16),
                        _mm512_castpd_ps(both),
                    )
                };
            }
        }
        let mut v = 0;
        while v < nv {
            let n = (nv - v).min(SCORE_VECTORS);
            let (qv, o) = (&q[v * d..], &mut out[v * stride + (j - j0)..]);
            // SAFETY: n vectors of d values in qv; o holds n rows of `stride` from key j.
            unsafe {
                match n {
                    1 => scores_pass::<NC, 1>(qv, kpair, keys, o, stride),
                    2 => scores_pass::<NC, 2>(qv, kpair, keys, o, stride),
                    3 => scores_pass::<NC, 3>(qv, kpair, keys, o, stride),
                    4 => scores_pass::<NC, 4>(qv, kpair, keys, o, stride),
                    5 => scores_pass::<NC, 5>(qv, kpair, keys, o, stride),
                    _ => scores_pass::<NC, 6>(qv, kpair, keys, o, stride),
                }
            }
            v += n;
        }
        j += keys;
    }
}

/// `N` query vectors against the 8 keys in `kpair`: per vector, 4 two-key accumulators,
/// each lane one FMA chain over the 8-value chunks of head_dim in order (from zero), then
/// [`fold8`] of the 8 keys' halves; the first `keys` scores into `out[v · stride ..]`.
///
/// # Safety
/// AVX-512F, AVX2; `q` holds `N · 8·NC` values, `kpair` `64·NC`; `out` holds `(N − 1) ·
/// stride + keys` values.
#[inline(never)]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn scores_pass<const NC: usize, const N: usize>(
    q: &[f32],
    kpair: &[f32],
    keys: usize,
    out: &mut [f32],
    stride: usize,
) {
    let d = 8 * NC;
    assert!(q.len() >= N * d && kpair.len() >= 64 * NC && out.len() >= (N - 1) * stride + keys);
    let mut acc = [[_mm512_setzero_ps(); 4]; N];
    for c in 0..NC {
        // SAFETY: (c·4 + i)·16 + 16 ≤ kpair.len().
        let k: [__m512; 4] = std::array::from_fn(|i| unsafe {
            _mm512_loadu_ps(kpair.as_ptr().add((c * 4 + i) * 16))
        });
        for (v, a) in acc.iter_mut().enumerate() {
            // SAFETY: chunk c of vector v: 8 values inside q; the same 8 in both halves.
            let qc = unsafe {
                _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(
                    q.as_ptr().add(v * d + 8 * c) as *const f64,
                )))
            };
            for (x, kk) in a.iter_mut().zip(&k) {
                *x = _mm512_fmadd_ps(qc, *kk, *x);
            }
        }
    }
    for (v, a) in acc.iter().enumerate() {
        let lo = |x: __m512| _mm512_castps512_ps256(x);
        let hi = |x: __m512| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x)));
        let halves = [
            lo(a[0]),
            hi(a[0]),
            lo(a[1]),
            hi(a[1]),
            lo(a[2]),
            hi(a[2]),
            lo(a[3]),
            hi(a[3]),
        ];
        let sums = fold8(halves);
        let mut lanes = [0f32; 8];
        // SAFETY: 8 writable f32.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sums) };
        out[v * stride..][..keys].copy_from_slice(&lanes[..keys]);
    }
}

/// `Σ_j p[v][j] · V_j` for `N` query vectors over their own keys `starts[v] .. ends[v]` of
/// KV head `head` (`probs[v · stride + (j − js)]`), on head_dim chunks `c0 .. c0 + 4` (two
/// 16-lane pairs): `out[v · d + 8·c0 ..]`, unnormalized. Each lane is one FMA chain over the
/// vector's keys in position order, from zero: the bits of
/// [`crate::kernels::attention::avx512::values_512`] for that vector.
///
/// # Safety
/// AVX-512F; `js ≤ starts[v] < ends[v]`, every `ends[v]` within the table; the four
/// chunks from `c0` on inside head_dim `d`; `probs` holds `N` rows of `stride ≥ ends[v] −
/// js`; `out` holds `N · d` values.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn values_pass<const N: usize>(
    probs: &[f32],
    stride: usize,
    (starts, ends, js): (&[usize], &[usize], usize),
    kv: &LayerKv,
    head: usize,
    c0: usize,
    d: usize,
    out: &mut [f32],
) {
    assert!(ends.len() == N && starts.len() == N);
    assert!(probs.len() >= (N - 1) * stride && out.len() >= N * d);
    assert!(8 * (c0 + VALUE_CHUNKS) <= d && kv.head_dim == d);
    let first = starts.iter().copied().min().unwrap_or(js);
    let common = (
        starts.iter().copied().max().unwrap_or(js),
        ends.iter().copied().min().unwrap_or(js),
    );
    let last = ends.iter().copied().max().unwrap_or(js);
    assert!(first >= js && last <= kv.capacity() && last - js <= stride);
    let mut acc = [[_mm512_setzero_ps(); 2]; N];
    let (mut rows, mut ahead, bytes) = value_rows(kv, head, first, c0);
    let mut j = first;
    while j < last {
        let keys = (last - j).min(8);
        let src = next_value_rows(kv, &mut rows, &mut ahead, keys, bytes);
        for (t, &row) in src.iter().enumerate().take(keys) {
            let (key, at) = (j + t, j + t - js);
            // SAFETY: chunks c0 .. c0 + 4 are inside the row (asserted above).
            let v = unsafe {
                [
                    load_pair(kv.dtype, row, c0),
                    load_pair(kv.dtype, row, c0 + 2),
                ]
            };
            let every = key >= common.0 && key < common.1;
            for (i, a) in acc.iter_mut().enumerate() {
                if !every && (key < starts[i] || key >= ends[i]) {
                    continue;
                }
                let p = _mm512_set1_ps(probs[i * stride + at]);
                a[0] = _mm512_fmadd_ps(p, v[0], a[0]);
                a[1] = _mm512_fmadd_ps(p, v[1], a[1]);
            }
        }
        j += keys;
    }
    for (i, a) in acc.iter().enumerate() {
        for (h, x) in a.iter().enumerate() {
            // SAFETY: out holds N rows of d values; 8·c0 + 16·h + 16 ≤ d.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(i * d + 8 * c0 + 16 * h), *x) };
        }
    }
}

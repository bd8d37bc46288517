//! AVX2 + FMA kernels for causal attention over the paged KV cache (see `model::paged_attention`).
//!
//! For the query rows `q_h` of one KV head's group (`head_dim` values each, already scaled by
//! 1/√head_dim) and that head's keys and values `0 .. len`: scores `s_j = q_h·k_j`,
//! `p_j = exp(s_j − max s)`, output `Σ p_j v_j / Σ p_j` (softmax(QKᵀ)V, Vaswani et al. 2017).
//! Each K and V row is read from the pool once for all the group's query heads (GQA,
//! Ainslie et al. 2023), and rows stored as f16, bf16, q8_0, q4_0 or iq4_nl are
//! dequantized here.
//!
//! Three pieces, so that one decode row can be split across threads without changing a bit:
//! [`scores`] for a range of keys (eight at a time), [`softmax`] of one head's scores, and
//! [`values`](crate::kernels::attention::values::values) for a few query heads and a range of head_dim chunks over all keys (the
//! accumulators stay in registers; each output lane is one FMA chain over the keys in
//! position order). [`attend_group`] runs them one after another for one KV-head group.
//!
//! Every key's dot product is one FMA chain over the eight-lane chunks of head_dim, in
//! order, then a fixed lane fold; keys are taken eight at a time only to run eight chains
//! side by side; values accumulate key by key in position order. The result for a query row
//! therefore depends on its position alone, never on how many rows are computed together or
//! where blocks start: naive and KV-cached decode stay bit-identical at every block size.
#![cfg(target_arch = "x86_64")]

use crate::kernels::attention::avx512::f16_rows_512;
use crate::kernels::attention::avx512::values_512;
use crate::kernels::attention::exp::exp_neg;
pub use crate::kernels::attention::merge::{Merge, RangePart};
use crate::kernels::attention::values::{self, codebook, q4_chunk, wide_registers};
use crate::kernels::attention::values::{PREFETCH_ROWS, VALUE_CHUNKS, VALUE_HEADS};
use crate::kv::RowCursor;
use crate::kv::{KvDtype, KvPart, LayerKv};
use std::arch::x86_64::*;

/// Lane k of the result = sum of the eight lanes of `s[k]`, always folded in the same order.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn fold8(s: [__m256; 8]) -> __m256 {
    let h01 = _mm256_hadd_ps(s[0], s[1]);
    let h23 = _mm256_hadd_ps(s[2], s[3]);
    let h45 = _mm256_hadd_ps(s[4], s[5]);
    let h67 = _mm256_hadd_ps(s[6], s[7]);
    let h0123 = _mm256_hadd_ps(h01, h23);
    let h4567 = _mm256_hadd_ps(h45, h67);
    let lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
    let hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
    _mm256_add_ps(lo, hi)
}

/// Keys per range (by absolute position: 0..256, 256..512, ...). Each range's softmax
/// numerators use the range's own maximum, its value sums are kept apart, and the ranges
/// are merged in position order ([`Merge`]), the same way whether a row runs whole or split
/// across threads, and whatever the block size. A row of at most 256 keys is one range: one
/// plain softmax.
pub const RANGE_KEYS: usize = 256;

/// One key range `j0 .. j1` (`j0` a multiple of [`RANGE_KEYS`], at most that many keys) of
/// KV head `head` for the `g` query rows in `q` (`[g][8·NC]`): scores, the range's softmax
/// numerators and value sums, into `part`.
///
/// # Safety
/// AVX2, FMA and F16C; `j1` within the table; `NC` in {4, 8, 12, 16, 24, 32, 72}.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn attend_range<const NC: usize>(
    q: &[f32],
    g: usize,
    kv: &LayerKv,
    head: usize,
    (j0, j1): (usize, usize),
    scratch: &mut Scratch,
    part: &mut RangePart,
) {
    let d = 8 * NC;
    let n = j1 - j0;
    assert!((1..=RANGE_KEYS).contains(&n));
    let padded = n.div_ceil(8) * 8;
    let Scratch {
        scores: s,
        kbuf,
        acc,
        ..
    } = scratch;
    s.clear();
    s.resize(g * padded, 0.0);
    // SAFETY: forwarded from the caller; `s` holds g · padded values, padded ≥ j1 − j0.
    unsafe { scores::<NC>(q, g, kv, head, (j0, j1), kbuf, s, padded) };
    part.max.clear();
    part.sum.clear();
    for row in s.chunks_exact_mut(padded) {
        // SAFETY: padded is a multiple of 8, ≥ n ≥ 1.
        let (m, l) = unsafe { softmax(row, n) };
        part.max.push(m);
        part.sum.push(l);
    }
    let w = 8 * VALUE_CHUNKS;
    acc.resize(g * w, 0.0);
    part.acc.resize(g * d, 0.0);
    // Only the chunks the output needs (an MLA latent's first kv_lora_rank values); the
    // others stay 0.
    let needed = kv.value_dim.div_ceil(8 * VALUE_CHUNKS) * VALUE_CHUNKS;
    if needed < NC {
        for h in 0..g {
            part.acc[h * d + 8 * needed..(h + 1) * d].fill(0.0);
        }
    }
    for c0 in (0..NC.min(needed)).step_by(VALUE_CHUNKS) {
        // SAFETY: c0 + 4 ≤ NC (NC a multiple of 4); probs relative to j0, stride padded.
        unsafe { values_heads(s, padded, g, kv, head, (j0, j1), c0, acc) };
        for h in 0..g {
            part.acc[h * d + 8 * c0..][..w].copy_from_slice(&acc[h * w..][..w]);
        }
    }
}

/// Reusable buffers of [`attend_group`].
#[derive(Debug, Default)]
pub struct Scratch {
    scores: Vec<f32>,
    kbuf: Vec<f32>,
    acc: Vec<f32>,
    part: RangePart,
    merge: Merge,
}

/// Dequantize the next `keys` rows (`keys ≤ 8`) of `rows` into `buf` (`[8][d]`) unless they
/// are f32, and return f32 pointers to each row; prefetch the rows `ahead` names (a cursor
/// [`PREFETCH_ROWS`] positions further on).
///
/// # Safety
/// AVX2, FMA and F16C; `d = 8·NC` with `NC` a multiple of 4 (whole q8_0 blocks); the rows
/// exist (attention checked the length against the table).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rows8<const NC: usize>(
    wide: bool,
    kv: &LayerKv,
    rows: &mut RowCursor,
    ahead: &mut RowCursor,
    keys: usize,
    buf: &mut [f32],
) -> [*const f32; 8] {
    let d = 8 * NC;
    let (prefetch, dtype, row_bytes) = (kv.prefetch, kv.dtype, kv.row_bytes());
    // A block holds only block_size rows of one head contiguously (4 KiB for 16 f32 rows of
    // 64 values): too short for the hardware prefetcher, so fetch ahead by hand.
    let mut next = [std::ptr::null::<u8>(); 8];
    if prefetch && ahead.next_group(keys, &mut next) {
        for p in next.iter().take(keys) {
            let mut line = 0;
            while line < row_bytes {
                // SAFETY: `line` is inside the row.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(line) as *const i8) };
                line += 64;
            }
        }
    }
    let mut src = [std::ptr::null::<u8>(); 8];
    let found = rows.next_group(keys, &mut src);
    assert!(found, "attention read past the block table");
    let mut ptrs = [std::ptr::null::<f32>(); 8];
    if wide && dtype == KvDtype::F16 {
        // SAFETY: the caller saw AVX-512F (`wide`); each row holds 2·d bytes, buf 8·d values.
        unsafe { f16_rows_512(&src, keys, d, buf.as_mut_ptr()) };
        for (t, p) in ptrs.iter_mut().enumerate().take(keys) {
            // SAFETY: row t of buf.
            *p = unsafe { buf.as_ptr().add(t * d) };
        }
        return ptrs;
    }
    for (t, p) in ptrs.iter_mut().enumerate().take(keys) {
        let src = src[t];
        // SAFETY: t < keys ≤ 8 rows of d values inside `buf` (8 · d long).
        let dst = unsafe { buf.as_mut_ptr().add(t * d) };
        // SAFETY: a row holds `row_bytes` bytes for head_dim = 8·NC values in its dtype
        // (4·d, 2·d, 34·d/32 or 18·d/32 bytes); `buf` holds 8·d values.
        unsafe {
            match dtype {
                KvDtype::F32 => {
                    *p = src as *const f32;
                    continue;
                }
                KvDtype::F16 => {
                    for c in 0..NC {
                        let h = _mm_loadu_si128(src.add(16 * c) as *const __m128i);
                        _mm256_storeu_ps(dst.add(8 * c), _mm256_cvtph_ps(h));
                    }
                }
                KvDtype::Bf16 => {
                    for c in 0..NC {
                        let h = _mm_loadu_si128(src.add(16 * c) as *const __m128i);
                        let w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
                        _mm256_storeu_ps(dst.add(8 * c), _mm256_castsi256_ps(w));
                    }
                }
                KvDtype::Q4_0 | KvDtype::Iq4Nl | KvDtype::Q4_0R | KvDtype::Iq4NlR => {
                    // 4-bit: per 32 values an f16 scale then 16 bytes of nibbles.
                    let book = codebook(dtype);
                    for b in 0..NC / 4 {
                        for k in 0..4 {
                            let v = q4_chunk(book, src.add(18 * b), k);
                            _mm256_storeu_ps(dst.add(8 * (4 * b + k)), v);
                        }
                    }
                }
                _ => {
                    // q8_0: per 32 values an f16 scale then 32 int8; value = q · scale.
                    for b in 0..NC / 4 {
                        let blk = src.add(34 * b);
                        // F16C, not `half`: in a portable build `half` converts through
                        // a feature check and a call.
                        let bits = _mm_set1_epi16(i16::from_le_bytes([*blk, *blk.add(1)]));
                        let scale = _mm256_cvtph_ps(bits);
                        for k in 0..4 {
                            let q = _mm_loadl_epi64(blk.add(2 + 8 * k) as *const __m128i);
                            let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
                            _mm256_storeu_ps(dst.add(8 * (4 * b + k)), _mm256_mul_ps(f, scale));
                        }
                    }
                }
            }
        }
        *p = dst;
    }
    ptrs
}

/// Scores `q_h · k_j` of the `g` query rows in `q` (`[g][8·NC]`) for keys `j0 .. j1` of KV
/// head `head`, into `out[h · stride + (j − j0)]`.
///
/// # Safety
/// AVX2, FMA and F16C; `j1` within the table; `out` holds `g · stride` values with
/// `stride ≥ j1 − j0`; `NC` in {4, 8, 12, 16, 24, 32, 72}.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn scores<const NC: usize>(
    q: &[f32],
    g: usize,
    kv: &LayerKv,
    head: usize,
    (j0, j1): (usize, usize),
    kbuf: &mut Vec<f32>,
    out: &mut [f32],
    stride: usize,
) {
    let d = 8 * NC;
    assert!(
        q.len() >= g * d && j1 <= kv.capacity() && out.len() >= g * stride && j1 - j0 <= stride
    );
    kbuf.resize(8 * d, 0.0);
    // SAFETY (loads below): row pointers come from `rows8` (d values each); query chunks
    // c < NC of rows h < g.
    // SAFETY: see above.
    let load = |p: *const f32, at: usize| unsafe { _mm256_loadu_ps(p.add(at)) };
    let (mut rows, mut ahead) = key_rows(kv, head, j0);
    // The V rows of the same keys, asked for (into L2) while the scores are computed: the
    // values pass comes after the softmax, by when they have arrived.
    let mut values_ahead = kv.rows(KvPart::V, head);
    values_ahead.skip(j0);
    let wide = wide_registers();
    let mut j = j0;
    while j < j1 {
        let keys = (j1 - j).min(8);
        // SAFETY: AVX2, FMA and F16C (this fn's contract); keys ≤ 8 rows from j < j1.
        let krows = unsafe { rows8::<NC>(wide, kv, &mut rows, &mut ahead, keys, kbuf) };
        let mut vrows = [std::ptr::null::<u8>(); 8];
        if kv.prefetch && values_ahead.next_group(keys, &mut vrows) {
            for p in vrows.iter().take(keys) {
                let mut line = 0;
                while line < kv.row_bytes() {
                    // SAFETY: a prefetch never faults; `line` is inside the row anyway.
                    unsafe { _mm_prefetch::<_MM_HINT_T1>(p.add(line) as *const i8) };
                    line += 64;
                }
            }
        }
        // Many query heads over long rows (MLA's absorbed MQA: 16 or 128 heads of 576):
        // two heads at a time over four keys, so each key chunk is loaded once for both —
        // each (head, key) still one FMA chain over the chunks in order, folded by fold8:
        // the same bits as one head at a time.
        let mut h = 0;
        if keys == 8 && NC >= PAIRED_SCORES_MIN_CHUNKS {
            while h + 2 <= g {
                // SAFETY: AVX2 and FMA (this fn's contract); heads h, h + 1 < g; 8 key rows.
                let (s0, s1) = unsafe { scores_pair::<NC>(q, d, h, &krows) };
                out[h * stride + j - j0..][..8].copy_from_slice(&s0);
                out[(h + 1) * stride + j - j0..][..8].copy_from_slice(&s1);
                h += 2;
            }
        }
        for h in h..g {
            // SAFETY: h < g rows of d values in q.
            let qh = unsafe { q.as_ptr().add(h * d) };
            let mut acc = [_mm256_setzero_ps(); 8];
            for c in 0..NC {
                let qc = load(qh, 8 * c);
                for (t, a) in acc.iter_mut().enumerate().take(keys) {
                    *a = _mm256_fmadd_ps(qc, load(krows[t], 8 * c), *a);
                }
            }
            let sums = fold8(acc);
            let mut lanes = [0f32; 8];
            // SAFETY: `lanes` holds 8 f32.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sums) };
            out[h * stride + j - j0..][..keys].copy_from_slice(&lanes[..keys]);
        }
        j += keys;
    }
}

/// head_dim chunks from which [`scores`] takes query heads in pairs (576-value MLA latents;
/// shorter heads keep the one-head loop they were tuned with).
const PAIRED_SCORES_MIN_CHUNKS: usize = 64;

/// The scores of query heads `h` and `h + 1` (rows of `d` values in `q`) for the 8 keys in
/// `krows` (f32 rows of `d`): per (head, key) one FMA chain over the chunks in order, folded
/// by [`fold8`], as [`scores`]' one-head loop computes it. Two halves of four keys keep the
/// 8 accumulators, 4 key chunks and 2 query chunks in 16 registers.
///
/// # Safety
/// AVX2 and FMA; `q` holds rows `h + 1 < g` of `d = 8·NC` values; the 8 pointers are rows of
/// `d` values.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn scores_pair<const NC: usize>(
    q: &[f32],
    d: usize,
    h: usize,
    krows: &[*const f32; 8],
) -> ([f32; 8], [f32; 8]) {
    assert!(q.len() >= (h + 2) * d);
    let (q0, q1) = (q[h * d..].as_ptr(), q[(h + 1) * d..].as_ptr());
    let mut all0 = [_mm256_setzero_ps(); 8];
    let mut all1 = [_mm256_setzero_ps(); 8];
    for half in 0..2 {
        let k = &krows[4 * half..4 * half + 4];
        let mut a0 = [_mm256_setzero_ps(); 4];
        let mut a1 = [_mm256_setzero_ps(); 4];
        for c in 0..NC {
            // SAFETY: chunk c < NC of rows of d = 8·NC values (the contract).
            unsafe {
                let x0 = _mm256_loadu_ps(q0.add(8 * c));
                let x1 = _mm256_loadu_ps(q1.add(8 * c));
                for t in 0..4 {
                    let kc = _mm256_loadu_ps(k[t].add(8 * c));
                    a0[t] = _mm256_fmadd_ps(x0, kc, a0[t]);
                    a1[t] = _mm256_fmadd_ps(x1, kc, a1[t]);
                }
            }
        }
        all0[4 * half..4 * half + 4].copy_from_slice(&a0);
        all1[4 * half..4 * half + 4].copy_from_slice(&a1);
    }
    let (mut s0, mut s1) = ([0f32; 8], [0f32; 8]);
    // SAFETY: each array holds 8 f32.
    unsafe {
        _mm256_storeu_ps(s0.as_mut_ptr(), fold8(all0));
        _mm256_storeu_ps(s1.as_mut_ptr(), fold8(all1));
    }
    (s0, s1)
}

/// The K-row walk of a scores pass over keys `j0 ..` of KV head `head`: the rows, and a
/// cursor [`PREFETCH_ROWS`] ahead (shared with [`crate::kernels::attention::prefill_tile`]).
pub(crate) fn key_rows<'k, 'a>(
    kv: &'k LayerKv<'a>,
    head: usize,
    j0: usize,
) -> (RowCursor<'k, 'a>, RowCursor<'k, 'a>) {
    let mut rows = kv.rows(KvPart::K, head);
    rows.skip(j0);
    let mut ahead = kv.rows(KvPart::K, head);
    ahead.skip(j0 + PREFETCH_ROWS);
    (rows, ahead)
}

/// Softmax numerators of one head over one key range, in place: `s` holds `len` scores and
/// zero padding up to a multiple of 8; each becomes `exp(s − max)` (padding 0). Returns
/// `(max, Σ)`.
///
/// # Safety
/// AVX2 and FMA; `s.len()` is a multiple of 8 and ≥ `len` ≥ 1.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn softmax(s: &mut [f32], len: usize) -> (f32, f32) {
    assert!(s.len().is_multiple_of(8) && s.len() >= len && len >= 1);
    // SAFETY: chunks of exactly 8 values.
    let load = |chunk: &[f32]| unsafe { _mm256_loadu_ps(chunk.as_ptr()) };
    let max = s[..len].iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for chunk in s.chunks_exact_mut(8) {
        let e = exp_neg(_mm256_sub_ps(load(chunk), _mm256_set1_ps(max)));
        // SAFETY: `chunk` holds 8 f32.
        unsafe { _mm256_storeu_ps(chunk.as_mut_ptr(), e) };
    }
    // Padding lanes are not keys.
    for x in &mut s[len..] {
        *x = 0.0;
    }
    let mut total = _mm256_setzero_ps();
    for chunk in s.chunks_exact(8) {
        total = _mm256_add_ps(total, load(chunk));
    }
    let zero = _mm256_setzero_ps();
    let sum = _mm256_cvtss_f32(fold8([total, zero, zero, zero, zero, zero, zero, zero]));
    (max, sum)
}

/// Keys of range `r` (absolute positions `r · RANGE_KEYS ..`) for a row attending to keys
/// `lo .. len`: the range cut at both ends.
pub fn range_keys(r: usize, lo: usize, len: usize) -> (usize, usize) {
    ((r * RANGE_KEYS).max(lo), ((r + 1) * RANGE_KEYS).min(len))
}

/// [`attend_range`] for head_dim = 8 · `chunks` (the one place the const parameter is chosen).
///
/// # Safety
/// As [`attend_range`]; `chunks` is 4, 8, 12, 16, 24, 32 or 72.
#[allow(clippy::too_many_arguments)]
pub unsafe fn attend_range_dyn(
    chunks: usize,
    q: &[f32],
    g: usize,
    kv: &LayerKv,
    head: usize,
    keys: (usize, usize),
    scratch: &mut Scratch,
    part: &mut RangePart,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match chunks {
            4 => attend_range::<4>(q, g, kv, head, keys, scratch, part),
            8 => attend_range::<8>(q, g, kv, head, keys, scratch, part),
            12 => attend_range::<12>(q, g, kv, head, keys, scratch, part),
            16 => attend_range::<16>(q, g, kv, head, keys, scratch, part),
            24 => attend_range::<24>(q, g, kv, head, keys, scratch, part),
            32 => attend_range::<32>(q, g, kv, head, keys, scratch, part),
            72 => attend_range::<72>(q, g, kv, head, keys, scratch, part),
            _ => panic!(
                "attend_range_dyn: head_dim {} has no AVX2 kernel",
                8 * chunks
            ),
        }
    }
}

/// Scores of keys `j0 .. j1` for the `g` query rows in `q`, computed and dropped: what a
/// full cache scanned with a sliding-window mask spends on the keys outside the window
/// (`--swa-full`, as llama.cpp computes every cell's score before masking). One
/// [`RANGE_KEYS`] range at a time.
///
/// # Safety
/// As [`attend_range`]; `chunks` is 4, 8, 12, 16, 24, 32 or 72.
#[allow(clippy::too_many_arguments)]
pub unsafe fn scan_scores(
    chunks: usize,
    q: &[f32],
    g: usize,
    kv: &LayerKv,
    head: usize,
    (j0, j1): (usize, usize),
    scratch: &mut Scratch,
) {
    let Scratch {
        scores: s, kbuf, ..
    } = scratch;
    s.resize(g * RANGE_KEYS, 0.0);
    let mut j = j0;
    while j < j1 {
        let keys = (j, (j + RANGE_KEYS).min(j1));
        // SAFETY: forwarded from the caller; `s` holds g rows of RANGE_KEYS.
        unsafe {
            match chunks {
                4 => scores::<4>(q, g, kv, head, keys, kbuf, s, RANGE_KEYS),
                8 => scores::<8>(q, g, kv, head, keys, kbuf, s, RANGE_KEYS),
                12 => scores::<12>(q, g, kv, head, keys, kbuf, s, RANGE_KEYS),
                16 => scores::<16>(q, g, kv, head, keys, kbuf, s, RANGE_KEYS),
                24 => scores::<24>(q, g, kv, head, keys, kbuf, s, RANGE_KEYS),
                32 => scores::<32>(q, g, kv, head, keys, kbuf, s, RANGE_KEYS),
                72 => scores::<72>(q, g, kv, head, keys, kbuf, s, RANGE_KEYS),
                _ => panic!("scan_scores: head_dim {} has no AVX2 kernel", 8 * chunks),
            }
        }
        j = keys.1;
    }
    std::hint::black_box(&s);
}

/// Causal attention of one KV head's group of `g` query rows at the same position:
/// `out[h] = softmax(q_h · K[lo..len]ᵀ) V[lo..len]` for `h < g`, reading K and V of KV head
/// `head` through `kv` (the sequence's block table), in place: the key ranges of
/// [`RANGE_KEYS`] one after another (by absolute position, the first one cut at `lo`, the
/// first key of a sliding window), merged in order.
///
/// `q`: `[g][8·chunks]`; `out`: `[g][8·chunks]`; `scratch`: reused buffers.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `lo < len` and `len` within the table; `chunks`
/// is 4, 8, 12, 16, 24, 32 or 72 (head_dim a multiple of 32, up to 256, or 576: an MLA latent).
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn attend_group(
    chunks: usize,
    q: &[f32],
    g: usize,
    kv: &LayerKv,
    head: usize,
    (lo, len): (usize, usize),
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    let d = 8 * chunks;
    assert!(out.len() >= g * d && lo < len);
    let mut merge = std::mem::take(&mut scratch.merge);
    let mut part = std::mem::take(&mut scratch.part);
    merge.reset(g, d);
    for r in lo / RANGE_KEYS..len.div_ceil(RANGE_KEYS) {
        let keys = range_keys(r, lo, len);
        // SAFETY: forwarded from the caller; the range is within len.
        unsafe {
            attend_range_dyn(chunks, q, g, kv, head, keys, scratch, &mut part);
            merge.push(&part);
        }
    }
    merge.finish(out, kv.group_sinks(head, g));
    scratch.merge = merge;
    scratch.part = part;
}

/// [`values`](crate::kernels::attention::values::values) for `g` heads (any count: in groups of up to [`VALUE_HEADS`]), keys `j0 .. j1`,
/// chunk range `c0 .. c0 + 4`; `out[h · 32 + lane]`.
///
/// # Safety
/// As [`values`], with `probs` holding `g · stride` values and `out` `g · 32`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn values_heads(
    probs: &[f32],
    stride: usize,
    g: usize,
    kv: &LayerKv,
    head: usize,
    keys: (usize, usize),
    c0: usize,
    out: &mut [f32],
) {
    let w = 8 * VALUE_CHUNKS;
    let wide = wide_registers();
    let mut h = 0;
    while h < g {
        // With 32 zmm registers, 8 heads' 4 chunks (16 accumulators) per pass over the keys:
        // MLA's 16 or 128 heads convert each value row a third as often. Each lane is the
        // same FMA chain either way.
        let n = match wide && g - h >= 8 {
            true => 8,
            false => (g - h).min(VALUE_HEADS),
        };
        let (p, o) = (&probs[h * stride..], &mut out[h * w..]);
        // SAFETY: forwarded from the caller.
        unsafe {
            match (n, wide) {
                (1, false) => values::values::<1>(p, stride, kv, head, keys, c0, o),
                (2, false) => values::values::<2>(p, stride, kv, head, keys, c0, o),
                (_, false) => values::values::<3>(p, stride, kv, head, keys, c0, o),
                (1, true) => values_512::<1>(p, stride, kv, head, keys, c0, o),
                (2, true) => values_512::<2>(p, stride, kv, head, keys, c0, o),
                (8, true) => values_512::<8>(p, stride, kv, head, keys, c0, o),
                (_, true) => values_512::<3>(p, stride, kv, head, keys, c0, o),
            }
        }
        h += n;
    }
}

//! The values pass of decode attention (AVX2 + FMA + F16C): `Σ_j p_j · V_j` over a key range
//! for a few query heads at a time, each output lane one FMA chain over the keys in position
//! order (see [`crate::kernels::attention::avx2`] for the scores and softmax that feed it), and the V-row
//! walk with its prefetches, shared with [`crate::kernels::attention::avx512`].
#![cfg(target_arch = "x86_64")]

use crate::kv::RowCursor;
use crate::kv::{KvDtype, KvPart, LayerKv};
use std::arch::x86_64::*;

/// How far ahead of the row being read the kernels prefetch (rows): 32 rows (4 KiB of f16
/// K for head_dim 64, past the next 16-token block) rather than 8 made a batched decode
/// step's attention faster (measured: docs/benchmarks.md, "The attention kernels' prefetch
/// distance").
pub const PREFETCH_ROWS: usize = 32;

/// head_dim chunks (of 8 values) one [`values`](crate::kernels::attention::values::values) call accumulates: 4 chunks × up to 3 heads
/// = 12 accumulators in registers.
pub const VALUE_CHUNKS: usize = 4;

/// Query heads one [`values`](crate::kernels::attention::values::values) call handles at most.
pub const VALUE_HEADS: usize = 3;

/// Chunk `c` (values `8c .. 8c + 8`) of a stored row, as f32.
///
/// # Safety
/// AVX2 and F16C; the row holds chunk `c` in `dtype`'s layout.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_chunk(dtype: KvDtype, row: *const u8, c: usize) -> __m256 {
    // SAFETY: the caller guarantees the chunk is inside the row.
    unsafe {
        match dtype {
            KvDtype::F32 => _mm256_loadu_ps(row.add(32 * c) as *const f32),
            KvDtype::F16 => _mm256_cvtph_ps(_mm_loadu_si128(row.add(16 * c) as *const __m128i)),
            KvDtype::Bf16 => {
                let h = _mm_loadu_si128(row.add(16 * c) as *const __m128i);
                _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
            }
            KvDtype::Q4_0 | KvDtype::Iq4Nl | KvDtype::Q4_0R | KvDtype::Iq4NlR => {
                q4_chunk(codebook(dtype), row.add(18 * (c / 4)), c % 4)
            }
            _ => {
                // q8_0: block c/4 = an f16 scale, then 32 int8; value = q · scale.
                let blk = row.add(34 * (c / 4));
                let scale =
                    _mm256_cvtph_ps(_mm_set1_epi16(i16::from_le_bytes([*blk, *blk.add(1)])));
                let q = _mm_loadl_epi64(blk.add(2 + 8 * (c % 4)) as *const __m128i);
                _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), scale)
            }
        }
    }
}

/// A 4-bit dtype's codebook ([`crate::kv::codec_q4::codebook`]) in a register, one int8 entry
/// per byte, for `_mm_shuffle_epi8` (any other dtype: zeros, never read).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn codebook(dtype: KvDtype) -> __m128i {
    match crate::kv::codec_q4::codebook(dtype) {
        // SAFETY: 16 readable bytes; an unaligned load.
        Some(book) => unsafe { _mm_loadu_si128(book.as_ptr() as *const __m128i) },
        None => _mm_setzero_si128(),
    }
}

/// Values `8k .. 8k + 8` (`k < 4`) of a 4-bit block (ggml's `block_q4_0` / `block_iq4_nl`:
/// an f16 scale, then value j in the low nibble of byte j and value 16 + j in its high
/// nibble) as f32: `book[nibble] · scale`, the product the portable codec computes.
///
/// # Safety
/// AVX2 and F16C; `blk` points at 18 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_chunk(book: __m128i, blk: *const u8, k: usize) -> __m256 {
    // SAFETY: the block's 18 bytes are readable (the caller guarantees it).
    unsafe {
        let scale = _mm256_cvtph_ps(_mm_set1_epi16(i16::from_le_bytes([*blk, *blk.add(1)])));
        let bytes = _mm_loadl_epi64(blk.add(2 + 8 * (k % 2)) as *const __m128i);
        let bytes = if k < 2 {
            bytes
        } else {
            _mm_srli_epi16::<4>(bytes)
        };
        let q = _mm_shuffle_epi8(book, _mm_and_si128(bytes, _mm_set1_epi8(15)));
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), scale)
    }
}

/// The V-row walk of a values pass over keys `j0 ..` of KV head `head`: the rows, a cursor
/// [`PREFETCH_ROWS`] ahead, and the bytes of chunks `c0 .. c0 + VALUE_CHUNKS` inside a row
/// (q8_0: the whole 34-byte block; q4_0 and iq4_nl: the whole 18-byte block), shared by [`values`] and
/// [`crate::kernels::attention::avx512::values_512`].
pub(crate) fn value_rows<'k, 'a>(
    kv: &'k LayerKv<'a>,
    head: usize,
    j0: usize,
    c0: usize,
) -> (RowCursor<'k, 'a>, RowCursor<'k, 'a>, (usize, usize)) {
    let mut rows = kv.rows(KvPart::V, head);
    rows.skip(j0);
    let mut ahead = kv.rows(KvPart::V, head);
    ahead.skip(j0 + PREFETCH_ROWS);
    let bytes = match kv.dtype {
        KvDtype::F32 => (32 * c0, 32 * (c0 + VALUE_CHUNKS)),
        KvDtype::F16 | KvDtype::Bf16 => (16 * c0, 16 * (c0 + VALUE_CHUNKS)),
        KvDtype::Q4_0 | KvDtype::Iq4Nl | KvDtype::Q4_0R | KvDtype::Iq4NlR => {
            (18 * (c0 / 4), 18 * (c0 / 4 + 1))
        }
        _ => (34 * (c0 / 4), 34 * (c0 / 4 + 1)),
    };
    (rows, ahead, bytes)
}

/// The next `keys` (≤ 8) V rows of a values pass: prefetches bytes `bytes` of the rows
/// [`PREFETCH_ROWS`] further on ([`prefetch_values`]) and returns the rows' pointers.
/// Panics if the walk passes the block table (attention checked the length before).
#[inline]
pub(crate) fn next_value_rows(
    kv: &LayerKv,
    rows: &mut RowCursor,
    ahead: &mut RowCursor,
    keys: usize,
    bytes: (usize, usize),
) -> [*const u8; 8] {
    prefetch_values(kv, ahead, keys, bytes);
    let mut src = [std::ptr::null::<u8>(); 8];
    assert!(
        rows.next_group(keys, &mut src),
        "attention read past the block table"
    );
    src
}

/// Prefetch bytes `lo .. hi` of the next `keys` rows of `ahead` into L1, when the view
/// prefetches ([`LayerKv::prefetch`]).
#[inline]
fn prefetch_values(kv: &LayerKv, ahead: &mut RowCursor, keys: usize, (lo, hi): (usize, usize)) {
    let mut next = [std::ptr::null::<u8>(); 8];
    if kv.prefetch && ahead.next_group(keys, &mut next) {
        for p in next.iter().take(keys) {
            let mut line = lo & !63;
            while line < hi {
                // SAFETY: a prefetch never faults; the line is inside the row anyway.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(line) as *const i8) };
                line += 64;
            }
        }
    }
}

/// `Σ_j p[h][j] · V_j` over keys `j0 .. j1` of KV head `head`, for the `H` heads whose
/// softmax numerators are `probs[h · stride + (j − j0)]`, on head_dim chunks `c0 .. c0 + 4`:
/// `out[h · 32 + lane]`, unnormalized. Each lane is one FMA chain over the keys in position
/// order, started from zero.
///
/// # Safety
/// AVX2, FMA and F16C; `j1` within the table; chunks `c0 .. c0 + 4` inside head_dim, `c0` a
/// multiple of 4; `probs` holds `H · stride` values, `stride ≥ j1 − j0`; `out` holds `H · 32`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn values<const H: usize>(
    probs: &[f32],
    stride: usize,
    kv: &LayerKv,
    head: usize,
    (j0, j1): (usize, usize),
    c0: usize,
    out: &mut [f32],
) {
    const CH: usize = VALUE_CHUNKS;
    assert!(probs.len() >= H * stride && stride >= j1 - j0 && out.len() >= H * 8 * CH);
    assert!(j1 <= kv.capacity() && 8 * (c0 + CH) <= kv.head_dim);
    let mut acc = [[_mm256_setzero_ps(); CH]; H];
    let (mut rows, mut ahead, bytes) = value_rows(kv, head, j0, c0);
    let mut j = j0;
    while j < j1 {
        let keys = (j1 - j).min(8);
        let src = next_value_rows(kv, &mut rows, &mut ahead, keys, bytes);
        for (t, &row) in src.iter().enumerate().take(keys) {
            let mut v = [_mm256_setzero_ps(); CH];
            for (c, x) in v.iter_mut().enumerate() {
                // SAFETY: chunk c0 + c is inside head_dim (asserted above).
                *x = unsafe { load_chunk(kv.dtype, row, c0 + c) };
            }
            for (h, a) in acc.iter_mut().enumerate() {
                let p = _mm256_set1_ps(probs[h * stride + j - j0 + t]);
                for (c, x) in a.iter_mut().enumerate() {
                    *x = _mm256_fmadd_ps(p, v[c], *x);
                }
            }
        }
        j += keys;
    }
    for (h, a) in acc.iter().enumerate() {
        for (c, x) in a.iter().enumerate() {
            // SAFETY: out holds H · 8 · CH values.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(h * 8 * CH + 8 * c), *x) };
        }
    }
}

/// Whether this CPU has AVX-512F: the values pass and the f16 key conversion then run on
/// 512-bit vectors ([`crate::kernels::attention::avx512`]), with the same bits.
pub(crate) fn wide_registers() -> bool {
    std::is_x86_feature_detected!("avx512f")
}

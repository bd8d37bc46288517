//! The AVX-512 parts of the attention kernels: the same per-lane arithmetic as
//! [`crate::kernels::attention::avx2`] on twice the lanes, so the same bits.
//!
//! - [`values_512`]: the values pass on two head_dim chunks per 512-bit vector. Each lane is
//!   still one FMA chain over the keys in position order (`p · v + acc` from zero); only
//!   the number of instructions halves (conversions from f16/bf16/q8_0/q4_0/iq4_nl and FMAs).
//! - [`f16_rows_512`]: f16 K rows to f32 sixteen values per conversion (exact, as the
//!   8-value one).
//!
//! Callers check AVX-512F (with AVX2/FMA/F16C for the rest of attention).
#![cfg(target_arch = "x86_64")]

use crate::kernels::attention::values::VALUE_CHUNKS;
use crate::kernels::attention::values::{codebook, next_value_rows, value_rows};
use crate::kv::{KvDtype, LayerKv};
use std::arch::x86_64::*;

/// Chunks `c` and `c + 1` (8 values each, `c` even, in the same q8_0 or 4-bit block) of a stored row
/// as 16 f32 lanes, each lane the value [`crate::kernels::attention::avx2`]'s 8-lane load gives it.
///
/// # Safety
/// AVX-512F (and SSSE3, which every AVX-512F CPU has); both chunks inside the row.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
pub(crate) unsafe fn load_pair(dtype: KvDtype, row: *const u8, c: usize) -> __m512 {
    // SAFETY: the caller guarantees the chunks are inside the row.
    unsafe {
        match dtype {
            KvDtype::F32 => _mm512_loadu_ps(row.add(32 * c) as *const f32),
            KvDtype::F16 => _mm512_cvtph_ps(_mm256_loadu_si256(row.add(16 * c) as *const __m256i)),
            KvDtype::Bf16 => {
                let h = _mm256_loadu_si256(row.add(16 * c) as *const __m256i);
                _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
            }
            KvDtype::Q4_0 | KvDtype::Iq4Nl | KvDtype::Q4_0R | KvDtype::Iq4NlR => {
                // 4-bit: block c/4 = an f16 scale, then 16 bytes of nibbles; chunks c and
                // c + 1 (c even) are the low (c % 4 = 0) or high (2) nibbles of all 16.
                let blk = row.add(18 * (c / 4));
                let bits = i16::from_le_bytes([*blk, *blk.add(1)]);
                let scale = _mm512_cvtph_ps(_mm256_set1_epi16(bits));
                let bytes = _mm_loadu_si128(blk.add(2) as *const __m128i);
                let bytes = if c.is_multiple_of(4) {
                    bytes
                } else {
                    _mm_srli_epi16::<4>(bytes)
                };
                let q = _mm_shuffle_epi8(codebook(dtype), _mm_and_si128(bytes, _mm_set1_epi8(15)));
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), scale)
            }
            _ => {
                // q8_0: block c/4 = an f16 scale, then 32 int8; value = q · scale. Chunks c
                // and c + 1 are 16 consecutive codes of that block.
                let blk = row.add(34 * (c / 4));
                let bits = i16::from_le_bytes([*blk, *blk.add(1)]);
                let scale = _mm512_cvtph_ps(_mm256_set1_epi16(bits));
                let q = _mm_loadu_si128(blk.add(2 + 8 * (c % 4)) as *const __m128i);
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), scale)
            }
        }
    }
}

/// `Σ_j p[h][j] · V_j` over keys `j0 .. j1` of KV head `head`, for the `H` heads whose
/// softmax numerators are `probs[h · stride + (j − j0)]`, on head_dim chunks `c0 .. c0 + 4`:
/// `out[h · 32 + lane]`, unnormalized; bit-identical to
/// [`crate::kernels::attention::values::values`] (tested in `model::paged_attention`).
///
/// # Safety
/// AVX-512F; `j1` within the table; chunks `c0 .. c0 + 4` inside head_dim, `c0` a multiple
/// of 4; `probs` holds `H · stride` values, `stride ≥ j1 − j0`; `out` holds `H · 32`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn values_512<const H: usize>(
    probs: &[f32],
    stride: usize,
    kv: &LayerKv,
    head: usize,
    (j0, j1): (usize, usize),
    c0: usize,
    out: &mut [f32],
) {
    const PAIRS: usize = VALUE_CHUNKS / 2;
    assert!(probs.len() >= H * stride && stride >= j1 - j0 && out.len() >= H * 8 * VALUE_CHUNKS);
    assert!(j1 <= kv.capacity() && 8 * (c0 + VALUE_CHUNKS) <= kv.head_dim);
    let mut acc = [[_mm512_setzero_ps(); PAIRS]; H];
    let (mut rows, mut ahead, bytes) = value_rows(kv, head, j0, c0);
    let mut j = j0;
    while j < j1 {
        let keys = (j1 - j).min(8);
        let src = next_value_rows(kv, &mut rows, &mut ahead, keys, bytes);
        for (t, &row) in src.iter().enumerate().take(keys) {
            let mut v = [_mm512_setzero_ps(); PAIRS];
            for (i, x) in v.iter_mut().enumerate() {
                // SAFETY: chunks c0 + 2i, c0 + 2i + 1 are inside head_dim (asserted above).
                *x = unsafe { load_pair(kv.dtype, row, c0 + 2 * i) };
            }
            for (h, a) in acc.iter_mut().enumerate() {
                let p = _mm512_set1_ps(probs[h * stride + j - j0 + t]);
                for (i, x) in a.iter_mut().enumerate() {
                    *x = _mm512_fmadd_ps(p, v[i], *x);
                }
            }
        }
        j += keys;
    }
    for (h, a) in acc.iter().enumerate() {
        for (i, x) in a.iter().enumerate() {
            // SAFETY: out holds H · 32 values.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(h * 8 * VALUE_CHUNKS + 16 * i), *x) };
        }
    }
}

/// The f16 rows `src[..keys]` (head_dim `d` values each, `d` a multiple of 16) as f32 into
/// `buf` (row t at `buf + t · d`).
///
/// # Safety
/// AVX-512F; every `src[t]` holds `2 · d` readable bytes; `buf` holds `keys · d` values.
#[target_feature(enable = "avx512f")]
pub unsafe fn f16_rows_512(src: &[*const u8; 8], keys: usize, d: usize, buf: *mut f32) {
    for (t, &row) in src.iter().enumerate().take(keys) {
        for c in (0..d).step_by(16) {
            // SAFETY: values c .. c + 16 of row t: inside the row and inside buf.
            unsafe {
                let h = _mm256_loadu_si256(row.add(2 * c) as *const __m256i);
                _mm512_storeu_ps(buf.add(t * d + c), _mm512_cvtph_ps(h));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every non-NaN f16 converts to the f32 that the 8-lane F16C path (and `half`) gives:
    /// the keys' f32 copies, hence the scores, do not change with the vector width.
    #[test]
    fn f16_rows_convert_every_value_exactly() {
        if !(std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("f16c")) {
            eprintln!("no AVX-512F here: nothing to compare");
            return;
        }
        let d = 64;
        let all: Vec<u16> = (0..=u16::MAX).collect();
        for chunk in all.chunks(8 * d) {
            let keys = chunk.len() / d;
            let mut src = [std::ptr::null::<u8>(); 8];
            for (t, p) in src.iter_mut().enumerate().take(keys) {
                *p = chunk[t * d..].as_ptr() as *const u8;
            }
            let mut buf = vec![0f32; 8 * d];
            // SAFETY: AVX-512F checked; each row holds d f16 values, buf 8 · d.
            unsafe { f16_rows_512(&src, keys, d, buf.as_mut_ptr()) };
            for (i, &bits) in chunk[..keys * d].iter().enumerate() {
                let want = half::f16::from_bits(bits).to_f32();
                if !want.is_nan() {
                    assert_eq!(buf[i].to_bits(), want.to_bits(), "f16 bits {bits:#06x}");
                }
            }
        }
    }
}

//! How one K or V row (one token, one KV head: `head_dim` values) is stored in the block pool,
//! for each runtime KV dtype, and read back as f32.
//!
//! - `f32`: 4 bytes per value, little-endian.
//! - `f16`: IEEE binary16, round to nearest even (`half::f16::from_f32`), 2 bytes per value.
//! - `bf16`: bfloat16, round to nearest even (`half::bf16::from_f32`), 2 bytes per value.
//! - `q8_0`: ggml's block layout (ggml-common.h `block_q8_0`): per 32 values one f16 scale
//!   `d = max|x| / 127` then 32 int8 `round(x / d)` (34 bytes), as ggml's
//!   `quantize_row_q8_0_ref`; read back as `q · d`. Rows are quantized along head_dim, never
//!   across tokens, so every block size works; a head_dim that is not a multiple of 32 pads
//!   its last block with zeros.
//! - `q4_0` and `iq4_nl`: ggml's 4-bit blocks (18 bytes per 32 values), in
//!   [`super::codec_q4`]; `q4_0r` and `iq4_nlr` the same blocks of the row after a Hadamard
//!   rotation ([`super::codec_q4::rotate`]), read back still rotated.
use super::codec_q4::{self, Q4_BYTES, Q4_VALUES};
use crate::kv::KvDtype;
use anyhow::{bail, Result};
use half::{bf16, f16};

/// Values per q8_0 block (ggml `QK8_0`).
pub const Q8_0_VALUES: usize = 32;
/// Bytes per q8_0 block: an f16 scale and 32 int8 values.
pub const Q8_0_BYTES: usize = 34;

/// The dtypes the runtime cache stores (kv-size also knows fp8 and int8).
pub const RUNTIME_DTYPES: [KvDtype; 8] = [
    KvDtype::F32,
    KvDtype::F16,
    KvDtype::Bf16,
    KvDtype::Q8_0,
    KvDtype::Q4_0,
    KvDtype::Iq4Nl,
    KvDtype::Q4_0R,
    KvDtype::Iq4NlR,
];

/// The runtime dtypes as the help text and errors list them.
pub const RUNTIME_DTYPE_NAMES: &str = "f32, f16, bf16, q8_0, q4_0, iq4_nl, q4_0r or iq4_nlr";

/// Parse a `--kv-cache-dtype` value for the runtime cache.
///
/// Errors: a name that is no KV dtype at all, or one only `kv-size` can count (fp8, int8);
/// the message names `flag` and the accepted values.
pub fn parse_runtime_dtype(flag: &str, s: &str) -> Result<KvDtype> {
    match KvDtype::parse(s) {
        Some(d) if RUNTIME_DTYPES.contains(&d) => Ok(d),
        Some(d) => bail!(
            "{flag} {s}: the runtime KV cache stores {RUNTIME_DTYPE_NAMES} ({} is a kv-size-only dtype)",
            d.name()
        ),
        None => bail!("{flag} {s}: unknown KV dtype (expected {RUNTIME_DTYPE_NAMES})"),
    }
}

/// Bytes of one stored row of `head_dim` values (block formats round up to whole blocks),
/// the same arithmetic as [`KvDtype::bytes_for`]. Errors: a dtype the runtime cannot store.
pub fn row_bytes(dtype: KvDtype, head_dim: usize) -> Result<usize> {
    if !RUNTIME_DTYPES.contains(&dtype) {
        bail!("the runtime KV cache cannot store {}", dtype.name());
    }
    Ok(dtype.bytes_for(head_dim as u64).unwrap_or(u64::MAX) as usize)
}

/// Store `src` (`head_dim` f32 values) as `dtype` into `dst` (exactly [`row_bytes`] bytes).
/// Panics only on a `dst` of the wrong length or a dtype outside [`RUNTIME_DTYPES`] (caller
/// bugs: the pool refuses those dtypes, never user data).
///
/// On x86-64 with F16C and SSE4.1 (detected at run time) the f16 conversions and q8_0's
/// rounding run as single instructions; the bytes are the same as the portable code's.
///
/// `q4_0r` and `iq4_nlr` store the blocks of the rotated row ([`codec_q4::rotate`]).
pub fn encode_row(dtype: KvDtype, src: &[f32], dst: &mut [u8]) {
    let base = match dtype {
        KvDtype::Q4_0R => KvDtype::Q4_0,
        KvDtype::Iq4NlR => KvDtype::Iq4Nl,
        _ => return encode_stored_row(dtype, src, dst),
    };
    let mut rotated = src.to_vec();
    codec_q4::rotate(&mut rotated);
    encode_stored_row(base, &rotated, dst);
}

/// [`encode_row`] of a dtype stored as given (no rotation).
fn encode_stored_row(dtype: KvDtype, src: &[f32], dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: available() saw F16C and SSE4.1.
        return unsafe { x86::encode_row(dtype, src, dst) };
    }
    encode_row_with(dtype, src, dst, |v| f16::from_f32(v).to_bits());
}

/// [`encode_row`] with `to_f16` converting one value to f16 bits (round to nearest even).
#[inline(always)]
fn encode_row_with(dtype: KvDtype, src: &[f32], dst: &mut [u8], to_f16: impl Fn(f32) -> u16) {
    match dtype {
        KvDtype::F32 => {
            for (d, v) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&v.to_le_bytes());
            }
        }
        KvDtype::F16 => {
            for (d, v) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&to_f16(*v).to_le_bytes());
            }
        }
        KvDtype::Bf16 => {
            for (d, v) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&bf16::from_f32(*v).to_le_bytes());
            }
        }
        KvDtype::Q8_0 => {
            for (block, x) in dst
                .chunks_exact_mut(Q8_0_BYTES)
                .zip(src.chunks(Q8_0_VALUES))
            {
                encode_q8_0_block(x, block, &to_f16);
            }
        }
        KvDtype::Q4_0 | KvDtype::Q4_0R => {
            for (block, x) in dst.chunks_exact_mut(Q4_BYTES).zip(src.chunks(Q4_VALUES)) {
                codec_q4::encode_q4_0_block(x, block, &to_f16);
            }
        }
        KvDtype::Iq4Nl | KvDtype::Iq4NlR => {
            for (block, x) in dst.chunks_exact_mut(Q4_BYTES).zip(src.chunks(Q4_VALUES)) {
                codec_q4::encode_iq4_nl_block(x, block, &to_f16);
            }
        }
        KvDtype::Fp8 | KvDtype::Int8 => panic!("the runtime KV cache cannot store {dtype:?}"),
    }
}

/// One q8_0 block from up to 32 values (missing values count as 0), as ggml's
/// `quantize_row_q8_0_ref`: `d = amax / 127`, `q = round(x · (1/d))` (half away from zero).
#[inline(always)]
fn encode_q8_0_block(x: &[f32], block: &mut [u8], to_f16: impl Fn(f32) -> u16) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    block[..2].copy_from_slice(&to_f16(d).to_le_bytes());
    for (q, slot) in block[2..].iter_mut().enumerate() {
        let v = x.get(q).copied().unwrap_or(0.0);
        *slot = ((v * id).round() as i8) as u8;
    }
}

/// Read a stored row back: `dst` (`head_dim` values) from `src` ([`row_bytes`] bytes).
/// A rotated dtype's row reads back rotated (attention works in the rotated space).
pub fn decode_row(dtype: KvDtype, src: &[u8], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: available() saw F16C and SSE4.1.
        return unsafe { x86::decode_row(dtype, src, dst) };
    }
    decode_row_with(dtype, src, dst, |h| f16::from_bits(h).to_f32());
}

/// [`decode_row`] with `of_f16` converting f16 bits to f32 (exact).
#[inline(always)]
fn decode_row_with(dtype: KvDtype, src: &[u8], dst: &mut [f32], of_f16: impl Fn(u16) -> f32) {
    match dtype {
        KvDtype::F32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        KvDtype::F16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = of_f16(u16::from_le_bytes([s[0], s[1]]));
            }
        }
        KvDtype::Bf16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = bf16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        KvDtype::Q8_0 => {
            for (out, block) in dst
                .chunks_mut(Q8_0_VALUES)
                .zip(src.chunks_exact(Q8_0_BYTES))
            {
                let d = of_f16(u16::from_le_bytes([block[0], block[1]]));
                for (o, &q) in out.iter_mut().zip(&block[2..]) {
                    *o = (q as i8) as f32 * d;
                }
            }
        }
        KvDtype::Q4_0
        | KvDtype::Iq4Nl
        | KvDtype::Q4_0R
        | KvDtype::Iq4NlR
        | KvDtype::Fp8
        | KvDtype::Int8 => {
            let Some(book) = codec_q4::codebook(dtype) else {
                panic!("the runtime KV cache cannot store {dtype:?}");
            };
            for (out, block) in dst.chunks_mut(Q4_VALUES).zip(src.chunks_exact(Q4_BYTES)) {
                codec_q4::decode_q4_block(book, block, out, &of_f16);
            }
        }
    }
}

/// The codec compiled for F16C and SSE4.1, chosen at run time: a portable build otherwise
/// converts each f16 through a feature check and a call (`half`), and rounds q8_0 values
/// with a longer SSE2 sequence instead of `roundss`.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{decode_row_with, encode_row_with, KvDtype};
    use std::arch::x86_64::*;

    /// Whether this CPU has F16C and SSE4.1 (and the portable kernels are not forced).
    pub fn available() -> bool {
        std::is_x86_feature_detected!("f16c")
            && std::is_x86_feature_detected!("sse4.1")
            && !crate::cpu::portable_forced()
    }

    /// `v` as f16 bits, round to nearest even (as `half::f16::from_f32`).
    #[inline]
    #[target_feature(enable = "f16c")]
    fn to_f16(v: f32) -> u16 {
        let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(v));
        _mm_extract_epi16::<0>(h) as u16
    }

    /// f16 bits as f32 (exact, as `half::f16::to_f32`).
    #[inline]
    #[target_feature(enable = "f16c")]
    fn of_f16(h: u16) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
    }

    /// [`super::encode_row`] on F16C and SSE4.1.
    ///
    /// # Safety
    /// The CPU must support F16C and SSE4.1.
    #[target_feature(enable = "f16c,sse4.1")]
    pub unsafe fn encode_row(dtype: KvDtype, src: &[f32], dst: &mut [u8]) {
        if dtype != KvDtype::F16 {
            return encode_row_with(dtype, src, dst, |v| to_f16(v));
        }
        let n = src.len().min(dst.len() / 2);
        let whole = n - n % 8;
        for (s, d) in src[..whole].chunks_exact(8).zip(dst.chunks_exact_mut(16)) {
            // SAFETY: 8 readable f32 in `s`, 16 writable bytes in `d`; unaligned ops.
            unsafe {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(s.as_ptr()));
                _mm_storeu_si128(d.as_mut_ptr() as *mut __m128i, h);
            }
        }
        encode_row_with(dtype, &src[whole..n], &mut dst[2 * whole..2 * n], |v| {
            to_f16(v)
        });
    }

    /// [`super::decode_row`] on F16C and SSE4.1.
    ///
    /// # Safety
    /// The CPU must support F16C and SSE4.1.
    #[target_feature(enable = "f16c,sse4.1")]
    pub unsafe fn decode_row(dtype: KvDtype, src: &[u8], dst: &mut [f32]) {
        if dtype != KvDtype::F16 {
            return decode_row_with(dtype, src, dst, |h| of_f16(h));
        }
        let n = dst.len().min(src.len() / 2);
        let whole = n - n % 8;
        for (s, d) in src.chunks_exact(16).zip(dst[..whole].chunks_exact_mut(8)) {
            // SAFETY: 16 readable bytes in `s`, 8 writable f32 in `d`; unaligned ops.
            unsafe {
                let v = _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr() as *const __m128i));
                _mm256_storeu_ps(d.as_mut_ptr(), v);
            }
        }
        decode_row_with(dtype, &src[2 * whole..2 * n], &mut dst[whole..n], |h| {
            of_f16(h)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::k_quants::{BlockQ8_0, GgmlType};

    fn random_row(n: usize, seed: u64) -> Vec<f32> {
        // xorshift: reproducible values in about [-4, 4), with some exact zeros and ties.
        let mut s = seed.max(1);
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                if i % 29 == 0 {
                    0.0
                } else {
                    ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0
                }
            })
            .collect()
    }

    /// f16 and bf16 bytes equal the `half` crate's conversion of each value.
    #[test]
    fn f16_and_bf16_match_half() {
        for d in [32, 64, 80, 128] {
            let row = random_row(d, d as u64);
            for dtype in [KvDtype::F16, KvDtype::Bf16] {
                let mut bytes = vec![0u8; row_bytes(dtype, d).unwrap_or(0)];
                encode_row(dtype, &row, &mut bytes);
                let want: Vec<u8> = row
                    .iter()
                    .flat_map(|&v| match dtype {
                        KvDtype::F16 => f16::from_f32(v).to_le_bytes(),
                        _ => bf16::from_f32(v).to_le_bytes(),
                    })
                    .collect();
                assert_eq!(bytes, want, "{dtype:?} d={d}");
                let mut back = vec![0f32; d];
                decode_row(dtype, &bytes, &mut back);
                for (b, &v) in back.iter().zip(&row) {
                    let exact = match dtype {
                        KvDtype::F16 => f16::from_f32(v).to_f32(),
                        _ => bf16::from_f32(v).to_f32(),
                    };
                    assert_eq!(*b, exact);
                }
            }
        }
    }

    /// The run-time dispatched codec (F16C/SSE4.1 where the CPU has them) stores and reads
    /// back the same bytes and values as the portable code, special values included:
    /// signed zeros, f16 subnormals, overflow to infinity, halfway cases, NaN.
    #[test]
    fn dispatched_codec_equals_the_portable_one() {
        let mut row = random_row(77, 5);
        let special = [
            -0.0,
            6e-8,
            -3e-5,
            65520.0,
            -1e9,
            f32::INFINITY,
            1.0 + 1.0 / 2048.0,
            1.0 + 3.0 / 2048.0,
            f32::NAN,
            0.5,
            -2.5,
        ];
        row[..special.len()].copy_from_slice(&special);
        for dtype in RUNTIME_DTYPES {
            for d in [8, 32, 40, 64, 77] {
                let src = &row[..d];
                let rb = row_bytes(dtype, d).unwrap_or(0);
                let (mut got, mut want) = (vec![0u8; rb], vec![0u8; rb]);
                encode_row(dtype, src, &mut got);
                let mut plain = src.to_vec();
                if dtype.rotated() {
                    codec_q4::rotate(&mut plain);
                }
                encode_row_with(dtype, &plain, &mut want, |v| f16::from_f32(v).to_bits());
                assert_eq!(got, want, "{dtype:?} d={d}");
                let (mut back, mut want_back) = (vec![0f32; d], vec![0f32; d]);
                decode_row(dtype, &got, &mut back);
                decode_row_with(dtype, &got, &mut want_back, |h| f16::from_bits(h).to_f32());
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&back), bits(&want_back), "{dtype:?} d={d}");
            }
        }
    }

    /// q8_0 bytes equal ggml's block layout as candle implements it (`BlockQ8_0::from_float`).
    #[test]
    fn q8_0_matches_ggml_block_q8_0() {
        for (d, seed) in [(32, 1u64), (64, 2), (128, 3), (256, 4)] {
            let row = random_row(d, seed);
            let mut bytes = vec![0u8; row_bytes(KvDtype::Q8_0, d).unwrap_or(0)];
            encode_row(KvDtype::Q8_0, &row, &mut bytes);
            let mut blocks = vec![BlockQ8_0::zeros(); d / 32];
            BlockQ8_0::from_float(&row, &mut blocks);
            // SAFETY: BlockQ8_0 is #[repr(C)] { d: f16, qs: [i8; 32] }, 34 bytes (asserted by
            // candle), so the blocks are exactly ggml's bytes.
            let want: &[u8] = unsafe {
                std::slice::from_raw_parts(blocks.as_ptr() as *const u8, blocks.len() * 34)
            };
            assert_eq!(bytes, want, "d={d}");
            let mut back = vec![0f32; d];
            decode_row(KvDtype::Q8_0, &bytes, &mut back);
            let mut want_back = vec![0f32; d];
            BlockQ8_0::to_float(&blocks, &mut want_back);
            assert_eq!(back, want_back);
        }
    }

    /// A head_dim that is not a multiple of 32 pads its last block with zeros.
    #[test]
    fn q8_0_pads_a_partial_block() {
        let row = random_row(40, 9);
        assert_eq!(row_bytes(KvDtype::Q8_0, 40).unwrap_or(0), 2 * 34);
        let mut bytes = vec![0u8; 68];
        encode_row(KvDtype::Q8_0, &row, &mut bytes);
        let mut padded = row.clone();
        padded.resize(64, 0.0);
        let mut full = vec![0u8; 68];
        encode_row(KvDtype::Q8_0, &padded, &mut full);
        assert_eq!(bytes, full);
    }

    #[test]
    fn runtime_dtypes_are_parsed_and_others_refused() {
        assert_eq!(
            parse_runtime_dtype("--kv-cache-dtype", "f16").ok(),
            Some(KvDtype::F16)
        );
        assert_eq!(
            parse_runtime_dtype("--kv-cache-dtype", "Q8_0").ok(),
            Some(KvDtype::Q8_0)
        );
        let e = parse_runtime_dtype("--kv-cache-dtype", "int3")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("int3")
                && e.contains("f32, f16, bf16, q8_0, q4_0, iq4_nl, q4_0r or iq4_nlr"),
            "{e}"
        );
        let e = parse_runtime_dtype("--kv-cache-dtype", "fp8")
            .unwrap_err()
            .to_string();
        assert!(e.contains("kv-size-only"), "{e}");
    }
}

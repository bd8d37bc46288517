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
use crate::kv::KvDtype;
use anyhow::{bail, Result};
use half::{bf16, f16};

/// Values per q8_0 block (ggml `QK8_0`).
pub const Q8_0_VALUES: usize = 32;
/// Bytes per q8_0 block: an f16 scale and 32 int8 values.
pub const Q8_0_BYTES: usize = 34;

/// The dtypes the runtime cache stores (kv-size also knows fp8, int8 and q4_0).
pub const RUNTIME_DTYPES: [KvDtype; 4] = [KvDtype::F32, KvDtype::F16, KvDtype::Bf16, KvDtype::Q8_0];

/// Parse a `--kv-cache-dtype` value for the runtime cache.
///
/// Errors: a name that is no KV dtype at all, or one only `kv-size` can count (fp8, int8,
/// q4_0); the message names `flag` and the accepted values.
pub fn parse_runtime_dtype(flag: &str, s: &str) -> Result<KvDtype> {
    match KvDtype::parse(s) {
        Some(d) if RUNTIME_DTYPES.contains(&d) => Ok(d),
        Some(d) => bail!(
            "{flag} {s}: the runtime KV cache stores f32, f16, bf16 or q8_0 ({} is a kv-size-only dtype)",
            d.name()
        ),
        None => bail!("{flag} {s}: unknown KV dtype (expected f32, f16, bf16 or q8_0)"),
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
/// Panics only on a `dst` of the wrong length (a caller bug, never user data).
pub fn encode_row(dtype: KvDtype, src: &[f32], dst: &mut [u8]) {
    match dtype {
        KvDtype::F32 => {
            for (d, v) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&v.to_le_bytes());
            }
        }
        KvDtype::F16 => {
            for (d, v) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
            }
        }
        KvDtype::Bf16 => {
            for (d, v) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&bf16::from_f32(*v).to_le_bytes());
            }
        }
        _ => {
            for (block, x) in dst
                .chunks_exact_mut(Q8_0_BYTES)
                .zip(src.chunks(Q8_0_VALUES))
            {
                encode_q8_0_block(x, block);
            }
        }
    }
}

/// One q8_0 block from up to 32 values (missing values count as 0), as ggml's
/// `quantize_row_q8_0_ref`: `d = amax / 127`, `q = round(x · (1/d))` (half away from zero).
fn encode_q8_0_block(x: &[f32], block: &mut [u8]) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for (q, slot) in block[2..].iter_mut().enumerate() {
        let v = x.get(q).copied().unwrap_or(0.0);
        *slot = ((v * id).round() as i8) as u8;
    }
}

/// Read a stored row back: `dst` (`head_dim` values) from `src` ([`row_bytes`] bytes).
pub fn decode_row(dtype: KvDtype, src: &[u8], dst: &mut [f32]) {
    match dtype {
        KvDtype::F32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        KvDtype::F16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        KvDtype::Bf16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = bf16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        _ => {
            for (out, block) in dst
                .chunks_mut(Q8_0_VALUES)
                .zip(src.chunks_exact(Q8_0_BYTES))
            {
                let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
                for (o, &q) in out.iter_mut().zip(&block[2..]) {
                    *o = (q as i8) as f32 * d;
                }
            }
        }
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
            e.contains("int3") && e.contains("f32, f16, bf16 or q8_0"),
            "{e}"
        );
        let e = parse_runtime_dtype("--kv-cache-dtype", "fp8")
            .unwrap_err()
            .to_string();
        assert!(e.contains("kv-size-only"), "{e}");
    }
}

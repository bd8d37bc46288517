//! ggml weight types that the Q4_1, Q8_0 and 5-bit kernels run exactly, repacked at load into
//! those layouts (formats from ggml-common.h and ggml-quants.c's reference dequantizers):
//!
//! - **Q4_0** (`block_q4_0`: f16 `d`, 16 bytes of nibbles laid out as Q4_1's; 18 bytes per
//!   32 weights; `w = d · (q − 8)`) as Q4_1 with `m = −8 · d`. `−8 · d` is exact in f16 (a
//!   power of two moves only the exponent), and `q · d + m = (q − 8) · d` exactly in f32
//!   (`q · d` needs at most 15 significant bits), so every weight dequantizes to ggml's value
//!   (bit for bit but for the sign of a zero weight: ggml's `(8 − 8) · d` is −0 where `d < 0`,
//!   `8 · d + m` is +0; equal as numbers, and no sum of products can tell them apart unless
//!   all of it is zero). The decode kernels' sum `d_w · d_x · Σ q_w q_x + m_w · s_x` equals
//!   ggml's `d_w · d_x · Σ (q_w − 8) q_x` up to float rounding. A tensor with a scale whose
//!   `8 · d` is not a finite f16 (|d| > 8,188) is stored as Q8_0 with codes `q − 8`
//!   instead, exact for any scale. Q4_1's layout costs 20 bytes per block, 11% above the file.
//! - **Q5_0** (`block_q5_0`: f16 `d`, 32 high bits `qh`, 16 bytes of low nibbles; 22 bytes
//!   per 32 weights; `w = d · (q − 16)`) in the 5-bit layout ([`crate::kernels::matmul::q5`], 24
//!   bytes per block) as `d · q + m` with `m = −16 · d`, exact as Q4_0's `−8 · d`; a tensor
//!   with a scale whose `16 · d` is not a finite f16 (|d| > 4,094) is stored as Q8_0 with
//!   codes `q − 16` (−16 ..= 15), exact for any scale, at 34 bytes per block.
use super::load::pack;
use super::{Packed, QuantMatrix, QK};
use crate::kernels::matmul::q4_1_q8_0::{self, Q4_1x8, Q8_0x8};
use crate::kernels::matmul::q5;
use anyhow::Result;
use half::f16;

/// Bytes of one ggml `block_q4_0`.
pub const Q4_0_BLOCK_BYTES: usize = 18;
/// Bytes of one ggml `block_q5_0`.
pub const Q5_0_BLOCK_BYTES: usize = 22;

/// The 32 codes of a ggml `block_q4_0` (`b`), element order, as `q − 8`.
fn q4_0_codes(b: &[u8]) -> [i8; QK] {
    let mut out = [0i8; QK];
    for (j, &byte) in b[2..18].iter().enumerate() {
        out[j] = (byte & 0x0F) as i8 - 8;
        out[j + 16] = (byte >> 4) as i8 - 8;
    }
    out
}

/// The 32 codes of a ggml `block_q5_0` (`b`), element order, as `q − 16`: element `j` is the
/// low nibble of `qs[j]` with bit `j` of `qh` on top, element `j + 16` the high nibble with
/// bit `j + 16`.
fn q5_0_codes(b: &[u8]) -> [i8; QK] {
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let mut out = [0i8; QK];
    for (j, &byte) in b[6..22].iter().enumerate() {
        let hi0 = (((qh >> j) & 1) << 4) as u8;
        let hi1 = (((qh >> (j + 16)) & 1) << 4) as u8;
        out[j] = ((byte & 0x0F) | hi0) as i8 - 16;
        out[j + 16] = ((byte >> 4) | hi1) as i8 - 16;
    }
    out
}

/// Row `r` of a Q8_0 block column from a scale's f16 bits and 32 codes in element order.
fn fill_q8_0_codes(g: &mut Q8_0x8, r: usize, d: u16, codes: &[i8; QK]) {
    let mut block = [0u8; 34];
    block[..2].copy_from_slice(&d.to_le_bytes());
    for (o, &c) in block[2..].iter_mut().zip(codes) {
        *o = c as u8;
    }
    q4_1_q8_0::fill_q8_0(g, r, &block);
}

/// Whether every scale of a Q4_0 tensor's blocks has `8 · d` finite in f16: then the Q4_1
/// layout gives ggml's weights exactly.
fn q4_0_offsets_fit(bytes: &[u8]) -> bool {
    bytes.chunks_exact(Q4_0_BLOCK_BYTES).all(|b| {
        let d = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
        (8.0 * d).abs() <= f16::MAX.to_f32()
    })
}

/// A ggml tensor whose blocks (`block_bytes` each, scale first) become Q8_0 rows through
/// `codes`, in groups of eight rows.
fn as_q8_0(
    format: &str,
    bytes: &[u8],
    block_bytes: usize,
    dims: (usize, usize),
    codes: fn(&[u8]) -> [i8; QK],
    interleaved: bool,
) -> Result<Packed> {
    let fill = |g: &mut Q8_0x8, r: usize, b: &[u8]| {
        fill_q8_0_codes(g, r, u16::from_le_bytes([b[0], b[1]]), &codes(b))
    };
    Ok(Packed::Q8_0(pack(
        format,
        bytes,
        block_bytes,
        dims,
        fill,
        interleaved,
    )?))
}

impl QuantMatrix {
    /// Parse raw ggml Q4_0 bytes of a `[rows, cols]` tensor into the Q4_1 layout (or Q8_0
    /// for a scale past 8,188; see the module's docs). Errors: `cols` not a multiple of 32,
    /// or a byte count that does not match.
    pub fn from_ggml_q4_0_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        let interleaved = super::load::pairs_interleaved_here();
        let dims = (rows, cols);
        let packed = if q4_0_offsets_fit(bytes) {
            let fill = |g: &mut Q4_1x8, r: usize, b: &[u8]| {
                let d = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
                let m = f16::from_f32(-8.0 * d.to_f32());
                q4_1_q8_0::fill_q4_1_parts(g, r, d.to_bits(), m.to_bits(), &b[2..18]);
            };
            Packed::Q4_1(pack(
                "Q4_0",
                bytes,
                Q4_0_BLOCK_BYTES,
                dims,
                fill,
                interleaved,
            )?)
        } else {
            as_q8_0(
                "Q4_0",
                bytes,
                Q4_0_BLOCK_BYTES,
                dims,
                q4_0_codes,
                interleaved,
            )?
        };
        Ok(QuantMatrix {
            rows,
            cols,
            packed,
            pairs_interleaved: interleaved,
        })
    }

    /// Parse raw ggml Q5_0 bytes of a `[rows, cols]` tensor into the 5-bit layout
    /// ([`crate::kernels::matmul::q5`], `m = −16 · d`), or Q8_0's for a scale past 4,094 (see the
    /// module's docs). Errors: `cols` not a multiple of 32, or a byte count that does not
    /// match.
    pub fn from_ggml_q5_0_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        let dims = (rows, cols);
        let fits = bytes
            .chunks_exact(Q5_0_BLOCK_BYTES)
            .all(|b| q5::q5_0_offset_fits(u16::from_le_bytes([b[0], b[1]])));
        if fits {
            let blocks = pack("Q5_0", bytes, Q5_0_BLOCK_BYTES, dims, q5::fill_q5_0, false)?;
            return Ok(QuantMatrix::own_layout(rows, cols, Packed::Q5_1(blocks)));
        }
        let interleaved = super::load::pairs_interleaved_here();
        Ok(QuantMatrix {
            rows,
            cols,
            packed: as_q8_0(
                "Q5_0",
                bytes,
                Q5_0_BLOCK_BYTES,
                dims,
                q5_0_codes,
                interleaved,
            )?,
            pairs_interleaved: interleaved,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::k_quants::{BlockQ4_0, BlockQ5_0, GgmlType};

    /// A xorshift stream of bytes.
    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 32) as u8
            })
            .collect()
    }

    /// `rows × cols` random blocks of `block` bytes, each scale replaced by `scale(i)`.
    fn blocks(rows: usize, cols: usize, block: usize, scale: impl Fn(usize) -> f32) -> Vec<u8> {
        let mut b = bytes(rows * cols / QK * block, 7 + block as u64);
        for (i, blk) in b.chunks_exact_mut(block).enumerate() {
            blk[..2].copy_from_slice(&f16::from_f32(scale(i)).to_bits().to_le_bytes());
        }
        b
    }

    /// ggml's reference dequantization (candle's block types) of a row-major tensor.
    fn reference<T: GgmlType>(raw: &[u8], block: usize) -> Vec<f32> {
        assert_eq!(std::mem::size_of::<T>(), block);
        let n = raw.len() / block;
        // SAFETY: T is a plain `repr(C)` ggml block of exactly `block` bytes (checked above),
        // valid for any bit pattern; `read_unaligned` copies each out of the byte buffer.
        let typed: Vec<T> = (0..n)
            .map(|i| unsafe { std::ptr::read_unaligned(raw[i * block..].as_ptr() as *const T) })
            .collect();
        let mut out = vec![0f32; n * QK];
        T::to_float(&typed, &mut out);
        out
    }

    /// The same bits, but for the sign of a zero (Q4_0's `(8 − 8) · d` where `d < 0`).
    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.to_bits() == y.to_bits() || (*x == 0.0 && *y == 0.0))
    }

    /// Every weight of a repacked Q4_0 or Q5_0 tensor dequantizes to ggml's bits (but for the
    /// sign of a zero), with ordinary, negative, zero and subnormal scales (Q4_1 layout) and a
    /// scale past 8,188 (Q8_0 layout), and a row count that is not a multiple of eight.
    #[test]
    fn repacked_weights_dequantize_to_ggml_s_bits() {
        let (rows, cols) = (13, 96);
        let scales: [&dyn Fn(usize) -> f32; 4] = [
            &|i| (i as f32 * 0.37 + 0.1).sin() * 0.05,
            &|i| {
                if i == 5 {
                    9000.0
                } else {
                    0.01 * (i + 1) as f32
                }
            },
            &|i| 6e-8 * (i % 7 + 1) as f32,
            &|i| 0.01 * (i % 5) as f32 - 0.02,
        ];
        for scale in scales {
            let raw = blocks(rows, cols, Q4_0_BLOCK_BYTES, scale);
            let m = QuantMatrix::from_ggml_q4_0_bytes(&raw, rows, cols).expect("q4_0");
            assert!(same_bits(
                &m.dequantize(),
                &reference::<BlockQ4_0>(&raw, 18)
            ));
            let raw = blocks(rows, cols, Q5_0_BLOCK_BYTES, scale);
            let m = QuantMatrix::from_ggml_q5_0_bytes(&raw, rows, cols).expect("q5_0");
            assert!(same_bits(
                &m.dequantize(),
                &reference::<BlockQ5_0>(&raw, 22)
            ));
        }
        // The large scale took the Q8_0 layout, the others Q4_1's.
        let raw = blocks(rows, cols, Q4_0_BLOCK_BYTES, |i| {
            if i == 5 {
                9000.0
            } else {
                0.5
            }
        });
        let m = QuantMatrix::from_ggml_q4_0_bytes(&raw, rows, cols).expect("q4_0");
        assert!(matches!(m.packed, Packed::Q8_0(_)));
        let raw = blocks(rows, cols, Q4_0_BLOCK_BYTES, |i| {
            if i == 5 {
                -8188.0
            } else {
                6e-8
            }
        });
        let m = QuantMatrix::from_ggml_q4_0_bytes(&raw, rows, cols).expect("q4_0");
        assert!(matches!(m.packed, Packed::Q4_1(_)));
    }

    /// The decode kernels over repacked weights against the f64 product of ggml's
    /// dequantized weights and the same 8-bit activations (what the kernels multiply):
    /// within 1e-5 of the output's largest value (f32 sums of 384 products).
    #[test]
    fn repacked_matrices_multiply_like_the_f64_product() {
        use crate::kernels::matmul::q8_1::Q8_1Vector;
        let (rows, cols) = (24, 384);
        let x: Vec<f32> = (0..2 * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
            .collect();
        for (name, raw, m) in [
            {
                let raw = blocks(rows, cols, Q4_0_BLOCK_BYTES, |i| 0.01 + 1e-4 * i as f32);
                let m = QuantMatrix::from_ggml_q4_0_bytes(&raw, rows, cols).expect("q4_0");
                ("q4_0", reference::<BlockQ4_0>(&raw, 18), m)
            },
            {
                let raw = blocks(rows, cols, Q5_0_BLOCK_BYTES, |i| 0.02 - 1e-4 * i as f32);
                let m = QuantMatrix::from_ggml_q5_0_bytes(&raw, rows, cols).expect("q5_0");
                ("q5_0", reference::<BlockQ5_0>(&raw, 22), m)
            },
        ] {
            let y = m.matmul(&x).expect("matmul");
            for v in 0..2 {
                let q = Q8_1Vector::quantize(&x[v * cols..(v + 1) * cols]);
                let xq: Vec<f32> =
                    q.qs.iter()
                        .zip(&q.d)
                        .flat_map(|(b, &d)| b.iter().map(move |&c| c as f32 * d))
                        .collect();
                let exact: Vec<f64> = (0..rows)
                    .map(|r| {
                        (0..cols)
                            .map(|c| raw[r * cols + c] as f64 * xq[c] as f64)
                            .sum()
                    })
                    .collect();
                let scale = exact.iter().fold(0f64, |a, b| a.max(b.abs()));
                for (r, e) in exact.iter().enumerate() {
                    let got = y[v * rows + r] as f64;
                    assert!(
                        (got - e).abs() <= 1e-5 * scale,
                        "{name} row {r}: {got} vs {e}"
                    );
                }
            }
        }
    }
}

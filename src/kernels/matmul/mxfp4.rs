//! MXFP4 weights (gpt-oss's experts; OCP Microscaling Formats v1.0, ggml `block_mxfp4`):
//! blocks of 32 values, one E8M0 scale byte `e` and 16 bytes of 4-bit E2M1 codes (value j in
//! the low nibble of byte j, value j + 16 in its high nibble, as Q4_0). ggml reads a code as
//! the doubled E2M1 value `k ∈ {0, ±1, ±2, ±3, ±4, ±6, ±8, ±12}` ([`KVALUES`]) and the scale
//! as `d = 2^(e − 128)` (`ggml_e8m0_to_fp32_half`): `w = d · k`, exact in f32.
//!
//! Our layout ([`Mxfp4x8`]) keeps the file's 17 bytes per block: eight rows' scale bytes, and
//! their codes in [`crate::kernels::matmul::q4_1_q8_0`]'s chunk pairs. The kernels look the
//! codes up as i8 and sum `k · q_x` exactly in integers, then scale by `d · d_x`: the same
//! bits on the AVX2, VNNI and portable paths.
use crate::kernels::matmul::q4_1_q8_0::{fill_nibbles, nibble_code, ROWS};
use crate::kernels::matmul::q8_1::Q8_1Vector;

/// Bytes of one ggml MXFP4 block: the scale byte and 16 bytes of codes.
pub const MXFP4_BLOCK_BYTES: usize = 17;

/// E2M1 codes as doubled values (ggml `kvalues_mxfp4`).
pub const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// One block column (32 values) of eight MXFP4 rows: `w[r][j] = 2^(e[r] − 128) · k[r][j]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Mxfp4x8 {
    /// Per row: the E8M0 scale byte.
    pub e: [u8; ROWS],
    /// Chunk pairs of codes, as [`crate::kernels::matmul::q4_1_q8_0::Q4_1x8::qs`].
    pub qs: [[u8; 32]; 4],
}

/// `2^(e − 128)` exactly (ggml `ggml_e8m0_to_fp32_half`): the bits `(e − 1) << 23` from
/// `e = 2` on, the subnormals `2^−128` and `2^−127` below.
#[inline]
pub fn e8m0_half(e: u8) -> f32 {
    let bits = match e {
        0 | 1 => 0x0020_0000u32 << e,
        _ => (e as u32 - 1) << 23,
    };
    f32::from_bits(bits)
}

/// Where ggml MXFP4 bytes (`[rows, cols]`, blocks of [`MXFP4_BLOCK_BYTES`]) hold a scale
/// byte of 255, E8M0's NaN (OCP MX v1.0): the first such block as (row, block in the row),
/// for a loader to refuse the file as damaged, as a Q8_0 file's non-finite scale is.
pub fn nan_scale(bytes: &[u8], cols: usize) -> Option<(usize, usize)> {
    let per_row = (cols / 32).max(1);
    let i = super::pages::first_block(bytes, MXFP4_BLOCK_BYTES, |b| b[0] == 255)?;
    Some((i / per_row, i % per_row))
}

/// Copy one ggml `block_mxfp4` into row `r` of `g`.
pub fn fill_mxfp4(g: &mut Mxfp4x8, r: usize, b: &[u8]) {
    g.e[r] = b[0];
    fill_nibbles(&mut g.qs, r, &b[1..17]);
}

/// Per row, `Σ_e k[r][e] · xq[e]` (exact integers), in storage order: byte `s` of pair p
/// holds elements `8p + s % 4` (low nibble) and `8p + 4 + s % 4` (high nibble) of row `s / 4`.
fn isums(blk: &Mxfp4x8, xq: &[i8; 32]) -> [i32; ROWS] {
    let mut isum = [0i32; ROWS];
    for (p, pair) in blk.qs.iter().enumerate() {
        for (s, &byte) in pair.iter().enumerate() {
            let e = 8 * p + s % 4;
            let lo = KVALUES[(byte & 0x0F) as usize] as i32 * xq[e] as i32;
            let hi = KVALUES[(byte >> 4) as usize] as i32 * xq[e + 4] as i32;
            isum[s / 4] += lo + hi;
        }
    }
    isum
}

/// Portable version of the AVX2 and VNNI MXFP4 kernels: the same exact integer sums and
/// float steps, so the same bits. `x` must hold at least `blocks.len()` blocks.
pub fn mxfp4x8_dot(blocks: &[Mxfp4x8], x: &Q8_1Vector) -> [f32; ROWS] {
    let mut out = [0f32; ROWS];
    for (b, blk) in blocks.iter().enumerate() {
        let isum = isums(blk, &x.qs[b]);
        for (r, o) in out.iter_mut().enumerate() {
            *o = (isum[r] as f32).mul_add(e8m0_half(blk.e[r]) * x.d[b], *o);
        }
    }
    out
}

/// Row `r` of block column `blk` as 32 f32 values: `2^(e − 128) · k`, ggml's dequantization
/// bit for bit.
pub fn dequantize_mxfp4(blk: &Mxfp4x8, r: usize, out: &mut [f32]) {
    let d = e8m0_half(blk.e[r]);
    for (e, o) in out.iter_mut().enumerate().take(32) {
        *o = d * KVALUES[nibble_code(&blk.qs, r, e) as usize] as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::matmul::{Kernel, QuantMatrix};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
            .collect()
    }

    /// gguf-py's `quants.dequantize(MXFP4)` (ggml's reference) of 40 blocks, every edge
    /// scale byte among them (0 and 1: subnormal scales; 255: 2^127, whose ±12 overflow to
    /// ±inf in both), recorded by `scripts/mxfp4-fixture.py`: ours gives the same bits.
    #[test]
    fn dequantization_is_gguf_py_s_bit_for_bit() {
        let fixture: serde_json::Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/mxfp4/gguf-py-dequantize.json"
        ))
        .expect("fixture");
        let blocks = fixture["blocks"].as_array().expect("blocks");
        let values = fixture["values"].as_array().expect("values");
        let bytes: Vec<u8> = blocks
            .iter()
            .flat_map(|b| hex(b.as_str().expect("hex")))
            .collect();
        // One row of all the blocks, and the same blocks as rows of one block each.
        for (rows, cols) in [(1, 32 * blocks.len()), (blocks.len(), 32)] {
            let m = QuantMatrix::from_ggml_mxfp4_bytes(&bytes, rows, cols).expect("repack");
            let got = m.dequantize();
            for (b, want) in values.iter().enumerate() {
                let want = hex(want.as_str().expect("hex"));
                for j in 0..32 {
                    let w = u32::from_be_bytes([
                        want[4 * j],
                        want[4 * j + 1],
                        want[4 * j + 2],
                        want[4 * j + 3],
                    ]);
                    assert_eq!(got[32 * b + j].to_bits(), w, "block {b} value {j}");
                }
            }
        }
        assert_eq!(e8m0_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_half(128), 1.0);
    }

    /// Random MXFP4 bytes for `rows × cols` (scales 118..134, one block in eight with the
    /// subnormal or first normal scale 0, 1 or 2, and every block of row 0, whose tiny
    /// result then shows those scales' bits; any codes).
    fn random(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        };
        (0..rows * cols / 32)
            .flat_map(|i| {
                let e = match (i < cols / 32, next() % 8) {
                    (true, _) | (_, 0) => next() % 3,
                    _ => 118 + next() % 16,
                };
                let mut b = vec![e];
                b.extend((0..16).map(|_| next()));
                b
            })
            .collect()
    }

    /// The AVX2, VNNI and portable kernels give the same bits for 1 to 11 inputs, and the
    /// result is the dequantized weights' dot product with the 8-bit inputs (exact products
    /// of powers of two and small integers: within f32 rounding of the f64 sum).
    #[test]
    fn kernels_agree_to_the_bit_and_equal_the_dequantized_dot() {
        let (rows, cols) = (24, 256);
        let w =
            QuantMatrix::from_ggml_mxfp4_bytes(&random(rows, cols, 3), rows, cols).expect("repack");
        let dense = w.dequantize();
        let mut kernels = vec![Kernel::Scalar];
        #[cfg(target_arch = "x86_64")]
        match Kernel::detect() {
            Kernel::Avx2 => kernels.push(Kernel::Avx2),
            Kernel::Vnni | Kernel::Vnni512 => kernels.extend([Kernel::Avx2, Kernel::Vnni]),
            Kernel::Scalar => {}
        }
        for n in 1..=11 {
            let xs: Vec<Q8_1Vector> = (0..n)
                .map(|v| {
                    let x: Vec<f32> = (0..cols)
                        .map(|i| ((i * 13 + v * 7) as f32 * 0.31).sin() * (1.0 + v as f32))
                        .collect();
                    Q8_1Vector::quantize(&x)
                })
                .collect();
            let mut first: Option<Vec<u32>> = None;
            for &k in &kernels {
                let mut y = vec![0f32; n * rows];
                for g in 0..rows / ROWS {
                    w.group_dot_many(k, g, &xs, &mut |v, ys: &[f32]| {
                        y[v * rows + g * ROWS..v * rows + (g + 1) * ROWS].copy_from_slice(ys)
                    });
                }
                let bits: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
                match &first {
                    None => first = Some(bits),
                    Some(f) => assert_eq!(&bits, f, "{k:?}, {n} inputs"),
                }
                for (v, x) in xs.iter().enumerate() {
                    for r in 0..rows {
                        let want: f64 = (0..cols)
                            .map(|i| {
                                dense[r * cols + i] as f64
                                    * x.qs[i / 32][i % 32] as f64
                                    * x.d[i / 32] as f64
                            })
                            .sum();
                        let got = y[v * rows + r] as f64;
                        assert!(
                            (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                            "{k:?} row {r} input {v}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

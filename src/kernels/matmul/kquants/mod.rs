//! ggml's K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and Q5_1, repacked at load into the
//! [`Q8Hx8`] layout: 8-bit codes with an f32 scale and offset per half block, every weight
//! ggml's value.
//!
//! Formats from ggml-common.h, weights as ggml-quants.c's reference dequantizers compute
//! them (candle's `k_quants` block types are the same code, and the test oracle):
//!
//! | type | bytes / weights | one block | weight |
//! |---|---|---|---|
//! | Q2_K | 84 / 256 | 16 × (4-bit sc, 4-bit m) per 16, 2-bit q, f16 d, dmin | `d·sc · q − dmin·m` |
//! | Q3_K | 110 / 256 | 3-bit q (2 low bits + a high-bit mask), 16 × 6-bit sc per 16, f16 d | `d·(sc − 32) · (q − 4)` |
//! | Q4_K | 144 / 256 | f16 d, dmin, 8 × (6-bit sc, 6-bit m) per 32, 4-bit q | `d·sc · q − dmin·m` |
//! | Q5_K | 176 / 256 | as Q4_K, plus a fifth bit per weight | `d·sc · q − dmin·m` |
//! | Q6_K | 210 / 256 | 4 low + 2 high bits per q, 16 × i8 sc per 16, f16 d | `d·sc · (q − 32)` |
//! | Q5_1 | 24 / 32 | f16 d, m, 5-bit q | `d · q + m` |
//!
//! Each half block (16 weights) keeps `d' = d · sc` (ggml's `d1`/`dl`, computed in f32 the
//! same way) and an offset `m'`: `−dmin · m` (ggml's `m1`/`ml`), `−32 · d'` (Q6_K), `−4 · d'`
//! (Q3_K), or `m` (Q5_1); codes stay unsigned (0..=63). Then `d' · q + m'` is ggml's weight:
//! for the minima it is ggml's own expression; for Q6_K and Q3_K, `d'` has at most 18
//! significant bits (11 of the f16, 7 of the integer), `d' · q` at most 24 and the sum
//! `d' · (q − 32)` at most 24, so each step is exact in f32 and equals ggml's
//! `d' · (q − 32)` — but for the sign of a zero weight (`q = 32`: ggml's `d' · 0` is −0 where
//! `d' < 0`, ours +0; equal as numbers).
use super::{load, Packed, QuantMatrix, QK};
use crate::kernels::matmul::q2_k_q3_k::{fill_q8h, HalfScaled, Q8Hx8};
use crate::kernels::matmul::q4_1_q8_0::{fill_nibbles, ROWS};
use crate::kernels::matmul::q4_k::{Q4KSuper, Q4Kx8, BLOCKS_PER_SUPER, QK_K};
use crate::kernels::matmul::q5::{fill_codes, fill_q5_1, Q5Kx8};
use crate::kernels::matmul::q6_k::{fill_q6k, Q6KSuper, Q6Kx8};
use anyhow::{bail, Result};
use half::f16;

/// Bytes of one ggml `block_q2_K`.
pub const Q2_K_BLOCK_BYTES: usize = 84;
/// Bytes of one ggml `block_q3_K`.
pub const Q3_K_BLOCK_BYTES: usize = 110;
/// Bytes of one ggml `block_q4_K`.
pub const Q4_K_BLOCK_BYTES: usize = 144;
/// Bytes of one ggml `block_q5_K`.
pub const Q5_K_BLOCK_BYTES: usize = 176;
/// Bytes of one ggml `block_q6_K`.
pub const Q6_K_BLOCK_BYTES: usize = 210;
/// Bytes of one ggml `block_q5_1`.
pub const Q5_1_BLOCK_BYTES: usize = 24;

/// The f16 at `b[at..at + 2]` as f32.
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Q4_K's and Q5_K's scale and minimum of sub-block `j` (0..8) from their 12 packed bytes
/// (ggml's `get_scale_min_k4`): six bits each.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// A 32-weight block with one scale and offset for both halves.
fn whole(q: [u8; 32], d: f32, m: f32) -> HalfScaled {
    HalfScaled {
        q,
        d: [d; 2],
        m: [m; 2],
    }
}

/// `block_q4_K` → 8 blocks of 32: sub-block 2k is the low nibbles of `qs[32k .. 32k + 32]`,
/// 2k + 1 their high nibbles.
fn q4_k(b: &[u8], out: &mut [HalfScaled]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qs) = (&b[4..16], &b[16..144]);
    for (j, o) in out.iter_mut().enumerate().take(8) {
        let (sc, m) = scale_min_k4(j, scales);
        let (bytes, shift) = (&qs[32 * (j / 2)..][..32], 4 * (j % 2));
        let q = std::array::from_fn(|l| (bytes[l] >> shift) & 0x0F);
        *o = whole(q, d * sc as f32, -(dmin * m as f32));
    }
}

/// `block_q5_K` → 8 blocks of 32: as Q4_K, with bit `j` of `qh[l]` on top of sub-block j's
/// element l.
fn q5_k(b: &[u8], out: &mut [HalfScaled]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for (j, o) in out.iter_mut().enumerate().take(8) {
        let (sc, m) = scale_min_k4(j, scales);
        let (bytes, shift) = (&qs[32 * (j / 2)..][..32], 4 * (j % 2));
        let q = std::array::from_fn(|l| ((bytes[l] >> shift) & 0x0F) | (((qh[l] >> j) & 1) << 4));
        *o = whole(q, d * sc as f32, -(dmin * m as f32));
    }
}

/// `block_q6_K` → 8 blocks of 32. Per 128 weights n (0, 1): element l (0..32) of quarter
/// k (0..4) is the low (k < 2) or high nibble of `ql[64n + 32(k % 2) + l]` with bits
/// `2k, 2k + 1` of `qh[32n + l]` on top, scaled by `sc[8n + 2k + l / 16]`.
fn q6_k(b: &[u8], out: &mut [HalfScaled]) {
    let d = f16_at(b, 208);
    for (j, o) in out.iter_mut().enumerate().take(8) {
        let (q, sc) = q6_k_block(b, j);
        let ds: [f32; 2] = sc.map(|s| d * s as f32);
        *o = HalfScaled {
            q,
            d: ds,
            m: ds.map(|s| -32.0 * s),
        };
    }
}

/// Block column `j` (0..8) of a `block_q6_K`: its 32 codes (0..=63) and its two scales.
fn q6_k_block(b: &[u8], j: usize) -> ([u8; 32], [i8; 2]) {
    let (ql, qh, sc) = (&b[..128], &b[128..192], &b[192..208]);
    let (n, k) = (j / 4, j % 4);
    let (low, high) = (&ql[64 * n + 32 * (k % 2)..][..32], &qh[32 * n..][..32]);
    let q = std::array::from_fn(|l| {
        ((low[l] >> (4 * (k / 2))) & 0x0F) | (((high[l] >> (2 * k)) & 3) << 4)
    });
    (q, [sc[8 * n + 2 * k] as i8, sc[8 * n + 2 * k + 1] as i8])
}

/// `block_q3_K`'s 16 scales (6 bits each, before subtracting 32) from their 12 packed bytes:
/// the low four bits of scales 0..8 and 8..16 are the low and high nibbles of bytes 0..8,
/// their top two bits the bit pairs of bytes 8..12.
fn q3_k_scales(s: &[u8]) -> [i32; 16] {
    std::array::from_fn(|i| {
        let low = (s[i % 8] >> (4 * (i / 8))) & 0x0F;
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        (low | (high << 4)) as i32 - 32
    })
}

/// `block_q3_K` → 8 blocks of 32. Per 128 weights n, quarter k takes bits `2k, 2k + 1` of
/// `qs[32n + l]` and bit `4n + k` of `hmask[l]` (set: +4 on top); scales per 16.
fn q3_k(b: &[u8], out: &mut [HalfScaled]) {
    let (hmask, qs) = (&b[..32], &b[32..96]);
    let scales = q3_k_scales(&b[96..108]);
    let d = f16_at(b, 108);
    for (j, o) in out.iter_mut().enumerate().take(8) {
        let (n, k) = (j / 4, j % 4);
        let low = &qs[32 * n..][..32];
        let q = std::array::from_fn(|l| {
            ((low[l] >> (2 * k)) & 3) | (((hmask[l] >> (4 * n + k)) & 1) << 2)
        });
        let ds: [f32; 2] = std::array::from_fn(|h| d * scales[2 * j + h] as f32);
        *o = HalfScaled {
            q,
            d: ds,
            m: ds.map(|s| -4.0 * s),
        };
    }
}

/// `block_q2_K` → 8 blocks of 32. Per 128 weights n, quarter k takes bits `2k, 2k + 1` of
/// `qs[32n + l]`; scale and minimum per 16 from `scales[2j + h]` (low and high nibble).
fn q2_k(b: &[u8], out: &mut [HalfScaled]) {
    let (scales, qs) = (&b[..16], &b[16..80]);
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    for (j, o) in out.iter_mut().enumerate().take(8) {
        let (n, k) = (j / 4, j % 4);
        let low = &qs[32 * n..][..32];
        let q = std::array::from_fn(|l| (low[l] >> (2 * k)) & 3);
        let sm = [scales[2 * j], scales[2 * j + 1]];
        *o = HalfScaled {
            q,
            d: sm.map(|s| d * (s & 0x0F) as f32),
            m: sm.map(|s| -(dmin * (s >> 4) as f32)),
        };
    }
}

/// (The tests' second layout of Q5_1.) `block_q5_1` → 1 block: element j (< 16) is the low nibble of `qs[j]` with bit j of `qh`
/// on top, element j + 16 the high nibble with bit j + 16.
#[cfg(test)]
fn q5_1(b: &[u8], out: &mut [HalfScaled]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    let q = std::array::from_fn(|e| {
        let (byte, shift) = (qs[e % 16], 4 * (e / 16));
        ((byte >> shift) & 0x0F) | ((((qh >> e) & 1) as u8) << 4)
    });
    out[0] = whole(q, d, m);
}

/// How a ggml type becomes [`Q8Hx8`] blocks: its name, block bytes, weights per block, and
/// the decoder of one block into its 32-weight blocks.
struct Format {
    name: &'static str,
    block_bytes: usize,
    weights: usize,
    decode: fn(&[u8], &mut [HalfScaled]),
}

const Q2_K: Format = Format {
    name: "Q2_K",
    block_bytes: Q2_K_BLOCK_BYTES,
    weights: QK_K,
    decode: q2_k,
};
const Q3_K: Format = Format {
    name: "Q3_K",
    block_bytes: Q3_K_BLOCK_BYTES,
    weights: QK_K,
    decode: q3_k,
};
const Q4_K: Format = Format {
    name: "Q4_K",
    block_bytes: Q4_K_BLOCK_BYTES,
    weights: QK_K,
    decode: q4_k,
};
const Q5_K: Format = Format {
    name: "Q5_K",
    block_bytes: Q5_K_BLOCK_BYTES,
    weights: QK_K,
    decode: q5_k,
};
const Q6_K: Format = Format {
    name: "Q6_K",
    block_bytes: Q6_K_BLOCK_BYTES,
    weights: QK_K,
    decode: q6_k,
};
#[cfg(test)]
const Q5_1: Format = Format {
    name: "Q5_1",
    block_bytes: Q5_1_BLOCK_BYTES,
    weights: QK,
    decode: q5_1,
};

/// The bytes of one row of a `[rows, cols]` tensor `bytes` of format `f`. Errors: rows that
/// are not whole blocks, or a byte count that does not match.
fn row_bytes(f: &Format, bytes: &[u8], rows: usize, cols: usize) -> Result<usize> {
    if cols == 0 || !cols.is_multiple_of(f.weights) {
        bail!(
            "{} rows of {cols} values are not whole blocks of {}",
            f.name,
            f.weights
        );
    }
    let row_bytes = cols / f.weights * f.block_bytes;
    let need = rows * row_bytes;
    if bytes.len() != need {
        bail!(
            "{} tensor [{rows}, {cols}] needs {need} bytes, got {}",
            f.name,
            bytes.len()
        );
    }
    Ok(row_bytes)
}

/// The `[rows, cols]` tensor `bytes` of format `f` as [`Q8Hx8`] groups of eight rows, group
/// after group (the 512-bit kernels do not read this layout, so pairs never interleave).
/// Errors: as [`row_bytes`].
fn pack(f: &Format, bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
    let row_bytes = row_bytes(f, bytes, rows, cols)?;
    let bpr = cols / QK;
    let per = f.weights / QK;
    let group_bytes = ROWS * row_bytes;
    let blocks = super::pages::in_runs(rows.div_ceil(ROWS) * bpr, bpr, |g, group: &mut [Q8Hx8]| {
        let src = &bytes[g * group_bytes..((g + 1) * group_bytes).min(bytes.len())];
        let mut subs = [HalfScaled::default(); QK_K / QK];
        for (r, row) in src.chunks_exact(row_bytes).enumerate() {
            for (k, block) in row.chunks_exact(f.block_bytes).enumerate() {
                (f.decode)(block, &mut subs[..per]);
                for (s, sub) in subs[..per].iter().enumerate() {
                    fill_q8h(&mut group[k * per + s], r, sub);
                }
            }
        }
    });
    Ok(QuantMatrix::own_layout(rows, cols, Packed::Q8H(blocks)))
}

/// A `[rows, cols]` tensor of K-quant format `f` in a layout of its own: per group of eight
/// rows, its block columns (`B`, eight per super-block) and its super-blocks (`S`), group
/// after group; `fill(blocks, super, r, block)` copies one ggml super-block into row `r` of
/// a super-block column's eight blocks and its `S`. Errors: as [`row_bytes`].
fn pack_super<B, S>(
    f: &Format,
    bytes: &[u8],
    (rows, cols): (usize, usize),
    fill: impl Fn(&mut [B], &mut S, usize, &[u8]) + Sync,
) -> Result<(Vec<B>, Vec<S>)>
where
    B: Default + Clone + Send + Sync,
    S: Default + Clone + Send + Sync,
{
    let row_bytes = row_bytes(f, bytes, rows, cols)?;
    let (bpr, spr, groups) = (cols / QK, cols / QK_K, rows.div_ceil(ROWS));
    let group_bytes = ROWS * row_bytes;
    Ok(super::pages::grouped(
        groups,
        (bpr, spr),
        |g, group: &mut [B], group_supers: &mut [S]| {
            let src = &bytes[g * group_bytes..((g + 1) * group_bytes).min(bytes.len())];
            for (r, row) in src.chunks_exact(row_bytes).enumerate() {
                for (k, b) in row.chunks_exact(f.block_bytes).enumerate() {
                    let column = &mut group[k * BLOCKS_PER_SUPER..(k + 1) * BLOCKS_PER_SUPER];
                    fill(column, &mut group_supers[k], r, b);
                }
            }
        },
    ))
}

/// Row `r` of a super-block column of Q4_K's own layout ([`crate::kernels::matmul::q4_k`]) from one
/// `block_q4_K`: f16 `d`, `dmin`, each sub-block's 6-bit scale and minimum, its codes.
fn fill_q4_k(column: &mut [Q4Kx8], s: &mut Q4KSuper, r: usize, b: &[u8]) {
    s.d[r] = u16::from_le_bytes([b[0], b[1]]);
    s.dmin[r] = u16::from_le_bytes([b[2], b[3]]);
    let (scales, qs) = (&b[4..16], &b[16..144]);
    for (j, blk) in column.iter_mut().enumerate() {
        (blk.sc[r], blk.mn[r]) = scale_min_k4(j, scales);
        // Sub-block j's codes (low or high nibbles of 32 bytes) as ggml's Q4_1 lays out a
        // block: element l low and l + 16 high in byte l.
        let (src, shift) = (&qs[32 * (j / 2)..][..32], 4 * (j % 2));
        let q = |l: usize| (src[l] >> shift) & 0x0F;
        let nibbles: [u8; 16] = std::array::from_fn(|l| q(l) | (q(l + 16) << 4));
        fill_nibbles(&mut blk.qs, r, &nibbles);
    }
}

/// Row `r` of a super-block column of Q5_K's own layout ([`crate::kernels::matmul::q5`]) from one
/// `block_q5_K`: as Q4_K's, with bit `j` of `qh[l]` on top of sub-block j's element l.
fn fill_q5_k(column: &mut [Q5Kx8], s: &mut Q4KSuper, r: usize, b: &[u8]) {
    s.d[r] = u16::from_le_bytes([b[0], b[1]]);
    s.dmin[r] = u16::from_le_bytes([b[2], b[3]]);
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for (j, blk) in column.iter_mut().enumerate() {
        (blk.sc[r], blk.mn[r]) = scale_min_k4(j, scales);
        let (src, shift) = (&qs[32 * (j / 2)..][..32], 4 * (j % 2));
        let q = std::array::from_fn(|l| ((src[l] >> shift) & 0x0F) | (((qh[l] >> j) & 1) << 4));
        fill_codes(&mut blk.codes, r, &q);
    }
}

/// Row `r` of a super-block column of Q6_K's own layout ([`crate::kernels::matmul::q6_k`]) from one
/// `block_q6_K`: f16 `d`, each block column's codes and two scales.
fn fill_q6_k(column: &mut [Q6Kx8], s: &mut Q6KSuper, r: usize, b: &[u8]) {
    s.d[r] = u16::from_le_bytes([b[208], b[209]]);
    for (j, blk) in column.iter_mut().enumerate() {
        let (q, sc) = q6_k_block(b, j);
        fill_q6k(blk, r, &q, sc);
    }
}

impl QuantMatrix {
    /// Parse raw ggml Q2_K bytes of a `[rows, cols]` tensor into the [`Q8Hx8`] layout.
    /// Errors: `cols` not a multiple of 256, or a byte count that does not match.
    pub fn from_ggml_q2_k_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        pack(&Q2_K, bytes, rows, cols)
    }

    /// Parse raw ggml Q3_K bytes (as [`Self::from_ggml_q2_k_bytes`]).
    pub fn from_ggml_q3_k_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        pack(&Q3_K, bytes, rows, cols)
    }

    /// Parse raw ggml Q4_K bytes into Q4_K's own layout ([`crate::kernels::matmul::q4_k`]; errors as
    /// [`Self::from_ggml_q2_k_bytes`]).
    pub fn from_ggml_q4_k_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        let (blocks, supers) = pack_super(&Q4_K, bytes, (rows, cols), fill_q4_k)?;
        Ok(Self::own_layout(rows, cols, Packed::Q4K { blocks, supers }))
    }

    /// Q4_K bytes in the [`Q8Hx8`] layout (the tests compare the two layouts).
    #[cfg(test)]
    pub(super) fn q4_k_as_q8h(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        pack(&Q4_K, bytes, rows, cols)
    }

    /// Parse raw ggml Q5_K bytes into Q5_K's own layout ([`crate::kernels::matmul::q5`]; errors as
    /// [`Self::from_ggml_q2_k_bytes`]).
    pub fn from_ggml_q5_k_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        let (blocks, supers) = pack_super(&Q5_K, bytes, (rows, cols), fill_q5_k)?;
        Ok(Self::own_layout(rows, cols, Packed::Q5K { blocks, supers }))
    }

    /// Q5_K bytes in the [`Q8Hx8`] layout (the tests compare the two layouts).
    #[cfg(test)]
    pub(super) fn q5_k_as_q8h(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        pack(&Q5_K, bytes, rows, cols)
    }

    /// Parse raw ggml Q6_K bytes into Q6_K's own layout ([`crate::kernels::matmul::q6_k`]; errors as
    /// [`Self::from_ggml_q2_k_bytes`]).
    pub fn from_ggml_q6_k_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        let (blocks, supers) = pack_super(&Q6_K, bytes, (rows, cols), fill_q6_k)?;
        Ok(Self::own_layout(rows, cols, Packed::Q6K { blocks, supers }))
    }

    /// A matrix in a layout no 512-bit kernel reads (groups one after the other: Q8H,
    /// Q4K, Q6K, the float layouts).
    pub(super) fn own_layout(rows: usize, cols: usize, packed: Packed) -> QuantMatrix {
        QuantMatrix {
            rows,
            cols,
            packed,
            pairs_interleaved: false,
        }
    }

    /// Q6_K bytes in the [`Q8Hx8`] layout (the tests compare the two layouts).
    #[cfg(test)]
    pub(super) fn q6_k_as_q8h(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        pack(&Q6_K, bytes, rows, cols)
    }

    /// Parse raw ggml Q5_1 bytes of a `[rows, cols]` tensor into the 5-bit layout
    /// ([`crate::kernels::matmul::q5`]). Errors: `cols` not a multiple of 32, or a byte count that
    /// does not match.
    pub fn from_ggml_q5_1_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        let dims = (rows, cols);
        let blocks = load::pack("Q5_1", bytes, Q5_1_BLOCK_BYTES, dims, fill_q5_1, false)?;
        Ok(Self::own_layout(rows, cols, Packed::Q5_1(blocks)))
    }

    /// Q5_1 bytes in the [`Q8Hx8`] layout (the tests compare the two layouts).
    #[cfg(test)]
    pub(super) fn q5_1_as_q8h(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        pack(&Q5_1, bytes, rows, cols)
    }
}

#[cfg(test)]
mod tests;

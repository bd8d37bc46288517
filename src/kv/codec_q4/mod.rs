//! The 4-bit KV row formats: `q4_0` and `iq4_nl`, both in ggml's 18-byte block of 32 values
//! (ggml-common.h `block_q4_0` and `block_iq4_nl`): an f16 scale `d`, then 16 bytes of
//! nibbles, value `j` of the block in the low nibble of byte `j` and value `16 + j` in its
//! high nibble. A nibble `q` reads back as `book[q] · d`, where `book` is the format's
//! codebook ([`codebook`]):
//!
//! - `q4_0`: `q − 8` (the integers −8 ..= 7), quantized as ggml's `quantize_row_q4_0_ref`:
//!   `d = max / −8` with `max` the value of largest magnitude (sign kept), then
//!   `q = min(15, trunc(x / d + 8.5))`.
//! - `iq4_nl`: ggml's non-linear codebook `kvalues_iq4nl` (denser near 0, −127 ..= 113),
//!   quantized as ggml's `quantize_row_iq4_nl_ref` (the quantizer llama.cpp's CPU backend
//!   uses for an `iq4_nl` KV cache): each value to the nearest codebook entry at
//!   `d₀ = max / −127`, then the scale refitted by weighted least squares,
//!   `d = Σ wqx / Σ wq²` with weights `w = x²`, the nibbles kept. A block whose largest
//!   magnitude is below 1e-15 stores `d = 0` and every nibble 8 (ggml leaves the nibbles of
//!   such a block unspecified; every choice reads back as zeros).
//!
//! Rows are quantized per token along head_dim (design rule R3); missing values of a last,
//! partial block count as zeros (as q8_0 pads).
//!
//! `q4_0r` and `iq4_nlr` store the same blocks of the row rotated first ([`rotate`]: a
//! normalized Walsh–Hadamard transform of each group of up to 128 values
//! ([`rotation_groups`]), as llama.cpp rotates its quantized K/V by default since 0.3.36, PR
//! #21038; QuaRot, Ashkboos et al. 2024). A rotation spreads a few large channels over the
//! whole group, so the block scale no longer follows them. Attention rotates the query the same way (the transform is orthonormal: `Hq · Hk =
//! q · k`) and un-rotates its output (`Σ p Hv = H Σ p v`; `H` is its own inverse).

use crate::kv::KvDtype;

/// Values per 4-bit block (ggml `QK4_0`, `QK4_NL`).
pub const Q4_VALUES: usize = 32;
/// Bytes per 4-bit block: an f16 scale and 16 bytes of nibbles.
pub const Q4_BYTES: usize = 18;

/// q4_0's codebook: nibble `q` is the integer `q − 8`.
pub const Q4_0_BOOK: [i8; 16] = [-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7];

/// iq4_nl's codebook, ggml-common.h `kvalues_iq4nl`.
pub const IQ4_NL_BOOK: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Magnitudes below this make an iq4_nl block all zeros (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// The codebook of a 4-bit dtype (`None` for any other dtype).
pub fn codebook(dtype: KvDtype) -> Option<&'static [i8; 16]> {
    match dtype {
        KvDtype::Q4_0 | KvDtype::Q4_0R => Some(&Q4_0_BOOK),
        KvDtype::Iq4Nl | KvDtype::Iq4NlR => Some(&IQ4_NL_BOOK),
        _ => None,
    }
}

/// The largest rotation group of [`rotate`]. Measured on Gemma 3 (head_dim 256, all 4
/// chunks of the shipped text, q4_0r mean KLD against f16): groups of 64 0.083, of 128
/// 0.074, the whole head 0.113 (q4_0 unrotated 0.089); docs/benchmarks.md has the table.
pub const ROTATION_MAX: usize = 128;

/// The groups [`rotate`] splits a row of `head_dim` values into, in order: power-of-two
/// sizes summing to `head_dim`, each the largest that fits what is left, at most
/// [`ROTATION_MAX`]. 64 and 128 are one group, 256 is 128 + 128, 80 is 64 + 16 and 96 is
/// 64 + 32: every value is rotated (a group of 1 is its own value).
pub fn rotation_groups(head_dim: usize) -> Vec<usize> {
    let mut groups = Vec::new();
    let mut left = head_dim;
    while left > 0 {
        let g = (1usize << left.ilog2()).min(ROTATION_MAX);
        groups.push(g);
        left -= g;
    }
    groups
}

/// Rotate `row` (one head's `head_dim` values) in place: each group of [`rotation_groups`]
/// by the normalized Walsh–Hadamard matrix of its size (`H/√g`: orthonormal and symmetric,
/// so its own inverse up to rounding). A fixed sequence of f32 additions, subtractions and
/// one scaling per value, so a row's result depends on the row alone (design rules R1, R3).
pub fn rotate(row: &mut [f32]) {
    let mut at = 0;
    for g in rotation_groups(row.len()) {
        hadamard(&mut row[at..at + g]);
        at += g;
    }
}

/// The normalized Walsh–Hadamard transform of `g` (a power-of-two length) in place.
fn hadamard(g: &mut [f32]) {
    let n = g.len();
    let mut h = 1;
    while h < n {
        for i in (0..n).step_by(2 * h) {
            for j in i..i + h {
                let (a, b) = (g[j], g[j + h]);
                g[j] = a + b;
                g[j + h] = a - b;
            }
        }
        h *= 2;
    }
    let scale = (1.0 / (n as f64).sqrt()) as f32;
    if n > 1 {
        for v in g.iter_mut() {
            *v *= scale;
        }
    }
}

/// Value `j` of a block of up to 32 values; missing ones count as 0.
#[inline(always)]
fn at(x: &[f32], j: usize) -> f32 {
    x.get(j).copied().unwrap_or(0.0)
}

/// The value of largest magnitude, sign kept (the first one on ties), over the 32 values.
#[inline(always)]
fn signed_max(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for j in 0..Q4_VALUES {
        let v = at(x, j);
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// Pack 32 nibbles into the block's 16 bytes: value j low, value 16 + j high.
#[inline(always)]
fn pack(nibbles: &[u8; Q4_VALUES], qs: &mut [u8]) {
    for (j, b) in qs.iter_mut().enumerate().take(Q4_VALUES / 2) {
        *b = nibbles[j] | (nibbles[j + Q4_VALUES / 2] << 4);
    }
}

/// One q4_0 block (18 bytes into `block`) from up to 32 values, as ggml's
/// `quantize_row_q4_0_ref`; `to_f16` rounds the scale to f16 bits (nearest even).
#[inline(always)]
pub(super) fn encode_q4_0_block(x: &[f32], block: &mut [u8], to_f16: impl Fn(f32) -> u16) {
    let (_, max) = signed_max(x);
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    block[..2].copy_from_slice(&to_f16(d).to_le_bytes());
    let mut q = [0u8; Q4_VALUES];
    for (j, n) in q.iter_mut().enumerate() {
        // ggml: MIN(15, (int8_t)(x·id + 8.5f)): truncation toward zero, then at most 15.
        *n = ((at(x, j) * id + 8.5) as i8).min(15) as u8;
    }
    pack(&q, &mut block[2..]);
}

/// The index of the codebook entry nearest `x` (ggml's `best_index_int8`: below the first
/// entry 0, above the last 15, a tie between neighbours goes to the upper one).
#[inline(always)]
fn nearest(book: &[i8; 16], x: f32) -> usize {
    if x <= book[0] as f32 {
        return 0;
    }
    if x >= book[15] as f32 {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < book[mid] as f32 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - (book[hi - 1] as f32) < (book[hi] as f32) - x {
        hi - 1
    } else {
        hi
    }
}

/// One iq4_nl block (18 bytes into `block`) from up to 32 values, as ggml's
/// `quantize_row_iq4_nl_ref` (no importance weights, no scale search).
#[inline(always)]
pub(super) fn encode_iq4_nl_block(x: &[f32], block: &mut [u8], to_f16: impl Fn(f32) -> u16) {
    let book = &IQ4_NL_BOOK;
    let (amax, max) = signed_max(x);
    let mut q = [8u8; Q4_VALUES];
    let mut d = 0f32;
    if amax >= GROUP_MAX_EPS {
        let id = 1.0 / (max / book[0] as f32);
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for (j, n) in q.iter_mut().enumerate() {
            let v = at(x, j);
            let l = nearest(book, id * v);
            *n = l as u8;
            let (w, c) = (v * v, book[l] as f32);
            sumqx += w * c * v;
            sumq2 += w * c * c;
        }
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    }
    block[..2].copy_from_slice(&to_f16(d).to_le_bytes());
    pack(&q, &mut block[2..]);
}

/// Read one 4-bit block back: `out` (up to 32 values) = `book[q] · d`, `of_f16` converting
/// the scale's f16 bits (exactly).
#[inline(always)]
pub(super) fn decode_q4_block(
    book: &[i8; 16],
    block: &[u8],
    out: &mut [f32],
    of_f16: impl Fn(u16) -> f32,
) {
    let d = of_f16(u16::from_le_bytes([block[0], block[1]]));
    for (j, o) in out.iter_mut().enumerate() {
        let b = block[2 + j % (Q4_VALUES / 2)];
        let n = if j < Q4_VALUES / 2 { b & 15 } else { b >> 4 };
        *o = book[n as usize] as f32 * d;
    }
}

#[cfg(test)]
mod tests;

//! f32 rows to ggml Q4_K blocks, as ggml's reference quantizer makes them
//! (ggml-quants.c `quantize_row_q4_K_ref`, what `ggml_quantize_chunk` and `llama-quantize`
//! run without an importance matrix), for `--quantize q4_k`.
//!
//! Per 256-weight super-block: each 32-weight sub-block gets a scale and a minimum from a
//! weighted least-squares search (weights `rms(x) + |x|`; 21 candidate scales around
//! `15 / (max − min)`, keeping the one with the least weighted squared error), then the
//! eight scales and minima are themselves quantized to 6 bits against the super-block's f16
//! `d = max scale / 63` and `dmin = max min / 63`, and the codes are recomputed against those
//! rounded scales. Every step is ggml's f32 arithmetic in ggml's order (its reference code is
//! built without FMA contraction), so the bytes equal libggml's: tested against a fixture
//! made by `ggml_quantize_chunk` (tests/fixtures/q4_k/).
use half::f16;

/// Bytes of one Q4_K block (256 weights).
const BLOCK_BYTES: usize = 144;
const QK_K: usize = 256;

/// ggml's `nearest_int`: round to nearest, ties to even, for |v| < 2^22 (the magic-number
/// trick, exactly: adding 1.5 · 2^23 leaves the rounded integer in the low mantissa bits).
fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0f32).to_bits();
    (bits & 0x007f_ffff) as i32 - 0x0040_0000
}

/// The sub-block search (ggml's `make_qkx2_quants` with `nmax` 15, `rmin` −1, `rdelta`
/// 0.1, 20 steps, squared error): returns `(scale, −min)` and leaves the codes in `l`.
fn scale_and_min(x: &[f32; 32], w: &[f32; 32], l: &mut [u8; 32]) -> (f32, f32) {
    const NMAX: i32 = 15;
    let (mut min, mut max) = (x[0], x[0]);
    let (mut sum_w, mut sum_x) = (w[0], w[0] * x[0]);
    for i in 1..32 {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let mut iscale = NMAX as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best = 0f32;
    for i in 0..32 {
        let q = nearest_int(iscale * (x[i] - min)).clamp(0, NMAX);
        l[i] = q as u8;
        let diff = scale * q as f32 + min - x[i];
        best += w[i] * (diff * diff);
    }
    let mut aux = [0u8; 32];
    for step in 0..=20 {
        iscale = (-1.0 + 0.1 * step as f32 + NMAX as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..32 {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, NMAX);
            aux[i] = q as u8;
            let wl = w[i] * q as f32;
            sum_l += wl;
            sum_l2 += wl * q as f32;
            sum_xl += wl * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut err = 0f32;
            for i in 0..32 {
                let diff = this_scale * aux[i] as f32 + this_min - x[i];
                err += w[i] * (diff * diff);
            }
            if err < best {
                *l = aux;
                best = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// One row of f32 values (a multiple of 256) as ggml Q4_K blocks, appended to `out`.
/// Errors: a row that is not whole super-blocks.
pub fn quantize_row_q4_k(x: &[f32], out: &mut Vec<u8>) -> anyhow::Result<()> {
    if !x.len().is_multiple_of(QK_K) {
        anyhow::bail!(
            "Q4_K rows of {} values are not whole blocks of {QK_K}",
            x.len()
        );
    }
    for sb in x.chunks_exact(QK_K) {
        let mut codes = [[0u8; 32]; 8];
        let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
        let (mut max_scale, mut max_min) = (0f32, 0f32);
        for (j, sub) in sb.chunks_exact(32).enumerate() {
            let sub: &[f32; 32] = sub.try_into().expect("32 values");
            let mut sum_x2 = 0f32;
            for &v in sub {
                sum_x2 += v * v;
            }
            let av_x = (sum_x2 / 32.0).sqrt();
            let w: [f32; 32] = std::array::from_fn(|i| av_x + sub[i].abs());
            (scales[j], mins[j]) = scale_and_min(sub, &w, &mut codes[j]);
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }
        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        let mut packed = [0u8; 12];
        let mut six = [(0u8, 0u8); 8];
        for j in 0..8 {
            let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
            let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
            six[j] = (ls, lm);
            if j < 4 {
                packed[j] = ls;
                packed[j + 4] = lm;
            } else {
                packed[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
                packed[j - 4] |= (ls >> 4) << 6;
                packed[j] |= (lm >> 4) << 6;
            }
        }
        let d = f16::from_f32(max_scale / 63.0);
        let dmin = f16::from_f32(max_min / 63.0);
        for (j, sub) in sb.chunks_exact(32).enumerate() {
            let (sc, m) = six[j];
            let dj = d.to_f32() * sc as f32;
            if dj == 0.0 {
                continue;
            }
            let dm = dmin.to_f32() * m as f32;
            for (c, &v) in codes[j].iter_mut().zip(sub) {
                *c = nearest_int((v + dm) / dj).clamp(0, 15) as u8;
            }
        }
        out.extend_from_slice(&d.to_bits().to_le_bytes());
        out.extend_from_slice(&dmin.to_bits().to_le_bytes());
        out.extend_from_slice(&packed);
        // Sub-blocks 2k (low nibbles) and 2k + 1 (high nibbles) share 32 bytes.
        for pair in codes.chunks_exact(2) {
            out.extend(pair[0].iter().zip(&pair[1]).map(|(lo, hi)| lo | (hi << 4)));
        }
    }
    debug_assert!(out.len().is_multiple_of(BLOCK_BYTES));
    Ok(())
}

//! The decoder's row-wise operations on plain f32 slices: RMSNorm, RoPE, SwiGLU's gate,
//! residual adds. Every output row depends on its input row only, computed by the same
//! code whatever the number of rows, which keeps naive and KV-cached decode bit-identical.
//! Large inputs (prefill) are split across rayon's threads by rows.
use crate::kernels::rowwise::rms_norm::rms_norm_row;
use rayon::prelude::*;
use std::sync::{Arc, RwLock};

/// Below this many values a call runs on the calling thread (forking costs more).
const PARALLEL_VALUES: usize = 1 << 15;

/// Apply `f(row index, row)` to each `width`-value row of `out`, in parallel when large.
/// (A vectorized norm row of 576 values takes ~0.1 µs: the 8 rows of a batched decode step
/// run faster on the calling thread than through a parallel region.)
fn for_rows(out: &mut [f32], width: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if out.len() >= PARALLEL_VALUES {
        out.par_chunks_mut(width)
            .enumerate()
            .for_each(|(i, r)| f(i, r));
    } else {
        out.chunks_mut(width).enumerate().for_each(|(i, r)| f(i, r));
    }
}

/// RMSNorm (Zhang & Sennrich 2019) of each row of `x` (`[n, d]`, `d = w.len()`):
/// `y = x / sqrt(mean(x²) + eps) · w`, candle-nn's `rms_norm` formula (the squares summed
/// in eight lanes, [`crate::kernels::rowwise::rms_norm`]).
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let d = w.len();
    let mut y = vec![0f32; x.len()];
    for_rows(&mut y, d, |i, out| {
        rms_norm_row(&x[i * d..(i + 1) * d], w, eps, out)
    });
    y
}

/// The residual add and the next RMSNorm in one pass: `x += y` row by row, then each
/// updated row normalized as [`rms_norm`] does (`[n, d]`, `d = w.len()`): the same bits as
/// [`add_assign`] then [`rms_norm`], with one parallel region instead of a serial add and a
/// region (prefill-sized inputs).
pub fn add_rms_norm(x: &mut [f32], y: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let d = w.len().max(1);
    let mut out = vec![0f32; x.len()];
    let row = |(xr, (yr, o)): (&mut [f32], (&[f32], &mut [f32]))| {
        for (a, &b) in xr.iter_mut().zip(yr) {
            *a += b;
        }
        rms_norm_row(xr, w, eps, o);
    };
    if x.len() >= PARALLEL_VALUES {
        x.par_chunks_mut(d)
            .zip(y.par_chunks(d).zip(out.par_chunks_mut(d)))
            .for_each(row);
    } else {
        x.chunks_mut(d)
            .zip(y.chunks(d).zip(out.chunks_mut(d)))
            .for_each(row);
    }
    out
}

/// `x += y`, element-wise.
pub fn add_assign(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// SwiGLU's gate (Shazeer 2020): `gate = silu(gate) · up`, `silu(v) = v / (1 + e^−v)`,
/// vectorized ([`crate::kernels::rowwise::glu`]).
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    gated(gate, up, crate::kernels::rowwise::glu::silu_mul);
}

/// GeGLU's gate (Gemma): `gate = gelu_tanh(gate) · up`, vectorized
/// ([`crate::kernels::rowwise::glu::gelu_tanh_mul`]).
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    gated(gate, up, crate::kernels::rowwise::glu::gelu_tanh_mul);
}

/// gpt-oss's clamped SwiGLU ([`crate::model::config::HiddenAct::SwigluOai`]):
/// `g = min(gate, 7)`, `u = clamp(up, −7, 7)`, `gate = g / (1 + e^(−1.702·g)) · (u + 1)`,
/// in f32 as ggml's `ggml_compute_forward_swiglu_oai_f32` writes it.
pub fn swiglu_oai_mul(gate: &mut [f32], up: &[f32]) {
    gated(gate, up, |gate, up| {
        const ALPHA: f32 = 1.702;
        const LIMIT: f32 = 7.0;
        for (g, &u) in gate.iter_mut().zip(up) {
            let x = g.min(LIMIT);
            let y = u.clamp(-LIMIT, LIMIT);
            *g = x / (1.0 + (ALPHA * -x).exp()) * (y + 1.0);
        }
    });
}

/// `f(gate, up)` over the slices, in 2,048-value chunks on the rayon pool for prefill-sized
/// inputs only: vectorized, a batched decode step's 8 × 1,536 values take a few µs, about
/// what a fork costs. Each value's result depends on itself alone, so the split changes no
/// bit.
fn gated(gate: &mut [f32], up: &[f32], f: fn(&mut [f32], &[f32])) {
    if gate.len() >= PARALLEL_VALUES {
        gate.par_chunks_mut(2048)
            .zip(up.par_chunks(2048))
            .for_each(|(g, u)| f(g, u));
    } else {
        f(gate, up);
    }
}

/// Rotary position embedding (Su et al. 2021): tables of `cos` and `sin` of
/// `position · θ_i` (`[positions, head_dim / 2]` row-major, times the attention factor),
/// built at first for [`Rope::INITIAL_POSITIONS`] positions and rebuilt larger (doubling,
/// the same values) when a forward pass reaches past them — so a config claiming a context
/// of millions of tokens costs nothing until such positions are used.
#[derive(Debug)]
pub struct Rope {
    /// `head_dim / 2`.
    pub half: usize,
    /// θ_i, radians per position (`head_dim / 2` values).
    inv_freq: Vec<f32>,
    /// What cos and sin are multiplied by (YaRN's attention factor; 1 otherwise).
    factor: f32,
    /// GGUF/Llama "interleaved" pairs (2i, 2i+1) instead of HF's halves (i, i + d/2).
    pub interleaved: bool,
    tables: RwLock<Arc<RopeTables>>,
}

/// cos and sin for positions `0 .. positions`.
#[derive(Debug)]
struct RopeTables {
    positions: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Clone for Rope {
    fn clone(&self) -> Rope {
        Rope {
            half: self.half,
            inv_freq: self.inv_freq.clone(),
            factor: self.factor,
            interleaved: self.interleaved,
            tables: RwLock::new(self.snapshot()),
        }
    }
}

impl Rope {
    /// Positions the tables cover at first (fewer when the context is shorter).
    pub const INITIAL_POSITIONS: usize = 8192;

    /// RoPE with inverse frequencies `inv_freq` (θ_i, `head_dim / 2` values) and cos and sin
    /// multiplied by `factor`, tables built for `min(positions, INITIAL_POSITIONS)`.
    pub fn new(inv_freq: Vec<f32>, factor: f32, interleaved: bool, positions: usize) -> Rope {
        let tables = build_tables(&inv_freq, factor, positions.min(Self::INITIAL_POSITIONS));
        Rope {
            half: inv_freq.len(),
            inv_freq,
            factor,
            interleaved,
            tables: RwLock::new(Arc::new(tables)),
        }
    }

    /// Positions the tables cover now.
    #[cfg(test)]
    fn positions(&self) -> usize {
        self.snapshot().positions
    }

    fn snapshot(&self) -> Arc<RopeTables> {
        self.tables
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Tables covering positions `0 .. end`, rebuilt (at least doubled) when short.
    fn tables(&self, end: usize) -> Arc<RopeTables> {
        let now = self.snapshot();
        if now.positions >= end {
            return now;
        }
        let mut w = self
            .tables
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if w.positions < end {
            let positions = end.max(2 * w.positions);
            *w = Arc::new(build_tables(&self.inv_freq, self.factor, positions));
        }
        w.clone()
    }
}

/// cos and sin of `(p as f32) · θ_i` (one f32 product, as a matmul of positions by θ does),
/// times `factor` when it is not 1, for positions `0 .. positions`; rows in parallel.
fn build_tables(inv_freq: &[f32], factor: f32, positions: usize) -> RopeTables {
    let half = inv_freq.len();
    // Rows of `half` values, 256 positions per parallel task (a 0-wide table has no rows).
    let row = half.max(1);
    let mut cos = vec![0f32; positions * half];
    let mut sin = vec![0f32; positions * half];
    cos.par_chunks_mut(row * 256)
        .zip(sin.par_chunks_mut(row * 256))
        .enumerate()
        .for_each(|(chunk, (c, s))| {
            for (k, (c, s)) in c.chunks_mut(row).zip(s.chunks_mut(row)).enumerate() {
                let p = (chunk * 256 + k) as f32;
                for ((c, s), &f) in c.iter_mut().zip(s.iter_mut()).zip(inv_freq) {
                    let a = p * f;
                    (*c, *s) = (a.cos(), a.sin());
                    if factor != 1.0 {
                        *c *= factor;
                        *s *= factor;
                    }
                }
            }
        });
    RopeTables {
        positions,
        cos,
        sin,
    }
}

impl Rope {
    /// Reorder `x` (`[n, heads, d]`, as a projection returns it) to head-major
    /// `[heads, n, d]`, rotating each head of row `i` to position `start_pos + i` when
    /// `rotate`, and scaling by `scale`. `norm`: an optional per-head RMSNorm weight
    /// (Qwen3's q_norm / k_norm, `[d]`) applied before the rotation.
    #[allow(clippy::too_many_arguments)]
    pub fn heads_major(
        &self,
        x: &[f32],
        n: usize,
        heads: usize,
        start_pos: usize,
        rotate: bool,
        scale: f32,
        norm: Option<(&[f32], f32)>,
    ) -> Vec<f32> {
        let d = 2 * self.half;
        // Only rotated rows read the tables (V rows are only copied and scaled).
        let tables = rotate.then(|| self.tables(start_pos + n));
        let mut out = vec![0f32; x.len()];
        // One output row of d values per (head, position).
        for_rows(&mut out, d, |idx, o| {
            let (h, i) = (idx / n, idx % n);
            let src = &x[(i * heads + h) * d..][..d];
            match norm {
                Some((w, eps)) => rms_norm_row(src, w, eps, o),
                None => o.copy_from_slice(src),
            }
            let Some(tables) = &tables else {
                for a in o.iter_mut() {
                    *a *= scale;
                }
                return;
            };
            let t = (start_pos + i) * self.half;
            let (cos, sin) = (&tables.cos[t..t + self.half], &tables.sin[t..t + self.half]);
            crate::kernels::rowwise::rope::rotate(o, cos, sin, self.interleaved, scale);
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    #[test]
    fn rms_norm_matches_candle_nn() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1., (5, 64), &dev)?;
        let w = Tensor::randn(0f32, 1., 64, &dev)?;
        let want: Vec<f32> = candle_nn::ops::rms_norm(&x, &w, 1e-5)?
            .flatten_all()?
            .to_vec1()?;
        let got = rms_norm(&x.flatten_all()?.to_vec1()?, &w.to_vec1()?, 1e-5);
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{a} vs {b}");
        }
        Ok(())
    }

    /// The fused residual add + RMSNorm gives the bits of the add then the norm, below and
    /// above the parallel threshold.
    #[test]
    fn add_rms_norm_equals_the_add_then_the_norm() {
        let d = 576;
        let w: Vec<f32> = (0..d).map(|i| 0.5 + (i as f32 * 0.37).sin()).collect();
        for n in [1usize, 3, 64] {
            let x: Vec<f32> = (0..n * d).map(|i| (i as f32 * 0.11).cos() * 3.0).collect();
            let y: Vec<f32> = (0..n * d).map(|i| (i as f32 * 0.07).sin()).collect();
            let (mut a, mut b) = (x.clone(), x.clone());
            add_assign(&mut a, &y);
            let want = rms_norm(&a, &w, 1e-5);
            let got = add_rms_norm(&mut b, &y, &w, 1e-5);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "{n} rows: the residual stream");
            assert_eq!(bits(&want), bits(&got), "{n} rows: the norm");
        }
    }

    /// Against candle-nn's rope / rope_i, on `[1, heads, n, d]`.
    #[test]
    fn rope_matches_candle_nn_both_layouts() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let (heads, n, d, start) = (3, 4, 8, 5);
        let half = d / 2;
        let angles: Vec<f32> = (0..(start + n) * half)
            .map(|i| (i / half) as f32 * 10f32.powf(-((i % half) as f32) / half as f32))
            .collect();
        let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
        let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
        let x = Tensor::randn(0f32, 1., (n, heads, d), &dev)?;
        let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
        let hm = x.transpose(0, 1)?.contiguous()?.unsqueeze(0)?;
        let c = Tensor::from_vec(cos.clone(), (start + n, half), &dev)?.narrow(0, start, n)?;
        let s = Tensor::from_vec(sin.clone(), (start + n, half), &dev)?.narrow(0, start, n)?;
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| 10f32.powf(-(i as f32) / half as f32))
            .collect();
        for interleaved in [false, true] {
            let rope = Rope::new(inv_freq.clone(), 1.0, interleaved, start + n);
            let want = if interleaved {
                candle_nn::rotary_emb::rope_i(&hm, &c, &s)?
            } else {
                candle_nn::rotary_emb::rope(&hm, &c, &s)?
            };
            let want: Vec<f32> = (want * 0.5)?.flatten_all()?.to_vec1()?;
            let got = rope.heads_major(&xs, n, heads, start, true, 0.5, None);
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 1e-6, "{interleaved}: {a} vs {b}");
            }
        }
        Ok(())
    }

    /// The tables equal the ones built as the decoder used to build them (positions as an
    /// f32 column times θ as a candle matmul, candle's cos and sin, times the attention
    /// factor), bit for bit, before and after growing past the first positions; a config's
    /// huge context costs nothing at construction.
    #[test]
    fn rope_tables_equal_candle_tables_and_grow_on_demand() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let half = 32;
        let inv: Vec<f64> = (0..half)
            .map(|i| 100000f64.powf(-((2 * i) as f64) / 64.0))
            .collect();
        let inv_freq: Vec<f32> = inv.iter().map(|&f| f as f32).collect();
        for factor in [1.0f32, 1.2079] {
            let rope = Rope::new(inv_freq.clone(), factor, false, usize::MAX);
            assert_eq!(rope.positions(), Rope::INITIAL_POSITIONS);
            let end = Rope::INITIAL_POSITIONS + 1000;
            let x = vec![1f32; 64];
            // A forward pass at a position past the first tables grows them.
            let _ = rope.heads_major(&x, 1, 1, end - 1, true, 1.0, None);
            assert_eq!(rope.positions(), 2 * Rope::INITIAL_POSITIONS);
            let positions = Tensor::arange(0u32, end as u32, &dev)?
                .to_dtype(candle_core::DType::F32)?
                .reshape((end, 1))?;
            let angles = positions.matmul(&Tensor::from_vec(inv_freq.clone(), (1, half), &dev)?)?;
            let scaled = |t: Tensor| -> candle_core::Result<Vec<u32>> {
                let v: Vec<f32> = t.flatten_all()?.to_vec1()?;
                Ok(v.iter()
                    .map(|&x| if factor != 1.0 { x * factor } else { x })
                    .map(f32::to_bits)
                    .collect())
            };
            let tables = rope.tables(end);
            let bits = |v: &[f32]| {
                v[..end * half]
                    .iter()
                    .map(|f| f.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                bits(&tables.cos),
                scaled(angles.cos()?)?,
                "cos, factor {factor}"
            );
            assert_eq!(
                bits(&tables.sin),
                scaled(angles.sin()?)?,
                "sin, factor {factor}"
            );
        }
        Ok(())
    }
}

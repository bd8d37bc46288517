//! The decoder's row-wise operations on plain f32 slices: RMSNorm, RoPE, SwiGLU's gate,
//! residual adds. Every output row depends on its input row only, computed by the same
//! code whatever the number of rows, which keeps naive and KV-cached decode bit-identical.
//! Large inputs (prefill) are split across rayon's threads by rows.
use crate::kernels::norm::rms_norm_row;
use rayon::prelude::*;

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
/// in eight lanes, [`crate::kernels::norm`]).
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
/// vectorized ([`crate::kernels::silu`]).
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    use crate::kernels::silu::silu_mul as f;
    // A parallel region only for prefill-sized inputs: vectorized, a batched decode step's
    // 8 × 1,536 values take a few µs, about what a fork costs.
    if gate.len() >= PARALLEL_VALUES {
        gate.par_chunks_mut(2048)
            .zip(up.par_chunks(2048))
            .for_each(|(g, u)| f(g, u));
    } else {
        f(gate, up);
    }
}

/// Rotary position embedding tables (Su et al. 2021): `cos`, `sin` of position · θ_i,
/// `[positions, head_dim / 2]` row-major.
#[derive(Debug, Clone)]
pub struct Rope {
    /// `head_dim / 2`.
    pub half: usize,
    /// cos(position · θ_i).
    pub cos: Vec<f32>,
    /// sin(position · θ_i).
    pub sin: Vec<f32>,
    /// GGUF/Llama "interleaved" pairs (2i, 2i+1) instead of HF's halves (i, i + d/2).
    pub interleaved: bool,
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
        let mut out = vec![0f32; x.len()];
        // One output row of d values per (head, position).
        for_rows(&mut out, d, |idx, o| {
            let (h, i) = (idx / n, idx % n);
            let src = &x[(i * heads + h) * d..][..d];
            match norm {
                Some((w, eps)) => rms_norm_row(src, w, eps, o),
                None => o.copy_from_slice(src),
            }
            if !rotate {
                for a in o.iter_mut() {
                    *a *= scale;
                }
                return;
            }
            let t = (start_pos + i) * self.half;
            let (cos, sin) = (&self.cos[t..t + self.half], &self.sin[t..t + self.half]);
            crate::kernels::rope::rotate(o, cos, sin, self.interleaved, scale);
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
        for interleaved in [false, true] {
            let rope = Rope {
                half,
                cos: cos.clone(),
                sin: sin.clone(),
                interleaved,
            };
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
}

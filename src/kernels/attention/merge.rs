//! How the key ranges of one attention row are combined: each range (256 keys by absolute
//! position, see `attention_avx2::RANGE_KEYS`) brings its own softmax maximum, numerator sum
//! and value sums ([`RangePart`]); [`Merge`] folds them in position order, so a row gives the
//! same bits whether its ranges ran one after another or on different threads.
#![cfg(target_arch = "x86_64")]

use crate::kernels::attention::exp::exp_scalar;
pub use crate::kernels::attention::sink::sink_scales;

/// One key range's part of a group's attention: per head its score maximum, the sum of its
/// softmax numerators and `Σ exp(s − max) · V` (`[g][head_dim]`).
#[derive(Debug, Default, Clone)]
pub struct RangePart {
    /// Per head: the largest score of the range.
    pub max: Vec<f32>,
    /// Per head: `Σ exp(s − max)` over the range.
    pub sum: Vec<f32>,
    /// `[g][head_dim]`: `Σ exp(s − max) · V` over the range.
    pub acc: Vec<f32>,
}

/// Ranges merged in position order: with `M` the largest maximum so far and `c_r = exp(m_r −
/// M)`, the result is `Σ c_r · acc_r / Σ c_r · sum_r`. Each range is folded in as it comes,
/// rescaling what came before when the maximum grows.
#[derive(Debug, Default)]
pub struct Merge {
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
    first: bool,
}

impl Merge {
    /// Start a merge of `g` heads of `d` values.
    pub fn new(g: usize, d: usize) -> Merge {
        let mut m = Merge::default();
        m.reset(g, d);
        m
    }

    /// Start over for `g` heads of `d` values, keeping the buffers.
    pub fn reset(&mut self, g: usize, d: usize) {
        self.max.clear();
        self.max.resize(g, f32::NEG_INFINITY);
        self.sum.clear();
        self.sum.resize(g, 0.0);
        self.acc.clear();
        self.acc.resize(g * d, 0.0);
        self.first = true;
    }

    /// Fold in the next range.
    ///
    /// # Safety
    /// AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn push(&mut self, part: &RangePart) {
        // SAFETY: forwarded from the caller.
        unsafe { self.push_slices(&part.max, &part.sum, &part.acc) }
    }

    /// [`Merge::push`] of a range part given as slices (per head its maximum and numerator
    /// sum, `[g][d]` value sums), e.g. one row's share of a tile's buffers.
    ///
    /// # Safety
    /// AVX2 and FMA; the slices hold `g`, `g` and `g · d` values.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn push_slices(&mut self, max: &[f32], sum: &[f32], acc: &[f32]) {
        let g = self.max.len();
        let d = self.acc.len() / g.max(1);
        if self.first {
            self.first = false;
            self.max.copy_from_slice(max);
            self.sum.copy_from_slice(sum);
            self.acc.copy_from_slice(acc);
            return;
        }
        for h in 0..g {
            let m = self.max[h].max(max[h]);
            let (old, new) = (exp_scalar(self.max[h] - m), exp_scalar(max[h] - m));
            self.max[h] = m;
            self.sum[h] = self.sum[h] * old + sum[h] * new;
            for (a, &p) in self.acc[h * d..][..d].iter_mut().zip(&acc[h * d..][..d]) {
                *a = *a * old + p * new;
            }
        }
    }

    /// The attention output, `[g][d]`: the value sums over the numerator sums, each
    /// head's sink logit (`sinks`, `[g]`) joining its denominator ([`sink_scales`]).
    pub fn finish(&self, out: &mut [f32], sinks: Option<&[f32]>) {
        let d = self.acc.len() / self.max.len().max(1);
        for (h, o) in out[..self.acc.len()].chunks_exact_mut(d).enumerate() {
            let (scale, sum) = sink_scales(self.max[h], self.sum[h], sinks.map(|s| s[h]));
            let inv = 1.0 / sum;
            for (x, &a) in o.iter_mut().zip(&self.acc[h * d..][..d]) {
                *x = a * scale * inv;
            }
        }
    }
}

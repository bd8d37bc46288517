//! The attention kernels' own exp for softmax inputs (`x ≤ 0`), eight lanes at a time
//! ([`exp_neg`]) and for one value ([`exp_scalar`]), shared by the scores pass and the merge
//! of key ranges so both give the same bits.
use std::arch::x86_64::*;

/// `exp(x)` per lane for `x ≤ 0` (softmax inputs after subtracting the max), with the
/// Cephes single-precision method ([`crate::kernels::rowwise::glu::exp8_in_range`]): relative error
/// about 2e-7. Inputs below −87.3 give ~0.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn exp_neg(x: __m256) -> __m256 {
    crate::kernels::rowwise::glu::exp8_in_range(_mm256_max_ps(x, _mm256_set1_ps(-87.3)))
}

/// `exp(x)` for `x ≤ 0`, the kernel's own exp (exactly 1 at 0).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn exp_scalar(x: f32) -> f32 {
    _mm256_cvtss_f32(exp_neg(_mm256_set1_ps(x)))
}

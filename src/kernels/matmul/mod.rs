//! Quantized matrix-vector products for the decode hot path: Q4_1 and Q8_0 weights (and
//! Q4_0 and Q5_0, repacked exactly into those layouts at load: `quant_repack.rs`) against
//! activations quantized to 8 bits per block of 32.
//!
//! candle 0.11 computes Q4_1 dot products with scalar code only, and runs its quantized
//! matmuls on a second thread pool beside rayon's; these kernels use AVX2 (runtime-detected,
//! scalar fallback) on rayon's pool alone, over weights repacked eight rows at a time
//! ([`crate::kernels::matmul::q4_1_q8_0`]).
//!
//! Formats (ggml, ggml-common.h): a Q4_1 block holds 32 weights as `w[j] = d · q[j] + m`,
//! with `d`, `m` f16 and `q[j]` 4-bit: byte `j` of `qs` holds element `j` in its low nibble
//! and element `j + 16` in its high nibble (20 bytes / 32 weights). A Q8_0 block holds
//! `w[j] = d · q[j]`, `d` f16 and `q[j]` i8 (34 bytes / 32 weights). Activations are
//! quantized per block of 32 as Q8_1: `x[j] ≈ d · q[j]`, `d = max|x| / 127`,
//! `q[j] = round(x[j] / d)`, plus `s = d · Σ q[j]`, so that
//! `Σ w·x ≈ d_w · d_x · Σ q_w q_x + m_w · s_x` (m = 0 for Q8_0).
#[cfg(target_arch = "x86_64")]
pub(crate) mod dense_from_blocks;
pub mod float;
#[cfg(target_arch = "x86_64")]
pub(crate) mod float_avx2;
pub mod mxfp4;
#[cfg(target_arch = "x86_64")]
pub(crate) mod mxfp4_avx2;
pub mod q2_k_q3_k;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q2_k_q3_k_avx2;
pub mod q4_1_q8_0;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q4_1_q8_0_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q4_1_q8_0_vnni512;
pub mod q4_k;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q4_k_avx2;
pub mod q5;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q5_avx2;
pub mod q6_k;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q6_k_avx2;
pub mod q8_1;
pub mod quantize_q4_k;

mod split;

mod batch;
mod float_matrix;
mod group;
mod kernel;
mod kquants;
mod load;
mod matrix;
mod pages;
mod repack;
pub use batch::{matmul_group, matmul_sets};
pub use kernel::vnni_bits;
use kernel::Kernel;
pub use kquants::{
    Q2_K_BLOCK_BYTES, Q3_K_BLOCK_BYTES, Q4_K_BLOCK_BYTES, Q5_1_BLOCK_BYTES, Q5_K_BLOCK_BYTES,
    Q6_K_BLOCK_BYTES,
};
#[cfg(test)]
use load::pairs_interleaved_here;
pub(crate) use matrix::Packed;
pub use matrix::{QuantMatrix, Q4_1_BLOCK_BYTES, Q8_0_BLOCK_BYTES};
pub use mxfp4::MXFP4_BLOCK_BYTES;
pub use pages::first_block;
pub use q4_k::QK_K;
pub use q8_1::QK;
pub use repack::{Q4_0_BLOCK_BYTES, Q5_0_BLOCK_BYTES};

#[cfg(test)]
mod tests;

/// Whether [`QuantMatrix::dense_matmul`] runs on this CPU (AVX-512F, or AVX2 with FMA and
/// F16C; portable kernels not forced).
pub fn dense_from_blocks() -> bool {
    #[cfg(target_arch = "x86_64")]
    return dense_from_blocks::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

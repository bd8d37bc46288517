//! CPU kernels of our own, where candle's are missing or too slow.
#[cfg(target_arch = "x86_64")]
pub(crate) mod attention_512;
#[cfg(target_arch = "x86_64")]
pub(crate) mod attention_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod attention_merge;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod dequant_gemm;
pub mod gemm;
pub mod norm;
pub mod packed;
pub mod q8_1;
pub mod quant;
pub mod rope;
pub mod silu;
#[cfg(target_arch = "x86_64")]
mod vnni512;

/// True when this CPU has AVX2 and FMA and the portable kernels are not forced: the check
/// of the row-wise vector kernels (SwiGLU, RMSNorm, RoPE) and the prefill GEMM.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_fma() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && !portable_forced()
}

/// True when `NANOLLM_PORTABLE_KERNELS` is set (read once): every kernel of ours then takes
/// its portable path (scalar quantized matvec, GEMM and attention, scalar activation
/// quantization), as on a CPU without AVX2, so the tests can check those paths here.
pub fn portable_forced() -> bool {
    static FORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| std::env::var_os("NANOLLM_PORTABLE_KERNELS").is_some())
}

/// A kernel's output buffer shared by the tasks of one parallel region, each task writing
/// only its own elements (its panels' or weight rows' columns of an `[n, rows]` output).
pub(crate) struct OutPtr(pub(crate) *mut f32);
// SAFETY: tasks write disjoint elements through the pointer, and the Vec it points into
// outlives the parallel region.
unsafe impl Sync for OutPtr {}

//! CPU kernels of our own, where candle's are missing or too slow, one folder per concern:
//!
//! - [`matmul`]: the quantized (and F16/BF16/F32) matrix-vector products of decode, one
//!   file per weight layout (its blocks, scalar dot product and dequantization: `q4_k.rs`)
//!   beside its SIMD kernels (`q4_k_avx2.rs`), the activations' Q8_1 quantization, loading
//!   and repacking ggml's blocks, `--quantize q4_k`'s quantizer;
//! - [`gemm`]: the dense f32 prefill GEMM, and its variant that reads Q4_1/Q8_0 blocks;
//! - `attention`: causal attention over the paged KV cache (AVX2, AVX-512; the portable
//!   path is `model::paged_attention::portable`);
//! - [`rowwise`]: RMSNorm, RoPE and the gated activations (SwiGLU, GeGLU), row by row;
//! - [`report`]: which of these codes this CPU runs, as `nanollm --version` says.
#[cfg(target_arch = "x86_64")]
pub(crate) mod attention;
pub mod gemm;
pub mod matmul;
pub mod report;
pub mod rowwise;

/// True when this CPU has AVX2 and FMA and the portable kernels are not forced: the check
/// of the row-wise vector kernels (SwiGLU, RMSNorm, RoPE) and the prefill GEMM.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_fma() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && !crate::cpu::portable_forced()
}

/// Prefetch into L1 iteration `b`'s share (`bytes`) of the weights that follow `end`, for
/// the quantized decode kernels ([`quant`]): a call walks one group's (or pair's) block
/// columns, a few KB, and the hardware prefetcher, which restarts on each short stream, left
/// the kernel waiting on the first loads of every call. Spread over a call's iterations (one
/// block column each), this brings in the next group (or pair), adjacent in memory and
/// taken by the same task or the next one, while the current one computes: decode steps of
/// one and eight sequences got faster (measured: docs/benchmarks.md, "Prefetching the next
/// group").
/// Addresses past the matrix are only prefetched, never read: a prefetch cannot fault.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_next(end: *const u8, bytes: usize, b: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let from = end.wrapping_add(b * bytes);
    let mut at = 0;
    while at < bytes {
        // SAFETY: a prefetch is a hint: it reads nothing into the program and cannot fault
        // (SSE, part of every x86-64 CPU).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(from.wrapping_add(at) as *const i8) };
        at += 64;
    }
}

/// A kernel's output buffer shared by the tasks of one parallel region, each task writing
/// only its own elements (its panels' or weight rows' columns of an `[n, rows]` output).
pub(crate) struct OutPtr(pub(crate) *mut f32);
// SAFETY: tasks write disjoint elements through the pointer, and the Vec it points into
// outlives the parallel region.
unsafe impl Sync for OutPtr {}

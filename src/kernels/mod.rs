//! CPU kernels of our own, where candle's are missing or too slow.
#[cfg(target_arch = "x86_64")]
pub(crate) mod attention_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod attention_merge;
#[cfg(target_arch = "x86_64")]
mod avx2;
pub mod gemm;
pub mod packed;
pub mod q8_1;
pub mod quant;

//! [`Scratch`]: one thread's buffers for the attention of a query group (scores, a row, the
//! inverse sums, and the AVX2 kernels' own), kept between calls.

/// Per-thread scratch buffers.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    #[cfg(target_arch = "x86_64")]
    pub(super) avx2: crate::kernels::attention::avx2::Scratch,
    pub(super) scores: Vec<f32>,
    pub(super) row: Vec<f32>,
    pub(super) inv: Vec<f32>,
}

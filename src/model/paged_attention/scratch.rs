//! [`Scratch`]: one thread's buffers for the attention of a query group (the AVX2 kernels'
//! and the portable kernel's), kept between calls.

/// Per-thread scratch buffers.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    #[cfg(target_arch = "x86_64")]
    pub(super) avx2: crate::kernels::attention::avx2::Scratch,
    pub(super) portable: super::portable::Buffers,
    pub(super) row: Vec<f32>,
}

//! [`Scratch`]: one thread's buffers for the attention of a query group (the AVX2 kernels'
//! and the portable kernel's), kept between calls.

/// Per-thread scratch buffers.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    #[cfg(target_arch = "x86_64")]
    pub(super) avx2: crate::kernels::attention::avx2::Scratch,
    pub(super) portable: Buffers,
    pub(super) row: Vec<f32>,
}

/// The portable kernel's buffers: a range's scores, one decoded row, the range's parts and
/// the merged ones.
#[derive(Debug, Default)]
pub(super) struct Buffers {
    pub(super) scores: Vec<f32>,
    pub(super) row: Vec<f32>,
    pub(super) part_max: Vec<f32>,
    pub(super) part_sum: Vec<f32>,
    pub(super) part_acc: Vec<f32>,
    pub(super) max: Vec<f32>,
    pub(super) sum: Vec<f32>,
    pub(super) acc: Vec<f32>,
}

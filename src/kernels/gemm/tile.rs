//! The prefill GEMM's tile shapes: output features per panel, input rows per register tile
//! (portable/AVX2, AVX-512, the AVX-512 wide tile), panels per task.

/// Output features per panel.
pub(super) const NR: usize = 16;
/// Input rows per micro-kernel tile.
pub(super) const MR: usize = 6;
/// Input rows per AVX-512 tile.
pub(super) const MR_AVX512: usize = 12;
/// Panels per parallel task (and per AVX-512 wide tile).
pub(super) const PANELS_PER_TASK: usize = 3;
/// Input rows per AVX-512 wide tile (`MR_WIDE × PANELS_PER_TASK` accumulators of 32).
pub(super) const MR_WIDE: usize = 8;

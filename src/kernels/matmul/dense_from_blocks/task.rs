//! One parallel task of the dense product from the blocks ([`Task`]): its groups of eight
//! weight rows against every input row, shared by the AVX-512F and AVX2 kernels.
use crate::kernels::matmul::Packed;
use crate::kernels::OutPtr;

/// Most input rows one call handles (the accumulators: one 16-lane register per row).
pub const MAX_ROWS: usize = 8;

/// One parallel task of [`matmul`]: its groups of eight weight rows against every input row.
pub(crate) struct Task<'a> {
    /// The weight matrix's blocks, in groups of eight rows.
    pub packed: &'a Packed,
    /// Whether pairs of groups alternate block by block ([`crate::kernels::matmul::q4_1_q8_0::interleave`] with `pairs`).
    pub pairs_interleaved: bool,
    /// The matrix's rows (output features).
    pub rows: usize,
    /// The matrix's columns (input features, a multiple of 32).
    pub cols: usize,
    /// The input rows, `[n, cols]`.
    pub xs: &'a [f32],
    /// Input rows.
    pub n: usize,
    /// The task's groups (eight weight rows each; the last may be partial).
    pub groups: std::ops::Range<usize>,
    /// The output `[n, rows]`; this task writes only its groups' columns.
    pub out: &'a OutPtr,
}

impl Task<'_> {
    /// Writes `vals` (`keep` ≤ 16 values) as row `i` of the output from column `row0`.
    ///
    /// # Safety
    /// `i < n` and `row0 + keep ≤ rows`, columns of this task's groups (no other task writes
    /// them).
    pub(crate) unsafe fn put(&self, i: usize, row0: usize, vals: &[f32], keep: usize) {
        // SAFETY: inside the output (caller's contract), written by this task only.
        unsafe {
            std::ptr::copy_nonoverlapping(vals.as_ptr(), self.out.0.add(i * self.rows + row0), keep)
        };
    }
}

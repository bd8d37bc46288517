//! Several inputs at once through the quantized kernels: [`matmul_group`] (Q, K and V, or
//! gate and up, over the same quantized inputs in one parallel region; decode batches and
//! prompts on the GGUF kernels) and the 512-bit two-group dot product it runs on.
#[cfg(target_arch = "x86_64")]
use super::split::next_inputs;
use super::split::{scatter, GROUPS_PER_TASK};
use super::{Kernel, Packed, QuantMatrix};
use crate::kernels::matmul::q4_1_q8_0::ROWS;
use crate::kernels::matmul::q8_1::Q8_1Vector;
use crate::kernels::OutPtr;
use anyhow::{bail, Result};
use rayon::prelude::*;

impl QuantMatrix {
    /// The 16 results of groups `g` and `g + 1` against every input `v` of `xs`, handed to
    /// `out(v, results)` (group `g`'s eight [`Self::group_dot_many`] results followed by
    /// group `g + 1`'s), with the 512-bit kernels: the same bits as two calls of
    /// [`Self::group_dot_many`].
    ///
    /// # Safety
    /// The CPU must support AVX-512F, AVX-512BW and AVX-512 VNNI ([`Kernel::Vnni512`]), and
    /// `g + 1` must be a group of this matrix.
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn group_pair_dot_many(
        &self,
        g: usize,
        xs: &[Q8_1Vector],
        out: &mut impl FnMut(usize, &[f32]),
    ) {
        let n = xs.len();
        let mut put = |v0: usize, ys: &[[f32; 2 * ROWS]]| scatter(out, v0, ys);
        let mut v0 = 0;
        while v0 < n {
            let rest = &xs[v0..];
            // SAFETY: the caller checked the CPU; every input was quantized from a row of
            // `cols` values, so it holds `cols / 32` blocks, the pair's block columns.
            v0 += unsafe {
                match &self.packed {
                    Packed::Q4_1(b) => next_inputs!(
                        crate::kernels::matmul::q4_1_q8_0_vnni512::q4_1x16_dot,
                        (self.pair(b, g)),
                        rest,
                        put,
                        v0,
                        true
                    ),
                    Packed::Q8_0(b) => next_inputs!(
                        crate::kernels::matmul::q4_1_q8_0_vnni512::q8_0x16_dot,
                        (self.pair(b, g)),
                        rest,
                        put,
                        v0,
                        true
                    ),
                    _ => {
                        unreachable!("the 512-bit kernels read only the Q4_1 and Q8_0 layouts")
                    }
                }
            };
        }
    }
}

/// `W_i · x` for several matrices with the same `cols` (Q, K and V; gate and up) and each
/// row of `xs` (`[n, cols]`): quantizes `xs` once (for the quantized matrices; F16, BF16
/// and F32 ones read it in f32) and runs every matrix in one parallel
/// region, 32 weight rows per task, each task reading its weights from memory once for all
/// `n` inputs and writing its rows' results straight into their columns of the output.
/// Returns, per matrix, `[n, rows_i]` row-major. Every output element is
/// computed by the same code whatever the batch, so a row's result does not depend on `n`.
///
/// Errors: no matrix, matrices of different widths, `xs.len()` not a multiple of `cols`.
pub fn matmul_group(mats: &[&QuantMatrix], xs: &[f32]) -> Result<Vec<Vec<f32>>> {
    Ok(matmul_sets(&[(mats, xs)])?.pop().unwrap_or_default())
}

/// Several [`matmul_group`]s in one parallel region: set `s` is matrices of one width and
/// its own rows `xs_s` (`[n_s, cols_s]`), as a mixture of experts' chosen experts each take
/// the rows routed to them (ggml's `mul_mat_id` idea); one region per layer step instead of
/// one per expert. Returns, per set, per matrix, `[n_s, rows_i]`; each element the bits
/// [`matmul_group`] gives it alone.
///
/// Errors: a set with no matrix, of different widths, or rows that are not of its width.
pub fn matmul_sets(sets: &[(&[&QuantMatrix], &[f32])]) -> Result<Vec<Vec<Vec<f32>>>> {
    let mut ns = Vec::with_capacity(sets.len());
    for &(mats, xs) in sets {
        let Some(first) = mats.first() else {
            bail!("no matrix to multiply")
        };
        let cols = first.cols;
        if mats.iter().any(|m| m.cols != cols) {
            bail!("grouped matrices must have the same width");
        }
        if cols == 0 || !xs.len().is_multiple_of(cols) {
            bail!("input of {} values is not rows of {cols}", xs.len());
        }
        ns.push(xs.len() / cols);
    }
    // Only the quantized matrices read 8-bit inputs (F16/BF16/F32 ones take `xs` as is).
    // Several rows (batched decode): quantize them on both threads (8 rows of 1,536 values
    // took ~12 µs on one, before every down projection).
    let rows_total: usize = ns.iter().sum();
    let quantize = |&(mats, xs): &(&[&QuantMatrix], &[f32])| -> Vec<Q8_1Vector> {
        if mats.iter().all(|m| m.is_float()) {
            return Vec::new();
        }
        let cols = mats[0].cols;
        if rows_total >= 4 && sets.len() == 1 {
            xs.par_chunks_exact(cols)
                .map(Q8_1Vector::quantize)
                .collect()
        } else {
            xs.chunks_exact(cols).map(Q8_1Vector::quantize).collect()
        }
    };
    let qxs: Vec<Vec<Q8_1Vector>> = if sets.len() > 1 && rows_total >= 4 {
        sets.par_iter().map(quantize).collect()
    } else {
        sets.iter().map(quantize).collect()
    };
    let kernel = Kernel::detect();
    // Not zeroed first: the tasks write every element (memset was ~1.5% of an 8-row step).
    let mut outs: Vec<Vec<Vec<f32>>> = sets
        .iter()
        .zip(&ns)
        .map(|(&(mats, _), &n)| {
            mats.iter()
                .map(|m| Vec::with_capacity(n * m.rows))
                .collect()
        })
        .collect();
    let ptrs: Vec<Vec<OutPtr>> = outs
        .iter_mut()
        .map(|set| set.iter_mut().map(|o| OutPtr(o.as_mut_ptr())).collect())
        .collect();
    // (set, matrix, first group, groups) per task.
    let tasks: Vec<(usize, usize, usize, usize)> = sets
        .iter()
        .enumerate()
        .flat_map(|(s, &(mats, _))| {
            mats.iter().enumerate().flat_map(move |(i, m)| {
                let groups = m.groups();
                (0..groups)
                    .step_by(GROUPS_PER_TASK)
                    .map(move |g0| (s, i, g0, GROUPS_PER_TASK.min(groups - g0)))
            })
        })
        .collect();
    tasks.into_par_iter().for_each(|(s, i, g0, count)| {
        let (m, base, n) = (sets[s].0[i], &ptrs[s][i], ns[s]);
        let (xs, qx) = (sets[s].1, &qxs[s]);
        let rows = m.rows;
        // Results of the rows from `row0` on (8 or 16 of them, fewer past the last row) for
        // input v, into y[v][row0 ..].
        let put_rows = |row0: usize| {
            move |v: usize, ys: &[f32]| {
                let keep = ys.len().min(rows - row0);
                assert!(v < n, "input {v} of {n}");
                // SAFETY: v < n and row0 + keep ≤ rows: inside this matrix's [n, rows]
                // output; rows row0 .. row0 + keep belong to this task's groups, which no
                // other task writes, and nothing reads the output during the region.
                unsafe {
                    let to = base.0.add(v * rows + row0);
                    match (ys.len(), keep) {
                        // Whole groups (all but a matrix's last): fixed-size copies, inlined
                        // (a memcpy call per input and group was ~3% of an 8-row step).
                        (16, 16) => (to as *mut [f32; 16]).write_unaligned(*ys.as_ptr().cast()),
                        (8, 8) => (to as *mut [f32; 8]).write_unaligned(*ys.as_ptr().cast()),
                        _ => std::ptr::copy_nonoverlapping(ys.as_ptr(), to, keep),
                    }
                };
            }
        };
        let mut g = g0;
        #[cfg(target_arch = "x86_64")]
        if matches!(kernel, Kernel::Vnni512)
            && matches!(m.packed, Packed::Q4_1(_) | Packed::Q8_0(_))
        {
            // Two groups per call; a task's lone last group takes the 256-bit kernel below.
            while g + 1 < g0 + count {
                // SAFETY: Kernel::detect chose Vnni512 only when the CPU has AVX-512F,
                // AVX-512BW and AVX-512 VNNI; g + 1 is a group of the matrix.
                unsafe { m.group_pair_dot_many(g, qx, &mut put_rows(g * ROWS)) };
                g += 2;
            }
        }
        for g in g..g0 + count {
            if m.is_float() {
                m.float_group_dot_many(kernel, g, xs, &mut put_rows(g * ROWS));
            } else {
                m.group_dot_many(kernel, g, qx, &mut put_rows(g * ROWS));
            }
        }
    });
    for ((set, &(mats, _)), &n) in outs.iter_mut().zip(sets).zip(&ns) {
        for (o, m) in set.iter_mut().zip(mats) {
            // SAFETY: the tasks above wrote every element of the n × rows output: every
            // group of every matrix is some task's, and each group's call hands every input
            // its rows (the last group's `keep` rows included).
            unsafe { o.set_len(n * m.rows) };
        }
    }
    Ok(outs)
}

impl QuantMatrix {
    /// `y = W · x` for each row of `xs` (`[n, cols]` row-major) → `[n, rows]` row-major.
    /// Each output element depends only on its weight row and its input row, computed the
    /// same way whatever `n` is. Errors: `xs.len()` not a multiple of `cols`.
    pub fn matmul(&self, xs: &[f32]) -> Result<Vec<f32>> {
        let mut out = matmul_group(&[self], xs)?;
        Ok(out.pop().unwrap_or_default())
    }
}

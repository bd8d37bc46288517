//! Dense f32 `Y = X · Wᵀ` for prefill, over weights packed once at load.
//!
//! `W` (`[out, in]`, a linear layer's weight) is stored as panels of 16 output features,
//! each panel `in`-major (`panel[k · 16 + j] = W[16p + j][k]`), so the kernel streams one
//! panel per 16 outputs with unit stride and no per-call packing (a BLAS-style GEMM repacks
//! the weight on every call: for a short prompt that costs more than the arithmetic). The
//! AVX2 micro-kernel keeps a 6 × 16 tile of `Y` in twelve registers and, per `k`, loads 16
//! weights and broadcasts 6 inputs (the register-blocked GEMM of Goto & van de Geijn 2008).
//! Where the CPU has AVX-512F, a tile holds one 16-lane register per row and panel: an
//! 8 × 48 tile (8 rows, a task's 3 panels: 24 accumulators) loads 3 weight vectors and
//! broadcasts 8 inputs per 24 FMAs. (A 12 × 16 tile issues 13 loads per 12 FMAs: on a Xeon
//! with two 512-bit FMA units the loads bound it; measured: docs/benchmarks.md, "The
//! prefill GEMM's 8 × 48 tile against 12 × 16".) The 8 × 48 tile reads `X` interleaved, 8
//! rows per 32-byte line (packed once per call for all tasks), and walks `k` in chunks of
//! 128 steps over a 48-row block, so the 24 KiB of weights a chunk needs stay in L1 for the
//! block's six tiles instead of streaming from L2 for each (it resumes each chain from its
//! stored partial sum). It is faster than the previous tile (strided rows, whole `k` per
//! tile; measured: docs/benchmarks.md, "Interleaved input rows and k chunks in the wide
//! tile").
//! Edge panels run the 12 × 16 tile. Tasks write their tiles straight into their own columns
//! of `Y`.
//!
//! Every output `Y[i][j]` is one FMA chain over `k = 0 .. in` (AVX2 and AVX-512 alike), or one chain of
//! separate multiplies and adds (portable), in order, whatever tile or batch the row falls
//! in: a row's result does not depend on how many rows are multiplied together.
use crate::kernels::OutPtr;
use anyhow::{bail, Result};
use rayon::prelude::*;
use row_tiles::interleave_row_tiles;
use tile::{MR_AVX512, MR_WIDE, NR, PANELS_PER_TASK};

/// Input rows per block: a task runs its panels over this many rows before moving on, so
/// the panels stay in L2 and the rows in L1/L2.
const ROWS_PER_BLOCK: usize = 48;
/// Steps of `k` per pass of the wide tile over a row block: the tile's 3 panels' share,
/// `3 · 16 · K_CHUNK` f32 (24 KiB), stays in L1 for the block's tiles.
const K_CHUNK: usize = 128;

/// A dense f32 weight `[rows (out), cols (in)]` packed into 16-row panels.
#[derive(Debug, Clone)]
pub struct DenseMatrix {
    rows: usize,
    cols: usize,
    /// `ceil(rows / 16)` panels of `cols · 16` values; rows past `rows` are zero.
    panels: Vec<f32>,
}

impl DenseMatrix {
    /// Bytes held: `ceil(rows / 16) · 16 · cols` f32 values.
    pub fn bytes(&self) -> u64 {
        4 * self.panels.len() as u64
    }

    /// Pack a row-major `[rows, cols]` weight. Errors: `w.len() != rows · cols`.
    pub fn pack(w: &[f32], rows: usize, cols: usize) -> Result<DenseMatrix> {
        if w.len() != rows * cols {
            bail!(
                "dense weight [{rows}, {cols}] needs {} values, got {}",
                rows * cols,
                w.len()
            );
        }
        let np = rows.div_ceil(NR);
        let mut panels = vec![0f32; np * cols * NR];
        // Panels are independent: pack them in parallel (this runs once per weight at load).
        panels
            .par_chunks_mut((cols * NR).max(1))
            .enumerate()
            .for_each(|(p, panel)| {
                for j in 0..NR.min(rows.saturating_sub(p * NR)) {
                    let row = &w[(p * NR + j) * cols..(p * NR + j + 1) * cols];
                    for (k, &v) in row.iter().enumerate() {
                        panel[k * NR + j] = v;
                    }
                }
            });
        Ok(DenseMatrix { rows, cols, panels })
    }

    /// `[rows, cols]` (out, in).
    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// `Y = X · Wᵀ`: `xs` is `[n, cols]` row-major, the result `[n, rows]` row-major.
    /// Errors: `xs.len()` not a multiple of `cols`.
    pub fn matmul(&self, xs: &[f32]) -> Result<Vec<f32>> {
        let mut ys = DenseMatrix::matmul_many(&[self], xs)?;
        ys.pop().ok_or_else(|| anyhow::anyhow!("no GEMM output"))
    }

    /// `X · Wᵀ` for every `W` of `mats` (all with the same `cols`, e.g. the Q, K and V
    /// projections) in one parallel region: `xs` `[n, cols]` → one `[n, rows_m]` per matrix.
    /// Each output element is the same chain of FMAs as [`DenseMatrix::matmul`] alone gives
    /// it. Errors: the matrices' `cols` differ, or `xs.len()` is not a multiple of them.
    pub fn matmul_many(mats: &[&DenseMatrix], xs: &[f32]) -> Result<Vec<Vec<f32>>> {
        let Some(first) = mats.first() else {
            return Ok(Vec::new());
        };
        let cols = first.cols;
        if let Some(m) = mats.iter().find(|m| m.cols != cols) {
            bail!(
                "matrices of {cols} and {} input features in one GEMM group",
                m.cols
            );
        }
        if cols == 0 || !xs.len().is_multiple_of(cols) {
            bail!("input of {} values is not rows of {cols}", xs.len());
        }
        let n = xs.len() / cols;
        let kernel = Kernel::detect();
        let mut ys: Vec<Vec<f32>> = mats
            .iter()
            .map(|m| Vec::with_capacity(n * m.rows))
            .collect();
        let outs: Vec<OutPtr> = ys.iter_mut().map(|y| OutPtr(y.as_mut_ptr())).collect();
        // Each task: a few panels of one matrix (read from memory once) against every input
        // row (which stay in cache), written straight into their columns of that output.
        let tasks: Vec<(usize, usize)> = mats
            .iter()
            .enumerate()
            .flat_map(|(m, w)| {
                (0..w.rows.div_ceil(NR))
                    .step_by(PANELS_PER_TASK)
                    .map(move |p0| (m, p0))
            })
            .collect();
        // The wide tile reads its rows interleaved (one pass over xs, shared by every task).
        let tiles = if kernel.wide() {
            interleave_row_tiles(xs, n, cols)
        } else {
            Vec::new()
        };
        let tiles_per_block = ROWS_PER_BLOCK / MR_WIDE;
        let wide_tiles = n.div_ceil(ROWS_PER_BLOCK) * tiles_per_block * cols.div_ceil(K_CHUNK);
        (0..tasks.len()).into_par_iter().for_each(|t| {
            let (m, p0) = tasks[t];
            // The task after this one in the list (usually this thread's next): its panels
            // are asked for, in shares, by this task's tiles after the first, so they reach
            // L2 while this task computes (measured: docs/benchmarks.md, "The next task's
            // panels prefetched").
            let next = tasks
                .get(t + 1)
                .map_or(&[][..], |&(m2, q0)| mats[m2].task_panels(q0));
            let share = next
                .len()
                .div_ceil(wide_tiles.saturating_sub(1).max(1))
                .div_ceil(NR)
                * NR;
            mats[m].run_task(kernel, p0, xs, &tiles, n, &outs[m], next, share);
        });
        for (y, m) in ys.iter_mut().zip(mats) {
            // SAFETY: the tasks above wrote every element of the n × rows output (every row
            // block of every panel, the last panel's kept columns included).
            unsafe { y.set_len(n * m.rows) };
        }
        Ok(ys)
    }

    /// The panels of the task starting at panel `p0`.
    fn task_panels(&self, p0: usize) -> &[f32] {
        let np = self.rows.div_ceil(NR);
        let p1 = (p0 + PANELS_PER_TASK).min(np);
        &self.panels[p0 * self.cols * NR..p1 * self.cols * NR]
    }

    /// One task: panels `p0 .. p0 + PANELS_PER_TASK` against all `n` rows of `xs` (`tiles`:
    /// the same rows as [`interleave_row_tiles`] lays them out, for the wide tile), into
    /// `out` (`[n, rows]`); `next` (the following task's panels) prefetched in shares of
    /// `share` values per wide tile after the first.
    #[allow(clippy::too_many_arguments)]
    fn run_task(
        &self,
        kernel: Kernel,
        p0: usize,
        xs: &[f32],
        tiles: &[f32],
        n: usize,
        out: &OutPtr,
        next: &[f32],
        share: usize,
    ) {
        let (rows, cols) = (self.rows, self.cols);
        let np = rows.div_ceil(NR);
        let p1 = (p0 + PANELS_PER_TASK).min(np);
        // A whole task of full panels goes through the wide tile, where there is one.
        let wide = kernel.wide() && p1 - p0 == PANELS_PER_TASK && p1 * NR <= rows;
        // A last panel past `rows` goes through a tile of its own, then its columns.
        let mut spill = [0f32; MR_AVX512 * NR];
        let panels = self.task_panels(p0);
        let mut tile = 0;
        for x0 in (0..n).step_by(ROWS_PER_BLOCK) {
            let x1 = (x0 + ROWS_PER_BLOCK).min(n);
            if wide {
                for k0 in (0..cols).step_by(K_CHUNK) {
                    let ks = k0..(k0 + K_CHUNK).min(cols);
                    let mut i = x0;
                    while i < x1 {
                        let r = (x1 - i).min(MR_WIDE);
                        let ahead = if tile == 0 {
                            &[][..]
                        } else {
                            let (a, b) = ((tile - 1) * share, tile * share);
                            &next[a.min(next.len())..b.min(next.len())]
                        };
                        tile += 1;
                        // SAFETY: rows i .. i + r and columns p0·16 .. p1·16 ≤ rows of the
                        // output are inside it, and only this task writes these panels' columns.
                        unsafe {
                            kernel.wide_tile(
                                r,
                                &tiles[i * cols..],
                                cols,
                                ks.clone(),
                                panels,
                                out.0.add(i * rows + p0 * NR),
                                rows,
                                ahead,
                            )
                        };
                        i += r;
                    }
                }
                continue;
            }
            for p in p0..p1 {
                let panel = &self.panels[p * cols * NR..(p + 1) * cols * NR];
                let (c0, keep) = (p * NR, NR.min(rows - p * NR));
                let mut i = x0;
                while i < x1 {
                    let r = (x1 - i).min(kernel.rows());
                    let x = &xs[i * cols..];
                    if keep == NR {
                        // SAFETY: rows i .. i + r and columns c0 .. c0 + 16 of the output
                        // (n × rows) are inside it, and only this task writes panel p's
                        // columns.
                        unsafe { kernel.tile(r, x, cols, panel, out.0.add(i * rows + c0), rows) };
                    } else {
                        // SAFETY: spill holds MR_AVX512 ≥ r rows of NR values (stride NR).
                        unsafe { kernel.tile(r, x, cols, panel, spill.as_mut_ptr(), NR) };
                        for t in 0..r {
                            // SAFETY: row i + t, columns c0 .. c0 + keep ≤ rows: inside the
                            // output, written by this task only.
                            unsafe {
                                std::ptr::copy_nonoverlapping(
                                    spill.as_ptr().add(t * NR),
                                    out.0.add((i + t) * rows + c0),
                                    keep,
                                )
                            };
                        }
                    }
                    i += r;
                }
            }
        }
    }
}

mod dispatch;
mod tile;
pub use dispatch::fma_lanes;
use dispatch::Kernel;

mod micro;

mod row_tiles;

#[cfg(test)]
mod tests;

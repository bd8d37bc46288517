//! The dense f32 prefill product for a few prompt rows, read straight from the packed
//! Q4_1/Q8_0 blocks instead of the f32 copy: same numbers, a quarter (Q4_1: a sixth) of the
//! bytes.
//!
//! A prompt of a few tokens, and the prompt's last row through the LM head, is bound by the
//! bytes of its weights: the f32 prefill copy of the default model is 424 MB (the LM head
//! alone 113 MB), its GGUF blocks 96 MB. Here each weight is rebuilt in registers exactly as
//! [`crate::kernels::matmul::q4_1_q8_0::dequantize_q4_1`] / [`crate::kernels::matmul::q4_1_q8_0::dequantize_q8_0`] build the f32 copy
//! (`code · d + m`, `code · d`: a multiply then an add, no FMA), and every output is the
//! same FMA chain over `k` as in [`crate::kernels::gemm`]'s tiles (from zero, `x[k] · w[k] + acc`
//! for k = 0, 1, …): so the result is bit-identical to [`crate::kernels::gemm::DenseMatrix::matmul`]
//! over the dequantized weights (tested in [`crate::kernels::matmul`]), and a prompt row gets the same
//! bits whichever path its prompt length picks.
//!
//! AVX-512F: two eight-row groups per 512-bit vector (lanes 0..8 and 8..16), one weight
//! vector per element `k`, shared by up to [`MAX_ROWS`] input rows; AVX2 + FMA + F16C
//! (`dequant_gemm_avx2`): one group per 256-bit vector.
#![cfg(target_arch = "x86_64")]

use crate::kernels::matmul::q4_1_q8_0::{PairBlocks, Q4_1x8, Q8_0x8};
use crate::kernels::matmul::q4_1_q8_0_vnni512::{f16x16, pair};
use crate::kernels::matmul::{Packed, QuantMatrix};
use crate::kernels::OutPtr;
use anyhow::Result;
use std::arch::x86_64::*;
use task::Task;
pub use task::MAX_ROWS;

mod avx2;
mod task;

/// `acc[i] = x[i][k] · w + acc[i]` for the `R` rows of `x` (row stride `ldx`).
///
/// # Safety
/// AVX-512F; `x` holds `(R − 1) · ldx + k + 1` values.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn fma_rows<const R: usize>(
    acc: &mut [__m512; R],
    x: *const f32,
    ldx: usize,
    k: usize,
    w: __m512,
) {
    for (i, a) in acc.iter_mut().enumerate() {
        // SAFETY: row i < R, element k: inside x (caller's contract).
        let b = _mm512_set1_ps(unsafe { *x.add(i * ldx + k) });
        *a = _mm512_fmadd_ps(b, w, *a);
    }
}

/// `out[i][l]` = row `l` of the two groups in `wb` (rows 0..8 the first group's, 8..16 the
/// second's; one block column per 32 inputs) times input row `i` of `x` (`R` rows, stride
/// `ldx`, `32 · wb.len()` values used), Q4_1 weights.
///
/// # Safety
/// AVX-512F; `x` holds `(R − 1) · ldx + 32 · wb.len()` values.
#[target_feature(enable = "avx512f")]
pub unsafe fn q4_1x16<const R: usize>(
    wb: PairBlocks<'_, Q4_1x8>,
    x: &[f32],
    ldx: usize,
) -> [[f32; 16]; R] {
    assert!(R >= 1 && x.len() >= (R - 1) * ldx + 32 * wb.len());
    let nib = _mm512_set1_epi32(0x0F);
    let mut acc = [_mm512_setzero_ps(); R];
    let xp = x.as_ptr();
    // Two rows or more: prefetch in either layout (see PairBlocks::prefetch).
    let (next, prefetch) = (wb.end(), wb.prefetch() || R >= 2);
    for b in 0..wb.len() {
        let (bl, bh) = wb.get(b);
        if prefetch {
            crate::kernels::prefetch_next(next, 2 * std::mem::size_of::<Q4_1x8>(), b);
        }
        let (d, m) = (f16x16(&bl.d, &bh.d), f16x16(&bl.m, &bh.m));
        for p in 0..4 {
            // Lane l: the four bytes of its row (slots 4r .. 4r + 4); byte t holds element
            // t of chunk 2p (low nibble) and of chunk 2p + 1 (high nibble).
            // Each chunk pair is 32 readable bytes, as `pair` needs.
            let v = pair(bl.qs[p].as_ptr(), bh.qs[p].as_ptr());
            for half in 0..2 {
                for t in 0..4 {
                    let code = _mm512_and_si512(
                        _mm512_srlv_epi32(v, _mm512_set1_epi32((8 * t + 4 * half) as i32)),
                        nib,
                    );
                    let w = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(code), d), m);
                    let k = 32 * b + 4 * (2 * p + half) + t;
                    // SAFETY: k < 32 · wb.len(): inside every row of x (asserted above).
                    unsafe { fma_rows(&mut acc, xp, ldx, k, w) };
                }
            }
        }
    }
    let mut out = [[0f32; 16]; R];
    for (o, a) in out.iter_mut().zip(&acc) {
        // SAFETY: 16 writable f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), *a) };
    }
    out
}

/// [`q4_1x16`] for Q8_0 weights (`w = code · d`, codes signed bytes).
///
/// # Safety
/// As [`q4_1x16`].
#[target_feature(enable = "avx512f")]
pub unsafe fn q8_0x16<const R: usize>(
    wb: PairBlocks<'_, Q8_0x8>,
    x: &[f32],
    ldx: usize,
) -> [[f32; 16]; R] {
    assert!(R >= 1 && x.len() >= (R - 1) * ldx + 32 * wb.len());
    let mut acc = [_mm512_setzero_ps(); R];
    let xp = x.as_ptr();
    // Two rows or more: prefetch in either layout (see PairBlocks::prefetch).
    let (next, prefetch) = (wb.end(), wb.prefetch() || R >= 2);
    for b in 0..wb.len() {
        let (bl, bh) = wb.get(b);
        if prefetch {
            crate::kernels::prefetch_next(next, 2 * std::mem::size_of::<Q8_0x8>(), b);
        }
        let d = f16x16(&bl.d, &bh.d);
        for c in 0..8 {
            // Lane l: the four bytes of its row in chunk c (elements 4c .. 4c + 4).
            // Each chunk is 32 readable bytes, as `pair` needs.
            let v = pair(
                bl.qs[c].as_ptr() as *const u8,
                bh.qs[c].as_ptr() as *const u8,
            );
            for t in 0..4 {
                // Byte t to the top, then an arithmetic shift back: the signed code.
                let up = _mm512_sllv_epi32(v, _mm512_set1_epi32((24 - 8 * t) as i32));
                let code = _mm512_srai_epi32(up, 24);
                let w = _mm512_mul_ps(_mm512_cvtepi32_ps(code), d);
                let k = 32 * b + 4 * c + t;
                // SAFETY: as in q4_1x16.
                unsafe { fma_rows(&mut acc, xp, ldx, k, w) };
            }
        }
    }
    let mut out = [[0f32; 16]; R];
    for (o, a) in out.iter_mut().zip(&acc) {
        // SAFETY: 16 writable f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), *a) };
    }
    out
}

/// Whether [`matmul`] runs on this CPU: where the dense GEMM it must match runs its
/// AVX-512F tiles, or its AVX2 + FMA tiles on a CPU with F16C (portable kernels not forced).
pub fn available() -> bool {
    match crate::kernels::gemm::fma_lanes() {
        16 => true,
        8 => std::is_x86_feature_detected!("f16c"),
        _ => false,
    }
}

/// Groups of eight weight rows per parallel task.
const GROUPS_PER_TASK: usize = 4;

/// `Y = X · Wᵀ` for the `[rows, cols]` matrix in `packed` (rows padded to groups of 8):
/// `xs` `[n, cols]` → `[n, rows]`, bit-identical to the dense GEMM over the dequantized
/// weights. Callers check [`available`] and the sizes (`xs.len()` a multiple of `cols`,
/// `cols` of 32).
pub fn matmul(
    packed: &Packed,
    pairs_interleaved: bool,
    rows: usize,
    cols: usize,
    xs: &[f32],
) -> Vec<f32> {
    use rayon::prelude::*;
    let n = xs.len() / cols.max(1);
    let groups = rows.div_ceil(8);
    let wide = crate::kernels::gemm::fma_lanes() == 16;
    // The 256-bit kernels read each group as one slice (the loader interleaves pairs only
    // where this product is the 512-bit one).
    assert!(wide || !pairs_interleaved);
    let mut y = vec![0f32; n * rows];
    let out = OutPtr(y.as_mut_ptr());
    let tasks: Vec<usize> = (0..groups).step_by(GROUPS_PER_TASK).collect();
    tasks.into_par_iter().for_each(|g0| {
        let task = Task {
            packed,
            pairs_interleaved,
            rows,
            cols,
            xs,
            n,
            groups: g0..(g0 + GROUPS_PER_TASK).min(groups),
            out: &out,
        };
        if wide {
            // SAFETY: `available()` saw AVX-512F.
            unsafe { wide_task(&task) }
        } else {
            // SAFETY: `available()` saw AVX2, FMA and F16C.
            unsafe { avx2::task(&task) }
        }
    });
    y
}

/// [`Task`] with the AVX-512F kernels: two groups per call (a lone last group goes through
/// as both halves; only its 8 lanes are kept).
///
/// # Safety
/// AVX-512F.
unsafe fn wide_task(task: &Task) {
    let (n, cols, rows, xs) = (task.n, task.cols, task.rows, task.xs);
    let (bpr, groups) = (cols / 32, rows.div_ceil(8));
    let il = task.pairs_interleaved;
    let mut g = task.groups.start;
    while g < task.groups.end {
        let g2 = if g + 1 < groups { g + 1 } else { g };
        let row0 = g * 8;
        let keep = (if g2 > g { 16 } else { 8 }).min(rows - row0);
        for i0 in (0..n).step_by(MAX_ROWS) {
            let r = (n - i0).min(MAX_ROWS);
            let x = &xs[i0 * cols..];
            let mut res = [[0f32; 16]; MAX_ROWS];
            // SAFETY: AVX-512F (caller's contract); the halves are block columns of groups g
            // and g2 (same length), and x holds r rows of cols = 32 · bpr values.
            unsafe {
                match task.packed {
                    Packed::Q4_1(b) => {
                        dispatch_q4_1(r, group_pair(b, g, g2, bpr, il), x, cols, &mut res)
                    }
                    Packed::Q8_0(b) => {
                        dispatch_q8_0(r, group_pair(b, g, g2, bpr, il), x, cols, &mut res)
                    }
                    _ => {
                        unreachable!("dense_matmul takes only the Q4_1 and Q8_0 layouts")
                    }
                }
            }
            for (t, row) in res.iter().enumerate().take(r) {
                // SAFETY: input row i0 + t < n, columns row0 .. row0 + keep ≤ rows, in this
                // task's groups.
                unsafe { task.put(i0 + t, row0, row, keep) };
            }
        }
        g = g2 + 1;
    }
}

/// Groups `g` and `g2` of `blocks` (`bpr` block columns each): `g2` is `g + 1`, or `g`
/// again for a lone last group, read as both halves.
fn group_pair<T>(blocks: &[T], g: usize, g2: usize, bpr: usize, il: bool) -> PairBlocks<'_, T> {
    if g2 == g {
        PairBlocks::new(&blocks[g * bpr..][..bpr], 1, 0, bpr)
    } else {
        PairBlocks::of_groups(blocks, g, bpr, il)
    }
}

macro_rules! dispatch {
    ($name:ident, $kernel:ident, $block:ty) => {
        /// The kernel for `r` (1 ..= MAX_ROWS) input rows, results into `res[..r]`.
        ///
        /// # Safety
        /// As the kernel's.
        unsafe fn $name(
            r: usize,
            w: PairBlocks<'_, $block>,
            x: &[f32],
            ldx: usize,
            res: &mut [[f32; 16]; MAX_ROWS],
        ) {
            // SAFETY: forwarded from the caller.
            unsafe {
                match r {
                    1 => res[..1].copy_from_slice(&$kernel::<1>(w, x, ldx)),
                    2 => res[..2].copy_from_slice(&$kernel::<2>(w, x, ldx)),
                    3 => res[..3].copy_from_slice(&$kernel::<3>(w, x, ldx)),
                    4 => res[..4].copy_from_slice(&$kernel::<4>(w, x, ldx)),
                    5 => res[..5].copy_from_slice(&$kernel::<5>(w, x, ldx)),
                    6 => res[..6].copy_from_slice(&$kernel::<6>(w, x, ldx)),
                    7 => res[..7].copy_from_slice(&$kernel::<7>(w, x, ldx)),
                    _ => res.copy_from_slice(&$kernel::<8>(w, x, ldx)),
                }
            }
        }
    };
}
dispatch!(dispatch_q4_1, q4_1x16, Q4_1x8);
dispatch!(dispatch_q8_0, q8_0x16, Q8_0x8);

impl QuantMatrix {
    /// `X · Wᵀ` for prompt rows, bit-identical to [`crate::kernels::gemm::DenseMatrix::matmul`] over
    /// [`QuantMatrix::dequantize`]'s weights but reading these blocks (a quarter to a sixth
    /// of the f32 bytes): `xs` `[n, cols]` → `[n, rows]` (`kernels::matmul::dense_from_blocks`). `None`
    /// where that kernel does not run on this CPU (neither AVX-512F nor AVX2 + FMA + F16C, or
    /// portable kernels forced).
    /// Errors: `xs.len()` not a multiple of `cols`.
    pub fn dense_matmul(&self, xs: &[f32]) -> Option<Result<Vec<f32>>> {
        #[cfg(target_arch = "x86_64")]
        {
            if !available() || !matches!(self.packed, Packed::Q4_1(_) | Packed::Q8_0(_)) {
                return None;
            }
            if self.cols == 0 || !xs.len().is_multiple_of(self.cols) {
                return Some(Err(anyhow::anyhow!(
                    "input of {} values is not rows of {}",
                    xs.len(),
                    self.cols
                )));
            }
            Some(Ok(matmul(
                &self.packed,
                self.pairs_interleaved,
                self.rows,
                self.cols,
                xs,
            )))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = xs;
            None
        }
    }
}

//! The AVX2 + FMA + F16C kernels of [`crate::kernels::matmul::dense_from_blocks`]: one eight-row group per 8-lane
//! vector (the AVX-512F kernels take two groups per 16-lane one). Each weight is rebuilt
//! as the f32 copy builds it (`code · d + m`, `code · d`: a multiply then an add) and every
//! output is one FMA chain over `k` from zero, as in the AVX2 GEMM tile
//! ([`crate::kernels::gemm`]), so the result is that GEMM's bits over the dequantized weights.
//!
//! One chain per output means one FMA per 4–5 cycles (its latency) per accumulator: with
//! one or two input rows (the LM head's row at the end of a prefill) a kernel walks `G`
//! groups side by side, so `G · R` chains are in flight (measured: docs/benchmarks.md,
//! "Groups side by side for the LM head's row").
use super::task::{Task, MAX_ROWS};
use crate::kernels::matmul::q4_1_q8_0::{Q4_1x8, Q8_0x8};
use crate::kernels::matmul::q4_1_q8_0_avx2::f16x8;
use crate::kernels::matmul::Packed;
use std::arch::x86_64::*;

/// Groups walked side by side when a pass has at most [`FEW_ROWS`] input rows.
pub const SIDE_BY_SIDE: usize = 4;

/// Input rows up to which a pass walks [`SIDE_BY_SIDE`] groups at once.
pub const FEW_ROWS: usize = 2;

/// Stores the accumulators as `G` groups of `R` rows of 8 results.
#[inline]
#[target_feature(enable = "avx2")]
fn store<const G: usize, const R: usize>(acc: &[[__m256; R]; G]) -> [[[f32; 8]; R]; G] {
    let mut out = [[[0f32; 8]; R]; G];
    for (og, ag) in out.iter_mut().zip(acc) {
        for (o, a) in og.iter_mut().zip(ag) {
            // SAFETY: 8 writable f32.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), *a) };
        }
    }
    out
}

/// `acc[g][i] = x[i][k] · w[g] + acc[g][i]` for the `R` rows of `x` (row stride `ldx`).
///
/// # Safety
/// AVX2 and FMA; `x` holds `(R − 1) · ldx + k + 1` values.
#[inline]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::needless_range_loop)] // acc[g][i]: one input row against every group
unsafe fn fma_rows<const G: usize, const R: usize>(
    acc: &mut [[__m256; R]; G],
    x: *const f32,
    ldx: usize,
    k: usize,
    w: &[__m256; G],
) {
    for i in 0..R {
        // SAFETY: row i < R, element k: inside x (caller's contract).
        let b = _mm256_set1_ps(unsafe { *x.add(i * ldx + k) });
        for g in 0..G {
            acc[g][i] = _mm256_fmadd_ps(b, w[g], acc[g][i]);
        }
    }
}

/// Checks the kernels' shared contract and returns the block columns per group.
fn check<T, const G: usize, const R: usize>(groups: &[&[T]; G], x: &[f32], ldx: usize) -> usize {
    let bpr = groups[0].len();
    assert!(G >= 1 && R >= 1 && groups.iter().all(|g| g.len() == bpr));
    assert!(x.len() >= (R - 1) * ldx + 32 * bpr);
    bpr
}

/// `out[g][i][l]` = row `l` of group `groups[g]` (one block column per 32 inputs) times
/// input row `i` of `x` (`R` rows, stride `ldx`, `32 · bpr` values used), Q4_1 weights.
/// The groups are consecutive in memory (the weights after the last are prefetched).
///
/// # Safety
/// AVX2, FMA and F16C; every group has the same length `bpr`; `x` holds
/// `(R − 1) · ldx + 32 · bpr` values.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // b indexes every group's block column at once
pub unsafe fn q4_1x8<const G: usize, const R: usize>(
    groups: [&[Q4_1x8]; G],
    x: &[f32],
    ldx: usize,
) -> [[[f32; 8]; R]; G] {
    let bpr = check::<_, G, R>(&groups, x, ldx);
    let nib = _mm256_set1_epi32(0x0F);
    let mut acc = [[_mm256_setzero_ps(); R]; G];
    let xp = x.as_ptr();
    let next = groups[G - 1].as_ptr_range().end as *const u8;
    for b in 0..bpr {
        crate::kernels::prefetch_next(next, G * std::mem::size_of::<Q4_1x8>(), b);
        let d: [__m256; G] = std::array::from_fn(|g| f16x8(&groups[g][b].d));
        let m: [__m256; G] = std::array::from_fn(|g| f16x8(&groups[g][b].m));
        for p in 0..4 {
            // Lane l: the four bytes of its row (slots 4l .. 4l + 4); byte t holds element
            // t of chunk 2p (low nibble) and of chunk 2p + 1 (high nibble).
            // SAFETY: qs[p] is 32 readable bytes; loadu has no alignment requirement.
            let v: [__m256i; G] = std::array::from_fn(|g| unsafe {
                _mm256_loadu_si256(groups[g][b].qs[p].as_ptr() as *const __m256i)
            });
            for half in 0..2 {
                for t in 0..4 {
                    let shift = _mm_cvtsi32_si128((8 * t + 4 * half) as i32);
                    let w: [__m256; G] = std::array::from_fn(|g| {
                        let code = _mm256_and_si256(_mm256_srl_epi32(v[g], shift), nib);
                        _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(code), d[g]), m[g])
                    });
                    let k = 32 * b + 4 * (2 * p + half) + t;
                    // SAFETY: k < 32 · bpr: inside every row of x (checked above).
                    unsafe { fma_rows(&mut acc, xp, ldx, k, &w) };
                }
            }
        }
    }
    store(&acc)
}

/// [`q4_1x8`] for Q8_0 weights (`w = code · d`, codes signed bytes).
///
/// # Safety
/// As [`q4_1x8`].
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // as in q4_1x8
pub unsafe fn q8_0x8<const G: usize, const R: usize>(
    groups: [&[Q8_0x8]; G],
    x: &[f32],
    ldx: usize,
) -> [[[f32; 8]; R]; G] {
    let bpr = check::<_, G, R>(&groups, x, ldx);
    let mut acc = [[_mm256_setzero_ps(); R]; G];
    let xp = x.as_ptr();
    let next = groups[G - 1].as_ptr_range().end as *const u8;
    for b in 0..bpr {
        crate::kernels::prefetch_next(next, G * std::mem::size_of::<Q8_0x8>(), b);
        let d: [__m256; G] = std::array::from_fn(|g| f16x8(&groups[g][b].d));
        for c in 0..8 {
            // Lane l: the four bytes of its row in chunk c (elements 4c .. 4c + 4).
            // SAFETY: qs[c] is 32 readable bytes.
            let v: [__m256i; G] = std::array::from_fn(|g| unsafe {
                _mm256_loadu_si256(groups[g][b].qs[c].as_ptr() as *const __m256i)
            });
            for t in 0..4 {
                // Byte t to the top, then an arithmetic shift back: the signed code.
                let shift = _mm_cvtsi32_si128((24 - 8 * t) as i32);
                let w: [__m256; G] = std::array::from_fn(|g| {
                    let code = _mm256_srai_epi32(_mm256_sll_epi32(v[g], shift), 24);
                    _mm256_mul_ps(_mm256_cvtepi32_ps(code), d[g])
                });
                let k = 32 * b + 4 * c + t;
                // SAFETY: as in q4_1x8.
                unsafe { fma_rows(&mut acc, xp, ldx, k, &w) };
            }
        }
    }
    store(&acc)
}

/// One [`Task`] of [`super::matmul`] with these kernels: per pass of up to
/// [`MAX_ROWS`] input rows, [`SIDE_BY_SIDE`] groups at a time when the pass has at most
/// [`FEW_ROWS`] rows, else one.
///
/// # Safety
/// AVX2, FMA and F16C.
pub(crate) unsafe fn task(task: &Task) {
    let (n, cols, rows) = (task.n, task.cols, task.rows);
    for i0 in (0..n).step_by(MAX_ROWS) {
        let r = (n - i0).min(MAX_ROWS);
        let x = &task.xs[i0 * cols..];
        let mut g = task.groups.start;
        while g < task.groups.end {
            let side = if r <= FEW_ROWS && g + SIDE_BY_SIDE <= task.groups.end {
                SIDE_BY_SIDE
            } else {
                1
            };
            let mut res = [[[0f32; 8]; MAX_ROWS]; SIDE_BY_SIDE];
            // SAFETY: AVX2, FMA and F16C (caller's contract); groups g .. g + side are the
            // task's, and x holds r rows of cols values.
            unsafe { dispatch(task.packed, cols, g, side, r, x, &mut res) };
            for (s, group) in res.iter().enumerate().take(side) {
                let row0 = (g + s) * 8;
                let keep = 8.min(rows - row0);
                for (t, vals) in group.iter().enumerate().take(r) {
                    // SAFETY: input row i0 + t < n, columns row0 .. row0 + keep ≤ rows, in
                    // this task's groups.
                    unsafe { task.put(i0 + t, row0, vals, keep) };
                }
            }
            g += side;
        }
    }
}

/// Copies `G` groups of `R` result rows into `res`.
fn put<const G: usize, const R: usize>(
    res: &mut [[[f32; 8]; MAX_ROWS]; SIDE_BY_SIDE],
    vals: [[[f32; 8]; R]; G],
) {
    for (rg, vg) in res.iter_mut().zip(vals) {
        rg[..R].copy_from_slice(&vg);
    }
}

/// The kernel for `side` (1 or [`SIDE_BY_SIDE`], the latter for `r` ≤ [`FEW_ROWS`]) groups
/// from group `g` and `r` (1 ..= [`MAX_ROWS`]) input rows of `x` (stride `cols`).
///
/// # Safety
/// AVX2, FMA and F16C; groups `g .. g + side` exist; `x` holds `r` rows of `cols` values.
unsafe fn dispatch(
    packed: &Packed,
    cols: usize,
    g: usize,
    side: usize,
    r: usize,
    x: &[f32],
    res: &mut [[[f32; 8]; MAX_ROWS]; SIDE_BY_SIDE],
) {
    let bpr = cols / 32;
    macro_rules! run {
        ($kernel:ident, $blocks:expr) => {{
            let b = $blocks;
            let one = |s: usize| &b[(g + s) * bpr..][..bpr];
            let four = || [one(0), one(1), one(2), one(3)];
            // SAFETY: forwarded from the caller.
            unsafe {
                match (side, r) {
                    (SIDE_BY_SIDE, 1) => put(res, $kernel::<4, 1>(four(), x, cols)),
                    (SIDE_BY_SIDE, _) => put(res, $kernel::<4, 2>(four(), x, cols)),
                    (_, 1) => put(res, $kernel::<1, 1>([one(0)], x, cols)),
                    (_, 2) => put(res, $kernel::<1, 2>([one(0)], x, cols)),
                    (_, 3) => put(res, $kernel::<1, 3>([one(0)], x, cols)),
                    (_, 4) => put(res, $kernel::<1, 4>([one(0)], x, cols)),
                    (_, 5) => put(res, $kernel::<1, 5>([one(0)], x, cols)),
                    (_, 6) => put(res, $kernel::<1, 6>([one(0)], x, cols)),
                    (_, 7) => put(res, $kernel::<1, 7>([one(0)], x, cols)),
                    _ => put(res, $kernel::<1, 8>([one(0)], x, cols)),
                }
            }
        }};
    }
    match packed {
        Packed::Q4_1(b) => run!(q4_1x8, b),
        Packed::Q8_0(b) => run!(q8_0x8, b),
        _ => {
            unreachable!("dense_matmul takes only the Q4_1 and Q8_0 layouts")
        }
    }
}

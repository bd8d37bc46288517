//! The GEMM's register tiles (micro-kernels): portable, AVX2 + FMA (R × 16), AVX-512F
//! (R × 16 for edge panels, R × 48 over an interleaved row tile). Every output is one FMA chain
//! over `k` in order in each of them (one chain of multiplies and adds in the portable tile),
//! so a row's result does not depend on which tile it falls in.
use super::tile::{MR_WIDE, NR, PANELS_PER_TASK};

/// The portable tile: `r` rows, each output a chain of multiplies and adds over `k`.
///
/// Plain `a * b + c`, not `f32::mul_add`: without FMA enabled at compile time (a portable
/// build) `mul_add` is a call to libm's `fmaf` per product, much slower end to end
/// (measured: docs/benchmarks.md, "Plain multiply and add in the portable tile").
///
/// # Safety
/// As [`super::Kernel::tile`].
pub(super) unsafe fn tile_portable(
    r: usize,
    x: &[f32],
    k: usize,
    panel: &[f32],
    out: *mut f32,
    ldo: usize,
) {
    for i in 0..r {
        let xr = &x[i * k..(i + 1) * k];
        let mut acc = [0f32; NR];
        for (xv, w) in xr.iter().zip(panel.chunks_exact(NR)) {
            for (a, &wv) in acc.iter_mut().zip(w) {
                *a += xv * wv;
            }
        }
        // SAFETY: 16 writable values at out + i · ldo (caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(acc.as_ptr(), out.add(i * ldo), NR) };
    }
}

/// The R × 16 register tile (R ≤ 6).
///
/// # Safety
/// AVX2 and FMA; `x` holds `R · k` values, `panel` `k · 16`; `out` as [`super::Kernel::tile`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn tile_avx2<const R: usize>(
    x: &[f32],
    k: usize,
    panel: &[f32],
    out: *mut f32,
    ldo: usize,
) {
    use std::arch::x86_64::*;
    assert!(x.len() >= R * k && panel.len() >= k * NR);
    let mut lo = [_mm256_setzero_ps(); R];
    let mut hi = [_mm256_setzero_ps(); R];
    let (xp, wp) = (x.as_ptr(), panel.as_ptr());
    for kk in 0..k {
        // SAFETY: kk < k, so both loads are inside the panel (asserted above).
        let (w0, w1) = unsafe {
            (
                _mm256_loadu_ps(wp.add(kk * NR)),
                _mm256_loadu_ps(wp.add(kk * NR + 8)),
            )
        };
        for i in 0..R {
            // SAFETY: i < R and kk < k: inside x (asserted above).
            let a = _mm256_set1_ps(unsafe { *xp.add(i * k + kk) });
            lo[i] = _mm256_fmadd_ps(a, w0, lo[i]);
            hi[i] = _mm256_fmadd_ps(a, w1, hi[i]);
        }
    }
    for i in 0..R {
        // SAFETY: row i's 16 outputs are writable (caller's contract).
        unsafe {
            _mm256_storeu_ps(out.add(i * ldo), lo[i]);
            _mm256_storeu_ps(out.add(i * ldo + 8), hi[i]);
        }
    }
}

/// The R × 16 register tile with AVX-512F (R ≤ 12), for edge panels (a task with fewer
/// than 3 full panels): one 16-lane accumulator per row. Every output is the same FMA
/// chain over `k` as in [`tile_avx2`] and [`tile_avx512_wide`] (so the same bits,
/// whatever R).
///
/// # Safety
/// AVX-512F; `x` holds `R · k` values, `panel` `k · 16`; `out` as [`super::Kernel::tile`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn tile_avx512<const R: usize>(
    x: &[f32],
    k: usize,
    panel: &[f32],
    out: *mut f32,
    ldo: usize,
) {
    use std::arch::x86_64::*;
    assert!(x.len() >= R * k && panel.len() >= k * NR);
    let mut acc = [_mm512_setzero_ps(); R];
    let (xp, wp) = (x.as_ptr(), panel.as_ptr());
    for kk in 0..k {
        // SAFETY: kk < k: inside the panel (asserted above).
        let w = unsafe { _mm512_loadu_ps(wp.add(kk * NR)) };
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: i < R and kk < k: inside x (asserted above).
            let b = _mm512_set1_ps(unsafe { *xp.add(i * k + kk) });
            *a = _mm512_fmadd_ps(b, w, *a);
        }
    }
    for (i, a) in acc.iter().enumerate() {
        // SAFETY: row i's 16 outputs are writable (caller's contract).
        unsafe { _mm512_storeu_ps(out.add(i * ldo), *a) };
    }
}

/// The R × 48 wide tile with AVX-512F over one interleaved row tile
/// ([`super::interleave_row_tiles`]) and steps `ks` of `k`: `PANELS_PER_TASK` consecutive panels,
/// one 16-lane accumulator per row and panel (R · 3 ≤ 24 of the 32 registers); per step, 3
/// weight loads and R broadcasts from one 32-byte line. A pass that does not start at step
/// 0 resumes the chains from the values in `out` (the previous pass's), so over passes
/// `0..c, c..2c, …` every output is the same FMA chain over `k` as in [`tile_avx512`] and
/// [`tile_avx2`] (the same bits). Step `j` of the pass also prefetches line `j` of `ahead`
/// into L2 (a hint, no effect on the result).
///
/// # Safety
/// AVX-512F; `x` holds `k · MR_WIDE` values, `panels` `3 · k · 16`; `ks` inside `0..k`;
/// `out` valid for reads and writes of 48 values at `out + i · ldo` for every `i < R`, as
/// [`super::Kernel::tile`], holding the previous pass's results when `ks.start > 0`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn tile_avx512_wide<const R: usize>(
    x: &[f32],
    k: usize,
    ks: std::ops::Range<usize>,
    panels: &[f32],
    out: *mut f32,
    ldo: usize,
    ahead: &[f32],
) {
    use std::arch::x86_64::*;
    const P: usize = PANELS_PER_TASK;
    assert!(R <= MR_WIDE && x.len() >= k * MR_WIDE && panels.len() >= P * k * NR);
    assert!(ks.start <= ks.end && ks.end <= k);
    let mut acc = [[_mm512_setzero_ps(); P]; R];
    if ks.start > 0 {
        for (i, row) in acc.iter_mut().enumerate() {
            for (p, a) in row.iter_mut().enumerate() {
                // SAFETY: row i's 48 outputs hold the chains so far (caller's contract).
                *a = unsafe { _mm512_loadu_ps(out.add(i * ldo + p * NR)) };
            }
        }
    }
    let xp = x.as_ptr();
    let w: [*const f32; P] = std::array::from_fn(|p| panels[p * k * NR..].as_ptr());
    let ahead_lines = (ahead.len() / NR).min(ks.len());
    for (line, kk) in ks.enumerate() {
        if line < ahead_lines {
            // SAFETY: line `line` of `ahead` is inside it; a prefetch never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.as_ptr().add(line * NR) as *const i8) };
        }
        // SAFETY: kk < k: inside each panel and the tile (asserted above).
        let wv = w.map(|wp| unsafe { _mm512_loadu_ps(wp.add(kk * NR)) });
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: i < R ≤ MR_WIDE and kk < k: inside the tile (asserted above).
            let b = _mm512_set1_ps(unsafe { *xp.add(kk * MR_WIDE + i) });
            for (a, wv) in row.iter_mut().zip(&wv) {
                *a = _mm512_fmadd_ps(b, *wv, *a);
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (p, a) in row.iter().enumerate() {
            // SAFETY: row i's 48 outputs are writable (caller's contract).
            unsafe { _mm512_storeu_ps(out.add(i * ldo + p * NR), *a) };
        }
    }
}

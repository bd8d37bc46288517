//! Which GEMM micro-kernel this CPU runs (AVX-512F, AVX2 + FMA, or portable), chosen at
//! run time, and the dispatch from a tile's row count to the kernel's const-generic tile.
use super::micro::tile_portable;
#[cfg(target_arch = "x86_64")]
use super::micro::{tile_avx2, tile_avx512, tile_avx512_wide};
use super::tile::MR;
#[cfg(target_arch = "x86_64")]
use super::tile::MR_AVX512;

/// f32 lanes per FMA of the prefill GEMM on this CPU: 16 with AVX-512F, 8 with AVX2 + FMA,
/// 0 for the portable code. The machine-limits f32 peak is measured at this width
/// ([`crate::roofline::peak`]), so a prefill's % of peak compares like with like.
pub fn fma_lanes() -> usize {
    match Kernel::detect() {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => 16,
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => 8,
        Kernel::Portable => 0,
    }
}

/// Which micro-kernel this CPU runs.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kernel {
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512F: one 16-lane register per tile row, up to 12 rows.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    Portable,
}

impl Kernel {
    /// Input rows per tile.
    pub(super) fn rows(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => MR_AVX512,
            _ => MR,
        }
    }

    /// Whether this kernel has the `MR_WIDE × PANELS_PER_TASK` tile.
    pub(super) fn wide(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if let Kernel::Avx512 = self {
            return true;
        }
        false
    }

    /// `r ≤ MR_WIDE` rows of `x` (one tile of [`super::row_tiles::interleave_row_tiles`]: `x[kk · MR_WIDE +
    /// i]` is row `i`'s input `kk`) times `PANELS_PER_TASK` consecutive panels (`panels`:
    /// `PANELS_PER_TASK · k · 16` values) → `out` rows (stride `ldo`), 48 columns each. Does
    /// nothing on a kernel without the wide tile (`wide()` is false). `ahead`: values to
    /// prefetch into L2 meanwhile, one 64-byte line per step of `k` (at most `k` lines;
    /// empty for none).
    ///
    /// # Safety
    /// As [`Kernel::tile`], for 48 values per row.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn wide_tile(
        self,
        r: usize,
        x: &[f32],
        k: usize,
        ks: std::ops::Range<usize>,
        panels: &[f32],
        out: *mut f32,
        ldo: usize,
        ahead: &[f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if let Kernel::Avx512 = self {
            // SAFETY: detect() saw AVX-512F; the tile asserts the input lengths, and the
            // caller vouches for `out`.
            unsafe {
                match r {
                    1 => tile_avx512_wide::<1>(x, k, ks.clone(), panels, out, ldo, ahead),
                    2 => tile_avx512_wide::<2>(x, k, ks.clone(), panels, out, ldo, ahead),
                    3 => tile_avx512_wide::<3>(x, k, ks.clone(), panels, out, ldo, ahead),
                    4 => tile_avx512_wide::<4>(x, k, ks.clone(), panels, out, ldo, ahead),
                    5 => tile_avx512_wide::<5>(x, k, ks.clone(), panels, out, ldo, ahead),
                    6 => tile_avx512_wide::<6>(x, k, ks.clone(), panels, out, ldo, ahead),
                    7 => tile_avx512_wide::<7>(x, k, ks.clone(), panels, out, ldo, ahead),
                    _ => tile_avx512_wide::<8>(x, k, ks.clone(), panels, out, ldo, ahead),
                }
            }
        }
        let _ = (r, x, k, ks, panels, out, ldo, ahead);
    }

    pub(super) fn detect() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::kernels::avx2_fma() {
                if std::is_x86_feature_detected!("avx512f") {
                    return Kernel::Avx512;
                }
                return Kernel::Avx2;
            }
        }
        Kernel::Portable
    }

    /// `r ≤ self.rows()` rows of `x` (row stride `k`) times one panel → `out` rows (stride `ldo`),
    /// 16 columns each.
    ///
    /// # Safety
    /// `out` must be valid for writes of 16 values at `out + i · ldo` for every `i < r`,
    /// with no other thread reading or writing those values meanwhile.
    pub(super) unsafe fn tile(
        self,
        r: usize,
        x: &[f32],
        k: usize,
        panel: &[f32],
        out: *mut f32,
        ldo: usize,
    ) {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: detect() saw AVX2 and FMA; tile_avx2 asserts the input lengths, and the
            // caller vouches for `out`.
            Kernel::Avx2 => unsafe {
                match r {
                    1 => tile_avx2::<1>(x, k, panel, out, ldo),
                    2 => tile_avx2::<2>(x, k, panel, out, ldo),
                    3 => tile_avx2::<3>(x, k, panel, out, ldo),
                    4 => tile_avx2::<4>(x, k, panel, out, ldo),
                    5 => tile_avx2::<5>(x, k, panel, out, ldo),
                    _ => tile_avx2::<6>(x, k, panel, out, ldo),
                }
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: detect() saw AVX-512F; the caller vouches for `out`.
            Kernel::Avx512 => unsafe {
                match r {
                    1 => tile_avx512::<1>(x, k, panel, out, ldo),
                    2 => tile_avx512::<2>(x, k, panel, out, ldo),
                    3 => tile_avx512::<3>(x, k, panel, out, ldo),
                    4 => tile_avx512::<4>(x, k, panel, out, ldo),
                    5 => tile_avx512::<5>(x, k, panel, out, ldo),
                    6 => tile_avx512::<6>(x, k, panel, out, ldo),
                    7 => tile_avx512::<7>(x, k, panel, out, ldo),
                    8 => tile_avx512::<8>(x, k, panel, out, ldo),
                    9 => tile_avx512::<9>(x, k, panel, out, ldo),
                    10 => tile_avx512::<10>(x, k, panel, out, ldo),
                    11 => tile_avx512::<11>(x, k, panel, out, ldo),
                    _ => tile_avx512::<12>(x, k, panel, out, ldo),
                }
            },
            // SAFETY: forwarded from the caller.
            Kernel::Portable => unsafe { tile_portable(r, x, k, panel, out, ldo) },
        }
    }
}

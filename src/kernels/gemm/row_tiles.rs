//! The prefill GEMM's input rows as the AVX-512 wide tile reads them: tiles of
//! [`MR_WIDE`] rows interleaved value by value (see [`interleave_row_tiles`]).
use super::tile::MR_WIDE;
use rayon::prelude::*;

/// `xs` (`[n, cols]` row-major) as tiles of `MR_WIDE` rows for the wide tile: tile `t`
/// holds rows `8t .. 8t + 8` interleaved, `tile[kk · 8 + i] = xs[8t + i][kk]` (zeros past
/// row `n`), so one step of `k` reads its 8 inputs from one 32-byte line instead of 8 rows
/// (8 address computations per step in the micro-kernel before). Tile `t` starts at
/// `8t · cols`, where row `8t` starts in `xs`. Every element is written once (no zeroing
/// pass first), 8 × 8 values at a time by [`transpose_8x8`] where the CPU has AVX: a
/// scalar strided walk cost a noticeable share of a prefill (measured: docs/benchmarks.md,
/// "Input row tiles transposed 8 × 8").
pub(super) fn interleave_row_tiles(xs: &[f32], n: usize, cols: usize) -> Vec<f32> {
    let len = n.div_ceil(MR_WIDE) * MR_WIDE * cols;
    let mut tiles: Vec<f32> = Vec::with_capacity(len);
    let fill = |(t, tile): (usize, &mut [std::mem::MaybeUninit<f32>])| {
        let rows = &xs[t * MR_WIDE * cols..((t + 1) * MR_WIDE).min(n) * cols];
        interleave_tile(rows, cols, tile);
    };
    let spare = &mut tiles.spare_capacity_mut()[..len];
    let chunk = (MR_WIDE * cols).max(1);
    // A short prompt's few tiles take microseconds: not worth waking the other threads.
    if n <= 4 * MR_WIDE {
        spare.chunks_mut(chunk).enumerate().for_each(fill);
    } else {
        spare.par_chunks_mut(chunk).enumerate().for_each(fill);
    }
    // SAFETY: interleave_tile wrote every element of every tile (len in all).
    unsafe { tiles.set_len(len) };
    tiles
}

/// One tile of [`interleave_row_tiles`]: `rows` (`r ≤ 8` rows of `cols`) into `tile`
/// (`8 · cols` values), rows past `r` as zeros. Writes every element of `tile`.
fn interleave_tile(rows: &[f32], cols: usize, tile: &mut [std::mem::MaybeUninit<f32>]) {
    assert!(tile.len() == MR_WIDE * cols && rows.len() <= MR_WIDE * cols);
    let r = rows.len().checked_div(cols).unwrap_or(0);
    #[allow(unused_mut)]
    let mut kk0 = 0;
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx") {
        // SAFETY: AVX detected; the lengths are asserted above.
        kk0 = unsafe { transpose_tile(rows, cols, r, tile) };
    }
    for kk in kk0..cols {
        for i in 0..MR_WIDE {
            let v = if i < r { rows[i * cols + kk] } else { 0.0 };
            tile[kk * MR_WIDE + i].write(v);
        }
    }
}

/// The columns `0 .. 8⌊cols / 8⌋` of [`interleave_tile`], 8 at a time; returns how many
/// it wrote.
///
/// # Safety
/// AVX; `rows` holds `r` rows of `cols` values and `tile` `8 · cols` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose_tile(
    rows: &[f32],
    cols: usize,
    r: usize,
    tile: &mut [std::mem::MaybeUninit<f32>],
) -> usize {
    let mut kk0 = 0;
    while kk0 + 8 <= cols {
        // SAFETY: rows i < r hold columns kk0 .. kk0 + 8 (kk0 + 8 ≤ cols), and the tile's
        // values kk0 · 8 .. (kk0 + 8) · 8 are inside it (caller's contract).
        unsafe {
            transpose_8x8(
                rows.as_ptr().add(kk0),
                cols,
                r,
                tile.as_mut_ptr().add(kk0 * MR_WIDE),
            )
        };
        kk0 += 8;
    }
    kk0
}

/// Columns `0..8` of the first `r ≤ 8` rows at `src` (row stride `stride` values), rows
/// past `r` as zeros, written column by column to `dst`: `dst[j · 8 + i] = src[i · stride
/// + j]` (the 8 × 8 transpose of unpack, shuffle and 128-bit permute).
///
/// # Safety
/// AVX; `src + i · stride` readable for 8 values for every `i < r`; `dst` writable for 64.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn transpose_8x8(
    src: *const f32,
    stride: usize,
    r: usize,
    dst: *mut std::mem::MaybeUninit<f32>,
) {
    use std::arch::x86_64::*;
    let row = |i: usize| {
        if i < r {
            // SAFETY: row i < r is readable for 8 values (caller's contract).
            unsafe { _mm256_loadu_ps(src.add(i * stride)) }
        } else {
            _mm256_setzero_ps()
        }
    };
    let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
    let (r4, r5, r6, r7) = (row(4), row(5), row(6), row(7));
    // Pairs of rows interleaved: t0 = r0[0] r1[0] r0[1] r1[1] | r0[4] r1[4] r0[5] r1[5].
    let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
    let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
    let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
    let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
    // Quads: u0 = column 0 of rows 0..4 | column 4 of rows 0..4, and so on.
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    let columns = [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ];
    for (j, c) in columns.into_iter().enumerate() {
        // SAFETY: dst holds 64 writable values (caller's contract); MaybeUninit<f32> has
        // f32's layout.
        unsafe { _mm256_storeu_ps(dst.add(j * 8) as *mut f32, c) };
    }
}

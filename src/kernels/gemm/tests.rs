//! Tests of the prefill GEMM against a triple loop in f64 and across its tile paths.
use super::tile::MR;
use super::*;

#[test]
fn matches_a_plain_triple_loop_for_odd_shapes() -> Result<()> {
    for (n, rows, cols) in [
        (1, 16, 8),
        (7, 33, 40),
        (13, 50, 64),
        (50, 17, 3),
        (49, 40, 9),
        // Wide tasks, k in three chunks, a last tile of 5 rows.
        (61, 104, 2 * K_CHUNK + 44),
    ] {
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
            .collect();
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
            .collect();
        let got = DenseMatrix::pack(&w, rows, cols)?.matmul(&x)?;
        assert_eq!(got.len(), n * rows);
        for i in 0..n {
            for j in 0..rows {
                let want: f64 = (0..cols)
                    .map(|k| x[i * cols + k] as f64 * w[j * cols + k] as f64)
                    .sum();
                let y = got[i * rows + j] as f64;
                assert!(
                    (y - want).abs() < 1e-4 * (1.0 + want.abs()),
                    "[{i},{j}] {y} vs {want}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn a_row_does_not_depend_on_the_batch() -> Result<()> {
    // 7 panels: two wide tasks of 3, then a lone partial panel; k in three chunks.
    let (rows, cols) = (104, 2 * K_CHUNK + 44);
    let w: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
    let m = DenseMatrix::pack(&w, rows, cols)?;
    let x: Vec<f32> = (0..61 * cols).map(|i| (i as f32 * 0.11).cos()).collect();
    let all = m.matmul(&x)?;
    for i in [0usize, 5, 6, 47, 48, 60] {
        let one = m.matmul(&x[i * cols..(i + 1) * cols])?;
        assert_eq!(&all[i * rows..(i + 1) * rows], &one[..], "row {i}");
    }
    Ok(())
}

/// Several matrices in one parallel region (as Q, K and V are in a prefill) give each
/// matrix's bits alone, including a matrix whose last panel is partial and tasks whose
/// prefetched successor belongs to another matrix.
#[test]
fn a_group_of_matrices_gives_each_ones_bits() -> Result<()> {
    let cols = 64;
    let shapes = [104usize, 48, 16, 200];
    let mats: Vec<DenseMatrix> = shapes
        .iter()
        .enumerate()
        .map(|(s, &rows)| {
            let w: Vec<f32> = (0..rows * cols)
                .map(|i| (i as f32 * 0.37 + s as f32).sin())
                .collect();
            DenseMatrix::pack(&w, rows, cols)
        })
        .collect::<Result<_>>()?;
    for n in [1usize, 9, 61] {
        let x: Vec<f32> = (0..n * cols).map(|i| (i as f32 * 0.11).cos()).collect();
        let refs: Vec<&DenseMatrix> = mats.iter().collect();
        let group = DenseMatrix::matmul_many(&refs, &x)?;
        assert_eq!(group.len(), mats.len());
        for (m, got) in mats.iter().zip(&group) {
            assert_eq!(got, &m.matmul(&x)?, "{n} rows, {:?}", m.dims());
        }
    }
    let odd = DenseMatrix::pack(&[0.0; 32], 1, 32)?;
    let err = DenseMatrix::matmul_many(&[&mats[0], &odd], &[0.0; 64]);
    assert!(err.is_err(), "matrices of 64 and 32 inputs in one group");
    Ok(())
}

/// The AVX-512 tile gives the AVX2 tile's bits for every row count (1 to 12 rows against
/// 1 to 6): each output is the same FMA chain.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_and_avx512_tiles_agree_to_the_bit() {
    if !(std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("avx512f"))
    {
        eprintln!("no AVX-512F on this CPU: nothing to compare");
        return;
    }
    let k = 77;
    let panel: Vec<f32> = (0..k * NR).map(|i| (i as f32 * 0.37).sin()).collect();
    let x: Vec<f32> = (0..MR_AVX512 * k)
        .map(|i| (i as f32 * 0.11).cos())
        .collect();
    for r in 1..=MR_AVX512 {
        let mut wide = vec![0f32; r * NR];
        // SAFETY: AVX-512F detected; `wide` holds r rows of NR values.
        unsafe { Kernel::Avx512.tile(r, &x, k, &panel, wide.as_mut_ptr(), NR) };
        let mut narrow = vec![0f32; r * NR];
        let mut i = 0;
        while i < r {
            let rr = (r - i).min(MR);
            // SAFETY: AVX2 and FMA detected; rows i .. i + rr of `narrow`.
            unsafe {
                Kernel::Avx2.tile(
                    rr,
                    &x[i * k..],
                    k,
                    &panel,
                    narrow.as_mut_ptr().add(i * NR),
                    NR,
                )
            };
            i += rr;
        }
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&wide), bits(&narrow), "{r} rows");
    }
}

/// The wide AVX-512 tile gives, for every row count, the bits of the 12 × 16 tile run
/// panel by panel.
#[cfg(target_arch = "x86_64")]
#[test]
fn wide_and_single_panel_tiles_agree_to_the_bit() {
    if !std::is_x86_feature_detected!("avx512f") {
        eprintln!("no AVX-512F on this CPU: nothing to compare");
        return;
    }
    let k = 2 * K_CHUNK + 44;
    let ldo = PANELS_PER_TASK * NR;
    let panels: Vec<f32> = (0..PANELS_PER_TASK * k * NR)
        .map(|i| (i as f32 * 0.37).sin())
        .collect();
    let x: Vec<f32> = (0..MR_WIDE * k).map(|i| (i as f32 * 0.11).cos()).collect();
    for r in 1..=MR_WIDE {
        let tile = interleave_row_tiles(&x[..r * k], r, k);
        assert_eq!(tile.len(), MR_WIDE * k);
        let mut wide = vec![0f32; r * ldo];
        // In passes of K_CHUNK steps, each resuming the chains in `wide`, as run_task
        // runs them.
        for k0 in (0..k).step_by(K_CHUNK) {
            let ks = k0..(k0 + K_CHUNK).min(k);
            // SAFETY: AVX-512F detected; `wide` holds r rows of 48 values.
            unsafe {
                Kernel::Avx512.wide_tile(r, &tile, k, ks, &panels, wide.as_mut_ptr(), ldo, &panels)
            };
        }
        let mut single = vec![0f32; r * ldo];
        for p in 0..PANELS_PER_TASK {
            // SAFETY: AVX-512F detected; columns p·16 .. p·16 + 16 of r rows.
            unsafe {
                Kernel::Avx512.tile(
                    r,
                    &x,
                    k,
                    &panels[p * k * NR..],
                    single.as_mut_ptr().add(p * NR),
                    ldo,
                )
            };
        }
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&wide), bits(&single), "{r} rows");
    }
}

/// The interleaved row tiles hold exactly `tile[kk · 8 + i] = xs[8t + i][kk]`, zeros past
/// the last row, for widths with and without a multiple of 8 (the 8 × 8 transposes and the
/// scalar tail) and row counts that leave the last tile short.
#[test]
fn interleaved_tiles_match_their_definition() {
    for cols in [1usize, 7, 8, 13, 24, 576] {
        for n in 1..=17usize {
            let xs: Vec<f32> = (0..n * cols).map(|i| i as f32 + 0.5).collect();
            let tiles = interleave_row_tiles(&xs, n, cols);
            assert_eq!(tiles.len(), n.div_ceil(MR_WIDE) * MR_WIDE * cols);
            for (t, tile) in tiles.chunks_exact(MR_WIDE * cols).enumerate() {
                for kk in 0..cols {
                    for i in 0..MR_WIDE {
                        let row = t * MR_WIDE + i;
                        let want = if row < n { xs[row * cols + kk] } else { 0.0 };
                        assert_eq!(
                            tile[kk * MR_WIDE + i].to_bits(),
                            want.to_bits(),
                            "{n} rows of {cols}: tile {t}, step {kk}, row {i}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn rejects_bad_sizes() {
    assert!(DenseMatrix::pack(&[0.0; 5], 2, 3).is_err());
    let m = DenseMatrix::pack(&[0.0; 6], 2, 3);
    assert!(m.is_ok_and(|m| m.matmul(&[0.0; 4]).is_err()));
}

//! Tests of the quantized matrix products: against the dequantized dot product, across
//! kernels (bit for bit) and batches.
use super::q4_1_q8_0::ROWS;
use super::*;
use crate::kernels::matmul::q8_1::Q8_1Vector;
use anyhow::Result;
use half::f16;

fn random_q4_1(rows: usize, cols: usize, seed: u32) -> Vec<u8> {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_mul(1664525).wrapping_add(1013904223);
        (state >> 8) as u8
    };
    let mut bytes = Vec::new();
    for _ in 0..rows * cols / QK {
        bytes.extend(f16::from_f32(0.01 + next() as f32 / 5000.0).to_le_bytes());
        bytes.extend(f16::from_f32(-0.05 + next() as f32 / 10000.0).to_le_bytes());
        for _ in 0..16 {
            bytes.push(next());
        }
    }
    bytes
}

#[test]
fn matches_dequantized_dot_within_activation_quantization_error() -> Result<()> {
    let (rows, cols) = (40, 96);
    let w = QuantMatrix::from_ggml_bytes(&random_q4_1(rows, cols, 7), rows, cols)?;
    // The scalar kernel reads one group as one slice: groups one after the other.
    let flat = QuantMatrix::q4_1_laid_out(&random_q4_1(rows, cols, 7), rows, cols, false)?;
    let dense = w.dequantize();
    let xs: Vec<f32> = (0..2 * cols)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
        .collect();
    let got = w.matmul(&xs)?;
    for v in 0..2 {
        let x = &xs[v * cols..(v + 1) * cols];
        let xq = Q8_1Vector::quantize(x);
        for r in 0..rows {
            // Exact reference on the quantized activations: Σ w · (d · q).
            let want: f32 = (0..cols)
                .map(|c| dense[r * cols + c] * xq.d[c / QK] * xq.qs[c / QK][c % QK] as f32)
                .sum();
            let y = got[v * rows + r];
            assert!(
                (y - want).abs() < 1e-3 * (1.0 + want.abs()),
                "row {r}: {y} vs {want}"
            );
            let scalar = flat.group_dot(Kernel::Scalar, r / ROWS, &xq)[r % ROWS];
            assert!(
                (scalar - y).abs() < 1e-4 * (1.0 + y.abs()),
                "scalar {scalar} vs simd {y}"
            );
        }
    }
    Ok(())
}

/// The dense product read from the blocks gives the dense GEMM's bits over the
/// dequantized weights, for Q4_1 and Q8_0, 1 to 11 input rows (past one 8-row pass), a
/// lone last group (5 groups), a partial one (70 rows) and a partial one among four walked
/// side by side (30 and 28 rows: the AVX2 kernels' one- and two-row passes).
#[test]
fn dense_product_from_the_blocks_gives_the_dense_gemms_bits() -> Result<()> {
    for (rows, cols) in [(40usize, 96usize), (70, 96), (16, 96), (30, 96), (28, 576)] {
        let mut mats = vec![
            QuantMatrix::q4_1_laid_out(&random_q4_1(rows, cols, 3), rows, cols, false)?,
            QuantMatrix::q8_0_laid_out(&random_q8_0(rows, cols), rows, cols, false)?,
        ];
        if pairs_interleaved_here() {
            mats.push(QuantMatrix::q4_1_laid_out(
                &random_q4_1(rows, cols, 3),
                rows,
                cols,
                true,
            )?);
            mats.push(QuantMatrix::q8_0_laid_out(
                &random_q8_0(rows, cols),
                rows,
                cols,
                true,
            )?);
        }
        for m in mats {
            let dense = crate::kernels::gemm::DenseMatrix::pack(&m.dequantize(), rows, cols)?;
            for n in 1..=11 {
                let xs: Vec<f32> = (0..n * cols)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / (3.0 + (i % 7) as f32))
                    .collect();
                let Some(got) = m.dense_matmul(&xs) else {
                    eprintln!("neither AVX-512F nor AVX2 + FMA + F16C here: nothing to compare");
                    return Ok(());
                };
                assert_eq!(got?, dense.matmul(&xs)?, "{rows} rows, {n} inputs");
            }
        }
    }
    Ok(())
}

fn random_q8_0(rows: usize, cols: usize) -> Vec<u8> {
    (0..rows * cols / QK)
        .flat_map(|b| {
            let mut blk = f16::from_f32(0.01 + b as f32 * 1e-4).to_le_bytes().to_vec();
            blk.extend((0..32).map(|j| ((b * 31 + j * 17) % 256) as u8));
            blk
        })
        .collect()
}

/// Inputs go through the kernels four at a time: every input's result is bit-identical
/// to running it alone, for every batch size and position in the batch.
#[test]
fn a_row_does_not_depend_on_the_batch() -> Result<()> {
    let (rows, cols) = (70, 64);
    for w in [
        QuantMatrix::from_ggml_bytes(&random_q4_1(rows, cols, 3), rows, cols)?,
        QuantMatrix::from_ggml_q8_0_bytes(&random_q8_0(rows, cols), rows, cols)?,
    ] {
        let xs: Vec<f32> = (0..9 * cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let alone: Vec<Vec<f32>> = xs
            .chunks(cols)
            .map(|x| w.matmul(x))
            .collect::<Result<_>>()?;
        for n in 1..=9 {
            let all = w.matmul(&xs[..n * cols])?;
            for (v, one) in alone.iter().take(n).enumerate() {
                assert_eq!(&all[v * rows..(v + 1) * rows], &one[..], "n {n}, input {v}");
            }
        }
    }
    Ok(())
}

#[test]
fn q8_0_matches_its_dequantized_dot() -> Result<()> {
    let (rows, cols) = (24, 64);
    let w = QuantMatrix::from_ggml_q8_0_bytes(&random_q8_0(rows, cols), rows, cols)?;
    let flat = QuantMatrix::q8_0_laid_out(&random_q8_0(rows, cols), rows, cols, false)?;
    let dense = w.dequantize();
    let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.7).cos()).collect();
    let xq = Q8_1Vector::quantize(&x);
    let got = w.matmul(&x)?;
    for r in 0..rows {
        let want: f32 = (0..cols)
            .map(|c| dense[r * cols + c] * xq.d[c / QK] * xq.qs[c / QK][c % QK] as f32)
            .sum();
        assert!(
            (got[r] - want).abs() < 1e-4 * (1.0 + want.abs()),
            "row {r}: {} vs {want}",
            got[r]
        );
        let scalar = flat.group_dot(Kernel::Scalar, r / ROWS, &xq)[r % ROWS];
        assert!((scalar - got[r]).abs() < 1e-4 * (1.0 + want.abs()));
    }
    Ok(())
}

/// The AVX2 and the AVX-512 VNNI kernels, 256-bit over one group and 512-bit over two,
/// give bit-identical results (all sum exact integers per block, then do the same float
/// steps), for one to eleven inputs.
#[cfg(target_arch = "x86_64")]
#[test]
fn vnni_and_avx2_kernels_agree_to_the_bit() -> Result<()> {
    let vnni = matches!(Kernel::detect(), Kernel::Vnni | Kernel::Vnni512);
    if !vnni && std::env::var_os("NANOLLM_NO_VNNI").is_none() {
        eprintln!("no AVX-512 VNNI on this CPU: nothing to compare");
        return Ok(());
    }
    let (rows, cols) = (24, 96);
    // Groups one after the other (as the 256-bit kernels read them), and pairs interleaved.
    for (w, il) in [
        (
            QuantMatrix::q4_1_laid_out(&random_q4_1(rows, cols, 5), rows, cols, false)?,
            QuantMatrix::q4_1_laid_out(&random_q4_1(rows, cols, 5), rows, cols, true)?,
        ),
        (
            QuantMatrix::q8_0_laid_out(&random_q8_0(rows, cols), rows, cols, false)?,
            QuantMatrix::q8_0_laid_out(&random_q8_0(rows, cols), rows, cols, true)?,
        ),
    ] {
        for n in 1..=11 {
            let xs: Vec<Q8_1Vector> = (0..n)
                .map(|v| {
                    let x: Vec<f32> = (0..cols)
                        .map(|i| ((i * 13 + v * 7) as f32 * 0.31).sin())
                        .collect();
                    Q8_1Vector::quantize(&x)
                })
                .collect();
            // [n, rows], as matmul_group lays them out.
            let (mut a, mut b) = (vec![0f32; n * rows], vec![0f32; n * rows]);
            for g in 0..rows / ROWS {
                w.group_dot_many(Kernel::Avx2, g, &xs, &mut into_rows(&mut a, rows, g * ROWS));
                w.group_dot_many(Kernel::Vnni, g, &xs, &mut into_rows(&mut b, rows, g * ROWS));
            }
            assert_eq!(a, b, "{n} inputs");
            if matches!(Kernel::detect(), Kernel::Vnni512) {
                for g in 0..rows / ROWS - 1 {
                    let mut c = vec![0f32; n * rows];
                    // SAFETY: detect() chose Vnni512 only on a CPU with its features;
                    // g + 1 is a group of the matrix.
                    unsafe {
                        w.group_pair_dot_many(g, &xs, &mut into_rows(&mut c, rows, g * ROWS))
                    };
                    let mut d = vec![0f32; n * rows];
                    if g % 2 == 0 {
                        // SAFETY: as above; g is even, the first of an interleaved pair.
                        unsafe {
                            il.group_pair_dot_many(g, &xs, &mut into_rows(&mut d, rows, g * ROWS))
                        };
                    }
                    for v in 0..n {
                        let cols = v * rows + g * ROWS..v * rows + (g + 2) * ROWS;
                        assert_eq!(
                            &a[cols.clone()],
                            &c[cols.clone()],
                            "groups {g}, {}, {n} inputs",
                            g + 1
                        );
                        if g % 2 == 0 {
                            assert_eq!(&a[cols.clone()], &d[cols], "interleaved pair {g}");
                        }
                    }
                }
            } else {
                eprintln!("no AVX-512F/BW on this CPU: the 512-bit kernels are not compared");
            }
        }
    }
    Ok(())
}

/// The portable Q4_1 and Q8_0 kernels give the SIMD kernels' bits (the same exact integer
/// sums, the same fused multiply-adds in the same order): in a model, 8-bit activations
/// re-round any last-bit difference and the logits part by the whole quantization noise.
#[cfg(target_arch = "x86_64")]
#[test]
fn portable_q4_1_and_q8_0_kernels_give_the_simd_bits() -> Result<()> {
    if matches!(Kernel::detect(), Kernel::Scalar) {
        eprintln!("no SIMD kernel on this CPU (or portable forced): nothing to compare");
        return Ok(());
    }
    let (rows, cols) = (24, 256);
    for w in [
        QuantMatrix::q4_1_laid_out(&random_q4_1(rows, cols, 9), rows, cols, false)?,
        QuantMatrix::q8_0_laid_out(&random_q8_0(rows, cols), rows, cols, false)?,
    ] {
        for v in 0..5 {
            let x: Vec<f32> = (0..cols)
                .map(|i| ((i * 17 + v * 5) as f32 * 0.37).sin() * (1.0 + v as f32))
                .collect();
            let xq = Q8_1Vector::quantize(&x);
            for g in 0..rows / ROWS {
                let simd = w.group_dot(Kernel::Avx2, g, &xq);
                let portable = w.group_dot(Kernel::Scalar, g, &xq);
                assert_eq!(
                    simd.map(f32::to_bits),
                    portable.map(f32::to_bits),
                    "group {g}"
                );
            }
        }
    }
    Ok(())
}

/// Pairs of groups interleaved block by block hold the same weights as groups one after
/// the other (an odd group count: a lone last group, and a partial one), and where this
/// CPU reads them so, every product gives the same bits in both layouts.
#[test]
fn interleaved_pairs_hold_the_same_weights_and_give_the_same_bits() -> Result<()> {
    for (rows, cols) in [(40usize, 96usize), (70, 64), (48, 32)] {
        let pairs = [
            (
                QuantMatrix::q4_1_laid_out(&random_q4_1(rows, cols, 9), rows, cols, false)?,
                QuantMatrix::q4_1_laid_out(&random_q4_1(rows, cols, 9), rows, cols, true)?,
            ),
            (
                QuantMatrix::q8_0_laid_out(&random_q8_0(rows, cols), rows, cols, false)?,
                QuantMatrix::q8_0_laid_out(&random_q8_0(rows, cols), rows, cols, true)?,
            ),
        ];
        for (flat, il) in pairs {
            assert_eq!(flat.dequantize(), il.dequantize(), "{rows} x {cols}");
            if !pairs_interleaved_here() {
                continue;
            }
            for n in [1usize, 3, 8, 9] {
                let xs: Vec<f32> = (0..n * cols).map(|i| (i as f32 * 0.29).sin()).collect();
                assert_eq!(
                    flat.matmul(&xs)?,
                    il.matmul(&xs)?,
                    "{rows} x {cols}, {n} inputs"
                );
                if let (Some(a), Some(b)) = (flat.dense_matmul(&xs), il.dense_matmul(&xs)) {
                    assert_eq!(a?, b?, "dense, {rows} x {cols}, {n} inputs");
                }
            }
        }
    }
    Ok(())
}

/// A result collector writing row `row0 + r` of input `v` to `y[v · rows + row0 + r]`.
fn into_rows(y: &mut [f32], rows: usize, row0: usize) -> impl FnMut(usize, &[f32]) + '_ {
    move |v, ys| y[v * rows + row0..][..ys.len()].copy_from_slice(ys)
}

#[test]
fn rejects_bad_sizes() {
    assert!(QuantMatrix::from_ggml_bytes(&[0u8; 20], 1, 30).is_err());
    assert!(QuantMatrix::from_ggml_bytes(&[0u8; 19], 1, 32).is_err());
}

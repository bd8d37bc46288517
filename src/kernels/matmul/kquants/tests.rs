//! The K-quants and Q5_1 against ggml's reference dequantizers (candle's block types) and
//! the kernels against an f64 product.
use super::*;
use crate::kernels::matmul::q8_1::Q8_1Vector;
use crate::kernels::matmul::Kernel;
use candle_core::quantized::k_quants::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ5_1, BlockQ6K, GgmlType,
};

/// A xorshift stream of bytes.
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 32) as u8
        })
        .collect()
}

/// A type's constructor, block bytes, weights per block, and the offsets of its f16 scales.
type Ctor = fn(&[u8], usize, usize) -> Result<QuantMatrix>;
struct Case {
    name: &'static str,
    ctor: Ctor,
    block: usize,
    weights: usize,
    f16_at: &'static [usize],
    reference: fn(&[u8]) -> Vec<f32>,
}

/// ggml's reference dequantization (candle's block type `T`) of a row-major tensor.
fn reference<T: GgmlType>(raw: &[u8]) -> Vec<f32> {
    let block = std::mem::size_of::<T>();
    let n = raw.len() / block;
    // SAFETY: T is a plain `repr(C)` ggml block of `block` bytes, valid for any bit
    // pattern; `read_unaligned` copies each out of the byte buffer.
    let typed: Vec<T> = (0..n)
        .map(|i| unsafe { std::ptr::read_unaligned(raw[i * block..].as_ptr() as *const T) })
        .collect();
    let mut out = vec![0f32; n * T::BLCK_SIZE];
    T::to_float(&typed, &mut out);
    out
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "q2_k",
            ctor: QuantMatrix::from_ggml_q2_k_bytes,
            block: Q2_K_BLOCK_BYTES,
            weights: QK_K,
            f16_at: &[80, 82],
            reference: reference::<BlockQ2K>,
        },
        Case {
            name: "q3_k",
            ctor: QuantMatrix::from_ggml_q3_k_bytes,
            block: Q3_K_BLOCK_BYTES,
            weights: QK_K,
            f16_at: &[108],
            reference: reference::<BlockQ3K>,
        },
        Case {
            name: "q4_k",
            ctor: QuantMatrix::from_ggml_q4_k_bytes,
            block: Q4_K_BLOCK_BYTES,
            weights: QK_K,
            f16_at: &[0, 2],
            reference: reference::<BlockQ4K>,
        },
        Case {
            name: "q5_k",
            ctor: QuantMatrix::from_ggml_q5_k_bytes,
            block: Q5_K_BLOCK_BYTES,
            weights: QK_K,
            f16_at: &[0, 2],
            reference: reference::<BlockQ5K>,
        },
        Case {
            name: "q6_k",
            ctor: QuantMatrix::from_ggml_q6_k_bytes,
            block: Q6_K_BLOCK_BYTES,
            weights: QK_K,
            f16_at: &[208],
            reference: reference::<BlockQ6K>,
        },
        Case {
            name: "q5_1",
            ctor: QuantMatrix::from_ggml_q5_1_bytes,
            block: Q5_1_BLOCK_BYTES,
            weights: QK,
            f16_at: &[0, 2],
            reference: reference::<BlockQ5_1>,
        },
    ]
}

/// `rows × cols` random blocks of `c`, each f16 scale replaced by `scale(block, field)`.
fn blocks(c: &Case, rows: usize, cols: usize, scale: impl Fn(usize, usize) -> f32) -> Vec<u8> {
    let mut b = bytes(rows * cols / c.weights * c.block, 11 + c.block as u64);
    for (i, blk) in b.chunks_exact_mut(c.block).enumerate() {
        for (f, &at) in c.f16_at.iter().enumerate() {
            let v = f16::from_f32(scale(i, f)).to_bits().to_le_bytes();
            blk[at..at + 2].copy_from_slice(&v);
        }
    }
    b
}

/// Equal as numbers, NaN nowhere (a zero weight's sign may differ: see the module's docs).
fn same_values(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Every weight of every type dequantizes to ggml's value, with ordinary, negative, zero and
/// subnormal scales, a row count that is not a multiple of eight and several blocks a row.
#[test]
fn repacked_k_quants_dequantize_to_ggml_s_values() {
    let (rows, cols) = (11, 512);
    let scales: [&dyn Fn(usize, usize) -> f32; 4] = [
        &|i, f| (i as f32 * 0.37 + 0.1 + f as f32).sin() * 0.05,
        &|i, f| 0.01 * (i % 5) as f32 - 0.02 + 0.003 * f as f32,
        &|i, _| 6e-8 * (i % 7 + 1) as f32,
        &|i, f| {
            if i % 3 == 0 {
                0.0
            } else {
                1000.0 - 10.0 * (i + f) as f32
            }
        },
    ];
    for c in cases() {
        for (k, scale) in scales.iter().enumerate() {
            let raw = blocks(&c, rows, cols, scale);
            let m = (c.ctor)(&raw, rows, cols).expect(c.name);
            let (got, want) = (m.dequantize(), (c.reference)(&raw));
            assert!(same_values(&got, &want), "{} scales {k}", c.name);
            let mut row = vec![0f32; cols];
            m.dequantize_row(rows - 1, &mut row).expect("row");
            assert!(same_values(&row, &want[(rows - 1) * cols..]), "{}", c.name);
        }
    }
}

/// The decode kernels (this CPU's, and the portable one of the layout) against the
/// f64 product of ggml's dequantized weights and the same 8-bit activations, for one and
/// for five inputs at once: within 2e-5 of the output's largest value (f32 sums of 512
/// products), and a row's result the same bits alone and in the batch.
#[test]
fn k_quant_matrices_multiply_like_the_f64_product() {
    let (rows, cols, n) = (20, 512, 5);
    let x: Vec<f32> = (0..n * cols)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
        .collect();
    for c in cases() {
        let raw = blocks(&c, rows, cols, |i, f| 0.01 + 1e-4 * (i + 3 * f) as f32);
        let m = (c.ctor)(&raw, rows, cols).expect(c.name);
        let w = (c.reference)(&raw);
        let y = m.matmul(&x).expect("matmul");
        for v in 0..n {
            let xv = &x[v * cols..(v + 1) * cols];
            let q = Q8_1Vector::quantize(xv);
            let xq: Vec<f32> =
                q.qs.iter()
                    .zip(&q.d)
                    .flat_map(|(b, &d)| b.iter().map(move |&c| c as f32 * d))
                    .collect();
            let exact: Vec<f64> = (0..rows)
                .map(|r| {
                    (0..cols)
                        .map(|k| w[r * cols + k] as f64 * xq[k] as f64)
                        .sum()
                })
                .collect();
            let scale = exact.iter().fold(0f64, |a, b| a.max(b.abs()));
            let alone = m.matmul(xv).expect("matmul");
            let groups = rows.div_ceil(ROWS);
            for (r, e) in exact.iter().enumerate() {
                let got = y[v * rows + r];
                assert!(
                    (got as f64 - e).abs() <= 2e-5 * scale,
                    "{} input {v} row {r}: {got} vs {e}",
                    c.name
                );
                assert_eq!(got.to_bits(), alone[r].to_bits(), "{} batch", c.name);
                let portable = portable_row(&m, r, groups, &q);
                assert!(
                    (portable as f64 - e).abs() <= 2e-5 * scale,
                    "{} portable row {r}: {portable} vs {e}",
                    c.name
                );
            }
        }
    }
}

/// Row `r`'s result from the portable kernel of its layout.
fn portable_row(m: &QuantMatrix, r: usize, groups: usize, x: &Q8_1Vector) -> f32 {
    let g = r / ROWS;
    let y = match &m.packed {
        Packed::Q8H(b) => {
            let bpr = b.len() / groups;
            crate::kernels::matmul::q2_k_q3_k::q8hx8_dot(&b[g * bpr..(g + 1) * bpr], x)
        }
        Packed::Q4K { blocks, supers } => {
            let (bpr, spr) = (blocks.len() / groups, supers.len() / groups);
            crate::kernels::matmul::q4_k::q4kx8_dot(
                &blocks[g * bpr..(g + 1) * bpr],
                &supers[g * spr..(g + 1) * spr],
                x,
            )
        }
        Packed::Q6K { blocks, supers } => {
            let (bpr, spr) = (blocks.len() / groups, supers.len() / groups);
            crate::kernels::matmul::q6_k::q6kx8_dot(
                &blocks[g * bpr..(g + 1) * bpr],
                &supers[g * spr..(g + 1) * spr],
                x,
            )
        }
        Packed::Q5K { blocks, supers } => {
            let (bpr, spr) = (blocks.len() / groups, supers.len() / groups);
            crate::kernels::matmul::q5::q5kx8_dot(
                &blocks[g * bpr..(g + 1) * bpr],
                &supers[g * spr..(g + 1) * spr],
                x,
            )
        }
        Packed::Q5_1(b) => {
            let bpr = b.len() / groups;
            crate::kernels::matmul::q5::q5_1x8_dot(&b[g * bpr..(g + 1) * bpr], x)
        }
        _ => panic!("not a K-quant layout"),
    };
    y[r % ROWS]
}

/// The AVX2 and the AVX-512 VNNI (256-bit) kernels of every layout here give the same bits
/// (exact integer sums, the same float steps), for one to nine inputs.
#[cfg(target_arch = "x86_64")]
#[test]
fn k_quant_vnni_and_avx2_kernels_agree_to_the_bit() {
    if !matches!(Kernel::detect(), Kernel::Vnni | Kernel::Vnni512) {
        eprintln!("no AVX-512 VNNI on this CPU: nothing to compare");
        return;
    }
    let (rows, cols) = (16, 512);
    for c in cases() {
        let raw = blocks(&c, rows, cols, |i, f| 0.03 - 2e-4 * (i + 5 * f) as f32);
        let m = (c.ctor)(&raw, rows, cols).expect(c.name);
        for n in 1..=9 {
            let xs: Vec<Q8_1Vector> = (0..n)
                .map(|v| {
                    let x: Vec<f32> = (0..cols)
                        .map(|i| ((i * 13 + v * 7) as f32 * 0.31).sin())
                        .collect();
                    Q8_1Vector::quantize(&x)
                })
                .collect();
            for g in 0..rows / ROWS {
                let (mut a, mut b) = (vec![0f32; n * ROWS], vec![0f32; n * ROWS]);
                m.group_dot_many(Kernel::Avx2, g, &xs, &mut |v, y: &[f32]| {
                    a[v * ROWS..(v + 1) * ROWS].copy_from_slice(y)
                });
                m.group_dot_many(Kernel::Vnni, g, &xs, &mut |v, y: &[f32]| {
                    b[v * ROWS..(v + 1) * ROWS].copy_from_slice(y)
                });
                assert_eq!(a, b, "{} group {g}, {n} inputs", c.name);
            }
        }
    }
}

/// Q4_K, Q5_K, Q6_K and Q5_1 in their own layouts and in the Q8H layout: the same
/// weights, and products within float rounding of each other.
#[test]
fn own_and_q8h_layouts_agree() {
    type Both = (usize, Ctor, Ctor, usize);
    let both: [Both; 4] = [
        (
            3,
            QuantMatrix::from_ggml_q5_k_bytes,
            QuantMatrix::q5_k_as_q8h,
            180,
        ),
        (
            5,
            QuantMatrix::from_ggml_q5_1_bytes,
            QuantMatrix::q5_1_as_q8h,
            192,
        ),
        (
            2,
            QuantMatrix::from_ggml_q4_k_bytes,
            QuantMatrix::q4_k_as_q8h,
            148,
        ),
        (
            4,
            QuantMatrix::from_ggml_q6_k_bytes,
            QuantMatrix::q6_k_as_q8h,
            210,
        ),
    ];
    for (case, own, wide, per_super) in both {
        let c = &cases()[case];
        let (rows, cols) = (9, 768);
        let raw = blocks(c, rows, cols, |i, f| 0.02 - 1e-4 * (i + f) as f32);
        let own = own(&raw, rows, cols).expect("own");
        let wide = wide(&raw, rows, cols).expect("q8h");
        assert!(matches!(
            own.packed,
            Packed::Q4K { .. } | Packed::Q6K { .. } | Packed::Q5K { .. } | Packed::Q5_1(_)
        ));
        assert!(matches!(wide.packed, Packed::Q8H(_)));
        assert!(
            same_values(&own.dequantize(), &wide.dequantize()),
            "{}",
            c.name
        );
        // Bytes per row of 256 weights, rows padded to 16.
        assert_eq!(own.bytes(), (16 * 3 * per_super) as u64, "{}", c.name);
        let x: Vec<f32> = (0..3 * cols)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 9.0)
            .collect();
        let (a, b) = (own.matmul(&x).expect("own"), wide.matmul(&x).expect("wide"));
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (u, v) in a.iter().zip(&b) {
            assert!((u - v).abs() <= 1e-5 * scale, "{}: {u} vs {v}", c.name);
        }
    }
}

/// Bad sizes are refused naming the type.
#[test]
fn misaligned_and_truncated_tensors_are_refused() {
    let e = QuantMatrix::from_ggml_q4_k_bytes(&[0; 144], 1, 288).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Q4_K rows of 288 values are not whole blocks of 256"
    );
    let e = QuantMatrix::from_ggml_q6_k_bytes(&[0; 209], 1, 256).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Q6_K tensor [1, 256] needs 210 bytes, got 209"
    );
}

/// The portable kernel of case `name`'s layout gives the AVX2 kernel's bits, and the VNNI
/// kernel's where this CPU has one, for one to eight inputs at once.
fn portable_kernel_gives_the_simd_bits(name: &str) {
    let simd: &[Kernel] = match Kernel::detect() {
        Kernel::Scalar => {
            eprintln!("no SIMD kernel on this CPU (or portable forced): nothing to compare");
            return;
        }
        Kernel::Avx2 => &[Kernel::Avx2],
        _ => &[Kernel::Avx2, Kernel::Vnni],
    };
    let c = cases().into_iter().find(|c| c.name == name).expect(name);
    let (rows, cols) = (24, 768);
    for (k, scale) in [0.02f32, -0.7, 3e-3].into_iter().enumerate() {
        let raw = blocks(&c, rows, cols, |i, f| {
            scale * (1.0 + (i as f32 * 0.61 + f as f32).sin())
        });
        let m = (c.ctor)(&raw, rows, cols).expect(c.name);
        for n in 1..=8 {
            let xs: Vec<Q8_1Vector> = (0..n)
                .map(|v| {
                    let x: Vec<f32> = (0..cols)
                        .map(|i| ((i * 17 + v * 5 + k) as f32 * 0.37).sin() * (1.0 + v as f32))
                        .collect();
                    Q8_1Vector::quantize(&x)
                })
                .collect();
            let run = |kernel: Kernel, g: usize| {
                let mut y = vec![0u32; n * ROWS];
                m.group_dot_many(kernel, g, &xs, &mut |v, r: &[f32]| {
                    for (o, x) in y[v * ROWS..(v + 1) * ROWS].iter_mut().zip(r) {
                        *o = x.to_bits();
                    }
                });
                y
            };
            for g in 0..rows / ROWS {
                let portable = run(Kernel::Scalar, g);
                for &kernel in simd {
                    assert_eq!(
                        run(kernel, g),
                        portable,
                        "{name} scales {k}, {kernel:?} group {g}, {n} inputs"
                    );
                }
            }
        }
    }
}

#[test]
fn portable_q4_k_kernel_gives_the_simd_bits() {
    portable_kernel_gives_the_simd_bits("q4_k");
}

#[test]
fn portable_q6_k_kernel_gives_the_simd_bits() {
    portable_kernel_gives_the_simd_bits("q6_k");
}

#[test]
fn portable_q5_k_kernel_gives_the_simd_bits() {
    portable_kernel_gives_the_simd_bits("q5_k");
}

/// Q5_1's layout, which also holds Q5_0.
#[test]
fn portable_q5_1_kernel_gives_the_simd_bits() {
    portable_kernel_gives_the_simd_bits("q5_1");
}

/// Q2_K and Q3_K, both held in the Q8H layout.
#[test]
fn portable_q2_k_and_q3_k_kernels_give_the_simd_bits() {
    portable_kernel_gives_the_simd_bits("q2_k");
    portable_kernel_gives_the_simd_bits("q3_k");
}

//! Tests of the paged attention kernels against the f64 formula and of every row against
//! the row alone (batch, tiles, splits, block sizes).
use super::*;
use crate::kv::codec::{decode_row, RUNTIME_DTYPES};
use crate::kv::{BlockTable, KvDtype, KvPart, KvPool, KvShape};

fn randn(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.0
        })
        .collect()
}

/// A pool of one layer holding `t` random K/V rows, written through a table of
/// `block_size`-token blocks, and the f32 values it stores (decoded back, and rotated back
/// for a rotated dtype).
struct Fixture {
    pool: KvPool,
    table: BlockTable,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn fixture(kv_heads: usize, d: usize, t: usize, bs: usize, dtype: KvDtype) -> Fixture {
    let shape = KvShape {
        num_layers: 1,
        num_key_value_heads: kv_heads,
        head_dim: d,
        dtype,
        latent: false,
    };
    let mut pool = KvPool::new(shape, bs, 10_000).expect("pool");
    let mut table = BlockTable::new();
    table.reserve(&mut pool, t).expect("reserve");
    let (k, v) = (randn(kv_heads * t * d, 1), randn(kv_heads * t * d, 2));
    pool.write(table.blocks(), 0, KvPart::K, 0, t, &k);
    pool.write(table.blocks(), 0, KvPart::V, 0, t, &v);
    table.commit(t, bs);
    let view = pool.layer_view(table.blocks(), 0);
    let decoded = |part| {
        let mut all = vec![0f32; kv_heads * t * d];
        for h in 0..kv_heads {
            for j in 0..t {
                decode_row(
                    dtype,
                    view.row(part, h, j),
                    &mut all[(h * t + j) * d..][..d],
                );
            }
        }
        all
    };
    let (mut k, mut v) = (decoded(KvPart::K), decoded(KvPart::V));
    if dtype.rotated() {
        // The rows as the model wrote them, up to quantization: rotated back.
        for row in k.chunks_exact_mut(d).chain(v.chunks_exact_mut(d)) {
            crate::kv::codec_q4::rotate(row);
        }
    }
    drop(view);
    Fixture { pool, table, k, v }
}

/// The textbook formula in f64: softmax(q·kᵀ) v over keys 0 ..= position, GQA.
#[allow(clippy::too_many_arguments)]
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    heads: usize,
    kv_heads: usize,
    n: usize,
    t: usize,
    d: usize,
    start: usize,
) -> Vec<f64> {
    let g = heads / kv_heads;
    let mut out = vec![0f64; n * heads * d];
    for i in 0..n {
        for h in 0..heads {
            let kvh = h / g;
            let len = start + i + 1;
            let qrow = &q[(h * n + i) * d..][..d];
            let s: Vec<f64> = (0..len)
                .map(|j| {
                    let krow = &k[(kvh * t + j) * d..][..d];
                    qrow.iter()
                        .zip(krow)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum()
                })
                .collect();
            let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for (j, p) in e.iter().enumerate() {
                let vrow = &v[(kvh * t + j) * d..][..d];
                for c in 0..d {
                    out[(i * heads + h) * d + c] += p / sum * vrow[c] as f64;
                }
            }
        }
    }
    out
}

/// The kernel against the f64 formula, at head_dim 32, 64, 128 and 256 (AVX2 path) and 40
/// (portable path), context lengths that are not multiples of 8, several blocks, past
/// 256 keys, every runtime dtype (the reference reads the values the pool stores).
#[test]
fn matches_the_f64_formula() -> Result<()> {
    // (head_dim, block size, start, rows): 19 keys (not a multiple of 8, several blocks);
    // 301 keys (two value ranges of 256, and a split decode row).
    for (d, bs, start, n) in [
        (32usize, 7usize, 13usize, 6usize),
        (64, 16, 13, 6),
        (128, 5, 13, 6),
        (40, 3, 13, 6),
        (256, 16, 13, 6),
        (64, 16, 300, 1),
        (64, 7, 290, 11),
    ] {
        for dtype in RUNTIME_DTYPES {
            let (heads, kv_heads) = (6, 2);
            let t = start + n;
            let f = fixture(kv_heads, d, t, bs, dtype);
            let q = randn(heads * n * d, 3);
            let view = f.pool.layer_view(f.table.blocks(), 0);
            let got = paged_attention(&q, heads, kv_heads, n, start, &view)?;
            let want = reference(&q, &f.k, &f.v, heads, kv_heads, n, t, d, start);
            for (a, b) in got.iter().zip(&want) {
                let err = (*a as f64 - b).abs();
                assert!(err <= 1e-5 * (1.0 + b.abs()), "d {d} {dtype:?}: {a} vs {b}");
            }
        }
    }
    Ok(())
}

/// One row alone gives the same bits as that row inside a larger call, and the block
/// size does not change a single bit.
#[test]
fn a_row_depends_on_neither_the_batch_nor_the_block_size() -> Result<()> {
    let (heads, kv_heads, d, t) = (9, 3, 64, 40);
    let q = randn(heads * t * d, 4);
    let last_q: Vec<f32> = (0..heads)
        .flat_map(|h| q[(h * t + t - 1) * d..][..d].to_vec())
        .collect();
    for dtype in RUNTIME_DTYPES {
        let mut reference_bits: Option<Vec<f32>> = None;
        for bs in [1usize, 7, 16, 256] {
            let f = fixture(kv_heads, d, t, bs, dtype);
            let view = f.pool.layer_view(f.table.blocks(), 0);
            let all = paged_attention(&q, heads, kv_heads, t, 0, &view)?;
            let last = paged_attention(&last_q, heads, kv_heads, 1, t - 1, &view)?;
            assert_eq!(all[(t - 1) * heads * d..], last[..], "{dtype:?} bs {bs}");
            match &reference_bits {
                None => reference_bits = Some(all),
                Some(r) => assert_eq!(r, &all, "{dtype:?} bs {bs}"),
            }
        }
    }
    Ok(())
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Row `r` of `q` (`[heads, n, d]`), at position `start + r`, computed alone: its bits.
fn alone_bits(
    q: &[f32],
    (heads, kv_heads): (usize, usize),
    n: usize,
    r: usize,
    start: usize,
    view: &LayerKv,
) -> Result<Vec<u32>> {
    let d = view.head_dim;
    let qr: Vec<f32> = (0..heads)
        .flat_map(|h| q[(h * n + r) * d..][..d].to_vec())
        .collect();
    Ok(bits(&paged_attention(
        &qr,
        heads,
        kv_heads,
        1,
        start + r,
        view,
    )?))
}

/// Prompt rows run in tiles of consecutive positions sharing their K/V reads
/// (`kernels::attention::prefill_tile`, where the CPU has AVX-512F): every row equals the same row
/// computed alone, bit for bit — every dtype, head_dims of 1 to 4 score chunks, groups of
/// 1 to 8 query heads (partial score and value passes), tiles crossing a 256-key range,
/// row counts not a multiple of the tile.
#[test]
fn every_tiled_row_equals_the_row_alone() -> Result<()> {
    // (heads, kv_heads, head_dim, block size, start, rows)
    for (heads, kv_heads, d, bs, start, n) in [
        (9usize, 3usize, 64usize, 16usize, 0usize, 37usize),
        (8, 8, 32, 7, 5, 20),
        (4, 2, 128, 16, 0, 12),
        (8, 1, 96, 5, 3, 11),
        (6, 2, 64, 16, 250, 19),
        (12, 3, 64, 3, 0, 9),
    ] {
        for dtype in RUNTIME_DTYPES {
            let t = start + n;
            let f = fixture(kv_heads, d, t, bs, dtype);
            let view = f.pool.layer_view(f.table.blocks(), 0);
            let q = randn(heads * n * d, 11);
            let all = paged_attention(&q, heads, kv_heads, n, start, &view)?;
            for r in 0..n {
                assert_eq!(
                    bits(&all[r * heads * d..(r + 1) * heads * d]),
                    alone_bits(&q, (heads, kv_heads), n, r, start, &view)?,
                    "{dtype:?} heads {heads}/{kv_heads} d {d} bs {bs} row {r} of {start}+{n}"
                );
            }
        }
    }
    Ok(())
}

/// A batched call mixing prompt chunks (tiled) and a decode row gives every row the bits
/// it gets alone, each sequence through its own pool and block size.
#[test]
fn a_batch_of_chunks_and_decode_rows_equals_each_row_alone() -> Result<()> {
    let (heads, kv_heads, d) = (9, 3, 64);
    // (start, rows, block size): a chunk, a decode row, a chunk across 256 keys.
    let shapes = [(5usize, 13usize, 16usize), (30, 1, 7), (250, 9, 16)];
    for dtype in RUNTIME_DTYPES {
        let fixtures: Vec<Fixture> = shapes
            .iter()
            .map(|&(start, n, bs)| fixture(kv_heads, d, start + n, bs, dtype))
            .collect();
        let qs: Vec<Vec<f32>> = shapes
            .iter()
            .enumerate()
            .map(|(i, &(_, n, _))| randn(heads * n * d, 20 + i as u64))
            .collect();
        let items: Vec<AttnSeq> = shapes
            .iter()
            .zip(&fixtures)
            .zip(&qs)
            .map(|((&(start, n, _), f), q)| AttnSeq {
                q,
                n,
                start_pos: start,
                kv: f.pool.layer_view(f.table.blocks(), 0),
                window: Window::FULL,
            })
            .collect();
        let all = paged_attention_batch(&items, heads, kv_heads)?;
        let mut at = 0;
        for (((start, n, _), f), q) in shapes.iter().zip(&fixtures).zip(&qs) {
            let view = f.pool.layer_view(f.table.blocks(), 0);
            for r in 0..*n {
                assert_eq!(
                    bits(&all[(at + r) * heads * d..(at + r + 1) * heads * d]),
                    alone_bits(q, (heads, kv_heads), *n, r, *start, &view)?,
                    "{dtype:?} row {r} of {start}+{n}"
                );
            }
            at += n;
        }
    }
    Ok(())
}

/// A long decode row runs split across threads (scores by key range, values by head_dim
/// chunks); it equals the same row computed whole inside a prefill-shaped call, bit for
/// bit, for every dtype and at several block sizes.
#[test]
fn a_split_decode_row_equals_the_whole_row() -> Result<()> {
    let (heads, kv_heads, d, t) = (9, 3, 64, 300);
    let q = randn(heads * t * d, 6);
    let last_q: Vec<f32> = (0..heads)
        .flat_map(|h| q[(h * t + t - 1) * d..][..d].to_vec())
        .collect();
    for dtype in RUNTIME_DTYPES {
        for bs in [7usize, 16] {
            let f = fixture(kv_heads, d, t, bs, dtype);
            let view = f.pool.layer_view(f.table.blocks(), 0);
            let all = paged_attention(&q, heads, kv_heads, t, 0, &view)?;
            let last = paged_attention(&last_q, heads, kv_heads, 1, t - 1, &view)?;
            assert_eq!(all[(t - 1) * heads * d..], last[..], "{dtype:?} bs {bs}");
        }
    }
    Ok(())
}

/// MLA's absorbed shape (one KV head of 576 values, 16 query heads, the value the row
/// itself): every head of a 16-head call (query heads taken in pairs for the scores, 8 at a
/// time for the values) gives the bits of that head alone, split decode row and whole rows
/// alike; with the value width cut to the latent's 512, those 512 outputs keep their bits.
#[test]
fn mla_shaped_heads_equal_each_head_alone() -> Result<()> {
    let (heads, d, t) = (16, 576, 300);
    let q = randn(heads * t * d, 9);
    for dtype in [KvDtype::F16, KvDtype::Q8_0, KvDtype::F32] {
        let f = fixture(1, d, t, 16, dtype);
        let view = f.pool.layer_view(f.table.blocks(), 0);
        for (n, start) in [(1, t - 1), (3, t - 3), (t, 0)] {
            let rows = |h: usize| q[(h * t + start) * d..][..n * d].to_vec();
            let q_all: Vec<f32> = (0..heads).flat_map(rows).collect();
            let all = paged_attention(&q_all, heads, 1, n, start, &view)?;
            for h in 0..heads {
                let one = paged_attention(&rows(h), 1, 1, n, start, &view)?;
                for r in 0..n {
                    let got = &all[(r * heads + h) * d..][..d];
                    assert_eq!(
                        bits(got),
                        bits(&one[r * d..][..d]),
                        "{dtype:?} n {n} head {h}"
                    );
                }
            }
            let cut = f.pool.layer_view(f.table.blocks(), 0).with_value_dim(512);
            let part = paged_attention(&q_all, heads, 1, n, start, &cut)?;
            for (a, b) in all.chunks_exact(d).zip(part.chunks_exact(d)) {
                assert_eq!(
                    bits(&a[..512]),
                    bits(&b[..512]),
                    "{dtype:?} n {n}: value width 512"
                );
            }
        }
    }
    Ok(())
}

/// The values kernel on 512-bit vectors gives the AVX2 kernel's bits, for every dtype, 1
/// and 3 heads, both chunk ranges.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_512_bit_values_kernel_equals_the_avx2_one() {
    use crate::kernels::attention::avx512::values_512;
    use crate::kernels::attention::values::values;
    let has = |f: &[bool]| f.iter().all(|&b| b);
    if !has(&[
        std::is_x86_feature_detected!("avx2"),
        std::is_x86_feature_detected!("fma"),
        std::is_x86_feature_detected!("f16c"),
        std::is_x86_feature_detected!("avx512f"),
    ]) {
        eprintln!("no AVX-512F here: nothing to compare");
        return;
    }
    let (kv_heads, d, t) = (2, 64, 300);
    let probs = randn(3 * t, 8);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for dtype in RUNTIME_DTYPES {
        let f = fixture(kv_heads, d, t, 7, dtype);
        let view = f.pool.layer_view(f.table.blocks(), 0);
        for c0 in [0, 4] {
            let mut out = [[0f32; 96]; 4];
            // SAFETY: the CPU features were checked; keys 5 .. t are in the table, chunks
            // c0 .. c0 + 4 inside head_dim 64 (8 chunks), probs holds 3 · t values.
            unsafe {
                values::<3>(&probs, t, &view, 1, (5, t), c0, &mut out[0]);
                values_512::<3>(&probs, t, &view, 1, (5, t), c0, &mut out[1]);
                values::<1>(&probs, t, &view, 0, (0, 77), c0, &mut out[2]);
                values_512::<1>(&probs, t, &view, 0, (0, 77), c0, &mut out[3]);
            }
            assert_eq!(bits(&out[0]), bits(&out[1]), "{dtype:?} c0 {c0}");
            assert_eq!(bits(&out[2]), bits(&out[3]), "{dtype:?} c0 {c0}");
        }
    }
}

/// The portable kernel gives the AVX2 kernel's bits (what the forced-portable oracle runs
/// rely on): head_dims 32 to 256, key ranges inside one 256-key range and across several,
/// windows starting mid-range, every runtime dtype.
#[test]
fn the_portable_kernel_equals_the_avx2_one_bit_for_bit() {
    assert_eq!(
        portable::RANGE_KEYS,
        crate::kernels::attention::avx2::RANGE_KEYS
    );
    if !(std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c"))
    {
        eprintln!("skipped: this CPU lacks AVX2, FMA or F16C");
        return;
    }
    let t = 600;
    for d in [32usize, 64, 128, 256] {
        for dtype in RUNTIME_DTYPES {
            let (kv_heads, g) = (2, 3);
            let f = fixture(kv_heads, d, t, 16, dtype);
            let view = f.pool.layer_view(f.table.blocks(), 0);
            let mut scratch = Scratch::default();
            for (i, keys) in [
                (0, 1),
                (0, 7),
                (0, 256),
                (0, 257),
                (0, 600),
                (100, 600),
                (255, 256),
                (300, 513),
            ]
            .into_iter()
            .enumerate()
            {
                let mut q = randn(g * d, 10 + i as u64);
                // Sharper scores in some rows, so the ranges' maxima differ more.
                q.iter_mut().skip(d).for_each(|x| *x *= 4.0);
                let mut out = [vec![0f32; g * d], vec![0f32; g * d]];
                for head in 0..kv_heads {
                    let simd = Simd::Avx2 { chunks: d / 8 };
                    attend_group(simd, &q, g, &view, head, keys, &mut scratch, &mut out[0]);
                    portable::attend_group_portable(
                        &q,
                        g,
                        &view,
                        head,
                        keys,
                        &mut scratch,
                        &mut out[1],
                    );
                    assert_eq!(
                        bits(&out[0]),
                        bits(&out[1]),
                        "d {d} {dtype:?} keys {keys:?} head {head}"
                    );
                }
            }
        }
    }
}

#[test]
fn refuses_positions_past_the_table() {
    let f = fixture(1, 32, 5, 4, KvDtype::F32);
    let view = f.pool.layer_view(f.table.blocks(), 0);
    let q = randn(32 * 4, 5);
    assert!(paged_attention(&q, 1, 1, 4, 5, &view).is_err());
}

mod window;

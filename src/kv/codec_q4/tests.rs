//! The 4-bit codecs against ggml's reference quantizers: candle's `BlockQ4_0` (a port of
//! `quantize_row_q4_0_ref`) on random rows, and libggml's own `quantize_row_q4_0_ref` and
//! `quantize_row_iq4_nl_ref` through a committed fixture (`tests/fixtures/kv4/rows.json`,
//! written by `tests/fixtures/kv4/make_fixture.py` against llama.cpp's libggml-base).
use super::*;
use crate::kv::codec::{decode_row, encode_row, row_bytes};
use candle_core::quantized::k_quants::{BlockQ4_0, GgmlType};

fn random_row(n: usize, seed: u64) -> Vec<f32> {
    // xorshift: values in about [-4, 4), a few exact zeros, and one channel in 16 scaled by
    // 10 (K rows have a few large channels).
    let mut s = seed.max(1);
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let v = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0;
            match i % 16 {
                _ if i % 29 == 0 => 0.0,
                5 => v * 10.0,
                _ => v,
            }
        })
        .collect()
}

fn encoded(dtype: KvDtype, row: &[f32]) -> Vec<u8> {
    let mut bytes = vec![0u8; row_bytes(dtype, row.len()).unwrap_or(0)];
    encode_row(dtype, row, &mut bytes);
    bytes
}

/// q4_0 bytes equal ggml's block layout as candle implements its reference quantizer
/// (`BlockQ4_0::from_float`), and read back as candle's `to_float`.
#[test]
fn q4_0_matches_candle_block_q4_0() {
    for d in [64, 128, 256] {
        for seed in [1u64, 2, 3, 77] {
            let row = random_row(d, seed * 1000 + d as u64);
            let bytes = encoded(KvDtype::Q4_0, &row);
            let mut blocks = vec![BlockQ4_0::zeros(); d / 32];
            BlockQ4_0::from_float(&row, &mut blocks);
            // SAFETY: BlockQ4_0 is #[repr(C)] { d: f16, qs: [u8; 16] }, 18 bytes (asserted by
            // candle), so the blocks are exactly ggml's bytes.
            let want: &[u8] = unsafe {
                std::slice::from_raw_parts(blocks.as_ptr() as *const u8, blocks.len() * 18)
            };
            assert_eq!(bytes, want, "d={d} seed={seed}");
            let mut back = vec![0f32; d];
            decode_row(KvDtype::Q4_0, &bytes, &mut back);
            let mut want_back = vec![0f32; d];
            BlockQ4_0::to_float(&blocks, &mut want_back);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&back), bits(&want_back), "d={d} seed={seed}");
        }
    }
}

/// A head_dim that is not a multiple of 32 stores the row padded with zeros to whole blocks
/// (the bytes of the padded row, for both 4-bit dtypes), and reads back its own values.
#[test]
fn q4_pads_a_partial_block_with_zeros() {
    for dtype in [KvDtype::Q4_0, KvDtype::Iq4Nl] {
        for d in [40, 80] {
            let row = random_row(d, 9 + d as u64);
            assert_eq!(row_bytes(dtype, d).unwrap_or(0), d.div_ceil(32) * 18);
            let mut padded = row.clone();
            padded.resize(d.div_ceil(32) * 32, 0.0);
            assert_eq!(
                encoded(dtype, &row),
                encoded(dtype, &padded),
                "{dtype:?} d={d}"
            );
            if dtype == KvDtype::Q4_0 {
                let mut blocks = vec![BlockQ4_0::zeros(); padded.len() / 32];
                BlockQ4_0::from_float(&padded, &mut blocks);
                let mut want = vec![0f32; padded.len()];
                BlockQ4_0::to_float(&blocks, &mut want);
                let mut back = vec![0f32; d];
                decode_row(dtype, &encoded(dtype, &row), &mut back);
                assert_eq!(back, want[..d]);
            }
        }
    }
}

/// One row of the fixture: head_dim, inputs, ggml's q4_0 and iq4_nl bytes, iq4_nl read back.
struct FixtureRow {
    kind: String,
    x: Vec<f32>,
    q4_0: Vec<u8>,
    iq4_nl: Vec<u8>,
    iq4_nl_back: Vec<f32>,
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0))
        .collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn fixture() -> Vec<FixtureRow> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kv4/rows.json");
    let text = std::fs::read_to_string(path).expect("tests/fixtures/kv4/rows.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("the fixture's JSON");
    let rows = v["rows"].as_array().expect("rows");
    rows.iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().expect("a hex string").to_string();
            let head_dim = r["head_dim"].as_u64().expect("head_dim") as usize;
            let x = floats(&hex(&s("x")));
            assert_eq!(x.len(), head_dim);
            FixtureRow {
                kind: s("kind"),
                x,
                q4_0: hex(&s("q4_0")),
                iq4_nl: hex(&s("iq4_nl")),
                iq4_nl_back: floats(&hex(&s("iq4_nl_back"))),
            }
        })
        .collect()
}

/// q4_0 and iq4_nl bytes equal libggml's `quantize_row_q4_0_ref` and
/// `quantize_row_iq4_nl_ref` on the fixture's rows (head_dim 32–256; outlier channels,
/// uniform, tiny and tied values), and iq4_nl reads back as `dequantize_row_iq4_nl`.
#[test]
fn q4_0_and_iq4_nl_match_libggml() {
    let rows = fixture();
    assert_eq!(rows.len(), 32);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(
            encoded(KvDtype::Q4_0, &r.x),
            r.q4_0,
            "q4_0 row {i} ({})",
            r.kind
        );
        let iq4 = encoded(KvDtype::Iq4Nl, &r.x);
        assert_eq!(iq4, r.iq4_nl, "iq4_nl row {i} ({})", r.kind);
        let mut back = vec![0f32; r.x.len()];
        decode_row(KvDtype::Iq4Nl, &iq4, &mut back);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&r.iq4_nl_back), "iq4_nl back, row {i}");
    }
}

/// iq4_nl is the better 4-bit code on rows with large channels: lower squared error than
/// q4_0 on every such row of the fixture (what it is for).
#[test]
fn iq4_nl_beats_q4_0_on_outlier_rows() {
    for r in fixture().iter().filter(|r| r.kind == "outliers") {
        let err = |dtype| {
            let mut back = vec![0f32; r.x.len()];
            decode_row(dtype, &encoded(dtype, &r.x), &mut back);
            back.iter()
                .zip(&r.x)
                .map(|(a, b)| ((a - b) as f64).powi(2))
                .sum::<f64>()
        };
        assert!(err(KvDtype::Iq4Nl) < err(KvDtype::Q4_0));
    }
}

/// The nearest-entry search: ends clamp, ties go up, as ggml's `best_index_int8`.
#[test]
fn nearest_entry_clamps_and_breaks_ties_upward() {
    let b = &IQ4_NL_BOOK;
    assert_eq!(nearest(b, -500.0), 0);
    assert_eq!(nearest(b, 500.0), 15);
    assert_eq!(nearest(b, 0.0), 8);
    // −10 and 1: the midpoint −4.5 goes to 1 (index 8).
    assert_eq!(nearest(b, -4.5), 8);
    assert_eq!(nearest(b, -4.6), 7);
    assert_eq!(codebook(KvDtype::F16), None);
}

/// A block of zeros stores scale ±0 (q4_0: −0, as ggml's `0 / −8`) and reads back as zeros.
#[test]
fn an_all_zero_block_reads_back_as_zeros() {
    for dtype in [KvDtype::Q4_0, KvDtype::Iq4Nl] {
        let row = vec![0f32; 32];
        let bytes = encoded(dtype, &row);
        assert_eq!(u16::from_le_bytes([bytes[0], bytes[1]]) & 0x7fff, 0);
        let mut back = vec![1f32; 32];
        decode_row(dtype, &bytes, &mut back);
        assert!(back.iter().all(|&v| v == 0.0), "{dtype:?}");
    }
}

/// `H[i][j] · x[j]` summed in f64 over a group of `g` values: the normalized
/// Walsh–Hadamard matrix `H[i][j] = (−1)^popcount(i & j) / √g`.
fn hadamard_f64(x: &[f32], i: usize) -> f64 {
    let g = x.len();
    (0..g)
        .map(|j| {
            let sign = if (i & j).count_ones().is_multiple_of(2) {
                1.0
            } else {
                -1.0
            };
            sign * x[j] as f64
        })
        .sum::<f64>()
        / (g as f64).sqrt()
}

/// Every head_dim is covered by power-of-two groups of at most 128: no value is left
/// unrotated (before, the values past 64 of an 80- or 96-value head were stored as they were,
/// and Gemma 3's 256 were four groups of 64).
#[test]
fn rotation_groups_cover_the_head_in_powers_of_two_up_to_128() {
    assert_eq!(rotation_groups(64), [64]);
    assert_eq!(rotation_groups(128), [128]);
    assert_eq!(rotation_groups(256), [128, 128]);
    assert_eq!(rotation_groups(80), [64, 16]);
    assert_eq!(rotation_groups(96), [64, 32]);
    assert_eq!(rotation_groups(40), [32, 8]);
    assert_eq!(rotation_groups(1), [1]);
    for d in 1..=576 {
        let gs = rotation_groups(d);
        assert_eq!(gs.iter().sum::<usize>(), d, "{d}");
        assert!(gs.iter().all(|g| g.is_power_of_two() && *g <= 128), "{d}");
    }
}

/// The rotation is each group's normalized Hadamard transform (against the matrix in f64),
/// keeps the norm, and is its own inverse, on head sizes 64, 80, 96, 128 and 256.
#[test]
fn rotation_is_the_normalized_hadamard_transform_per_group() {
    for (d, seed) in [(64, 5u64), (80, 6), (96, 7), (128, 8), (256, 9)] {
        let row = random_row(d, seed);
        let mut r = row.clone();
        rotate(&mut r);
        let mut at = 0;
        for g in rotation_groups(d) {
            let x = &row[at..at + g];
            for i in 0..g {
                let want = hadamard_f64(x, i);
                let got = r[at + i] as f64;
                assert!(
                    (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "d={d} value {}: {got} vs {want}",
                    at + i
                );
            }
            at += g;
        }
        let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>();
        assert!((norm(&r) - norm(&row)).abs() <= 1e-5 * norm(&row), "d={d}");
        rotate(&mut r);
        for (a, b) in r.iter().zip(&row) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "d={d}: {a} vs {b}");
        }
    }
}

/// q4_0r and iq4_nlr store their base format's bytes of the rotated row, and read back in
/// the rotated space; on rows with large channels they lose less than without rotating.
#[test]
fn rotated_dtypes_store_the_base_blocks_of_the_rotated_row() {
    for (rot, base) in [
        (KvDtype::Q4_0R, KvDtype::Q4_0),
        (KvDtype::Iq4NlR, KvDtype::Iq4Nl),
    ] {
        assert!(rot.rotated() && !base.rotated());
        for (d, seed) in [(64, 1u64), (128, 2), (256, 3)] {
            let row = random_row(d, seed);
            let mut r = row.clone();
            rotate(&mut r);
            let bytes = encoded(rot, &row);
            assert_eq!(bytes, encoded(base, &r), "{rot:?} d={d}");
            let err = |dtype: KvDtype, bytes: &[u8]| {
                let mut back = vec![0f32; d];
                decode_row(dtype, bytes, &mut back);
                if dtype.rotated() {
                    rotate(&mut back);
                }
                back.iter()
                    .zip(&row)
                    .map(|(a, b)| ((a - b) as f64).powi(2))
                    .sum::<f64>()
            };
            assert!(
                err(rot, &bytes) < err(base, &encoded(base, &row)),
                "{rot:?} d={d}"
            );
        }
    }
}

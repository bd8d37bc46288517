//! Sliding-window attention: each row reads only its last W keys, against the f64 formula
//! with HF's mask (key position > query position − W), and every row equals the row alone
//! whichever path runs it (tiles, split decode rows, batches), with or without the masked
//! scan of `--swa-full`.
use super::*;

/// The f64 formula over keys `max(0, p + 1 − W) ..= p` for the row at position p.
#[allow(clippy::too_many_arguments)]
fn reference_window(
    q: &[f32],
    f: &Fixture,
    (heads, kv_heads): (usize, usize),
    n: usize,
    t: usize,
    d: usize,
    start: usize,
    w: usize,
) -> Vec<f64> {
    let g = heads / kv_heads;
    let mut out = vec![0f64; n * heads * d];
    for i in 0..n {
        let pos = start + i;
        let lo = (pos + 1).saturating_sub(w);
        for h in 0..heads {
            let kvh = h / g;
            let qrow = &q[(h * n + i) * d..][..d];
            let s: Vec<f64> = (lo..=pos)
                .map(|j| {
                    let krow = &f.k[(kvh * t + j) * d..][..d];
                    qrow.iter()
                        .zip(krow)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum()
                })
                .collect();
            let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for (k, p) in e.iter().enumerate() {
                let vrow = &f.v[(kvh * t + lo + k) * d..][..d];
                for c in 0..d {
                    out[(i * heads + h) * d + c] += p / sum * vrow[c] as f64;
                }
            }
        }
    }
    out
}

fn window(w: usize, scan_masked: bool) -> Window {
    Window {
        size: Some(w),
        scan_masked,
    }
}

/// (head_dim, block size, start, rows, window): windows inside one 8-key group, across
/// block edges, across the 256-key range edge, wider than the context, and head_dim 256
/// (Gemma 3) on the AVX2 path; 40 on the portable one.
const CASES: [(usize, usize, usize, usize, usize); 9] = [
    (64, 16, 13, 6, 5),
    (32, 7, 40, 11, 16),
    (128, 5, 250, 20, 17),
    (256, 16, 30, 12, 16),
    (256, 16, 600, 1, 512),
    (64, 16, 700, 1, 300),
    (64, 7, 290, 30, 100),
    (40, 3, 20, 6, 9),
    (64, 16, 10, 5, 64),
];

#[test]
fn a_sliding_window_matches_the_f64_formula_with_hf_mask() -> Result<()> {
    for (d, bs, start, n, w) in CASES {
        for dtype in RUNTIME_DTYPES {
            let (heads, kv_heads) = (4, 2);
            let t = start + n;
            let f = fixture(kv_heads, d, t, bs, dtype);
            let q = randn(heads * n * d, 5);
            let view = f.pool.layer_view(f.table.blocks(), 0);
            let got = paged_attention_in(&q, heads, kv_heads, (n, start), &view, window(w, false))?;
            let want = reference_window(&q, &f, (heads, kv_heads), n, t, d, start, w);
            for (a, b) in got.iter().zip(&want) {
                let err = (*a as f64 - b).abs();
                assert!(
                    err <= 1e-5 * (1.0 + b.abs()),
                    "d {d} bs {bs} start {start} W {w} {dtype:?}: {a} vs {b}"
                );
            }
        }
    }
    Ok(())
}

/// Every row of a call equals the row alone, bit for bit, and the masked scan changes no
/// bit: tiles (prompt rows), split decode rows (≥ 256 keys in the window), batches.
#[test]
fn every_windowed_row_equals_the_row_alone_with_or_without_the_scan() -> Result<()> {
    for (d, bs, start, n, w) in CASES {
        for dtype in RUNTIME_DTYPES {
            let (heads, kv_heads) = (4, 2);
            let t = start + n;
            let f = fixture(kv_heads, d, t, bs, dtype);
            let q = randn(heads * n * d, 6);
            let view = f.pool.layer_view(f.table.blocks(), 0);
            let all = paged_attention_in(&q, heads, kv_heads, (n, start), &view, window(w, false))?;
            let scanned =
                paged_attention_in(&q, heads, kv_heads, (n, start), &view, window(w, true))?;
            assert_eq!(
                bits(&all),
                bits(&scanned),
                "scan changed bits: d {d} W {w} {dtype:?}"
            );
            for r in 0..n {
                let qr: Vec<f32> = (0..heads)
                    .flat_map(|h| q[(h * n + r) * d..][..d].to_vec())
                    .collect();
                let alone = paged_attention_in(
                    &qr,
                    heads,
                    kv_heads,
                    (1, start + r),
                    &view,
                    window(w, false),
                )?;
                let row = &all[r * heads * d..(r + 1) * heads * d];
                assert_eq!(
                    bits(row),
                    bits(&alone),
                    "row {r}: d {d} bs {bs} start {start} W {w} {dtype:?}"
                );
            }
            // In a batch beside a full-attention sequence.
            let other = randn(heads * d, 7);
            let items = [
                AttnSeq {
                    q: &q,
                    n,
                    start_pos: start,
                    kv: f.pool.layer_view(f.table.blocks(), 0),
                    window: window(w, false),
                },
                AttnSeq {
                    q: &other,
                    n: 1,
                    start_pos: t - 1,
                    kv: f.pool.layer_view(f.table.blocks(), 0),
                    window: Window::FULL,
                },
            ];
            let batch = paged_attention_batch(&items, heads, kv_heads)?;
            assert_eq!(
                bits(&batch[..all.len()]),
                bits(&all),
                "batched: d {d} W {w} {dtype:?}"
            );
        }
    }
    Ok(())
}

/// A window as wide as the context is plain causal attention, bit for bit.
#[test]
fn a_window_wider_than_the_context_is_causal_attention() -> Result<()> {
    let (heads, kv_heads, d, t) = (4, 2, 64, 300);
    let f = fixture(kv_heads, d, t, 16, KvDtype::F16);
    let q = randn(heads * t * d, 8);
    let view = f.pool.layer_view(f.table.blocks(), 0);
    let full = paged_attention(&q, heads, kv_heads, t, 0, &view)?;
    let wide = paged_attention_in(&q, heads, kv_heads, (t, 0), &view, window(t, false))?;
    assert_eq!(bits(&full), bits(&wide));
    assert!(paged_attention_in(&q, heads, kv_heads, (t, 0), &view, window(0, false)).is_err());
    Ok(())
}

//! Time of the attention kernels alone at the default model's shapes (9 query heads, 3 KV
//! heads, head_dim 64, f16 KV in blocks of 16; random K/V): a single request's decode
//! step (one row at position P), a batched decode step's attention for 8 sequences of one
//! row at position P, and a P-row prefill, per layer,
//! prefetching K/V as the decoder does (decode rows: yes; a prompt's rows: no).
//!
//!     cargo run --release --example attention_bench [P]     # P = 384 by default
//!
//! The caches are 30 layers deep, as the model's, and a call walks them in turn, so K/V
//! come from memory as in a real step.
use nanollm::kv::{BlockTable, KvDtype, KvPart, KvPool};
use nanollm::model::paged_attention::{
    paged_attention_batch, AttnSeq, Window, PREFETCH_BELOW_ROWS,
};
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let p: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(384);
    let (heads, kv_heads, d, layers, seqs) = (9usize, 3usize, 64usize, 30usize, 8usize);
    let shape = nanollm::kv::KvShape {
        num_layers: layers,
        num_key_value_heads: kv_heads,
        head_dim: d,
        dtype: KvDtype::F16,
        latent: false,
    };
    let mut pool = KvPool::new(shape, 16, seqs * p.div_ceil(16) + 8)?;
    let fill = |n: usize, s: f32| (0..n).map(|i| (i as f32 * s).sin()).collect::<Vec<f32>>();
    let mut tables = Vec::new();
    for s in 0..seqs {
        let mut t = BlockTable::new();
        t.reserve(&mut pool, p)?;
        for layer in 0..layers {
            let k = fill(
                kv_heads * p * d,
                0.013 + s as f32 * 1e-3 + layer as f32 * 1e-4,
            );
            let v = fill(kv_heads * p * d, 0.029 + s as f32 * 1e-3);
            pool.write(t.blocks(), layer, KvPart::K, 0, p, &k);
            pool.write(t.blocks(), layer, KvPart::V, 0, p, &v);
        }
        tables.push(t);
    }
    let q1 = fill(heads * d, 0.07);
    let qp = fill(heads * p * d, 0.05);
    // On a rayon worker, as the model's forward pass runs.
    rayon::scope(|_| -> anyhow::Result<()> {
        for round in 0..5 {
            let reps = 4;
            let t = Instant::now();
            for _ in 0..reps {
                for layer in 0..layers {
                    let items: Vec<AttnSeq> = tables
                        .iter()
                        .map(|t| AttnSeq {
                            q: &q1,
                            n: 1,
                            start_pos: p - 1,
                            kv: pool
                                .layer_view(t.blocks(), layer)
                                .with_prefetch(1 < PREFETCH_BELOW_ROWS),
                            window: Window::FULL,
                        })
                        .collect();
                    std::hint::black_box(paged_attention_batch(&items, heads, kv_heads)?);
                }
            }
            let decode = t.elapsed().as_secs_f64() / reps as f64;
            // One sequence's decode row (a single-request step), 30 layers, 16 times.
            let t = Instant::now();
            for _ in 0..16 {
                for layer in 0..layers {
                    let one = [AttnSeq {
                        q: &q1,
                        n: 1,
                        start_pos: p - 1,
                        kv: pool
                            .layer_view(tables[0].blocks(), layer)
                            .with_prefetch(1 < PREFETCH_BELOW_ROWS),
                        window: Window::FULL,
                    }];
                    std::hint::black_box(paged_attention_batch(&one, heads, kv_heads)?);
                }
            }
            let single = t.elapsed().as_secs_f64() / 16.0;
            let t = Instant::now();
            for layer in 0..layers {
                let items = [AttnSeq {
                    q: &qp,
                    n: p,
                    start_pos: 0,
                    kv: pool
                        .layer_view(tables[0].blocks(), layer)
                        .with_prefetch(p < PREFETCH_BELOW_ROWS),
                    window: Window::FULL,
                }];
                std::hint::black_box(paged_attention_batch(&items, heads, kv_heads)?);
            }
            let prefill = t.elapsed().as_secs_f64();
            println!(
                "round {round}: P={p}: decode step of 1 row (30 layers) {:.3} ms, of {seqs} rows {:.2} ms; prefill of {p} rows (30 layers) {:.1} ms",
                single * 1e3,
                decode * 1e3,
                prefill * 1e3
            );
        }
        Ok(())
    })
}

//! Each policy's kept set against an f64 reference written here from the papers'
//! definitions (not from `score.rs`), on a pool of random rows; the compaction keeps each
//! kept row's bytes and gives the blocks past the budget back.
use super::*;
use crate::kv::{KvDtype, KvPart, KvShape};

const D: usize = 8;
const HEADS: usize = 4; // query heads
const KV_HEADS: usize = 2;
const LAYERS: usize = 2;
const BS: usize = 4;

fn rand(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

/// A pool of 2 layers × 2 KV heads holding `n` random f32 rows, and the K rows as f64
/// (`[layer][head][row][D]`).
fn filled(n: usize, seed: u64) -> (KvPool, BlockTable, Vec<Vec<Vec<Vec<f64>>>>) {
    let shape = KvShape {
        num_layers: LAYERS,
        num_key_value_heads: KV_HEADS,
        head_dim: D,
        dtype: KvDtype::F32,
        latent: false,
    };
    let mut pool = KvPool::new(shape, BS, 64).expect("pool");
    let mut table = BlockTable::new();
    table.reserve(&mut pool, n).expect("reserve");
    let mut s = seed;
    let mut keys = vec![vec![Vec::new(); KV_HEADS]; LAYERS];
    for (layer, per_layer) in keys.iter_mut().enumerate() {
        for part in [KvPart::K, KvPart::V] {
            let rows: Vec<f32> = (0..KV_HEADS * n * D).map(|_| rand(&mut s)).collect();
            pool.write(table.blocks(), layer, part, 0, n, &rows);
            if part == KvPart::K {
                for (h, per_head) in per_layer.iter_mut().enumerate() {
                    *per_head = (0..n)
                        .map(|r| {
                            rows[(h * n + r) * D..][..D]
                                .iter()
                                .map(|&x| x as f64)
                                .collect()
                        })
                        .collect();
                }
            }
        }
    }
    table.commit(n, BS);
    (pool, table, keys)
}

/// The reference choice: sinks, the protected newest rows, then the best scores (ties to
/// the newer row), ascending.
fn reference_kept(scores: &[f64], budget: usize, sinks: usize, protect: usize) -> Vec<usize> {
    let n = scores.len();
    let mut kept: Vec<usize> = (0..sinks).collect();
    kept.extend(n - protect..n);
    let mut order: Vec<(f64, usize)> = (sinks..n - protect).map(|i| (scores[i], i)).collect();
    order.sort_by(|a, b| b.partial_cmp(a).expect("no NaN"));
    kept.extend(order.iter().take(budget - kept.len()).map(|&(_, i)| i));
    kept.sort();
    kept
}

/// softmax(q · k) over keys 0 ..= at, in f64.
fn probs(keys: &[Vec<f64>], q: &[f32], at: usize) -> Vec<f64> {
    let l: Vec<f64> = keys[..=at]
        .iter()
        .map(|k| k.iter().zip(q).map(|(a, &b)| a * b as f64).sum())
        .collect();
    let m = l.iter().cloned().fold(f64::MIN, f64::max);
    let z: f64 = l.iter().map(|x| (x - m).exp()).sum();
    l.iter().map(|x| (x - m).exp() / z).collect()
}

fn logged_queries(n_prompt: usize, window: usize, seed: u64) -> Vec<LoggedQuery> {
    let mut s = seed;
    let mut out = Vec::new();
    for pos in n_prompt - window..n_prompt {
        for layer in 0..LAYERS {
            let q: Vec<f32> = (0..HEADS * D).map(|_| rand(&mut s)).collect();
            out.push(LoggedQuery { layer, pos, q });
        }
    }
    out
}

/// The evicted state's kept rows for `flag` on a prompt of `n` rows with `queries` logged,
/// and the pool after it.
fn run(flag: &str, n: usize, queries: &[LoggedQuery]) -> (Vec<KeptRows>, KvPool, BlockTable) {
    let (mut pool, mut table, _) = filled(n, 1);
    let cfg = EvictConfig::parse(flag).expect("flag");
    let mut st = EvictState::new(cfg, n, LAYERS, HEADS, KV_HEADS);
    for q in queries {
        st.log.push(q.layer, q.pos, q.q.clone());
    }
    let kept = st.evict(&mut pool, &mut table);
    (kept, pool, table)
}

#[test]
fn snapkv_and_tova_keep_the_f64_reference_rows() {
    let (n, window, budget) = (37, 6, 15);
    let (_, _, keys) = filled(n, 1);
    let qs = logged_queries(n, window, 9);
    let g = HEADS / KV_HEADS;
    for (flag, tova) in [
        (format!("snapkv:budget={budget},window={window}"), false),
        (format!("tova:budget={budget}"), true),
    ] {
        let (kept, pool, table) = run(&flag, n, &qs);
        assert_eq!(kept.len(), LAYERS * KV_HEADS, "{flag}");
        for k in &kept {
            let mine: Vec<&LoggedQuery> = qs
                .iter()
                .filter(|q| q.layer == k.layer && (!tova || q.pos == n - 1))
                .collect();
            let mut mass = vec![0f64; n];
            for q in &mine {
                for h in k.head * g..(k.head + 1) * g {
                    for (m, p) in mass.iter_mut().zip(probs(
                        &keys[k.layer][k.head],
                        &q.q[h * D..(h + 1) * D],
                        q.pos,
                    )) {
                        *m += p;
                    }
                }
            }
            let scores: Vec<f64> = if tova {
                mass
            } else {
                // Mean over a window of 5, zero-padded, divided by 5.
                (0..n)
                    .map(|i| {
                        (i.saturating_sub(2)..(i + 3).min(n))
                            .map(|j| mass[j])
                            .sum::<f64>()
                            / 5.0
                    })
                    .collect()
            };
            let protect = if tova { 1 } else { window };
            assert_eq!(
                k.rows,
                reference_kept(&scores, budget, 0, protect),
                "{flag} layer {} head {}",
                k.layer,
                k.head
            );
            // Compaction: row i now holds the bytes of kept row k.rows[i]; blocks past the
            // budget went back.
            let view = pool.layer_view(table.blocks(), k.layer);
            for (i, &r) in k.rows.iter().enumerate() {
                let got: Vec<f64> = view
                    .row(KvPart::K, k.head, i)
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
                    .collect();
                assert_eq!(got, keys[k.layer][k.head][r], "{flag}");
            }
        }
        assert_eq!(
            (table.len(), table.rows(0), table.evicted(0)),
            (n, budget, n - budget)
        );
        assert_eq!(pool.num_used_blocks(), budget.div_ceil(BS), "{flag}");
    }
}

#[test]
#[allow(clippy::needless_range_loop)]
fn knorm_streaming_and_h2o_keep_the_f64_reference_rows() {
    let (n, budget) = (30, 11);
    let (_, _, keys) = filled(n, 1);
    // KNorm: the smallest norms.
    let (kept, ..) = run(&format!("knorm:budget={budget},sinks=2"), n, &[]);
    for k in &kept {
        let scores: Vec<f64> = keys[k.layer][k.head]
            .iter()
            .map(|r| -r.iter().map(|x| x * x).sum::<f64>().sqrt())
            .collect();
        assert_eq!(k.rows, reference_kept(&scores, budget, 2, 0));
    }
    // StreamingLLM: the sinks and the newest.
    let (kept, ..) = run(&format!("streaming:budget={budget},sinks=3"), n, &[]);
    let want: Vec<usize> = (0..3).chain(n - (budget - 3)..n).collect();
    assert!(kept.iter().all(|k| k.rows == want));
    // H2O: every prompt query's attention, summed.
    let qs = logged_queries(n, n, 4);
    let (mut pool, mut table, _) = filled(n, 1);
    let cfg = EvictConfig::parse(&format!("h2o:budget={budget}")).expect("flag");
    let mut st = EvictState::new(cfg, n, LAYERS, HEADS, KV_HEADS);
    for q in &qs {
        st.log.push(q.layer, q.pos, q.q.clone());
    }
    st.after_commit(&mut pool, &mut table);
    assert_eq!(table.rows(0), budget);
    let g = HEADS / KV_HEADS;
    for layer in 0..LAYERS {
        for head in 0..KV_HEADS {
            let mut mass = vec![0f64; n];
            for q in qs.iter().filter(|q| q.layer == layer) {
                for h in head * g..(head + 1) * g {
                    for (m, p) in mass.iter_mut().zip(probs(
                        &keys[layer][head],
                        &q.q[h * D..(h + 1) * D],
                        q.pos,
                    )) {
                        *m += p;
                    }
                }
            }
            let want = reference_kept(&mass, budget, 0, budget / 2);
            let view = pool.layer_view(table.blocks(), layer);
            for (i, &r) in want.iter().enumerate() {
                let got: Vec<f64> = view
                    .row(KvPart::K, head, i)
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
                    .collect();
                assert_eq!(
                    got, keys[layer][head][r],
                    "h2o layer {layer} head {head} row {i}"
                );
            }
        }
    }
    table.release(&mut pool);
    assert_eq!(pool.num_used_blocks(), 0);
}

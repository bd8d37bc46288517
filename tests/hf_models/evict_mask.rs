//! Issue 60's oracle for token eviction: a run whose cache evicts (and packs the survivors
//! into fewer blocks) gives the logits of the full-cache run with the evicted keys masked
//! out — every policy, at the prompt's end and during decode, on the tiny Llama (f32
//! weights and KV, so both runs differ only by the attention's f32 rounding against the
//! oracle's f64). The same runs against the unmasked full cache differ by far more: the test
//! can fail.
use crate::ours;
use crate::tiny::{self, Arch, Rng, Spec};
use nanollm::kv::evict::{EvictConfig, EvictState, KeptRows};
use nanollm::model::Loaded;

fn model() -> (tempfile::TempDir, Loaded) {
    let dir = tempfile::tempdir().expect("tempdir");
    tiny::write_folder(dir.path(), &Spec::of(Arch::Llama), 60);
    let m = ours::load(dir.path(), None);
    (dir, m)
}

/// Largest |a − b| over two runs' logits.
fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

#[test]
fn an_evicted_run_equals_the_full_cache_with_the_evicted_keys_masked() {
    let (_dir, m) = model();
    let c = m.decoder.config();
    let (layers, heads, kv_heads) = (
        c.num_hidden_layers,
        c.num_attention_heads,
        c.num_key_value_heads,
    );
    let mut rng = Rng::new(7);
    let prompt = rng.tokens(40);
    let cont = rng.tokens(30);
    let full = ours::kv_cached(&m, &prompt, &cont);
    for flag in [
        "streaming:budget=12,sinks=2,every=5",
        "snapkv:budget=12,window=6,every=5",
        "h2o:budget=12,every=5",
        "tova:budget=12,every=5",
        "knorm:budget=25%,every=5",
        "random:budget=12,every=5,seed=3",
    ] {
        let cfg = EvictConfig::parse(flag).expect("flag");
        // The evicted run; after every eviction, which positions each layer and head holds.
        let mut cache = ours::cache(&m, false);
        let mut st = EvictState::new(cfg, prompt.len(), layers, heads, kv_heads);
        let mut held: Vec<Vec<Vec<usize>>> =
            vec![vec![(0..prompt.len()).collect(); kv_heads]; layers];
        let mut masks: Vec<Vec<Vec<Vec<bool>>>> = Vec::new();
        // New positions are held from the previous length on; an eviction then keeps rows.
        let track =
            |held: &mut Vec<Vec<Vec<usize>>>, kept: &[KeptRows], (before, len): (usize, usize)| {
                for h in held.iter_mut().flatten() {
                    h.extend(before..len);
                }
                for k in kept {
                    let h = &mut held[k.layer][k.head];
                    *h = k.rows.iter().map(|&r| h[r]).collect();
                }
                held.iter()
                    .map(|per_head| {
                        per_head
                            .iter()
                            .map(|keep| (0..len).map(|p| !keep.contains(&p)).collect())
                            .collect()
                    })
                    .collect::<Vec<Vec<Vec<bool>>>>()
            };
        // One forward pass logging the policy's queries, then its eviction: logits and what
        // each layer's KV head kept.
        let step = |tokens: &[u32], cache: &mut nanollm::kv::KvCache, st: &mut EvictState| {
            let start = cache.len();
            let logits = m
                .decoder
                .forward_observed(
                    tokens,
                    (start, prompt.len()),
                    cache,
                    tokens.len() - 1,
                    Some(&st.log),
                )
                .expect("forward");
            (logits, st.after_commit(&mut cache.pool, &mut cache.table))
        };
        let (logits, kept) = step(&prompt, &mut cache, &mut st);
        let mut out = vec![logits];
        masks.push(track(&mut held, &kept, (prompt.len(), cache.len())));
        for &t in &cont {
            let before = cache.len();
            let (logits, kept) = step(&[t], &mut cache, &mut st);
            out.push(logits);
            masks.push(track(&mut held, &kept, (before, cache.len())));
        }
        assert!(st.evictions >= 4, "{flag}: {} evictions", st.evictions);
        // The oracle: the full cache, each step's attention leaving out what the evicted run
        // had evicted before that step.
        let mut cache = ours::cache(&m, false);
        let mut oracle = vec![m
            .decoder
            .forward_logits(&prompt, 0, prompt.len(), &mut cache, prompt.len() - 1)
            .expect("prefill")];
        for (i, &t) in cont.iter().enumerate() {
            let mut mask = masks[i].clone();
            for per_head in mask.iter_mut().flatten() {
                per_head.push(false); // the new row
            }
            let pos = cache.len();
            oracle.push(
                m.decoder
                    .forward_masked(&[t], (pos, prompt.len()), &mut cache, &mask)
                    .expect("masked step"),
            );
        }
        let (to_oracle, to_full) = (max_diff(&out, &oracle), max_diff(&out, &full));
        eprintln!(
            "{flag}: max |Δlogit| {to_oracle:e} from the oracle, {to_full:e} from the full cache"
        );
        assert!(
            to_oracle < 1e-4,
            "{flag}: {to_oracle} from the masked full cache"
        );
        assert!(
            to_full > 100.0 * to_oracle.max(1e-6),
            "{flag}: {to_full} from the full cache, {to_oracle} from the oracle"
        );
    }
}

//! The cache rules on the tiny DeepSeek models, bit for bit: naive == KV-cached on every MLA
//! path; batched == alone, chunked == one-shot and prefix hit == miss through the engine,
//! for float, q8_0 and rotated 4-bit latents at odd block sizes; a disk hit == a pool hit;
//! the bytes held equal kv-size's MLA figure from config.json. And the two attention paths
//! agree within a stated tolerance.
use super::tiny::{write_folder, write_gguf, Shape};
use crate::ours::{self, alone, request};
use crate::tiny::Rng;
use nanollm::engine::llm_engine::{EngineConfig, Finished, LlmEngine, SchedulerConfig};
use nanollm::engine::{CacheConfig, Request};
use nanollm::kv::offload::{Fingerprint, OffloadConfig};
use nanollm::kv::KvDtype;
use nanollm::model::decoder::attention::MlaPath;
use nanollm::model::Loaded;
use nanollm::sizing::estimate::Layout;
use nanollm::sizing::spec::KvSpec;
use std::collections::BTreeMap;

/// The tiny V3-like GGUF (q LoRA, sigmoid router, groups) and the V2-like folder (YaRN).
fn models() -> (tempfile::TempDir, Vec<(&'static str, Loaded)>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let v2 = dir.path().join("v2");
    write_folder(&v2, &Shape::v2(), 58);
    let v3_dir = dir.path().join("v3");
    let w = write_folder(&v3_dir, &Shape::v3(), 59);
    let v3 = dir.path().join("v3.gguf");
    write_gguf(&v3, &Shape::v3(), &w, false, &[], &[]);
    let models = vec![
        ("v2 folder", ours::load(&v2, None)),
        ("v3 gguf", ours::load(&v3, None)),
    ];
    (dir, models)
}

#[test]
fn naive_equals_kv_cached_on_every_path() {
    let (_dir, mut models) = models();
    let prompt = Rng::new(11).tokens(30);
    let cont = Rng::new(12).tokens(12);
    for (name, m) in &mut models {
        for path in [MlaPath::Auto, MlaPath::Absorbed, MlaPath::Expanded] {
            m.decoder.set_mla_path(path);
            let naive = ours::naive(m, &prompt, &cont);
            let cached = ours::kv_cached(m, &prompt, &cont);
            assert_eq!(naive, cached, "{name} {path:?}: naive vs KV-cached");
        }
    }
}

/// Absorbed against expanded decode rows (auto: expanded prompt, absorbed decode), f32 and
/// q8_0 latents. Measured 2026-12-07: see the message.
#[test]
fn absorbed_and_expanded_agree_within_rounding() {
    let (_dir, mut models) = models();
    let prompt = Rng::new(13).tokens(25);
    let cont = Rng::new(14).tokens(10);
    for (name, m) in &mut models {
        m.decoder.set_mla_path(MlaPath::Expanded);
        let expanded = ours::kv_cached(m, &prompt, &cont);
        m.decoder.set_mla_path(MlaPath::Absorbed);
        let absorbed = ours::kv_cached(m, &prompt, &cont);
        let worst = expanded
            .iter()
            .zip(&absorbed)
            .map(|(a, b)| crate::reference::max_abs_diff(a, b))
            .fold(0.0, f32::max);
        eprintln!("{name}: absorbed vs expanded max |Δ logit| {worst:.2e}");
        assert!(
            worst > 0.0 && worst < 1e-4,
            "{name}: absorbed vs expanded max |Δ logit| {worst}"
        );
    }
}

/// Eight prompts sharing a 40-token opening, 4 to 60 tokens more each.
fn prompts() -> Vec<Vec<u32>> {
    let mut rng = Rng::new(3);
    let opening = rng.tokens(40);
    (0..8)
        .map(|i| {
            let mut p = opening.clone();
            p.extend(rng.tokens(4 + 8 * i));
            p
        })
        .collect()
}

fn config(
    cache: CacheConfig,
    chunk: usize,
    offload: Option<&'static OffloadConfig>,
) -> EngineConfig {
    EngineConfig {
        cache,
        num_blocks: 4096,
        max_model_len: 256,
        offload,
        speculative: None,
        scheduler: SchedulerConfig {
            max_num_seqs: 8,
            max_num_batched_tokens: chunk,
            enable_prefix_caching: true,
        },
    }
}

/// Run `reqs` through one engine (request i arrives before step `arrive[i]`).
fn batched<'m>(
    m: &'m Loaded,
    reqs: &[Request],
    arrive: &[usize],
    cfg: EngineConfig,
) -> (BTreeMap<usize, Finished>, LlmEngine<'m>) {
    let mut eng = LlmEngine::new(&m.decoder, &m.tokenizer, cfg).expect("engine");
    let (mut done, mut ids, mut step) = (BTreeMap::new(), BTreeMap::new(), 0);
    while done.len() < reqs.len() {
        for (i, r) in reqs.iter().enumerate() {
            if arrive[i] == step {
                ids.insert(eng.add_request(r.clone()).expect("add"), i);
            }
        }
        for f in eng.step(false).expect("step").finished {
            done.insert(ids[&f.seq_id], f);
        }
        step += 1;
        assert!(step < 10_000, "the engine does not finish");
    }
    assert_eq!(eng.pool().num_used_blocks(), 0, "blocks leaked");
    (done, eng)
}

/// Batched, chunked (24-token chunks) and prefix-cached runs equal each request alone:
/// f16 latents in blocks of 16, q8_0 in blocks of 7, rotated iq4_nl in blocks of 5.
#[test]
fn batched_chunked_and_prefix_cached_equal_alone() {
    let (_dir, models) = models();
    let prompts = prompts();
    for (name, m) in &models {
        for (dtype, bs) in [(KvDtype::F16, 16), (KvDtype::Q8_0, 7), (KvDtype::Iq4NlR, 5)] {
            let cache = CacheConfig {
                dtype,
                block_size: bs,
                swa_full: false,
                evict: None,
            };
            let reqs: Vec<Request> = prompts.iter().map(|p| request(p, 30, cache)).collect();
            let want: Vec<Vec<u32>> = reqs.iter().map(|r| alone(m, r).tokens).collect();
            let arrive = [0, 0, 1, 3, 3, 7, 12, 20];
            let (done, eng) = batched(m, &reqs, &arrive, config(cache, 24, None));
            for (i, w) in want.iter().enumerate() {
                assert_eq!(
                    &done[&i].generation.tokens, w,
                    "{name} {cache:?} request {i}"
                );
            }
            let (queries, hits) = eng.prefix_cache_counters();
            assert!(
                hits > 0 && hits < queries,
                "{name} {cache:?}: hits {hits} of {queries}"
            );
        }
    }
}

/// A prompt whose blocks come back from the disk tier after a restart gives the tokens of
/// the miss.
#[test]
fn disk_hit_equals_pool_hit_and_miss() {
    let (_dir, models) = models();
    let tiers = tempfile::tempdir().expect("tempdir");
    let prompt = Rng::new(21).tokens(70);
    for (i, (name, m)) in models.iter().enumerate() {
        let tier: &'static OffloadConfig = Box::leak(Box::new(OffloadConfig {
            dir: tiers.path().join(format!("t{i}")),
            max_bytes: 1 << 30,
            fingerprint: Fingerprint::of(&[("test", name.to_string())]),
        }));
        let cache = CacheConfig {
            dtype: KvDtype::Q8_0,
            block_size: 16,
            swa_full: false,
            evict: None,
        };
        let req = request(&prompt, 12, cache);
        let want = alone(m, &req).tokens;
        let run = |eng: &mut LlmEngine| {
            eng.add_request(req.clone()).expect("add");
            loop {
                if let Some(f) = eng.step(false).expect("step").finished.pop() {
                    return f.generation.tokens;
                }
            }
        };
        let mut eng = LlmEngine::new(&m.decoder, &m.tokenizer, config(cache, 128, Some(tier)))
            .expect("engine");
        assert_eq!(run(&mut eng), want, "{name}: miss");
        assert_eq!(run(&mut eng), want, "{name}: pool hit");
        drop(eng);
        let mut eng = LlmEngine::new(&m.decoder, &m.tokenizer, config(cache, 128, Some(tier)))
            .expect("engine");
        assert_eq!(run(&mut eng), want, "{name}: disk hit");
        assert!(
            eng.prefix_disk_hits() >= 64,
            "{name}: {} disk hit tokens",
            eng.prefix_disk_hits()
        );
    }
}

/// At the end of a request the bytes its blocks hold equal kv-size's paged MLA figure, read
/// from the folder's config.json (one latent row of kv_lora_rank + qk_rope_head_dim values
/// per token and layer), for every runtime dtype and several block sizes.
#[test]
fn held_bytes_equal_kv_size_from_config_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_folder(dir.path(), &Shape::v2(), 58);
    let m = ours::load(dir.path(), None);
    let text = std::fs::read_to_string(dir.path().join("config.json")).expect("config");
    let spec = KvSpec::from_config_json(&serde_json::from_str(&text).expect("json")).expect("spec");
    let prompt = Rng::new(9).tokens(37);
    for dtype in nanollm::kv::codec::RUNTIME_DTYPES {
        for bs in [1usize, 5, 16, 64] {
            let cache = CacheConfig {
                dtype,
                block_size: bs,
                swa_full: false,
                evict: None,
            };
            let kv = alone(&m, &request(&prompt, 30, cache)).stats.kv_cache;
            let layout = Layout {
                tp: 1,
                block_size: Some(bs as u64),
            };
            let want = spec
                .kv_bytes(kv.tokens as u64, 1, dtype, layout)
                .expect("bytes");
            assert_eq!(
                kv.bytes_held, want,
                "{dtype:?} bs {bs}: held vs kv-size at {} tokens",
                kv.tokens
            );
            // One latent row per token and layer: 3 layers × (64 + 32) values.
            let row = dtype.bytes_for(96).expect("row");
            assert_eq!(want, 3 * row * (kv.tokens.div_ceil(bs) * bs) as u64);
        }
    }
}

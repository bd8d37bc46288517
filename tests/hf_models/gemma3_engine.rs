//! Issue 42: the hybrid KV cache on the tiny Gemma 3 (layers 0 and 2 slide with a 16-token
//! window, layer 1 is global) through the batched engine: batched == alone, chunked ==
//! one-shot, prefix hit == miss, preemption, sliding == --swa-full — bit for bit, greedy,
//! across the window and block edges — with the sliding groups' blocks bounded by
//! ⌈W/B⌉ + 1 between steps (⌈(W − 1 + C)/B⌉ + 1 while a chunk of C runs), the pool back to
//! full after every run, and the bytes held equal to kv-size's paged figure.
use crate::ours::{self, alone, request};
use crate::tiny::{self, Arch, Rng, Spec};
use nanollm::engine::llm_engine::{EngineConfig, Finished, LlmEngine, SchedulerConfig};
use nanollm::engine::{CacheConfig, Request};
use nanollm::kv::KvDtype;
use nanollm::model::Loaded;
use std::collections::BTreeMap;

const W: usize = Spec::GEMMA_WINDOW;

fn model() -> (tempfile::TempDir, Loaded) {
    let dir = tempfile::tempdir().expect("tempdir");
    tiny::write_folder(dir.path(), &Spec::of(Arch::Gemma3), 50);
    let m = ours::load(dir.path(), None);
    (dir, m)
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

fn config(cache: CacheConfig, blocks: usize, chunk: usize, prefix: bool) -> EngineConfig {
    EngineConfig {
        cache,
        num_blocks: blocks,
        max_model_len: 256,
        offload: None,
        speculative: None,
        scheduler: SchedulerConfig {
            max_num_seqs: 8,
            max_num_batched_tokens: chunk,
            enable_prefix_caching: prefix,
        },
    }
}

/// Run `reqs` through one engine (request i arrives before step `arrive[i]`), checking the
/// sliding groups' blocks after every step; returns the finished requests by index.
fn batched<'m>(
    m: &'m Loaded,
    reqs: &[Request],
    arrive: &[usize],
    cfg: EngineConfig,
) -> (BTreeMap<usize, Finished>, LlmEngine<'m>) {
    let bs = cfg.cache.block_size;
    let chunk = cfg.scheduler.max_num_batched_tokens;
    let mut eng = LlmEngine::new(&m.decoder, &m.tokenizer, cfg).expect("engine");
    let windows: Vec<Option<usize>> = eng
        .pool()
        .groups()
        .groups
        .iter()
        .map(|g| g.window)
        .collect();
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
        // Between steps: a sliding group holds at most ⌈W/B⌉ + 1 blocks; a full group
        // ⌈computed/B⌉.
        for (id, computed, held) in eng.blocks_held() {
            for (g, (&w, &h)) in windows.iter().zip(&held).enumerate() {
                let most = match w {
                    Some(w) if !cfg_swa_full(&eng) => {
                        (w.div_ceil(bs) + 1).min(computed.div_ceil(bs))
                    }
                    _ => computed.div_ceil(bs),
                };
                assert!(
                    h <= most,
                    "seq {id} group {g}: {h} blocks at {computed} tokens, at most {most}"
                );
            }
        }
        step += 1;
        assert!(step < 10_000, "the engine does not finish");
    }
    let _ = chunk;
    assert_eq!(eng.num_unfinished(), 0);
    assert_eq!(eng.pool().num_used_blocks(), 0, "blocks leaked");
    (done, eng)
}

fn cfg_swa_full(eng: &LlmEngine) -> bool {
    eng.config().cache.swa_full
}

/// Batched, chunked (24-token chunks) and prefix-cached runs equal each request alone, for
/// the sliding cache and --swa-full, which also equal each other; f16 in blocks of 16 and
/// q8_0 in blocks of 7, iq4_nl in blocks of 5.
#[test]
fn hybrid_batched_chunked_prefix_cached_and_swa_full_equal_alone() {
    let (_dir, m) = model();
    let prompts = prompts();
    for (dtype, bs) in [(KvDtype::F16, 16), (KvDtype::Q8_0, 7), (KvDtype::Iq4Nl, 5)] {
        let mut reference: Option<Vec<Vec<u32>>> = None;
        for swa_full in [false, true] {
            let cache = CacheConfig {
                dtype,
                block_size: bs,
                swa_full,
                evict: None,
            };
            let reqs: Vec<Request> = prompts.iter().map(|p| request(p, 40, cache)).collect();
            let alone: Vec<Vec<u32>> = reqs.iter().map(|r| alone(&m, r).tokens).collect();
            let arrive = [0, 0, 1, 3, 3, 7, 12, 20];
            let (done, eng) = batched(&m, &reqs, &arrive, config(cache, 4096, 24, true));
            for (i, want) in alone.iter().enumerate() {
                assert_eq!(&done[&i].generation.tokens, want, "{cache:?} request {i}");
            }
            let (queries, hits) = eng.prefix_cache_counters();
            assert!(
                hits > 0 && hits < queries,
                "{cache:?}: hits {hits} of {queries}"
            );
            match &reference {
                None => reference = Some(alone),
                Some(r) => assert_eq!(r, &alone, "{dtype:?}: sliding vs --swa-full"),
            }
        }
    }
}

/// A pool too small for all eight at once: preemption and recompute keep every output; the
/// prefix cache on equals off.
#[test]
fn hybrid_preemption_and_prefix_cache_off_keep_outputs() {
    let (_dir, m) = model();
    let prompts = prompts();
    let cache = CacheConfig::default();
    let reqs: Vec<Request> = prompts.iter().map(|p| request(p, 40, cache)).collect();
    let alone: Vec<Vec<u32>> = reqs.iter().map(|r| alone(&m, r).tokens).collect();
    // Up to 140 tokens: the full group ⌈140/16⌉ = 9 blocks, each sliding group 2–3
    // between steps: about two sequences fit.
    let mut tight = config(cache, 24, 32, true);
    tight.max_model_len = 140;
    let (done, eng) = batched(&m, &reqs, &[0; 8], tight);
    assert!(eng.preemptions() > 0, "the pool was not tight enough");
    for (i, want) in alone.iter().enumerate() {
        assert_eq!(&done[&i].generation.tokens, want, "preempted request {i}");
    }
    let (done, _) = batched(&m, &reqs, &[0; 8], config(cache, 4096, 512, false));
    for (i, want) in alone.iter().enumerate() {
        assert_eq!(
            &done[&i].generation.tokens, want,
            "prefix caching off, request {i}"
        );
    }
}

/// At the end of a request the blocks it held equal kv-size's paged figure for its tokens
/// (full layers every block, sliding layers the blocks of the next token's window), for every
/// runtime dtype and several block sizes; --swa-full holds the full cache's bytes.
#[test]
fn hybrid_held_bytes_equal_kv_size() {
    let (_dir, m) = model();
    let prompt = Rng::new(9).tokens(37);
    for dtype in nanollm::kv::codec::RUNTIME_DTYPES {
        for bs in [1usize, 5, 16, 64] {
            for swa_full in [false, true] {
                let cache = CacheConfig {
                    dtype,
                    block_size: bs,
                    swa_full,
                    evict: None,
                };
                let kv = alone(&m, &request(&prompt, 30, cache)).stats.kv_cache;
                assert_eq!(kv.blocks_leaked, 0);
                assert_eq!(
                    kv.bytes_held, kv.bytes_estimated_paged,
                    "{dtype:?} bs {bs} swa_full {swa_full}: held vs kv-size at {} tokens",
                    kv.tokens
                );
                // The sliding layers give a block back once the next token's window starts
                // past it.
                let sliding_saves = (kv.tokens + 1).saturating_sub(W) / bs > 0 && !swa_full;
                assert_eq!(
                    kv.bytes_held < kv.bytes_full_cache,
                    sliding_saves,
                    "{dtype:?} bs {bs} swa_full {swa_full}"
                );
                assert!(kv.bytes_held <= kv.bytes_full_cache);
            }
        }
    }
}

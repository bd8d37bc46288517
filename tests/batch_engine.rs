//! The batched engine on the default model: batched == alone, chunked == one-shot prefill,
//! prefix-cache hit == miss, preemption keeps outputs — bit for bit, greedy — and no block
//! leaks. The oracle is the one-request decode loop (`engine::generate`), which never batches,
//! never chunks and never shares blocks.
mod common;
use nanollm::engine::llm_engine::{EngineConfig, Finished, LlmEngine, SchedulerConfig};
use nanollm::engine::{CacheConfig, Request};
use nanollm::kv::KvDtype;
use nanollm::model::Loaded;
use std::collections::BTreeMap;

/// A shared opening (so the prefix cache has something to share: 2+ blocks of 16 tokens)
/// followed by different questions of different lengths.
const SYSTEM: &str = "You are a careful assistant. Answer in one short paragraph, plainly, \
without lists, and say when you are not sure about a fact. Keep every answer under \
eighty words, and never repeat the question back to the user.\n\n";
const QUESTIONS: [&str; 8] = [
    "What is the capital of France?",
    "Why is the sky blue?",
    "Write a haiku about the sea at night, with the moon.",
    "How many legs does a spider have?",
    "Explain what a KV cache is in a large language model, as if to a student who knows \
     linear algebra but has never seen a transformer.",
    "Name three primary colors.",
    "What does a compiler do?",
    "Tell me a very short story about a fisherman who",
];

/// Run `reqs` through one engine; request i arrives before step `arrive[i]`.
fn batched<'m>(
    m: &'m Loaded,
    reqs: &[Request],
    arrive: &[usize],
    config: EngineConfig,
) -> (BTreeMap<usize, Finished>, LlmEngine<'m>) {
    let mut eng = LlmEngine::new(&m.decoder, &m.tokenizer, config).expect("engine");
    let mut done = BTreeMap::new();
    let mut ids = BTreeMap::new();
    let mut step = 0;
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
    assert_eq!(eng.num_unfinished(), 0);
    assert_eq!(eng.pool().num_used_blocks(), 0, "blocks leaked");
    (done, eng)
}

fn config(cache: CacheConfig, blocks: usize, budget: usize, prefix: bool) -> EngineConfig {
    EngineConfig {
        cache,
        num_blocks: blocks,
        max_model_len: 2048,
        offload: None,
        speculative: None,
        scheduler: SchedulerConfig {
            max_num_seqs: 8,
            max_num_batched_tokens: budget,
            enable_prefix_caching: prefix,
        },
    }
}

/// Eight prompts of different lengths arriving at different steps, prefilled in chunks of
/// 24 tokens next to decoding sequences, sharing their opening through the prefix cache:
/// each one's greedy tokens equal its tokens when run alone: f16 in blocks of 16, and the
/// 4-bit caches (q4_0 in blocks of 16, the rotated iq4_nlr in blocks of 7).
#[test]
fn batched_chunked_and_prefix_cached_equal_alone() {
    let m = common::model();
    let four_bit = |dtype, block_size| CacheConfig {
        dtype,
        block_size,
        swa_full: false,
        evict: None,
    };
    for cache in [
        CacheConfig::default(),
        four_bit(KvDtype::Q4_0, 16),
        four_bit(KvDtype::Iq4NlR, 7),
    ] {
        let reqs: Vec<Request> = QUESTIONS
            .iter()
            .map(|q| common::greedy_request(m, &format!("{SYSTEM}{q}"), 20, cache))
            .collect();
        let arrive = [0, 0, 1, 3, 3, 7, 12, 20];
        let (done, eng) = batched(m, &reqs, &arrive, config(cache, 4096, 24, true));
        for (i, r) in reqs.iter().enumerate() {
            assert_eq!(
                done[&i].generation.tokens,
                common::alone(m, r),
                "{cache:?} request {i}"
            );
            assert_eq!(done[&i].generation.tokens.len(), 20);
        }
        let (queries, hits) = eng.prefix_cache_counters();
        assert!(hits > 0 && hits < queries, "hits {hits} of {queries}");
        assert!(
            eng.steps
                .iter()
                .any(|s| s.batch_size >= 4 && s.decode_seqs >= 1 && s.prefill_tokens > 0),
            "no step mixed decoding with a prefill chunk"
        );
    }
}

/// A server's engine keeps no per-step record (it would grow with uptime, #43): with
/// `keep_steps(false)` the steps list stays empty through a run, and the outputs are the same.
#[test]
fn an_engine_without_step_records_keeps_none() {
    let m = common::model();
    let cache = CacheConfig::default();
    let reqs: Vec<Request> = QUESTIONS[..3]
        .iter()
        .map(|q| common::greedy_request(m, &format!("{SYSTEM}{q}"), 8, cache))
        .collect();
    let (kept, with) = batched(m, &reqs, &[0, 0, 2], config(cache, 4096, 512, true));
    assert!(!with.steps.is_empty());
    let mut eng =
        LlmEngine::new(&m.decoder, &m.tokenizer, config(cache, 4096, 512, true)).expect("engine");
    eng.keep_steps(false);
    let ids: Vec<usize> = reqs
        .iter()
        .map(|r| eng.add_request(r.clone()).expect("add"))
        .collect();
    let mut done = BTreeMap::new();
    for _ in 0..1000 {
        for f in eng.step(false).expect("step").finished {
            done.insert(f.seq_id, f);
        }
        if eng.num_unfinished() == 0 {
            break;
        }
    }
    assert!(eng.steps.is_empty(), "{} steps kept", eng.steps.len());
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            done[id].generation.tokens, kept[&i].generation.tokens,
            "request {i}"
        );
    }
}

/// A pool too small for all eight at once: sequences are preempted and recomputed, and every
/// output is still its output alone (for q8_0 and block size 7 too).
#[test]
fn preemption_keeps_outputs() {
    let m = common::model();
    for cache in [
        CacheConfig::default(),
        CacheConfig {
            dtype: KvDtype::Q8_0,
            block_size: 7,
            swa_full: false,
            evict: None,
        },
    ] {
        let reqs: Vec<Request> = QUESTIONS[..6]
            .iter()
            .map(|q| common::greedy_request(m, &format!("{SYSTEM}{q}"), 24, cache))
            .collect();
        let most = reqs
            .iter()
            .map(|r| r.prompt_ids.len() + 24)
            .max()
            .unwrap_or(0);
        // Room for about two and a half of the longest sequences.
        let blocks = (5 * most / 2).div_ceil(cache.block_size);
        let mut cfg = config(cache, blocks, 512, true);
        cfg.max_model_len = most;
        let (done, eng) = batched(m, &reqs, &[0; 6], cfg);
        assert!(eng.preemptions() > 0, "the pool was not tight enough");
        for (i, r) in reqs.iter().enumerate() {
            assert_eq!(
                done[&i].generation.tokens,
                common::alone(m, r),
                "{cache:?} request {i}"
            );
        }
    }
}

/// Prompts that share no block, in a pool too small for all of them: after a preemption a
/// sequence's recompute finds its own freed blocks still cached, which is not a prefix-cache
/// hit for the request. `cached_prompt_tokens` counts the first admission only, as vLLM
/// records `num_cached_tokens` once: here 0 for every request.
#[test]
fn a_recompute_after_preemption_is_not_a_cached_prompt() {
    let m = common::model();
    let cache = CacheConfig::default();
    // Each prompt opens with its own question, so no two share their first block.
    let reqs: Vec<Request> = QUESTIONS[..4]
        .iter()
        .map(|q| common::greedy_request(m, &format!("{q} {q} Answer:"), 70, cache))
        .collect();
    let most = reqs
        .iter()
        .map(|r| r.prompt_ids.len() + 70)
        .max()
        .unwrap_or(0);
    // Room for the four prompts (16, 14, 30 and 18 tokens: 6 blocks of 16) and a little
    // decoding: preemptions follow, and the recomputes find their blocks still cached.
    let blocks = 8;
    let mut cfg = config(cache, blocks, 512, true);
    cfg.max_model_len = most;
    let (done, eng) = batched(m, &reqs, &[0; 4], cfg);
    assert!(eng.preemptions() > 0, "the pool was not tight enough");
    assert!(
        done.values().any(|f| f.preemptions > 0),
        "no request was recomputed"
    );
    for (i, f) in &done {
        assert_eq!(f.cached_prompt_tokens, 0, "request {i}");
    }
    // The engine's counters likewise: one query per request (its prompt's tokens), no hit —
    // before the fix, every readmission counted its lookup again, hits included (#43).
    let prompts: u64 = reqs.iter().map(|r| r.prompt_ids.len() as u64).sum();
    assert_eq!(eng.prefix_cache_counters(), (prompts, 0));

    // With prefix caching off, nothing is looked up, so nothing is counted.
    let mut cfg = config(cache, blocks, 512, false);
    cfg.max_model_len = most;
    let (_, eng) = batched(m, &reqs, &[0; 4], cfg);
    assert!(eng.preemptions() > 0, "the pool was not tight enough");
    assert_eq!(eng.prefix_cache_counters(), (0, 0));
}

/// The same requests with the prefix cache on and off: identical tokens; on, the shared
/// blocks are hit, off, nothing is.
#[test]
fn prefix_cache_on_equals_off() {
    let m = common::model();
    let cache = CacheConfig::default();
    let reqs: Vec<Request> = QUESTIONS[..4]
        .iter()
        .map(|q| common::greedy_request(m, &format!("{SYSTEM}{q}"), 12, cache))
        .collect();
    // One after another, so later requests find the first one's blocks.
    let arrive = [0, 14, 28, 42];
    let (on, eng_on) = batched(m, &reqs, &arrive, config(cache, 4096, 512, true));
    let (off, eng_off) = batched(m, &reqs, &arrive, config(cache, 4096, 512, false));
    for i in 0..reqs.len() {
        assert_eq!(
            on[&i].generation.tokens, off[&i].generation.tokens,
            "request {i}"
        );
    }
    // Request 3 shares, with an earlier one, the longest common run of leading token ids.
    let common = |a: &[u32], b: &[u32]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let p3 = &reqs[3].prompt_ids;
    let shared = (0..3)
        .map(|i| common(&reqs[i].prompt_ids, p3))
        .max()
        .unwrap_or(0);
    assert!(shared >= 32, "the prompts share only {shared} tokens");
    assert_eq!(
        on[&3].cached_prompt_tokens,
        shared.min(p3.len() - 1) / 16 * 16
    );
    assert_eq!(eng_off.prefix_cache_counters().1, 0);
    assert!(eng_on.prefix_cache_counters().1 >= 3 * 16);
}

/// Bad engine settings and requests get one clear error each.
#[test]
fn bad_settings_and_requests_are_refused() {
    let m = common::model();
    let cache = CacheConfig::default();
    let err = |cfg| match LlmEngine::new(&m.decoder, &m.tokenizer, cfg) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    let mut c = config(cache, 4096, 64, true);
    c.scheduler.max_num_seqs = 0;
    assert!(err(c).contains("--max-num-seqs 0"));
    let c = config(cache, 10, 64, true);
    assert!(err(c).contains("raise --kv-mem"), "{}", err(c));
    let mut eng =
        LlmEngine::new(&m.decoder, &m.tokenizer, config(cache, 4096, 64, true)).expect("engine");
    let mut r = common::greedy_request(m, "hi", 4, cache);
    r.prompt_ids = vec![];
    assert!(eng.add_request(r.clone()).is_err());
    r.prompt_ids = vec![1; 2048];
    assert!(eng.add_request(r.clone()).is_err());
    r.prompt_ids = vec![u32::MAX];
    assert!(eng.add_request(r).is_err());
}

/// A prompt of exactly two blocks seen before: only the first block is shared (the last
/// prompt token must run to give logits, and only whole blocks are shared), and the output
/// is the same as the first time.
#[test]
fn a_prompt_ending_on_a_block_edge_shares_all_but_its_last_block() {
    let m = common::model();
    let cache = CacheConfig::default();
    let mut r = common::greedy_request(m, STORY_32, 10, cache);
    r.prompt_ids.truncate(32);
    assert_eq!(r.prompt_ids.len(), 32);
    let reqs = [r.clone(), r];
    let (done, eng) = batched(m, &reqs, &[0, 12], config(cache, 4096, 512, true));
    assert_eq!(done[&0].cached_prompt_tokens, 0);
    assert_eq!(done[&1].cached_prompt_tokens, 16);
    assert_eq!(done[&0].generation.tokens, done[&1].generation.tokens);
    assert_eq!(done[&1].generation.tokens, common::alone(m, &reqs[1]));
    assert_eq!(eng.prefix_cache_counters(), (64, 16));
}

const STORY_32: &str = "Once upon a time, in a small village by the sea, there lived an old \
fisherman who went out every morning before dawn and came back at night with his boat.";

/// `--prefill-kernel auto`: a prompt shorter than the threshold runs its prompt rows on the
/// quantized kernels (the same tokens as a quantized-only model), a longer one on the dense
/// GEMM (the same tokens as the dense model), and in one engine the two kinds never share
/// prefix blocks (their rows differ in the last bits): each output equals its run alone.
#[test]
fn auto_prefill_picks_by_prompt_length_and_keys_the_prefix_cache_by_it() {
    let mut auto =
        nanollm::model::source::load(&common::model_path(), &candle_core::Device::Cpu, true)
            .expect("load");
    auto.decoder.set_dense_prompt_min_tokens(40);
    let cache = CacheConfig::default();
    let long_text = format!("{SYSTEM}{}", QUESTIONS[4]);
    let long = common::greedy_request(&auto, &long_text, 12, cache);
    let mut short = long.clone();
    short.prompt_ids.truncate(36);
    assert!(long.prompt_ids.len() >= 40);
    assert_eq!(
        common::alone(&auto, &short),
        common::alone(common::quantized_model(), &short)
    );
    assert_eq!(
        common::alone(&auto, &long),
        common::alone(common::model(), &long)
    );
    // The short prompt first: its full blocks (class QuantizedPrompt) must not serve the
    // long prompt (class Prompt), though the tokens match.
    let reqs = [short.clone(), long.clone()];
    let (done, eng) = batched(&auto, &reqs, &[0, 20], config(cache, 4096, 512, true));
    assert_eq!(done[&1].cached_prompt_tokens, 0);
    assert_eq!(done[&0].generation.tokens, common::alone(&auto, &short));
    assert_eq!(done[&1].generation.tokens, common::alone(&auto, &long));
    assert_eq!(eng.prefix_cache_counters().1, 0);
}

/// With prefix caching off, a finished request's blocks go back to the free list and are
/// reused: 24 requests one after another materialize no more blocks than one needs (each
/// one's full prompt blocks were filed as cached and every request took fresh ones: ~1
/// block of resident memory per request). With caching on they are kept for reuse.
#[test]
fn without_prefix_caching_freed_blocks_are_reused() {
    let m = common::model();
    let cache = CacheConfig::default();
    let reqs: Vec<Request> = (0..24)
        .map(|i| {
            common::greedy_request(
                m,
                &format!("{} Request number {i}.", QUESTIONS[i % QUESTIONS.len()]),
                2,
                cache,
            )
        })
        .collect();
    let arrive: Vec<usize> = (0..reqs.len()).map(|i| i * 40).collect();
    let (_, eng) = batched(m, &reqs, &arrive, config(cache, 4096, 512, false));
    assert!(
        eng.pool().num_blocks() <= eng.peak_blocks_used,
        "{} materialized, peak {}",
        eng.pool().num_blocks(),
        eng.peak_blocks_used
    );
    assert_eq!(eng.pool().num_cached_free_blocks(), 0);
    let (_, eng) = batched(m, &reqs, &arrive, config(cache, 4096, 512, true));
    assert!(eng.pool().num_cached_free_blocks() > 0);
}

//! The batched engine: greedy k = 1 ..= 8 alone and batched with chunked prefill, seeded
//! sampling, stops, preemption and a small budget, serve's counters — the same tokens as
//! plain decoding, and after every step each sequence holds exactly the blocks its
//! committed tokens need (rejected drafts rolled back across block edges), 0 at the end.
use crate::common;
use crate::{requests, PASSAGE, PROMPTS};
use nanollm::engine::llm_engine::{EngineConfig, LlmEngine, SchedulerConfig};
use nanollm::engine::spec::{SpecStats, Speculative};
use nanollm::engine::{CacheConfig, Request, SamplingParams};
use nanollm::kv::KvDtype;
use nanollm::model::Loaded;
use std::collections::BTreeMap;

fn config(cache: CacheConfig, budget: usize) -> EngineConfig {
    EngineConfig {
        cache,
        num_blocks: 1024,
        max_model_len: 2048,
        offload: None,
        speculative: None,
        scheduler: SchedulerConfig {
            max_num_seqs: 8,
            max_num_batched_tokens: budget,
            enable_prefix_caching: true,
        },
    }
}

/// Run `reqs` (request i added before step `arrive[i]`) with `spec`; checks after every step
/// that each running sequence holds `ceil(computed / block_size)` blocks, and 0 at the end.
fn run(
    m: &Loaded,
    reqs: &[Request],
    arrive: &[usize],
    config: EngineConfig,
    spec: Option<Speculative>,
) -> (BTreeMap<usize, Vec<u32>>, SpecStats) {
    let config = EngineConfig {
        speculative: spec,
        ..config
    };
    run_with(m, None, reqs, arrive, config)
}

/// [`run`] on an engine of `config` with `draft` as its draft model (`--spec draft`); with
/// one, its pool must be empty at the end too.
pub(crate) fn run_with(
    m: &Loaded,
    draft: Option<&nanollm::model::Decoder>,
    reqs: &[Request],
    arrive: &[usize],
    config: EngineConfig,
) -> (BTreeMap<usize, Vec<u32>>, SpecStats) {
    let mut eng = LlmEngine::with_draft(&m.decoder, draft, &m.tokenizer, config).expect("engine");
    let bs = config.cache.block_size;
    let (mut done, mut ids, mut step) = (BTreeMap::new(), BTreeMap::new(), 0);
    while done.len() < reqs.len() {
        for (i, r) in reqs.iter().enumerate() {
            if arrive[i] == step {
                ids.insert(eng.add_request(r.clone()).expect("add"), i);
            }
        }
        for f in eng.step(false).expect("step").finished {
            assert_eq!(
                f.generation.tokens.len(),
                reqs[ids[&f.seq_id]].max_new_tokens
            );
            done.insert(ids[&f.seq_id], f.generation.tokens);
        }
        for (id, computed, held) in eng.blocks_held() {
            assert_eq!(
                held,
                vec![computed.div_ceil(bs)],
                "seq {id} after step {step}"
            );
        }
        step += 1;
        assert!(step < 10_000, "the engine does not finish");
    }
    assert_eq!(eng.pool().num_used_blocks(), 0, "blocks leaked");
    if let Some((used, _)) = eng.draft_blocks() {
        assert_eq!(used, 0, "draft blocks leaked");
    }
    (done, eng.spec_stats().clone())
}

#[test]
fn greedy_speculative_equals_plain_for_k_1_to_8() {
    let m = common::model();
    // Blocks of 5: a verify step of up to 9 rows crosses block edges, so rollbacks free
    // whole blocks and cut partial ones.
    let cache = CacheConfig {
        dtype: KvDtype::F16,
        block_size: 5,
        swa_full: false,
        evict: None,
    };
    let reqs = requests(m, 40, SamplingParams::greedy(), cache);
    let want: Vec<Vec<u32>> = reqs.iter().map(|r| common::alone(m, r)).collect();
    let mut total = SpecStats::default();
    for k in 1..=8 {
        let mut spec = Speculative::ngram(k, 1, 3).expect("spec");
        // Odd k: every draft verified; even k: the turn-down rule chooses (the same tokens).
        spec.force = k % 2 == 1;
        // Alone: one request per engine.
        for (i, r) in reqs.iter().enumerate() {
            let (got, _) = run(
                m,
                std::slice::from_ref(r),
                &[0],
                config(cache, 64),
                Some(spec),
            );
            assert_eq!(got[&0], want[i], "k {k}, prompt {i} alone");
        }
        // Batched, arriving at different steps, prompts prefilled in chunks of 24 next to
        // verify steps.
        let (got, stats) = run(m, &reqs, &[0, 0, 3, 7], config(cache, 24), Some(spec));
        for (i, w) in want.iter().enumerate() {
            assert_eq!(&got[&i], w, "k {k}, prompt {i} batched");
        }
        assert!(stats.num_draft_tokens_per_pos.len() <= k);
        total.add(&stats);
    }
    // Not vacuous: drafts were both kept and rolled back.
    assert!(total.num_accepted_tokens > 0, "{total:?}");
    assert!(
        total.num_accepted_tokens < total.num_draft_tokens,
        "{total:?}"
    );
}

#[test]
fn seeded_sampling_with_speculation_equals_plain() {
    let m = common::model();
    let cache = CacheConfig {
        dtype: KvDtype::F16,
        block_size: 16,
        swa_full: false,
        evict: None,
    };
    let sampling = SamplingParams {
        temperature: 0.7,
        top_k: Some(40),
        top_p: Some(0.95),
        seed: 58,
        repeat_penalty: 1.1,
        repeat_last_n: 64,
    };
    let reqs = requests(m, 40, sampling, cache);
    let arrive = [0, 1, 2, 3];
    let (plain, none) = run(m, &reqs, &arrive, config(cache, 64), None);
    assert_eq!(none, SpecStats::default());
    let spec = Speculative::ngram(4, 1, 3).expect("spec");
    let (fast, stats) = run(m, &reqs, &arrive, config(cache, 64), Some(spec));
    assert_eq!(plain, fast);
    assert!(stats.num_accepted_tokens > 0, "{stats:?}");
}

/// Stop conditions and a tight pool with speculation on: EOS honoured, a stop string, and
/// a pool too small for every sequence at once (preemption and recompute), with the step's
/// budget below what every sequence's drafts would take: the same tokens and text as plain
/// decoding under the same settings.
#[test]
fn stops_preemption_and_a_small_budget_equal_plain() {
    let m = common::model();
    let cache = CacheConfig {
        dtype: KvDtype::F16,
        block_size: 16,
        swa_full: false,
        evict: None,
    };
    let mut reqs = requests(m, 200, SamplingParams::greedy(), cache);
    for (i, r) in reqs.iter_mut().enumerate() {
        r.ignore_eos = false;
        if i == 1 {
            r.stop_strings = vec!["Paris".to_string()];
        }
    }
    let tight = EngineConfig {
        num_blocks: 21,
        max_model_len: 320,
        ..config(cache, 12)
    };
    let texts = |spec: Option<Speculative>| {
        let config = EngineConfig {
            speculative: spec,
            ..tight
        };
        let mut eng = LlmEngine::new(&m.decoder, &m.tokenizer, config).expect("engine");
        let mut ids = BTreeMap::new();
        for (i, r) in reqs.iter().enumerate() {
            ids.insert(eng.add_request(r.clone()).expect("add"), i);
        }
        let mut done = BTreeMap::new();
        for _ in 0..10_000 {
            if eng.num_unfinished() == 0 {
                break;
            }
            for f in eng.step(false).expect("step").finished {
                let g = f.generation;
                done.insert(ids[&f.seq_id], (g.tokens, g.text, g.finish_reason));
            }
        }
        assert_eq!(eng.pool().num_used_blocks(), 0, "blocks leaked");
        (done, eng.preemptions(), eng.spec_stats().clone())
    };
    let (plain, _, _) = texts(None);
    let mut spec = Speculative::ngram(8, 1, 3).expect("spec");
    spec.force = true;
    let (fast, preempted, stats) = texts(Some(spec));
    assert_eq!(plain, fast);
    assert!(preempted > 0, "the pool was not tight");
    assert!(stats.num_accepted_tokens > 0, "{stats:?}");
}

/// `serve --spec ngram`: a copying request's tokens equal plain `generate`'s, `/metrics`
/// has the speculative counters, and one inter-token gap per step (not per token): every
/// token but the first came from a step that either added a gap or was an accepted draft.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_counts_drafts_and_one_gap_per_step() {
    use common::server::Server;
    let s = Server::start(&["--spec", "ngram", "--spec-tokens", "8"]);
    let prompt = PROMPTS[0].replace("{P}", PASSAGE);
    let body = serde_json::json!({"prompt": prompt, "max_tokens": 48, "ignore_eos": true,
        "temperature": 0});
    let r: serde_json::Value = reqwest::Client::new()
        .post(s.url("/v1/completions"))
        .json(&body)
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("JSON");
    let m = common::model();
    let req = common::greedy_request(
        m,
        &prompt,
        48,
        CacheConfig {
            dtype: KvDtype::F16,
            block_size: 16,
            swa_full: false,
            evict: None,
        },
    );
    let want = m.tokenizer.decode(&common::alone(m, &req)).expect("decode");
    assert_eq!(r["choices"][0]["text"], want.as_str());
    let tokens = s.metric("nanollm_generation_tokens_total").await;
    let accepted = s
        .metric("nanollm_spec_decode_num_accepted_tokens_total")
        .await;
    let gaps = s.metric("nanollm_inter_token_latency_seconds_count").await;
    assert_eq!(tokens, 48.0);
    assert!(accepted > 0.0, "no draft accepted");
    assert_eq!(gaps + accepted + 1.0, tokens);
    assert!(s.metric("nanollm_spec_decode_num_drafts_total").await > 0.0);
}

#[test]
fn bad_settings_are_refused() {
    for (k, min, max, want) in [
        (0, 1, 3, "--spec-tokens 0: must be 1 to 16"),
        (17, 1, 3, "--spec-tokens 17: must be 1 to 16"),
        (4, 0, 3, "the shortest match must be at least 1"),
        (4, 3, 2, "at most the longest"),
        (4, 1, 65, "--spec-ngram-max 65: at most 64 tokens"),
    ] {
        let e = Speculative::ngram(k, min, max).expect_err("refused");
        assert!(e.to_string().contains(want), "{e}");
    }
}

/// Gemma 3 (Q4_K_M, sliding layers of 512 tokens): greedy speculative == plain in the
/// batched engine, with a prompt long enough that the sliding groups give blocks back
/// while drafts are verified and rolled back; every block back at the end.
#[test]
fn gemma3_batched_speculative_equals_plain() {
    let m = common::gemma3();
    let cache = CacheConfig::default();
    let long: String = (0..12).map(|_| PASSAGE).collect::<Vec<_>>().join(" ");
    let reqs = [
        common::greedy_request(m, &format!("Repeat this text: {long}\nRepeat:"), 48, cache),
        common::greedy_request(m, &PROMPTS[0].replace("{P}", PASSAGE), 32, cache),
        common::greedy_request(m, PROMPTS[1], 24, cache),
    ];
    let want: Vec<Vec<u32>> = reqs.iter().map(|r| common::alone(m, r)).collect();
    for k in [2, 5, 8] {
        let mut spec = Speculative::ngram(k, 1, 3).expect("spec");
        spec.force = k != 5;
        let config = EngineConfig {
            speculative: Some(spec),
            ..config(cache, 64)
        };
        let mut eng = LlmEngine::new(&m.decoder, &m.tokenizer, config).expect("engine");
        let mut ids = BTreeMap::new();
        for (i, r) in reqs.iter().enumerate() {
            ids.insert(eng.add_request(r.clone()).expect("add"), i);
        }
        let mut got = BTreeMap::new();
        for _ in 0..10_000 {
            if eng.num_unfinished() == 0 {
                break;
            }
            for f in eng.step(false).expect("step").finished {
                got.insert(ids[&f.seq_id], f.generation.tokens);
            }
        }
        for (i, w) in want.iter().enumerate() {
            assert_eq!(&got[&i], w, "k {k}, prompt {i}");
        }
        assert_eq!(eng.pool().num_used_blocks(), 0, "blocks leaked");
        assert!(eng.spec_stats().num_accepted_tokens > 0);
    }
}

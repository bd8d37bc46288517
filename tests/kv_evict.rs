//! Token eviction (`--kv-evict`) on the default model: a budget above the length evicts
//! nothing (bit for bit), each policy's run in the batched engine — arriving at different
//! steps, its prompt chunked, preempted and recomputed — gives the tokens of the one-request
//! loop (`engine::generate`, which evicts through its own path), the blocks held after an
//! eviction are `kv-size`'s estimate for the rows kept, and every block goes back.
mod common;
use nanollm::engine::llm_engine::{EngineConfig, LlmEngine, SchedulerConfig};
use nanollm::engine::{CacheConfig, Request};
use nanollm::kv::evict::EvictConfig;
use nanollm::model::Loaded;
use std::collections::BTreeMap;

const PROMPTS: [&str; 4] = [
    "Explain what a KV cache is in a large language model, as if to a student who knows \
     linear algebra but has never seen a transformer. Mention keys, values and queries.",
    "Write a long story about a dragon who lives in a castle on a mountain and befriends \
     a small village.",
    "List the planets of the solar system in order from the sun, with one fact about each \
     of them, and say which ones have rings.",
    "Why is the sky blue? Answer in detail, with the physics of Rayleigh scattering.",
];

/// One flag per policy, budgets well below the prompts (so every run evicts at the prompt's
/// end and during decode).
const POLICIES: [&str; 6] = [
    "streaming:budget=24,sinks=4,every=16",
    "snapkv:budget=24,window=8,every=16",
    "h2o:budget=24,every=16",
    "tova:budget=24,every=16",
    "knorm:budget=50%,every=16",
    "random:budget=24,every=16,seed=7",
];

fn cache(flag: Option<&str>) -> CacheConfig {
    CacheConfig::default()
        .with_evict(flag)
        .expect("a valid --kv-evict")
}

fn requests(m: &Loaded, cache: CacheConfig, n: usize) -> Vec<Request> {
    PROMPTS
        .iter()
        .map(|p| common::greedy_request(m, p, n, cache))
        .collect()
}

fn generation(m: &Loaded, req: &Request) -> nanollm::engine::Generation {
    let stop = std::sync::atomic::AtomicBool::new(false);
    nanollm::engine::generate(&m.decoder, &m.tokenizer, req, &stop, |_| Ok(())).expect("generate")
}

/// Run `reqs` through one engine, request i arriving before step `arrive[i]`; every block
/// is back at the end.
fn batched(
    m: &Loaded,
    reqs: &[Request],
    arrive: &[usize],
    config: EngineConfig,
) -> (Vec<Vec<u32>>, u64) {
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
            done.insert(ids[&f.seq_id], f.generation.tokens);
        }
        step += 1;
        assert!(step < 10_000, "the engine does not finish");
    }
    assert_eq!(eng.pool().num_used_blocks(), 0, "blocks leaked");
    (done.into_values().collect(), eng.preemptions())
}

fn config(cache: CacheConfig, blocks: usize, chunk: usize) -> EngineConfig {
    EngineConfig {
        cache,
        num_blocks: blocks,
        max_model_len: 2048,
        offload: None,
        speculative: None,
        scheduler: SchedulerConfig {
            max_num_seqs: 8,
            max_num_batched_tokens: chunk,
            enable_prefix_caching: true,
        },
    }
}

/// A budget at or above every sequence's length keeps every row: the same tokens as no
/// eviction, bit for bit, for every policy, and nothing is counted as evicted.
#[test]
fn a_budget_above_the_length_evicts_nothing() {
    let m = common::model();
    let plain = requests(m, cache(None), 24);
    for policy in ["streaming", "snapkv", "h2o", "tova", "knorm", "random"] {
        let flag = format!("{policy}:budget=4096");
        let reqs = requests(m, cache(Some(&flag)), 24);
        for (r, p) in reqs.iter().zip(&plain) {
            let g = generation(m, r);
            assert_eq!(g.tokens, common::alone(m, p), "{flag}");
            assert_eq!(g.stats.kv_cache.tokens_evicted, 0, "{flag}");
        }
    }
}

/// Every policy: four requests arriving at different steps, prompts prefilled in chunks of
/// 20 tokens beside decoding sequences, give each request's tokens alone; with a pool too
/// small for all four, preempted sequences replay their evictions on recompute and still do.
/// Each run really evicted (its tokens alone differ from the full cache's for at least one
/// request, and rows were counted as evicted).
#[test]
fn batched_chunked_and_preempted_equal_alone_for_every_policy() {
    let m = common::model();
    let full: Vec<Vec<u32>> = requests(m, cache(None), 24)
        .iter()
        .map(|r| common::alone(m, r))
        .collect();
    for flag in POLICIES {
        let c = cache(Some(flag));
        let reqs = requests(m, c, 24);
        let alone: Vec<nanollm::engine::Generation> =
            reqs.iter().map(|r| generation(m, r)).collect();
        assert!(
            alone.iter().all(|g| g.stats.kv_cache.tokens_evicted > 0),
            "{flag}: nothing evicted"
        );
        assert!(
            alone.iter().zip(&full).any(|(g, f)| &g.tokens != f),
            "{flag}: every output equals the full cache's"
        );
        let alone: Vec<Vec<u32>> = alone.into_iter().map(|g| g.tokens).collect();
        let (tokens, _) = batched(m, &reqs, &[0, 1, 1, 5], config(c, 4096, 20));
        assert_eq!(tokens, alone, "{flag}: batched and chunked");
        // Between evictions a sequence holds up to 40 rows (3 blocks): 6 blocks hold two.
        let most = reqs
            .iter()
            .map(|r| r.prompt_ids.len() + 24)
            .max()
            .unwrap_or(0);
        let mut tight = config(c, 6, 512);
        tight.max_model_len = most;
        let (tokens, preemptions) = batched(m, &reqs, &[0; 4], tight);
        assert!(preemptions > 0, "{flag}: the pool was not tight enough");
        assert_eq!(tokens, alone, "{flag}: preempted");
    }
}

/// After evictions the blocks held are `kv-size`'s paged estimate for the rows kept (the
/// budget plus the rows since the last eviction; the last token sampled is not in the
/// cache yet), and the measured bytes of rows equal the
/// unpaged estimate.
#[test]
fn held_bytes_equal_the_estimate_for_the_rows_kept() {
    let m = common::model();
    for (flag, n, rows) in [
        ("streaming:budget=24,sinks=4,every=8", 24, 24 + 7usize),
        ("streaming:budget=24,sinks=4,every=8", 25, 24),
        ("knorm:budget=20,every=16", 21, 20 + 4),
    ] {
        let r = &requests(m, cache(Some(flag)), n)[0];
        let g = generation(m, r);
        let kv = &g.stats.kv_cache;
        // The last token sampled is not yet in the cache.
        let positions = r.prompt_ids.len() + n - 1;
        assert_eq!(kv.tokens, positions, "{flag}");
        assert_eq!(kv.tokens - kv.tokens_evicted, rows, "{flag} n {n}");
        assert_eq!(kv.blocks, rows.div_ceil(16), "{flag}");
        assert_eq!(kv.bytes_held, kv.bytes_estimated_paged, "{flag}");
        assert_eq!(kv.bytes_used, kv.bytes_estimated, "{flag}");
        assert_eq!(kv.blocks_leaked, 0);
    }
}

/// Bad `--kv-evict` values and combinations get one line naming the flag.
#[test]
fn bad_eviction_flags_are_refused_with_one_line() {
    assert!(EvictConfig::parse("lru:budget=4").is_err());
    for (args, says) in [
        (vec!["--kv-evict", "lru:budget=8"], "unknown policy \"lru\""),
        (
            vec!["--kv-evict", "streaming:budget=2,sinks=4"],
            "must be above sinks=4",
        ),
        (vec!["--kv-evict", "knorm"], "no budget"),
        (
            vec!["--kv-evict", "knorm:budget=8", "--swa-full"],
            "--swa-full",
        ),
        (
            vec!["--kv-evict", "knorm:budget=8", "--decode", "naive"],
            "--decode naive",
        ),
        (
            vec!["--kv-evict", "knorm:budget=8", "--spec", "ngram"],
            "speculative",
        ),
    ] {
        let model = common::model_path();
        let mut all = vec![
            "generate",
            "-m",
            model.to_str().expect("path"),
            "hi",
            "-n",
            "2",
        ];
        all.extend(args);
        common::fails_with(&all, says);
    }
}

/// `bench --kv-quality` on a small plan: the reference row first with KLD 0, q8_0 with a
/// KLD above 0 and fewer bytes, streaming at 50% of the prompt holding fewer bytes still;
/// the table, the SVG (one point per row and panel, the front ringed) and the JSON agree.
#[test]
fn bench_kv_quality_scores_each_configuration_against_the_full_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (svg, json) = (dir.path().join("q.svg"), dir.path().join("q.json"));
    let out = common::run_ok(&[
        "bench",
        "--kv-quality",
        "--kv-quality-configs",
        "q8_0;f16+streaming:budget=50%,sinks=4",
        "--passkey-lengths",
        "2",
        "--runs",
        "1",
        "--prompt-len",
        "96",
        "--gen-len",
        "24",
        "--plot",
        svg.to_str().expect("path"),
        "--json",
        json.to_str().expect("path"),
    ]);
    let table = String::from_utf8_lossy(&out);
    assert!(
        table.contains("q8_0") && table.contains("f16 + streaming:budget=50%,sinks=4"),
        "{table}"
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("valid JSON");
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3);
    let f = |i: usize, k: &str| rows[i][k].as_f64().expect(k);
    assert_eq!(f(0, "kld_mean"), 0.0);
    assert!(f(1, "kld_mean") > 0.0 && f(2, "kld_mean") > 0.0);
    assert!(f(1, "bytes_held") < f(0, "bytes_held"));
    assert!(f(2, "bytes_held") < f(0, "bytes_held"));
    assert_eq!(rows[0]["passkey"].as_array().map(Vec::len), Some(3));
    let svg = std::fs::read_to_string(&svg).expect("svg");
    assert!(svg.starts_with("<svg"));
    assert_eq!(
        svg.matches("<circle cx").count() - svg.matches("r=\"7\"").count(),
        2 * 3 + 7
    );
    assert!(rows[0]["pareto"].as_bool().expect("pareto"));
}

/// Bad `--kv-quality-configs` entries get one line naming the flag.
#[test]
fn bad_kv_quality_configs_are_refused_with_one_line() {
    for (configs, says) in [
        ("q9", "--kv-quality-configs"),
        ("f16+lru:budget=4", "unknown policy \"lru\""),
        (
            "f16+lru:budget=4",
            "--kv-quality-configs \"f16+lru:budget=4\"",
        ),
        (";;", "no configuration"),
        ("q8_0;q8_0", "listed twice"),
    ] {
        common::fails_with(
            &["bench", "--kv-quality", "--kv-quality-configs", configs],
            says,
        );
    }
    for (args, says) in [
        (vec!["--gen-len", "1"], "at least 2 continuation tokens"),
        (vec!["--prompt-len", "4000"], "the shipped text has"),
        (vec!["--kv-evict", "knorm:budget=8"], "--kv-evict"),
    ] {
        let mut all = vec!["bench", "--kv-quality"];
        all.extend(args);
        common::fails_with(&all, says);
    }
}

/// `bench --kv-evict` runs kv-cache alone by default, refuses the modes that cannot evict
/// before any run, and conflicts with the sweeps that would ignore it; `run-batch` names
/// the eviction conflict, not the KV budget.
#[test]
fn bench_and_run_batch_refuse_what_cannot_evict_up_front() {
    let evict = ["--kv-evict", "knorm:budget=8"];
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"prompt\": \"hi\", \"max_tokens\": 4}\n").expect("input");
    let input = input.to_str().expect("path");
    for (args, says) in [
        (
            vec!["bench", "--compare", "naive,kv-cache,spec"],
            "--compare naive",
        ),
        (
            vec!["bench", "--compare", "kv-cache,swa-full"],
            "--compare swa-full",
        ),
        (vec!["bench", "--spec-synth-rates", "0.5"], "--kv-evict"),
        (
            vec!["run-batch", "-i", input, "--spec", "ngram"],
            "speculative",
        ),
    ] {
        let mut all = args;
        all.extend(evict);
        common::fails_with(&all, says);
    }
    let out = common::run_ok(&[
        "bench",
        "--kv-evict",
        "streaming:budget=16",
        "--prompt-len",
        "32",
        "--gen-len",
        "4",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--json",
        "-",
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("json");
    let text = doc.to_string();
    assert!(
        text.contains("kv-cache") && !text.contains("\"naive\""),
        "{text}"
    );
}

/// A pool of 5 blocks (80 tokens) runs a 400-token sequence under streaming eviction (the
/// engine checks the rows a sequence holds, not its length) without a preemption, and
/// gives the one-request loop's tokens; without eviction the same engine is refused.
#[test]
fn streaming_runs_past_what_the_pool_holds() {
    let m = common::model();
    let c = cache(Some("streaming:budget=40,sinks=4,every=16"));
    let mut cfg = config(c, 5, 512);
    cfg.max_model_len = 1024;
    let req = common::greedy_request(m, PROMPTS[1], 400, c);
    let (tokens, preemptions) = batched(m, std::slice::from_ref(&req), &[0], cfg);
    assert_eq!((tokens[0].len(), preemptions), (400, 0));
    assert_eq!(tokens[0], common::alone(m, &req));
    cfg.cache = cache(None);
    let refused = LlmEngine::new(&m.decoder, &m.tokenizer, cfg)
        .err()
        .map(|e| format!("{e:#}"));
    assert!(refused.is_some_and(|e| e.contains("raise --kv-mem")));
}

/// A request asking for speculative decoding (serve's per-request field) is refused by an
/// evicting engine, naming both.
#[test]
fn an_evicting_engine_refuses_a_speculative_request() {
    use nanollm::engine::spec::{SpecChoice, Speculative};
    let m = common::model();
    let c = cache(Some("streaming:budget=16"));
    let eng = LlmEngine::new(&m.decoder, &m.tokenizer, config(c, 64, 512)).expect("engine");
    let mut req = common::greedy_request(m, "hi", 4, c);
    req.speculative = SpecChoice::On(Speculative::ngram(4, 1, 3).expect("spec"));
    let e = eng
        .validate(req, false)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("--kv-evict") && e.contains("speculative"), "{e}");
}

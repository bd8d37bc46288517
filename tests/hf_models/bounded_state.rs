//! Issue 43: nothing the engine keeps grows with the steps it ran or the requests it served.
//! 10^5 engine steps on the tiny Gemma 3 (hybrid KV cache: sliding groups give blocks back
//! every step) with a tight pool (preemption), chunked prefill, prefix caching over shared
//! openings, sampled and greedy requests, and clients that go away mid-request, as `serve`
//! runs it (`keep_steps(false)`): every collection stays under a cap that depends on the
//! configuration only, checked every 1,000 steps; at the end no block is held.
use crate::ours;
use crate::tiny::{self, Arch, Rng, Spec};
use nanollm::engine::llm_engine::{EngineConfig, LlmEngine, SchedulerConfig};
use nanollm::engine::{CacheConfig, DecodeMode, Request, SamplingParams};

const STEPS: usize = 100_000;
const NUM_BLOCKS: usize = 40;
const MAX_NUM_SEQS: usize = 4;
/// Most requests the driver keeps queued beside the running ones (serve's
/// `--max-waiting-requests`).
const MAX_WAITING: usize = 4;
const MAX_MODEL_LEN: usize = 256;

#[test]
fn engine_state_stays_bounded_over_100k_steps() {
    // One compute thread: the tiny model's matrices are too small to split, and on two
    // shared cores the split costs ~6× the step (172 s against 26 s measured).
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("thread pool");
    pool.install(run);
}

fn run() {
    let dir = tempfile::tempdir().expect("tempdir");
    tiny::write_folder(dir.path(), &Spec::of(Arch::Gemma3), 11);
    let m = ours::load(dir.path(), None);
    let cache = CacheConfig::default();
    let config = EngineConfig {
        cache,
        num_blocks: NUM_BLOCKS,
        max_model_len: MAX_MODEL_LEN,
        offload: None,
        speculative: None,
        scheduler: SchedulerConfig {
            max_num_seqs: MAX_NUM_SEQS,
            max_num_batched_tokens: 48,
            enable_prefix_caching: true,
        },
    };
    let mut eng = LlmEngine::new(&m.decoder, &m.tokenizer, config).expect("engine");
    eng.keep_steps(false);
    let mut rng = Rng::new(5);
    let openings: Vec<Vec<u32>> = (0..3).map(|_| rng.tokens(40)).collect();
    let (mut added, mut finished, mut aborted, mut preempt_seen) = (0usize, 0usize, 0usize, 0u64);
    // (seq id, step at which its client goes away)
    let mut leaving: Vec<(usize, usize)> = Vec::new();
    let cap_tokens = (MAX_NUM_SEQS + MAX_WAITING) * (MAX_MODEL_LEN + MAX_MODEL_LEN / 16 + 1);
    let cap_records = (MAX_NUM_SEQS + MAX_WAITING) * 2 * MAX_MODEL_LEN;
    for step in 0..STEPS {
        while eng.num_unfinished() < MAX_NUM_SEQS + MAX_WAITING {
            let r = rng.next_u64();
            let mut prompt = openings[(r % 3) as usize].clone();
            prompt.truncate(8 + (r >> 8) as usize % 33);
            prompt.extend(rng.tokens(1 + (r >> 16) as usize % 60));
            let sampling = if r.is_multiple_of(3) {
                SamplingParams {
                    temperature: 0.9,
                    seed: r,
                    ..SamplingParams::greedy()
                }
            } else {
                SamplingParams::greedy()
            };
            let id = eng
                .add_request(Request {
                    prompt_ids: prompt,
                    max_new_tokens: 1 + (r >> 24) as usize % 48,
                    sampling,
                    mode: DecodeMode::KvCache,
                    cache,
                    stop_token_ids: Vec::new(),
                    stop_strings: Vec::new(),
                    ignore_eos: r.is_multiple_of(2),
                    speculative: Default::default(),
                })
                .expect("add");
            if r.is_multiple_of(7) {
                leaving.push((id, step + 1 + (r >> 32) as usize % 20));
            }
            added += 1;
        }
        let out = eng.step(false).expect("step");
        finished += out.finished.len();
        let mut gone = Vec::new();
        leaving.retain(|&(id, at)| {
            let now = at <= step;
            if now {
                gone.push(id);
            }
            !now
        });
        for id in gone {
            if eng.abort(id).expect("abort").is_some() {
                aborted += 1;
                finished += 1;
            }
        }
        if step % 1000 == 999 {
            let s = eng.state_sizes();
            assert!(
                s.waiting + s.running <= MAX_NUM_SEQS + MAX_WAITING,
                "step {step}: {s:?}"
            );
            assert!(s.running <= MAX_NUM_SEQS, "step {step}: {s:?}");
            assert_eq!(s.step_records, 0, "step {step}: steps are not kept");
            assert!(s.pool_index <= NUM_BLOCKS, "step {step}: {s:?}");
            assert!(s.sequence_tokens <= cap_tokens, "step {step}: {s:?}");
            assert!(s.sequence_records <= cap_records, "step {step}: {s:?}");
            assert!(eng.pool().num_used_blocks() <= NUM_BLOCKS);
            preempt_seen = eng.preemptions();
        }
    }
    for (id, _) in leaving {
        if eng.abort(id).expect("abort").is_some() {
            finished += 1;
        }
    }
    for _ in 0..10_000 {
        if eng.num_unfinished() == 0 {
            break;
        }
        finished += eng.step(false).expect("step").finished.len();
    }
    assert_eq!(eng.num_unfinished(), 0);
    assert_eq!(finished, added, "every request ended once");
    assert_eq!(eng.pool().num_used_blocks(), 0, "blocks leaked");
    assert!(eng.state_sizes().pool_index <= NUM_BLOCKS);
    let (queries, hits) = eng.prefix_cache_counters();
    // The run exercised what can grow: many requests, preemption, prefix hits, aborts.
    assert!(added > 2000, "{added} requests");
    assert!(preempt_seen > 0 && hits > 0 && hits < queries && aborted > 100);
    eprintln!(
        "{STEPS} steps: {added} requests, {aborted} aborted, {preempt_seen} preemptions, prefix hits {hits} of {queries} tokens"
    );
}

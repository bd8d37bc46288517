//! The engine's snapshot (what `GET /v1/state` serves) and trace events against the engine
//! itself, after every step of a run with a shared prefix, chunked prefill, a pool too small
//! for every sequence (preemption) and a second wave that evicts cached blocks: the block
//! counts add up, every block-table entry points at a cell that names its sequence, reference
//! counts equal the tables naming a block, and the trace tells each request's life in order.
mod common;
use nanollm::engine::llm_engine::{EngineConfig, LlmEngine, SchedulerConfig};
use nanollm::engine::snapshot::{BlockState, EngineState, SeqState};
use nanollm::engine::trace::{RequestPhase, TraceEvent};
use nanollm::engine::{CacheConfig, DecodeMode, Request, SamplingParams};
use nanollm::model::Loaded;
use std::collections::BTreeMap;

const SYSTEM: &str = "You are a careful assistant. Answer in one short paragraph, plainly, \
without lists, and say when you are not sure about a fact. Keep every answer under \
eighty words, and never repeat the question back to the user.\n\n";

fn request(m: &Loaded, text: &str, n: usize) -> Request {
    Request {
        prompt_ids: m.tokenizer.encode(text).expect("encode"),
        max_new_tokens: n,
        sampling: SamplingParams::greedy(),
        mode: DecodeMode::KvCache,
        cache: CacheConfig::default(),
        stop_token_ids: Vec::new(),
        stop_strings: Vec::new(),
        ignore_eos: true,
        speculative: Default::default(),
    }
}

/// Every invariant of one snapshot against the engine it came from.
fn check(s: &EngineState, eng: &LlmEngine<'_>) {
    let p = &s.pool;
    let count = |st: BlockState| s.blocks.iter().filter(|b| b.state == st).count();
    assert_eq!(s.blocks.len(), p.materialized);
    assert_eq!(
        (p.free, p.used, p.shared, p.cached),
        (
            count(BlockState::Free),
            count(BlockState::Used),
            count(BlockState::Shared),
            count(BlockState::Cached)
        )
    );
    assert_eq!(p.free + p.used + p.shared + p.cached, p.materialized);
    assert!(p.materialized <= p.num_blocks);
    // The pool's own figures.
    let pool = eng.pool();
    assert_eq!(p.used + p.shared, pool.num_used_blocks());
    assert_eq!(p.cached, pool.num_cached_free_blocks());
    assert_eq!(
        p.free + p.cached + (p.num_blocks - p.materialized),
        pool.num_free_blocks()
    );
    assert_eq!(s.sequences.len(), eng.num_unfinished());
    // Per group: the counts add up to the pool's, tokens fit the blocks, and a full group
    // holds every computed token of each running sequence (shared ones once).
    let sum = |f: fn(&nanollm::engine::snapshot::GroupView) -> usize| {
        p.groups.iter().map(f).sum::<usize>()
    };
    assert_eq!(
        (sum(|g| g.used), sum(|g| g.shared), sum(|g| g.cached)),
        (p.used, p.shared, p.cached)
    );
    let computed: Vec<usize> = s.sequences.iter().map(|q| q.computed_tokens).collect();
    for g in &p.groups {
        assert_eq!(g.blocks, g.used + g.shared + g.cached, "{g:?}");
        assert!(g.tokens <= (g.used + g.shared) * p.block_size, "{g:?}");
        if g.window.is_none() {
            assert!(
                g.tokens <= computed.iter().sum::<usize>(),
                "{g:?} {computed:?}"
            );
            assert!(
                g.tokens >= computed.iter().copied().max().unwrap_or(0),
                "{g:?}"
            );
        }
    }
    // Block tables → cells.
    let mut naming: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for q in &s.sequences {
        if matches!(q.state, SeqState::Waiting | SeqState::Preempted) {
            assert!(q.block_table.is_empty(), "seq {} waits with blocks", q.id);
            continue;
        }
        assert_eq!(q.block_table.len(), p.groups.len());
        for (g, list) in q.block_table.iter().enumerate() {
            for (logical, b) in list.iter().enumerate() {
                let Some(b) = *b else { continue };
                let cell = &s.blocks[b as usize];
                assert_eq!(cell.id, b);
                assert!(
                    cell.seqs.contains(&q.id),
                    "block {b} in seq {}'s table does not name it: {cell:?}",
                    q.id
                );
                assert!(matches!(cell.state, BlockState::Used | BlockState::Shared));
                assert_eq!(cell.group, Some(g as u32));
                assert_eq!(cell.logical, Some(logical));
                naming.entry(b).or_default().push(q.id);
            }
        }
        if let Some([k, n]) = q.chunk {
            assert!(q.state == SeqState::Prefilling && k <= n, "{q:?}");
        }
    }
    for cell in &s.blocks {
        let names = naming.get(&cell.id).map_or(0, Vec::len);
        assert_eq!(cell.refs as usize, names, "block {}'s refs", cell.id);
        assert_eq!(cell.seqs.len(), names);
        assert_eq!(cell.state == BlockState::Shared, names > 1);
        if cell.state == BlockState::Cached {
            assert!(cell.in_prefix_cache && cell.group.is_some());
        }
    }
}

/// Run two waves of eight requests sharing an opening through an engine of `blocks` blocks;
/// check every snapshot; return the trace and the engine's totals.
fn run(m: &Loaded, blocks: usize) -> (Vec<TraceEvent>, u64, EngineState, usize) {
    let config = EngineConfig {
        cache: CacheConfig::default(),
        num_blocks: blocks,
        max_model_len: 256,
        offload: None,
        speculative: None,
        scheduler: SchedulerConfig {
            max_num_seqs: 8,
            max_num_batched_tokens: 48,
            enable_prefix_caching: true,
        },
    };
    let mut eng = LlmEngine::new(&m.decoder, &m.tokenizer, config).expect("engine");
    eng.record_trace(true);
    let mut trace = Vec::new();
    let mut shared_seen = false;
    let mut n = 0;
    for wave in 0..2 {
        for i in 0..8 {
            // Each wave its own opening: the second evicts the first's cached blocks.
            let q = format!("Wave {wave}. {SYSTEM}Question {i}: name {} colours.", i + 2);
            eng.add_request(request(m, &q, 40 + 8 * i)).expect("add");
            n += 1;
        }
        while eng.num_unfinished() > 0 {
            eng.step(false).expect("step");
            trace.extend(eng.take_trace());
            let s = eng.snapshot();
            assert_eq!(s.step, eng.steps_run());
            check(&s, &eng);
            shared_seen |= s.pool.shared > 0;
        }
    }
    let s = eng.snapshot();
    check(&s, &eng);
    assert_eq!(s.pool.used + s.pool.shared, 0, "blocks held at the end");
    assert!(shared_seen, "the shared opening never shared a block");
    assert_eq!(s.finished.len(), n);
    assert_eq!(s.counters.requests_finished, n as u64);
    assert_eq!(
        s.counters.generated_tokens,
        s.finished
            .iter()
            .map(|f| f.generated_tokens as u64)
            .sum::<u64>()
    );
    assert_eq!(s.steps.last().map(|r| r.step), Some(eng.steps_run()));
    (trace, eng.steps_run(), s, n)
}

/// Each request's trace: queued, then admitted / chunks / first token / preempted in a
/// possible order, finished last; step events numbered 1, 2, 3, ….
fn check_trace(trace: &[TraceEvent], steps: u64, preemptions: u64, requests: usize) {
    let step_numbers: Vec<u64> = trace
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Step(s) => Some(s.step),
            _ => None,
        })
        .collect();
    assert_eq!(step_numbers, (1..=steps).collect::<Vec<_>>());
    let mut lives: BTreeMap<usize, Vec<RequestPhase>> = BTreeMap::new();
    for e in trace {
        if let TraceEvent::Request(r) = e {
            lives.entry(r.seq_id).or_default().push(r.phase);
        }
    }
    assert_eq!(lives.len(), requests);
    let mut preempted = 0;
    for (id, life) in &lives {
        assert!(
            matches!(life.first(), Some(RequestPhase::Queued { .. })),
            "{id}"
        );
        assert!(
            matches!(life.last(), Some(RequestPhase::Finished { .. })),
            "{id}"
        );
        let mut admitted = false;
        let mut first_tokens = 0;
        for ph in &life[1..life.len() - 1] {
            match ph {
                RequestPhase::Admitted { .. } => {
                    assert!(!admitted, "{id}: admitted twice without a preemption");
                    admitted = true;
                }
                RequestPhase::PrefillChunk {
                    index, of, tokens, ..
                } => {
                    assert!(
                        admitted && *index >= 1 && index <= of && *tokens >= 1,
                        "{id}"
                    );
                }
                RequestPhase::FirstToken => first_tokens += 1,
                RequestPhase::Preempted => {
                    assert!(admitted, "{id}: preempted while waiting");
                    admitted = false;
                    preempted += 1;
                }
                other => panic!("{id}: {other:?} in the middle of its life"),
            }
        }
        assert_eq!(first_tokens, 1, "{id}");
    }
    assert_eq!(preempted, preemptions);
}

#[test]
fn snapshots_and_trace_follow_the_engine_under_preemption_and_eviction() {
    let m = common::model();
    // 20 blocks: eight sequences of ~90–150 tokens need ~60, so the pool runs dry.
    let (trace, steps, end, n) = run(m, 20);
    let c = &end.counters;
    assert!(c.preemptions > 0, "no preemption: the test lost its point");
    assert!(c.evictions > 0, "no eviction: the test lost its point");
    check_trace(&trace, steps, c.preemptions, n);
}

/// The hybrid cache of the real Gemma 3 (one full group, five sliding groups of 512 tokens):
/// cells carry the group of the table naming them.
#[test]
fn snapshots_follow_a_hybrid_cache() {
    let m = common::gemma3();
    let (trace, steps, end, n) = run(m, 140);
    assert!(end.pool.groups.len() > 1);
    check_trace(&trace, steps, end.counters.preemptions, n);
}

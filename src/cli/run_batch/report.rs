//! What run-batch writes: each request's result line (`-o`), and the aggregate on stderr.
use crate::cli::batch_input::BatchRequest;
use crate::engine::llm_engine::{Finished, LlmEngine};
use crate::engine::stats::Percentiles;
use crate::engine::FinishReason;
use crate::units::{count_of, human_bytes};
use serde_json::json;

/// One output line.
pub(super) fn result_json(r: &BatchRequest, f: &Finished) -> serde_json::Value {
    let g = &f.generation;
    let s = &g.stats;
    json!({
        "custom_id": r.custom_id,
        "index": r.index,
        "text": g.text,
        "token_ids": g.tokens,
        "finish_reason": crate::serve::response::finish_reason(g.finish_reason),
        "seed": (!r.sampling.is_greedy()).then_some(r.sampling.seed),
        "seed_drawn": r.seed_drawn,
        "usage": {
            "prompt_tokens": s.prompt_tokens,
            "completion_tokens": s.generated_tokens,
            "total_tokens": s.prompt_tokens + s.generated_tokens,
            "prompt_tokens_details": {"cached_tokens": f.cached_prompt_tokens},
        },
        "stats": {
            "ttft_ms": (s.generated_tokens > 0).then_some(s.ttft_ms),
            "tpot_ms": s.tpot_ms,
            "e2el_ms": s.e2el_ms,
            "itl": s.itl_ms(),
            "finish": g.finish_reason,
            "preemptions": f.preemptions,
            "peak_kv_blocks": f.peak_blocks,
            "spec": (f.spec.num_drafts > 0).then_some(&f.spec),
        },
        "error": f.error,
    })
}

/// The aggregate printed on stderr.
pub(super) fn aggregate(
    engine: &LlmEngine,
    done: &[&Finished],
    wall_s: f64,
    threads: usize,
) -> String {
    let out_tokens: usize = done
        .iter()
        .map(|f| f.generation.stats.generated_tokens)
        .sum();
    let prompt_tokens: usize = done.iter().map(|f| f.generation.stats.prompt_tokens).sum();
    let cached: usize = done.iter().map(|f| f.cached_prompt_tokens).sum();
    let ttft: Vec<f64> = done
        .iter()
        .filter(|f| f.generation.stats.generated_tokens > 0)
        .map(|f| f.generation.stats.ttft_ms)
        .collect();
    let tpot: Vec<f64> = done
        .iter()
        .filter_map(|f| f.generation.stats.tpot_ms)
        .collect();
    let p = |v: &[f64]| {
        let q = Percentiles::of(v);
        format!(
            "mean {:.1} ms, p50 {:.1} ms, p99 {:.1} ms",
            q.mean_ms, q.p50_ms, q.p99_ms
        )
    };
    let (queries, hits) = engine.prefix_cache_counters();
    let block_bytes = engine.pool().block_bytes() as u64;
    let steps = &engine.steps;
    let mean_batch = if steps.is_empty() {
        0.0
    } else {
        steps.iter().map(|s| s.batch_size).sum::<usize>() as f64 / steps.len() as f64
    };
    let c = engine.config();
    let mut s = String::new();
    let started = done
        .iter()
        .filter(|f| f.generation.stats.generated_tokens > 0)
        .count();
    let interrupted = done
        .iter()
        .filter(|f| f.generation.finish_reason == FinishReason::Interrupted)
        .count();
    if interrupted > 0 {
        s += &format!(
            "interrupted           by a signal (Ctrl-C, SIGTERM, SIGHUP): {interrupted} of {} requests cut short, {} never produced a token (left out of TTFT and TPOT)\n",
            done.len(),
            done.len() - started
        );
    }
    s += &format!(
        "requests              {} ({}, --max-num-seqs {}, --max-num-batched-tokens {})\n",
        done.len(),
        crate::units::count_of(threads, "thread"),
        c.scheduler.max_num_seqs,
        c.scheduler.max_num_batched_tokens
    );
    s += &format!(
        "duration              {:.2} s, {}, mean batch {:.2} sequences\n",
        wall_s,
        count_of(steps.len(), "step"),
        mean_batch
    );
    s += &format!(
        "output throughput     {:.2} tokens/s ({})\n",
        out_tokens as f64 / wall_s.max(1e-9),
        count_of(out_tokens, "token")
    );
    s += &format!(
        "prompt tokens         {prompt_tokens} ({cached} served by the prefix cache{})\n",
        if c.scheduler.enable_prefix_caching {
            ""
        } else {
            ", prefix caching off"
        }
    );
    let disk_hits = engine.prefix_disk_hits();
    if queries > 0 && c.scheduler.enable_prefix_caching {
        s += &format!(
            "prefix cache          {} of {queries} prompt tokens looked up were hits ({:.1}%; a preempted request looks its prompt up again)\n",
            hits + disk_hits,
            100.0 * (hits + disk_hits) as f64 / queries as f64
        );
    }
    if let Some(t) = engine.offload_stats() {
        s += &crate::cli::offload_stats::lines(queries, hits, disk_hits, &t);
    }
    let setting = match c.speculative {
        Some(spec) => Some(format!("{}, k {}", spec.method, spec.k)),
        // Only some lines asked for it (their `speculative` field).
        None if engine.spec_stats().num_drafts > 0 => Some("per request".to_string()),
        None => None,
    };
    if let Some(setting) = setting {
        s += &format!("speculative           {setting}: {}\n", engine.spec_stats());
    }
    if !ttft.is_empty() {
        s += &format!("TTFT                  {}\n", p(&ttft));
    }
    if !tpot.is_empty() {
        s += &format!("TPOT                  {}\n", p(&tpot));
    }
    s += &format!(
        "KV cache              peak {} of {} blocks of {} in use ({}), {}, {} leaked\n",
        engine.peak_blocks_used,
        engine.pool().max_blocks(),
        count_of(engine.pool().block_size(), "token"),
        human_bytes(engine.peak_blocks_used as u64 * block_bytes),
        count_of(
            usize::try_from(engine.preemptions()).unwrap_or(usize::MAX),
            "preemption"
        ),
        count_of(engine.pool().num_used_blocks(), "block")
    );
    // The memory the pool holds: blocks in use plus the prefix cache's kept blocks.
    s += &format!(
        "KV memory held        {} ({}; {} of them prefix-cache blocks kept for reuse)\n",
        count_of(engine.pool().num_blocks(), "block"),
        human_bytes(engine.pool().num_blocks() as u64 * block_bytes),
        engine.pool().num_cached_free_blocks()
    );
    s
}

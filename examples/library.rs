//! Use nanollm as a library: load the default model, generate greedily with the KV cache,
//! and read the stats through the public API.
//!
//!     scripts/install-model.sh && cargo run --release --example library
use anyhow::Result;
use nanollm::engine::{self, DecodeMode, Request, SamplingParams};
use nanollm::model::source;
use std::sync::atomic::AtomicBool;

fn main() -> Result<()> {
    let path = source::resolve(None)?;
    let model = source::load(&path, &candle_core::Device::Cpu, true)?;
    let request = Request {
        prompt_ids: model.tokenizer.encode("The three primary colors are")?,
        max_new_tokens: 24,
        sampling: SamplingParams::greedy(),
        mode: DecodeMode::KvCache,
        cache: nanollm::engine::CacheConfig::default(),
        stop_token_ids: Vec::new(),
        stop_strings: Vec::new(),
        ignore_eos: false,
        speculative: Default::default(),
    };
    let interrupt = AtomicBool::new(false);
    let gen = engine::generate(
        &model.decoder,
        &model.tokenizer,
        &request,
        &interrupt,
        |step| {
            eprintln!(
                "token {:>3} at position {:>3}: {:>7.2} ms",
                step.index, step.position, step.latency_ms
            );
            Ok(())
        },
    )?;
    let s = &gen.stats;
    println!("text: {:?}", gen.text);
    println!(
        "TTFT {:.1} ms, TPOT {:.1} ms",
        s.ttft_ms,
        s.tpot_ms.unwrap_or(0.0)
    );
    println!(
        "KV cache: {} tokens, {} bytes measured, {} bytes estimated",
        s.kv_cache.tokens, s.kv_cache.bytes_used, s.kv_cache.bytes_estimated
    );
    Ok(())
}

//! Speed of our engine against candle-transformers' quantized_llama on the same GGUF, same
//! prompt, same settings, in one process: TTFT, TPOT and decode tokens/s for KV-cached and
//! naive (full recompute) greedy decoding.
//!
//!     cargo run --release --example compare_reference -- [PROMPT_TOKENS] [NEW_TOKENS] [THREADS] [NAIVE_NEW_TOKENS]
//!
//! Naive decoding re-runs the whole sequence per token, so it gets its own (smaller) count.
use anyhow::Result;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use nanollm::engine::{self, DecodeMode, Request, SamplingParams};
use nanollm::model::decoder::logits_vec;
use nanollm::model::source;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

const TEXT: &str = "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife. However little known the feelings or views of such a man may be on his first entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered the rightful property of some one or other of their daughters. ";

fn argmax(v: &[f32]) -> u32 {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i as u32)
}

/// (TTFT ms, TPOT ms, tokens) for the reference, cached or naive.
fn reference(
    path: &std::path::Path,
    prompt: &[u32],
    n: usize,
    naive: bool,
) -> Result<(f64, f64, Vec<u32>)> {
    let mut file = std::fs::File::open(path)?;
    let content = candle_core::quantized::gguf_file::Content::read(&mut file)?;
    let mut m = ModelWeights::from_gguf(content, &mut file, &Device::Cpu)?;
    let start = Instant::now();
    let mut ids = prompt.to_vec();
    let mut times = Vec::new();
    let mut input = prompt.to_vec();
    let mut pos = 0;
    for _ in 0..n {
        let x = Tensor::new(input.as_slice(), &Device::Cpu)?.unsqueeze(0)?;
        let logits = logits_vec(&m.forward(&x, pos)?.squeeze(0)?)?;
        let t = argmax(&logits);
        times.push(start.elapsed().as_secs_f64() * 1e3);
        ids.push(t);
        if naive {
            m.clear_kv_cache();
            input = ids.clone();
            pos = 0;
        } else {
            pos += input.len();
            input = vec![t];
        }
    }
    let ttft = times[0];
    Ok((
        ttft,
        (times[n - 1] - ttft) / (n - 1) as f64,
        ids[prompt.len()..].to_vec(),
    ))
}

fn main() -> Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (p, n, threads) = (
        args.first().copied().unwrap_or(128),
        args.get(1).copied().unwrap_or(128),
        args.get(2).copied().unwrap_or(2),
    );
    let naive_n = args.get(3).copied().unwrap_or(16).max(2);
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global();
    let path = source::resolve(None)?;
    let model = source::load(&path, &Device::Cpu, true)?;
    let ids = model.tokenizer.encode(&TEXT.repeat(1 + p / 60))?;
    let prompt = &ids[..p];
    println!("prompt {p} tokens, {n} new tokens ({naive_n} for naive), {threads} threads, greedy");
    println!(
        "{:<34} {:>10} {:>10} {:>12}",
        "", "TTFT ms", "TPOT ms", "decode tok/s"
    );
    for mode in [DecodeMode::KvCache, DecodeMode::Naive] {
        let n = if mode == DecodeMode::Naive {
            naive_n
        } else {
            n
        };
        let req = Request {
            prompt_ids: prompt.to_vec(),
            max_new_tokens: n,
            sampling: SamplingParams::greedy(),
            mode,
            cache: nanollm::engine::CacheConfig::default(),
            stop_token_ids: Vec::new(),
            stop_strings: Vec::new(),
            ignore_eos: true,
            speculative: Default::default(),
        };
        let g = engine::generate(
            &model.decoder,
            &model.tokenizer,
            &req,
            &AtomicBool::new(false),
            |_| Ok(()),
        )?;
        let tpot = g.stats.tpot_ms.unwrap_or(0.0);
        println!(
            "{:<34} {:>10.1} {:>10.2} {:>12.1}",
            format!("nanollm {}", mode.name()),
            g.stats.ttft_ms,
            tpot,
            1e3 / tpot
        );
        let (ttft, tpot, _) = reference(&path, prompt, n, mode == DecodeMode::Naive)?;
        println!(
            "{:<34} {:>10.1} {:>10.2} {:>12.1}",
            format!("candle quantized_llama {}", mode.name()),
            ttft,
            tpot,
            1e3 / tpot
        );
    }
    Ok(())
}

//! Criterion micro-benchmarks of the decode hot paths on the default model
//! (SmolLM2-135M-Instruct Q4_1, `scripts/install-model.sh`):
//!
//! - `kv_cache_step/N`: one KV-cached decode step (one token in, attending over N cached tokens);
//! - `naive_step/N`: one naive decode step (the whole N-token sequence recomputed from an empty
//!   cache, prompt rows on the prefill kernels as the engine runs them);
//! - `kv_append/N`: appending one token's K and V to every layer of a cache holding N tokens.
//!
//! N = 128, 1024 and 4096 by default; `NANOLLM_BENCH_CONTEXTS=128,1024` picks others (a naive
//! step at 4k recomputes 4,096 positions: seconds per iteration on a small CPU).
//! Run: `cargo bench --bench decode_step` (one group: `cargo bench --bench decode_step -- naive`).
use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use nanollm::bench::text::PromptText;
use nanollm::kv::{KvCache, KvShape};
use nanollm::model::{source, Loaded};
use std::hint::black_box;
use std::time::Duration;

/// Context lengths to measure (tokens).
fn contexts() -> Vec<usize> {
    match std::env::var("NANOLLM_BENCH_CONTEXTS") {
        Ok(list) => list
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .filter(|&n| n > 0)
            .collect(),
        Err(_) => vec![128, 1024, 4096],
    }
}

/// Exit with a one-line message (benches have no `Result` to return).
fn die(what: &str, err: impl std::fmt::Display) -> ! {
    eprintln!("error: {what}: {err}");
    std::process::exit(1)
}

fn load() -> Loaded {
    if let Err(e) = nanollm::cli::runtime::init_threads(None) {
        die("threads", e);
    }
    let path = source::resolve(None).unwrap_or_else(|e| die("model", e));
    source::load(&path, &Device::Cpu, true).unwrap_or_else(|e| die("model", format!("{e:#}")))
}

/// `len` token ids: the bench prompt text, repeated as needed.
fn token_ids(model: &Loaded, len: usize) -> Vec<u32> {
    let text = PromptText::tokenize(&model.tokenizer).unwrap_or_else(|e| die("tokenize", e));
    let all = text
        .prompt(text.len())
        .unwrap_or_else(|e| die("tokenize", e));
    all.iter().copied().cycle().take(len).collect()
}

/// A cache holding `len` tokens of random K and V in every layer, with room for one more.
fn filled_cache(shape: KvShape, len: usize, device: &Device) -> KvCache {
    let mut cache = KvCache::new(shape, len + 1, device);
    for layer in 0..shape.num_layers {
        let dims = (1, shape.num_key_value_heads, len, shape.head_dim);
        let k = Tensor::randn(0f32, 1f32, dims, device).unwrap_or_else(|e| die("randn", e));
        let v = Tensor::randn(0f32, 1f32, dims, device).unwrap_or_else(|e| die("randn", e));
        cache
            .append(layer, &k, &v)
            .unwrap_or_else(|e| die("append", e));
    }
    cache
}

fn decode_steps(c: &mut Criterion) {
    let model = load();
    let (decoder, device) = (&model.decoder, Device::Cpu);
    let shape = decoder.config().kv_shape();
    let contexts = contexts();

    let mut group = c.benchmark_group("kv_cache_step");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for &len in &contexts {
        let cache = filled_cache(shape, len, &device);
        let token = token_ids(&model, 1)[0];
        group.bench_with_input(BenchmarkId::from_parameter(len), &len, |b, &len| {
            // Clones share the tensors; each iteration writes the same slot `len`, so every
            // step attends over exactly `len` cached tokens plus itself.
            b.iter(|| {
                let mut cache = cache.clone();
                black_box(
                    decoder
                        .forward(&[token], len, &mut cache)
                        .unwrap_or_else(|e| die("forward", e)),
                )
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("naive_step");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    for &len in &contexts {
        let ids = token_ids(&model, len);
        group.bench_with_input(BenchmarkId::from_parameter(len), &len, |b, &len| {
            // The engine's naive step: every position again from an empty cache; the first
            // len − 1 (the prompt) on the prefill kernels, the generated one on the decode ones.
            b.iter(|| {
                let mut cache = KvCache::new(shape, len, &device);
                black_box(
                    decoder
                        .forward_with(&ids, 0, len - 1, &mut cache)
                        .unwrap_or_else(|e| die("forward", e)),
                )
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("kv_append");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let one = (1, shape.num_key_value_heads, 1, shape.head_dim);
    let k = Tensor::randn(0f32, 1f32, one, &device).unwrap_or_else(|e| die("randn", e));
    let v = Tensor::randn(0f32, 1f32, one, &device).unwrap_or_else(|e| die("randn", e));
    for &len in &contexts {
        let cache = filled_cache(shape, len, &device);
        group.bench_with_input(BenchmarkId::from_parameter(len), &len, |b, _| {
            // One decode step's appends: one token's K and V into each of the layers.
            b.iter(|| {
                let mut cache = cache.clone();
                for layer in 0..shape.num_layers {
                    black_box(
                        cache
                            .append(layer, &k, &v)
                            .unwrap_or_else(|e| die("append", e)),
                    );
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, decode_steps);
criterion_main!(benches);

//! Criterion micro-benchmarks of the decode hot paths on the default model
//! (SmolLM2-135M-Instruct Q4_1, `scripts/install-model.sh`):
//!
//! - `kv_cache_step/DTYPE/N`: one KV-cached decode step (one token in, attending over N cached
//!   tokens of the paged cache, blocks of 16, stored as f32, f16 or q8_0);
//! - `naive_step/N`: one naive decode step (the whole N-token sequence recomputed from an empty
//!   f16 cache, prompt rows on the prefill kernels as the engine runs them);
//! - `kv_write/DTYPE/N`: writing one token's K and V rows into every layer of a cache holding
//!   N tokens (encoding to the stored dtype included).
//!
//! N = 128, 1024 and 4096 by default; `NANOLLM_BENCH_CONTEXTS=128,1024` picks others (a naive
//! step at 4k recomputes 4,096 positions: seconds per iteration on a small CPU).
//! Run: `cargo bench --bench decode_step` (one group: `cargo bench --bench decode_step -- naive`).
use candle_core::Device;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use nanollm::bench::text::PromptText;
use nanollm::kv::{KvCache, KvDtype, KvPart, KvShape};
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
    if let Err(e) = nanollm::process::init_threads(None) {
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

/// Reproducible values in [-1, 1).
fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// A paged cache (blocks of 16) holding `len` tokens of random K and V in every layer.
fn filled_cache(shape: KvShape, len: usize) -> KvCache {
    let mut cache = KvCache::new(shape, 16, 8192).unwrap_or_else(|e| die("cache", e));
    let KvCache { pool, table } = &mut cache;
    table
        .reserve(pool, len)
        .unwrap_or_else(|e| die("reserve", e));
    let rows = shape.num_key_value_heads * len * shape.head_dim;
    for layer in 0..shape.num_layers {
        pool.write(
            table.blocks(),
            layer,
            KvPart::K,
            0,
            len,
            &random(rows, 1 + layer as u64),
        );
        pool.write(
            table.blocks(),
            layer,
            KvPart::V,
            0,
            len,
            &random(rows, 99 + layer as u64),
        );
    }
    table.commit(len, 16);
    cache
}

const DTYPES: [KvDtype; 3] = [KvDtype::F32, KvDtype::F16, KvDtype::Q8_0];

fn decode_steps(c: &mut Criterion) {
    let model = load();
    let decoder = &model.decoder;
    let contexts = contexts();

    let mut group = c.benchmark_group("kv_cache_step");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let token = token_ids(&model, 1)[0];
    for dtype in DTYPES {
        for &len in &contexts {
            let mut cache = filled_cache(decoder.config().kv_shape(dtype), len);
            let id = BenchmarkId::new(dtype.name(), len);
            group.bench_with_input(id, &len, |b, &len| {
                // Each iteration writes slot `len` and is then undone, so every step attends
                // over exactly `len` cached tokens plus itself.
                b.iter(|| {
                    let logits = decoder
                        .forward(&[token], len, &mut cache)
                        .unwrap_or_else(|e| die("forward", e));
                    cache.truncate(len);
                    black_box(logits)
                })
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group("naive_step");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    let shape = decoder.config().kv_shape(KvDtype::F16);
    for &len in &contexts {
        let ids = token_ids(&model, len);
        let mut cache = KvCache::new(shape, 16, 8192).unwrap_or_else(|e| die("cache", e));
        group.bench_with_input(BenchmarkId::from_parameter(len), &len, |b, &len| {
            // The engine's naive step: every position again from an empty cache; the first
            // len − 1 (the prompt) on the prefill kernels, the generated one on the decode ones.
            b.iter(|| {
                cache.clear();
                black_box(
                    decoder
                        .forward_with(&ids, 0, len - 1, &mut cache)
                        .unwrap_or_else(|e| die("forward", e)),
                )
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("kv_write");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for dtype in DTYPES {
        let shape = decoder.config().kv_shape(dtype);
        let row = random(shape.num_key_value_heads * shape.head_dim, 7);
        for &len in &contexts {
            let mut cache = filled_cache(shape, len);
            let KvCache { pool, table } = &mut cache;
            table
                .reserve(pool, len + 1)
                .unwrap_or_else(|e| die("reserve", e));
            let id = BenchmarkId::new(dtype.name(), len);
            group.bench_with_input(id, &len, |b, &len| {
                // One decode step's writes: one token's K and V into each of the layers.
                b.iter(|| {
                    for layer in 0..shape.num_layers {
                        pool.write(table.blocks(), layer, KvPart::K, len, 1, &row);
                        pool.write(table.blocks(), layer, KvPart::V, len, 1, &row);
                    }
                    black_box(&pool);
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, decode_steps);
criterion_main!(benches);

//! The paged KV cache on the default model, against things that are not the code itself: the
//! tokens the contiguous f32 cache generated before the block pool existed (a fixture), naive
//! recompute for every KV dtype, and a failed forward pass leaving the cache untouched.
mod common;
use nanollm::bench::text::TEXT;
use nanollm::engine::{self, CacheConfig, DecodeMode, Request, SamplingParams};
use nanollm::kv::{BlockTable, KvCache, KvDtype, KvPool};
use std::sync::atomic::AtomicBool;

fn greedy(prompt: &[u32], n: usize, mode: DecodeMode, cache: CacheConfig) -> Vec<u32> {
    let m = common::model();
    let request = Request {
        prompt_ids: prompt.to_vec(),
        max_new_tokens: n,
        sampling: SamplingParams::greedy(),
        mode,
        cache,
        stop_token_ids: Vec::new(),
        stop_strings: Vec::new(),
        ignore_eos: true,
        speculative: Default::default(),
    };
    let stop = AtomicBool::new(false);
    let gen =
        engine::generate(&m.decoder, &m.tokenizer, &request, &stop, |_| Ok(())).expect("generate");
    assert_eq!(gen.stats.kv_cache.blocks_leaked, 0);
    gen.tokens
}

/// Paged f32 generates exactly what the contiguous f32 cache generated (fixture recorded
/// before this change), at block sizes 1, 7, 16 and 256, for prompts of 15, 16, 17, 31, 32
/// and 33 tokens (block edges of 16 and 32).
#[test]
fn paged_f32_equals_the_previous_contiguous_cache() {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/contiguous_f32_tokens.json")).expect("json");
    let offset = fixture["offset"].as_u64().expect("offset") as usize;
    let n = fixture["max_new_tokens"].as_u64().expect("n") as usize;
    assert!(n >= 64);
    let ids = common::model().tokenizer.encode(TEXT).expect("encode");
    for len in [15usize, 16, 17, 31, 32, 33] {
        let want: Vec<u32> = fixture["tokens"][len.to_string()]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        let prompt = &ids[offset..offset + len];
        for block_size in [1usize, 7, 16, 256] {
            let cache = CacheConfig {
                dtype: KvDtype::F32,
                block_size,
                swa_full: false,
                evict: None,
            };
            let got = greedy(prompt, n, DecodeMode::KvCache, cache);
            assert_eq!(got, want, "prompt {len} tokens, block size {block_size}");
        }
    }
}

/// Naive (full recompute each step) and KV-cached decoding produce the same tokens for every
/// KV dtype: attention reads every K/V row back from the pool in the stored dtype in both.
#[test]
fn naive_equals_kv_cache_for_every_kv_dtype() {
    let ids = common::model().tokenizer.encode(TEXT).expect("encode");
    let prompt = &ids[500..523];
    for dtype in nanollm::kv::codec::RUNTIME_DTYPES {
        let cache = CacheConfig {
            dtype,
            block_size: 7,
            swa_full: false,
            evict: None,
        };
        let a = greedy(prompt, 40, DecodeMode::KvCache, cache);
        let b = greedy(prompt, 40, DecodeMode::Naive, cache);
        assert_eq!(a, b, "{dtype:?}");
    }
}

/// The smaller dtypes change the numbers, not the model: greedy output starts the same as
/// f32's for a while (a sanity check that the quantized cache is read back correctly).
#[test]
fn smaller_kv_dtypes_stay_close_to_f32() {
    let ids = common::model().tokenizer.encode(TEXT).expect("encode");
    let prompt = &ids[1000..1100];
    let f32_tokens = greedy(
        prompt,
        8,
        DecodeMode::KvCache,
        CacheConfig {
            dtype: KvDtype::F32,
            block_size: 16,
            swa_full: false,
            evict: None,
        },
    );
    // The 4-bit caches part from f32 within a few tokens on this model (their KL divergence
    // is checked in tests/cli_perplexity.rs instead).
    for dtype in [KvDtype::F16, KvDtype::Bf16, KvDtype::Q8_0] {
        let cache = CacheConfig {
            dtype,
            block_size: 16,
            swa_full: false,
            evict: None,
        };
        let got = greedy(prompt, 8, DecodeMode::KvCache, cache);
        assert_eq!(got[..4], f32_tokens[..4], "{dtype:?}");
    }
}

/// A forward pass that fails (a token outside the vocabulary, a wrong start position, a pool
/// out of blocks) leaves the cache as it was: same length, same blocks, pool unchanged.
#[test]
fn a_failed_forward_leaves_the_cache_as_it_was() {
    let m = common::model();
    let d = &m.decoder;
    let mut cache = KvCache::new(d.config().kv_shape(KvDtype::F16), 4, 64).expect("cache");
    d.forward(&[1, 2, 3, 4, 5, 6], 0, &mut cache)
        .expect("prefill");
    let (len, blocks, used) = (
        cache.len(),
        cache.table.blocks().to_vec(),
        cache.pool.num_used_blocks(),
    );
    let bad = d.config().vocab_size as u32;
    assert!(d.forward(&[7, 8, 9, bad], 6, &mut cache).is_err());
    assert!(
        d.forward(&[7], 5, &mut cache).is_err(),
        "wrong start position"
    );
    assert_eq!(
        (
            cache.len(),
            cache.table.blocks(),
            cache.pool.num_used_blocks()
        ),
        (len, &blocks[..], used)
    );
    // And it still decodes from where it was.
    d.forward(&[7], 6, &mut cache).expect("decode");
    assert_eq!(cache.len(), 7);
    cache.clear();
    assert_eq!(cache.pool.num_used_blocks(), 0);

    // A pool of two 4-token blocks: 8 tokens fit, the 9th needs a third block.
    let mut small = KvCache {
        pool: KvPool::new(d.config().kv_shape(KvDtype::Q8_0), 4, 2).expect("pool"),
        table: BlockTable::new(),
    };
    d.forward(&[1, 2, 3, 4, 5, 6], 0, &mut small)
        .expect("prefill");
    let err = d
        .forward(&[7, 8, 9], 6, &mut small)
        .unwrap_err()
        .to_string();
    assert!(err.contains("KV pool is full"), "{err}");
    assert_eq!(
        (
            small.len(),
            small.table.blocks().len(),
            small.pool.num_free_blocks()
        ),
        (6, 2, 0)
    );
    d.forward(&[7, 8], 6, &mut small)
        .expect("fills the last block");
    assert_eq!(small.len(), 8);
}

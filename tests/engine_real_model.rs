//! The engine on the default model: naive vs KV-cached decode, KV bytes vs the estimator,
//! the GGUF tokenizer vs llama.cpp's ids, and UTF-8-whole streaming.
mod common;
use nanollm::engine::{self, CacheConfig, DecodeMode, FinishReason, Request, SamplingParams};
use nanollm::kv::KvDtype;
use nanollm::model::gguf::GgufFile;
use nanollm::model::{Loaded, TextStream};
use nanollm::sizing::estimate::Layout;
use nanollm::sizing::spec::KvSpec;
use std::sync::atomic::AtomicBool;

fn request(model: &Loaded, prompt: &str, mode: DecodeMode, n: usize) -> Request {
    Request {
        prompt_ids: model.tokenizer.encode(prompt).expect("encode"),
        max_new_tokens: n,
        sampling: SamplingParams::greedy(),
        mode,
        cache: nanollm::engine::CacheConfig::default(),
        stop_token_ids: Vec::new(),
        stop_strings: Vec::new(),
        ignore_eos: false,
        speculative: Default::default(),
    }
}

fn tokens(model: &Loaded, prompt: &str, mode: DecodeMode, n: usize) -> Vec<u32> {
    let stop = AtomicBool::new(false);
    let gen = engine::generate(
        &model.decoder,
        &model.tokenizer,
        &request(model, prompt, mode, n),
        &stop,
        |_| Ok(()),
    )
    .expect("generate");
    gen.tokens
}

const STORY: &str =
    "Once upon a time, in a small village by the sea, there lived an old fisherman who";

#[test]
fn naive_and_kv_cache_greedy_tokens_are_identical_dense_prefill() {
    let m = common::model();
    let a = tokens(m, STORY, DecodeMode::KvCache, 72);
    let b = tokens(m, STORY, DecodeMode::Naive, 72);
    assert!(a.len() >= 64, "only {} tokens generated", a.len());
    assert_eq!(a, b);
}

#[test]
fn naive_and_kv_cache_greedy_tokens_are_identical_quantized_prefill() {
    let m = common::quantized_model();
    let a = tokens(m, STORY, DecodeMode::KvCache, 72);
    let b = tokens(m, STORY, DecodeMode::Naive, 72);
    assert!(a.len() >= 64, "only {} tokens generated", a.len());
    assert_eq!(a, b);
}

/// For every runtime dtype and a few block sizes, the bytes the block pool holds and allocates
/// equal kv-size's estimate read from the GGUF (as `nanollm kv-size --model x.gguf`), and the
/// request's blocks all go back to the pool.
#[test]
fn kv_bytes_held_equal_the_kv_size_estimate_from_the_gguf() {
    let m = common::model();
    let stop = AtomicBool::new(false);
    let gguf = GgufFile::open(&common::model_path()).expect("open");
    let spec = KvSpec::from_gguf_metadata(&gguf.content.metadata).expect("spec");
    // 2 · 30 layers · 3 KV heads · bytes per 64-value row: f32 256, f16/bf16 128, q8_0 2 · 34,
    // the 4-bit ones 2 · 18.
    let per_token = [
        (KvDtype::F32, 46_080u64),
        (KvDtype::F16, 23_040),
        (KvDtype::Bf16, 23_040),
        (KvDtype::Q8_0, 12_240),
        (KvDtype::Q4_0, 6_480),
        (KvDtype::Iq4Nl, 6_480),
        (KvDtype::Q4_0R, 6_480),
        (KvDtype::Iq4NlR, 6_480),
    ];
    assert_eq!(per_token.len(), nanollm::kv::codec::RUNTIME_DTYPES.len());
    for (dtype, bytes_per_token) in per_token {
        for block_size in [1usize, 7, 16, 256] {
            let mut req = request(m, STORY, DecodeMode::KvCache, 20);
            req.cache = CacheConfig {
                dtype,
                block_size,
                swa_full: false,
                evict: None,
            };
            let gen = engine::generate(&m.decoder, &m.tokenizer, &req, &stop, |_| Ok(()))
                .expect("generate");
            let kv = gen.stats.kv_cache;
            let what = format!("{dtype:?}, block size {block_size}");
            // The last sampled token is never fed back: the cache holds prompt + n − 1 tokens.
            let tokens = req.prompt_ids.len() + gen.tokens.len() - 1;
            assert_eq!(kv.tokens, tokens, "{what}");
            let exact = spec.bytes(tokens as u64, 1, dtype).expect("no overflow");
            let paged = Layout {
                tp: 1,
                block_size: Some(block_size as u64),
            };
            let paged = spec
                .kv_bytes(tokens as u64, 1, dtype, paged)
                .expect("no overflow");
            assert_eq!(kv.bytes_used, exact, "{what}");
            assert_eq!(kv.bytes_used, bytes_per_token * tokens as u64, "{what}");
            assert_eq!(kv.bytes_held, paged, "{what}");
            assert_eq!(kv.bytes_allocated, paged, "{what}");
            assert_eq!(kv.blocks, tokens.div_ceil(block_size), "{what}");
            assert_eq!(
                kv.last_block_tokens,
                tokens - (kv.blocks - 1) * block_size,
                "{what}"
            );
            assert_eq!(kv.blocks_leaked, 0, "{what}");
        }
    }
}

#[test]
fn max_new_tokens_and_finish_reason() {
    let m = common::model();
    let stop = AtomicBool::new(false);
    let req = request(m, STORY, DecodeMode::KvCache, 5);
    let gen =
        engine::generate(&m.decoder, &m.tokenizer, &req, &stop, |_| Ok(())).expect("generate");
    assert_eq!(gen.tokens.len(), 5);
    assert_eq!(gen.finish_reason, FinishReason::Length);
    assert_eq!(gen.steps.len(), 5);
    assert!(gen.stats.tpot_ms.is_some());
}

#[test]
fn gguf_tokenizer_matches_llama_cpp_ids() {
    // Fixture: ids made by llama.cpp's llama-tokenize from this GGUF (see its "made_with").
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/smollm2-tokenize.json")).expect("fixture json");
    let m = common::model();
    let cases = fixture["cases"].as_array().expect("cases");
    assert!(cases.len() >= 10);
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let want: Vec<u32> = case["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        let got = m.tokenizer.encode(text).expect("encode");
        assert_eq!(got, want, "ids for {text:?}");
        let back = m.tokenizer.inner.decode(&got, false).expect("decode");
        assert_eq!(back, text, "round trip for {text:?}");
    }
}

#[test]
fn streaming_emits_whole_utf8_characters() {
    let m = common::model();
    for text in [
        "KV cache 就像浏览器缓存",
        "emoji 🙂🚀 and ñ, ü, é",
        "大模型推理：Prefill 与 Decode",
    ] {
        let ids = m.tokenizer.encode(text).expect("encode");
        let mut stream = TextStream::new();
        let mut out = String::new();
        for &id in &ids {
            let delta = stream.push(&m.tokenizer, id).expect("push");
            assert!(
                !delta.contains('\u{FFFD}'),
                "split character emitted for {text:?}: {delta:?}"
            );
            out.push_str(&delta);
        }
        out.push_str(&stream.flush(&m.tokenizer).expect("flush"));
        assert_eq!(out, text);
    }
}

/// Generation cut inside a character (max_tokens) drops that character's bytes, as vLLM's
/// and TGI's detokenizers do (the text ended in U+FFFD); and text held back behind such a
/// character that completes a stop string at the end ends the request with `StopString`
/// (it was cut there but reported `length`).
#[test]
fn a_cut_inside_a_character_is_dropped_and_a_late_stop_still_counts() {
    use nanollm::engine::sequence::Detokenizer;
    let m = common::model();
    let run = |ids: &[u32], stops: &[&str]| {
        let mut r = request(m, "x", DecodeMode::KvCache, ids.len());
        r.stop_strings = stops.iter().map(|s| s.to_string()).collect();
        let mut d = Detokenizer::new(&m.tokenizer, &r);
        let mut text = String::new();
        for (i, &id) in ids.iter().enumerate() {
            let (delta, finish) = d
                .push(&m.tokenizer, id, i + 1, i + 1, 1 << 20, false)
                .expect("push");
            text.push_str(&delta);
            if let Some(f) = finish {
                return (text, f);
            }
        }
        panic!("no finish after {} tokens", ids.len());
    };
    let mut late_stop_checked = false;
    for text in [
        "🦀 日本語 café",
        "おやしくはならくはなら",
        "大模型推理：Prefill 与 Decode",
    ] {
        let ids = m.tokenizer.encode(text).expect("encode");
        for k in 1..=ids.len() {
            let (got, finish) = run(&ids[..k], &[]);
            assert_eq!(finish, FinishReason::Length);
            let full = m.tokenizer.decode(&ids[..k]).expect("decode");
            assert_eq!(
                got,
                full.trim_end_matches('\u{FFFD}'),
                "{text:?} cut after {k} ids"
            );
            assert!(!got.ends_with('\u{FFFD}'));
            // A whole character released only by the final flush, used as a stop string.
            let mut stream = TextStream::new();
            let mut emitted = String::new();
            for &id in &ids[..k] {
                emitted.push_str(&stream.push(&m.tokenizer, id).expect("push"));
            }
            let late = stream.flush(&m.tokenizer).expect("flush");
            if let Some(c) = late.chars().next() {
                let (cut, finish) = run(&ids[..k], &[&c.to_string()]);
                if !emitted.contains(c) {
                    assert_eq!(
                        finish,
                        FinishReason::StopString,
                        "{text:?} after {k}: {late:?}"
                    );
                    assert_eq!(cut, emitted);
                    late_stop_checked = true;
                }
            }
        }
    }
    assert!(
        late_stop_checked,
        "no text was held back behind a split character"
    );
}

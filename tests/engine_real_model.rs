//! The engine on the default model: naive vs KV-cached decode, KV bytes vs the estimator,
//! the GGUF tokenizer vs llama.cpp's ids, and UTF-8-whole streaming.
mod common;
use nanollm::engine::{self, DecodeMode, FinishReason, Request, SamplingParams};
use nanollm::kv::KvDtype;
use nanollm::model::gguf::GgufFile;
use nanollm::model::{Loaded, TextStream};
use nanollm::sizing::spec::KvSpec;
use std::sync::atomic::AtomicBool;

fn request(model: &Loaded, prompt: &str, mode: DecodeMode, n: usize) -> Request {
    Request {
        prompt_ids: model.tokenizer.encode(prompt).expect("encode"),
        max_new_tokens: n,
        sampling: SamplingParams::greedy(),
        mode,
        stop_token_ids: Vec::new(),
        stop_strings: Vec::new(),
        ignore_eos: false,
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

#[test]
fn kv_bytes_held_equal_the_kv_size_estimate_from_the_gguf() {
    let m = common::model();
    let stop = AtomicBool::new(false);
    let req = request(m, STORY, DecodeMode::KvCache, 20);
    let gen =
        engine::generate(&m.decoder, &m.tokenizer, &req, &stop, |_| Ok(())).expect("generate");
    let kv = gen.stats.kv_cache;
    // The last sampled token is never fed back, so the cache holds prompt + n − 1 tokens.
    assert_eq!(kv.tokens, req.prompt_ids.len() + gen.tokens.len() - 1);
    // The kv-size path: spec read from the GGUF metadata, as `nanollm kv-size --model x.gguf`.
    let gguf = GgufFile::open(&common::model_path()).expect("open");
    let spec = KvSpec::from_gguf_metadata(&gguf.content.metadata).expect("spec");
    let estimate = spec
        .bytes(kv.tokens as u64, 1, KvDtype::F32)
        .expect("no overflow");
    assert_eq!(kv.bytes_used, estimate);
    // 2 · 30 layers · 3 KV heads · 64 head_dim · 4 bytes = 46,080 bytes per token.
    assert_eq!(kv.bytes_used, 46_080 * kv.tokens as u64);
    assert_eq!(kv.bytes_estimated, estimate);
    assert!(kv.bytes_allocated >= kv.bytes_used);
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

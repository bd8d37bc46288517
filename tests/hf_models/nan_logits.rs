//! Issue 43: a request whose logits overflow to NaN fails alone. A tiny Qwen2 with a final
//! norm of 1e10 and an lm_head of ±1e30 (finite weights, so the loader takes them) computes
//! ±∞ products whose sums are NaN: a sampled request there cannot draw a token. It ends with
//! finish reason `error` and the reason; a greedy request beside it in the same batch goes on
//! to its last token, no block leaks, and `nanollm serve` answers 500 (whole) or an error
//! event (streamed) and keeps serving.
use crate::ours;
use crate::tiny::{self, Arch, Spec};
use candle_core::{Device, Tensor};
use nanollm::engine::llm_engine::{EngineConfig, LlmEngine, SchedulerConfig};
use nanollm::engine::{CacheConfig, DecodeMode, FinishReason, Request, SamplingParams};
use std::collections::HashMap;

/// The tiny Qwen2 folder with weights whose logits overflow.
fn overflowing_model() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut w: HashMap<String, Tensor> = tiny::write_folder(dir.path(), &Spec::of(Arch::Qwen2), 9);
    let h = w["model.norm.weight"].dims1().expect("norm dims");
    w.insert(
        "model.norm.weight".into(),
        Tensor::from_vec(vec![1e10f32; h], h, &Device::Cpu).expect("norm"),
    );
    let (v, hh) = w["lm_head.weight"].dims2().expect("lm_head dims");
    let head: Vec<f32> = (0..v * hh)
        .map(|i| if i % 2 == 0 { 1e30 } else { -1e30 })
        .collect();
    w.insert(
        "lm_head.weight".into(),
        Tensor::from_vec(head, (v, hh), &Device::Cpu).expect("lm_head"),
    );
    candle_core::safetensors::save(&w, dir.path().join("model.safetensors")).expect("save");
    dir
}

fn request(sampling: SamplingParams) -> Request {
    Request {
        prompt_ids: vec![5, 6, 7, 8, 9],
        max_new_tokens: 6,
        sampling,
        mode: DecodeMode::KvCache,
        cache: CacheConfig::default(),
        stop_token_ids: Vec::new(),
        stop_strings: Vec::new(),
        ignore_eos: true,
        speculative: Default::default(),
    }
}

#[test]
fn a_request_whose_logits_are_nan_fails_alone() {
    let dir = overflowing_model();
    let m = ours::load(dir.path(), None);
    let config = EngineConfig {
        cache: CacheConfig::default(),
        num_blocks: 64,
        max_model_len: 128,
        offload: None,
        speculative: None,
        scheduler: SchedulerConfig {
            max_num_seqs: 4,
            max_num_batched_tokens: 256,
            enable_prefix_caching: true,
        },
    };
    let mut eng = LlmEngine::new(&m.decoder, &m.tokenizer, config).expect("engine");
    let greedy = eng
        .add_request(request(SamplingParams::greedy()))
        .expect("add greedy");
    let sampled = eng
        .add_request(request(SamplingParams {
            temperature: 0.8,
            seed: 1,
            ..SamplingParams::greedy()
        }))
        .expect("add sampled");
    let mut done = HashMap::new();
    for _ in 0..100 {
        for f in eng
            .step(false)
            .expect("a step goes on past one request's failure")
            .finished
        {
            done.insert(f.seq_id, f);
        }
        if eng.num_unfinished() == 0 {
            break;
        }
    }
    let s = &done[&sampled];
    assert_eq!(s.generation.finish_reason, FinishReason::Error);
    let e = s.error.as_deref().unwrap_or("");
    assert!(
        e.contains("cannot sample") && e.contains("overflowed"),
        "{e}"
    );
    let g = &done[&greedy];
    assert_eq!(g.generation.finish_reason, FinishReason::Length);
    assert_eq!(g.generation.tokens.len(), 6);
    assert!(g.error.is_none());
    assert_eq!(eng.pool().num_used_blocks(), 0, "blocks leaked");
}

/// `nanollm serve` on the same model: a sampled request gets 500 (whole) or an error event
/// then `[DONE]` (streamed); the server keeps serving greedy requests after both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_a_failed_request_and_keeps_serving() {
    let dir = overflowing_model();
    let model = dir.path().to_string_lossy().to_string();
    let s = crate::common::server::Server::start(&["--model", &model, "--max-model-len", "128"]);
    let client = reqwest::Client::new();
    let url = s.url("/v1/completions");
    let send = |body: serde_json::Value| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let r = client.post(&url).json(&body).send().await.expect("POST");
            (r.status().as_u16(), r.text().await.expect("body"))
        }
    };
    let prompt = vec![5, 6, 7, 8, 9];
    let sampled =
        serde_json::json!({"prompt": prompt, "max_tokens": 4, "temperature": 0.8, "seed": 1});
    let (status, body) = send(sampled.clone()).await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("generation failed: cannot sample"), "{body}");
    let mut streamed = sampled.clone();
    streamed["stream"] = serde_json::json!(true);
    let (status, body) = send(streamed).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"error\"")
            && body.contains("cannot sample")
            && body.ends_with("data: [DONE]\n\n"),
        "{body}"
    );
    for _ in 0..2 {
        let (status, body) = send(serde_json::json!({"prompt": prompt, "max_tokens": 4})).await;
        assert_eq!(status, 200, "the server keeps serving: {body}");
    }
    // The server's stderr is read by a thread of this test: under load it can lag the
    // replies by a moment, so wait for the line (10 s at most) before asserting on it.
    let mut log = String::new();
    for _ in 0..200 {
        log = s.log.lock().map(|l| l.clone()).unwrap_or_default();
        if log.contains("failed: cannot sample") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(log.contains("failed: cannot sample"), "{log}");
}

//! `serve` on the tiny V2-like folder: the live page's state (`/v1/state`) counts the pool in
//! latent rows, one per token and layer, and a repeated prompt hits the prefix cache.
use super::tiny::{write_folder, Shape};
use crate::common::server::Server;
use serde_json::{json, Value};

async fn complete(s: &Server, prompt: &str) -> Value {
    let r = reqwest::Client::new()
        .post(s.url("/v1/completions"))
        .json(&json!({"prompt": prompt, "max_tokens": 4, "ignore_eos": true, "temperature": 0}))
        .send()
        .await
        .expect("POST /v1/completions");
    assert_eq!(r.status().as_u16(), 200);
    r.json().await.expect("completion JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_state_counts_latent_blocks_and_prefix_hits() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_folder(dir.path(), &Shape::v2(), 58);
    let model = dir.path().to_str().expect("utf-8 path");
    let s = Server::start(&[
        "-m",
        model,
        "--max-model-len",
        "256",
        "--block-size",
        "16",
        "--kv-cache-dtype",
        "f16",
    ]);
    // 20 words: at least one full block of 16 tokens to publish and reuse.
    let prompt: String = (5..25).map(|i| format!("w{i} ")).collect();
    let first = complete(&s, &prompt).await;
    let again = complete(&s, &prompt).await;
    assert_eq!(first["choices"][0]["text"], again["choices"][0]["text"]);
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached_tokens");
    assert!(cached >= 16, "the repeated prompt reused {cached} tokens");
    let state: Value = reqwest::get(s.url("/v1/state"))
        .await
        .expect("GET /v1/state")
        .json()
        .await
        .expect("state JSON");
    // 16 tokens × 3 layers × (kv_lora 64 + rope 32) values × 2 bytes: no separate V.
    assert_eq!(state["pool"]["block_bytes"], 16 * 3 * 96 * 2, "{state}");
}

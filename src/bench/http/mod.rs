//! `nanollm bench --base-url URL`: drive any OpenAI-compatible server (`nanollm serve`,
//! llama.cpp's `llama-server`, `vllm serve`, ...) over streaming HTTP and report what vLLM's
//! serving benchmark (`vllm bench serve`) reports: TTFT, TPOT, ITL and E2EL (mean, median,
//! p99) and request / output / total token throughput, per `--max-concurrency` level. When
//! the server exports vLLM-style Prometheus histograms (`/metrics`), its own mean TTFT and
//! ITL over the same level are shown beside the client's, so the HTTP and client overhead
//! is visible.
pub mod client;
pub mod server_metrics;

use crate::bench::serving::arrivals;
use crate::engine::stats::Percentiles;
use anyhow::{bail, Context, Result};
use client::{stream_request, RequestOutcome};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::Serialize;
use serde_json::{json, Value};
use server_metrics::ServerView;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest wait to open a connection to the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest silence on a connection (no byte of the answer or of the stream) before the
/// request counts as failed: a slow prefill of a queued request stays well below it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(300);

/// What `--base-url` runs.
#[derive(Debug, Clone, Serialize)]
pub struct HttpPlan {
    /// The server, e.g. `http://127.0.0.1:8000`.
    pub base_url: String,
    /// `/v1/completions` or `/v1/chat/completions`.
    pub endpoint: String,
    /// The `model` sent with each request.
    pub model: String,
    /// Concurrency levels (`--max-concurrency`): most requests in flight.
    pub levels: Vec<usize>,
    /// Requests per level.
    pub num_prompts: usize,
    /// Generated tokens asked per request (`max_tokens`, with `ignore_eos`).
    pub gen_len: usize,
    /// Poisson arrivals per second; None: all at once.
    pub request_rate: Option<f64>,
    /// Ask for a token count in every chunk (`stream_options.continuous_usage_stats`, vLLM's
    /// extension) so ITL is per token; turned off when the server refuses it with a 400.
    pub continuous_usage: bool,
    /// Bearer token, if the server needs one (never reported).
    #[serde(skip)]
    pub api_key: Option<String>,
}

/// One level's figures (vLLM's definitions; times in ms).
#[derive(Debug, Clone, Serialize)]
pub struct HttpLevel {
    /// The level.
    pub max_concurrency: usize,
    /// Requests sent.
    pub requests: usize,
    /// Requests that completed.
    pub completed: usize,
    /// Requests that failed, and the first few reasons.
    pub failed: usize,
    /// Up to 5 failure messages.
    pub errors: Vec<String>,
    /// First send to last end (s).
    pub duration_s: f64,
    /// Completed requests / duration.
    pub request_throughput: f64,
    /// Prompt tokens (server's usage), completed requests.
    pub prompt_tokens: usize,
    /// Output tokens, completed requests.
    pub output_tokens: usize,
    /// Output tokens / duration.
    pub output_tokens_per_s: f64,
    /// (Prompt + output tokens) / duration.
    pub total_tokens_per_s: f64,
    /// Prompt tokens the server's prefix cache served (usage's cached_tokens), when reported.
    pub cached_tokens: Option<usize>,
    /// Client-side TTFT.
    pub ttft: Percentiles,
    /// Client-side TPOT (None when no request generated two tokens).
    pub tpot: Option<Percentiles>,
    /// Client-side ITL, every gap of every request (None when there is no gap).
    pub itl: Option<Percentiles>,
    /// ITL is per token (every chunk said how many tokens it carried); false: one sample per
    /// text chunk, overstated when the server puts several tokens in a chunk.
    pub itl_per_token: bool,
    /// Client-side E2EL.
    pub e2el: Percentiles,
    /// The server's own means over this level, from its /metrics (None when it has none).
    pub server: Option<ServerView>,
}

/// The request bodies' prompts: `texts[i]` for request i.
pub fn request_body(plan: &HttpPlan, prompt: &str) -> Value {
    let mut body = json!({
        "model": plan.model,
        "max_tokens": plan.gen_len,
        "temperature": 0.0,
        "stream": true,
        "stream_options": {"include_usage": true},
        "ignore_eos": true,
    });
    if plan.continuous_usage {
        body["stream_options"]["continuous_usage_stats"] = json!(true);
    }
    if plan.endpoint.contains("chat") {
        body["messages"] = json!([{"role": "user", "content": prompt}]);
    } else {
        body["prompt"] = json!(prompt);
    }
    body
}

/// Ask `GET /v1/models` for the served model's id (the first one).
///
/// Errors: the server cannot be reached, answers an error, or lists no model.
pub async fn served_model(
    client: &reqwest::Client,
    base_url: &str,
    api_key: Option<&str>,
) -> Result<String> {
    let mut req = client.get(format!("{base_url}/v1/models"));
    if let Some(k) = api_key {
        req = req.bearer_auth(k);
    }
    let resp = req
        .send()
        .await
        .with_context(|| format!("--base-url {base_url}: cannot reach the server"))?;
    let status = resp.status();
    let text = resp
        .text()
        .await
        .with_context(|| format!("--base-url {base_url}: GET /v1/models: the answer broke off"))?;
    let v: Value = match serde_json::from_str(&text) {
        Ok(v) if status.is_success() => v,
        Ok(v) => bail!("--base-url {base_url}: GET /v1/models answered HTTP {status}: {v}"),
        Err(_) => {
            let head: String = text.chars().take(200).collect();
            bail!("--base-url {base_url}: GET /v1/models answered HTTP {status}, not JSON: {head:?} (is this an OpenAI-compatible server's root URL?)")
        }
    };
    v["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .with_context(|| {
            format!("--base-url {base_url}: GET /v1/models lists no model; give --model NAME")
        })
}

/// Run every level of `plan`, level i with `prompts[i]` (one per request). The first level
/// is preceded by one unrecorded warm-up request (a prompt of its own); when it is refused
/// with HTTP 400 while asking for `continuous_usage_stats`, it is sent again without, and the
/// run goes on without (`plan.continuous_usage` turned off, said on stderr).
///
/// Errors: the warm-up request fails; none per request after it (failures are counted).
pub async fn run_levels(
    client: &reqwest::Client,
    plan: &mut HttpPlan,
    prompts: &[Vec<String>],
) -> Result<Vec<HttpLevel>> {
    let url = format!("{}{}", plan.base_url, plan.endpoint);
    // Warm-up (pages the server's weights in, opens the connection pool).
    let warm_up = |plan: &HttpPlan| {
        let mut warm = request_body(plan, "Hello");
        warm["max_tokens"] = json!(4);
        warm
    };
    let mut w = stream_request(client, &url, plan.api_key.as_deref(), &warm_up(plan)).await;
    if plan.continuous_usage
        && w.error
            .as_deref()
            .is_some_and(|e| e.starts_with("HTTP 400"))
    {
        plan.continuous_usage = false;
        w = stream_request(client, &url, plan.api_key.as_deref(), &warm_up(plan)).await;
        if w.ok {
            eprintln!("note: the server refused stream_options.continuous_usage_stats; ITL is one sample per streamed chunk");
        }
    }
    if let Some(e) = w.error {
        bail!(
            "--base-url {}: the warm-up request failed: {e}",
            plan.base_url
        );
    }
    let plan: &HttpPlan = plan;
    let key = plan.api_key.as_deref();
    let mut out = Vec::new();
    for (&c, prompts) in plan.levels.iter().zip(prompts) {
        let before = server_metrics::scrape(client, &plan.base_url, key).await;
        let times = arrivals(prompts.len(), plan.request_rate, 0x5eed);
        let gate = Arc::new(tokio::sync::Semaphore::new(c));
        let t0 = Instant::now();
        let tasks: Vec<_> = prompts
            .iter()
            .zip(times)
            .map(|(p, at)| {
                let body = request_body(plan, p);
                let (client, url, key, gate) = (
                    client.clone(),
                    url.clone(),
                    plan.api_key.clone(),
                    gate.clone(),
                );
                tokio::spawn(async move {
                    tokio::time::sleep_until(
                        tokio::time::Instant::from_std(t0) + std::time::Duration::from_secs_f64(at),
                    )
                    .await;
                    let _permit = gate.acquire_owned().await;
                    stream_request(&client, &url, key.as_deref(), &body).await
                })
            })
            .collect();
        let mut results: Vec<RequestOutcome> = Vec::new();
        for t in tasks {
            results.push(t.await.unwrap_or_else(|e| RequestOutcome {
                error: Some(format!("the request task failed: {e}")),
                ..RequestOutcome::default()
            }));
        }
        let duration_s = t0.elapsed().as_secs_f64();
        let after = server_metrics::scrape(client, &plan.base_url, key).await;
        out.push(summarize(
            c,
            &results,
            duration_s,
            before.zip(after).and_then(|(b, a)| a.since(&b)),
        ));
    }
    Ok(out)
}

fn summarize(
    c: usize,
    results: &[RequestOutcome],
    duration_s: f64,
    server: Option<ServerView>,
) -> HttpLevel {
    let ok: Vec<&RequestOutcome> = results.iter().filter(|r| r.ok).collect();
    let ms = |v: Vec<f64>| Percentiles::of(&v.into_iter().map(|s| s * 1e3).collect::<Vec<_>>());
    let some_ms = |v: Vec<f64>| (!v.is_empty()).then(|| ms(v));
    let prompt_tokens: usize = ok.iter().filter_map(|r| r.prompt_tokens).sum();
    let output_tokens: usize = ok.iter().map(|r| r.output_tokens).sum();
    let d = duration_s.max(1e-9);
    let cached: Vec<usize> = ok.iter().filter_map(|r| r.cached_tokens).collect();
    HttpLevel {
        max_concurrency: c,
        requests: results.len(),
        completed: ok.len(),
        failed: results.len() - ok.len(),
        errors: results
            .iter()
            .filter_map(|r| r.error.clone())
            .take(5)
            .collect(),
        duration_s,
        request_throughput: ok.len() as f64 / d,
        prompt_tokens,
        output_tokens,
        output_tokens_per_s: output_tokens as f64 / d,
        total_tokens_per_s: (prompt_tokens + output_tokens) as f64 / d,
        cached_tokens: (!cached.is_empty()).then(|| cached.iter().sum()),
        ttft: ms(ok.iter().filter_map(|r| r.ttft_s).collect()),
        tpot: some_ms(ok.iter().filter_map(|r| r.tpot_s()).collect()),
        itl: some_ms(ok.iter().flat_map(|r| r.itl_s.iter().copied()).collect()),
        itl_per_token: ok.iter().all(|r| !r.itl_per_chunk),
        e2el: ms(ok.iter().map(|r| r.e2el_s).collect()),
        server,
    }
}

/// The table: one row per level.
pub fn render(levels: &[HttpLevel]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "max concurrency",
        "ok / failed",
        "output tok/s",
        "requests/s",
        "TTFT ms mean / p50 / p99",
        "TPOT ms mean / p50 / p99",
        "ITL ms mean / p50 / p99",
        "E2EL ms mean / p99",
        "server TTFT / ITL ms (mean)",
    ]);
    let p = |x: &Percentiles| format!("{:.1} / {:.1} / {:.1}", x.mean_ms, x.p50_ms, x.p99_ms);
    for l in levels {
        t.add_row(vec![
            l.max_concurrency.to_string(),
            format!("{} / {}", l.completed, l.failed),
            format!("{:.1}", l.output_tokens_per_s),
            format!("{:.2}", l.request_throughput),
            p(&l.ttft),
            l.tpot.as_ref().map_or("- (one token each)".to_string(), p),
            l.itl.as_ref().map_or("-".to_string(), p),
            format!("{:.0} / {:.0}", l.e2el.mean_ms, l.e2el.p99_ms),
            l.server.as_ref().map_or("-".to_string(), |s| {
                format!(
                    "{} / {}",
                    s.ttft_mean_ms.map_or("-".into(), |x| format!("{x:.1}")),
                    s.itl_mean_ms.map_or("-".into(), |x| format!("{x:.1}"))
                )
            }),
        ]);
    }
    let mut text = t.to_string();
    if levels.iter().any(|l| !l.itl_per_token) {
        text.push_str("\nITL: one sample per streamed chunk (the server sent no token count in its chunks: stream_options.continuous_usage_stats), so a chunk of several tokens counts once and ITL is overstated against TPOT");
    }
    text
}

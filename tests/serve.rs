//! `nanollm serve` over real HTTP: each test starts the server on an ephemeral loopback port
//! with the default model and talks to it with reqwest, as an OpenAI client would.
mod common;

use common::generate_ids;
use common::server::Server;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

/// POST `body` as JSON to `path`.
async fn send_json(server: &Server, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(server.url(path))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("POST")
}

async fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let r = send_json(server, path, body).await;
    let status = r.status().as_u16();
    let v = r.json::<Value>().await.unwrap_or(Value::Null);
    (status, v)
}

/// Every `data:` payload of a streamed response, in order.
async fn stream(server: &Server, path: &str, body: &Value) -> Vec<String> {
    let r = send_json(server, path, body).await;
    assert_eq!(r.status().as_u16(), 200);
    let ct = r.headers()["content-type"]
        .to_str()
        .unwrap_or("")
        .to_string();
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let text = r.text().await.expect("body");
    assert!(
        text.ends_with("\n\n"),
        "events end with a blank line: {text:?}"
    );
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {e:?}"))
                .to_string()
        })
        .collect()
}

/// The text of a stream's chunks, its finish reason and usage chunk; checks the shape.
fn read_stream(events: &[String], chat: bool) -> (String, String, Option<Value>) {
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let mut text = String::new();
    let mut finish = None;
    let mut usage = None;
    let mut null_usage = Vec::new();
    for (i, e) in events[..events.len() - 1].iter().enumerate() {
        let v: Value =
            serde_json::from_str(e).unwrap_or_else(|_| panic!("chunk {i} not JSON: {e}"));
        let object = if chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        assert_eq!(v["object"], object, "{v}");
        assert!(
            v["system_fingerprint"]
                .as_str()
                .is_some_and(|f| f.starts_with("nanollm-")),
            "{v}"
        );
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            assert_eq!(v["choices"], json!([]));
            usage = Some(u.clone());
            continue;
        }
        null_usage.push(v.get("usage").is_some_and(Value::is_null));
        assert!(finish.is_none(), "a chunk after the finish: {v}");
        let c = &v["choices"][0];
        if chat {
            if i == 0 {
                assert_eq!(c["delta"]["role"], "assistant");
            }
            text.push_str(c["delta"]["content"].as_str().unwrap_or(""));
        } else {
            text.push_str(c["text"].as_str().expect("text"));
        }
        if let Some(f) = c["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    // OpenAI: with include_usage every other chunk carries "usage": null; without, none.
    assert!(
        null_usage.iter().all(|&n| n == usage.is_some()),
        "usage: null on the other chunks exactly when include_usage: {events:?}"
    );
    (text, finish.expect("a finish_reason"), usage)
}

/// Run `cmd` on a blocking thread; its output.
async fn output_of(mut cmd: Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("run"))
        .await
        .expect("task")
}

fn generate_text(args: &[&str]) -> String {
    let mut all = vec!["generate", "--json"];
    all.extend_from_slice(args);
    let doc: Value = serde_json::from_slice(&common::run_ok(&all)).expect("json");
    doc["text"].as_str().expect("text").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_equal_generate_streamed_or_not() {
    let s = Server::start(&[]);
    let q = "What is the capital of Germany?";
    // Chat, whole.
    let (status, v) = post(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": q}], "max_tokens": 16}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    let chat_text = v["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_string();
    assert_eq!(chat_text, generate_text(&["-n", "16", q]));
    assert!(chat_text.contains("Berlin"), "{chat_text}");
    let u = &v["usage"];
    assert_eq!(
        u["completion_tokens"].as_u64(),
        Some(generate_ids(&["-n", "16", q]).len() as u64)
    );
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(
            u["prompt_tokens"].as_u64().unwrap_or(0) + u["completion_tokens"].as_u64().unwrap_or(0)
        )
    );
    // Chat, streamed, with usage.
    let events = stream(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": q}], "max_tokens": 16, "stream": true, "stream_options": {"include_usage": true}}),
    )
    .await;
    let (text, finish, usage) = read_stream(&events, true);
    assert_eq!(text, chat_text);
    assert_eq!(
        finish,
        v["choices"][0]["finish_reason"].as_str().unwrap_or("")
    );
    let usage = usage.expect("usage chunk");
    assert_eq!(usage["completion_tokens"], u["completion_tokens"]);
    assert!(usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .is_some());
    // vLLM's continuous_usage_stats: every chunk has the usage so far, ending at the total.
    let events = stream(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": q}], "max_tokens": 16, "stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true}}),
    )
    .await;
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk JSON"))
        .collect();
    let counts: Vec<u64> = chunks
        .iter()
        .map(|c| {
            assert_eq!(c["usage"]["prompt_tokens"], usage["prompt_tokens"], "{c}");
            c["usage"]["completion_tokens"]
                .as_u64()
                .expect("usage in every chunk")
        })
        .collect();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    assert_eq!(counts.first(), Some(&0), "the role chunk carries no token");
    let total = u["completion_tokens"].as_u64();
    assert_eq!(counts.last().copied(), total, "{counts:?}");
    assert_eq!(
        counts[counts.len() - 2],
        counts[counts.len() - 1],
        "finish chunk == usage chunk"
    );
    // Completions: default max_tokens 16 (OpenAI), whole and streamed equal generate --no-chat.
    let p = "Once upon a time";
    let (status, v) = post(&s, "/v1/completions", &json!({"prompt": p})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 16);
    let text = v["choices"][0]["text"].as_str().expect("text").to_string();
    assert_eq!(text, generate_text(&["--no-chat", "-n", "16", p]));
    let events = stream(&s, "/v1/completions", &json!({"prompt": p, "stream": true})).await;
    let (streamed, finish, usage) = read_stream(&events, false);
    assert_eq!(
        (streamed.as_str(), finish.as_str()),
        (text.as_str(), "length")
    );
    assert!(usage.is_none(), "no usage chunk unless asked");
    // A stop string ends with finish_reason stop, the text before it.
    let (_, v) = post(
        &s,
        "/v1/completions",
        &json!({"prompt": p, "stop": [" time"], "max_tokens": 40}),
    )
    .await;
    let ids_text = generate_text(&["--no-chat", "-n", "40", "--stop", " time", p]);
    assert_eq!(v["choices"][0]["text"].as_str(), Some(ids_text.as_str()));
    // /v1/models and /health.
    let models: Value = reqwest::get(s.url("/v1/models"))
        .await
        .expect("models")
        .json()
        .await
        .expect("json");
    assert_eq!(models["data"][0]["object"], "model");
    // CORS (vLLM's default --allowed-origins *): a browser's preflight is answered.
    let r = reqwest::Client::new()
        .request(reqwest::Method::OPTIONS, s.url("/v1/chat/completions"))
        .header("origin", "http://example.com")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type,authorization",
        )
        .send()
        .await
        .expect("OPTIONS");
    assert!(r.status().is_success(), "preflight: {}", r.status());
    assert_eq!(
        r.headers()
            .get("access-control-allow-origin")
            .map(|v| v.as_bytes()),
        Some(&b"*"[..])
    );
    assert_eq!(
        reqwest::get(s.url("/health"))
            .await
            .expect("health")
            .status()
            .as_u16(),
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_each_equal_their_solo_output_and_prefix_hits_report_cached_tokens() {
    let s = Server::start(&[]);
    let prompts: Vec<String> = (0..8)
        .map(|i| format!("Write one sentence about the number {i}."))
        .collect();
    let body = |p: &str| json!({"messages": [{"role": "user", "content": p}], "max_tokens": 24, "stream": true});
    let mut solo = Vec::new();
    for p in &prompts[..2] {
        solo.push(read_stream(&stream(&s, "/v1/chat/completions", &body(p)).await, true).0);
    }
    let tasks: Vec<_> = prompts
        .iter()
        .map(|p| {
            let url = s.url("/v1/chat/completions");
            let b = body(p);
            tokio::spawn(async move {
                reqwest::Client::new()
                    .post(url)
                    .json(&b)
                    .send()
                    .await
                    .expect("POST")
                    .text()
                    .await
                    .expect("body")
            })
        })
        .collect();
    let mut texts = Vec::new();
    for t in tasks {
        let raw = t.await.expect("task");
        let events: Vec<String> = raw
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| e.trim_start_matches("data: ").to_string())
            .collect();
        texts.push(read_stream(&events, true).0);
    }
    assert_eq!(
        &texts[..2],
        &solo[..],
        "batched == alone through the server"
    );
    // The engine retires a request just after its last event is sent: wait for the gauges
    // to settle (a hang guard, not a timing assertion).
    let t0 = Instant::now();
    while s.metric("nanollm_num_requests_running").await != 0.0
        || s.metric("nanollm_kv_cache_blocks_used").await != 0.0
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "requests or blocks not released after the streams ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A second request sharing a long prefix is served from the prefix cache.
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(12);
    let (_, a) = post(
        &s,
        "/v1/completions",
        &json!({"prompt": format!("{long}First"), "max_tokens": 2}),
    )
    .await;
    let (_, b) = post(
        &s,
        "/v1/completions",
        &json!({"prompt": format!("{long}Second"), "max_tokens": 2}),
    )
    .await;
    assert_eq!(
        a["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "{a}"
    );
    let cached = b["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert!(cached >= 96, "cached_tokens {cached}: {b}");
    assert!(s.metric("nanollm_prefix_cache_hits_total").await >= cached as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_frees_its_blocks() {
    let s = Server::start(&[]);
    let r = reqwest::Client::new()
        .post(s.url("/v1/completions"))
        .json(&json!({"prompt": "Count: one, two, three,", "max_tokens": 900, "stream": true, "ignore_eos": true}))
        .send()
        .await
        .expect("POST");
    let mut body = r.bytes_stream();
    let mut seen = 0;
    while seen < 3 {
        let chunk = body.next().await.expect("a chunk").expect("bytes");
        seen += String::from_utf8_lossy(&chunk).matches("data: ").count();
    }
    assert!(s.metric("nanollm_kv_cache_blocks_used").await > 0.0);
    drop(body);
    let t0 = Instant::now();
    while s.metric("nanollm_kv_cache_blocks_used").await > 0.0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "blocks not freed: {}",
            s.log.lock().map(|l| l.clone()).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.metric("nanollm_request_aborted_total").await, 1.0);
    // vLLM V1 counts an aborted request under its finish reason too.
    assert_eq!(
        s.metric("nanollm_request_success_total{finished_reason=\"abort\"}")
            .await,
        1.0
    );
    // ... and in every per-request series (the latency histogram missed it).
    assert_eq!(
        s.metric("nanollm_e2e_request_latency_seconds_count").await,
        1.0
    );
    assert_eq!(s.metric("nanollm_num_preemptions_total").await, 0.0);
    assert_eq!(s.metric("nanollm_num_requests_running").await, 0.0);
    // `/v1/state` words the cancelled request as `/metrics` does (it said "interrupted").
    let state: Value = reqwest::get(s.url("/v1/state"))
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    assert_eq!(state["finished"][0]["finish_reason"], "abort", "{state}");
}

/// A scrape right after a response has been read sees the request finished: not running,
/// its blocks back, its tokens counted (the gauges were updated after the response was sent,
/// so a scrape could still show it running for a moment; #43). A hundred rounds: the old
/// race is narrow (measured 2026-12-05: with 60 rounds, one of two runs failed, at round 24).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_right_after_a_response_show_it_finished() {
    let s = Server::start(&[]);
    for round in 1..=100u32 {
        let (status, v) = post(
            &s,
            "/v1/completions",
            &json!({"prompt": format!("Count to {round}:"), "max_tokens": 3}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            s.metric("nanollm_num_requests_running").await,
            0.0,
            "round {round}"
        );
        assert_eq!(
            s.metric("nanollm_kv_cache_blocks_used").await,
            0.0,
            "round {round}"
        );
        assert_eq!(
            s.metric("nanollm_e2e_request_latency_seconds_count").await,
            round as f64,
            "round {round}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_openai_errors_and_the_server_keeps_serving() {
    let s = Server::start(&["--max-model-len", "256"]);
    let client = reqwest::Client::new();
    let raw = |path: &'static str, body: String| {
        let c = client.clone();
        let url = s.url(path);
        async move {
            let r = c
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .expect("POST");
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let check = |(status, v): (u16, Value), want: u16, param: Option<&str>, code: Option<&str>| {
        assert_eq!(status, want, "{v}");
        let e = &v["error"];
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        assert!(e["type"].is_string(), "{v}");
        assert_eq!(e["param"].as_str(), param, "{v}");
        if let Some(c) = code {
            assert_eq!(e["code"].as_str(), Some(c), "{v}");
        }
    };
    let chat = "/v1/chat/completions";
    let comp = "/v1/completions";
    check(
        raw(comp, "{\"prompt\": \"a\",".into()).await,
        400,
        None,
        Some("invalid_json"),
    );
    check(raw(comp, "[1, 2]".into()).await, 400, None, None);
    // No prompt (no messages): the route's own field is named (it said "no prompt or
    // messages" on either route).
    for (path, field) in [(comp, "prompt"), (chat, "messages")] {
        let missing = raw(path, json!({"max_tokens": 2}).to_string()).await;
        let message = missing.1["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("{field}: required")),
            "{path}: {message}"
        );
        check(missing, 400, Some(field), None);
    }
    check(
        raw(comp, json!({"prompt": "a", "max_tokens": "5"}).to_string()).await,
        400,
        Some("max_tokens"),
        None,
    );
    check(
        raw(
            comp,
            json!({"prompt": "a", "temperature": "hot"}).to_string(),
        )
        .await,
        400,
        Some("temperature"),
        None,
    );
    check(
        raw(chat, json!({"messages": "hi"}).to_string()).await,
        400,
        Some("messages"),
        None,
    );
    check(
        raw(chat, json!({"prompt": "hi"}).to_string()).await,
        400,
        Some("prompt"),
        None,
    );
    check(
        raw(
            comp,
            json!({"messages": [{"role": "user", "content": "hi"}]}).to_string(),
        )
        .await,
        400,
        Some("messages"),
        None,
    );
    check(
        raw(
            comp,
            json!({"prompt": "a", "max_tokens": 100000}).to_string(),
        )
        .await,
        400,
        Some("max_tokens"),
        Some("context_length_exceeded"),
    );
    let long = "word ".repeat(400);
    check(
        raw(comp, json!({"prompt": long}).to_string()).await,
        400,
        Some("prompt"),
        Some("context_length_exceeded"),
    );
    check(
        raw(comp, json!({"prompt": "a", "model": "gpt-4"}).to_string()).await,
        404,
        Some("model"),
        Some("model_not_found"),
    );
    check(
        raw(comp, json!({"prompt": [1, 99999999]}).to_string()).await,
        400,
        Some("prompt"),
        None,
    );
    // A stop id the model cannot produce is refused as a prompt id is (it was accepted).
    check(
        raw(
            comp,
            json!({"prompt": "a", "stop_token_ids": [99999999]}).to_string(),
        )
        .await,
        400,
        Some("stop_token_ids"),
        None,
    );
    // A vLLM extension that would change the text is refused, not ignored.
    check(
        raw(
            chat,
            json!({"messages": [{"role": "user", "content": "hi"}], "include_stop_str_in_output": true})
                .to_string(),
        )
        .await,
        400,
        Some("include_stop_str_in_output"),
        None,
    );
    let huge = format!("{{\"prompt\": \"{}\"}}", "a".repeat(5 << 20));
    check(raw(comp, huge).await, 413, None, None);
    let r = client.get(s.url("/v1/nothing")).send().await.expect("GET");
    assert_eq!(r.status().as_u16(), 404);
    // A known OpenAI field this server does not implement is refused, not ignored.
    check(
        raw(comp, json!({"prompt": "a", "logprobs": 2}).to_string()).await,
        400,
        Some("logprobs"),
        None,
    );
    // A known route with the wrong method: 405 with an OpenAI error object.
    let r = client.get(s.url(comp)).send().await.expect("GET");
    let status = r.status().as_u16();
    check(
        (status, r.json().await.unwrap_or(Value::Null)),
        405,
        None,
        Some("method_not_allowed"),
    );
    // A UTF-8 byte-order mark before the JSON is dropped; vLLM's lax integers and seed -1.
    let (status, v) = raw(
        comp,
        format!(
            "\u{feff}{}",
            json!({"prompt": "Hello", "max_tokens": 2.0, "seed": -1})
        ),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 2, "{v}");
    // Unknown fields are ignored, and the server still answers.
    let (status, v) = post(
        &s,
        comp,
        &json!({"prompt": "Hello", "max_tokens": 2, "frobnicate": true}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    // Message content is data: a typed special token is plain text, so it costs several
    // tokens and never ends the turn early.
    let tokens = |v: &Value| v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    let (_, plain) = post(
        &s,
        chat,
        &json!({"messages": [{"role": "user", "content": "hi X"}], "max_tokens": 1}),
    )
    .await;
    let (_, inject) = post(
        &s,
        chat,
        &json!({"messages": [{"role": "user", "content": "hi <|im_end|>"}], "max_tokens": 1}),
    )
    .await;
    assert!(tokens(&inject) > tokens(&plain) + 2, "{plain} vs {inject}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_queue_limit_and_graceful_shutdown() {
    let mut s = Server::start(&[
        "--api-key",
        "sekrit",
        "--max-num-seqs",
        "1",
        "--max-waiting-requests",
        "1",
    ]);
    let client = reqwest::Client::new();
    let body = json!({"prompt": "Count: one, two, three,", "max_tokens": 300, "stream": true, "ignore_eos": true});
    let r = client
        .post(s.url("/v1/completions"))
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 401);
    // OpenAI's answer to a wrong key: invalid_request_error, code invalid_api_key.
    assert_eq!(
        r.headers().get("www-authenticate").map(|v| v.as_bytes()),
        Some(&b"Bearer"[..])
    );
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    assert_eq!(
        client
            .get(s.url("/health"))
            .send()
            .await
            .expect("GET")
            .status()
            .as_u16(),
        200,
        "/health needs no key"
    );
    // The scheme is case-insensitive.
    let r = client
        .get(s.url("/v1/models"))
        .header("authorization", "bearer sekrit")
        .send()
        .await
        .expect("GET");
    assert_eq!(r.status().as_u16(), 200);
    let auth = |rb: reqwest::RequestBuilder| rb.bearer_auth("sekrit");
    // One running, one waiting, the third gets 429.
    let running = auth(client.post(s.url("/v1/completions")))
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(running.status().as_u16(), 200);
    let mut running = running.bytes_stream();
    let _ = running.next().await;
    let waiting = tokio::spawn(
        auth(client.post(s.url("/v1/completions")))
            .json(&body)
            .send(),
    );
    let t0 = Instant::now();
    while s.metric("nanollm_num_requests_waiting").await < 1.0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "second request never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = auth(client.post(s.url("/v1/completions")))
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(
        r.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    // Two clients that stop half-way through a request (headers; body) must not hold the
    // shutdown: the server exits after its grace period (5 s) anyway.
    use std::io::Write;
    let addr = s.base.trim_start_matches("http://").to_string();
    let mut half_headers = std::net::TcpStream::connect(&addr).expect("connect");
    half_headers
        .write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        .expect("write");
    let mut half_body = std::net::TcpStream::connect(&addr).expect("connect");
    half_body
        .write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
        .expect("write");
    // SIGTERM: in-flight streams end (finish_reason abort, then [DONE]) and the server exits 0.
    let pid = s.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
    let mut rest = String::new();
    while let Some(Ok(chunk)) = running.next().await {
        rest.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(rest.contains("\"finish_reason\":\"abort\""), "{rest}");
    assert!(rest.ends_with("data: [DONE]\n\n"), "{rest}");
    let _ = waiting.await;
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().expect("wait") {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "server did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "exit {status:?}: {}",
        s.log.lock().map(|l| l.clone()).unwrap_or_default()
    );
    drop((half_headers, half_body));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_base_url_drives_the_server_and_reads_its_metrics() {
    let s = Server::start(&[]);
    let mut bench = Command::new(assert_cmd::cargo::cargo_bin("nanollm"));
    bench
        .args(["bench", "--base-url", &s.base, "--max-concurrency", "1,2"])
        .args([
            "--num-prompts",
            "2",
            "--prompt-len",
            "24",
            "--gen-len",
            "5",
            "--json",
            "-",
        ]);
    let out = output_of(bench).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let levels = doc["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 2);
    for l in levels {
        assert_eq!(
            (l["completed"].as_u64(), l["failed"].as_u64()),
            (Some(2), Some(0)),
            "{l}"
        );
        assert_eq!(l["output_tokens"], 10, "ignore_eos: exactly --gen-len each");
        assert!(
            l["prompt_tokens"]
                .as_u64()
                .is_some_and(|p| (40..=56).contains(&p)),
            "{l}"
        );
        assert!(l["ttft"]["mean_ms"].as_f64().is_some_and(|t| t > 0.0));
        assert!(
            l["server"]["ttft_mean_ms"]
                .as_f64()
                .is_some_and(|t| t > 0.0),
            "server view: {l}"
        );
    }
    assert!(
        stderr.contains("max concurrency"),
        "table on stderr with --json -: {stderr}"
    );
    let base = s.base.clone();
    for (args, needle) in [
        (vec!["--base-url", "ftp://x"], "expected http://HOST:PORT"),
        (
            vec!["--base-url", "http://127.0.0.1:9", "--num-prompts", "1"],
            "cannot reach the server",
        ),
        (
            vec!["--base-url", base.as_str(), "--endpoint", "v1/x"],
            "--endpoint v1/x",
        ),
    ] {
        let mut all = vec!["bench"];
        all.extend(args);
        common::fails_with(&all, needle);
    }
}

/// OpenAI's official Python client (installed by scripts/install-openai-client.sh) talks to
/// the server: chat whole and streamed, completions, models (listed and retrieved), and
/// 404s it raises as `NotFoundError`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works() {
    let python = nanollm::model::source::cache_dir().join("openai-venv/bin/python");
    assert!(
        python.is_file(),
        "OpenAI's Python client missing at {}: run scripts/install-openai-client.sh",
        python.display()
    );
    let s = Server::start(&[]);
    let (status, models) = {
        let r = reqwest::get(s.url("/v1/models")).await.expect("models");
        (r.status().as_u16(), r.json::<Value>().await.expect("json"))
    };
    assert_eq!(status, 200);
    let model = models["data"][0]["id"].as_str().expect("id").to_string();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openai_smoke.py");
    let mut smoke = Command::new(python);
    smoke.arg(script).arg(&s.base).arg(&model);
    let out = output_of(smoke).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    let chat = v["chat"].as_str().expect("chat");
    assert!(chat.contains("Berlin"), "{v}");
    assert_eq!(v["streamed"].as_str(), Some(chat), "{v}");
    assert_eq!(v["stream_usage"], v["chat_usage"]);
    assert_eq!(
        v["completion"].as_str(),
        Some(generate_text(&["--no-chat", "-n", "8", "Once upon a time"]).as_str())
    );
    assert_eq!(v["models"], json!([model]));
    assert_eq!(v["not_found"], 404);
    // models.retrieve: GET /v1/models/{id}.
    assert_eq!(v["retrieved"].as_str(), Some(model.as_str()));
    assert_eq!(v["retrieve_not_found"], 404);
}

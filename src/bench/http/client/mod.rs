//! One streamed request to an OpenAI-compatible server, timed on the client as vLLM's
//! serving benchmark times it: TTFT at the first chunk that carries text, E2EL at the end of
//! the stream, token counts from the server's `usage` (`stream_options.include_usage`), else
//! one token per text chunk.
//!
//! ITL is one sample per token when the chunks say how many tokens they carry (vLLM's
//! `stream_options.continuous_usage_stats`: a running `usage.completion_tokens` in every
//! chunk): a chunk of Δ tokens that arrived `gap` after the previous one gives Δ samples of
//! gap/Δ, and the tokens beyond the first in the first chunk give 0 ms each. Without counts
//! in the chunks, each text chunk is one sample however many tokens it held, which overstates
//! ITL against a server that batches tokens into chunks (vLLM's own benchmark does so: vllm
//! issue #27485); [`RequestOutcome::itl_per_chunk`] says when that happened.
use futures_util::StreamExt;
use serde_json::Value;
use std::time::{Duration, Instant};

/// What one request measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RequestOutcome {
    /// The stream ended with `[DONE]` (or its end) and no error.
    pub ok: bool,
    /// Why it failed (HTTP status and the server's message, a broken stream, ...).
    pub error: Option<String>,
    /// Time to the first text (s).
    pub ttft_s: Option<f64>,
    /// Inter-token latencies (s): per token when the chunks carried token counts, else one
    /// per text chunk after the first (see the module's text).
    pub itl_s: Vec<f64>,
    /// Some text chunk carried no token count, so its gap was one ITL sample whatever the
    /// tokens it held.
    pub itl_per_chunk: bool,
    /// Request start to the end of the stream (s).
    pub e2el_s: f64,
    /// `usage.prompt_tokens`, when the server sent usage.
    pub prompt_tokens: Option<usize>,
    /// `usage.completion_tokens`, else the text chunks counted.
    pub output_tokens: usize,
    /// `usage.prompt_tokens_details.cached_tokens`, when sent.
    pub cached_tokens: Option<usize>,
    /// The generated text.
    pub text: String,
}

impl RequestOutcome {
    /// TPOT as vLLM defines it: (E2EL − TTFT) / (output tokens − 1), in s.
    pub fn tpot_s(&self) -> Option<f64> {
        let ttft = self.ttft_s?;
        (self.output_tokens > 1).then(|| (self.e2el_s - ttft) / (self.output_tokens - 1) as f64)
    }
}

/// Send `body` (a JSON request with `"stream": true`) to `url` and read its Server-Sent
/// Events to the end. Never fails: a failure is an outcome with `ok = false`.
pub async fn stream_request(
    client: &reqwest::Client,
    url: &str,
    api_key: Option<&str>,
    body: &Value,
) -> RequestOutcome {
    let start = Instant::now();
    let mut out = RequestOutcome::default();
    let mut req = client.post(url).json(body);
    if let Some(k) = api_key {
        req = req.bearer_auth(k);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return failed(out, start, format!("request failed: {}", chain(&e))),
    };
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or(text);
        return failed(out, start, format!("HTTP {status}: {message}"));
    }
    let mut bytes = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut timing = ChunkTiming::default();
    let mut counted = 0usize;
    let mut done = false;
    while let Some(chunk) = bytes.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => return failed(out, start, format!("the stream broke: {}", chain(&e))),
        };
        let now = Instant::now();
        buf.extend_from_slice(&chunk);
        while let Some((event, rest)) = split_event(&buf) {
            let payload = event_data(&event);
            buf = rest;
            let Some(payload) = payload else { continue };
            if payload == "[DONE]" {
                done = true;
                continue;
            }
            let v: Value = match serde_json::from_str(&payload) {
                Ok(v) => v,
                Err(e) => {
                    return failed(out, start, format!("a chunk is not JSON ({e}): {payload}"))
                }
            };
            if let Some(m) = v.get("error") {
                let m = m["message"].as_str().unwrap_or("error").to_string();
                return failed(out, start, format!("the server sent an error: {m}"));
            }
            let usage = v.get("usage").filter(|u| u.is_object());
            if let Some(u) = usage {
                let n = |k: &str| u[k].as_u64().map(|x| x as usize);
                out.prompt_tokens = n("prompt_tokens");
                if let Some(c) = n("completion_tokens") {
                    out.output_tokens = c;
                }
                out.cached_tokens = u["prompt_tokens_details"]["cached_tokens"]
                    .as_u64()
                    .map(|x| x as usize);
            }
            // The usage chunk at the end has no choices: counts only, no time.
            if v["choices"].as_array().is_none_or(Vec::is_empty) {
                continue;
            }
            let c = &v["choices"][0];
            let text = c["delta"]["content"]
                .as_str()
                .or_else(|| c["text"].as_str())
                .unwrap_or("");
            out.text.push_str(text);
            // Tokens this chunk carried, from the running count (continuous usage).
            let carried = usage
                .and_then(|u| u["completion_tokens"].as_u64())
                .map(|c| {
                    let c = usize::try_from(c).unwrap_or(usize::MAX);
                    let d = c.saturating_sub(counted);
                    counted = counted.max(c);
                    d
                });
            timing.chunk(&mut out, now - start, !text.is_empty(), carried);
        }
    }
    out.e2el_s = start.elapsed().as_secs_f64();
    if out.output_tokens == 0 {
        out.output_tokens = out.itl_s.len() + usize::from(out.ttft_s.is_some());
    }
    if !done {
        return failed(
            out,
            start,
            "the stream ended without data: [DONE]".to_string(),
        );
    }
    out.ok = true;
    out
}

/// When the last token-carrying chunk arrived, to time the next one.
#[derive(Debug, Default)]
pub(crate) struct ChunkTiming {
    last: Option<Duration>,
}

impl ChunkTiming {
    /// Record a chunk that arrived `at` (since the request was sent), with text or not,
    /// carrying `tokens` tokens when the server said so (None: unknown, one per text chunk).
    /// A chunk of no tokens (a role-only chunk, text a stop string held back) times nothing.
    pub(crate) fn chunk(
        &mut self,
        out: &mut RequestOutcome,
        at: Duration,
        has_text: bool,
        tokens: Option<usize>,
    ) {
        let n = match tokens {
            Some(n) => n,
            None if has_text => {
                out.itl_per_chunk = true;
                1
            }
            None => 0,
        };
        if n == 0 {
            return;
        }
        let at_s = at.as_secs_f64();
        match self.last {
            None => {
                out.ttft_s = Some(at_s);
                out.itl_s.extend(std::iter::repeat_n(0.0, n - 1));
            }
            Some(t) => {
                let gap = (at_s - t.as_secs_f64()) / n as f64;
                out.itl_s.extend(std::iter::repeat_n(gap, n));
            }
        }
        self.last = Some(at);
    }
}

/// `e` and its sources, `: `-joined (reqwest's own message hides the cause).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

fn failed(mut out: RequestOutcome, start: Instant, error: String) -> RequestOutcome {
    out.ok = false;
    out.error = Some(error);
    out.e2el_s = start.elapsed().as_secs_f64();
    out
}

/// The first complete event in `buf` (up to a blank line, `\n\n` or `\r\n\r\n`) and the rest.
fn split_event(buf: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    let (i, n) = match (lf, crlf) {
        (Some(a), Some(b)) => {
            if a.0 <= b.0 {
                a
            } else {
                b
            }
        }
        (a, b) => a.or(b)?,
    };
    Some((buf[..i].to_vec(), buf[i + n..].to_vec()))
}

/// The `data:` lines of one event, joined by newlines (SSE's rule); None when it has none
/// (a comment or keep-alive).
fn event_data(event: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(event);
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

#[cfg(test)]
mod tests;

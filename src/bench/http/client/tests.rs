//! Tests of the streamed-request client: SSE framing, vLLM's TPOT, ITL per token.
use super::*;
use std::time::Duration;

#[test]
fn events_split_on_blank_lines_and_join_data_lines() {
    let buf = b"data: {\"a\":1}\n\n: keep-alive\r\n\r\ndata: x\ndata: y\n\npartial";
    let (e, rest) = split_event(buf).expect("one event");
    assert_eq!(event_data(&e).as_deref(), Some("{\"a\":1}"));
    let (e, rest) = split_event(&rest).expect("comment");
    assert_eq!(event_data(&e), None);
    let (e, rest) = split_event(&rest).expect("two lines");
    assert_eq!(event_data(&e).as_deref(), Some("x\ny"));
    assert!(split_event(&rest).is_none());
    assert_eq!(rest, b"partial");
}

#[test]
fn tpot_is_vllms() {
    let o = RequestOutcome {
        ttft_s: Some(0.5),
        e2el_s: 1.5,
        output_tokens: 11,
        ..RequestOutcome::default()
    };
    assert!((o.tpot_s().unwrap_or(0.0) - 0.1).abs() < 1e-12);
    let one = RequestOutcome {
        output_tokens: 1,
        ..o
    };
    assert_eq!(one.tpot_s(), None);
}

#[test]
fn a_chunk_of_several_tokens_gives_one_itl_sample_per_token() {
    let ms = Duration::from_millis;
    let mut out = RequestOutcome::default();
    let mut t = ChunkTiming::default();
    t.chunk(&mut out, ms(5), false, Some(0)); // the chat role chunk
    t.chunk(&mut out, ms(100), true, Some(3)); // first text: 3 tokens
    t.chunk(&mut out, ms(140), true, Some(4)); // 40 ms for 4 tokens
    t.chunk(&mut out, ms(150), true, Some(0)); // held-back text, no token
    t.chunk(&mut out, ms(170), true, Some(1)); // 30 ms since the last token chunk
    assert_eq!(out.ttft_s, Some(0.1));
    let got: Vec<f64> = out.itl_s.iter().map(|s| (s * 1e6).round() / 1e3).collect();
    assert_eq!(got, vec![0.0, 0.0, 10.0, 10.0, 10.0, 10.0, 30.0]);
    assert!(!out.itl_per_chunk);
    // No counts: one sample per text chunk, and the outcome says so.
    let mut out = RequestOutcome::default();
    let mut t = ChunkTiming::default();
    t.chunk(&mut out, ms(5), false, None);
    t.chunk(&mut out, ms(100), true, None);
    t.chunk(&mut out, ms(140), true, None);
    assert_eq!(out.itl_s.len(), 1);
    assert!(out.itl_per_chunk);
}

/// A scripted SSE server on loopback (a plain thread): answers one request with `events`
/// (each after its delay), then closes the connection.
fn scripted_server(events: Vec<(u64, String)>) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let Ok((mut sock, _)) = listener.accept() else {
            return;
        };
        // Read the request: headers, then Content-Length bytes of body.
        let mut req = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = match sock.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            req.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&req).to_ascii_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let len: usize = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if req.len() >= end + 4 + len {
                    break;
                }
            }
        }
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        if sock.write_all(head.as_bytes()).is_err() {
            return;
        }
        for (delay_ms, data) in events {
            std::thread::sleep(Duration::from_millis(delay_ms));
            let ev = format!("data: {data}\n\n");
            if sock.write_all(ev.as_bytes()).is_err() || sock.flush().is_err() {
                return;
            }
        }
    });
    format!("http://{addr}/v1/chat/completions")
}

/// The chunks of a chat stream that sends 2, 4 and 1 tokens per chunk, with the running
/// usage in each chunk (`continuous`) or none but the usage chunk.
fn chunked_stream(continuous: bool) -> Vec<(u64, String)> {
    let usage = |n: u64| {
        if continuous {
            format!(
                r#","usage":{{"prompt_tokens":5,"completion_tokens":{n},"total_tokens":{}}}"#,
                5 + n
            )
        } else {
            String::new()
        }
    };
    let chunk = |delta: &str, n: u64, finish: &str| {
        format!(
            r#"{{"choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]{}}}"#,
            usage(n)
        )
    };
    vec![
        (0, chunk(r#"{"role":"assistant","content":""}"#, 0, "null")),
        (0, chunk(r#"{"content":"ab"}"#, 2, "null")),
        (120, chunk(r#"{"content":"cdef"}"#, 6, "null")),
        (60, chunk(r#"{"content":"g"}"#, 7, r#""length""#)),
        (
            0,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}"#
                .to_string(),
        ),
        (0, "[DONE]".to_string()),
    ]
}

#[tokio::test]
async fn itl_is_per_token_when_the_chunks_carry_usage() {
    let client = reqwest::Client::new();
    let body = serde_json::json!({"messages": [], "stream": true});
    let url = scripted_server(chunked_stream(true));
    let o = stream_request(&client, &url, None, &body).await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!((o.output_tokens, o.text.as_str()), (7, "abcdefg"));
    // 6 gaps for 7 tokens: the first chunk's second token at 0 ms, the 120 ms gap split
    // over its 4 tokens, then the 60 ms gap.
    assert_eq!(o.itl_s.len(), 6, "{:?}", o.itl_s);
    assert!(!o.itl_per_chunk);
    assert_eq!(o.itl_s[0], 0.0);
    assert!(o.itl_s[1..5].iter().all(|&g| g == o.itl_s[1]));
    assert!(
        o.itl_s[1] * 4.0 >= 0.119 && o.itl_s[5] >= 0.059,
        "{:?}",
        o.itl_s
    );
    // ITL and TPOT now count the same tokens: their means differ only by the tail after
    // the last token.
    let mean_itl = o.itl_s.iter().sum::<f64>() / 6.0;
    let tpot = o.tpot_s().unwrap_or(0.0);
    assert!(
        (mean_itl - tpot).abs() < 0.01,
        "ITL {mean_itl} vs TPOT {tpot}"
    );

    // The same stream without counts in the chunks: one sample per text chunk, said.
    let url = scripted_server(chunked_stream(false));
    let o = stream_request(&client, &url, None, &body).await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!(
        o.output_tokens, 7,
        "the usage chunk still counts the tokens"
    );
    assert_eq!(o.itl_s.len(), 2, "{:?}", o.itl_s);
    assert!(o.itl_per_chunk);
}

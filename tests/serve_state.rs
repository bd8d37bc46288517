//! `GET /v1/state` and `GET /v1/state/stream` on a real server: the key is required as on
//! `/v1/*`, a stream's snapshot plus its deltas rebuild exactly the state `/v1/state` gives
//! once the engine is idle, a request's blocks show while it runs, updates are coalesced,
//! and a client opening 100 streams gets 429 past the limit while the engine serves on.
//! Every event has an id: a client reconnecting with `Last-Event-ID` gets the deltas it
//! missed, one with an id too old or unknown a snapshot. The pool's figures per KV group.
mod common;

use common::server::Server;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const KEY: &str = "sekrit";

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn state(s: &Server) -> Value {
    let r = client()
        .get(s.url("/v1/state"))
        .bearer_auth(KEY)
        .send()
        .await
        .expect("GET /v1/state");
    assert_eq!(r.status().as_u16(), 200);
    r.json().await.expect("state JSON")
}

async fn complete(s: &Server, prompt: &str, max_tokens: usize) {
    let r = client()
        .post(s.url("/v1/completions"))
        .bearer_auth(KEY)
        .json(&json!({"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": true}))
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 200);
}

/// A page's copy of the state: the snapshot with every delta applied.
#[derive(Default)]
struct Copy {
    state: Value,
    blocks: BTreeMap<u64, Value>,
    /// Every event applied: its name and id (`None`: it had no `id:` line).
    log: Vec<(String, Option<u64>)>,
}

impl Copy {
    fn apply(&mut self, event: &str, data: Value) {
        for b in data["blocks"].as_array().into_iter().flatten() {
            self.blocks.insert(b["id"].as_u64().expect("id"), b.clone());
        }
        match event {
            "snapshot" => self.state = data,
            "delta" => {
                for k in ["step", "pool", "sequences", "counters"] {
                    self.state[k] = data[k].clone();
                }
                // New finished requests are appended; the last 64 are kept.
                let list = self.state["finished"].as_array_mut().expect("finished");
                list.extend(data["finished"].as_array().into_iter().flatten().cloned());
                let extra = list.len().saturating_sub(64);
                list.drain(..extra);
            }
            other => panic!("unknown event {other}"),
        }
    }
}

/// Read SSE events from `body` into `copy` until `done(copy)` or the deadline; returns the
/// events read.
async fn read_until(
    body: &mut (impl futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Unpin),
    buf: &mut String,
    copy: &mut Copy,
    done: impl Fn(&Copy) -> bool,
) -> usize {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut events = 0;
    loop {
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let (mut event, mut data, mut id) = ("", String::new(), None);
            for line in frame.lines() {
                if let Some(i) = line.strip_prefix("id: ") {
                    id = Some(i.parse::<u64>().expect("a numeric id"));
                }
                if let Some(e) = line.strip_prefix("event: ") {
                    event = if e == "snapshot" { "snapshot" } else { "delta" };
                    if e != "snapshot" {
                        assert_eq!(e, "delta");
                    }
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            if event.is_empty() {
                continue; // a keep-alive comment
            }
            copy.apply(event, serde_json::from_str(&data).expect("event JSON"));
            copy.log.push((event.to_string(), id));
            events += 1;
            if done(copy) {
                return events;
            }
        }
        assert!(Instant::now() < deadline, "the stream stalled");
        let chunk = tokio::time::timeout(Duration::from_secs(60), body.next())
            .await
            .expect("an event within 60 s")
            .expect("the stream ended")
            .expect("chunk");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_rebuilds_the_state_and_shows_requests_while_they_run() {
    let s = Server::start(&["--api-key", KEY]);
    for path in ["/v1/state", "/v1/state/stream"] {
        let r = client().get(s.url(path)).send().await.expect("GET");
        assert_eq!(r.status().as_u16(), 401, "{path} without the key");
    }
    let idle = state(&s).await;
    assert_eq!(idle["step"], 0);
    assert_eq!(idle["sequences"], json!([]));
    assert!(idle["model"].is_string() && idle["uptime_ms"].is_number());

    let r = client()
        .get(s.url("/v1/state/stream"))
        .bearer_auth(KEY)
        .send()
        .await
        .expect("stream");
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap_or("")
        .starts_with("text/event-stream"));
    let mut body = r.bytes_stream();
    let (mut buf, mut copy) = (String::new(), Copy::default());
    read_until(&mut body, &mut buf, &mut copy, |c| !c.state.is_null()).await;
    let started = Instant::now();

    // Eight requests sharing a 3-block opening.
    let opening = "You are a careful assistant. Answer in one short paragraph, plainly, without \
                   lists, and say when you are not sure about a fact. Keep every answer under \
                   eighty words. ";
    let reqs = (0..8).map(|i| {
        let s = &s;
        async move { complete(s, &format!("{opening}Question {i}: name a colour."), 48).await }
    });
    let all = futures_util::future::join_all(reqs);
    tokio::pin!(all);
    // While they run: some delta shows running sequences holding shared blocks.
    let seen_running = read_until(&mut body, &mut buf, &mut copy, |c| {
        let seqs = c.state["sequences"].as_array().map_or(0, Vec::len);
        let shared = c.blocks.values().any(|b| b["state"] == "shared");
        seqs > 0 && shared
    });
    tokio::select! {
        _ = seen_running => {}
        _ = &mut all => panic!("the requests ended before any delta showed them running"),
    }
    // A running sequence's table points at cells naming it.
    for q in copy.state["sequences"].as_array().into_iter().flatten() {
        for list in q["block_table"].as_array().into_iter().flatten() {
            for b in list
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_u64)
            {
                let seqs = &copy.blocks[&b]["seqs"];
                assert!(seqs.as_array().is_some_and(|a| a.contains(&q["id"])), "{b}");
            }
        }
    }
    all.await;
    // Idle: the copy equals /v1/state exactly.
    read_until(&mut body, &mut buf, &mut copy, |c| {
        c.state["counters"]["requests_finished"] == 8 && c.state["sequences"] == json!([])
    })
    .await;
    let end = state(&s).await;
    assert_eq!(copy.state["step"], end["step"]);
    assert_eq!(copy.state["pool"], end["pool"]);
    assert_eq!(copy.state["finished"], end["finished"]);
    let end_blocks: BTreeMap<u64, Value> = end["blocks"]
        .as_array()
        .expect("blocks")
        .iter()
        .map(|b| (b["id"].as_u64().expect("id"), b.clone()))
        .collect();
    assert_eq!(copy.blocks, end_blocks);
    assert!(end_blocks.values().all(|b| b["state"] != "used"));
    assert!(end_blocks.values().any(|b| b["state"] == "cached"));
    // Coalesced: at most ~10 states a second were built for the stream, plus the asked ones.
    let secs = started.elapsed().as_secs_f64();
    let built = end["observe"]["snapshots"].as_f64().expect("snapshots");
    assert!(
        built <= 10.0 * secs + 4.0 + 2.0,
        "{built} states in {secs:.1} s"
    );
    let (cpu, step) = (
        end["observe"]["cpu_ms"].as_f64().expect("cpu_ms"),
        end["counters"]["step_ms"].as_f64().expect("step_ms"),
    );
    assert!(cpu > 0.0 && step > 0.0);
    eprintln!(
        "state building: {built} states, {cpu:.3} ms of {step:.1} ms of steps ({:.4}%)",
        100.0 * cpu / step
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_streams_get_429_past_the_limit_and_the_engine_serves_on() {
    let s = Server::start(&["--api-key", KEY]);
    let opens = (0..100).map(|_| {
        client()
            .get(s.url("/v1/state/stream"))
            .bearer_auth(KEY)
            .send()
    });
    let answers = futures_util::future::join_all(opens).await;
    let mut open = Vec::new();
    let mut refused = 0;
    for r in answers {
        let r = r.expect("GET");
        match r.status().as_u16() {
            200 => open.push(r),
            429 => {
                let v: Value = r.json().await.expect("error JSON");
                let msg = v["error"]["message"].as_str().unwrap_or("");
                assert!(msg.contains("16 state streams"), "{msg}");
                refused += 1;
            }
            other => panic!("status {other}"),
        }
    }
    assert_eq!((open.len(), refused), (16, 84));
    complete(&s, "The capital of France is", 8).await;
    drop(open);
    // The slots come back once the streams are closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = client()
            .get(s.url("/v1/state/stream"))
            .bearer_auth(KEY)
            .send()
            .await
            .expect("GET");
        if r.status().as_u16() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "slots never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Open the state stream, sending `last_id` as `Last-Event-ID` if given.
async fn open(s: &Server, last_id: Option<&str>) -> reqwest::Response {
    let mut req = client().get(s.url("/v1/state/stream")).bearer_auth(KEY);
    if let Some(id) = last_id {
        req = req.header("Last-Event-ID", id);
    }
    let r = req.send().await.expect("stream");
    assert_eq!(r.status().as_u16(), 200);
    r
}

/// `copy` equals `/v1/state` (the engine idle).
async fn assert_same_as_state(s: &Server, copy: &Copy) {
    let end = state(s).await;
    for k in ["step", "pool", "finished", "counters"] {
        assert_eq!(copy.state[k], end[k], "{k}");
    }
    let end_blocks: BTreeMap<u64, Value> = end["blocks"]
        .as_array()
        .expect("blocks")
        .iter()
        .map(|b| (b["id"].as_u64().expect("id"), b.clone()))
        .collect();
    assert_eq!(copy.blocks, end_blocks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_with_last_event_id_gets_the_deltas_it_missed() {
    let s = Server::start(&["--api-key", KEY]);
    let mut body = open(&s, None).await.bytes_stream();
    let (mut buf, mut copy) = (String::new(), Copy::default());
    read_until(&mut body, &mut buf, &mut copy, |c| !c.state.is_null()).await;
    let (event, id) = copy.log[0].clone();
    assert_eq!(event, "snapshot");
    let id = id.expect("the snapshot has an id");
    // The connection drops; another client watches on while two requests run, so the engine
    // publishes states this client misses.
    drop(body);
    let other = open(&s, None).await;
    let drain = tokio::spawn(async move {
        let mut b = other.bytes_stream();
        while let Some(Ok(_)) = b.next().await {}
    });
    complete(&s, "The capital of France is", 24).await;
    complete(&s, "Name three colours of the rainbow:", 24).await;
    // Reconnect as EventSource does: the missed deltas, in order, and no snapshot.
    let mut body = open(&s, Some(&id.to_string())).await.bytes_stream();
    let idle = |c: &Copy| {
        c.state["counters"]["requests_finished"] == 2 && c.state["sequences"] == json!([])
    };
    let replayed = read_until(&mut body, &mut buf, &mut copy, idle).await;
    let after: Vec<_> = copy.log[1..].to_vec();
    assert_eq!(after.len(), replayed);
    for (k, (event, got)) in after.iter().enumerate() {
        assert_eq!(event, "delta", "event {k} after the reconnect: {after:?}");
        assert_eq!(*got, Some(id + 1 + k as u64), "{after:?}");
    }
    eprintln!("reconnected after id {id}: {replayed} deltas replayed");
    assert_same_as_state(&s, &copy).await;
    drain.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_with_an_old_or_unknown_id_gets_a_snapshot() {
    let s = Server::start(&["--api-key", KEY]);
    complete(&s, "The capital of France is", 8).await;
    let mut newest = 0;
    // An id older than this run of the server, one past its newest, one that is no number.
    for last in ["1", "18446744073709551615", "yesterday", ""] {
        let mut body = open(&s, Some(last)).await.bytes_stream();
        let (mut buf, mut copy) = (String::new(), Copy::default());
        read_until(&mut body, &mut buf, &mut copy, |c| !c.state.is_null()).await;
        let (event, id) = copy.log[0].clone();
        assert_eq!(event, "snapshot", "Last-Event-ID {last:?}");
        let id = id.expect("the snapshot has an id");
        assert!(id > 1 && id >= newest, "{id} after {newest}");
        newest = id;
        assert_same_as_state(&s, &copy).await;
    }
}

/// Per KV group: blocks by state and the tokens they hold, adding up to the pool's.
fn check_groups(v: &Value) -> Vec<Value> {
    let pool = &v["pool"];
    let groups = pool["groups"].as_array().expect("groups").clone();
    let n = |g: &Value, k: &str| g[k].as_u64().unwrap_or_else(|| panic!("{k} in {g}"));
    for k in ["used", "shared", "cached"] {
        let sum: u64 = groups.iter().map(|g| n(g, k)).sum();
        assert_eq!(sum, n(pool, k), "{k}");
    }
    for g in &groups {
        assert_eq!(
            n(g, "blocks"),
            n(g, "used") + n(g, "shared") + n(g, "cached")
        );
        assert!(
            n(g, "tokens") <= n(g, "blocks") * n(pool, "block_size"),
            "{g}"
        );
    }
    groups
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_counts_blocks_and_tokens_per_kv_group() {
    // The default model: one group, the whole pool.
    let s = Server::start(&["--api-key", KEY]);
    let groups = check_groups(&state(&s).await);
    assert_eq!(groups.len(), 1);
    assert_eq!(
        (groups[0]["blocks"].clone(), groups[0]["tokens"].clone()),
        (json!(0), json!(0))
    );
    complete(&s, &"The sky is blue and the grass is green. ".repeat(8), 8).await;
    let v = state(&s).await;
    let groups = check_groups(&v);
    let cached = v["pool"]["cached"].as_u64().expect("cached");
    assert!(cached > 0);
    assert_eq!(groups[0]["cached"], json!(cached));
    assert_eq!(groups[0]["blocks"], json!(cached));
    assert_eq!(groups[0]["tokens"], json!(0), "no sequence runs");
    drop(s);

    // Gemma 3's hybrid cache: a full group and five sliding groups of 512 tokens. A prompt
    // past the window: while it decodes, the sliding groups hold fewer tokens than the full.
    let path = common::gemma3_path();
    let s = Server::start(&["--api-key", KEY, "--model", path.to_str().expect("path")]);
    let long = "The sky is blue and the grass is green. ".repeat(60);
    let run = complete(&s, &long, 300);
    tokio::pin!(run);
    let deadline = Instant::now() + Duration::from_secs(300);
    let seen = loop {
        tokio::select! {
            _ = &mut run => panic!("the request ended before the sliding groups gave blocks back"),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        let v = state(&s).await;
        let groups = check_groups(&v);
        assert_eq!(groups.len(), 6);
        assert_eq!(groups[0]["window"], Value::Null);
        assert!(groups[1..].iter().all(|g| g["window"] == 512));
        let computed = v["sequences"][0]["computed_tokens"].as_u64().unwrap_or(0);
        let tokens: Vec<u64> = groups
            .iter()
            .map(|g| g["tokens"].as_u64().expect("tokens"))
            .collect();
        if computed > 600 && tokens[0] >= computed {
            break (computed, tokens);
        }
        assert!(Instant::now() < deadline, "no state past the window: {v}");
    };
    let (computed, tokens) = seen;
    eprintln!("{computed} tokens computed; held per group {tokens:?}");
    for t in &tokens[1..] {
        assert!(*t < tokens[0] && *t < computed, "{tokens:?}");
        assert!(*t >= 511, "a sliding group keeps its window: {tokens:?}");
    }
    run.await;
}

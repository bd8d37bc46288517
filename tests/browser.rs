//! The live page in a real browser: headless Chromium (Debian's `chromium`, driven by its
//! `chromedriver` over WebDriver's HTTP API) opens `nanollm serve`'s page while 8 streaming
//! requests sharing a long prefix run. What the page rendered (its cells by `data-state`, its
//! sequence rows, the step it says it rendered) is compared with `/v1/state` polled at the
//! same step, and with the idle state exactly at the end; a request's blocks show while it
//! runs and turn cached or free when it ends. With `--api-key` the page renders given
//! `#key=…` and shows an auth error without it, and the server's 429 while 16 other streams
//! are open.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (or both on PATH):
//! `scripts/install-chromium.sh` installs them. Without them the tests fail, naming it.
mod common;

use common::server::Server;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEY: &str = "page-sekrit";

/// `name` on PATH, else in /usr/bin; the test fails, naming the install script, without it.
fn program(name: &str) -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} is missing: the browser tests need Debian's chromium and chromium-driver: run scripts/install-chromium.sh")
        })
}

/// A free loopback port (for chromedriver, which takes its port on the command line).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Headless Chromium through chromedriver. Dropping it (also when a test panics) ends the
/// WebDriver session, kills chromedriver and any Chromium process still using this
/// browser's own profile directory.
struct Browser {
    driver: Child,
    base: String,
    session: Option<String>,
    profile: tempfile::TempDir,
    http: reqwest::Client,
}

impl Browser {
    async fn start() -> Browser {
        let (chromium, chromedriver) = (program("chromium"), program("chromedriver"));
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e} (scripts/install-chromium.sh)",
                    chromedriver.display()
                )
            });
        let mut b = Browser {
            driver,
            base: format!("http://127.0.0.1:{port}"),
            session: None,
            profile: tempfile::tempdir().expect("a profile directory"),
            http: reqwest::Client::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = match b.http.get(format!("{}/status", b.base)).send().await {
                Ok(r) => r
                    .json::<Value>()
                    .await
                    .ok()
                    .map(|v| v["value"]["ready"] == true),
                Err(_) => None,
            };
            if ready == Some(true) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not answer within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--no-first-run", "--window-size=1280,900",
                    format!("--user-data-dir={}", b.profile.path().display()),
                ],
            },
        }}});
        let v = b.call(reqwest::Method::POST, "/session", Some(caps)).await;
        b.session = Some(v["sessionId"].as_str().expect("a session id").to_string());
        b
    }

    /// One WebDriver command; panics with WebDriver's error.
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
        let status = r.status();
        let v: Value = r.json().await.unwrap_or_else(|e| panic!("{url}: {e}"));
        let hint = if path == "/session" {
            " (chromium and chromedriver must be the same version: scripts/install-chromium.sh installs Debian's pair)"
        } else {
            ""
        };
        assert!(
            status.is_success(),
            "WebDriver {path}: {status}: {}{hint}",
            v["value"]
        );
        v["value"].clone()
    }

    async fn session_call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        let id = self.session.as_deref().expect("session");
        self.call(method, &format!("/session/{id}{path}"), body)
            .await
    }

    async fn go(&self, url: &str) {
        self.session_call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    /// Run `script` in the page; its return value.
    async fn exec(&self, script: &str) -> Value {
        let body = json!({"script": script, "args": []});
        self.session_call(reqwest::Method::POST, "/execute/sync", Some(body))
            .await
    }

    /// Run `script` until it returns something truthy (within `secs`).
    async fn wait_for(&self, script: &str, what: &str, secs: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self.exec(script).await;
            if !(v.is_null() || v == false) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed {what} within {secs} s; it shows: {}",
                self.exec(READ).await
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn read(&self) -> Reading {
        serde_json::from_value(self.exec(READ).await).expect("the page's reading")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(id) = self.session.take() {
            delete_session(&self.base, &id);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        kill_using(self.profile.path());
    }
}

/// `DELETE /session/ID` over a plain socket (Drop cannot await): Chromium quits.
fn delete_session(base: &str, id: &str) {
    let Some(addr) = base.strip_prefix("http://") else {
        return;
    };
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let req = format!("DELETE /session/{id} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_ok() {
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
}

/// Kill the processes whose command line names `profile` (this browser's Chromium, should
/// it outlive chromedriver).
fn kill_using(profile: &Path) {
    let needle = profile.to_string_lossy().into_owned();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for p in procs.flatten() {
        let name = p.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&needle) {
            let _ = Command::new("kill").args(["-9", &name]).status();
        }
    }
}

/// What the page shows: the step it rendered, its cells (block id, `data-state`) in grid
/// order, its sequence rows (id, `data-state`) in table order, its connection status.
const READ: &str = r#"
const step = Number(document.getElementById('rendered-step').dataset.step);
const cells = [...document.querySelectorAll('#grid .cell[data-block]')]
  .map((e) => [Number(e.dataset.block), e.dataset.state]);
const seqs = [...document.querySelectorAll('#seq-rows tr[data-seq]')]
  .map((e) => [Number(e.dataset.seq), e.dataset.state]);
const status = document.getElementById('status').dataset.status;
return { step, cells, seqs, status };
"#;

#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct Reading {
    step: i64,
    cells: Vec<(u64, String)>,
    seqs: Vec<(u64, String)>,
    status: String,
}

impl Reading {
    /// The rows of unfinished sequences.
    fn live_seqs(&self) -> Vec<(u64, String)> {
        self.seqs
            .iter()
            .filter(|(_, s)| s != "finished")
            .cloned()
            .collect()
    }

    fn count(&self, state: &str) -> usize {
        self.cells.iter().filter(|(_, s)| s == state).count()
    }
}

/// The parts of a `/v1/state` the page draws as attributes.
#[derive(Debug, Clone, PartialEq)]
struct Polled {
    cells: Vec<(u64, String)>,
    seqs: Vec<(u64, String)>,
    tables: BTreeMap<u64, Vec<u64>>,
}

fn polled(v: &Value) -> Polled {
    let list = |k: &str| v[k].as_array().cloned().unwrap_or_default();
    let cells = list("blocks")
        .iter()
        .map(|b| {
            (
                b["id"].as_u64().expect("id"),
                b["state"].as_str().expect("state").to_string(),
            )
        })
        .collect();
    let seqs = list("sequences")
        .iter()
        .map(|q| {
            (
                q["id"].as_u64().expect("id"),
                q["state"].as_str().expect("state").to_string(),
            )
        })
        .collect();
    let tables = list("sequences")
        .iter()
        .map(|q| {
            let ids = q["block_table"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g.as_array().cloned().unwrap_or_default())
                .filter_map(|b| b.as_u64())
                .collect();
            (q["id"].as_u64().expect("id"), ids)
        })
        .collect();
    Polled {
        cells,
        seqs,
        tables,
    }
}

/// Whether the page's reading is the polled state: the same cells exactly, the same
/// sequence rows — except sequences queued after the engine published the page's update but
/// before the poll answered (same step number: no step ran in between).
fn agrees(page: &Reading, state: &Polled) -> bool {
    let live = page.live_seqs();
    let seqs: Vec<_> = state
        .seqs
        .iter()
        .filter(|(id, s)| s != "waiting" || live.iter().any(|(i, _)| i == id))
        .cloned()
        .collect();
    page.cells == state.cells && live == seqs
}

async fn get_state(http: &reqwest::Client, s: &Server, key: Option<&str>) -> Value {
    let mut req = http.get(s.url("/v1/state"));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let r = req.send().await.expect("GET /v1/state");
    assert_eq!(r.status().as_u16(), 200);
    r.json().await.expect("state JSON")
}

/// `/v1/state` every few ms while the test runs: step → every distinct state seen at it.
struct Poller {
    seen: Arc<Mutex<BTreeMap<u64, Vec<Polled>>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Poller {
    fn start(s: &Server) -> Poller {
        let seen = Arc::new(Mutex::new(BTreeMap::<u64, Vec<Polled>>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (url, sink, flag) = (s.url("/v1/state"), seen.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let http = reqwest::Client::new();
            while !flag.load(Ordering::Relaxed) {
                if let Ok(r) = http.get(&url).send().await {
                    if let Ok(v) = r.json::<Value>().await {
                        let step = v["step"].as_u64().expect("step");
                        let p = polled(&v);
                        let mut seen = sink.lock().expect("poll map");
                        let at = seen.entry(step).or_default();
                        if !at.contains(&p) {
                            at.push(p);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(4)).await;
            }
        });
        Poller { seen, stop, task }
    }

    /// The states polled at `step`, once the poller has passed it (None: it skipped it).
    async fn at(&self, step: u64) -> Option<Vec<Polled>> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            {
                let seen = self.seen.lock().expect("poll map");
                if seen.keys().next_back().is_some_and(|&last| last > step) {
                    return seen.get(&step).cloned();
                }
            }
            if Instant::now() > deadline {
                return self.seen.lock().expect("poll map").get(&step).cloned();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
    }
}

/// Eight prompts that share their first blocks (a long system-style opening).
fn prompts() -> Vec<String> {
    let opening = "You are a careful assistant who explains how computers work to curious \
                   students. Answer in one short paragraph, plainly, without lists or headings, \
                   and say so when you are not sure about a fact. Keep every answer under \
                   eighty words, use simple words, and give one small example from everyday \
                   life when it helps the student understand. ";
    (0..8)
        .map(|i| format!("{opening}Question {i}: what does part number {i} of a computer do?"))
        .collect()
}

/// A streaming completion, read to its end.
async fn stream(http: reqwest::Client, url: String, prompt: String, key: Option<&str>) {
    let body = json!({"prompt": prompt, "max_tokens": 64, "stream": true, "ignore_eos": true});
    let mut req = http.post(url).json(&body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let r = req.send().await.expect("POST /v1/completions");
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.expect("the stream");
    assert!(text.contains("[DONE]"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_renders_the_engine_state_step_for_step() {
    let started = Instant::now();
    let s = Server::start(&[]);
    let http = reqwest::Client::new();
    // The page and its assets, with their content types.
    for (path, kind) in [
        ("/", "text/html"),
        ("/dashboard", "text/html"),
        ("/assets/page.js", "text/javascript"),
        ("/assets/page.css", "text/css"),
    ] {
        let r = http.get(s.url(path)).send().await.expect("GET");
        assert_eq!(r.status().as_u16(), 200, "{path}");
        let ct = r.headers()["content-type"]
            .to_str()
            .unwrap_or("")
            .to_string();
        assert!(ct.starts_with(kind), "{path}: {ct}");
    }

    let browser = Browser::start().await;
    browser.go(&s.url("/")).await;
    browser
        .wait_for(
            "return document.getElementById('status').dataset.status === 'live' && \
             Number(document.getElementById('rendered-step').dataset.step) >= 0",
            "a live stream and a rendered snapshot",
            30,
        )
        .await;
    let idle = browser.read().await;
    assert_eq!(
        (idle.step, idle.cells.len(), idle.seqs.len()),
        (0, 0, 0),
        "{idle:?}"
    );

    let poller = Poller::start(&s);
    let url = s.url("/v1/completions");
    let requests: Vec<_> = prompts()
        .into_iter()
        .map(|p| tokio::spawn(stream(http.clone(), url.clone(), p, None)))
        .collect();

    // While they run: every reading agrees with /v1/state at its step.
    let (mut agreed, mut skipped, mut last_step) = (0, 0, -1);
    let mut watched: Option<(u64, Vec<u64>)> = None; // a running sequence and its blocks
    let mut shared_seen = false;
    while requests.iter().any(|r| !r.is_finished()) {
        let page = browser.read().await;
        if page.step == last_step || page.live_seqs().is_empty() {
            tokio::time::sleep(Duration::from_millis(15)).await;
            continue;
        }
        last_step = page.step;
        let Some(states) = poller.at(page.step as u64).await else {
            skipped += 1; // the poll never landed on this step
            continue;
        };
        let state = states.iter().find(|p| agrees(&page, p)).unwrap_or_else(|| {
            panic!(
                "step {}: the page shows\n  cells {:?}\n  rows {:?}\nbut /v1/state at that step was\n{:#?}",
                page.step,
                page.cells,
                page.live_seqs(),
                states
                    .iter()
                    .map(|p| (&p.cells, &p.seqs))
                    .collect::<Vec<_>>()
            )
        });
        agreed += 1;
        shared_seen |= page.count("shared") > 0;
        // A running sequence: its row shows, its blocks are in use on the grid.
        if watched.is_none() {
            if let Some((id, blocks)) = state
                .seqs
                .iter()
                .find(|(_, st)| st == "decoding")
                .and_then(|(id, _)| Some((*id, state.tables.get(id)?.clone())))
                .filter(|(_, b)| !b.is_empty())
            {
                assert!(page.seqs.iter().any(|(i, st)| *i == id && st == "decoding"));
                for b in &blocks {
                    let cell = page.cells.iter().find(|(i, _)| i == b);
                    assert!(
                        matches!(cell, Some((_, st)) if st == "used" || st == "shared"),
                        "seq {id}'s block {b} shows as {cell:?}"
                    );
                }
                // Clicking its row lights up exactly its blocks (as of the step then shown).
                let clicked = browser
                    .exec(&format!(
                        "document.querySelector('#seq-rows tr[data-seq=\"{id}\"]').click(); \
                         return [Number(document.getElementById('rendered-step').dataset.step), \
                           [...document.querySelectorAll('#grid .cell.hl')].map((e) => Number(e.dataset.block))];"
                    ))
                    .await;
                let (at, lit): (u64, Vec<u64>) =
                    serde_json::from_value(clicked).expect("lit cells");
                if let Some(states) = poller.at(at).await {
                    let tables: Vec<Vec<u64>> = states
                        .iter()
                        .filter_map(|p| p.tables.get(&id))
                        .map(|t| {
                            let mut t = t.clone();
                            t.sort();
                            t.dedup();
                            t
                        })
                        .collect();
                    if !tables.is_empty() {
                        assert!(
                            tables.contains(&lit),
                            "seq {id} at step {at}: lit {lit:?}, its tables {tables:?}"
                        );
                    }
                }
                // Hovering its first block names the sequence and the block's tokens.
                let tip = browser
                    .exec(&format!(
                        "const c = document.querySelector('#grid .cell[data-block=\"{}\"]'); \
                         c.dispatchEvent(new MouseEvent('mouseover', {{ bubbles: true }})); \
                         const t = document.getElementById('tooltip'); \
                         const text = t.hidden ? '' : t.textContent; \
                         c.dispatchEvent(new MouseEvent('mouseout', {{ bubbles: true }})); \
                         document.getElementById('grid').dispatchEvent(new MouseEvent('mouseleave')); \
                         return text;",
                        blocks[0]
                    ))
                    .await;
                let tip = tip.as_str().unwrap_or("");
                assert!(
                    tip.contains(&format!("block {}", blocks[0]))
                        && tip.contains("seq")
                        && tip.contains(&id.to_string())
                        && tip.contains("tokens 0–15")
                        && tip.contains("prompt block"),
                    "the tooltip of seq {id}'s block {}: {tip:?}",
                    blocks[0]
                );
                watched = Some((id, blocks));
            }
        }
    }
    for r in requests {
        r.await.expect("a request task");
    }
    poller.finish().await;
    assert!(
        agreed >= 3,
        "only {agreed} mid-run readings could be compared ({skipped} steps the poll missed)"
    );
    assert!(
        shared_seen,
        "no reading showed a shared block (8 requests share a prefix)"
    );
    let (watched_id, watched_blocks) = watched.expect("no reading showed a decoding sequence");

    // Idle: the page equals /v1/state exactly, cell for cell.
    let end = get_state(&http, &s, None).await;
    let end_step = end["step"].as_i64().expect("step");
    let page = browser
        .wait_for(
            &format!(
                "return Number(document.getElementById('rendered-step').dataset.step) === {end_step} && \
                 !document.querySelector('#seq-rows tr:not([data-state=finished])')"
            ),
            "the idle state",
            30,
        )
        .await;
    assert_eq!(page, true);
    let page = browser.read().await;
    let end_polled = polled(&end);
    assert_eq!(
        page.cells, end_polled.cells,
        "the idle grid against /v1/state"
    );
    assert!(end_polled.seqs.is_empty());
    let pool = &end["pool"];
    for state in ["used", "shared", "cached", "free"] {
        assert_eq!(
            page.count(state) as u64,
            pool[state].as_u64().expect("count"),
            "{state}"
        );
    }
    assert_eq!(page.count("used") + page.count("shared"), 0);
    assert!(page.count("cached") > 0, "the shared prefix stays cached");
    // The watched request ended: its row says finished, its blocks are cached or free.
    assert!(
        page.seqs.contains(&(watched_id, "finished".into())),
        "{:?}",
        page.seqs
    );
    for b in &watched_blocks {
        let cell = page.cells.iter().find(|(i, _)| i == b);
        assert!(
            matches!(cell, Some((_, st)) if st == "cached" || st == "free"),
            "seq {watched_id}'s block {b} after it ended: {cell:?}"
        );
    }
    let finished_rows = page.seqs.iter().filter(|(_, s)| s == "finished").count();
    assert_eq!(finished_rows, 8);
    let cost = browser.exec("return window.pageStats").await;
    eprintln!(
        "browser test: {agreed} mid-run readings agreed with /v1/state ({skipped} steps not polled), {} steps, {} cells, {:.1} s; the page: {cost}",
        end_step,
        page.cells.len(),
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_api_key_the_page_needs_its_key_fragment() {
    let s = Server::start(&["--api-key", KEY]);
    let http = reqwest::Client::new();
    // The page itself is public.
    let r = http.get(s.url("/")).send().await.expect("GET /");
    assert_eq!(r.status().as_u16(), 200);

    let browser = Browser::start().await;
    browser.go(&s.url("/")).await;
    let shown = browser
        .wait_for(
            "const a = document.getElementById('auth'); \
             return document.getElementById('status').dataset.status === 'auth' && !a.hidden && \
             a.textContent",
            "an auth error",
            30,
        )
        .await;
    let text = shown.as_str().unwrap_or("");
    assert!(text.contains("API key") && text.contains("#key="), "{text}");
    assert_eq!(
        browser.read().await.step,
        -1,
        "nothing rendered without the key"
    );

    // With the key in the fragment (a new document: another path), while 16 other streams
    // are open: the page shows the server's 429, then renders once one closes.
    let opens = (0..16).map(|_| http.get(s.url("/v1/state/stream")).bearer_auth(KEY).send());
    let others: Vec<_> = futures_util::future::join_all(opens)
        .await
        .into_iter()
        .map(|r| r.expect("a stream"))
        .collect();
    assert!(others.iter().all(|r| r.status().as_u16() == 200));
    browser.go(&s.url(&format!("/dashboard#key={KEY}"))).await;
    let busy = browser
        .wait_for(
            "const s = document.getElementById('status'); \
             return s.dataset.status === 'busy' && s.textContent",
            "the 429 of a 17th stream",
            30,
        )
        .await;
    let busy = busy.as_str().unwrap_or("");
    assert!(
        busy.contains("429") && busy.contains("16 state streams"),
        "{busy}"
    );
    drop(others);
    browser
        .wait_for(
            "return document.getElementById('status').dataset.status === 'live' && \
             document.getElementById('auth').hidden && \
             Number(document.getElementById('rendered-step').dataset.step) >= 0",
            "a live stream with the key",
            30,
        )
        .await;
    // The key left the address bar (kept in the tab's sessionStorage).
    let hash = browser.exec("return location.hash").await;
    assert_eq!(hash, "");
    stream(
        http.clone(),
        s.url("/v1/completions"),
        prompts().remove(0),
        Some(KEY),
    )
    .await;
    let end = get_state(&http, &s, Some(KEY)).await;
    let end_step = end["step"].as_i64().expect("step");
    browser
        .wait_for(
            &format!("return Number(document.getElementById('rendered-step').dataset.step) === {end_step}"),
            "the last step",
            30,
        )
        .await;
    let page = browser.read().await;
    assert_eq!(page.cells, polled(&end).cells);
    assert_eq!(page.seqs.len(), 1);
}

/// `serve --spec ngram`: the steps strip's summary counts the drafts of the steps it shows,
/// kept and rolled back, as `/v1/state`'s steps have them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_counts_speculative_drafts() {
    let s = Server::start(&["--spec", "ngram", "--spec-force"]);
    let http = reqwest::Client::new();
    let passage = "The committee met on Tuesday to review the budget for the new library. \
        After a long discussion, the members agreed to fund the reading room and the archive.";
    let body = json!({"prompt": format!("Repeat the following text exactly:\n\n{passage}\n\nRepeat:"),
        "max_tokens": 40, "ignore_eos": true, "temperature": 0});
    let r = http
        .post(s.url("/v1/completions"))
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 200);
    let state = get_state(&http, &s, None).await;
    let steps = state["steps"].as_array().expect("steps");
    let sum = |k: &str| {
        steps
            .iter()
            .map(|x| x[k].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    let (drafted, accepted) = (sum("draft_tokens"), sum("accepted_tokens"));
    assert!(drafted > 0 && accepted > 0, "{drafted} {accepted}");
    let browser = Browser::start().await;
    browser.go(&s.url("/")).await;
    let want = format!(
        "drafts {accepted} of {drafted} accepted, {} rolled back",
        drafted - accepted
    );
    browser
        .wait_for(
            &format!(
                "return document.getElementById('steps-summary').textContent.includes({want:?})"
            ),
            &want,
            30,
        )
        .await;
}

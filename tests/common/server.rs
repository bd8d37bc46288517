//! `nanollm serve` started on an ephemeral loopback port for a test, killed when dropped.
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A running server; killed when dropped.
pub struct Server {
    /// The server process.
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its stderr so far.
    pub log: Arc<Mutex<String>>,
}

impl Server {
    pub fn start(args: &[&str]) -> Server {
        let mut all = vec!["serve", "--port", "0"];
        for (flag, default) in [("--max-model-len", "1024"), ("--max-num-seqs", "8")] {
            if !args.contains(&flag) {
                all.extend([flag, default]);
            }
        }
        all.extend_from_slice(args);
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("nanollm"))
            .args(&all)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nanollm serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let url = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(url);
                }
                if let Ok(mut l) = sink.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        let base = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "server did not start: {}",
                    log.lock().map(|l| l.clone()).unwrap_or_default()
                );
            }
        };
        Server { child, base, log }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A metric's value from /metrics (first sample whose name matches exactly).
    pub async fn metric(&self, name: &str) -> f64 {
        let text = reqwest::get(self.url("/metrics"))
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics text");
        text.lines()
            .find_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                (k == name).then(|| v.parse::<f64>().ok()).flatten()
            })
            .unwrap_or_else(|| panic!("{name} missing in /metrics:\n{text}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

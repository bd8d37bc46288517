//! Issue 43: the 2-minute version of the soak (`scripts/soak.py`, 30 minutes by hand):
//! `nanollm serve --kv-mem 256MiB` under 16 streaming clients on loopback, 10% of them
//! hanging up mid-stream. Passes when no request failed, no KV block is held once idle, and
//! the idle live heap at the end is within 1% of the idle heap once the pool stopped growing.
mod common;

use serde_json::Value;
use std::process::Command;

#[test]
fn serve_soaks_two_minutes_with_a_flat_heap_and_no_leaked_blocks() {
    common::model_path();
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("soak.json");
    let out = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/soak.py"))
        .args(["--minutes", "2", "--clients", "16", "--binary"])
        .arg(assert_cmd::cargo::cargo_bin("nanollm"))
        .arg("--json")
        .arg(&report)
        .output()
        .expect("run python3 scripts/soak.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let r: Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("JSON report");
    assert_eq!(r["requests_failed"], 0, "{stdout}");
    assert_eq!(r["blocks_leaked"], 0.0, "{stdout}");
    assert!(
        r["heap_drift"].as_f64().is_some_and(|d| d.abs() <= 0.01),
        "{stdout}"
    );
    assert!(
        r["requests_ok"].as_u64().is_some_and(|n| n >= 16),
        "{stdout}"
    );
    assert!(
        r["warm"]["heap"].as_f64().is_some_and(|h| h > 1e6),
        "the heap is counted: {stdout}"
    );
    eprintln!("{stdout}");
}

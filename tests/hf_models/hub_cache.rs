//! Hub ids in a temporary Hugging Face cache: found with no network; a missing one is a
//! clear one-line error naming the cache folder searched and how to get the model there.
use crate::tiny::{self, Arch, Spec};
use nanollm::model::hf::cache::find_snapshot;
use std::path::{Path, PathBuf};

/// Lay out `<cache>/models--acme--tiny-qwen3/{refs/main, snapshots/<commit>/...}`, the files
/// as blobs linked from the snapshot, as huggingface_hub does.
fn hub_layout(cache: &Path, commit: &str) -> PathBuf {
    let repo = cache.join("models--acme--tiny-qwen3");
    let snap = repo.join("snapshots").join(commit);
    let staging = cache.join("staging");
    tiny::write_folder(&staging, &Spec::of(Arch::Qwen3), 9);
    std::fs::create_dir_all(repo.join("blobs")).expect("mkdir");
    std::fs::create_dir_all(&snap).expect("mkdir");
    std::fs::create_dir_all(repo.join("refs")).expect("mkdir");
    for entry in std::fs::read_dir(&staging).expect("read_dir") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        let blob = repo.join("blobs").join(format!("blob-{name}"));
        std::fs::rename(&path, &blob).expect("move");
        std::os::unix::fs::symlink(&blob, snap.join(&name)).expect("symlink");
    }
    std::fs::write(repo.join("refs").join("main"), commit).expect("write ref");
    snap
}

fn nanollm() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("nanollm").expect("binary");
    for var in [
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_HOME",
        "XDG_CACHE_HOME",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

#[test]
fn hub_id_resolves_in_the_local_cache_without_network() {
    let cache = tempfile::tempdir().expect("tempdir");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let snap = hub_layout(cache.path(), commit);
    assert_eq!(
        find_snapshot(cache.path(), "acme/tiny-qwen3", "main"),
        Some(snap.clone())
    );
    assert_eq!(
        find_snapshot(cache.path(), "acme/tiny-qwen3", commit),
        Some(snap.clone())
    );
    assert_eq!(find_snapshot(cache.path(), "acme/tiny-qwen3", "v2"), None);
    assert_eq!(find_snapshot(cache.path(), "acme/other", "main"), None);
    // A refs file with a trailing newline (hand-made caches) still resolves.
    std::fs::write(
        cache.path().join("models--acme--tiny-qwen3/refs/main"),
        format!("{commit}\n"),
    )
    .expect("write");
    assert_eq!(
        find_snapshot(cache.path(), "acme/tiny-qwen3", "main"),
        Some(snap)
    );

    let run = |cmd: &mut assert_cmd::Command, extra: &[&str]| {
        let out = cmd
            .args([
                "generate",
                "--model",
                "acme/tiny-qwen3",
                "--no-chat",
                "-n",
                "3",
            ])
            .args(extra)
            .arg("w5 w6 w7")
            .assert()
            .success();
        String::from_utf8_lossy(&out.get_output().stdout).to_string()
    };
    let text = run(nanollm().env("HF_HUB_CACHE", cache.path()), &[]);
    assert!(!text.trim().is_empty(), "no text generated");
    // HF_HOME/hub, and --revision with the commit hash.
    let home = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(cache.path(), home.path().join("hub")).expect("symlink");
    assert_eq!(run(nanollm().env("HF_HOME", home.path()), &[]), text);
    assert_eq!(
        run(
            nanollm().env("HF_HUB_CACHE", cache.path()),
            &["--revision", commit]
        ),
        text
    );
    // kv-size takes the hub id too.
    let out = nanollm()
        .env("HF_HUB_CACHE", cache.path())
        .args([
            "kv-size",
            "--model",
            "acme/tiny-qwen3",
            "--seq",
            "10",
            "--dtype",
            "f32",
            "--json",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
    assert_eq!(
        v["rows"][0]["kv_bytes"],
        10 * 2 * 2 * 2 * 16 * 4,
        "2 · tokens · layers · kv_heads · head_dim · 4"
    );
}

#[test]
fn missing_hub_id_is_a_clear_error() {
    let cache = tempfile::tempdir().expect("tempdir");
    hub_layout(cache.path(), "abc123");
    let fails = |args: &[&str], needles: &[&str]| {
        let out = nanollm()
            .env("HF_HUB_CACHE", cache.path())
            .args(args)
            .assert()
            .failure()
            .get_output()
            .clone();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line expected: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        for n in needles {
            assert!(stderr.contains(n), "{stderr:?} lacks {n:?}");
        }
    };
    let missing_dir = cache.path().join("models--Qwen--Qwen3-0.6B");
    let shown = missing_dir.display().to_string();
    fails(
        &["generate", "--model", "Qwen/Qwen3-0.6B", "hi"],
        &[
            "Qwen/Qwen3-0.6B",
            &shown,
            "huggingface-cli download Qwen/Qwen3-0.6B",
            "does not exist",
        ],
    );
    fails(
        &[
            "generate",
            "--model",
            "acme/tiny-qwen3",
            "--revision",
            "v2",
            "hi",
        ],
        &[
            "acme/tiny-qwen3",
            "revision \"v2\"",
            "huggingface-cli download",
        ],
    );
    fails(
        &["generate", "--model", "./no/such/dir", "hi"],
        &["no such file or directory"],
    );
}

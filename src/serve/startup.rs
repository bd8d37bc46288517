//! The server's start-up checks on its flags: the address to listen on, the API key, the
//! served model name.
use anyhow::{bail, Context, Result};
use std::net::{SocketAddr, ToSocketAddrs};

/// The address `--host HOST --port PORT` names: an IP address or a host name (resolved; the
/// first address wins).
///
/// Errors: a host that does not resolve.
pub fn listen_addr(host: &str, port: u16) -> Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .with_context(|| format!("--host {host}: not an IP address or a host name that resolves"))
}

/// `--api-key` must be usable as an HTTP header value as clients send it: visible ASCII
/// without spaces (e.g. a hex or base64 token).
///
/// Errors: an empty key, or one with spaces, control or non-ASCII characters.
pub fn check_api_key(key: &str) -> Result<()> {
    if key.is_empty() {
        bail!("--api-key: empty");
    }
    if let Some(c) = key.chars().find(|c| !c.is_ascii_graphic()) {
        bail!("--api-key: {c:?} cannot be sent in an Authorization header: use visible ASCII without spaces");
    }
    Ok(())
}

/// `--served-model-name`'s default: `model` as given when it is a hub id (not a path that
/// exists; vLLM serves `--model`'s value), else the name of `path` (the resolved model: a
/// .gguf file, named without `.gguf`, or a folder, named whole: `Qwen2.5-0.5B` was cut at
/// its last dot to `Qwen2.5-0`).
pub fn default_served_name(model: Option<&std::path::Path>, path: &std::path::Path) -> String {
    if let Some(m) = model.filter(|m| !m.exists()) {
        return m.to_string_lossy().into_owned();
    }
    let gguf = path.is_file()
        && path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    let name = match gguf {
        true => path.file_stem(),
        false => path.file_name(),
    };
    name.map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "model".to_string())
}

#[cfg(test)]
mod served_name_tests {
    use super::default_served_name;
    use std::path::Path;

    #[test]
    fn the_default_served_name_keeps_dots_and_hub_ids() {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path().join("Qwen2.5-0.5B-Instruct");
        std::fs::create_dir(&folder).expect("mkdir");
        assert_eq!(
            default_served_name(Some(&folder), &folder),
            "Qwen2.5-0.5B-Instruct"
        );
        let file = dir.path().join("SmolLM2-135M-Instruct.Q4_1.gguf");
        std::fs::write(&file, b"").expect("write");
        assert_eq!(
            default_served_name(None, &file),
            "SmolLM2-135M-Instruct.Q4_1"
        );
        let snapshot = dir.path().join("3f2a9c");
        std::fs::create_dir(&snapshot).expect("mkdir");
        assert_eq!(
            default_served_name(
                Some(Path::new("HuggingFaceTB/SmolLM2-135M-Instruct")),
                &snapshot
            ),
            "HuggingFaceTB/SmolLM2-135M-Instruct"
        );
    }
}

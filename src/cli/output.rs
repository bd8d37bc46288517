//! Writing to stdout without panicking on a closed pipe.
use std::io::{self, Write};

/// Write `s` to stdout and flush.
///
/// Errors: the I/O error, including `BrokenPipe` when the reader went away (`| head`), which
/// the caller maps to a quiet exit with [`is_broken_pipe`].
/// The error names stdout (`stdout: No space left on device`) and keeps its kind.
pub fn write_stdout(s: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(s.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| io::Error::new(e.kind(), format!("stdout: {e}")))
}

/// True when `err` (or its cause chain) is a broken pipe on stdout.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

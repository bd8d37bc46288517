//! A trace file on disk in Chrome's JSON Array Format: `[`, then one event per line, each
//! followed by `,`. Every batch of events is flushed as it comes, so a process killed
//! mid-run leaves a file that Perfetto and `chrome://tracing` open (the format's closing
//! `]` is optional); a clean end replaces the last `,` with `]`, so the file is also
//! strict JSON.
//!
//! Rotation: when the file has passed its size limit (checked after each batch), the open
//! request spans are closed in it (`continued: true`), it is closed with `]` and renamed
//! `NAME.1.json` (an older `NAME.1.json` becomes `NAME.2.json`, and so on; [`KEEP_ROTATED`]
//! are kept), and a new `NAME.json` starts with the `M` events and the cut spans opened
//! again at the same timestamp. Each file is thus valid and balanced on its own.
use crate::engine::trace::TraceEvent;
use crate::trace::chrome::Formatter;
use anyhow::{Context, Result};
use serde_json::Value;
use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Rotated files kept beside the current one (`NAME.1.json` … `NAME.3.json`).
pub const KEEP_ROTATED: usize = 3;

/// `--trace-max-bytes`' default: 256 MiB per file (a 2-core serve writes ~1 KiB per step).
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;

/// A trace being written.
pub struct TraceFile {
    path: PathBuf,
    out: BufWriter<File>,
    /// Bytes written to the current file.
    bytes: u64,
    /// Rotate after a batch that leaves the file larger than this (bytes).
    max_bytes: u64,
    /// Whether the file is a regular file (a device or FIFO is never truncated or renamed).
    regular: bool,
    formatter: Formatter,
    lines: Vec<Value>,
}

impl TraceFile {
    /// Create (or truncate) `path` and write its head; timestamps count from `origin`.
    /// Errors: one line naming `--trace` and the file.
    pub fn create(path: &Path, max_bytes: u64, origin: Instant) -> Result<TraceFile> {
        let file = File::create(path)
            .with_context(|| format!("--trace {}: cannot write it", path.display()))?;
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        let mut t = TraceFile {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
            bytes: 0,
            max_bytes: max_bytes.max(1),
            regular,
            formatter: Formatter::new(origin),
            lines: Vec::new(),
        };
        t.raw(b"[\n")?;
        t.out.flush().map_err(|e| t.named(e))?;
        Ok(t)
    }

    fn named(&self, e: std::io::Error) -> anyhow::Error {
        anyhow::anyhow!("--trace {}: cannot write it: {e}", self.path.display())
    }

    fn raw(&mut self, b: &[u8]) -> Result<()> {
        self.out.write_all(b).map_err(|e| self.named(e))?;
        self.bytes += b.len() as u64;
        Ok(())
    }

    /// Write the pending lines, each followed by `,`.
    fn write_lines(&mut self) -> Result<()> {
        let lines = std::mem::take(&mut self.lines);
        for v in &lines {
            let mut line = serde_json::to_vec(v)?;
            line.extend_from_slice(b",\n");
            self.raw(&line)?;
        }
        self.lines = lines;
        self.lines.clear();
        Ok(())
    }

    /// Name process `pid` (an engine run: "nanollm serve", "concurrency 4" …).
    pub fn add_process(&mut self, pid: u32, name: &str) -> Result<()> {
        self.formatter.add_process(pid, name, &mut self.lines);
        self.write_lines()?;
        self.out.flush().map_err(|e| self.named(e))
    }

    /// Write `events` of process `pid`, flush, and rotate when past the size limit.
    pub fn write(&mut self, pid: u32, events: &[TraceEvent]) -> Result<()> {
        self.formatter.format(pid, events, &mut self.lines);
        self.write_lines()?;
        self.out.flush().map_err(|e| self.named(e))?;
        if self.bytes > self.max_bytes && self.regular {
            self.rotate()?;
        }
        Ok(())
    }

    /// Close the file: the last `,` becomes `]` (a device or FIFO just gets `]`).
    fn close(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| self.named(e))?;
        if self.regular {
            // "[\n" alone (no event) keeps its newline; otherwise drop the last ",\n".
            let f = self.out.get_mut();
            let cut = f
                .seek(std::io::SeekFrom::End(0))
                .and_then(|len| match len > 2 {
                    true => f.set_len(len - 2).map(|_| true),
                    false => Ok(false),
                })
                .and_then(|cut| f.seek(std::io::SeekFrom::End(0)).map(|_| cut));
            if cut.map_err(|e| self.named(e))? {
                self.raw(b"\n")?;
            }
        }
        self.raw(b"]\n")?;
        self.out.flush().map_err(|e| self.named(e))
    }

    /// End the trace cleanly: spans of requests still live (a run interrupted) are closed
    /// at the last timestamp with `unfinished: true`, then `]`. Errors: a failed write.
    pub fn finish(mut self) -> Result<()> {
        let at = self.formatter.latest_ns();
        self.formatter.close_all(at, "unfinished", &mut self.lines);
        self.write_lines()?;
        self.close()
    }

    /// Start the next file (see the module's docs).
    fn rotate(&mut self) -> Result<()> {
        let at = self.formatter.latest_ns();
        self.formatter.close_all(at, "continued", &mut self.lines);
        self.write_lines()?;
        self.close()?;
        for k in (1..KEEP_ROTATED).rev() {
            let from = rotated_name(&self.path, k);
            if from.exists() {
                let _ = std::fs::rename(&from, rotated_name(&self.path, k + 1));
            }
        }
        std::fs::rename(&self.path, rotated_name(&self.path, 1)).map_err(|e| self.named(e))?;
        let file = File::create(&self.path).map_err(|e| self.named(e))?;
        self.out = BufWriter::new(file);
        self.bytes = 0;
        self.raw(b"[\n")?;
        self.formatter.metadata(&mut self.lines);
        self.formatter.reopen(at, &mut self.lines);
        self.write_lines()?;
        self.out.flush().map_err(|e| self.named(e))
    }
}

/// The name of the `k`-th rotated file: `trace.json` → `trace.k.json` (`trace` → `trace.k`).
pub fn rotated_name(path: &Path, k: usize) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.{k}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{k}"),
    };
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotated_names_keep_the_extension() {
        assert_eq!(
            rotated_name(Path::new("/t/serve.json"), 2),
            Path::new("/t/serve.2.json")
        );
        assert_eq!(rotated_name(Path::new("trace"), 1), Path::new("trace.1"));
    }
}

//! `--trace FILE.json` and `--trace-max-bytes`, the flags of every command that can record
//! a timeline (`generate`, `bench`, `run-batch`, `serve`).
use crate::files::clobber::check_not_model;
use crate::files::outfile::check_writable;
use crate::trace::file::DEFAULT_MAX_BYTES;
use crate::trace::tracer::Tracer;
use crate::units::parse_bytes;
use anyhow::{bail, Result};
use clap::Args;
use std::path::{Path, PathBuf};

/// The trace flags.
#[derive(Args, Debug, Clone, Default)]
pub struct TraceArgs {
    /// Write a timeline of the engine's steps and requests to FILE.json (Chrome trace-event
    /// JSON: open it in ui.perfetto.dev or chrome://tracing, or draw it with `nanollm
    /// trace-svg`; docs/traces.md).
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    /// Rotate --trace's file when it passes this size: it becomes FILE.1.json (3 older
    /// files kept) and a new FILE.json starts [default: 256MiB].
    #[arg(long, value_name = "BYTES", requires = "trace")]
    pub trace_max_bytes: Option<String>,
}

impl TraceArgs {
    /// The size limit in bytes. Errors: a size that does not parse, or under 64 KiB.
    pub fn max_bytes(&self) -> Result<u64> {
        let Some(s) = &self.trace_max_bytes else {
            return Ok(DEFAULT_MAX_BYTES);
        };
        let n = parse_bytes("--trace-max-bytes", s)?;
        if n < 64 << 10 {
            bail!("--trace-max-bytes {s}: must be at least 64KiB");
        }
        Ok(n)
    }

    /// Refuse, before the run, a `--trace` path that cannot be written (a missing
    /// directory, a directory) or that is the model the run reads (`model`, resolved).
    /// Nothing is created. Errors: one line naming `--trace`.
    pub fn check(&self, model: Option<&Path>) -> Result<()> {
        self.max_bytes()?;
        let Some(path) = &self.trace else {
            return Ok(());
        };
        if path.as_os_str() == "-" {
            bail!("--trace -: give a file name (the trace is written beside other output)");
        }
        check_writable("--trace", path)?;
        if let Some(model) = model {
            check_not_model("--trace", path, model)?;
        }
        Ok(())
    }

    /// Start the trace when `--trace` was given (after [`Self::check`]).
    pub fn start(&self) -> Result<Option<Tracer>> {
        match &self.trace {
            Some(path) => Ok(Some(Tracer::start(path, self.max_bytes()?)?)),
            None => Ok(None),
        }
    }
}

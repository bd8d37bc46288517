//! `--trace FILE.json`: the engine's steps and requests as a timeline in Chrome's
//! trace-event format, which Perfetto (ui.perfetto.dev) and `chrome://tracing` open, and
//! `nanollm trace-svg`'s SVG drawing of such a file (docs/traces.md).
//!
//! - [`args`]: the flags (`--trace`, `--trace-max-bytes`) and their checks before a run;
//! - [`tracer`]: the writer thread the engine's owner sends each step's events to;
//! - [`mod@file`]: the file itself (JSON Array Format, flushed per batch, size rotation);
//! - [`chrome`]: engine events → trace events (steps, phases, counters, request spans);
//! - [`generation`]: the trace of one request run by `engine::generate`, from its result;
//! - [`read`]: reading a trace back, bounded; [`lanes`]: its events per run; [`svg`]:
//!   drawing it.
pub mod args;
pub mod chrome;
pub mod file;
pub mod generation;
pub mod lanes;
pub mod read;
pub mod svg;
pub mod tracer;

pub use args::TraceArgs;
pub use tracer::{TraceSender, Tracer};

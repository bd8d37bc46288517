//! nanollm: run a real LLM on the CPU and make its KV cache visible and measurable.
//!
//! The KV cache belongs to the engine, not to the model: [`model::Decoder::forward`] takes the
//! per-request [`kv::KvCache`] to read and extend. Naive full-recompute decoding and KV-cached
//! decoding are the same loop with a different cache lifetime ([`engine`]).

// What a user or a file controls is never unwrapped: errors carry a message instead.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

/// `eprintln!` that never panics: std's panics when the write to stderr fails (a closed
/// pipe, `2>/dev/full`); a diagnostic that cannot be written is dropped instead, so
/// `nanollm … 2>&1 >/dev/null | head -1` ends quietly. Shadows std's macro in every module
/// below (textual scope).
macro_rules! eprintln {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` that never panics (see [`eprintln!`] above).
macro_rules! eprint {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

pub mod bench;
pub mod cli;
pub mod cpu;
pub mod engine;
pub mod eval;
pub mod files;
pub mod flags;
pub mod heap;
pub mod kernels;
pub mod kv;
pub mod model;
pub mod openai;
pub mod process;
pub mod roofline;
pub mod serve;
pub mod sizing;
pub mod trace;
pub mod units;

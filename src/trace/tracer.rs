//! `--trace`'s writer thread: the engine's owner sends each step's events over a channel
//! ([`TraceSender::send`]: a move of one `Vec`, no formatting), and a thread of its own
//! formats and writes them ([`crate::trace::file::TraceFile`]), so the engine's step loop
//! never waits for JSON or the disk.
use crate::engine::trace::TraceEvent;
use crate::trace::file::TraceFile;
use anyhow::{Context, Result};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// What the writer thread is sent.
enum Msg {
    /// A new engine run (process `pid`), named.
    Process(u32, String),
    /// Events of process `pid`.
    Events(u32, Vec<TraceEvent>),
}

/// A trace being written by its own thread.
pub struct Tracer {
    tx: Sender<Msg>,
    next_pid: Arc<AtomicU32>,
    thread: JoinHandle<Result<()>>,
}

/// Where one engine run sends its events (cheap to clone; the run is a process of the
/// trace).
#[derive(Clone)]
pub struct TraceSender {
    tx: Sender<Msg>,
    pid: u32,
}

impl TraceSender {
    /// Hand `events` (one step's, from [`crate::engine::llm_engine::LlmEngine::take_trace`])
    /// to the writer thread; nothing is sent when empty. A writer that stopped (a failed
    /// write) drops them: its error comes from [`Tracer::finish`].
    pub fn send(&self, events: Vec<TraceEvent>) {
        if !events.is_empty() {
            let _ = self.tx.send(Msg::Events(self.pid, events));
        }
    }
}

impl Tracer {
    /// Create `path` (a file of at most about `max_bytes` bytes before it rotates) and
    /// start its writer thread; timestamps count from now. The caller checks the path
    /// first ([`crate::trace::args::TraceArgs::check`]). Errors: the file cannot be created.
    pub fn start(path: &Path, max_bytes: u64) -> Result<Tracer> {
        let mut file = TraceFile::create(path, max_bytes, Instant::now())?;
        let (tx, rx) = channel::<Msg>();
        let thread = std::thread::Builder::new()
            .name("trace".into())
            .spawn(move || {
                for msg in rx {
                    match msg {
                        Msg::Process(pid, name) => file.add_process(pid, &name)?,
                        Msg::Events(pid, events) => file.write(pid, &events)?,
                    }
                }
                file.finish()
            })
            .context("cannot start the trace thread")?;
        Ok(Tracer {
            tx,
            next_pid: Arc::new(AtomicU32::new(1)),
            thread,
        })
    }

    /// A new process in the trace (one engine run), named `name` (e.g. "nanollm serve",
    /// "concurrency 4"); its events go through the returned sender.
    pub fn process(&self, name: &str) -> TraceSender {
        let pid = self.next_pid.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.send(Msg::Process(pid, name.to_string()));
        TraceSender {
            tx: self.tx.clone(),
            pid,
        }
    }

    /// Wait for every sender to be dropped and the writer to close the file (`]`).
    /// Errors: the first failed write (one line naming `--trace` and the file).
    pub fn finish(self) -> Result<()> {
        drop(self.tx);
        match self.thread.join() {
            Ok(r) => r,
            Err(_) => anyhow::bail!("--trace: the trace thread panicked"),
        }
    }
}

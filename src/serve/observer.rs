//! [`Observer`]: what the engine thread and the state routes (`/v1/state` and its stream)
//! share: the latest published [`EngineState`], the open streams, the cost of building it,
//! and the [`Journal`] of the stream's recent events (what a reconnecting client missed).
use crate::engine::llm_engine::LlmEngine;
use crate::engine::snapshot::EngineState;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// Most `/v1/state/stream` connections open at once; one more gets HTTP 429.
pub const MAX_STATE_STREAMS: usize = 16;

/// Least time between two states published to the streams (at most 10 a second).
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(100);

/// Most `delta` events the [`Journal`] keeps for reconnecting clients (about 13 s of a busy
/// engine at 10 a second); an older `Last-Event-ID` gets a `snapshot`.
pub const REPLAY_EVENTS: usize = 128;

/// Most bytes of `delta` JSON the [`Journal`] keeps, whatever their count (the oldest go
/// first).
pub const REPLAY_BYTES: usize = 8 << 20;

/// A state the engine built, with its build number (states are numbered in the order the
/// engine thread built them, so that the HTTP side never mistakes an older one for news).
pub type Built = (u64, Arc<EngineState>);

/// What the engine thread and the state routes share.
pub struct Observer {
    started: Instant,
    pub(super) streams: AtomicUsize,
    pub(super) latest: watch::Sender<Option<Built>>,
    snapshots: AtomicU64,
    build_ns: AtomicU64,
    journal: Mutex<Journal>,
    /// The newest event id in the journal (streams wait on it).
    pub(super) newest: watch::Sender<u64>,
}

impl Default for Observer {
    fn default() -> Self {
        // Ids start at the server's start time in µs since the Unix epoch: an id kept by a
        // client from an earlier run of the server is older than any of this run's.
        let base = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Observer {
            started: Instant::now(),
            streams: AtomicUsize::new(0),
            latest: watch::Sender::new(None),
            snapshots: AtomicU64::new(0),
            build_ns: AtomicU64::new(0),
            journal: Mutex::new(Journal::starting_at(base)),
            newest: watch::Sender::new(base),
        }
    }
}

/// What a stream sends next ([`Journal::next_after`]).
pub enum Next {
    /// Nothing: the client has the newest state.
    UpToDate,
    /// The delta event `id` (JSON text), the one after the client's.
    Delta(u64, Arc<str>),
    /// A snapshot of the newest state, event `id`: the client's id is too old (its deltas
    /// left the journal) or unknown.
    Snapshot(u64, Arc<EngineState>),
}

/// The state stream's recent events, shared by every stream: each state the streams send is
/// recorded once, with the next id, as a delta from the state before it. A client that
/// reconnects with `Last-Event-ID: n` gets the deltas after `n` while the journal holds them
/// all, else a snapshot. Bounded: the last [`REPLAY_EVENTS`] deltas, at most
/// [`REPLAY_BYTES`] of them, and the newest state.
pub struct Journal {
    /// The newest event's id (`base` before any).
    newest: u64,
    /// The newest recorded state and its build number.
    last: Option<Built>,
    /// Recent deltas, consecutive ids ending at `newest`, oldest first.
    deltas: VecDeque<(u64, Arc<str>)>,
    bytes: usize,
}

impl Journal {
    fn starting_at(base: u64) -> Journal {
        Journal {
            newest: base,
            last: None,
            deltas: VecDeque::new(),
            bytes: 0,
        }
    }

    /// The newest id.
    pub fn newest(&self) -> u64 {
        self.newest
    }

    /// Record `built` unless the journal has it, a state built after it, or an equal state;
    /// the delta from the newest state is `delta(newest, built)`. True when recorded.
    pub fn record(
        &mut self,
        built: &Built,
        delta: impl FnOnce(&EngineState, &EngineState) -> String,
    ) -> bool {
        let (n, state) = built;
        if let Some((m, last)) = &self.last {
            if *n <= *m || **last == **state {
                return false;
            }
            let text: Arc<str> = delta(last, state).into();
            self.bytes += text.len();
            self.deltas.push_back((self.newest + 1, text));
            while self.deltas.len() > REPLAY_EVENTS || self.bytes > REPLAY_BYTES {
                let Some((_, old)) = self.deltas.pop_front() else {
                    break;
                };
                self.bytes -= old.len();
            }
        }
        self.newest += 1;
        self.last = Some(built.clone());
        true
    }

    /// What goes to a client whose last event is `id` (`None`: none yet, or an id that is
    /// not a number).
    pub fn next_after(&self, id: Option<u64>) -> Next {
        let Some((_, state)) = &self.last else {
            return Next::UpToDate; // nothing recorded yet
        };
        let snapshot = Next::Snapshot(self.newest, state.clone());
        let Some(id) = id else {
            return snapshot;
        };
        if id == self.newest {
            return Next::UpToDate;
        }
        match self.deltas.front() {
            Some(&(oldest, _)) if id < self.newest && id + 1 >= oldest => {
                let (k, text) = &self.deltas[(id + 1 - oldest) as usize];
                Next::Delta(*k, text.clone())
            }
            _ => snapshot,
        }
    }
}

impl Observer {
    /// Whether a stream is open (the engine then publishes after its steps).
    pub fn watching(&self) -> bool {
        self.streams.load(Ordering::Relaxed) > 0
    }

    /// Build the engine's state now, timing and numbering it (engine thread).
    pub fn take(&self, engine: &LlmEngine<'_>) -> Built {
        let t = Instant::now();
        let state = Arc::new(engine.snapshot());
        self.build_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let n = self.snapshots.fetch_add(1, Ordering::Relaxed);
        (n, state)
    }

    /// Hand a state to every open stream (engine thread).
    pub fn publish(&self, built: Built) {
        self.latest.send_replace(Some(built));
    }

    /// The stream's journal (HTTP side; held only to record or read one event).
    pub(super) fn journal(&self) -> MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// States built so far.
    pub fn snapshots(&self) -> u64 {
        self.snapshots.load(Ordering::Relaxed)
    }

    /// Engine-thread time spent building states so far (ms).
    pub fn cpu_ms(&self) -> f64 {
        self.build_ns.load(Ordering::Relaxed) as f64 / 1e6
    }

    /// Streams open now.
    pub fn streams(&self) -> usize {
        self.streams.load(Ordering::Relaxed)
    }

    /// The fields serve adds to every state and delta.
    pub(super) fn extra(&self, model: &str) -> [(&'static str, Value); 3] {
        [
            ("model", json!(model)),
            (
                "uptime_ms",
                json!(self.started.elapsed().as_secs_f64() * 1e3),
            ),
            (
                "observe",
                json!({"snapshots": self.snapshots(), "cpu_ms": self.cpu_ms(), "streams": self.streams()}),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::snapshot::{Counters, PoolView};

    /// A state after `step` steps (all else empty).
    fn built(step: u64) -> Built {
        let pool = PoolView {
            num_blocks: 1,
            materialized: 0,
            used: 0,
            shared: 0,
            cached: 0,
            free: 0,
            block_size: 16,
            block_bytes: 1,
            dtype: "f16",
            bytes_allocated: 0,
            groups: Vec::new(),
        };
        let counters = Counters {
            requests_added: 0,
            requests_finished: 0,
            generated_tokens: 0,
            preemptions: 0,
            evictions: 0,
            prefix_queries_tokens: 0,
            prefix_hits_tokens: 0,
            prefix_disk_hits_tokens: 0,
            step_ms: 0.0,
        };
        let state = EngineState {
            step,
            pool,
            blocks: Vec::new(),
            sequences: Vec::new(),
            finished: Vec::new(),
            steps: Vec::new(),
            counters,
        };
        (step, Arc::new(state))
    }

    fn delta(prev: &EngineState, next: &EngineState) -> String {
        format!("{}->{}", prev.step, next.step)
    }

    #[test]
    fn the_journal_replays_recent_deltas_and_snapshots_past_its_bound() {
        let mut j = Journal::starting_at(1000);
        assert!(matches!(j.next_after(None), Next::UpToDate));
        assert!(j.record(&built(0), delta));
        assert_eq!(j.newest(), 1001);
        // An older build, or the same state again, is no news.
        assert!(!j.record(&built(0), delta));
        for step in 1..=300 {
            assert!(j.record(&built(step), delta));
        }
        assert!(!j.record(&built(299), delta));
        assert_eq!(j.newest(), 1301);
        assert_eq!(j.deltas.len(), REPLAY_EVENTS);
        // A recent id: the delta after it.
        match j.next_after(Some(1300)) {
            Next::Delta(id, text) => assert_eq!((id, &*text), (1301, "299->300")),
            _ => panic!("not the next delta"),
        }
        let oldest = 1301 - REPLAY_EVENTS as u64;
        assert!(matches!(j.next_after(Some(oldest)), Next::Delta(id, _) if id == oldest + 1));
        assert!(matches!(j.next_after(Some(1301)), Next::UpToDate));
        // Too old, unknown, none: the newest state whole.
        for id in [Some(oldest - 1), Some(5), Some(1302), None] {
            match j.next_after(id) {
                Next::Snapshot(n, s) => assert_eq!((n, s.step), (1301, 300)),
                _ => panic!("{id:?}: no snapshot"),
            }
        }
    }
}

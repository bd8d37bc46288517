//! [`Observer`]: what the engine thread and the state routes (`/v1/state` and its stream)
//! share: the latest published [`EngineState`], the open streams, the cost of building it.
use crate::engine::llm_engine::LlmEngine;
use crate::engine::snapshot::EngineState;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Most `/v1/state/stream` connections open at once; one more gets HTTP 429.
pub const MAX_STATE_STREAMS: usize = 16;

/// Least time between two states published to the streams (at most 10 a second).
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(100);

/// What the engine thread and the state routes share.
pub struct Observer {
    started: Instant,
    pub(super) streams: AtomicUsize,
    pub(super) latest: watch::Sender<Option<Arc<EngineState>>>,
    snapshots: AtomicU64,
    build_ns: AtomicU64,
}

impl Default for Observer {
    fn default() -> Self {
        Observer {
            started: Instant::now(),
            streams: AtomicUsize::new(0),
            latest: watch::Sender::new(None),
            snapshots: AtomicU64::new(0),
            build_ns: AtomicU64::new(0),
        }
    }
}

impl Observer {
    /// Whether a stream is open (the engine then publishes after its steps).
    pub fn watching(&self) -> bool {
        self.streams.load(Ordering::Relaxed) > 0
    }

    /// Build the engine's state now, timing it (engine thread).
    pub fn take(&self, engine: &LlmEngine<'_>) -> Arc<EngineState> {
        let t = Instant::now();
        let state = Arc::new(engine.snapshot());
        self.build_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.snapshots.fetch_add(1, Ordering::Relaxed);
        state
    }

    /// Hand a state to every open stream (engine thread).
    pub fn publish(&self, state: Arc<EngineState>) {
        self.latest.send_replace(Some(state));
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

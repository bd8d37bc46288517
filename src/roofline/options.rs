//! How long and how large a measurement of the machine's limits is ([`MeasureOptions`]).

/// How long and how large the measurement is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasureOptions {
    /// Target duration of one trial (ms).
    pub trial_ms: f64,
    /// Trials per figure; the best is kept.
    pub trials: usize,
    /// Bytes of the bandwidth buffer (much larger than the last-level cache).
    pub buffer_bytes: usize,
}

impl Default for MeasureOptions {
    /// 25 ms trials, best of 5 (more chances at a quiet moment on a shared machine), a
    /// 512 MiB buffer: about 1–1.5 s in all.
    fn default() -> Self {
        MeasureOptions {
            trial_ms: 25.0,
            trials: 5,
            buffer_bytes: 512 << 20,
        }
    }
}

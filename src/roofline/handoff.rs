//! Core-to-core latency: the round trip of one cache line between two threads of rayon's
//! pool, the cost a parallel region's hand-off pays (a decode step forks ~150 regions, so it
//! pays it a few hundred times).
//!
//! Thread 0 writes an odd value to a shared 64-byte-aligned atomic and spins until thread 1
//! answers with the next even one; a round trip is one write and read on each side, so two
//! transfers of the line between the cores' caches. Within one L3 (one AMD CCX) this is
//! ~60–90 ns; across chiplets or sockets several times more. This project's 2-core VM moves
//! between the two within seconds (measured: docs/benchmarks.md, "The VM's core-to-core
//! round trip"), and its read bandwidth on 2 threads often doubles in the slow state (each
//! chiplet has its own link to memory) while decode steps, which hand off ~150 times, get
//! no faster.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Round trips per trial (~0.07–0.4 ms at 60–400 ns).
pub const ROUND_TRIPS: u64 = 1024;

/// Round trips timed together: a trial's figure is its fastest batch, so a trial that
/// another process interrupted still gives the batches that ran undisturbed.
pub const BATCH: u64 = 64;

/// Trials; the fastest batch of all is kept (a latency floor, as the other limits are
/// peaks).
pub const TRIALS: usize = 9;

/// A trial that has not finished in this long is cut short, keeping the batches it timed
/// (another process held one of the CPUs, or two threads share one CPU and need a
/// scheduler time slice per round trip).
const TRIAL_LIMIT: Duration = Duration::from_millis(20);

/// Spins before a waiting side yields its CPU (so two threads on one CPU still progress).
const SPINS_BEFORE_YIELD: u32 = 1 << 14;

#[repr(align(64))]
struct Line(AtomicU64);

/// The fastest mean round-trip time (ns) of one cache line between rayon's threads 0 and 1
/// over any [`BATCH`] consecutive round trips, in [`TRIALS`] trials of [`ROUND_TRIPS`]
/// (each cut short after about 20 ms: a few ms when the CPUs are free, up to ~0.25 s when
/// other threads keep them busy). None on a pool of one thread, in a process allowed one
/// CPU (not measured), or when no batch ran within the time (the two threads never ran at
/// once; [`why_not_measured`] says why). Call it from outside the pool: a pool thread busy
/// with other work counts as never running.
pub fn core_to_core_round_trip_ns() -> Option<f64> {
    // One CPU for the process (`taskset -c 0`): the threads could only take turns.
    if rayon::current_num_threads() < 2 || usable_cpus() < 2 {
        return None;
    }
    (0..TRIALS).filter_map(|_| trial()).reduce(f64::min)
}

/// Why [`core_to_core_round_trip_ns`] gave no figure on a pool of `threads` threads: one
/// thread, this process allowed a single CPU (`taskset`, a container's CPU set), or both
/// threads never ran at once (another process held a CPU).
pub fn why_not_measured(threads: usize) -> &'static str {
    if threads < 2 {
        "it needs 2 threads or more (--threads)"
    } else if usable_cpus() < 2 {
        "the pool's threads share the one CPU this process may use"
    } else {
        "the two threads never ran at once (another process held a CPU)"
    }
}

/// The CPUs this process may run on (its affinity mask: `taskset`, a container's CPU set).
fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One trial: its fastest batch's mean round trip (ns), None when no batch finished.
fn trial() -> Option<f64> {
    let line = Line(AtomicU64::new(0));
    let abandoned = AtomicBool::new(false);
    let times = rayon::broadcast(|ctx| match ctx.index() {
        0 => ping(&line.0, &abandoned),
        1 => {
            pong(&line.0, &abandoned);
            None
        }
        _ => None,
    });
    times.into_iter().flatten().next()
}

/// Thread 0's side: send 2i+1, wait for 2i+2; the fastest batch's mean round trip (ns).
fn ping(line: &AtomicU64, abandoned: &AtomicBool) -> Option<f64> {
    // Round trip 0 waits for thread 1 to be running and is not timed; batches start at 1.
    let begun = Instant::now();
    let mut best: Option<f64> = None;
    let mut batch_start = begun;
    for i in 0..=ROUND_TRIPS {
        if i % BATCH == 1 {
            batch_start = Instant::now();
        }
        line.store(2 * i + 1, Ordering::Release);
        if !wait_for(line, 2 * i + 2, abandoned, begun) {
            abandoned.store(true, Ordering::Release);
            return best;
        }
        if i > 0 && i % BATCH == 0 {
            let ns = batch_start.elapsed().as_secs_f64() * 1e9 / BATCH as f64;
            best = Some(best.map_or(ns, |b| b.min(ns)));
        }
    }
    best
}

/// Thread 1's side: answer every 2i+1 with 2i+2.
fn pong(line: &AtomicU64, abandoned: &AtomicBool) {
    let since = Instant::now();
    for i in 0..=ROUND_TRIPS {
        if !wait_for(line, 2 * i + 1, abandoned, since) {
            abandoned.store(true, Ordering::Release);
            return;
        }
        line.store(2 * i + 2, Ordering::Release);
    }
}

/// Spin (then yield) until `line` holds `value`; false once the other side gave up or
/// [`TRIAL_LIMIT`] has passed since `since`.
fn wait_for(line: &AtomicU64, value: u64, abandoned: &AtomicBool, since: Instant) -> bool {
    let mut spins = 0u32;
    while line.load(Ordering::Acquire) != value {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(SPINS_BEFORE_YIELD) {
            if abandoned.load(Ordering::Acquire) || since.elapsed() > TRIAL_LIMIT {
                return false;
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two threads (on two CPUs): a finite round trip of more than 10 ns (two transfers of a
    /// line between caches) and far below the abandon limit; one thread: none.
    #[test]
    fn round_trip_is_measured_on_two_threads_only() {
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a pool");
        assert_eq!(one.install(core_to_core_round_trip_ns), None);
        assert_eq!(
            why_not_measured(1),
            "it needs 2 threads or more (--threads)"
        );
        let two = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("a pool");
        // Other tests run meanwhile and may take a CPU for a whole trial: a few tries.
        let got = (0..5).find_map(|_| two.install(core_to_core_round_trip_ns));
        if usable_cpus() < 2 {
            // Two threads on one CPU (`taskset -c 0`): cut short, or a scheduler's round trip.
            assert!(why_not_measured(2).contains("share the one CPU"));
            return;
        }
        assert!(why_not_measured(2).contains("another process held a CPU"));
        let ns = got.expect("measured on two CPUs");
        assert!(ns.is_finite() && ns > 10.0 && ns < 1e6, "{ns} ns");
    }
}

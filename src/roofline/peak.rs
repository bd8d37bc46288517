//! This machine's limits, measured: f32 FMA throughput, the int8 dot-product roof and
//! streaming read bandwidth, on one thread and on every thread of rayon's pool.
//!
//! - **f32 FMA peak**: [`FMA_CHAINS`] independent chains of `vfmadd` as wide as the prefill
//!   GEMM's ([`crate::kernels::gemm::fma_lanes`]: 16 lanes with AVX-512F, 8 with AVX2 + FMA,
//!   detected at run time with `is_x86_feature_detected!`), so both FMA pipes stay busy
//!   whatever their latency; FLOPs = iterations · chains · lanes · 2 (multiply + add). On a
//!   CPU with two 512-bit FMA units (Intel Xeon) the 16-lane figure is twice the 8-lane one,
//!   and the GEMM reaches past the 8-lane "peak" (seen: 127 GFLOP/s of prefill against an
//!   8-lane 117), so the roof must be measured at the GEMM's width.
//! - **int8 dot-product roof**: the instruction our quantized dot products use
//!   ([`crate::kernels::matmul::vnni_bits`]): AVX-512 VNNI's `vpdpbusd` (u8·i8 products
//!   summed in fours into i32) on 512- or 256-bit vectors, else AVX2's `vpmaddubsw` (u8·i8
//!   products summed in pairs to i16) then `vpmaddwd` against ones (pairs to i32) and
//!   `vpaddd`; into [`INT8_CHAINS`] accumulators, over weights read from an L1-resident
//!   buffer; ops = 2 per multiply-add (128 per 512-bit `vpdpbusd`, 64 per 256-bit one).
//! - **read bandwidth**: the sum of a buffer much larger than the last-level cache (512 MiB
//!   by default, every page written first so reads hit real memory, not the shared zero
//!   page), split in one contiguous chunk per thread; bytes / wall time.
//!
//! Each figure is the best of a few trials (peaks, not averages), each trial sized to run
//! about [`MeasureOptions::trial_ms`]. Without AVX2 (another CPU, or another architecture)
//! portable loops measure what plain compiled code reaches; [`MachineLimits::kernel`] says
//! which ran. Units: GFLOP/s and GOP/s are 10^9 per second, GB/s is 10^9 bytes per second.
use super::bandwidth::read_bandwidth;
pub use super::bandwidth::{WorkingSetRead, WORKING_SET_MAX_BYTES};
use super::loops::{fma_loop, int8_loop, F32Loop, Int8Loop};
use crate::roofline::cpu_times::{CpuTimes, NAMED_CPUS};
use serde::Serialize;
use std::hint::black_box;
use std::time::Instant;

/// Independent FMA accumulators per thread: FMA latency (4–5 cycles) × 2 FMA pipes on
/// current x86 cores needs at least 10 in flight; 10 plus the two operands fit in the 16
/// AVX2 registers.
pub const FMA_CHAINS: usize = 10;

/// Independent int8 accumulators per thread (`vpmaddubsw` + `vpmaddwd` + `vpaddd`).
pub const INT8_CHAINS: usize = 8;

/// Independent `vpdpbusd` accumulators per thread: its latency (5 cycles) × 2 pipes needs
/// 10 in flight; AVX-512 has the 32 registers for 16 (measured with 8: ~25% below).
pub const VNNI_CHAINS: usize = 16;

/// int8 weight vectors the int8 loop cycles through (1 KiB of 256-bit ones, 2 KiB of
/// 512-bit ones: stays in L1).
pub(super) const INT8_VECTORS: usize = 32;

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

/// The measured limits of this machine.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MachineLimits {
    /// Which f32 loop ran: `avx512f` (16 lanes), `avx2+fma` (8 lanes) or `portable`.
    pub kernel: &'static str,
    /// f32 lanes per FMA of that loop (16, 8; 8 for the portable loop's arrays).
    pub fma_lanes: usize,
    /// Which int8 instruction ran: `vpdpbusd zmm`, `vpdpbusd ymm`, `vpmaddubsw + vpmaddwd`
    /// or `portable`.
    pub int8_kernel: &'static str,
    /// Threads of the "all threads" figures (rayon's pool: `--threads`).
    pub threads: usize,
    /// f32 FMA throughput of one thread (GFLOP/s, 2 FLOPs per lane per FMA).
    pub f32_gflop_s_per_core: f64,
    /// f32 FMA throughput of all `threads` threads (GFLOP/s): the compute roof.
    pub f32_gflop_s: f64,
    /// int8 dot-product throughput of one thread (GOP/s, 2 ops per multiply-add).
    pub int8_gop_s_per_core: f64,
    /// int8 dot-product throughput of all `threads` threads (GOP/s): the int8 roof.
    pub int8_gop_s: f64,
    /// Streaming read bandwidth of one thread (GB/s, 10^9 bytes/s).
    pub read_gb_s_per_core: f64,
    /// Streaming read bandwidth of all `threads` threads (GB/s): the bandwidth roof.
    pub read_gb_s: f64,
    /// Bytes of the buffer the bandwidth was read from.
    pub buffer_bytes: u64,
    /// The ridge point (FLOP/byte) = f32 peak (GFLOP/s) / bandwidth (GB/s), set where the
    /// two are measured: a phase whose arithmetic intensity is below it cannot reach the
    /// compute peak (memory-bound).
    pub ridge_flop_per_byte: f64,
    /// Read bandwidth over a buffer the size of the decode weights, when a model was
    /// loaded ([`MachineLimits::with_working_set`]); None otherwise (`bench --machine`).
    pub working_set: Option<WorkingSetRead>,
    /// How long the whole measurement took (ms).
    pub measure_ms: f64,
    /// CPUs other processes kept busy meanwhile, on average (0 = the machine was ours):
    /// above ~0.2 the all-thread figures are low. None where /proc/stat is missing.
    pub other_processes_cpus: Option<f64>,
    /// CPUs the hypervisor took meanwhile, on average (steal time, /proc/stat; 0 on bare
    /// metal): above ~0.2 the all-thread figures are low, as with other processes, but
    /// nothing on this machine shows why. None where /proc/stat is missing.
    pub hypervisor_steal_cpus: Option<f64>,
    /// Core-to-core latency (ns): the fastest mean round trip of one cache line between two
    /// threads of the pool ([`super::handoff`]), what each parallel region's hand-off pays.
    /// None on one thread, or when the two threads never ran at once
    /// ([`super::handoff::why_not_measured`]).
    pub core_to_core_round_trip_ns: Option<f64>,
}

impl MachineLimits {
    /// These limits with the read bandwidth over a `bytes`-byte buffer measured now (all
    /// threads, best of 5 trials after writing it once: about 0.1 s for 100 MB; a buffer
    /// below 32 MiB is read several times per trial). Unchanged (no figure) for a working
    /// set above [`WORKING_SET_MAX_BYTES`], which no CPU cache holds: its roof is the memory
    /// bandwidth already measured, and the buffer would cost its size in RAM.
    pub fn with_working_set(self, bytes: u64) -> MachineLimits {
        if bytes > WORKING_SET_MAX_BYTES {
            return self;
        }
        let opts = MeasureOptions {
            buffer_bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
            ..MeasureOptions::default()
        };
        let start = Instant::now();
        let (_, all, bytes) = read_bandwidth(opts, self.threads, has_avx2_fma());
        MachineLimits {
            working_set: Some(WorkingSetRead {
                bytes,
                read_gb_s: all / 1e9,
            }),
            measure_ms: self.measure_ms + start.elapsed().as_secs_f64() * 1e3,
            ..self
        }
    }

    /// One line, e.g. `f32 FMA 184.0 GFLOP/s (92.0 per core), int8 dot 370.1 GOP/s (...),
    /// read 19.30 GB/s (... 512 MiB buffer; 33.10 over 96.44 MB, the decode weights' size);
    /// ridge 9.5 FLOP/byte; core-to-core round trip 81 ns · 2 threads, avx2+fma and vpdpbusd
    /// ymm, measured in 1.1 s`.
    pub fn describe(&self) -> String {
        format!(
            "f32 FMA {:.1} GFLOP/s ({:.1} per core), int8 dot {:.1} GOP/s ({:.1} per core), read {:.2} GB/s ({:.2} on one core, {} MiB buffer{}); ridge {:.1} FLOP/byte{} · {}, {} and {}, measured in {:.2} s",
            self.f32_gflop_s,
            self.f32_gflop_s_per_core,
            self.int8_gop_s,
            self.int8_gop_s_per_core,
            self.read_gb_s,
            self.read_gb_s_per_core,
            self.buffer_bytes >> 20,
            match self.working_set {
                Some(w) => format!(
                    "; {:.2} over {}, the decode weights' size",
                    w.read_gb_s,
                    crate::roofline::line::bytes_text(w.bytes as f64)
                ),
                None => String::new(),
            },
            self.ridge_flop_per_byte,
            match self.core_to_core_round_trip_ns {
                Some(ns) => format!("; core-to-core round trip {ns:.0} ns"),
                None if self.threads < 2 => String::new(),
                None => format!(
                    "; core-to-core not measured: {}",
                    super::handoff::why_not_measured(self.threads)
                ),
            },
            crate::units::count_of(self.threads, "thread"),
            self.kernel,
            self.int8_kernel,
            self.measure_ms / 1e3
        ) + &self.disturbed_text()
    }

    /// ` (other processes used 0.45 CPUs meanwhile: the all-thread figures are low)` when
    /// other processes and the hypervisor's steal time together took [`DISTURBED_CPUS`] or
    /// more while these limits were measured (each named from 0.01 CPUs); empty otherwise.
    pub fn disturbed_text(&self) -> String {
        disturbed_text(self.other_processes_cpus, self.hypervisor_steal_cpus)
    }
}

/// CPUs (on average) from which what others took (other processes and the hypervisor's
/// steal time together) makes the all-thread figures low.
pub const DISTURBED_CPUS: f64 = 0.2;

/// [`MachineLimits::disturbed_text`] for these shares (CPUs on average; None = not read).
fn disturbed_text(others: Option<f64>, steal: Option<f64>) -> String {
    let (o, s) = (others.unwrap_or(0.0), steal.unwrap_or(0.0));
    if o + s < DISTURBED_CPUS {
        return String::new();
    }
    let named = NAMED_CPUS;
    let takers = match (o >= named, s >= named) {
        (true, true) => format!(
            "other processes used {o:.2} CPUs and the hypervisor took {s:.2} CPUs as steal time"
        ),
        (false, true) => format!("the hypervisor took {s:.2} CPUs as steal time"),
        _ => format!("other processes used {o:.2} CPUs"),
    };
    format!(" ({takers} meanwhile: the all-thread figures are low)")
}

/// Measure this machine's limits with the default options (about 1–1.5 s). "All threads"
/// means rayon's current pool (set by `--threads`).
pub fn measure() -> MachineLimits {
    measure_with(MeasureOptions::default())
}

/// Measure with `opts` (tests use short trials and a small buffer).
pub fn measure_with(opts: MeasureOptions) -> MachineLimits {
    let start = Instant::now();
    let cpu_before = CpuTimes::now();
    // NANOLLM_PORTABLE_KERNELS runs the portable kernels: the roofs are then the portable
    // loops', as on a CPU without AVX2 (the bandwidth sum is a read of memory either way).
    let avx2 = has_avx2_fma();
    let simd = avx2 && !crate::kernels::portable_forced();
    let threads = rayon::current_num_threads().max(1);
    let f32_loop = F32Loop::detect(simd);
    let fma = |iters: u64| fma_loop(f32_loop, iters);
    let fma_flops = (FMA_CHAINS * f32_loop.lanes() * 2) as f64;
    let f32_one = rate(opts, 1, fma_flops, &fma);
    let f32_first = rate(opts, threads, fma_flops, &fma);
    let int8_kind = Int8Loop::detect(simd);
    let int8 = |iters: u64| int8_loop(int8_kind, iters);
    let int8_ops = (INT8_VECTORS * int8_kind.bytes() * 2) as f64;
    let int8_one = rate(opts, 1, int8_ops, &int8);
    let int8_first = rate(opts, threads, int8_ops, &int8);
    let (read_one, read_all, buffer_bytes) = read_bandwidth(opts, threads, avx2);
    let core_to_core_round_trip_ns = super::handoff::core_to_core_round_trip_ns();
    // A disturbed compute figure is measured again only now, half a second or more later:
    // on the AMD EPYC VM a slow spell (each of 2 vCPUs at half speed, no steal time, as two
    // hardware threads of one physical core would be) lasted ~0.75 s, through all three of
    // the back-to-back tries the peak used to make (2026-12-03: 15 trials of ~50 ms where
    // 25 ms was asked, then the int8 trials at full speed).
    let f32_all = rate_all(threads, f32_one, f32_first, || {
        rate(opts, threads, fma_flops, &fma)
    });
    let int8_all = rate_all(threads, int8_one, int8_first, || {
        rate(opts, threads, int8_ops, &int8)
    });
    let (f32_one, f32_all) = one_thread_once(threads, f32_one, f32_all);
    let (int8_one, int8_all) = one_thread_once(threads, int8_one, int8_all);
    let (read_one, read_all) = one_thread_once(threads, read_one, read_all);
    let (other_processes_cpus, hypervisor_steal_cpus) =
        CpuTimes::shares(cpu_before, CpuTimes::now());
    MachineLimits {
        kernel: f32_loop.name(),
        fma_lanes: f32_loop.lanes(),
        int8_kernel: int8_kind.name(),
        threads,
        f32_gflop_s_per_core: f32_one / 1e9,
        f32_gflop_s: f32_all / 1e9,
        int8_gop_s_per_core: int8_one / 1e9,
        int8_gop_s: int8_all / 1e9,
        read_gb_s_per_core: read_one / 1e9,
        read_gb_s: read_all / 1e9,
        buffer_bytes,
        ridge_flop_per_byte: f32_all / read_all.max(f64::MIN_POSITIVE),
        working_set: None,
        measure_ms: start.elapsed().as_secs_f64() * 1e3,
        other_processes_cpus,
        hypervisor_steal_cpus,
        core_to_core_round_trip_ns,
    }
}

/// On one thread the one-core and all-threads figures measure the same thing: both become
/// the better of the two (two trials of one loop printed as two different rates).
fn one_thread_once(threads: usize, one: f64, all: f64) -> (f64, f64) {
    if threads == 1 {
        let best = one.max(all);
        (best, best)
    } else {
        (one, all)
    }
}

/// An all-threads figure, `first` or, while it looks disturbed, measured again (twice at
/// most, keeping the best): compute loops scale with cores, so on `threads` ≥ 2 a figure
/// below 1.3× the one-core one means the threads did not all run at full speed during the
/// trials (seen on this VM: 117 GFLOP/s "on 2 threads" against 117 on one, which made a
/// phase read 112% of peak).
fn rate_all(threads: usize, one: f64, first: f64, measure: impl Fn() -> f64) -> f64 {
    let mut best = first;
    for _ in 0..2 {
        if !looks_disturbed(threads, one, best) {
            break;
        }
        best = best.max(measure());
    }
    best
}

/// Whether an all-threads compute figure is implausibly low against one core's.
fn looks_disturbed(threads: usize, one: f64, all: f64) -> bool {
    threads >= 2 && all < 1.3 * one
}

/// True when this CPU runs the AVX2 + FMA loops.
pub(super) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Best throughput (operations/s) of `kernel` on `threads` threads (1 = the calling
/// thread; more = every thread of rayon's pool at once), `ops_per_iter` per iteration.
fn rate(
    opts: MeasureOptions,
    threads: usize,
    ops_per_iter: f64,
    kernel: &(dyn Fn(u64) -> f32 + Sync),
) -> f64 {
    // Calibrate: a short run gives the iterations one trial needs.
    let mut iters = 1u64 << 12;
    let per_iter_s = loop {
        let t = Instant::now();
        black_box(kernel(iters));
        let s = t.elapsed().as_secs_f64();
        if s > 2e-3 || iters > 1 << 40 {
            break s / iters as f64;
        }
        iters *= 4;
    };
    let iters = ((opts.trial_ms / 1e3 / per_iter_s.max(1e-12)) as u64).max(1);
    let mut best = 0f64;
    for _ in 0..opts.trials.max(1) {
        let t = Instant::now();
        if threads == 1 {
            black_box(kernel(iters));
        } else {
            black_box(rayon::broadcast(|_| kernel(iters)));
        }
        let s = t.elapsed().as_secs_f64();
        best = best.max(threads as f64 * iters as f64 * ops_per_iter / s.max(1e-12));
    }
    best
}

#[cfg(test)]
#[path = "peak_tests.rs"]
mod tests;

//! [`MachineLimits`]: what [`super::peak`] measured of this machine, and how it reads
//! (a working set's bandwidth on request, a description, whether others disturbed it).
use super::bandwidth::{read_bandwidth, WorkingSetRead, WORKING_SET_MAX_BYTES};
use super::cpu_times::NAMED_CPUS;
use super::loops::has_avx2_fma;
use super::options::MeasureOptions;
use super::si::bytes_text;
use serde::Serialize;
use std::time::Instant;

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
                    bytes_text(w.bytes as f64)
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
pub(crate) fn disturbed_text(others: Option<f64>, steal: Option<f64>) -> String {
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

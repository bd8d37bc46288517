//! This machine's limits, measured: f32 FMA throughput, the int8 dot-product roof and
//! streaming read bandwidth, on one thread and on every thread of rayon's pool.
//!
//! - **f32 FMA peak**: [`FMA_CHAINS`] independent chains of `vfmadd` as wide as the prefill
//!   GEMM's ([`crate::kernels::gemm::fma_lanes`]: 16 lanes with AVX-512F, 8 with AVX2 + FMA,
//!   detected at run time with `is_x86_feature_detected!`), so both FMA pipes stay busy
//!   whatever their latency; FLOPs = iterations · chains · lanes · 2 (multiply + add). On a
//!   CPU with two 512-bit FMA units (Intel Xeon) the 16-lane figure is twice the 8-lane one,
//!   and the GEMM reaches past the 8-lane "peak", so the roof must be measured at the
//!   GEMM's width (seen: docs/benchmarks.md, "The f32 peak at the GEMM's width").
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
use super::limits::MachineLimits;
use super::loops::{fma_loop, has_avx2_fma, int8_loop, F32Loop, Int8Loop, INT8_VECTORS};
pub use super::loops::{FMA_CHAINS, INT8_CHAINS};
use super::options::MeasureOptions;
use crate::roofline::cpu_times::CpuTimes;
use std::hint::black_box;
use std::time::Instant;

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
    let simd = avx2 && !crate::cpu::portable_forced();
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
    // a slow spell of the VM's vCPUs outlasted back-to-back tries (seen: docs/benchmarks.md,
    // "A disturbed peak measured again later").
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
/// trials (seen: docs/benchmarks.md, "A disturbed peak measured again later").
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
mod tests;

//! Streaming read bandwidth: the memory figure of [`super::peak`] (a buffer larger than any
//! cache) and the read over a buffer the size of a decode step's weights
//! ([`WorkingSetRead`]). A trial sums the buffer's u64 words (AVX2 where present), split in
//! one contiguous chunk per thread; bytes / wall time, GB = 10^9 bytes.
use super::options::MeasureOptions;
use rayon::prelude::*;
use serde::Serialize;
use std::hint::black_box;
use std::time::Instant;

/// The largest working set [`super::limits::MachineLimits::with_working_set`] measures (1 GiB: above the
/// largest last-level caches of 2026's CPUs).
pub const WORKING_SET_MAX_BYTES: u64 = 1 << 30;

/// Streaming read bandwidth over a buffer of a given size (all threads): for a buffer the
/// size of a decode step's weights, what a step that finds them in the CPU's caches can
/// reach. The memory figure ([`super::limits::MachineLimits::read_gb_s`]) reads a buffer larger than any
/// cache; where the last-level cache holds the model (this project's Xeon VM reports 300 MiB
/// of L3 against ~96 MB of SmolLM2 weights), decode can pass it, and this is the roof it
/// meets instead — the cache-aware roofline of Ilic, Pratas and Sousa (IEEE CAL 2014), at
/// the one size that matters here. Shared caches make it as noisy as the step itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WorkingSetRead {
    /// Bytes of the buffer (the decode weights' bytes).
    pub bytes: u64,
    /// Read bandwidth of all threads over it (GB/s, 10^9 bytes/s), best of the trials.
    pub read_gb_s: f64,
}

/// Streaming read bandwidth (bytes/s) on one thread and on `threads` threads, and the
/// buffer's size in bytes.
pub(super) fn read_bandwidth(opts: MeasureOptions, threads: usize, avx2: bool) -> (f64, f64, u64) {
    let words = (opts.buffer_bytes / 8).max(threads * 64);
    let mut data = vec![0u64; words];
    // Write every page (in parallel: first touch costs page faults), so reads hit memory.
    data.par_chunks_mut(1 << 16)
        .enumerate()
        .for_each(|(c, chunk)| {
            for (i, w) in chunk.iter_mut().enumerate() {
                *w = (c << 16 | i) as u64;
            }
        });
    let bytes = (words * 8) as f64;
    // A small buffer is read several times per trial, so a trial reads at least
    // MIN_TRIAL_BYTES and the fork of the threads does not dominate it.
    let passes = (MIN_TRIAL_BYTES / (words * 8)).max(1);
    let read = |part: &[u64]| {
        let mut acc = 0u64;
        for _ in 0..passes {
            acc = acc.wrapping_add(sum_words(avx2, black_box(part)));
        }
        acc
    };
    let chunk = words.div_ceil(threads);
    let total = bytes * passes as f64;
    let mut best = (0f64, 0f64);
    for _ in 0..opts.trials.max(1) {
        let t = Instant::now();
        black_box(read(&data));
        best.0 = best.0.max(total / t.elapsed().as_secs_f64().max(1e-12));
        let t = Instant::now();
        black_box(rayon::broadcast(|ctx| {
            let lo = (ctx.index() * chunk).min(words);
            read(&data[lo..(lo + chunk).min(words)])
        }));
        best.1 = best.1.max(total / t.elapsed().as_secs_f64().max(1e-12));
    }
    (best.0, best.1, bytes as u64)
}

/// Bytes one bandwidth trial reads at least (a buffer smaller than this is read several
/// times per trial).
const MIN_TRIAL_BYTES: usize = 32 << 20;

/// The wrapping sum of `data`.
fn sum_words(avx2: bool, data: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is true only when the CPU has AVX2 (has_avx2_fma).
        return unsafe { sum_avx2(data) };
    }
    let _ = avx2;
    let mut acc = [0u64; 8];
    let mut it = data.chunks_exact(8);
    for c in &mut it {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(v);
        }
    }
    let tail = it.remainder().iter().fold(0u64, |s, &v| s.wrapping_add(v));
    acc.iter().fold(tail, |s, &v| s.wrapping_add(v))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_avx2(data: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_si256(); 4];
    let mut it = data.chunks_exact(16);
    for c in &mut it {
        let p = c.as_ptr() as *const __m256i;
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 16 u64 = four 32-byte vectors; loadu has no alignment need.
            *a = _mm256_add_epi64(*a, unsafe { _mm256_loadu_si256(p.add(k)) });
        }
    }
    let mut lanes = [0u64; 4];
    let sum = _mm256_add_epi64(
        _mm256_add_epi64(acc[0], acc[1]),
        _mm256_add_epi64(acc[2], acc[3]),
    );
    // SAFETY: `lanes` holds 4 u64; storeu has no alignment requirement.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, sum) };
    let tail = it.remainder().iter().fold(0u64, |s, &v| s.wrapping_add(v));
    lanes.iter().fold(tail, |s, &v| s.wrapping_add(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sums_are_the_words_sum_with_and_without_avx2() {
        let data: Vec<u64> = (0..1001).collect();
        assert_eq!(sum_words(false, &data), 1000 * 1001 / 2);
        let avx2 = cfg!(target_arch = "x86_64") && std::is_x86_feature_detected!("avx2");
        assert_eq!(sum_words(avx2, &data), 1000 * 1001 / 2);
    }
}

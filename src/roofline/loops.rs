//! The compute loops behind this machine's peaks ([`super::peak`]): independent chains of
//! FMAs as wide as the prefill GEMM's, and of the decode kernels' int8 dot-product
//! instruction, each with a portable fallback that computes the same values.
use std::hint::black_box;

/// Independent FMA accumulators per thread: FMA latency (4–5 cycles) × 2 FMA pipes on
/// current x86 cores needs at least 10 in flight; 10 plus the two operands fit in the 16
/// AVX2 registers.
pub const FMA_CHAINS: usize = 10;

/// Independent int8 accumulators per thread (`vpmaddubsw` + `vpmaddwd` + `vpaddd`).
pub const INT8_CHAINS: usize = 8;

/// Independent `vpdpbusd` accumulators per thread: its latency (5 cycles) × 2 pipes needs
/// 10 in flight; AVX-512 has the 32 registers for 16 (8 measured lower: docs/benchmarks.md,
/// "`vpdpbusd` accumulators in the int8 roof").
pub const VNNI_CHAINS: usize = 16;

/// int8 weight vectors the int8 loop cycles through (1 KiB of 256-bit ones, 2 KiB of
/// 512-bit ones: stays in L1).
pub(crate) const INT8_VECTORS: usize = 32;

/// True when this CPU runs the AVX2 + FMA loops.
pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The f32 FMA loop: as wide as the prefill GEMM's FMAs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum F32Loop {
    Avx512,
    Avx2,
    Portable,
}

impl F32Loop {
    pub(super) fn detect(avx2: bool) -> F32Loop {
        match (crate::kernels::gemm::fma_lanes(), avx2) {
            (16, _) => F32Loop::Avx512,
            (_, true) => F32Loop::Avx2,
            _ => F32Loop::Portable,
        }
    }

    pub(super) fn lanes(self) -> usize {
        match self {
            F32Loop::Avx512 => 16,
            _ => 8,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            F32Loop::Avx512 => "avx512f",
            F32Loop::Avx2 => "avx2+fma",
            F32Loop::Portable => "portable",
        }
    }
}

/// `iters` rounds of one FMA per chain; returns the accumulators' sum (kept alive).
pub(super) fn fma_loop(kind: F32Loop, iters: u64) -> f32 {
    #[cfg(target_arch = "x86_64")]
    match kind {
        // SAFETY: detect() chose Avx512 only where the GEMM runs AVX-512F (checked).
        F32Loop::Avx512 => return unsafe { fma_avx512(iters) },
        // SAFETY: Avx2 only when the CPU has AVX2 and FMA (has_avx2_fma).
        F32Loop::Avx2 => return unsafe { fma_avx2(iters) },
        F32Loop::Portable => {}
    }
    let _ = kind;
    fma_portable(iters)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fma_avx512(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let a = _mm512_set1_ps(black_box(0.999_999));
    let b = _mm512_set1_ps(black_box(1e-7));
    let mut acc = [_mm512_set1_ps(black_box(1.0)); FMA_CHAINS];
    for _ in 0..iters {
        for c in acc.iter_mut() {
            *c = _mm512_fmadd_ps(*c, a, b);
        }
    }
    let mut sum = _mm512_setzero_ps();
    for c in acc {
        sum = _mm512_add_ps(sum, c);
    }
    _mm512_reduce_add_ps(sum)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_avx2(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let a = _mm256_set1_ps(black_box(0.999_999));
    let b = _mm256_set1_ps(black_box(1e-7));
    let mut acc = [_mm256_set1_ps(black_box(1.0)); FMA_CHAINS];
    for _ in 0..iters {
        for c in acc.iter_mut() {
            *c = _mm256_fmadd_ps(*c, a, b);
        }
    }
    let mut sum = _mm256_setzero_ps();
    for c in acc {
        sum = _mm256_add_ps(sum, c);
    }
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds 8 f32; storeu has no alignment requirement.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
    lanes.iter().sum()
}

/// The same chains in plain code: a multiply and an add per lane (Rust does not fuse them).
pub(super) fn fma_portable(iters: u64) -> f32 {
    let (a, b) = (black_box(0.999_999f32), black_box(1e-7f32));
    let mut acc = [[black_box(1.0f32); 8]; FMA_CHAINS];
    for _ in 0..iters {
        for c in acc.iter_mut() {
            for v in c.iter_mut() {
                *v = *v * a + b;
            }
        }
    }
    acc.iter().flatten().sum()
}

/// The int8 loop: the instruction of the decode kernels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Int8Loop {
    Vnni512,
    Vnni256,
    Avx2,
    Portable,
}

impl Int8Loop {
    pub(super) fn detect(avx2: bool) -> Int8Loop {
        match (crate::kernels::matmul::vnni_bits(), avx2) {
            (512, _) => Int8Loop::Vnni512,
            (256, _) => Int8Loop::Vnni256,
            (_, true) => Int8Loop::Avx2,
            _ => Int8Loop::Portable,
        }
    }

    /// Bytes (multiply-adds) per weight vector.
    pub(super) fn bytes(self) -> usize {
        match self {
            Int8Loop::Vnni512 => 64,
            _ => 32,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Int8Loop::Vnni512 => "vpdpbusd zmm",
            Int8Loop::Vnni256 => "vpdpbusd ymm",
            Int8Loop::Avx2 => "vpmaddubsw + vpmaddwd",
            Int8Loop::Portable => "portable",
        }
    }
}

/// `iters` passes over [`INT8_VECTORS`] weight vectors (one u8·i8 multiply-add per byte);
/// returns the accumulators' sum (kept alive).
pub(super) fn int8_loop(kind: Int8Loop, iters: u64) -> f32 {
    let mut weights = [0i8; INT8_VECTORS * 64];
    for (i, w) in weights.iter_mut().enumerate() {
        *w = (i % 251) as i8;
    }
    let weights = black_box(weights);
    #[cfg(target_arch = "x86_64")]
    match kind {
        // SAFETY: detect() chose Vnni512 / Vnni256 only where the decode kernels run them
        // (AVX-512 VNNI with F, BW, VL checked), Avx2 only with AVX2 (has_avx2_fma).
        Int8Loop::Vnni512 => return unsafe { int8_vnni512(iters, &weights) },
        // SAFETY: as above.
        Int8Loop::Vnni256 => return unsafe { int8_vnni256(iters, &weights) },
        // SAFETY: as above.
        Int8Loop::Avx2 => return unsafe { int8_avx2(iters, &weights) },
        Int8Loop::Portable => {}
    }
    let _ = kind;
    int8_portable(iters, &weights)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn int8_vnni512(iters: u64, weights: &[i8; INT8_VECTORS * 64]) -> f32 {
    use std::arch::x86_64::*;
    let step = _mm512_set1_epi8(1);
    let mut x = _mm512_set1_epi8(black_box(3));
    let mut acc = [_mm512_setzero_si512(); VNNI_CHAINS];
    let ptr = weights.as_ptr() as *const __m512i;
    for _ in 0..iters {
        for v in (0..INT8_VECTORS).step_by(VNNI_CHAINS) {
            for (c, a) in acc.iter_mut().enumerate() {
                // SAFETY: v + c < INT8_VECTORS, so the 64 bytes are inside `weights`.
                let w = unsafe { _mm512_loadu_si512(ptr.add(v + c)) };
                *a = _mm512_dpbusd_epi32(*a, x, w);
            }
        }
        // The activations change every pass, so no product is loop-invariant.
        x = _mm512_add_epi8(x, step);
    }
    let mut sum = _mm512_setzero_si512();
    for a in acc {
        sum = _mm512_add_epi32(sum, a);
    }
    _mm512_reduce_add_epi32(sum) as f32
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512vnni,avx512vl")]
fn int8_vnni256(iters: u64, weights: &[i8; INT8_VECTORS * 64]) -> f32 {
    use std::arch::x86_64::*;
    let step = _mm256_set1_epi8(1);
    let mut x = _mm256_set1_epi8(black_box(3));
    let mut acc = [_mm256_setzero_si256(); VNNI_CHAINS];
    let ptr = weights.as_ptr() as *const __m256i;
    for _ in 0..iters {
        for v in (0..INT8_VECTORS).step_by(VNNI_CHAINS) {
            for (c, a) in acc.iter_mut().enumerate() {
                // SAFETY: v + c < INT8_VECTORS, so the 32 bytes are inside `weights`.
                let w = unsafe { _mm256_loadu_si256(ptr.add(v + c)) };
                *a = _mm256_dpbusd_epi32(*a, x, w);
            }
        }
        x = _mm256_add_epi8(x, step);
    }
    let mut sum = _mm256_setzero_si256();
    for a in acc {
        sum = _mm256_add_epi32(sum, a);
    }
    let mut lanes = [0i32; 8];
    // SAFETY: `lanes` holds 8 i32; storeu has no alignment requirement.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, sum) };
    lanes.iter().map(|&v| v as f32).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn int8_avx2(iters: u64, weights: &[i8; INT8_VECTORS * 64]) -> f32 {
    use std::arch::x86_64::*;
    let ones = _mm256_set1_epi16(1);
    let step = _mm256_set1_epi8(1);
    let mut x = _mm256_set1_epi8(black_box(3));
    let mut acc = [_mm256_setzero_si256(); INT8_CHAINS];
    let ptr = weights.as_ptr() as *const __m256i;
    for _ in 0..iters {
        for v in (0..INT8_VECTORS).step_by(INT8_CHAINS) {
            for (c, a) in acc.iter_mut().enumerate() {
                // SAFETY: v + c < INT8_VECTORS, so the 32 bytes are inside `weights`.
                let w = unsafe { _mm256_loadu_si256(ptr.add(v + c)) };
                let pairs = _mm256_maddubs_epi16(x, w);
                *a = _mm256_add_epi32(*a, _mm256_madd_epi16(pairs, ones));
            }
        }
        // The activations change every pass, so no product is loop-invariant.
        x = _mm256_add_epi8(x, step);
    }
    let mut sum = _mm256_setzero_si256();
    for a in acc {
        sum = _mm256_add_epi32(sum, a);
    }
    let mut lanes = [0i32; 8];
    // SAFETY: `lanes` holds 8 i32; storeu has no alignment requirement.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, sum) };
    lanes.iter().map(|&v| v as f32).sum()
}

/// The same multiply-adds in plain code (u8 activations times i8 weights into i32).
fn int8_portable(iters: u64, weights: &[i8; INT8_VECTORS * 64]) -> f32 {
    let mut x = black_box(3u8);
    let mut acc = [0i32; 32];
    for _ in 0..iters {
        for chunk in weights[..INT8_VECTORS * 32].chunks_exact(32) {
            for (a, &w) in acc.iter_mut().zip(chunk) {
                *a = a.wrapping_add(x as i32 * w as i32);
            }
        }
        x = x.wrapping_add(1) & 0x7f;
    }
    acc.iter().map(|&v| v as f32).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_portable_loops_compute_what_the_simd_loops_compute() {
        // Same chains, same operations: the results agree (f32 rounding aside), which also
        // shows neither loop was optimized away.
        // The 16-lane loop sums twice the lanes of the portable one's 8.
        let kind = F32Loop::detect(has_avx2_fma());
        let (p, s) = (fma_portable(1000), fma_loop(kind, 1000));
        let p = p * (kind.lanes() / 8) as f32;
        assert!((p - s).abs() <= 1e-3 * p.abs(), "{kind:?}: {p} vs {s}");
    }
}

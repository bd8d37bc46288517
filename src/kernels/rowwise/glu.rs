//! The gated MLP's activations over slices: SwiGLU's `g ← silu(g) · u` with
//! `silu(v) = v / (1 + e^−v)` (Shazeer 2020), and GeGLU's `g ← gelu_tanh(g) · u` (Gemma;
//! HF `gelu_pytorch_tanh`) with `gelu_tanh(v) = ½v(1 + tanh(√(2/π)(v + 0.044715v³)))`,
//! computed as `v / (1 + e^−2z)`, `z = √(2/π)(v + 0.044715v³)` (the same function:
//! `½(1 + tanh z) = 1 / (1 + e^−2z)`). AVX2 + FMA eight values at a time where the CPU has
//! them, libm's `expf` otherwise.
//!
//! The vector `exp` is the Cephes single-precision method (range reduction
//! `x = n·ln2 + r`, |r| ≤ ln2/2, a degree-6 polynomial for `e^r`, times `2^n` built in the
//! exponent bits): relative error about 2e-7 (a few ulp), against libm's ~0.5 ulp. It
//! replaced libm's slower scalar `expf` (measured: docs/benchmarks.md, "The vector exp in
//! SwiGLU and GeGLU").
//!
//! Every value's result depends on that value and its `u` alone (a slice's tail runs
//! through the same vector code, padded), so a row's output does not depend on the batch
//! or where a chunk starts: naive and KV-cached decode stay bit-identical.

/// `gate[i] = silu(gate[i]) · up[i]` for every `i` (`up` at least as long as `gate`).
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::kernels::avx2_fma() {
            // SAFETY: AVX2 and FMA were just detected.
            return unsafe { gated_avx2::<false>(gate, up) };
        }
    }
    silu_mul_portable(gate, up);
}

/// `gate[i] = gelu_tanh(gate[i]) · up[i]` for every `i` (`up` at least as long as `gate`).
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::kernels::avx2_fma() {
            // SAFETY: AVX2 and FMA were just detected.
            return unsafe { gated_avx2::<true>(gate, up) };
        }
    }
    gelu_tanh_mul_portable(gate, up);
}

/// √(2/π), GELU's tanh approximation (Hendrycks & Gimpel 2016).
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
/// The cubic term's coefficient of the same approximation.
const GELU_CUBIC: f32 = 0.044_715;

/// The portable GeGLU path: the vector path's steps one value at a time (its `exp`, its
/// fused multiply-adds), so the same bits: 8-bit activations downstream re-round any
/// last-bit difference (issue 56).
pub fn gelu_tanh_mul_portable(gate: &mut [f32], up: &[f32]) {
    for (a, &b) in gate.iter_mut().zip(up) {
        let v = *a;
        let inner = GELU_CUBIC.mul_add((v * v) * v, v);
        *a = gated1(v, (2.0 * SQRT_2_OVER_PI) * inner, b);
    }
}

/// The portable SwiGLU path, the vector path's bits as [`gelu_tanh_mul_portable`].
pub fn silu_mul_portable(gate: &mut [f32], up: &[f32]) {
    for (a, &b) in gate.iter_mut().zip(up) {
        *a = gated1(*a, *a, b);
    }
}

/// One lane of `gated8`: `v / (1 + e^−a) · u`.
fn gated1(v: f32, a: f32, u: f32) -> f32 {
    let e = exp1(0.0 - a);
    (v / (1.0 + e)) * u
}

/// One lane of `exp8`: clamped as `minps`/`maxps` clamp (a NaN passes through).
fn exp1(x: f32) -> f32 {
    let x = if 88.7 < x { 88.7 } else { x };
    exp1_in_range(if -87.3 > x { -87.3 } else { x })
}

/// One lane of `exp8_in_range`, step for step (round to nearest even, the same fused
/// multiply-adds), so the same bits.
pub(crate) fn exp1_in_range(x: f32) -> f32 {
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = (-n).mul_add(0.693_359_4, x);
    let r = (-n).mul_add(-2.121_944_4e-4, r);
    let mut p = 1.987_569_1e-4f32;
    for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = p.mul_add(r, c);
    }
    let r2 = r * r;
    let y = p.mul_add(r2, r) + 1.0;
    // cvtps_epi32 of an integer (NaN: i32::MIN, as the vector code's "integer indefinite").
    let ni = if n.is_nan() { i32::MIN } else { n as i32 };
    y * f32::from_bits((ni.wrapping_add(127) << 23) as u32)
}

/// `gate = act(gate) · up` with `act` GELU-tanh (`GELU`) or SiLU.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gated_avx2<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
    use std::arch::x86_64::*;
    let n = gate.len().min(up.len());
    let (gate, up) = (&mut gate[..n], &up[..n]);
    let mut g8 = gate.chunks_exact_mut(8);
    let mut u8 = up.chunks_exact(8);
    for (g, u) in (&mut g8).zip(&mut u8) {
        // SAFETY: both chunks hold 8 values.
        unsafe {
            let v = _mm256_loadu_ps(g.as_ptr());
            let y = gated8::<GELU>(v, _mm256_loadu_ps(u.as_ptr()));
            _mm256_storeu_ps(g.as_mut_ptr(), y);
        }
    }
    let (g, u) = (g8.into_remainder(), u8.remainder());
    if !g.is_empty() {
        // The tail through the same lanes, zero-padded.
        let (mut gb, mut ub) = ([0f32; 8], [0f32; 8]);
        gb[..g.len()].copy_from_slice(g);
        ub[..u.len()].copy_from_slice(u);
        // SAFETY: 8-value arrays.
        unsafe {
            let y = gated8::<GELU>(_mm256_loadu_ps(gb.as_ptr()), _mm256_loadu_ps(ub.as_ptr()));
            _mm256_storeu_ps(gb.as_mut_ptr(), y);
        }
        let k = g.len();
        g.copy_from_slice(&gb[..k]);
    }
}

/// `v / (1 + e^−a) · u` per lane, `a = v` (SiLU) or `a = 2√(2/π)(v + 0.044715v³)` (GELU).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
fn gated8<const GELU: bool>(
    v: std::arch::x86_64::__m256,
    u: std::arch::x86_64::__m256,
) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let a = if GELU {
        let v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
        let inner = _mm256_fmadd_ps(_mm256_set1_ps(GELU_CUBIC), v3, v);
        _mm256_mul_ps(_mm256_set1_ps(2.0 * SQRT_2_OVER_PI), inner)
    } else {
        v
    };
    let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), a));
    _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0), e)), u)
}

/// `e^x` per lane. Inputs are clamped to [−87.3, 88.7]: below −87.3 the result is ~1e-38
/// (libm: a denormal or 0); from about 88.38 on (n = 128) it is `+inf`, where libm gives
/// `+inf` from 88.73 on (silu's result is −0 or ~1e-37 either way). NaN lanes give NaN.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp8(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // minps/maxps return the second operand when either is NaN: x second keeps NaN.
    let x = _mm256_min_ps(_mm256_set1_ps(88.7), x);
    exp8_in_range(_mm256_max_ps(_mm256_set1_ps(-87.3), x))
}

/// `e^x` per lane for `x` in [−87.3, 88.7] (callers clamp): `x = n·ln2 + r`, a degree-6
/// polynomial for `e^r` on |r| ≤ ln2/2, times `2^n` built in the exponent bits (n in
/// −126 ..= 128; 128 gives the bits of +inf). Shared with attention's softmax.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn exp8_in_range(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let n = _mm256_round_ps(
        _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    // r = x − n·ln2, with ln2 split in two for precision.
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.987_569_1e-4);
    for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let r2 = _mm256_mul_ps(r, r);
    let y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
    let pow2 = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
        23,
    );
    _mm256_mul_ps(y, _mm256_castsi256_ps(pow2))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The portable SwiGLU and GeGLU give the vector paths' bits, tails included.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_portable_paths_give_the_vector_bits() {
        if !crate::kernels::avx2_fma() {
            return;
        }
        let gate: Vec<f32> = (-3000..=3001)
            .map(|i| i as f32 * 0.031)
            .chain([
                -1e30,
                -88.8,
                -87.4,
                87.4,
                88.5,
                88.8,
                1e30,
                0.0,
                -0.0,
                f32::NAN,
            ])
            .collect();
        let up: Vec<f32> = (0..gate.len())
            .map(|i| 0.5 + (i % 9) as f32 * 0.3)
            .collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let (mut a, mut b) = (gate.clone(), gate.clone());
        silu_mul(&mut a, &up);
        silu_mul_portable(&mut b, &up);
        assert_eq!(bits(&a), bits(&b), "silu");
        let (mut a, mut b) = (gate.clone(), gate.clone());
        gelu_tanh_mul(&mut a, &up);
        gelu_tanh_mul_portable(&mut b, &up);
        assert_eq!(bits(&a), bits(&b), "gelu");
    }

    /// The vector path against the f64 formula on values across the whole range (and the
    /// specials), within 4e-7 relative (+1e-30 absolute, for results near 0).
    #[test]
    fn matches_the_f64_formula() {
        let mut gate: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.05).collect();
        gate.extend([
            -1e30, -200.0, -88.8, -88.7, -87.4, 87.4, 88.8, 1e30, 0.0, -0.0,
        ]);
        gate.extend((0..37).map(|i| (i as f32 * 0.731).sin() * 9.0));
        let up: Vec<f32> = (0..gate.len())
            .map(|i| 1.0 + (i % 7) as f32 * 0.25)
            .collect();
        let mut got = gate.clone();
        silu_mul(&mut got, &up);
        for ((&v, &u), &y) in gate.iter().zip(&up).zip(&got) {
            let (v64, u64) = (v as f64, u as f64);
            let want = v64 / (1.0 + (-v64).exp()) * u64;
            assert!(
                (y as f64 - want).abs() <= 4e-7 * want.abs() + 1e-30,
                "silu({v}) · {u}: {y} vs {want}"
            );
        }
    }

    /// GELU-tanh against the f64 formula, within 2e-7 · (4 + |2z|) relative (the f32
    /// rounding of the exponent −2z carries over into e^−2z: 1e-6 near 0, more in the far
    /// negative tail where the result is ~0), and the portable path alike.
    #[test]
    fn gelu_tanh_matches_the_f64_formula() {
        let gate: Vec<f32> = (-1200..=1200)
            .map(|i| i as f32 * 0.01)
            .chain([-30.0, 30.0, 0.0, 1e4, -1e4])
            .collect();
        let up: Vec<f32> = (0..gate.len())
            .map(|i| 0.5 + (i % 5) as f32 * 0.3)
            .collect();
        let (mut got, mut portable) = (gate.clone(), gate.clone());
        gelu_tanh_mul(&mut got, &up);
        gelu_tanh_mul_portable(&mut portable, &up);
        for (i, (&v, &u)) in gate.iter().zip(&up).enumerate() {
            let x = v as f64;
            let z = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            // ½(1 + tanh z) as 1 / (1 + e^−2z): f64's tanh rounds to −1 from z ≈ −19 on.
            let want = x / (1.0 + (-2.0 * z).exp()) * u as f64;
            for (what, y) in [("vector", got[i]), ("portable", portable[i])] {
                assert!(
                    (y as f64 - want).abs() <= 2e-7 * (4.0 + 2.0 * z.abs()) * want.abs() + 1e-30,
                    "{what} gelu_tanh({v}) · {u}: {y} vs {want}"
                );
            }
        }
    }

    /// A value's result does not depend on where it sits in the slice (vector body or tail).
    #[test]
    fn a_value_does_not_depend_on_its_place() {
        let gate: Vec<f32> = (0..29).map(|i| (i as f32 * 0.37).cos() * 5.0).collect();
        let up: Vec<f32> = (0..29).map(|i| (i as f32 * 0.11).sin()).collect();
        let mut whole = gate.clone();
        silu_mul(&mut whole, &up);
        for start in 0..29 {
            let mut part = gate[start..].to_vec();
            silu_mul(&mut part, &up[start..]);
            assert_eq!(&part[..], &whole[start..], "from {start}");
        }
    }

    /// NaN stays NaN; the portable path agrees within the same tolerance.
    #[test]
    fn nan_and_the_portable_path() {
        let mut g = vec![f32::NAN; 9];
        silu_mul(&mut g, &[1.0; 9]);
        assert!(g.iter().all(|v| v.is_nan()));
        let gate: Vec<f32> = (0..100).map(|i| (i as f32 - 50.0) * 0.3).collect();
        let up = vec![1.5f32; 100];
        let (mut a, mut b) = (gate.clone(), gate.clone());
        silu_mul(&mut a, &up);
        silu_mul_portable(&mut b, &up);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-6 * y.abs().max(1e-3), "{x} vs {y}");
        }
    }
}

//! Which code each family of our kernels runs on this CPU: chosen at run time from the CPU's
//! features (`is_x86_feature_detected!`) and the environment (`NANOLLM_PORTABLE_KERNELS`,
//! `NANOLLM_NO_VNNI`, `NANOLLM_VNNI256`), the same checks the kernels make, so that
//! `nanollm --version` and bug reports say what a run computed with.

/// The code each kernel family chose; each field a short name of the instructions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelChoice {
    /// Decode's quantized matrix-vector kernels (Q4_1/Q8_0 weights, 8-bit activations):
    /// `vpdpbusd zmm` (AVX-512 VNNI on 512-bit vectors), `vpdpbusd ymm`, `avx2` or
    /// `portable` ([`crate::kernels::matmul`]).
    pub decode_matvec: &'static str,
    /// The prefill f32 GEMM: `avx512f` (16 lanes), `avx2+fma` (8 lanes) or `portable`
    /// ([`crate::kernels::gemm`]).
    pub prefill_gemm: &'static str,
    /// Attention of prompt rows (two or more in a pass) over the paged KV cache: `avx512f`
    /// (tiles of 8 rows), `avx2+fma+f16c` or `portable` (head_dim 32, 64, 96 or 128 take the
    /// SIMD code; others the portable code).
    pub attention_prefill: &'static str,
    /// Attention of a single row (a decode step): `avx2+fma+f16c`, with the value sums on
    /// 512-bit vectors where the CPU has AVX-512F (`avx2+fma+f16c, avx512f values`), or
    /// `portable`.
    pub attention_decode: &'static str,
}

/// The kernels this process runs (the same answer every call).
pub fn chosen() -> KernelChoice {
    let decode_matvec = match crate::kernels::matmul::vnni_bits() {
        512 => "vpdpbusd zmm",
        256 => "vpdpbusd ymm",
        _ if simd_avx2() => "avx2",
        _ => "portable",
    };
    let prefill_gemm = match crate::kernels::gemm::fma_lanes() {
        16 => "avx512f",
        8 => "avx2+fma",
        _ => "portable",
    };
    let attention_prefill = if attention_512() {
        "avx512f"
    } else if simd_avx2() {
        "avx2+fma+f16c"
    } else {
        "portable"
    };
    let attention_decode = match (simd_avx2(), wide_values()) {
        (true, true) => "avx2+fma+f16c, avx512f values",
        (true, false) => "avx2+fma+f16c",
        _ => "portable",
    };
    KernelChoice {
        decode_matvec,
        prefill_gemm,
        attention_prefill,
        attention_decode,
    }
}

/// The CPU features the kernels look for that this CPU has, in the order they build on
/// each other (`avx2 fma f16c avx512f avx512bw avx512vl avx512vnni`); empty off x86-64.
pub fn cpu_features() -> Vec<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        let all = [
            ("avx2", std::is_x86_feature_detected!("avx2")),
            ("fma", std::is_x86_feature_detected!("fma")),
            ("f16c", std::is_x86_feature_detected!("f16c")),
            ("avx512f", std::is_x86_feature_detected!("avx512f")),
            ("avx512bw", std::is_x86_feature_detected!("avx512bw")),
            ("avx512vl", std::is_x86_feature_detected!("avx512vl")),
            ("avx512vnni", std::is_x86_feature_detected!("avx512vnni")),
        ];
        all.iter()
            .filter(|(_, has)| *has)
            .map(|(n, _)| *n)
            .collect()
    }
    #[cfg(not(target_arch = "x86_64"))]
    Vec::new()
}

/// AVX2, FMA and F16C present and the portable code not forced: the check of the AVX2
/// matrix-vector and attention kernels.
fn simd_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::kernels::avx2_fma() && std::is_x86_feature_detected!("f16c");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the attention value sums run on 512-bit vectors ([`crate::kernels::attention::values`]).
fn wide_values() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::kernels::attention::values::wide_registers();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The environment variables that changed the kernels' choice, as they are set:
/// `NANOLLM_PORTABLE_KERNELS`, `NANOLLM_NO_VNNI`, `NANOLLM_VNNI256` (any value counts, as
/// the kernels read them).
pub fn overrides() -> Vec<&'static str> {
    [
        "NANOLLM_PORTABLE_KERNELS",
        "NANOLLM_NO_VNNI",
        "NANOLLM_VNNI256",
    ]
    .into_iter()
    .filter(|v| std::env::var_os(v).is_some())
    .collect()
}

/// The AVX-512F attention kernels' check (prompt tiles, [`crate::kernels::attention::prefill_tile`]).
fn attention_512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::kernels::attention::prefill_tile::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names agree with each other and with the CPU: a 512-bit VNNI kernel needs the
    /// features it is named after, and forced portable code names every family portable.
    #[test]
    fn the_choice_follows_the_cpu() {
        let c = chosen();
        let f = cpu_features();
        if c.decode_matvec == "vpdpbusd zmm" {
            assert!(
                f.contains(&"avx512vnni") && f.contains(&"avx512bw"),
                "{f:?}"
            );
        }
        if c.prefill_gemm == "avx512f" || c.attention_prefill == "avx512f" {
            assert!(f.contains(&"avx512f"), "{f:?}");
        }
        if crate::cpu::portable_forced() {
            assert_eq!(
                (
                    c.decode_matvec,
                    c.prefill_gemm,
                    c.attention_prefill,
                    c.attention_decode
                ),
                ("portable", "portable", "portable", "portable")
            );
        } else if f.contains(&"avx2") && f.contains(&"fma") && f.contains(&"f16c") {
            assert_ne!(c.decode_matvec, "portable");
            assert_ne!(c.prefill_gemm, "portable");
            assert_ne!(c.attention_prefill, "portable");
            assert_ne!(c.attention_decode, "portable");
        }
    }
}

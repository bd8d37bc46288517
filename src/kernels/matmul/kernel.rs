//! Which implementation of the quantized dot products this CPU runs ([`Kernel`], chosen
//! once per process), and what the rest of the program asks about it.

/// Which implementation of the block dot product this CPU runs.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kernel {
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX2 with AVX-512 VNNI's `vpdpbusd` on 256-bit vectors (Zen 4, Ice Lake and later).
    #[cfg(target_arch = "x86_64")]
    Vnni,
    /// [`Kernel::Vnni`] plus `vpdpbusd` on 512-bit vectors over two groups at once
    /// ([`crate::kernels::matmul::q4_1_q8_0_vnni512`]); a lone last group of a task takes the 256-bit kernel.
    #[cfg(target_arch = "x86_64")]
    Vnni512,
    Scalar,
}

impl Kernel {
    /// The kernel for this CPU and environment, chosen once: every matrix product of a decode
    /// step asks (121 per step), and the environment variables are not read again.
    pub(super) fn detect() -> Kernel {
        static KERNEL: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *KERNEL.get_or_init(Kernel::choose)
    }

    fn choose() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("f16c")
                && !crate::cpu::portable_forced()
            {
                if std::is_x86_feature_detected!("avx512vnni")
                    && std::is_x86_feature_detected!("avx512vl")
                    && std::env::var_os("NANOLLM_NO_VNNI").is_none()
                {
                    if std::is_x86_feature_detected!("avx512f")
                        && std::is_x86_feature_detected!("avx512bw")
                        && std::env::var_os("NANOLLM_VNNI256").is_none()
                    {
                        return Kernel::Vnni512;
                    }
                    return Kernel::Vnni;
                }
                return Kernel::Avx2;
            }
        }
        Kernel::Scalar
    }
}

/// Bits per `vpdpbusd` (AVX-512 VNNI) of the decode kernels on this CPU: 512, 256, or 0
/// where they use AVX2's `vpmaddubsw` + `vpmaddwd` or the portable code. The machine-limits
/// int8 roof is measured with the same instruction ([`crate::roofline::peak`]).
pub fn vnni_bits() -> usize {
    match Kernel::detect() {
        #[cfg(target_arch = "x86_64")]
        Kernel::Vnni512 => 512,
        #[cfg(target_arch = "x86_64")]
        Kernel::Vnni => 256,
        _ => 0,
    }
}

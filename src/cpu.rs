//! What the CPU kernels may run, process-wide: `NANOLLM_PORTABLE_KERNELS` forces the
//! portable code everywhere (our kernels, the KV codec, the roofline's loops), so the tests
//! can check those paths on a CPU with AVX2. On the ground floor: `kv` and `kernels` both
//! read it.

/// True when `NANOLLM_PORTABLE_KERNELS` is set (read once): every kernel of ours then takes
/// its portable path (scalar quantized matvec, GEMM and attention, scalar activation
/// quantization), as on a CPU without AVX2, so the tests can check those paths here.
pub fn portable_forced() -> bool {
    static FORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| std::env::var_os("NANOLLM_PORTABLE_KERNELS").is_some())
}

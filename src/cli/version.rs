//! What `nanollm -V` and `nanollm --version` say: the version and the git commit the binary
//! was built from (build.rs), and for `--version` the code each kernel family chose on
//! this CPU ([`crate::kernels::report`]) and the CPU features it saw.
use crate::kernels::report::{chosen, cpu_features, overrides};

/// `0.1.0 (c398b9f1d2e3 2026-12-04)`: the crate version, the commit (`-dirty` when built
/// from changed files, `unknown` outside a git checkout) and the commit's date.
pub fn short() -> String {
    let commit = env!("NANOLLM_GIT_COMMIT");
    match env!("NANOLLM_GIT_DATE") {
        "" => format!("{} ({commit})", env!("CARGO_PKG_VERSION")),
        date => format!("{} ({commit} {date})", env!("CARGO_PKG_VERSION")),
    }
}

/// [`short`], then a line naming the kernels chosen at run time and one listing the CPU
/// features they look for that this CPU has, e.g.
/// `kernels: decode matvec vpdpbusd zmm, prefill GEMM avx512f, attention prefill avx512f,
/// decode avx2+fma+f16c, avx512f values` (and the environment variables that changed the
/// choice, when set) and
/// `cpu: x86_64, avx2 fma f16c avx512f avx512bw avx512vl avx512vnni`.
pub fn long() -> String {
    let k = chosen();
    let features = cpu_features();
    let features = match features.is_empty() {
        true => "none of avx2 fma f16c avx512f avx512bw avx512vl avx512vnni".to_string(),
        false => features.join(" "),
    };
    let set = overrides();
    let set = match set.is_empty() {
        true => String::new(),
        false => format!(" ({} set)", set.join(", ")),
    };
    format!(
        "{}\nkernels: decode matvec {}, prefill GEMM {}, attention prefill {}, decode {}{set}\ncpu: {}, {features}",
        short(),
        k.decode_matvec,
        k.prefill_gemm,
        k.attention_prefill,
        k.attention_decode,
        std::env::consts::ARCH,
    )
}

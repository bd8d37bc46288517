//! [`WeightDtype`]: the compute dtype `--dtype` names, and why only f32 runs.
use anyhow::{bail, Result};

/// The compute dtype `--dtype` asks for. Only [`WeightDtype::F32`] runs on the CPU: candle's
/// CPU bf16/f16 matrix-vector kernels are much slower than f32 gemm, and its f16 gemm rounds
/// activations and results to f16 (measured: docs/benchmarks.md, "candle's bf16/f16 CPU
/// kernels against f32"). The other names are parsed so the error can say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightDtype {
    /// f32 matrices and f32 math (the checkpoint's f16/bf16 values converted exactly).
    #[default]
    F32,
    /// bfloat16 compute: not supported on the CPU.
    Bf16,
    /// float16 compute: not supported on the CPU.
    F16,
}

impl WeightDtype {
    /// The names `--dtype` accepts.
    pub const NAMES: &'static [&'static str] = &["f32", "bf16", "f16"];

    /// `f32`, `bf16` or `f16`.
    pub fn name(self) -> &'static str {
        match self {
            WeightDtype::F32 => "f32",
            WeightDtype::Bf16 => "bf16",
            WeightDtype::F16 => "f16",
        }
    }

    /// Errors: any dtype but f32, with why and what to do.
    pub fn check_supported(self) -> Result<()> {
        if self != WeightDtype::F32 {
            bail!(
                "--dtype {self}: only f32 compute is supported on the CPU (f16 and bf16 safetensors are converted to f32 at load; GGUF weights keep their quantized types); drop --dtype or pass --dtype f32"
            );
        }
        Ok(())
    }
}

impl std::str::FromStr for WeightDtype {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<WeightDtype, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(WeightDtype::F32),
            "bf16" | "bfloat16" => Ok(WeightDtype::Bf16),
            "f16" | "float16" | "half" => Ok(WeightDtype::F16),
            _ => Err(format!(
                "{s:?} is not one of {}",
                WeightDtype::NAMES.join(", ")
            )),
        }
    }
}

impl std::fmt::Display for WeightDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

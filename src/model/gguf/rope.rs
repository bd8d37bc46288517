//! RoPE settings of a GGUF file: `{arch}.rope.dimension_count`, `{arch}.rope.scaling.type`,
//! `.factor` (or the older `{arch}.rope.scale_linear`), `.original_context_length`,
//! `.attn_factor`, and the `rope_freqs.weight` tensor of per-dimension frequency divisors.
//!
//! Source: llama.cpp `src/llama-model.cpp` (`load_hparams`: scaling type `linear` when the key
//! is absent, `freq_scale = 1 / factor`, `n_ctx_orig_yarn` defaulting to the context length,
//! `n_rot` must equal the head size for `llama`), `src/llama-context.cpp` (YaRN's attention
//! factor `0.1 · ln(factor) + 1`, times `rope.scaling.attn_factor`; for the architectures
//! loaded here llama.cpp reads no `yarn_beta_*` or `yarn_log_multiplier` keys, so the
//! defaults 32 / 1 apply) and ggml's `ggml_rope_cache_init` (`theta / freq_factors[i]`).
use super::GgufFile;
use crate::model::rope::{RopeScaling, Yarn};
use anyhow::{anyhow, bail, Result};
use candle_core::quantized::gguf_file::Value;
use candle_core::Device;
use std::fs::File;
use std::io::BufReader;

/// Name of the per-dimension frequency factor tensor (llama.cpp `LLM_TENSOR_ROPE_FREQS`).
pub const ROPE_FREQS: &str = "rope_freqs.weight";

impl GgufFile {
    /// An optional metadata number (any integer or float type). Errors: present but not a
    /// number.
    pub(super) fn meta_number(&self, key: &str) -> Result<Option<f64>> {
        let Some(v) = self.content.metadata.get(key) else {
            return Ok(None);
        };
        let n = match v {
            Value::F32(x) => *x as f64,
            Value::F64(x) => *x,
            Value::U8(x) => *x as f64,
            Value::I8(x) => *x as f64,
            Value::U16(x) => *x as f64,
            Value::I16(x) => *x as f64,
            Value::U32(x) => *x as f64,
            Value::I32(x) => *x as f64,
            Value::U64(x) => *x as f64,
            Value::I64(x) => *x as f64,
            _ => bail!("{}: GGUF key {key} is not a number", self.path),
        };
        Ok(Some(n))
    }

    /// RoPE scaling and frequency factors of architecture `arch` with heads of `head_dim`
    /// values and a trained context of `context_length` tokens.
    ///
    /// Errors (naming the file, key and value): `rope.dimension_count` other than
    /// `head_dim` (partial RoPE), a scaling type other than `none`, `linear` or `yarn` (e.g.
    /// `longrope`), a negative or non-numeric factor, `rope.scaling.attn_factor` other than 1
    /// without YaRN, a `rope_freqs.weight` of another length than `head_dim / 2` or with a
    /// value that is not positive.
    pub(super) fn rope(
        &self,
        arch: &str,
        head_dim: usize,
        context_length: usize,
    ) -> Result<(RopeScaling, Option<Vec<f32>>)> {
        let path = &self.path;
        let k = |s: &str| format!("{arch}.{s}");
        let dims_key = k("rope.dimension_count");
        if let Some(n) = self.meta_number(&dims_key)? {
            if n != head_dim as f64 {
                bail!("{path}: {dims_key} is {n} but head_dim is {head_dim}: partial RoPE is not supported");
            }
        }
        let type_key = k("rope.scaling.type");
        let kind = match self.content.metadata.get(&type_key) {
            None => "linear",
            Some(v) => v
                .to_string()
                .map(String::as_str)
                .map_err(|_| anyhow!("{path}: GGUF key {type_key} is not a string"))?,
        };
        let factor_key = k("rope.scaling.factor");
        let (factor_key, factor) = match self.meta_number(&factor_key)? {
            Some(f) => (factor_key, Some(f)),
            None => {
                let old = k("rope.scale_linear");
                let f = self.meta_number(&old)?;
                (old, f)
            }
        };
        let factor = match factor {
            Some(f) if !(f.is_finite() && f >= 0.0) => {
                bail!("{path}: {factor_key} is {f}, expected a positive number")
            }
            // llama.cpp: a factor of 0 (or none) means no scaling.
            Some(f) if f != 0.0 => f,
            _ => 1.0,
        };
        let attn_key = k("rope.scaling.attn_factor");
        let attn = self.meta_number(&attn_key)?.unwrap_or(1.0);
        let scaling = match kind {
            "none" => RopeScaling::Default,
            "linear" if factor == 1.0 => RopeScaling::Default,
            "linear" => RopeScaling::Linear { factor },
            "yarn" => {
                let orig_key = k("rope.scaling.original_context_length");
                let original = self
                    .meta_number(&orig_key)?
                    .unwrap_or(context_length as f64);
                if !(original.is_finite() && original >= 1.0) {
                    bail!("{path}: {orig_key} is {original}, expected a positive length");
                }
                let mut y = Yarn::new(factor, original);
                y.attention_factor = Some(y.attention_factor() * attn);
                RopeScaling::Yarn(y)
            }
            other => bail!(
                "{path}: {type_key} is {other:?}: not supported (supported: none, linear, yarn)"
            ),
        };
        if attn != 1.0 && !matches!(scaling, RopeScaling::Yarn(_)) {
            bail!("{path}: {attn_key} is {attn}: supported with YaRN scaling only");
        }
        Ok((scaling, self.rope_freqs(head_dim)?))
    }

    /// The `rope_freqs.weight` tensor as f32, when the file has one, read through its own
    /// file handle (the header is all [`GgufFile::config`] needs otherwise).
    fn rope_freqs(&self, head_dim: usize) -> Result<Option<Vec<f32>>> {
        let path = &self.path;
        if !self.content.tensor_infos.contains_key(ROPE_FREQS) {
            return Ok(None);
        }
        let mut reader = BufReader::new(
            File::open(path).map_err(|e| anyhow!("cannot open model file {path} ({e})"))?,
        );
        let values: Vec<f32> = self
            .content
            .tensor(&mut reader, ROPE_FREQS, &Device::Cpu)
            .and_then(|t| t.dequantize(&Device::Cpu))
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1())
            .map_err(|e| anyhow!("{path}: cannot read tensor {ROPE_FREQS} ({e})"))?;
        if values.len() != head_dim / 2 {
            bail!(
                "{path}: {ROPE_FREQS} has {} values, expected head_dim / 2 = {}",
                values.len(),
                head_dim / 2
            );
        }
        if let Some(bad) = values.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
            bail!("{path}: {ROPE_FREQS} holds {bad}, expected positive numbers");
        }
        Ok(Some(values))
    }
}

//! `--quantize`: a Hugging Face folder's matrices quantized at load into GGUF blocks (what
//! mistral.rs calls in-situ quantization), so the model runs on the same kernels and in the
//! same memory as its GGUF would, with ggml's reference quantizers: Q8_0 and Q4_0 (and
//! Q5_0, Q4_K's fallback, and Q6_K, Q4_K's output matrix) through candle's block types,
//! which implement ggml's `quantize_row_q8_0_ref` / `q4_0_ref` / `q5_0_ref` /
//! `q6_K_ref`; Q4_K through ours ([`crate::kernels::matmul::quantize_q4_k`], equal to
//! libggml's bytes). Under Q4_K the output matrix (the LM head, or the embedding tied to
//! it) follows llama-quantize's rule: Q6_K, or Q8_0 where its rows are not whole blocks of
//! 256 ([`output_target`]).
use crate::kernels::matmul::quantize_q4_k::quantize_row_q4_k;
use crate::kernels::matmul::QuantMatrix;
use crate::model::linear::Linear;
use anyhow::{bail, Result};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Tensor;

/// A `--quantize` type, named as llama.cpp names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InSitu {
    /// 8-bit codes, one f16 scale per 32 weights (34 bytes per 32).
    Q8_0,
    /// 4-bit codes, one f16 scale per 32 weights (18 bytes per 32).
    Q4_0,
    /// 4-bit codes with 6-bit scales and minima per 32, f16 super-block scales per 256 (144
    /// bytes per 256); rows that are not whole blocks of 256 take Q5_0, as llama-quantize does.
    Q4K,
}

impl std::str::FromStr for InSitu {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<InSitu, String> {
        match s.to_ascii_lowercase().as_str() {
            "q8_0" => Ok(InSitu::Q8_0),
            "q4_0" => Ok(InSitu::Q4_0),
            "q4_k" => Ok(InSitu::Q4K),
            _ => Err(format!(
                "{s:?} is not a type --quantize produces (q8_0, q4_0 or q4_k)"
            )),
        }
    }
}

/// `--quantize` as a load takes it: the type, and whether the matrices also keep their f32
/// weights for prompt rows (`--prefill-kernel dense|auto`: candle's f32 GEMM, 4 bytes per
/// weight more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InSituLoad {
    /// The type.
    pub t: InSitu,
    /// Keep the f32 weights beside the blocks.
    pub keep_f32: bool,
}

impl InSitu {
    /// llama.cpp's name (`Q4_K`).
    pub fn name(self) -> &'static str {
        match self {
            InSitu::Q8_0 => "Q8_0",
            InSitu::Q4_0 => "Q4_0",
            InSitu::Q4K => "Q4_K",
        }
    }
}

/// The ggml type a `[rows, cols]` matrix is quantized to under `t`, or None where the rows
/// are not whole blocks of any type it may take (kept in f32): Q4_K needs rows of 256 and
/// falls back to Q5_0 (rows of 32), as llama-quantize does.
pub fn target(t: InSitu, cols: usize) -> Option<GgmlDType> {
    match t {
        InSitu::Q4K if cols.is_multiple_of(256) => Some(GgmlDType::Q4K),
        InSitu::Q4K if cols.is_multiple_of(32) => Some(GgmlDType::Q5_0),
        InSitu::Q8_0 if cols.is_multiple_of(32) => Some(GgmlDType::Q8_0),
        InSitu::Q4_0 if cols.is_multiple_of(32) => Some(GgmlDType::Q4_0),
        _ => None,
    }
}

/// The ggml type of the output matrix (the LM head, or the embedding tied to it) under `t`,
/// by llama-quantize's rule for `output.weight` (`llama_tensor_get_type`): under Q4_K, Q6_K
/// where the rows are whole blocks of 256, else Q8_0 (the head is the matrix quantization
/// hurts most); Q8_0 and Q4_0 quantize every matrix alike (as `llama-quantize --pure`).
pub fn output_target(t: InSitu, cols: usize) -> Option<GgmlDType> {
    match t {
        InSitu::Q4K if cols.is_multiple_of(256) => Some(GgmlDType::Q6K),
        InSitu::Q4K if cols.is_multiple_of(32) => Some(GgmlDType::Q8_0),
        _ => target(t, cols),
    }
}

/// `w` (`[rows, cols]` f32) as our kernels' matrix of type `to` ([`target`]).
/// Errors: `w` not two-dimensional f32, or a type [`target`] does not produce.
pub fn quantize(w: &Tensor, to: GgmlDType) -> Result<QuantMatrix> {
    let (rows, cols) = w.dims2()?;
    match to {
        GgmlDType::Q4K => {
            let values: Vec<f32> = w.flatten_all()?.to_vec1()?;
            let mut bytes = Vec::with_capacity(rows * cols / 256 * 144);
            for row in values.chunks_exact(cols.max(1)) {
                quantize_row_q4_k(row, &mut bytes)?;
            }
            QuantMatrix::from_ggml_q4_k_bytes(&bytes, rows, cols)
        }
        GgmlDType::Q6K => {
            let q = QTensor::quantize(w, to)?;
            QuantMatrix::from_ggml_q6_k_bytes(&q.data()?, rows, cols)
        }
        GgmlDType::Q8_0 | GgmlDType::Q4_0 | GgmlDType::Q5_0 => {
            let q = QTensor::quantize(w, to)?;
            let bytes = q.data()?;
            match to {
                GgmlDType::Q8_0 => QuantMatrix::from_ggml_q8_0_bytes(&bytes, rows, cols),
                GgmlDType::Q4_0 => QuantMatrix::from_ggml_q4_0_bytes(&bytes, rows, cols),
                _ => QuantMatrix::from_ggml_q5_0_bytes(&bytes, rows, cols),
            }
        }
        other => bail!("--quantize does not produce {other:?}"),
    }
}

/// A [`Linear`] over `w` (`[out, in]` f32) quantized under `load.t` when its rows allow it
/// (our kernels' blocks, and `w` as the prefill copy only when `load.keep_f32`), else over
/// `w` itself; `fallbacks` collects the names of matrices that took another type or stayed
/// f32, for the one line that says so.
pub fn linear(
    name: &str,
    w: Tensor,
    bias: Option<Vec<f32>>,
    load: InSituLoad,
    fallbacks: &mut Vec<String>,
) -> Result<Linear> {
    let (_, cols) = w.dims2()?;
    let to = target(load.t, cols);
    let want = match load.t {
        InSitu::Q8_0 => GgmlDType::Q8_0,
        InSitu::Q4_0 => GgmlDType::Q4_0,
        InSitu::Q4K => GgmlDType::Q4K,
    };
    linear_as(name, w, bias, load, (to, want), fallbacks)
}

/// [`linear`] for the output matrix (the LM head, or the embedding tied to it): the type of
/// [`output_target`], the fallback from Q6_K to Q8_0 listed in `fallbacks` as any other.
pub fn output_linear(
    name: &str,
    w: Tensor,
    bias: Option<Vec<f32>>,
    load: InSituLoad,
    fallbacks: &mut Vec<String>,
) -> Result<Linear> {
    let (_, cols) = w.dims2()?;
    let to = output_target(load.t, cols);
    let want = output_target(load.t, 256).unwrap_or(GgmlDType::Q8_0);
    linear_as(name, w, bias, load, (to, want), fallbacks)
}

/// [`linear`] to type `to` (None: f32), listed in `fallbacks` when it is not `want`.
fn linear_as(
    name: &str,
    w: Tensor,
    bias: Option<Vec<f32>>,
    load: InSituLoad,
    (to, want): (Option<GgmlDType>, GgmlDType),
    fallbacks: &mut Vec<String>,
) -> Result<Linear> {
    if to != Some(want) {
        let took = to.map_or("F32".to_string(), |d| format!("{d:?}"));
        fallbacks.push(format!("{name} ({took})"));
    }
    let Some(to) = to else {
        return Ok(Linear::dense_f32(w, bias));
    };
    Ok(Linear {
        weight: None,
        bias,
        quant: Some(quantize(&w, to)?),
        dense: load.keep_f32.then_some(w),
        packed: None,
    })
}

/// Every name of `fallbacks` (as [`linear`] lists them, `name (TYPE)`) in one short list:
/// names that differ only in a layer number (their first all-digit dotted part) and took
/// the same type are said once with their numbers, `model.layers.{0-29}.mlp.up_proj.weight
/// (Q5_0)`; in the order each first appears.
pub fn name_all(fallbacks: &[String]) -> String {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for f in fallbacks {
        let parts: Vec<&str> = f.split('.').collect();
        let at = parts
            .iter()
            .position(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        let (pattern, n) = match at.and_then(|i| Some((i, parts[i].parse::<usize>().ok()?))) {
            Some((i, n)) => {
                let mut p = parts.clone();
                p[i] = "{}";
                (p.join("."), Some(n))
            }
            None => (f.clone(), None),
        };
        match groups.iter_mut().find(|(p, _)| *p == pattern) {
            Some((_, ns)) => ns.extend(n),
            None => groups.push((pattern, n.into_iter().collect())),
        }
    }
    let ranges = |ns: &[usize]| {
        let mut ns = ns.to_vec();
        ns.sort_unstable();
        ns.dedup();
        let mut out: Vec<String> = Vec::new();
        let mut i = 0;
        while i < ns.len() {
            let mut j = i;
            while j + 1 < ns.len() && ns[j + 1] == ns[j] + 1 {
                j += 1;
            }
            out.push(match j > i {
                true => format!("{}-{}", ns[i], ns[j]),
                false => ns[i].to_string(),
            });
            i = j + 1;
        }
        out.join(",")
    };
    groups
        .iter()
        .map(|(p, ns)| match ns.len() {
            0 => p.clone(),
            1 => p.replacen("{}", &ns[0].to_string(), 1),
            _ => p.replacen("{}", &format!("{{{}}}", ranges(ns)), 1),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

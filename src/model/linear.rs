//! Linear layers `y = x · Wᵀ + b` and the choice of kernel per row: dense f32 GEMM for
//! prompt rows (ours over packed weights for GGUF, candle's for HF folders), our quantized
//! matrix-vector kernels for generated rows. Every kernel computes a row the same way
//! whatever the batch, which keeps naive and KV-cached decode bit-identical.
use crate::kernels::gemm::DenseMatrix;
use crate::kernels::matmul::{matmul_group, QuantMatrix};
use crate::model::ops;
use candle_core::quantized::QMatMul;
use candle_core::{Device, Module, Result, Tensor};

/// Prompt rows up to which the dense product reads a GGUF matrix's blocks rather than its
/// f32 copy ([`QuantMatrix::dense_matmul`]: the same bits; a few rows are bound by the
/// weights' bytes, 96 MB against 424 MB for the default model).
pub const FEW_PROMPT_ROWS: usize = 8;

/// A linear layer `y = x · Wᵀ + b`; W is `[out, in]`, quantized (GGUF) or dense.
#[derive(Debug, Clone)]
pub struct Linear {
    /// candle's matrix `[out_features, in_features]`, for the weights our kernels do not hold
    /// (dense f32 from safetensors, GGUF types without a kernel of ours); `None` where
    /// [`Linear::quant`] holds them, so a matrix is kept once.
    pub weight: Option<QMatMul>,
    /// `[out_features]`, Qwen2's Q/K/V projections only.
    pub bias: Option<Vec<f32>>,
    /// Prefill copy for candle's GEMM: the f32 weight `[out_features, in_features]` (HF
    /// safetensors, sharing storage with `weight`), used for multi-token inputs.
    pub dense: Option<Tensor>,
    /// Q4_1 or Q8_0 weights for our own AVX2 kernels (candle's Q4_1 dot product is scalar).
    pub quant: Option<QuantMatrix>,
    /// Prefill copy for our GEMM: the weight dequantized to f32 at load and packed (GGUF).
    pub packed: Option<DenseMatrix>,
}

impl Linear {
    /// A linear layer over an f32 weight `[out, in]` (a Hugging Face folder's). The same
    /// tensor (shared storage, no copy) serves as the prefill copy ([`Linear::dense`]):
    /// prompt rows run as one GEMM, decode rows one at a time, in both decode modes.
    pub fn dense_f32(w: Tensor, bias: Option<Vec<f32>>) -> Linear {
        Linear {
            weight: Some(QMatMul::Tensor(w.clone())),
            bias,
            dense: Some(w),
            quant: None,
            packed: None,
        }
    }

    /// A matrix on our quantized kernels alone (no prefill copy: a mixture's expert sees a
    /// few rows per step), with its bias.
    pub fn on_kernels(m: QuantMatrix, bias: Option<Vec<f32>>) -> Linear {
        Linear {
            weight: None,
            bias,
            dense: None,
            quant: Some(m),
            packed: None,
        }
    }

    /// `x`: `[n, in]` row-major → `[n, out]`. The first `dense_rows` rows (prompt positions)
    /// go through the dense f32 prefill copy when there is one; the others through the
    /// quantized kernel (which quantizes `x` to 8 bits per block of 32). Both kernels compute
    /// each row independently of the others, so a row gets the same result in any batch.
    pub fn forward_rows(&self, x: &[f32], n: usize, dense_rows: usize) -> Result<Vec<f32>> {
        self.forward_mask(x, &prefix_mask(n, dense_rows))
    }

    /// `x`: `[n, in]` row-major → `[n, out]`, where row i runs on the prefill kernels when
    /// `dense[i]` (a prompt row) and there is a dense copy, else on the quantized kernel: the
    /// kernel is a per-row decision (design rule R1), so a batch may mix prompt rows of one
    /// sequence with generated rows of others. Errors: `x` not `dense.len()` rows.
    pub fn forward_mask(&self, x: &[f32], dense: &[bool]) -> Result<Vec<f32>> {
        let n = dense.len();
        if n == 0 || !x.len().is_multiple_of(n) {
            candle_core::bail!("linear input of {} values is not {n} rows", x.len());
        }
        let use_dense = self.has_prefill_copy();
        let nd = if use_dense {
            dense.iter().filter(|&&d| d).count()
        } else {
            0
        };
        let mut y = if nd == n {
            self.prefill(x, n)?
        } else if nd == 0 {
            self.quantized(x, n)?
        } else {
            let (xd, xq) = split_rows(x, dense);
            let yd = self.prefill(&xd, nd)?;
            let yq = self.quantized(&xq, n - nd)?;
            merge_rows(&yd, &yq, dense)
        };
        if let Some(b) = &self.bias {
            add_bias(&mut y, b);
        }
        Ok(y)
    }

    /// The quantized path: our kernel for Q4_1 and Q8_0 weights, else candle's QMatMul.
    fn quantized(&self, x: &[f32], n: usize) -> Result<Vec<f32>> {
        if let Some(w) = &self.quant {
            return w.matmul(x).map_err(candle_err);
        }
        let Some(weight) = &self.weight else {
            candle_core::bail!("a linear layer without weights");
        };
        let xt = Tensor::from_slice(x, (n, x.len() / n.max(1)), &Device::Cpu)?;
        let y = match weight {
            // A dense weight (HF safetensors, GGUF F32/F16) runs on gemm, whose result for a
            // row depends on how many rows are multiplied together: decode rows go one at a
            // time, so naive and KV-cached decode agree to the bit here too.
            QMatMul::Tensor(_) if n > 1 => {
                let rows = (0..n)
                    .map(|i| weight.forward(&xt.narrow(0, i, 1)?))
                    .collect::<Result<Vec<_>>>()?;
                Tensor::cat(&rows, 0)?
            }
            _ => weight.forward(&xt)?,
        };
        y.flatten_all()?.to_vec1()
    }
}

impl Linear {
    /// Whether prompt rows have a dense f32 path (packed or candle GEMM).
    pub fn has_prefill_copy(&self) -> bool {
        self.packed.is_some() || self.dense.is_some()
    }

    /// `x · Wᵀ` for prompt rows on the dense f32 copy: our packed GEMM, else candle's;
    /// `x` `[n, in]` → `[n, out]`. Errors: no dense copy.
    fn prefill(&self, x: &[f32], n: usize) -> Result<Vec<f32>> {
        if let (Some(_), Some(q), true) = (&self.packed, &self.quant, n <= FEW_PROMPT_ROWS) {
            if let Some(y) = q.dense_matmul(x) {
                return y.map_err(candle_err);
            }
        }
        match (&self.packed, &self.dense) {
            (Some(p), _) => p.matmul(x).map_err(candle_err),
            (None, Some(w)) => {
                let xt = Tensor::from_slice(x, (n, x.len() / n.max(1)), w.device())?;
                xt.matmul(&w.t()?)?.flatten_all()?.to_vec1()
            }
            (None, None) => candle_core::bail!("no dense prefill copy of this weight"),
        }
    }
}

/// `x · Wᵀ` of prompt rows for each of `linears` (the same input, `[n, in]` → one
/// `[n, out]` each): one parallel region over all their panels when every one has a packed
/// copy, else one dense product each. Errors: a linear has no dense copy.
fn prefill_group(linears: &[&Linear], x: &[f32], n: usize) -> Result<Vec<Vec<f32>>> {
    if n <= FEW_PROMPT_ROWS {
        return linears.iter().map(|l| l.prefill(x, n)).collect();
    }
    let packed: Option<Vec<&DenseMatrix>> = linears.iter().map(|l| l.packed.as_ref()).collect();
    match packed {
        Some(mats) => DenseMatrix::matmul_many(&mats, x).map_err(candle_err),
        None => linears.iter().map(|l| l.prefill(x, n)).collect(),
    }
}

/// Add `b` (`[out]`) to every row of `y` (`[n, out]`).
fn add_bias(y: &mut [f32], b: &[f32]) {
    for row in y.chunks_mut(b.len().max(1)) {
        ops::add_assign(row, b);
    }
}

fn candle_err(e: anyhow::Error) -> candle_core::Error {
    candle_core::Error::Msg(format!("{e:#}"))
}

/// A mask of `n` rows whose first `dense_rows` are prompt rows.
pub fn prefix_mask(n: usize, dense_rows: usize) -> Vec<bool> {
    (0..n).map(|i| i < dense_rows).collect()
}

/// The rows of `x` (`[dense.len(), w]`) split into (rows where `dense`, the others), each in
/// order.
fn split_rows(x: &[f32], dense: &[bool]) -> (Vec<f32>, Vec<f32>) {
    let w = x.len() / dense.len().max(1);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (row, &d) in x.chunks_exact(w.max(1)).zip(dense) {
        if d { &mut a } else { &mut b }.extend_from_slice(row);
    }
    (a, b)
}

/// The inverse of [`split_rows`]: rows of `a` where `dense`, of `b` elsewhere, in order.
fn merge_rows(a: &[f32], b: &[f32], dense: &[bool]) -> Vec<f32> {
    let nd = dense.iter().filter(|&&d| d).count();
    let w = a
        .len()
        .checked_div(nd)
        .unwrap_or_else(|| b.len() / (dense.len() - nd).max(1));
    let mut out = Vec::with_capacity(dense.len() * w);
    let (mut ia, mut ib) = (a.chunks_exact(w.max(1)), b.chunks_exact(w.max(1)));
    for &d in dense {
        let row = if d { ia.next() } else { ib.next() };
        out.extend_from_slice(row.unwrap_or(&[]));
    }
    out
}

/// Project `x` (`[n, in]`) through several linear layers that read the same input (Q, K,
/// V; gate, up), the first `dense_rows` rows being prompt rows. See [`project_mask`].
pub fn project_many(
    linears: &[&Linear],
    x: &[f32],
    n: usize,
    dense_rows: usize,
) -> Result<Vec<Vec<f32>>> {
    project_mask(linears, x, &prefix_mask(n, dense_rows))
}

/// Project `x` (`[dense.len(), in]`) through several linear layers that read the same input.
/// Rows on the decode path (not `dense`, or no dense copy) with our quantized kernels are
/// quantized once and all the matrices run in one parallel region; prompt rows run the
/// layers' prefill kernels (one parallel region for all of them when they are packed).
/// Either way every row's result is the same as alone.
///
/// Errors: `x` not `dense.len()` rows, kernel failures.
pub fn project_mask(linears: &[&Linear], x: &[f32], dense: &[bool]) -> Result<Vec<Vec<f32>>> {
    let n = dense.len();
    let quant: Option<Vec<&QuantMatrix>> = linears.iter().map(|l| l.quant.as_ref()).collect();
    let any_dense_copy = linears.iter().any(|l| l.has_prefill_copy());
    let all_dense_copy = linears.iter().all(|l| l.has_prefill_copy());
    let (Some(mats), true) = (quant, any_dense_copy == all_dense_copy) else {
        return linears.iter().map(|l| l.forward_mask(x, dense)).collect();
    };
    if n == 0 || !x.len().is_multiple_of(n) {
        candle_core::bail!("linear input of {} values is not {n} rows", x.len());
    }
    let nd = if any_dense_copy {
        dense.iter().filter(|&&d| d).count()
    } else {
        0
    };
    let dense_eff: Vec<bool> = dense.iter().map(|&d| d && any_dense_copy).collect();
    let ys = if nd == n {
        prefill_group(linears, x, n)?
    } else {
        let (xd, xq) = if nd == 0 {
            (Vec::new(), x.to_vec())
        } else {
            split_rows(x, &dense_eff)
        };
        let ys = matmul_group(&mats, &xq).map_err(candle_err)?;
        if nd == 0 {
            ys
        } else {
            let yd = prefill_group(linears, &xd, nd)?;
            yd.iter()
                .zip(&ys)
                .map(|(yd, yq)| merge_rows(yd, yq, &dense_eff))
                .collect()
        }
    };
    linears
        .iter()
        .zip(ys)
        .map(|(l, mut y)| {
            if let Some(b) = &l.bias {
                add_bias(&mut y, b);
            }
            Ok(y)
        })
        .collect()
}

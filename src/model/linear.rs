//! Linear layers `y = x · Wᵀ + b` and the choice of kernel per row: dense f32 GEMM for
//! prompt rows (ours over packed weights for GGUF, candle's for HF folders), our quantized
//! matrix-vector kernels for generated rows. Every kernel computes a row the same way
//! whatever the batch, which keeps naive and KV-cached decode bit-identical.
use crate::kernels::gemm::DenseMatrix;
use crate::kernels::quant::{matmul_group, QuantMatrix};
use crate::model::ops;
use candle_core::quantized::QMatMul;
use candle_core::{Device, Module, Result, Tensor};

/// A linear layer `y = x · Wᵀ + b`; W is `[out, in]`, quantized (GGUF) or dense.
#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: QMatMul,
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
    /// `x`: `[n, in]` row-major → `[n, out]`. The first `dense_rows` rows (prompt positions)
    /// go through the dense f32 prefill copy when there is one; the others through the
    /// quantized kernel (which quantizes `x` to 8 bits per block of 32). Both kernels compute
    /// each row independently of the others, so a row gets the same result in any batch.
    pub fn forward_rows(&self, x: &[f32], n: usize, dense_rows: usize) -> Result<Vec<f32>> {
        let dense_rows = dense_rows.min(n);
        let dense_rows = if self.has_prefill_copy() {
            dense_rows
        } else {
            0
        };
        let mut y = if dense_rows == n {
            self.prefill(x, n)?
        } else if dense_rows > 0 {
            let split = x.len() / n * dense_rows;
            let mut top = self.prefill(&x[..split], dense_rows)?;
            top.extend(self.quantized(&x[split..], n - dense_rows)?);
            top
        } else {
            self.quantized(x, n)?
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
        let xt = Tensor::from_slice(x, (n, x.len() / n.max(1)), &Device::Cpu)?;
        let y = match &self.weight {
            // A dense weight (HF safetensors, GGUF F32/F16) runs on gemm, whose result for a
            // row depends on how many rows are multiplied together: decode rows go one at a
            // time, so naive and KV-cached decode agree to the bit here too.
            QMatMul::Tensor(_) if n > 1 => {
                let rows = (0..n)
                    .map(|i| self.weight.forward(&xt.narrow(0, i, 1)?))
                    .collect::<Result<Vec<_>>>()?;
                Tensor::cat(&rows, 0)?
            }
            _ => self.weight.forward(&xt)?,
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

/// Add `b` (`[out]`) to every row of `y` (`[n, out]`).
fn add_bias(y: &mut [f32], b: &[f32]) {
    for row in y.chunks_mut(b.len().max(1)) {
        ops::add_assign(row, b);
    }
}

fn candle_err(e: anyhow::Error) -> candle_core::Error {
    candle_core::Error::Msg(format!("{e:#}"))
}

/// Project `x` (`[n, in]`) through several linear layers that read the same input (Q, K,
/// V; gate, up). On the decode path with our quantized kernels, `x` is quantized once and
/// all the matrices run in one parallel region; otherwise each layer runs on its own.
/// Either way every row's result is the same.
pub fn project_many(
    linears: &[&Linear],
    x: &[f32],
    n: usize,
    dense_rows: usize,
) -> Result<Vec<Vec<f32>>> {
    let quant: Option<Vec<&QuantMatrix>> = linears.iter().map(|l| l.quant.as_ref()).collect();
    match quant {
        Some(mats) if dense_rows == 0 || !linears.iter().any(|l| l.has_prefill_copy()) => {
            let mut ys = matmul_group(&mats, x).map_err(candle_err)?;
            for (l, y) in linears.iter().zip(ys.iter_mut()) {
                if let Some(b) = &l.bias {
                    add_bias(y, b);
                }
            }
            Ok(ys)
        }
        _ => linears
            .iter()
            .map(|l| l.forward_rows(x, n, dense_rows))
            .collect(),
    }
}

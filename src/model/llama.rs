//! The Llama-family decoder forward pass (Llama, SmolLM2, Mistral, Qwen2, Qwen3).
//!
//! Pre-norm transformer (Touvron et al. 2023, "LLaMA"): token embedding, then per layer
//! `x += Attention(RMSNorm(x))`, `x += SwiGLU(RMSNorm(x))`, a final RMSNorm and the LM head.
//! Attention is GQA with RoPE (Su et al. 2021) and a causal mask. The KV cache is not ours:
//! [`Decoder::forward`] reads and extends the [`KvCache`] the engine hands it.
use crate::kernels::gemm::DenseMatrix;
use crate::kernels::quant::{matmul_group, QuantMatrix};
use crate::kv::KvCache;
use crate::model::attention;
use crate::model::config::ModelConfig;
use crate::model::ops::{self, Rope};
use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Module, Result, Tensor};

/// A linear layer `y = x · Wᵀ + b`; W is `[out, in]`, quantized (GGUF) or dense.
#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: QMatMul,
    /// `[out_features]`, Qwen2's Q/K/V projections only.
    pub bias: Option<Tensor>,
    /// Prefill copy for candle's GEMM: the f32 weight `[out_features, in_features]` (HF
    /// safetensors, sharing storage with `weight`), used for multi-token inputs.
    pub dense: Option<Tensor>,
    /// Q4_1 or Q8_0 weights for our own AVX2 kernels (candle's Q4_1 dot product is scalar).
    pub quant: Option<QuantMatrix>,
    /// Prefill copy for our GEMM: the weight dequantized to f32 at load and packed (GGUF).
    pub packed: Option<DenseMatrix>,
}

impl Linear {
    /// `x`: `[tokens, in]` → `[tokens, out]`. The first `dense_rows` rows (prompt positions)
    /// go through the dense f32 prefill copy when there is one; the others through the quantized
    /// kernel (which quantizes `x` to 8 bits per block of 32). Both kernels compute each row
    /// independently of the others, so a row gets the same result in any batch.
    pub fn forward(&self, x: &Tensor, dense_rows: usize) -> Result<Tensor> {
        let (n, _) = x.dims2()?;
        let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
        let y = self.forward_rows(&xs, n, dense_rows)?;
        let out = y.len() / n.max(1);
        Tensor::from_vec(y, (n, out), x.device())
    }

    /// [`Linear::forward`] on row-major slices: `x` is `[n, in]`, the result `[n, out]`.
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
            add_bias(&mut y, &b.to_vec1::<f32>()?);
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
                    add_bias(y, &b.to_vec1::<f32>()?);
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

/// One decoder layer's weights (names as in HF Llama).
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// `[num_attention_heads · head_dim, hidden_size]`.
    pub q_proj: Linear,
    /// `[num_key_value_heads · head_dim, hidden_size]`.
    pub k_proj: Linear,
    /// `[num_key_value_heads · head_dim, hidden_size]`.
    pub v_proj: Linear,
    /// `[hidden_size, num_attention_heads · head_dim]`.
    pub o_proj: Linear,
    /// `[intermediate_size, hidden_size]`.
    pub gate_proj: Linear,
    /// `[intermediate_size, hidden_size]`.
    pub up_proj: Linear,
    /// `[hidden_size, intermediate_size]`.
    pub down_proj: Linear,
    /// RMSNorm weight before attention, `[hidden_size]`.
    pub input_layernorm: Tensor,
    /// RMSNorm weight before the MLP, `[hidden_size]`.
    pub post_attention_layernorm: Tensor,
    /// Qwen3 per-head RMSNorm weight on Q, `[head_dim]`.
    pub q_norm: Option<Tensor>,
    /// Qwen3 per-head RMSNorm weight on K, `[head_dim]`.
    pub k_norm: Option<Tensor>,
}

/// All the decoder's weights.
#[derive(Debug, Clone)]
pub struct DecoderWeights {
    /// Token embedding, `[vocab_size, hidden_size]` f32.
    pub embed_tokens: Tensor,
    /// One entry per layer.
    pub layers: Vec<LayerWeights>,
    /// Final RMSNorm weight, `[hidden_size]`.
    pub norm: Tensor,
    /// LM head, `[vocab_size, hidden_size]` (the embedding when tied).
    pub lm_head: Linear,
}

/// A Llama-family decoder: config, weights and RoPE tables.
#[derive(Debug, Clone)]
pub struct Decoder {
    config: ModelConfig,
    weights: DecoderWeights,
    /// cos and sin of position · θ_i, `[max_position_embeddings, head_dim / 2]`.
    rope: Rope,
    /// The RMSNorm weights as plain vectors, per layer (input, post-attention, q, k).
    norms: Vec<LayerNorms>,
    /// Final RMSNorm weight, `[hidden_size]`.
    final_norm: Vec<f32>,
    device: Device,
}

/// One layer's RMSNorm weights as plain vectors (`[hidden_size]`; q/k `[head_dim]`).
#[derive(Debug, Clone)]
struct LayerNorms {
    input: Vec<f32>,
    post_attention: Vec<f32>,
    q: Option<Vec<f32>>,
    k: Option<Vec<f32>>,
}

impl Decoder {
    /// Build a decoder and its RoPE tables (θ_i = rope_theta^(-2i/head_dim), positions up to
    /// `max_position_embeddings`). Errors: tensor allocation failures.
    pub fn new(config: ModelConfig, weights: DecoderWeights, device: &Device) -> Result<Decoder> {
        let half = config.head_dim / 2;
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| {
                (1.0 / config
                    .rope_theta
                    .powf(2.0 * i as f64 / config.head_dim as f64)) as f32
            })
            .collect();
        let inv_freq = Tensor::from_vec(inv_freq, (1, half), device)?;
        let positions = Tensor::arange(0u32, config.max_position_embeddings as u32, device)?
            .to_dtype(DType::F32)?
            .reshape((config.max_position_embeddings, 1))?;
        let angles = positions.matmul(&inv_freq)?;
        let vec = |t: &Tensor| t.flatten_all()?.to_vec1::<f32>();
        let norms = weights
            .layers
            .iter()
            .map(|l| {
                Ok(LayerNorms {
                    input: vec(&l.input_layernorm)?,
                    post_attention: vec(&l.post_attention_layernorm)?,
                    q: l.q_norm.as_ref().map(vec).transpose()?,
                    k: l.k_norm.as_ref().map(vec).transpose()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Decoder {
            rope: Rope {
                half,
                cos: vec(&angles.cos()?)?,
                sin: vec(&angles.sin()?)?,
                interleaved: config.rope_interleaved,
            },
            norms,
            final_norm: vec(&weights.norm)?,
            config,
            weights,
            device: device.clone(),
        })
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Run `tokens` (positions `start_pos ..`) through the decoder, appending their K and V
    /// to `cache`, and return the logits of the last position, `[vocab_size]` f32.
    ///
    /// `start_pos` must equal `cache.len()`: an empty cache with the whole sequence is a full
    /// recompute (naive decode, or prefill), a filled cache with one token is a decode step.
    ///
    /// Errors: no tokens, `start_pos` not matching the cache, positions past
    /// `max_position_embeddings`, a token id outside the vocabulary.
    pub fn forward(&self, tokens: &[u32], start_pos: usize, cache: &mut KvCache) -> Result<Tensor> {
        let prompt_end = if tokens.len() > 1 {
            start_pos + tokens.len()
        } else {
            0
        };
        self.forward_with(tokens, start_pos, prompt_end, cache)
    }

    /// [`Decoder::forward`] where positions below `prompt_end` are prompt positions, run on
    /// the prefill kernels (dense f32 when the weights have a dense copy), and the others on
    /// the decode kernels (quantized). KV-cached decode (prefill, then one token at a time) and
    /// naive decode (the whole sequence every step) then compute every position with the same
    /// kernels and produce the same tokens.
    ///
    /// Errors: as [`Decoder::forward`].
    pub fn forward_with(
        &self,
        tokens: &[u32],
        start_pos: usize,
        prompt_end: usize,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        // Run the whole pass on a rayon worker: the kernels' parallel regions are then
        // forked from inside the pool (the caller works too, no futex round trip per
        // matrix), which measured 1.5–2 ms faster per decode step on 2 threads.
        rayon::scope(|_| self.forward_in_pool(tokens, start_pos, prompt_end, cache))
    }

    fn forward_in_pool(
        &self,
        tokens: &[u32],
        start_pos: usize,
        prompt_end: usize,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let dense_rows = prompt_end.saturating_sub(start_pos).min(tokens.len());
        let hidden = self.hidden_rows(tokens, start_pos, dense_rows, cache)?;
        let n = tokens.len();
        let width = self.config.hidden_size;
        let last = &hidden[(n - 1) * width..n * width];
        let last = ops::rms_norm(last, &self.final_norm, self.config.rms_norm_eps as f32);
        let head_dense = usize::from(dense_rows == n);
        let logits = self.weights.lm_head.forward_rows(&last, 1, head_dense)?;
        let vocab = logits.len();
        Tensor::from_vec(logits, vocab, &self.device)
    }

    /// The last layer's output for every position, `[tokens, hidden_size]` (before the final
    /// norm), appending K and V to `cache`; the first `dense_rows` rows use the prefill
    /// kernels. Errors: as [`Decoder::forward`].
    pub fn hidden_states(
        &self,
        tokens: &[u32],
        start_pos: usize,
        dense_rows: usize,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let x = self.hidden_rows(tokens, start_pos, dense_rows, cache)?;
        Tensor::from_vec(x, (tokens.len(), self.config.hidden_size), &self.device)
    }

    /// [`Decoder::hidden_states`] as a row-major `Vec`, `[tokens, hidden_size]`.
    fn hidden_rows(
        &self,
        tokens: &[u32],
        start_pos: usize,
        dense_rows: usize,
        cache: &mut KvCache,
    ) -> Result<Vec<f32>> {
        let c = &self.config;
        let n = tokens.len();
        if n == 0 {
            candle_core::bail!("forward needs at least one token");
        }
        if start_pos != cache.len() {
            candle_core::bail!(
                "start_pos {start_pos} does not match the KV cache length {}",
                cache.len()
            );
        }
        if start_pos + n > c.max_position_embeddings {
            candle_core::bail!(
                "positions up to {} exceed the context window of {} tokens",
                start_pos + n,
                c.max_position_embeddings
            );
        }
        if let Some(bad) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
            candle_core::bail!(
                "token id {bad} is outside the vocabulary of {}",
                c.vocab_size
            );
        }
        let ids = Tensor::new(tokens, &self.device)?;
        let mut x: Vec<f32> = self
            .weights
            .embed_tokens
            .index_select(&ids, 0)?
            .flatten_all()?
            .to_vec1()?;
        let eps = c.rms_norm_eps as f32;
        for (i, (layer, norms)) in self.weights.layers.iter().zip(&self.norms).enumerate() {
            let h = ops::rms_norm(&x, &norms.input, eps);
            let attn = self.attention(layer, norms, i, &h, n, start_pos, dense_rows, cache)?;
            ops::add_assign(&mut x, &attn);
            let h = ops::rms_norm(&x, &norms.post_attention, eps);
            let mut gate_up = project_many(&[&layer.gate_proj, &layer.up_proj], &h, n, dense_rows)?;
            let up = gate_up.pop().unwrap_or_default();
            let mut gate = gate_up.pop().unwrap_or_default();
            ops::silu_mul(&mut gate, &up);
            let mlp = layer.down_proj.forward_rows(&gate, n, dense_rows)?;
            ops::add_assign(&mut x, &mlp);
        }
        Ok(x)
    }

    /// Causal self-attention of one layer. `x`: `[n, hidden_size]` → `[n, hidden_size]`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        layer: &LayerWeights,
        norms: &LayerNorms,
        index: usize,
        x: &[f32],
        n: usize,
        start_pos: usize,
        dense_rows: usize,
        cache: &mut KvCache,
    ) -> Result<Vec<f32>> {
        let c = &self.config;
        let d = c.head_dim;
        let (heads, kv_heads) = (c.num_attention_heads, c.num_key_value_heads);
        let eps = c.rms_norm_eps as f32;
        let qkv = project_many(
            &[&layer.q_proj, &layer.k_proj, &layer.v_proj],
            x,
            n,
            dense_rows,
        )?;
        let [q, k, v] = &qkv[..] else {
            candle_core::bail!("missing projection");
        };
        let scale = 1.0 / (d as f32).sqrt();
        let q_norm = norms.q.as_deref().map(|w| (w, eps));
        let k_norm = norms.k.as_deref().map(|w| (w, eps));
        // [n, heads·d] → [1, heads, n, d], rotated (and q scaled by 1/√d).
        let q = self
            .rope
            .heads_major(q, n, heads, start_pos, true, scale, q_norm);
        let k = self
            .rope
            .heads_major(k, n, kv_heads, start_pos, true, 1.0, k_norm);
        let v = self
            .rope
            .heads_major(v, n, kv_heads, start_pos, false, 1.0, None);
        let q = Tensor::from_vec(q, (1, heads, n, d), &self.device)?;
        let k = Tensor::from_vec(k, (1, kv_heads, n, d), &self.device)?;
        let v = Tensor::from_vec(v, (1, kv_heads, n, d), &self.device)?;
        let (k, v) = cache.append(index, &k, &v)?;
        let y = attention::causal_attention(&q, &k, &v, start_pos)?;
        let y: Vec<f32> = y.flatten_all()?.to_vec1()?;
        layer.o_proj.forward_rows(&y, n, dense_rows)
    }
}

/// Logits of the last position as a `Vec<f32>` (for sampling and comparisons).
pub fn logits_vec(logits: &Tensor) -> Result<Vec<f32>> {
    logits.to_dtype(DType::F32)?.flatten_all()?.to_vec1()
}

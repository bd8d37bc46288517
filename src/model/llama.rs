//! The Llama-family decoder forward pass (Llama, SmolLM2, Mistral, Qwen2, Qwen3).
//!
//! Pre-norm transformer (Touvron et al. 2023, "LLaMA"): token embedding, then per layer
//! `x += Attention(RMSNorm(x))`, `x += SwiGLU(RMSNorm(x))`, a final RMSNorm and the LM head.
//! Attention is GQA with RoPE (Su et al. 2021) and a causal mask. The KV cache is not ours:
//! [`Decoder::forward`] reads and extends the [`KvCache`] the engine hands it.
use crate::kernels::quant::{matmul_group, QuantMatrix};
use crate::kv::KvCache;
use crate::model::attention;
use crate::model::config::ModelConfig;
use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Module, Result, Tensor};

/// A linear layer `y = x · Wᵀ + b`; W is `[out, in]`, quantized (GGUF) or dense.
#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: QMatMul,
    /// `[out_features]`, Qwen2's Q/K/V projections only.
    pub bias: Option<Tensor>,
    /// The same weight dequantized to f32, `[out_features, in_features]`, used for
    /// multi-token inputs (prefill) where a dense GEMM beats the quantized kernels.
    pub dense: Option<Tensor>,
    /// Q4_1 or Q8_0 weights for our own AVX2 kernels (candle's Q4_1 dot product is scalar).
    pub quant: Option<QuantMatrix>,
}

impl Linear {
    /// `x`: `[tokens, in]` → `[tokens, out]`. The first `dense_rows` rows (prompt positions)
    /// go through the dense f32 copy when there is one; the others through the quantized
    /// kernel (which quantizes `x` to 8 bits per block of 32). Both kernels compute each row
    /// independently of the others, so a row gets the same result in any batch.
    pub fn forward(&self, x: &Tensor, dense_rows: usize) -> Result<Tensor> {
        let rows = x.dim(0)?;
        let y = match &self.dense {
            Some(w) if dense_rows >= rows => x.matmul(&w.t()?)?,
            Some(w) if dense_rows > 0 => {
                let top = x.narrow(0, 0, dense_rows)?.matmul(&w.t()?)?;
                let rest = self.quantized(&x.narrow(0, dense_rows, rows - dense_rows)?)?;
                Tensor::cat(&[top, rest], 0)?
            }
            _ => self.quantized(x)?,
        };
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }

    /// The quantized path: our kernel for Q4_1 and Q8_0 weights, else candle's QMatMul.
    fn quantized(&self, x: &Tensor) -> Result<Tensor> {
        match &self.quant {
            Some(w) => {
                let n = x.dim(0)?;
                let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
                let y = w
                    .matmul(&xs)
                    .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
                Tensor::from_vec(y, (n, w.dims().0), x.device())
            }
            // A dense weight (HF safetensors, GGUF F32/F16) runs on gemm, whose result for a
            // row depends on how many rows are multiplied together: decode rows go one at a
            // time, so naive and KV-cached decode agree to the bit here too.
            None if matches!(self.weight, QMatMul::Tensor(_)) && x.dim(0)? > 1 => {
                let rows = (0..x.dim(0)?)
                    .map(|i| self.weight.forward(&x.narrow(0, i, 1)?))
                    .collect::<Result<Vec<_>>>()?;
                Tensor::cat(&rows, 0)
            }
            None => self.weight.forward(x),
        }
    }
}

/// Project `x` through several linear layers that read the same input (Q, K, V; gate, up).
/// On the decode path with our quantized kernels, `x` is quantized once and all the
/// matrices run in one parallel region; otherwise each layer runs on its own. Either way
/// every row's result is the same.
pub fn project_many(linears: &[&Linear], x: &Tensor, dense_rows: usize) -> Result<Vec<Tensor>> {
    let quant: Option<Vec<&QuantMatrix>> = linears.iter().map(|l| l.quant.as_ref()).collect();
    match quant {
        Some(mats) if dense_rows == 0 || linears.iter().all(|l| l.dense.is_none()) => {
            let n = x.dim(0)?;
            let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
            let ys =
                matmul_group(&mats, &xs).map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
            linears
                .iter()
                .zip(ys)
                .map(|(l, y)| {
                    let rows = y.len() / n.max(1);
                    let y = Tensor::from_vec(y, (n, rows), x.device())?;
                    match &l.bias {
                        Some(b) => y.broadcast_add(b),
                        None => Ok(y),
                    }
                })
                .collect()
        }
        _ => linears.iter().map(|l| l.forward(x, dense_rows)).collect(),
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
    cos: Tensor,
    sin: Tensor,
    device: Device,
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
        Ok(Decoder {
            cos: angles.cos()?,
            sin: angles.sin()?,
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
        let hidden = self.hidden_states(tokens, start_pos, dense_rows, cache)?;
        let n = tokens.len();
        let last = hidden.narrow(0, n - 1, 1)?;
        let last =
            candle_nn::ops::rms_norm(&last, &self.weights.norm, self.config.rms_norm_eps as f32)?;
        let head_dense = usize::from(dense_rows == n);
        self.weights.lm_head.forward(&last, head_dense)?.squeeze(0)
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
        let mut x = self.weights.embed_tokens.index_select(&ids, 0)?;
        let cos = self.cos.narrow(0, start_pos, n)?;
        let sin = self.sin.narrow(0, start_pos, n)?;
        let eps = c.rms_norm_eps as f32;
        for (i, layer) in self.weights.layers.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &layer.input_layernorm, eps)?;
            let attn = self.attention(layer, i, &h, (&cos, &sin), start_pos, dense_rows, cache)?;
            x = (x + attn)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.post_attention_layernorm, eps)?;
            let gate_up = project_many(&[&layer.gate_proj, &layer.up_proj], &h, dense_rows)?;
            let gate = candle_nn::ops::silu(&gate_up[0])?;
            let mlp = layer
                .down_proj
                .forward(&(gate * &gate_up[1])?, dense_rows)?;
            x = (x + mlp)?;
        }
        Ok(x)
    }

    /// Causal self-attention of one layer. `x`: `[n, hidden_size]` → `[n, hidden_size]`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        layer: &LayerWeights,
        index: usize,
        x: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        start_pos: usize,
        dense_rows: usize,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (n, d) = (x.dim(0)?, c.head_dim);
        let (heads, kv_heads) = (c.num_attention_heads, c.num_key_value_heads);
        // [n, heads·d] → [1, heads, n, d]
        let split = |t: Tensor, h: usize| t.reshape((1, n, h, d))?.transpose(1, 2)?.contiguous();
        let mut qkv = project_many(
            &[&layer.q_proj, &layer.k_proj, &layer.v_proj],
            x,
            dense_rows,
        )?
        .into_iter();
        let mut next = || {
            qkv.next()
                .ok_or_else(|| candle_core::Error::Msg("missing projection".into()))
        };
        let mut q = split(next()?, heads)?;
        let mut k = split(next()?, kv_heads)?;
        let v = split(next()?, kv_heads)?;
        if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
            q = candle_nn::ops::rms_norm(&q, qn, c.rms_norm_eps as f32)?;
            k = candle_nn::ops::rms_norm(&k, kn, c.rms_norm_eps as f32)?;
        }
        let rope = if c.rope_interleaved {
            candle_nn::rotary_emb::rope_i
        } else {
            candle_nn::rotary_emb::rope
        };
        let q = (rope(&q, cos, sin)? * (1.0 / (d as f64).sqrt()))?;
        let k = rope(&k, cos, sin)?;
        let (k, v) = cache.append(index, &k, &v)?;
        let y = attention::causal_attention(&q, &k, &v, start_pos)?;
        layer.o_proj.forward(&y, dense_rows)
    }
}

/// Logits of the last position as a `Vec<f32>` (for sampling and comparisons).
pub fn logits_vec(logits: &Tensor) -> Result<Vec<f32>> {
    logits.to_dtype(DType::F32)?.flatten_all()?.to_vec1()
}

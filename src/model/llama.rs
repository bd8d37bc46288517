//! The Llama-family decoder forward pass (Llama, SmolLM2, Mistral, Qwen2, Qwen3).
//!
//! Pre-norm transformer (Touvron et al. 2023, "LLaMA"): token embedding, then per layer
//! `x += Attention(RMSNorm(x))`, `x += SwiGLU(RMSNorm(x))`, a final RMSNorm and the LM head.
//! Attention is GQA with RoPE (Su et al. 2021) and a causal mask. The KV cache is not ours:
//! [`Decoder::forward`] reads and extends the [`KvCache`] the engine hands it: each layer writes
//! its new K/V rows into their slots of the block pool, then attends through the block table.
use crate::kv::{KvCache, KvPart};
use crate::model::attention;
use crate::model::config::ModelConfig;
pub use crate::model::linear::{project_many, Linear};
use crate::model::ops::{self, Rope};
use candle_core::{DType, Device, Result, Tensor};

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
    pub input_layernorm: Vec<f32>,
    /// RMSNorm weight before the MLP, `[hidden_size]`.
    pub post_attention_layernorm: Vec<f32>,
    /// Qwen3 per-head RMSNorm weight on Q, `[head_dim]`.
    pub q_norm: Option<Vec<f32>>,
    /// Qwen3 per-head RMSNorm weight on K, `[head_dim]`.
    pub k_norm: Option<Vec<f32>>,
}

/// All the decoder's weights.
#[derive(Debug, Clone)]
pub struct DecoderWeights {
    /// Token embedding, `[vocab_size, hidden_size]` f32.
    pub embed_tokens: Tensor,
    /// One entry per layer.
    pub layers: Vec<LayerWeights>,
    /// Final RMSNorm weight, `[hidden_size]`.
    pub norm: Vec<f32>,
    /// LM head, `[vocab_size, hidden_size]` (the embedding when tied).
    pub lm_head: Linear,
}

/// A Llama-family decoder: config, weights and RoPE tables.
#[derive(Debug, Clone)]
pub struct Decoder {
    config: ModelConfig,
    weights: DecoderWeights,
    /// cos and sin of position · θ_i (times YaRN's attention factor),
    /// `[max_position_embeddings, head_dim / 2]`.
    rope: Rope,
    device: Device,
}

impl Decoder {
    /// Build a decoder and its RoPE tables: cos and sin of `position · θ_i` for positions up to
    /// `max_position_embeddings`, θ_i from [`ModelConfig::rope_inv_freq`] (plain
    /// `rope_theta^(-2i/head_dim)`, or rescaled by linear / llama3 / YaRN scaling and GGUF
    /// frequency factors), times YaRN's attention factor. Errors: tensor allocation failures.
    pub fn new(config: ModelConfig, weights: DecoderWeights, device: &Device) -> Result<Decoder> {
        let half = config.head_dim / 2;
        let (inv_freq, attention_factor) = config.rope_inv_freq();
        let inv_freq: Vec<f32> = inv_freq.iter().map(|&f| f as f32).collect();
        let inv_freq = Tensor::from_vec(inv_freq, (1, half), device)?;
        let positions = Tensor::arange(0u32, config.max_position_embeddings as u32, device)?
            .to_dtype(DType::F32)?
            .reshape((config.max_position_embeddings, 1))?;
        let angles = positions.matmul(&inv_freq)?;
        let vec = |t: &Tensor| -> Result<Vec<f32>> {
            let mut v = t.flatten_all()?.to_vec1::<f32>()?;
            if attention_factor != 1.0 {
                let a = attention_factor as f32;
                v.iter_mut().for_each(|x| *x *= a);
            }
            Ok(v)
        };
        Ok(Decoder {
            rope: Rope {
                half,
                cos: vec(&angles.cos()?)?,
                sin: vec(&angles.sin()?)?,
                interleaved: config.rope_interleaved,
            },
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

    /// Run `tokens` (positions `start_pos ..`) through the decoder, writing their K and V into
    /// `cache`, and return the logits of the last position, `[vocab_size]` f32.
    ///
    /// `start_pos` must equal `cache.len()`: an empty cache with the whole sequence is a full
    /// recompute (naive decode, or prefill), a filled cache with one token is a decode step.
    ///
    /// Errors: no tokens, `start_pos` not matching the cache, positions past
    /// `max_position_embeddings`, a token id outside the vocabulary, a KV pool out of blocks.
    /// On error the cache is as it was (same length, same blocks).
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
        let n = tokens.len();
        let logits =
            self.forward_logits(tokens, start_pos, prompt_end, cache, n.saturating_sub(1))?;
        let vocab = logits.len();
        Tensor::from_vec(logits, vocab, &self.device)
    }

    /// [`Decoder::forward_with`] returning the logits of every position from row `first_row`
    /// on (row 0 is position `start_pos`): `[n − first_row, vocab_size]` row-major f32. The LM
    /// head runs on the prefill kernels when every returned row is a prompt row. Perplexity
    /// scoring uses it to read the logits of a whole chunk.
    ///
    /// Errors: as [`Decoder::forward`], and `first_row` ≥ the number of tokens.
    pub fn forward_logits(
        &self,
        tokens: &[u32],
        start_pos: usize,
        prompt_end: usize,
        cache: &mut KvCache,
        first_row: usize,
    ) -> Result<Vec<f32>> {
        let n = tokens.len();
        if first_row >= n.max(1) {
            candle_core::bail!("logits from row {first_row} of a {n}-token forward pass");
        }
        // Run the whole pass on a rayon worker: the kernels' parallel regions are then
        // forked from inside the pool (the caller works too, no futex round trip per
        // matrix), which measured 1.5–2 ms faster per decode step on 2 threads.
        rayon::scope(|_| {
            let dense_rows = prompt_end.saturating_sub(start_pos).min(n);
            let hidden = self.hidden_rows_committed(tokens, start_pos, dense_rows, cache)?;
            let width = self.config.hidden_size;
            let rows = n - first_row;
            let last = ops::rms_norm(
                &hidden[first_row * width..],
                &self.weights.norm,
                self.config.rms_norm_eps as f32,
            );
            let head_dense = if dense_rows == n { rows } else { 0 };
            self.weights.lm_head.forward_rows(&last, rows, head_dense)
        })
    }

    /// [`Self::hidden_rows`] with the cache bookkeeping: reserve blocks for the new positions,
    /// run, then commit the new length, or give the new blocks back if the pass failed.
    fn hidden_rows_committed(
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
        let shape = cache.shape();
        if shape != c.kv_shape(shape.dtype) {
            candle_core::bail!("the KV cache's shape {shape:?} does not fit this model");
        }
        let blocks_before = cache.table.blocks().len();
        cache
            .table
            .reserve(&mut cache.pool, start_pos + n)
            .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
        match self.hidden_rows(tokens, start_pos, dense_rows, cache) {
            Ok(hidden) => {
                let bs = cache.block_size();
                cache.table.commit(start_pos + n, bs);
                Ok(hidden)
            }
            Err(e) => {
                cache.table.truncate_blocks(&mut cache.pool, blocks_before);
                Err(e)
            }
        }
    }

    /// The last layer's output for every position, `[tokens, hidden_size]` row-major (before
    /// the final norm), writing K and V into `cache`'s reserved slots; the first `dense_rows`
    /// rows use the prefill kernels. The caller checked the inputs and reserved the blocks.
    fn hidden_rows(
        &self,
        tokens: &[u32],
        start_pos: usize,
        dense_rows: usize,
        cache: &mut KvCache,
    ) -> Result<Vec<f32>> {
        let c = &self.config;
        let n = tokens.len();
        let ids = Tensor::new(tokens, &self.device)?;
        let mut x: Vec<f32> = self
            .weights
            .embed_tokens
            .index_select(&ids, 0)?
            .flatten_all()?
            .to_vec1()?;
        let eps = c.rms_norm_eps as f32;
        for (i, layer) in self.weights.layers.iter().enumerate() {
            let h = ops::rms_norm(&x, &layer.input_layernorm, eps);
            let attn = self.attention(layer, i, &h, n, start_pos, dense_rows, cache)?;
            ops::add_assign(&mut x, &attn);
            let h = ops::rms_norm(&x, &layer.post_attention_layernorm, eps);
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
        let q_norm = layer.q_norm.as_deref().map(|w| (w, eps));
        let k_norm = layer.k_norm.as_deref().map(|w| (w, eps));
        // [n, heads·d] → [heads, n, d], rotated (and q scaled by 1/√d).
        let q = self
            .rope
            .heads_major(q, n, heads, start_pos, true, scale, q_norm);
        let k = self
            .rope
            .heads_major(k, n, kv_heads, start_pos, true, 1.0, k_norm);
        let v = self
            .rope
            .heads_major(v, n, kv_heads, start_pos, false, 1.0, None);
        let KvCache { pool, table } = cache;
        pool.write(table.blocks(), index, KvPart::K, start_pos, n, &k);
        pool.write(table.blocks(), index, KvPart::V, start_pos, n, &v);
        let view = pool.layer_view(table.blocks(), index);
        let y = attention::paged_attention(&q, heads, kv_heads, n, start_pos, &view)?;
        layer.o_proj.forward_rows(&y, n, dense_rows)
    }
}

/// Logits of the last position as a `Vec<f32>` (for sampling and comparisons).
pub fn logits_vec(logits: &Tensor) -> Result<Vec<f32>> {
    logits.to_dtype(DType::F32)?.flatten_all()?.to_vec1()
}

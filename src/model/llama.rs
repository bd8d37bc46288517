//! The Llama-family decoder forward pass (Llama, SmolLM2, Mistral, Qwen2, Qwen3, Gemma 3).
//!
//! Pre-norm transformer (Touvron et al. 2023, "LLaMA"): token embedding, then per layer
//! `x += Attention(RMSNorm(x))`, `x += SwiGLU(RMSNorm(x))`, a final RMSNorm and the LM head.
//! Attention is GQA with RoPE (Su et al. 2021) and a causal mask. Gemma 3's switches are
//! config fields: embeddings times √hidden_size, `x += RMSNorm(Attention(RMSNorm(x)))` and
//! the same around a GELU-tanh MLP, sliding-window layers (each row reads its last W keys)
//! with their own RoPE base, and scores scaled by `query_pre_attn_scalar`. The KV cache is not ours:
//! [`Decoder::forward`] reads and extends the [`KvCache`] the engine hands it: each layer writes
//! its new K/V rows into their slots of the block pool, then attends through the block table.
use crate::kv::{KvCache, KvPart, KvPool};
use crate::model::attention::{self, AttnSeq};
pub use crate::model::batch::SeqChunk;
use crate::model::config::{HiddenAct, ModelConfig};
use crate::model::embedding::Embedding;
pub use crate::model::linear::{project_many, project_mask, Linear};
use crate::model::ops::{self, Rope};
use candle_core::{DType, Device, Result, Tensor};
use rayon::prelude::*;

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
    /// RMSNorm weight on the attention output before its residual add, `[hidden_size]`
    /// (Gemma's `post_attention_layernorm`; GGUF `post_attention_norm`).
    pub attn_output_norm: Option<Vec<f32>>,
    /// RMSNorm weight on the MLP output before its residual add, `[hidden_size]` (Gemma's
    /// `post_feedforward_layernorm`; GGUF `post_ffw_norm`).
    pub mlp_output_norm: Option<Vec<f32>>,
}

/// All the decoder's weights.
#[derive(Debug, Clone)]
pub struct DecoderWeights {
    /// Token embedding, `[vocab_size, hidden_size]`: f32 rows, or quantized rows dequantized
    /// on lookup (shared with a tied LM head).
    pub embed_tokens: Embedding,
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
    /// cos and sin of position · θ_i (times YaRN's attention factor), `[positions,
    /// head_dim / 2]`, grown on demand.
    rope: Rope,
    /// The sliding-window layers' tables when they have their own base
    /// (`rope_local_theta`).
    rope_local: Option<Rope>,
    device: Device,
    /// Prompts shorter than this run their prompt rows on the decode kernels too
    /// ([`Decoder::set_dense_prompt_min_tokens`]); 0: every prompt row on the prefill kernels.
    dense_prompt_min_tokens: usize,
}

impl Decoder {
    /// Build a decoder and its RoPE tables: cos and sin of `position · θ_i` for the first
    /// positions (grown on demand up to `max_position_embeddings`, [`Rope`]), θ_i from
    /// [`ModelConfig::rope_inv_freq`] (plain `rope_theta^(-2i/head_dim)`, or rescaled by
    /// linear / llama3 / YaRN scaling and GGUF frequency factors), times YaRN's attention
    /// factor. Errors: none today (the tables no longer go through candle tensors); the
    /// `Result` stays for the loaders that call it.
    pub fn new(config: ModelConfig, weights: DecoderWeights, device: &Device) -> Result<Decoder> {
        let (inv_freq, attention_factor) = config.rope_inv_freq();
        let inv_freq: Vec<f32> = inv_freq.iter().map(|&f| f as f32).collect();
        let rope_local = config.rope_local_theta.map(|theta| {
            let f = crate::model::rope::inv_freq(
                config.head_dim,
                theta,
                &crate::model::rope::RopeScaling::Default,
                None,
            );
            let f: Vec<f32> = f.iter().map(|&x| x as f32).collect();
            Rope::new(
                f,
                1.0,
                config.rope_interleaved,
                config.max_position_embeddings,
            )
        });
        Ok(Decoder {
            rope_local,
            rope: Rope::new(
                inv_freq,
                attention_factor as f32,
                config.rope_interleaved,
                config.max_position_embeddings,
            ),
            config,
            weights,
            device: device.clone(),
            dense_prompt_min_tokens: 0,
        })
    }

    /// Run the prompt rows of requests whose prompt (`prompt_end` of their forward passes)
    /// is shorter than `tokens` on the decode kernels (quantized) instead of the prefill
    /// kernels (dense f32): a short prompt costs less than streaming the whole f32 copy of
    /// the weights (`--prefill-kernel auto`). The choice depends on the request's prompt
    /// length only — never on the batch or the chunk — so naive == KV-cached decode,
    /// batched == alone and chunked == one-shot still hold bit for bit. 0: always dense
    /// (when the weights have a dense copy); `usize::MAX`: never.
    pub fn set_dense_prompt_min_tokens(&mut self, tokens: usize) {
        self.dense_prompt_min_tokens = tokens;
    }

    /// Whether a request whose prompt is `prompt_len` tokens runs its prompt rows on the
    /// prefill kernels (see [`Self::set_dense_prompt_min_tokens`]).
    pub fn prompt_is_dense(&self, prompt_len: usize) -> bool {
        prompt_len >= self.dense_prompt_min_tokens
    }

    /// Each row's kernel class in `s`: prompt rows of a dense-prompt request are dense.
    fn dense_rows<'a>(&self, s: &'a SeqChunk) -> impl Iterator<Item = bool> + 'a {
        let dense = self.prompt_is_dense(s.prompt_end);
        s.prompt_rows().map(move |p| p && dense)
    }

    /// The weights, as loaded (read-only: which form each matrix is held in).
    pub fn weights(&self) -> &DecoderWeights {
        &self.weights
    }

    /// The bytes the weights occupy, by the form they are held in.
    pub fn weights_held(&self) -> crate::model::weights_held::WeightsHeld {
        crate::model::weights_held::WeightsHeld::of(&self.weights)
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
    /// head runs on the prefill kernels for prompt rows. Perplexity scoring uses it to read
    /// the logits of a whole chunk.
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
        let context = self.config.max_position_embeddings;
        if start_pos + n > context {
            candle_core::bail!(
                "positions up to {} exceed the context window of {context} tokens",
                start_pos + n
            );
        }
        let blocks_before = cache.table.num_logical_blocks();
        if n > 0 && start_pos == cache.len() {
            cache
                .table
                .reserve(&mut cache.pool, start_pos + n)
                .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
        }
        let KvCache { pool, table } = cache;
        let chunk = SeqChunk {
            tokens,
            start_pos,
            prompt_end,
            table,
            logits_from: Some(first_row),
        };
        match self.forward_batch(pool, &[chunk]) {
            Ok(mut logits) => {
                let bs = pool.block_size();
                table.commit(start_pos + n, bs);
                table.drop_out_of_window(pool);
                Ok(logits.pop().unwrap_or_default())
            }
            Err(e) => {
                table.truncate_blocks(pool, blocks_before);
                Err(e)
            }
        }
    }

    /// One forward pass over the new rows of several sequences (continuous batching): every
    /// weight matrix is read once for all rows, each sequence attends through its own block
    /// table at its own positions. Writes each row's K and V into its slot; the caller
    /// reserved the blocks and commits each table's new length after success (on error the
    /// rows written are garbage past each table's committed length).
    ///
    /// Returns, per sequence, the logits of its rows from `logits_from` on
    /// (`[rows, vocab_size]` row-major f32; empty when `logits_from` is None). A row's result
    /// is bit-identical whatever else is in the batch (design rule R1).
    ///
    /// Errors: no sequence, a chunk with no token, `start_pos` not the table's committed
    /// length, a table not covering the chunk, positions past `max_position_embeddings`,
    /// a token id outside the vocabulary, a pool of another shape.
    pub fn forward_batch(&self, pool: &mut KvPool, seqs: &[SeqChunk]) -> Result<Vec<Vec<f32>>> {
        let c = &self.config;
        if seqs.is_empty() {
            candle_core::bail!("forward needs at least one sequence");
        }
        for s in seqs {
            s.check(c, pool.block_size())?;
        }
        let shape = pool.shape();
        if shape != c.kv_shape(shape.dtype) {
            candle_core::bail!("the KV cache's shape {shape:?} does not fit this model");
        }
        // A sliding group gives blocks back: only layers of that very window may use it.
        for (layer, window) in c.layer_windows.iter().enumerate() {
            let (g, _) = pool.groups().slot(layer);
            let kept = pool.groups().groups[g].window;
            if kept.is_some() && kept != *window {
                candle_core::bail!(
                    "layer {layer} attends with window {window:?} but its KV group keeps {kept:?}"
                );
            }
        }
        // Run the whole pass on a rayon worker: the kernels' parallel regions are then
        // forked from inside the pool (the caller works too, no futex round trip per
        // matrix), which measured 1.5–2 ms faster per decode step on 2 threads.
        rayon::scope(|_| {
            let hidden = self.hidden_rows(pool, seqs)?;
            let width = c.hidden_size;
            // Rows whose logits are wanted, and their kernel class.
            let (mut rows, mut dense, mut counts) = (Vec::new(), Vec::new(), Vec::new());
            let mut at = 0;
            for s in seqs {
                let from = s.logits_from.unwrap_or(s.len());
                rows.extend_from_slice(&hidden[(at + from) * width..(at + s.len()) * width]);
                dense.extend(self.dense_rows(s).skip(from));
                counts.push(s.len() - from);
                at += s.len();
            }
            if dense.is_empty() {
                return Ok(seqs.iter().map(|_| Vec::new()).collect());
            }
            let last = ops::rms_norm(&rows, &self.weights.norm, c.rms_norm_eps as f32);
            let mut logits = self.weights.lm_head.forward_mask(&last, &dense)?;
            if let Some(cap) = c.final_logit_softcapping {
                let cap = cap as f32;
                for l in &mut logits {
                    *l = cap * (*l / cap).tanh();
                }
            }
            if let [_] = seqs {
                return Ok(vec![logits]);
            }
            let vocab = logits.len() / dense.len();
            let mut out = Vec::with_capacity(seqs.len());
            let mut at = 0;
            for k in counts {
                out.push(logits[at * vocab..(at + k) * vocab].to_vec());
                at += k;
            }
            Ok(out)
        })
    }

    /// The last layer's output for every row of every sequence, `[Σ n, hidden_size]`
    /// row-major (before the final norm), writing K and V into each table's reserved slots.
    /// The caller checked the inputs.
    fn hidden_rows(&self, pool: &mut KvPool, seqs: &[SeqChunk]) -> Result<Vec<f32>> {
        let c = &self.config;
        let tokens: Vec<u32> = seqs.iter().flat_map(|s| s.tokens.iter().copied()).collect();
        let dense: Vec<bool> = seqs.iter().flat_map(|s| self.dense_rows(s)).collect();
        let mut x: Vec<f32> = self
            .weights
            .embed_tokens
            .rows(&tokens, &self.weights.lm_head, &self.device)
            .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
        if c.scale_embeddings {
            // Gemma: the embedding times √hidden_size, rounded to f32 first (HF multiplies
            // by a tensor of the activations' dtype).
            let scale = (c.hidden_size as f32).sqrt();
            for v in &mut x {
                *v *= scale;
            }
        }
        let eps = c.rms_norm_eps as f32;
        let layers = &self.weights.layers;
        // Each residual add is fused with the RMSNorm that reads its result (the same bits).
        let mut h = match layers.first() {
            Some(layer) => ops::rms_norm(&x, &layer.input_layernorm, eps),
            None => return Ok(x),
        };
        for (i, layer) in layers.iter().enumerate() {
            let mut attn = self.attention(layer, i, &h, &dense, pool, seqs)?;
            if let Some(w) = &layer.attn_output_norm {
                attn = ops::rms_norm(&attn, w, eps);
            }
            h = ops::add_rms_norm(&mut x, &attn, &layer.post_attention_layernorm, eps);
            let mut gate_up = project_mask(&[&layer.gate_proj, &layer.up_proj], &h, &dense)?;
            let up = gate_up.pop().unwrap_or_default();
            let mut gate = gate_up.pop().unwrap_or_default();
            match c.hidden_act {
                HiddenAct::Silu => ops::silu_mul(&mut gate, &up),
                HiddenAct::GeluTanh => ops::gelu_tanh_mul(&mut gate, &up),
            }
            let mut mlp = layer.down_proj.forward_mask(&gate, &dense)?;
            if let Some(w) = &layer.mlp_output_norm {
                mlp = ops::rms_norm(&mlp, w, eps);
            }
            match layers.get(i + 1) {
                Some(next) => h = ops::add_rms_norm(&mut x, &mlp, &next.input_layernorm, eps),
                None => ops::add_assign(&mut x, &mlp),
            }
        }
        Ok(x)
    }

    /// Causal self-attention of one layer for the rows of every sequence.
    /// `x`: `[Σ n, hidden_size]` → `[Σ n, hidden_size]`.
    fn attention(
        &self,
        layer: &LayerWeights,
        index: usize,
        x: &[f32],
        dense: &[bool],
        pool: &mut KvPool,
        seqs: &[SeqChunk],
    ) -> Result<Vec<f32>> {
        let c = &self.config;
        let d = c.head_dim;
        let (heads, kv_heads) = (c.num_attention_heads, c.num_key_value_heads);
        let eps = c.rms_norm_eps as f32;
        let qkv = project_mask(&[&layer.q_proj, &layer.k_proj, &layer.v_proj], x, dense)?;
        let [q, k, v] = &qkv[..] else {
            candle_core::bail!("missing projection");
        };
        let scale = c.attention_scale();
        let layer_window = c.layer_windows.get(index).copied().flatten();
        let rope = match (layer_window, &self.rope_local) {
            (Some(_), Some(local)) => local,
            _ => &self.rope,
        };
        // This layer's group and its slot in the group's blocks (the layer itself with one
        // group). A sliding layer whose group keeps every block (`--swa-full`) scores every
        // key and masks those before the window, as llama.cpp's full cache does: the same
        // bits, the time of a full scan.
        let (group, slot) = pool.groups().slot(index);
        let window = attention::Window {
            size: layer_window,
            scan_masked: layer_window.is_some() && pool.groups().groups[group].window.is_none(),
        };
        let q_norm = layer.q_norm.as_deref().map(|w| (w, eps));
        let k_norm = layer.k_norm.as_deref().map(|w| (w, eps));
        let (qw, kw) = (heads * d, kv_heads * d);
        // Per sequence: [n, heads·d] → [heads, n, d], rotated at its positions (q scaled by
        // 1/√d); K and V written into its slots.
        let starts: Vec<usize> = seqs
            .iter()
            .scan(0, |at, s| {
                let start = *at;
                *at += s.len();
                Some(start)
            })
            .collect();
        let rotate = |(s, &at): (&SeqChunk, &usize)| {
            let (n, p) = (s.len(), s.start_pos);
            let q = &q[at * qw..(at + n) * qw];
            let k = &k[at * kw..(at + n) * kw];
            let v = &v[at * kw..(at + n) * kw];
            (
                rope.heads_major(q, n, heads, p, true, scale, q_norm),
                rope.heads_major(k, n, kv_heads, p, true, 1.0, k_norm),
                rope.heads_major(v, n, kv_heads, p, false, 1.0, None),
            )
        };
        // Many sequences (batched decode): rotate them on both threads.
        let rotated: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = if seqs.len() >= 4 {
            seqs.par_iter().zip(starts.par_iter()).map(rotate).collect()
        } else {
            seqs.iter().zip(starts.iter()).map(rotate).collect()
        };
        let mut qs = Vec::with_capacity(seqs.len());
        for (s, (q, k, v)) in seqs.iter().zip(rotated) {
            let (n, p) = (s.len(), s.start_pos);
            pool.write(s.table.group(group), slot, KvPart::K, p, n, &k);
            pool.write(s.table.group(group), slot, KvPart::V, p, n, &v);
            qs.push(q);
        }
        let items: Vec<AttnSeq> = seqs
            .iter()
            .zip(&qs)
            .map(|(s, q)| AttnSeq {
                q,
                n: s.len(),
                start_pos: s.start_pos,
                kv: pool
                    .layer_view(s.table.group(group), slot)
                    .with_prefetch(s.len() < attention::PREFETCH_BELOW_ROWS),
                window,
            })
            .collect();
        let y = attention::paged_attention_batch(&items, heads, kv_heads)?;
        layer.o_proj.forward_mask(&y, dense)
    }
}

/// Logits of the last position as a `Vec<f32>` (for sampling and comparisons).
pub fn logits_vec(logits: &Tensor) -> Result<Vec<f32>> {
    logits.to_dtype(DType::F32)?.flatten_all()?.to_vec1()
}

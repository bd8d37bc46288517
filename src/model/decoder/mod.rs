//! The Llama-family decoder (Llama, SmolLM2, Mistral, Qwen2, Qwen3, Gemma 3): the loop over
//! its layers, read top to bottom.
//!
//! Pre-norm transformer (Touvron et al. 2023, "LLaMA"): token embedding, then per layer
//! `x += Attention(RMSNorm(x))`, `x += FFN(RMSNorm(x))`, a final RMSNorm and the LM head.
//! What every layer does is here and in `layer.rs`; what an architecture chooses is which
//! blocks its layers hold (`model::arch`): the attention block (`attention/`: GQA with RoPE,
//! optional sliding window and Q/K head norms), the feed-forward block (`ffn/`: dense gated
//! SwiGLU/GeGLU), where the norms sit (`norm.rs`: Gemma's sandwich) and the RoPE tables
//! (`rope.rs`: Gemma's sliding layers' own base). Gemma's other switches are config fields:
//! embeddings times √hidden_size, scores scaled by `query_pre_attn_scalar`, soft-capped
//! logits. The KV cache is not ours: [`Decoder::forward`] reads and extends the [`KvCache`]
//! the engine hands it: each layer writes its new K/V rows into their slots of the block
//! pool, then attends through the block table.
use crate::kv::{KvCache, KvPool};
use crate::model::batch::SeqChunk;
use crate::model::config::ModelConfig;
use crate::model::ops;
use candle_core::{DType, Device, Result, Tensor};

pub mod attention;
pub mod ffn;
pub mod layer;
pub mod norm;
pub mod pass;
pub mod rope;
pub mod weights;
pub mod weights_held;

pub use layer::LayerWeights;
use pass::LayerPass;
use rope::RopeTables;
pub use weights::DecoderWeights;
use weights_held::WeightsHeld;

/// A Llama-family decoder: config, weights and RoPE tables.
#[derive(Debug, Clone)]
pub struct Decoder {
    config: ModelConfig,
    weights: DecoderWeights,
    /// RoPE's cos and sin tables, global and (Gemma 3) the sliding layers' own.
    rope: RopeTables,
    device: Device,
    /// Prompts shorter than this run their prompt rows on the decode kernels too
    /// ([`Decoder::set_dense_prompt_min_tokens`]); 0: every prompt row on the prefill kernels.
    dense_prompt_min_tokens: usize,
    /// Which path MLA rows attend by ([`Decoder::set_mla_path`]).
    mla_path: attention::MlaPath,
}

impl Decoder {
    /// Build a decoder and its RoPE tables ([`RopeTables::new`]). Errors: none today (the
    /// tables no longer go through candle tensors); the `Result` stays for the loaders.
    pub fn new(config: ModelConfig, weights: DecoderWeights, device: &Device) -> Result<Decoder> {
        Ok(Decoder {
            rope: RopeTables::new(&config),
            config,
            weights,
            device: device.clone(),
            dense_prompt_min_tokens: 0,
            mla_path: attention::MlaPath::Auto,
        })
    }

    /// Which path multi-head latent attention's rows take (`--mla-path`): by row class
    /// (auto: prompt rows expanded, generated rows absorbed), or every row one way. A
    /// model without MLA ignores it.
    pub fn set_mla_path(&mut self, path: attention::MlaPath) {
        self.mla_path = path;
    }

    /// The path MLA rows take.
    pub fn mla_path(&self) -> attention::MlaPath {
        self.mla_path
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
    pub fn weights_held(&self) -> WeightsHeld {
        WeightsHeld::of(&self.weights)
    }

    /// Each mixture-of-experts layer's router counters so far (`None` for a dense model):
    /// snapshot before and after a phase and subtract ([`ffn::moe::ExpertCounts::since`]).
    pub fn expert_counts(&self) -> Option<Vec<ffn::moe::ExpertCounts>> {
        let counts: Vec<_> = self
            .weights
            .layers
            .iter()
            .filter_map(|l| l.ffn.moe().map(|m| m.counters.snapshot()))
            .collect();
        (!counts.is_empty()).then_some(counts)
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
        self.forward_cached(
            tokens, start_pos, prompt_end, cache, first_row, true, None, None,
        )
    }

    /// [`Decoder::forward_logits`] that also logs, into `log`, the query rows an eviction
    /// policy reads ([`crate::kv::evict::QueryLog`]).
    ///
    /// Errors: as [`Decoder::forward_logits`].
    pub fn forward_observed(
        &self,
        tokens: &[u32],
        (start_pos, prompt_end): (usize, usize),
        cache: &mut KvCache,
        first_row: usize,
        log: Option<&crate::kv::evict::QueryLog>,
    ) -> Result<Vec<f32>> {
        self.forward_cached(
            tokens, start_pos, prompt_end, cache, first_row, true, log, None,
        )
    }

    /// [`Decoder::forward_logits`] whose attention leaves out the rows `mask` marks
    /// (`[layer][kv_head][row]`, `true`: masked), on an f64 reference attention: the oracle
    /// an evicted cache is checked against (the full cache with the evicted keys masked).
    ///
    /// Errors: as [`Decoder::forward_logits`].
    pub fn forward_masked(
        &self,
        tokens: &[u32],
        (start_pos, prompt_end): (usize, usize),
        cache: &mut KvCache,
        mask: &[Vec<Vec<bool>>],
    ) -> Result<Vec<f32>> {
        let last = tokens.len().saturating_sub(1);
        self.forward_cached(
            tokens,
            start_pos,
            prompt_end,
            cache,
            last,
            true,
            None,
            Some(mask),
        )
    }

    /// A speculative verify step through `cache`: [`Decoder::forward_logits`] from row 0
    /// (`[rows, vocab_size]`), except that sliding-window groups keep the blocks the rows'
    /// window moved past, so that the caller can roll the rejected rows back
    /// ([`KvCache::rollback`], which then gives those blocks back).
    ///
    /// Errors: as [`Decoder::forward_logits`].
    pub fn forward_verify(
        &self,
        tokens: &[u32],
        start_pos: usize,
        prompt_end: usize,
        cache: &mut KvCache,
    ) -> Result<Vec<f32>> {
        self.forward_cached(tokens, start_pos, prompt_end, cache, 0, false, None, None)
    }

    /// [`Decoder::forward_logits`], dropping the sliding groups' out-of-window blocks after
    /// the commit when `drop_window`, logging queries into `log`.
    #[allow(clippy::too_many_arguments)]
    fn forward_cached(
        &self,
        tokens: &[u32],
        start_pos: usize,
        prompt_end: usize,
        cache: &mut KvCache,
        first_row: usize,
        drop_window: bool,
        log: Option<&crate::kv::evict::QueryLog>,
        mask: Option<&[Vec<Vec<bool>>]>,
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
        let lists_before = cache.table.list_lens();
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
            observe: log,
            mask,
        };
        match self.forward_batch(pool, &[chunk]) {
            Ok(mut logits) => {
                let bs = pool.block_size();
                table.commit(start_pos + n, bs);
                if drop_window {
                    table.drop_out_of_window(pool);
                }
                Ok(logits.pop().unwrap_or_default())
            }
            Err(e) => {
                table.truncate_lists(pool, &lists_before);
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
        // matrix): faster per decode step (measured: docs/benchmarks.md, "The forward pass on
        // a rayon worker").
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
            Some(layer) => ops::rms_norm(&x, &layer.norms.attn_in, eps),
            None => return Ok(x),
        };
        for (index, layer) in layers.iter().enumerate() {
            // x += Attention(h); y = FFN(norm(x)); then x += y fused with the next input norm.
            let window = c.layer_windows.get(index).copied().flatten();
            let pass = LayerPass {
                config: c,
                index,
                rope: self.rope.for_layer(window),
                dense: &dense,
                mla_path: self.mla_path,
            };
            let y = layer.forward(&pass, &mut x, &h, pool, seqs)?;
            match layers.get(index + 1) {
                Some(next) => h = ops::add_rms_norm(&mut x, &y, &next.norms.attn_in, eps),
                None => ops::add_assign(&mut x, &y),
            }
        }
        Ok(x)
    }
}

/// Logits of the last position as a `Vec<f32>` (for sampling and comparisons).
pub fn logits_vec(logits: &Tensor) -> Result<Vec<f32>> {
    logits.to_dtype(DType::F32)?.flatten_all()?.to_vec1()
}

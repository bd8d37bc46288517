//! Perplexity of a text under the model, chunked and scored as llama.cpp's `llama-perplexity`
//! does (tools/perplexity/perplexity.cpp), so the numbers compare:
//!
//! - the text is tokenized once; it is cut into `n_chunk = tokens / ctx_size` chunks of
//!   `ctx_size` tokens (a shorter tail is dropped); when the tokenizer adds a BOS, each
//!   chunk's first token is replaced by BOS;
//! - each chunk runs through the model from an empty KV cache in one forward pass;
//! - only the second half is scored: positions `first = ctx_size / 2 .. ctx_size − 2` predict
//!   tokens `first + 1 .. ctx_size − 1`, `ctx_size − 1 − first` tokens per chunk;
//! - `PPL = exp(mean NLL)` over every scored token so far (the running value is printed per
//!   chunk), with llama.cpp's uncertainty `PPL · sqrt((⟨nll²⟩ − ⟨nll⟩²) / (N − 1))`.
//!
//! The KV cache is the engine's paged pool in the requested dtype: every layer reads K and V
//! back from the pool (the rows of this forward pass included), so the dtype's rounding
//! reaches the logits.
use crate::kv::KvCache;
use crate::model::Decoder;
use anyhow::{bail, Result};

/// How the text is cut and scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPlan {
    /// Tokens per chunk (`--ctx-size`).
    pub ctx_size: usize,
    /// Chunks to score.
    pub chunks: usize,
}

impl ChunkPlan {
    /// `tokens / ctx_size` chunks (at most `max_chunks`), as llama.cpp.
    ///
    /// Errors: `ctx_size` below 4 or above the model's context window, `max_chunks` 0
    /// ([`ChunkPlan::check_flags`], naming the flag), or a text shorter than one chunk (named
    /// by `text`, e.g. `--file notes.txt`); each message gives the numbers.
    pub fn new(
        tokens: usize,
        ctx_size: usize,
        max_chunks: Option<usize>,
        context_window: usize,
        text: &str,
    ) -> Result<ChunkPlan> {
        Self::check_flags(ctx_size, max_chunks, context_window)?;
        let available = tokens / ctx_size;
        if available == 0 {
            bail!("{text}: the text has {tokens} tokens, fewer than one chunk of --ctx-size {ctx_size}");
        }
        Ok(ChunkPlan {
            ctx_size,
            chunks: max_chunks.map_or(available, |m| m.min(available)),
        })
    }

    /// The checks of [`ChunkPlan::new`] that concern the flags alone (`--ctx-size` at least 4
    /// and at most `context_window` tokens, `--chunks` at least 1), to run before the text is
    /// read or the model loaded (pass `usize::MAX` for a window not known yet).
    ///
    /// Errors: one line naming the flag.
    pub fn check_flags(
        ctx_size: usize,
        max_chunks: Option<usize>,
        context_window: usize,
    ) -> Result<()> {
        if ctx_size < 4 {
            bail!("--ctx-size {ctx_size}: expected at least 4 tokens");
        }
        if ctx_size > context_window {
            bail!("--ctx-size {ctx_size}: larger than the model's context window of {context_window} tokens");
        }
        if max_chunks == Some(0) {
            bail!("--chunks 0: expected at least 1");
        }
        Ok(())
    }

    /// First scored position of a chunk: `ctx_size / 2`.
    pub fn first(&self) -> usize {
        self.ctx_size / 2
    }

    /// Tokens scored per chunk: `ctx_size − 1 − first`.
    pub fn scored_per_chunk(&self) -> usize {
        self.ctx_size - 1 - self.first()
    }
}

/// `log_softmax(logits)`, in f64 for the sum: `x − max − ln Σ exp(x − max)`.
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&x| ((x - max) as f64).exp()).sum();
    let log_sum = sum.ln() as f32;
    logits.iter().map(|&x| x - max - log_sum).collect()
}

/// One scored chunk: for each scored position, the log-probabilities of the whole vocabulary
/// and the token that came next.
#[derive(Debug, Clone)]
pub struct ScoredChunk {
    /// `[scored, vocab]` log-probabilities, row-major.
    pub log_probs: Vec<f32>,
    /// The next token of each scored position.
    pub targets: Vec<u32>,
    /// Vocabulary size.
    pub vocab: usize,
}

impl ScoredChunk {
    /// Negative log-likelihood of each target, `−log p(target)`.
    pub fn nll(&self) -> Vec<f64> {
        self.targets
            .iter()
            .enumerate()
            .map(|(i, &t)| -(self.log_probs[i * self.vocab + t as usize] as f64))
            .collect()
    }
}

/// Run chunk `index` of `tokens` through the decoder and return its scored half.
///
/// `bos`: the BOS id that replaces each chunk's first token (llama.cpp does so when the
/// tokenizer adds one). `cache` is cleared first and left empty.
///
/// Errors: forward-pass failures.
pub fn score_chunk(
    decoder: &Decoder,
    cache: &mut KvCache,
    tokens: &[u32],
    plan: ChunkPlan,
    index: usize,
    bos: Option<u32>,
) -> Result<ScoredChunk> {
    let n = plan.ctx_size;
    let mut chunk = tokens[index * n..(index + 1) * n].to_vec();
    if let Some(b) = bos {
        chunk[0] = b;
    }
    cache.clear();
    let first = plan.first();
    // Every position is a prompt position: dense prefill kernels, dense LM head.
    let logits = decoder.forward_logits(&chunk, 0, n, cache, first)?;
    cache.clear();
    let vocab = logits.len() / (n - first);
    let scored = plan.scored_per_chunk();
    let mut log_probs = Vec::with_capacity(scored * vocab);
    for row in logits.chunks_exact(vocab).take(scored) {
        log_probs.extend(log_softmax(row));
    }
    Ok(ScoredChunk {
        log_probs,
        targets: chunk[first + 1..n].to_vec(),
        vocab,
    })
}

/// Perplexity and llama.cpp's uncertainty from per-token NLLs: `(PPL, ±)`.
pub fn perplexity(nll: &[f64]) -> (f64, f64) {
    let n = nll.len() as f64;
    if nll.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mean = nll.iter().sum::<f64>() / n;
    let mean2 = nll.iter().map(|x| x * x).sum::<f64>() / n;
    let ppl = mean.exp();
    let err = if nll.len() > 1 {
        ppl * ((mean2 - mean * mean).max(0.0) / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (ppl, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_follow_llama_perplexity() -> Result<()> {
        // 2,262 tokens at 512: 4 chunks, positions 256..=510 scored (255 per chunk).
        let p = ChunkPlan::new(2262, 512, None, 8192, "t")?;
        assert_eq!((p.chunks, p.first(), p.scored_per_chunk()), (4, 256, 255));
        assert_eq!(ChunkPlan::new(2262, 512, Some(2), 8192, "t")?.chunks, 2);
        assert!(ChunkPlan::new(100, 512, None, 8192, "t").is_err());
        assert!(ChunkPlan::new(2262, 9000, None, 8192, "t").is_err());
        assert!(ChunkPlan::new(2262, 2, None, 8192, "t").is_err());
        Ok(())
    }

    #[test]
    fn log_softmax_normalises() {
        let lp = log_softmax(&[1.0, 2.0, 3.0, 1000.0]);
        let total: f64 = lp.iter().map(|&x| (x as f64).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert!(lp[3].abs() < 1e-6);
    }

    /// Uniform guesses over V tokens have perplexity V.
    #[test]
    fn uniform_perplexity_is_the_vocabulary() {
        let nll = vec![(50f64).ln(); 10];
        let (ppl, err) = perplexity(&nll);
        assert!(
            (ppl - 50.0).abs() < 1e-9 && err.abs() < 1e-5,
            "{ppl} ± {err}"
        );
    }
}

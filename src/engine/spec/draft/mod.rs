//! Draft-model speculation (`--spec draft --draft-model FILE`): a smaller model with the
//! same vocabulary proposes `k` tokens one at a time from its own KV cache; the target
//! verifies them in one multi-row step. Greedy drafts are the draft model's argmax and are
//! verified by equality (speculative == plain, bit for bit); sampled drafts are drawn from
//! the draft model's own distribution `q` under the request's sampling settings and kept by
//! rejection sampling (Leviathan et al. 2023), so the tokens follow the target's.
//!
//! The draft's KV cache lags the target's: each drafting step first runs the tokens the
//! draft has not seen (the prompt on a sequence's first draft, the target's accepted tokens
//! after a verify step), then one row per draft. After verification it is cut back to the
//! rows whose tokens the target kept, so it never holds a rejected token.
pub mod check;

use crate::engine::sampling::rejection::{distribution, DraftRng};
use crate::engine::sampling::{argmax, means_argmax, SamplingParams};
use crate::kv::{BlockTable, KvPool};
use crate::model::{Decoder, SeqChunk};
use anyhow::{Context, Result};

pub use check::check_compatible;

/// Most tokens a catch-up pass runs at once (as `generate`'s prefill chunks): a long prompt
/// the draft has not seen runs in chunks of this many rows.
pub const CATCH_UP_CHUNK: usize = 512;

/// Most generated tokens a catch-up runs on the decode kernels, as the target ran them (R1),
/// so a draft that is the model itself proposes exactly the target's tokens. A longer
/// stretch (the draft missed it while the turn-down rule kept it idle) runs on the prompt
/// kernels, as a prefill: its K/V then differ from decode rows by rounding, which can change
/// a proposal but never the output (the target verifies every draft), and it costs a
/// fraction of one decode row per token instead of a decode row each.
pub const DECODE_CATCH_UP: usize = 8;

/// One sequence's draft-side state: its block table in the draft model's pool and the
/// generator its sampled drafts and their accept/reject draws come from.
#[derive(Debug)]
pub struct DraftSeq {
    /// The draft model's K/V rows for the sequence's first `table.len()` tokens.
    pub table: BlockTable,
    /// Draws for sampled drafts and for rejection sampling.
    pub rng: DraftRng,
}

impl DraftSeq {
    /// An empty draft cache for a request sampled with `seed`.
    pub fn new(seed: u64) -> DraftSeq {
        DraftSeq {
            table: BlockTable::new(),
            rng: DraftRng::new(seed),
        }
    }

    /// Keep only the first `len` rows (the tokens the target kept), giving blocks past them
    /// back to `pool`.
    pub fn cut(&mut self, pool: &mut KvPool, len: usize) {
        self.table.truncate(pool, len);
    }
}

/// Bytes a decode step of `model` reads from its weights: every matrix once (quantized
/// blocks or candle's), the norms and biases; not the dense prefill copy, nor the embedding
/// table (one row a token). The turn-down rule's price of a draft round before one is timed.
pub fn decode_bytes(model: &Decoder) -> u64 {
    let w = model.weights_held();
    w.quantized_blocks + w.candle_matrices + w.vectors
}

/// What one sequence asks of a drafting step.
pub struct DraftJob<'a> {
    /// The sequence's tokens (prompt, then generated), the last not yet in any cache.
    pub tokens: &'a [u32],
    /// Prompt tokens at the front of `tokens`.
    pub num_prompt: usize,
    /// Drafts wanted, ≥ 1.
    pub k: usize,
    /// The sequence's draft cache and generator.
    pub state: &'a mut DraftSeq,
    /// The request's sampling settings (greedy: argmax drafts, no `q`).
    pub sampling: &'a SamplingParams,
}

/// What a drafting step did: each sequence's drafts, the time of its drafting rounds (those
/// where every sequence ran at most [`STEADY_FEED`] rows), and apart from them the time of
/// catching up (a round or chunk that ran a longer stretch the draft had not seen: a prompt,
/// tokens missed while the turn-down rule kept it idle).
#[derive(Debug, Clone, Default)]
pub struct DraftOutcome {
    /// Per job, in order.
    pub drafted: Vec<Drafted>,
    /// Drafting rounds.
    pub rounds: usize,
    /// Their time in seconds.
    pub seconds: f64,
    /// Rows run catching up (every row of a catch-up round or chunk).
    pub catch_up_rows: usize,
    /// Their time in seconds.
    pub catch_up_seconds: f64,
}

/// Most rows a sequence feeds in a round that still counts as a drafting round: the
/// target's last accepted draft and its own next token, which a draft that proposed the
/// step before has not seen.
pub const STEADY_FEED: usize = 2;

/// One sequence's drafts: the tokens, and for sampled drafts the distribution each was
/// drawn from (`q[i]`: `[vocab_size]` probabilities; empty for greedy drafts).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Drafted {
    /// The proposed tokens, in order.
    pub tokens: Vec<u32>,
    /// The draft model's distribution at each proposed position (sampled drafts only).
    pub q: Vec<Vec<f32>>,
}

/// Run the draft model for `jobs` as batched forward passes over `pool`: one catch-up pass
/// (with the first draft's logits), then one row per sequence per further draft. A
/// sequence whose cache cannot grow (the pool is full, or it reaches the draft model's
/// context window) gets fewer drafts or none; its cache is then left as it was.
///
/// Errors: a forward-pass failure.
pub fn draft_batch(
    decoder: &Decoder,
    pool: &mut KvPool,
    jobs: &mut [DraftJob],
) -> Result<DraftOutcome> {
    let bs = pool.block_size();
    let context = decoder.config().max_position_embeddings;
    let mut out = vec![Drafted::default(); jobs.len()];
    // Which jobs are still drafting, and the row each feeds next.
    let mut live: Vec<bool> = vec![true; jobs.len()];
    // Per job, the position below which catch-up rows are prompt rows.
    let mut prompt_end: Vec<usize> = jobs.iter().map(|j| j.num_prompt).collect();
    let (mut catch_up_rows, mut catch_up) = (0, std::time::Duration::ZERO);
    for (j, job) in jobs.iter_mut().enumerate() {
        let n = job.tokens.len();
        job.state.cut(pool, n.saturating_sub(1));
        if n == 0 || job.k == 0 || n + job.k > context + 1 {
            live[j] = false;
            continue;
        }
        if n.saturating_sub(job.state.table.len().max(job.num_prompt)) > DECODE_CATCH_UP {
            prompt_end[j] = n - 1;
        }
        // A long unseen stretch runs in chunks first (no logits needed from them).
        while n - job.state.table.len() > CATCH_UP_CHUNK {
            let start = job.state.table.len();
            let end = start + CATCH_UP_CHUNK;
            if job.state.table.reserve(pool, end).is_err() {
                live[j] = false;
                break;
            }
            let chunk = SeqChunk {
                tokens: &job.tokens[start..end],
                start_pos: start,
                prompt_end: prompt_end[j],
                table: &job.state.table,
                logits_from: None,
                observe: None,
                mask: None,
            };
            let t = std::time::Instant::now();
            decoder
                .forward_batch(pool, &[chunk])
                .context("the draft model's forward pass")?;
            catch_up_rows += CATCH_UP_CHUNK;
            catch_up += t.elapsed();
            job.state.table.commit(end, bs);
        }
    }
    let most = jobs.iter().map(|j| j.k).max().unwrap_or(0);
    let (mut rounds, mut steady) = (0, std::time::Duration::ZERO);
    for round in 0..most {
        let t = std::time::Instant::now();
        // Row inputs: the unseen tokens on the first round, then the previous draft.
        let mut feeds: Vec<(usize, Vec<u32>)> = Vec::new();
        for (j, job) in jobs.iter_mut().enumerate() {
            if !live[j] || round >= job.k {
                continue;
            }
            let start = job.state.table.len();
            let feed: Vec<u32> = if round == 0 {
                job.tokens[start..].to_vec()
            } else {
                vec![out[j].tokens[round - 1]]
            };
            if job.state.table.reserve(pool, start + feed.len()).is_err() {
                live[j] = false;
                continue;
            }
            feeds.push((j, feed));
        }
        if feeds.is_empty() {
            break;
        }
        let chunks: Vec<SeqChunk> = feeds
            .iter()
            .map(|(j, feed)| {
                let job = &jobs[*j];
                let start = job.state.table.len();
                SeqChunk {
                    tokens: feed,
                    start_pos: start,
                    prompt_end: prompt_end[*j],
                    table: &job.state.table,
                    logits_from: Some(feed.len() - 1),
                    observe: None,
                    mask: None,
                }
            })
            .collect();
        let logits = decoder
            .forward_batch(pool, &chunks)
            .context("the draft model's forward pass")?;
        drop(chunks);
        for ((j, feed), row) in feeds.iter().zip(logits) {
            let job = &mut jobs[*j];
            let len = job.state.table.len() + feed.len();
            job.state.table.commit(len, bs);
            let greedy = means_argmax(job.sampling);
            let token = if greedy && job.sampling.repeat_penalty == 1.0 {
                argmax(&row)
            } else {
                // What the repeat penalty looks at: the last tokens, this step's drafts too.
                let from = job.tokens.len().saturating_sub(job.sampling.repeat_last_n);
                let mut context = job.tokens[from..].to_vec();
                context.extend_from_slice(&out[*j].tokens);
                let q = distribution(&row, job.sampling, &context);
                if greedy {
                    // The target's pick under its repeat penalty (`q` is one-hot at it);
                    // greedy drafts are checked by equality, so no `q` is kept.
                    argmax(&q)
                } else {
                    let t = job.state.rng.pick(q.iter().map(|&v| v as f64));
                    if t.is_some() {
                        out[*j].q.push(q);
                    }
                    t
                }
            };
            match token {
                Some(t) => out[*j].tokens.push(t),
                None => live[*j] = false,
            }
        }
        if feeds.iter().all(|(_, f)| f.len() <= STEADY_FEED) {
            rounds += 1;
            steady += t.elapsed();
        } else {
            catch_up_rows += feeds.iter().map(|(_, f)| f.len()).sum::<usize>();
            catch_up += t.elapsed();
        }
    }
    Ok(DraftOutcome {
        drafted: out,
        rounds,
        seconds: steady.as_secs_f64(),
        catch_up_rows,
        catch_up_seconds: catch_up.as_secs_f64(),
    })
}

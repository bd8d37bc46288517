//! [`LlmEngine`]: many requests, one engine — continuous batching over the paged block pool,
//! with chunked prefill, automatic prefix caching and recompute preemption (the shape of
//! vLLM's `LLMEngine`: `add_request`, then `step` until every request has finished).
//!
//! Each [`LlmEngine::step`] asks the [`Scheduler`] what to run, runs it as **one** batched
//! forward pass (every weight matrix read once for all rows; each sequence attends through
//! its own block table at its own positions), commits the new rows, samples a token for every
//! sequence whose chunk reached its end, and returns what happened. Sequences join and leave
//! between steps. A sequence's tokens do not depend on what else is in the batch (design rule
//! R1): greedy output is bit-identical to running it alone.
use crate::engine::scheduler::{cache_prompt_blocks, Scheduled, Scheduler};
use crate::engine::sequence::{Detokenizer, Sequence};
use crate::engine::stats::ms;
use crate::engine::{FinishReason, Request, Sampler, StepEvent};
use crate::kv::{BlockTable, KernelClass, KvPool};
use crate::model::{Decoder, SeqChunk, Tokenizer};
use anyhow::{bail, Context, Result};
use std::time::Instant;

pub use crate::engine::scheduler::SchedulerConfig;
pub use crate::engine::step_output::{Finished, SeqEvent, StepOutput, StepRecord};

#[path = "llm_engine_finish.rs"]
mod finish;
#[path = "llm_engine_record.rs"]
mod record;
#[path = "state_sizes.rs"]
mod state_sizes;
pub use record::{FinishedSummary, RECENT_FINISHED, RECENT_STEPS};
pub use state_sizes::StateSizes;

/// How the engine is sized: KV pool, limits, prefix caching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// KV dtype and block size of the pool (every request shares them).
    pub cache: crate::engine::CacheConfig,
    /// Blocks in the pool (the KV budget, `--kv-mem` / block bytes).
    pub num_blocks: usize,
    /// Most tokens one sequence may hold (`--max-model-len`), ≤ the model's context window.
    pub max_model_len: usize,
    /// Queue limits and prefix caching.
    pub scheduler: SchedulerConfig,
    /// The prefix cache's disk tier (`--kv-offload-dir`): opened by [`LlmEngine::new`], so
    /// every engine of a process (bench's runs) starts from what the directory holds.
    /// `'static` so the configuration stays plain `Copy` data: a command leaks this one
    /// small value for its lifetime.
    pub offload: Option<&'static crate::kv::offload::OffloadConfig>,
}

/// Default `--max-num-seqs` (vLLM's default is 256 on GPUs; 2 CPU cores saturate far below).
pub const DEFAULT_MAX_NUM_SEQS: usize = 16;

/// Default `--max-num-batched-tokens`: 128 tokens, a prefill chunk of ~250–300 ms on this
/// project's 2-core machine, so running sequences wait at most that long for their next
/// token while a long prompt arrives.
pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: usize = 128;

/// The batched engine: a decoder, its tokenizer, one KV pool, the scheduler.
pub struct LlmEngine<'m> {
    decoder: &'m Decoder,
    tokenizer: &'m Tokenizer,
    config: EngineConfig,
    pool: KvPool,
    scheduler: Scheduler,
    next_id: usize,
    /// Every step so far, while [`LlmEngine::keep_steps`] is on (the default: run-batch and
    /// bench report them); a server turns it off, or this would grow with its uptime.
    pub steps: Vec<StepRecord>,
    /// Whether steps are recorded in [`LlmEngine::steps`].
    keep_steps: bool,
    /// Most blocks in use at once.
    pub peak_blocks_used: usize,
    /// What the engine has done so far, for `serve`'s page and `--trace`.
    record: record::Record,
}

impl<'m> LlmEngine<'m> {
    /// An engine with an empty pool of `config.num_blocks` blocks (address space reserved
    /// now, memory used block by block).
    ///
    /// Errors: a block size or dtype the pool refuses, no block, `max_num_seqs` or
    /// `max_num_batched_tokens` of 0, `max_model_len` of 0 or beyond the model's context
    /// window, or a pool too small for one sequence of `max_model_len` tokens.
    pub fn new(
        decoder: &'m Decoder,
        tokenizer: &'m Tokenizer,
        config: EngineConfig,
    ) -> Result<LlmEngine<'m>> {
        let context = decoder.config().max_position_embeddings;
        if config.scheduler.max_num_seqs == 0 {
            bail!("--max-num-seqs 0: must be at least 1");
        }
        if config.scheduler.max_num_batched_tokens == 0 {
            bail!("--max-num-batched-tokens 0: must be at least 1");
        }
        if config.max_model_len == 0 || config.max_model_len > context {
            bail!(
                "--max-model-len {}: must be 1 to the model's context window of {context} tokens",
                config.max_model_len
            );
        }
        let shape = decoder.config().kv_shape(config.cache.dtype);
        let groups = decoder.config().kv_groups(config.cache.swa_full);
        let need = groups.max_blocks_for(
            config.max_model_len,
            config.scheduler.max_num_batched_tokens,
            config.cache.block_size,
        );
        let mut pool =
            KvPool::with_groups(shape, groups, config.cache.block_size, config.num_blocks)?;
        if let Some(offload) = config.offload {
            if !config.scheduler.enable_prefix_caching {
                bail!("--kv-offload-dir is a tier of the prefix cache: drop --no-enable-prefix-caching");
            }
            let tier = crate::kv::offload::OffloadTier::open(
                offload,
                pool.block_bytes(),
                pool.block_size(),
            )?;
            pool.set_offload(tier);
        }
        if need > config.num_blocks {
            bail!(
                "the KV budget holds {} of {} tokens ({} tokens, {}), less than one sequence of --max-model-len {} tokens needs ({need} blocks): raise --kv-mem or lower --max-model-len",
                crate::units::count_of(config.num_blocks, "block"),
                config.cache.block_size,
                config.num_blocks * config.cache.block_size,
                crate::units::human_bytes(config.num_blocks as u64 * pool.block_bytes() as u64),
                config.max_model_len
            );
        }
        Ok(LlmEngine {
            decoder,
            tokenizer,
            config,
            pool,
            scheduler: Scheduler::default(),
            next_id: 0,
            steps: Vec::new(),
            keep_steps: true,
            peak_blocks_used: 0,
            record: record::Record::default(),
        })
    }

    /// Record each step in [`LlmEngine::steps`] (`true`, the default) or not (`false`, for a
    /// long-running server: 48 bytes a step, hundreds of steps a second). Turning it off
    /// drops the steps kept so far.
    pub fn keep_steps(&mut self, on: bool) {
        self.keep_steps = on;
        if !on {
            self.steps = Vec::new();
        }
    }

    /// The waiting and running queues (for [`crate::engine::snapshot`]).
    pub(crate) fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// The engine's configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The block pool (for figures: blocks used, cached, allocated bytes).
    pub fn pool(&self) -> &KvPool {
        &self.pool
    }

    /// Prompt tokens looked up in the prefix cache, and served by its pool (vLLM's
    /// `prefix_cache_queries` / `prefix_cache_hits`, in tokens; disk-tier hits are
    /// [`Self::prefix_disk_hits`]).
    pub fn prefix_cache_counters(&self) -> (u64, u64) {
        (
            self.scheduler.prefix_queries_tokens,
            self.scheduler.prefix_hits_tokens,
        )
    }

    /// Prompt tokens read back from the disk tier at first admissions (vLLM's
    /// `external_prefix_cache_hits`); 0 without `--kv-offload-dir`.
    pub fn prefix_disk_hits(&self) -> u64 {
        self.scheduler.prefix_disk_hits_tokens
    }

    /// The disk tier's counters, when the engine has one.
    pub fn offload_stats(&self) -> Option<crate::kv::offload::OffloadStats> {
        self.pool.offload().map(|t| t.stats())
    }

    /// Wait until every block handed to the disk tier is written (a server's shutdown, so a
    /// restart finds them). A no-op without a tier.
    pub fn flush_offload(&self) {
        if let Some(t) = self.pool.offload() {
            t.flush();
        }
    }

    /// Preemptions so far.
    pub fn preemptions(&self) -> u64 {
        self.scheduler.preemptions
    }

    /// Sequences waiting and running.
    pub fn num_unfinished(&self) -> usize {
        self.scheduler.waiting.len() + self.scheduler.running.len()
    }

    /// True when nothing waits and every running sequence has produced a token (all are
    /// decoding): when a benchmark's late request should arrive.
    pub fn all_decoding(&self) -> bool {
        self.scheduler.waiting.is_empty()
            && self.scheduler.running.iter().all(|s| s.num_generated() > 0)
    }

    /// Per running sequence: its id, the tokens it has computed, and the blocks it holds in
    /// each layer group of the pool (in [`KvPool::groups`] order; one group unless the model
    /// is hybrid).
    pub fn blocks_held(&self) -> Vec<(usize, usize, Vec<usize>)> {
        let groups = self.pool.groups().groups.len();
        self.scheduler
            .running
            .iter()
            .map(|s| {
                let held = (0..groups).map(|g| s.table.num_blocks_in(g)).collect();
                (s.id, s.num_computed(), held)
            })
            .collect()
    }

    /// (running, waiting) sequences.
    pub fn queue_lengths(&self) -> (usize, usize) {
        (self.scheduler.running.len(), self.scheduler.waiting.len())
    }

    /// Queue `request` (KV-cached decode; its `cache` settings are the engine's); returns its
    /// sequence id. It runs from the next [`Self::step`] on, as the budget allows.
    ///
    /// Errors: an empty prompt, `max_new_tokens` = 0, a prompt or stop token id outside the
    /// vocabulary, a prompt of `--max-model-len` tokens or more, invalid sampling settings, or a request
    /// whose prompt plus `max_new_tokens` (capped at `--max-model-len`) cannot fit in the
    /// KV pool even alone.
    pub fn add_request(&mut self, request: Request) -> Result<usize> {
        let c = self.decoder.config();
        let p = request.prompt_ids.len();
        if p == 0 {
            bail!("the prompt is empty (0 tokens)");
        }
        if request.max_new_tokens == 0 {
            bail!("max_new_tokens must be at least 1");
        }
        if let Some(bad) = request
            .prompt_ids
            .iter()
            .find(|&&t| t as usize >= c.vocab_size)
        {
            bail!(
                "prompt: token id {bad} is outside the vocabulary of {}",
                c.vocab_size
            );
        }
        if let Some(bad) = request
            .stop_token_ids
            .iter()
            .find(|&&t| t as usize >= c.vocab_size)
        {
            bail!(
                "stop_token_ids: {bad} is outside the vocabulary of {}",
                c.vocab_size
            );
        }
        let max_len = self.config.max_model_len;
        if p >= max_len {
            bail!("the prompt is {p} tokens, which does not fit --max-model-len {max_len} (the prompt and at least one generated token)");
        }
        request.sampling.validate()?;
        let most = p.saturating_add(request.max_new_tokens).min(max_len);
        let need = self.pool.groups().max_blocks_for(
            most,
            self.config.scheduler.max_num_batched_tokens,
            self.pool.block_size(),
        );
        if need > self.pool.max_blocks() {
            bail!(
                "the request needs {need} KV blocks ({most} tokens) but the pool has {}: it cannot run even alone; raise --kv-mem",
                self.pool.max_blocks()
            );
        }
        let id = self.next_id;
        self.next_id += 1;
        self.record.queued(id, p);
        self.scheduler.waiting.push_back(Sequence {
            id,
            tokens: request.prompt_ids.clone(),
            num_prompt: p,
            prompt_class: if self.decoder.prompt_is_dense(p) {
                KernelClass::Prompt
            } else {
                KernelClass::QuantizedPrompt
            },
            table: BlockTable::new(),
            block_hashes: Vec::new(),
            sampler: Sampler::new(&request.sampling),
            detok: Detokenizer::new(self.tokenizer, &request),
            text: String::new(),
            steps: Vec::new(),
            arrival: Instant::now(),
            first_scheduled: None,
            token_times: Vec::new(),
            cached_prompt_tokens: 0,
            preemptions: 0,
            peak_blocks: 0,
            prefill_chunks: 0,
            request,
        });
        Ok(id)
    }

    /// Run one step: schedule, one batched forward pass, sample. `interrupted` (Ctrl-C) ends
    /// every sequence that samples a token this step; see also [`Self::abort_all`].
    ///
    /// A request whose logits cannot be sampled (NaN from an overflow) ends alone, with
    /// [`FinishReason::Error`] and the reason in [`Finished::error`]; the others go on.
    ///
    /// Errors: a forward-pass failure (the engine should then be dropped).
    pub fn step(&mut self, interrupted: bool) -> Result<StepOutput> {
        let t0 = Instant::now();
        let plan = self
            .scheduler
            .schedule(&self.config.scheduler, &mut self.pool);
        let mut out = StepOutput::default();
        if plan.is_empty() {
            return Ok(out);
        }
        let t1 = Instant::now();
        self.record.scheduled(&self.scheduler, t1);
        let (prefill_seqs, prefill_tokens) = plan
            .iter()
            .filter(|s| self.scheduler.running[s.index].is_prefill(s.tokens))
            .fold((0, 0), |(n, t), s| (n + 1, t + s.tokens));
        let logits = self.forward(&plan)?;
        let t2 = Instant::now();
        self.record.chunks(
            &mut self.scheduler.running,
            &plan,
            &self.config.scheduler,
            t0,
            t2,
        );
        let vocab = self.decoder.config().vocab_size;
        // (index in running, why it ends, the error of one that failed alone)
        let mut done: Vec<(usize, FinishReason, Option<String>)> = Vec::new();
        for (s, logits) in plan.iter().zip(logits) {
            let seq = &mut self.scheduler.running[s.index];
            let new_len = seq.num_computed() + s.tokens;
            seq.table.commit(new_len, self.pool.block_size());
            seq.peak_blocks = seq.peak_blocks.max(seq.table.num_blocks());
            // With prefix caching off nothing is cached, so a freed block goes back to the
            // free list (cached ones stayed evictable and every request materialized a new
            // block: ~1 block of resident memory per request).
            if self.config.scheduler.enable_prefix_caching {
                cache_prompt_blocks(seq, &mut self.pool);
            }
            // Sliding-window groups give back the blocks their next token no longer reads
            // (a cached prompt block stays cached, evictable).
            seq.table.drop_out_of_window(&mut self.pool);
            if logits.len() != vocab {
                continue; // a prefill chunk before the prompt's end
            }
            // A request whose logits cannot be sampled fails alone; the batch goes on.
            let token = match seq.sampler.sample_vec(logits, &seq.tokens) {
                Ok(t) => t,
                Err(e) => {
                    done.push((s.index, FinishReason::Error, Some(format!("{e:#}"))));
                    continue;
                }
            };
            let now = seq.arrival.elapsed();
            let latency = now - seq.token_times.last().copied().unwrap_or_default();
            seq.token_times.push(now);
            seq.tokens.push(token);
            let (delta, finish) = seq.detok.push(
                self.tokenizer,
                token,
                seq.num_generated(),
                seq.tokens.len(),
                self.config.max_model_len,
                interrupted,
            )?;
            seq.text.push_str(&delta);
            let step = StepEvent {
                index: seq.num_generated() - 1,
                token_id: token,
                text_delta: delta,
                position: seq.tokens.len() - 1,
                latency_ms: ms(latency),
                elapsed_ms: ms(now),
            };
            if seq.num_generated() == 1 {
                self.record.first_token(seq.id);
            }
            seq.steps.push(step.clone());
            out.events.push(SeqEvent {
                seq_id: seq.id,
                step,
            });
            if let Some(reason) = finish {
                done.push((s.index, reason, None));
            }
        }
        // The step's peak: every block written this step is still held here.
        let used = self.pool.num_used_blocks();
        self.peak_blocks_used = self.peak_blocks_used.max(used);
        // Remove finished sequences (highest index first keeps the others' indices valid).
        done.sort_by_key(|d| std::cmp::Reverse(d.0));
        for (index, reason, error) in done {
            let seq = self.scheduler.running.remove(index);
            let mut f = self.finish(seq, reason);
            f.error = error;
            out.finished.push(f);
        }
        out.finished.sort_by_key(|f| f.seq_id);
        let t3 = Instant::now();
        let record = StepRecord {
            step: self.record.steps_run + 1,
            batch_size: plan.len(),
            decode_seqs: plan.len() - prefill_seqs,
            tokens: plan.iter().map(|s| s.tokens).sum(),
            prefill_tokens,
            ms: ms(t3 - t0),
            schedule_ms: ms(t1 - t0),
            forward_ms: ms(t2 - t1),
            sample_ms: ms(t3 - t2),
            blocks_used: used,
            blocks_cached: self.pool.num_cached_free_blocks(),
        };
        self.record
            .step(&record, &self.pool, [t0, t1, t2, t3], out.events.len());
        if self.keep_steps {
            self.steps.push(record);
        }
        Ok(out)
    }

    /// The batched forward pass for `plan`; per scheduled sequence, the logits of its last
    /// row when its chunk reaches the end of its tokens (else empty).
    fn forward(&mut self, plan: &[Scheduled]) -> Result<Vec<Vec<f32>>> {
        let running = &self.scheduler.running;
        let chunks: Vec<SeqChunk> = plan
            .iter()
            .map(|s| {
                let seq = &running[s.index];
                let start = seq.num_computed();
                let end = start + s.tokens;
                SeqChunk {
                    tokens: &seq.tokens[start..end],
                    start_pos: start,
                    prompt_end: seq.num_prompt,
                    table: &seq.table,
                    logits_from: (end == seq.tokens.len()).then_some(s.tokens - 1),
                }
            })
            .collect();
        self.decoder
            .forward_batch(&mut self.pool, &chunks)
            .context("batched forward pass")
    }
}

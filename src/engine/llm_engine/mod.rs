//! [`LlmEngine`]: many requests, one engine — continuous batching over the paged block pool,
//! with chunked prefill, automatic prefix caching and recompute preemption (the shape of
//! vLLM's `LLMEngine`: `add_request`, then `step` until every request has finished).
//!
//! Files: `config` (sizing), `step` (schedule → forward → postprocess), `finish` (ending and
//! aborting requests), `record` (what the page and `--trace` show), `state_sizes`.
//!
//! Each [`LlmEngine::step`] asks the [`Scheduler`] what to run, runs it as **one** batched
//! forward pass (every weight matrix read once for all rows; each sequence attends through
//! its own block table at its own positions), commits the new rows, samples a token for every
//! sequence whose chunk reached its end, and returns what happened. Sequences join and leave
//! between steps. A sequence's tokens do not depend on what else is in the batch (design rule
//! R1): greedy output is bit-identical to running it alone.
use crate::engine::accept::Acceptor;
use crate::engine::scheduler::Scheduler;
use crate::engine::sequence::Sequence;
use crate::engine::validate::{check, Limits, RequestError};
use crate::engine::Request;
use crate::kv::{BlockTable, KernelClass, KvPool};
use crate::model::{Decoder, Tokenizer};
use anyhow::{bail, Result};
use std::time::Instant;

pub use crate::engine::scheduler::SchedulerConfig;
pub use crate::engine::step_output::{Finished, SeqEvent, StepOutput, StepRecord};
pub use crate::engine::validate::ValidRequest;

mod config;
mod draft;
mod draft_side;
use crate::engine::spec::VerifyCost;
pub use draft_side::blocks_with_draft;
mod finish;
mod history;
mod record;
mod state_sizes;
mod step;
mod verify;
pub use config::{EngineConfig, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS};
pub use history::{FinishedSummary, RECENT_FINISHED, RECENT_STEPS};
pub use state_sizes::StateSizes;

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
    record: history::Record,
    /// Speculative decoding's counters over every request so far.
    spec_stats: crate::engine::spec::SpecStats,
    /// The draft model and its own KV pool (`--spec draft`), None without one.
    draft: Option<draft_side::DraftSide<'m>>,
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
        Self::with_draft(decoder, None, tokenizer, config)
    }

    /// [`Self::new`] with a draft model for speculation (`--spec draft`): the KV budget
    /// (`config.num_blocks` of the target's blocks) is shared, each draft block paired with a
    /// target block of each of its layer groups, so both caches fit the same bytes.
    ///
    /// Errors: as [`Self::new`], and a draft model whose KV shape the pool refuses.
    pub fn with_draft(
        decoder: &'m Decoder,
        draft: Option<&'m Decoder>,
        tokenizer: &'m Tokenizer,
        mut config: EngineConfig,
    ) -> Result<LlmEngine<'m>> {
        let draft = match draft {
            Some(d) => Some(draft_side::DraftSide::carve(decoder, d, &mut config)?),
            None => None,
        };
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
        crate::engine::evict::check(
            &config.cache,
            draft.is_some() || config.speculative.is_some(),
            decoder.config(),
        )?;
        let shape = decoder.config().kv_shape(config.cache.dtype);
        let groups = decoder.config().kv_groups(config.cache.swa_full);
        let num_groups = groups.groups.len().max(1);
        // With eviction a sequence of --max-model-len tokens holds far fewer rows (a long
        // prompt is checked per request, `validate`): the steady state must fit.
        let rows = config.cache.evict.map_or(config.max_model_len, |e| {
            e.most_rows(0, config.max_model_len)
        });
        let need = groups.max_blocks_holding(
            config.max_model_len,
            rows,
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
                "the KV budget holds {} of {} tokens ({} tokens{}, {}{}), less than one sequence of --max-model-len {} tokens needs ({need} blocks): raise --kv-mem or lower --max-model-len",
                crate::units::count_of(config.num_blocks, "block"),
                config.cache.block_size,
                config.num_blocks * config.cache.block_size / num_groups,
                if num_groups > 1 {
                    format!(" across the model's {num_groups} layer groups")
                } else {
                    String::new()
                },
                crate::units::human_bytes(config.num_blocks as u64 * pool.block_bytes() as u64),
                if draft.is_some() {
                    "; beside them the draft model's KV holds as many tokens"
                } else {
                    ""
                },
                config.max_model_len
            );
        }
        Ok(LlmEngine {
            decoder,
            tokenizer,
            config,
            pool,
            scheduler: Scheduler {
                max_model_len: config.max_model_len,
                verify_cost: VerifyCost::for_draft(decoder, draft.as_ref().map(|d| d.decoder)),
                ..Scheduler::default()
            },
            next_id: 0,
            steps: Vec::new(),
            keep_steps: true,
            peak_blocks_used: 0,
            record: history::Record::default(),
            spec_stats: Default::default(),
            draft,
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

    /// Speculative decoding's counters over every request so far (zero while it is off).
    pub fn spec_stats(&self) -> &crate::engine::spec::SpecStats {
        &self.spec_stats
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

    /// Check `request` once against this engine: [`check`] under `--max-model-len` and the
    /// model's vocabulary, then whether the KV pool can hold it even alone (prompt plus
    /// `max_new_tokens`, capped at `--max-model-len`). `max_tokens_given`: the client set
    /// `max_new_tokens` itself, so past `--max-model-len` it is refused rather than capped.
    ///
    /// Errors: what [`check`] refuses, or [`RequestError::PoolTooSmall`].
    pub fn validate(
        &self,
        request: Request,
        max_tokens_given: bool,
    ) -> Result<ValidRequest, RequestError> {
        let max_len = self.config.max_model_len;
        let limits = Limits {
            max_len,
            vocab_size: self.decoder.config().vocab_size,
            refuse_past_max_len: max_tokens_given,
        };
        check(&request, &limits)?;
        let spec = request
            .speculative
            .resolve(self.config.speculative.as_ref());
        if spec.is_some_and(|s| s.uses_draft_model()) && self.draft.is_none() {
            return Err(RequestError::NoDraftModel);
        }
        if spec.is_some() && self.config.cache.evict.is_some() {
            return Err(RequestError::SpecWithEviction);
        }
        let most = request
            .prompt_ids
            .len()
            .saturating_add(request.max_new_tokens)
            .min(max_len);
        // An evicting sequence holds its prompt, then the budget and `every` rows.
        let rows = self
            .config
            .cache
            .evict
            .map_or(most, |e| e.most_rows(request.prompt_ids.len(), most));
        let need = self.pool.groups().max_blocks_holding(
            most,
            rows,
            self.config.scheduler.max_num_batched_tokens,
            self.pool.block_size(),
        );
        if need > self.pool.max_blocks() {
            return Err(RequestError::PoolTooSmall {
                need,
                tokens: most,
                pool: self.pool.max_blocks(),
            });
        }
        Ok(ValidRequest(request))
    }

    /// Queue `request` (KV-cached decode; its `cache` settings are the engine's); returns its
    /// sequence id. It runs from the next [`Self::step`] on, as the budget allows.
    ///
    /// Errors: what [`Self::validate`] refuses (a `max_new_tokens` past `--max-model-len`
    /// is capped, not refused).
    pub fn add_request(&mut self, request: Request) -> Result<usize, RequestError> {
        let valid = self.validate(request, false)?;
        Ok(self.add(valid))
    }

    /// Queue a request [`Self::validate`] accepted; returns its sequence id.
    pub fn add(&mut self, valid: ValidRequest) -> usize {
        let ValidRequest(request) = valid;
        let p = request.prompt_ids.len();
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
            output: Acceptor::new(self.tokenizer, &request),
            arrival: Instant::now(),
            first_scheduled: None,
            cached_prompt_tokens: 0,
            preemptions: 0,
            peak_blocks: 0,
            prefill_chunks: 0,
            num_drafts: 0,
            spec: Default::default(),
            speculative: request
                .speculative
                .resolve(self.config.speculative.as_ref()),
            acceptance: Default::default(),
            draft: None,
            draft_next: Default::default(),
            draft_q: Vec::new(),
            evict: self.config.cache.evict.map(|e| {
                let c = self.decoder.config();
                crate::kv::evict::EvictState::new(
                    e,
                    p,
                    c.num_hidden_layers,
                    c.num_attention_heads,
                    c.num_key_value_heads,
                )
            }),
            request,
        });
        id
    }
}

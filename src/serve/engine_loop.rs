//! The engine thread of `nanollm serve`: it alone owns the model, the KV pool and the
//! compute threads. The HTTP side sends it [`Command`]s over a channel and gets each
//! request's tokens back on that request's own channel; between two engine steps new
//! requests join the running batch and requests whose client went away are aborted (their
//! blocks go back to the pool).
use crate::engine::llm_engine::{Finished, LlmEngine, ValidRequest};
use crate::engine::validate::RequestError;
use crate::engine::{DecodeMode, Request, StepEvent};
use crate::openai::{ApiError, Body, PromptInput};
use crate::serve::metrics::Metrics;
use crate::serve::observer::{Observer, PUBLISH_INTERVAL};
use axum::http::StatusCode;
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// What the HTTP side asks of the engine thread.
pub enum Command {
    /// Queue a request.
    Submit(Box<Submission>),
    /// The engine's state now (`/v1/state`, a state stream's first event).
    State(oneshot::Sender<crate::serve::observer::Built>),
    /// Stop: abort every request (each gets its `Done`), then end the thread.
    Shutdown,
}

/// One request from a client.
pub struct Submission {
    /// The parsed body.
    pub body: Body,
    /// The prompt's token ids ([`crate::serve::prompt::prompt_ids`], computed on the HTTP
    /// side).
    pub prompt_ids: Vec<u32>,
    /// `max_tokens` when the body sets none: 16 for `/v1/completions` (OpenAI's default),
    /// `None` for chat (up to the context window, as vLLM).
    pub default_max_tokens: Option<usize>,
    /// When the HTTP side received it (server-side TTFT counts from here).
    pub received: Instant,
    /// The request's tokens and its end.
    pub events: mpsc::UnboundedSender<SeqMsg>,
    /// The engine's answer: admitted (with its figures) or refused.
    pub admitted: oneshot::Sender<Result<Admitted, ApiError>>,
}

/// A request the engine accepted.
#[derive(Debug, Clone, Copy)]
pub struct Admitted {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Most tokens it may generate.
    pub max_tokens: usize,
    /// The sampling seed (drawn when the body set none and samples).
    pub seed: u64,
}

/// What the engine sends on a request's channel.
pub enum SeqMsg {
    /// A sampled token and the text it completed.
    Token(StepEvent),
    /// The request ended (its whole text, finish reason, stats, cached prompt tokens).
    Done(Box<Finished>),
}

/// The engine side of one admitted request.
struct Live {
    events: mpsc::UnboundedSender<SeqMsg>,
    received: Instant,
    last_token: Option<Instant>,
}

/// Engine-thread settings.
pub struct LoopConfig {
    /// Requests that may wait for a slot; one more gets 429.
    pub max_waiting: usize,
    /// Where the state routes get the engine's state.
    pub observer: Arc<Observer>,
    /// `--trace`: where each step's events go (the engine records them when set).
    pub trace: Option<crate::trace::TraceSender>,
}

/// Run the engine until [`Command::Shutdown`] or until every sender is gone.
///
/// Errors: a failed engine step (every in-flight request's channel closes; the HTTP side
/// answers 500 for them and 503 afterwards).
pub fn run(
    mut engine: LlmEngine<'_>,
    commands: Receiver<Command>,
    metrics: Arc<Metrics>,
    config: LoopConfig,
) -> anyhow::Result<()> {
    let mut live: HashMap<usize, Live> = HashMap::new();
    let mut counted = Counted::default();
    let mut preempted = 0u64;
    // When the page's streams last got a state, and what the engine had done by then.
    let mut published = (Instant::now(), progress(&engine));
    loop {
        // Idle: sleep until a command comes (the streams get the idle state first).
        if engine.num_unfinished() == 0 {
            publish(&engine, &config.observer, &mut published, Duration::ZERO);
            match commands.recv() {
                Ok(c) => {
                    if !handle(c, &mut engine, &mut live, &config, &metrics) {
                        return Ok(());
                    }
                }
                Err(_) => return Ok(()),
            }
        }
        loop {
            match commands.try_recv() {
                Ok(c) => {
                    if !handle(c, &mut engine, &mut live, &config, &metrics) {
                        for f in engine.abort_all()? {
                            finish(&mut live, &metrics, f);
                        }
                        if let Some(t) = &config.trace {
                            t.send(engine.take_trace());
                        }
                        return Ok(());
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Ok(()),
            }
        }
        // Clients that went away: their sequences end now and free their blocks.
        let gone: Vec<usize> = live
            .iter()
            .filter(|(_, l)| l.events.is_closed())
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            let Some(l) = live.remove(&id) else {
                continue;
            };
            if engine.abort(id)?.is_some() {
                // Every finished request is counted in each series, as vLLM V1 counts an
                // aborted one (e2e_request_latency_seconds_count fell behind
                // request_success_total by one per disconnect).
                metrics.aborted.inc();
                metrics.e2e.observe(l.received.elapsed().as_secs_f64());
                metrics.success.with_label_values(&["abort"]).inc();
            }
        }
        if engine.num_unfinished() > 0 {
            let out = engine.step(false)?;
            let now = Instant::now();
            for ev in out.events {
                let Some(l) = live.get_mut(&ev.seq_id) else {
                    continue;
                };
                match l.last_token {
                    None => metrics.ttft.observe((now - l.received).as_secs_f64()),
                    // A speculative step yields several tokens at once: one gap per step,
                    // as vLLM records it, not zeros for the tokens after the first.
                    Some(t) if t == now => {}
                    Some(t) => metrics.itl.observe((now - t).as_secs_f64()),
                }
                l.last_token = Some(now);
                metrics.generation_tokens.inc();
                let _ = l.events.send(SeqMsg::Token(ev.step));
            }
            // Gauges first, then the responses: a scrape right after a client has read its
            // response must not still show it running or its blocks in use (#43).
            let done: Vec<_> = out
                .finished
                .into_iter()
                .filter_map(|f| record_finish(&mut live, &metrics, f))
                .collect();
            update_gauges(&engine, &metrics, &mut counted, &mut preempted);
            for (to, msg) in done {
                let _ = to.send(msg);
            }
            publish(&engine, &config.observer, &mut published, PUBLISH_INTERVAL);
        } else {
            update_gauges(&engine, &metrics, &mut counted, &mut preempted);
        }
        if let Some(t) = &config.trace {
            t.send(engine.take_trace());
        }
    }
}

/// What the engine has done: steps run, requests added and ended (a state changes only
/// when one of them does).
fn progress(engine: &LlmEngine<'_>) -> (u64, u64, u64) {
    (
        engine.steps_run(),
        engine.requests_added(),
        engine.requests_finished(),
    )
}

/// Hand the engine's state to the open streams when it changed since the last one and
/// `interval` has passed since (nothing is built while no stream is open).
fn publish(
    engine: &LlmEngine<'_>,
    observer: &Observer,
    published: &mut (Instant, (u64, u64, u64)),
    interval: Duration,
) {
    let now = progress(engine);
    if !observer.watching() || now == published.1 || published.0.elapsed() < interval {
        return;
    }
    observer.publish(observer.take(engine));
    *published = (Instant::now(), now);
}

/// What the server's counters have been given so far (they take the engine's totals as
/// increments).
#[derive(Default)]
struct Counted {
    queries: u64,
    hits: u64,
    disk_hits: u64,
    offload: crate::kv::offload::OffloadStats,
    spec: crate::engine::spec::SpecStats,
}

/// The gauges and counters that follow the engine's state: queue lengths, blocks, bytes,
/// the prefix-cache counters and preemptions (`counted` and `preempted`: what was added to
/// the counters so far).
fn update_gauges(
    engine: &LlmEngine<'_>,
    metrics: &Metrics,
    counted: &mut Counted,
    preempted: &mut u64,
) {
    let (running, waiting) = engine.queue_lengths();
    metrics.running.set(running as i64);
    metrics.waiting.set(waiting as i64);
    let pool = engine.pool();
    metrics.blocks_used.set(pool.num_used_blocks() as i64);
    metrics
        .blocks_cached
        .set(pool.num_cached_free_blocks() as i64);
    metrics
        .bytes_allocated
        .set(i64::try_from(pool.bytes_allocated()).unwrap_or(i64::MAX));
    metrics
        .kv_usage
        .set(pool.num_used_blocks() as f64 / pool.max_blocks().max(1) as f64);
    let (bs, block_bytes) = (pool.block_size(), pool.block_bytes() as i64);
    let groups = &pool.groups().groups;
    let (mut full, mut sliding, mut full_cache) = (0i64, 0i64, 0i64);
    for (_, computed, held) in engine.blocks_held() {
        for (g, &h) in groups.iter().zip(&held) {
            match g.window {
                None => full += h as i64 * block_bytes,
                Some(_) => sliding += h as i64 * block_bytes,
            }
        }
        full_cache += (computed.div_ceil(bs) * groups.len()) as i64 * block_bytes;
    }
    metrics.bytes_held.with_label_values(&["full"]).set(full);
    metrics
        .bytes_held
        .with_label_values(&["sliding"])
        .set(sliding);
    metrics.bytes_full_cache.set(full_cache);
    let (queries, hits) = engine.prefix_cache_counters();
    metrics.prefix_queries.inc_by(queries - counted.queries);
    metrics.prefix_hits.inc_by(hits - counted.hits);
    (counted.queries, counted.hits) = (queries, hits);
    if let Some(t) = engine.offload_stats() {
        let hits = engine.prefix_disk_hits();
        metrics
            .offload
            .observe(&t, &mut counted.offload, hits, &mut counted.disk_hits);
    }
    metrics.spec.observe(engine.spec_stats(), &mut counted.spec);
    metrics
        .preemptions
        .inc_by(engine.preemptions() - *preempted);
    *preempted = engine.preemptions();
}

/// Send `f` to its client and record it.
fn finish(live: &mut HashMap<usize, Live>, metrics: &Metrics, f: Finished) {
    if let Some((to, msg)) = record_finish(live, metrics, f) {
        let _ = to.send(msg);
    }
}

/// Record finished request `f` in the metrics and take it out of `live`; returns its
/// client's channel and the message to send it (None for a request no client waits for).
fn record_finish(
    live: &mut HashMap<usize, Live>,
    metrics: &Metrics,
    f: Finished,
) -> Option<(mpsc::UnboundedSender<SeqMsg>, SeqMsg)> {
    let l = live.remove(&f.seq_id)?;
    if let Some(e) = &f.error {
        eprintln!("request {} failed: {e}", f.seq_id);
    }
    metrics.e2e.observe(l.received.elapsed().as_secs_f64());
    metrics
        .success
        .with_label_values(&[crate::serve::response::finish_reason(
            f.generation.finish_reason,
        )])
        .inc();
    Some((l.events, SeqMsg::Done(Box::new(f))))
}

/// Handle one command; false on shutdown.
fn handle(
    c: Command,
    engine: &mut LlmEngine<'_>,
    live: &mut HashMap<usize, Live>,
    config: &LoopConfig,
    metrics: &Metrics,
) -> bool {
    let s = match c {
        Command::Shutdown => return false,
        Command::State(to) => {
            let _ = to.send(config.observer.take(engine));
            return true;
        }
        Command::Submit(s) => s,
    };
    let Submission {
        body,
        prompt_ids,
        default_max_tokens,
        received,
        events,
        admitted,
    } = *s;
    if events.is_closed() {
        return true; // the client left while it waited in the channel
    }
    let answer = admit(engine, &body, prompt_ids, default_max_tokens, config)
        .map(|(valid, figures)| (engine.add(valid), figures));
    match answer {
        Ok((id, figures)) => {
            metrics.prompt_tokens.inc_by(figures.prompt_tokens as u64);
            live.insert(
                id,
                Live {
                    events,
                    received,
                    last_token: None,
                },
            );
            if admitted.send(Ok(figures)).is_err() {
                // The handler is gone already: the next step's sweep aborts it.
            }
        }
        Err(e) => {
            let _ = admitted.send(Err(e));
        }
    }
    true
}

/// Size a request; refuse what cannot run (a full waiting queue, then what
/// [`LlmEngine::validate`] refuses: a prompt or max_tokens beyond the context, token ids
/// outside the vocabulary, a request the KV pool cannot hold).
fn admit(
    engine: &LlmEngine<'_>,
    body: &Body,
    prompt_ids: Vec<u32>,
    default_max_tokens: Option<usize>,
    config: &LoopConfig,
) -> Result<(ValidRequest, Admitted), ApiError> {
    // Requests admitted since the last step wait in the engine's queue until the next
    // one, though free slots take them then: only those beyond the free slots wait.
    let (running, waiting) = engine.queue_lengths();
    let free = engine
        .config()
        .scheduler
        .max_num_seqs
        .saturating_sub(running);
    let waiting = waiting.saturating_sub(free);
    if waiting >= config.max_waiting {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            format!("the server's waiting queue is full ({waiting} waiting for a slot, --max-waiting-requests {}): retry later", config.max_waiting),
        )
        .with_code("queue_full"));
    }
    let max_len = engine.config().max_model_len;
    let p = prompt_ids.len();
    let given = body.max_tokens.or(default_max_tokens);
    let max_tokens = match given {
        Some(m) => m,
        // Chat without max_tokens: the rest of the context, as far as the KV pool can hold
        // this sequence alone.
        None => {
            let pool = engine.pool();
            let room = max_len.min(pool.max_blocks().saturating_mul(pool.block_size()));
            room.saturating_sub(p).max(1)
        }
    };
    let figures = Admitted {
        prompt_tokens: p,
        max_tokens,
        seed: body.sampling.seed,
    };
    let request = Request {
        prompt_ids,
        max_new_tokens: max_tokens,
        sampling: body.sampling.clone(),
        mode: DecodeMode::KvCache,
        cache: engine.config().cache,
        stop_token_ids: body.stop_token_ids.clone(),
        stop_strings: body.stop.clone(),
        ignore_eos: body.ignore_eos,
        speculative: body.speculative,
    };
    let valid = engine
        .validate(request, given.is_some())
        .map_err(|e| refusal(e, body))?;
    Ok((valid, figures))
}

/// The OpenAI-style error for a refused request: the context length (OpenAI's wording and
/// code), the parameter that holds a token id outside the vocabulary; the rest in the
/// engine's words.
fn refusal(e: RequestError, body: &Body) -> ApiError {
    match e {
        RequestError::PromptTooLong { prompt: p, max_len } => ApiError::invalid(
            format!("This model's maximum context length is {max_len} tokens. However, your prompt is {p} tokens, leaving no room for a completion: shorten it."),
            Some(if matches!(body.prompt, PromptInput::Messages(_)) { "messages" } else { "prompt" }),
        )
        .with_code("context_length_exceeded"),
        RequestError::TooManyTokens { prompt: p, max_new_tokens: m, max_len } => ApiError::invalid(
            format!("This model's maximum context length is {max_len} tokens. However, you requested {} tokens ({p} in the prompt, {m} for the completion): lower max_tokens or shorten the prompt.", p.saturating_add(m)),
            Some("max_tokens"),
        )
        .with_code("context_length_exceeded"),
        RequestError::PromptTokenOutOfVocab { token, vocab } => ApiError::invalid(
            format!("token id {token} is outside the vocabulary of {vocab}"),
            Some("prompt"),
        ),
        RequestError::StopTokenOutOfVocab { token, vocab } => ApiError::invalid(
            format!("token id {token} is outside the vocabulary of {vocab}"),
            Some("stop_token_ids"),
        ),
        RequestError::SpecWithEviction => ApiError::invalid(
            "speculative decoding cannot be combined with this server's --kv-evict (a verify step's rows would cross eviction points)".to_string(),
            Some("speculative"),
        ),
        RequestError::NoDraftModel => ApiError::invalid(
            "speculative.method \"draft_model\" needs a draft model, and this server has none: start it with --spec draft --draft-model FILE".to_string(),
            Some("speculative.method"),
        ),
        other => ApiError::invalid(other.to_string(), None),
    }
}

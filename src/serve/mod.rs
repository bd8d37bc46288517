//! `nanollm serve`: an OpenAI-compatible HTTP server (axum on tokio) over the batched engine.
//!
//! Shape: one engine thread ([`engine_loop`]) owns the model, the KV pool and the compute
//! threads; the HTTP side ([`routes`], one tokio thread) talks to it over channels and never
//! computes. Requests join the running batch between engine steps (continuous batching);
//! a client that disconnects cancels its sequence; Ctrl-C or SIGTERM stops accepting,
//! cancels what is in flight (finish reason `abort`) and exits 0.
pub mod access;
pub mod app;
pub mod body_limit;
pub mod body_reader;
pub mod engine_loop;
pub mod listener;
pub mod metrics;
pub mod metrics_offload;
pub mod metrics_spec;
pub mod observer;
pub mod page;
pub mod prompt;
pub mod response;
pub mod routes;
pub mod sse;
pub mod startup;
pub mod state;

use crate::engine::llm_engine::LlmEngine;
use crate::flags::EngineArgs;
use crate::model::source;
use crate::process;
use anyhow::{bail, Context, Result};
use clap::Args;
use startup::{check_api_key, default_served_name, listen_addr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;

/// After Ctrl-C / SIGTERM, how long open connections (a client still sending its request,
/// a stream being cancelled) may take before the server exits anyway; a second signal
/// exits at once.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

const AFTER_HELP: &str = "\
Routes (OpenAI's API): POST /v1/chat/completions, POST /v1/completions (stream true/false,
max_tokens, temperature, top_p, top_k, seed, stop, stream_options.include_usage, vLLM's
stream_options.continuous_usage_stats, ignore_eos and stop_token_ids), GET /v1/models, GET /v1/models/{id}; GET /health; GET
/metrics (Prometheus, vLLM's metric names under nanollm_); GET /v1/state and
/v1/state/stream (the engine's blocks, sequences and steps); GET / (also /dashboard): the live
page that draws them, in a browser (with --api-key, open /#key=KEY).
Chat message content is data: text in a message that spells a special token is tokenized as
plain text; a raw /v1/completions prompt parses special tokens, as llama.cpp does.

Examples:
  nanollm serve
  curl -s localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{\"messages\": [{\"role\": \"user\", \"content\": \"What is the capital of France?\"}], \"max_tokens\": 32}'
  nanollm serve --host 0.0.0.0 --port 8080 --api-key $KEY --max-num-seqs 8";

/// Arguments of `nanollm serve`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP, allow_negative_numbers = true)]
pub struct ServeArgs {
    /// A .gguf file, an HF model folder, or a hub id in the local HF cache [default: SmolLM2-135M-Instruct Q4_1 in the nanollm cache].
    #[arg(long, short = 'm', value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// Address or host name to listen on (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (vLLM's default, 8000); 0 picks a free one (printed at start).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on /v1/* (as vLLM's --api-key).
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Listen on a non-loopback --host without --api-key (anyone who reaches the port can
    /// use the model).
    #[arg(long)]
    pub allow_unauthenticated_remote: bool,
    /// The model name clients send as `model` [default: a hub id as given (as vLLM's), else
    /// the .gguf file's name without `.gguf`, or the model folder's name].
    #[arg(long, value_name = "NAME")]
    pub served_model_name: Option<String>,
    /// Requests that may wait for a slot; one more gets HTTP 429 [default: 4 × --max-num-seqs].
    #[arg(long, value_name = "N")]
    pub max_waiting_requests: Option<usize>,
    /// Origins browsers may call the server from (CORS), comma-separated, or `*` for any
    /// (vLLM's --allowed-origins and its default); preflight OPTIONS requests are answered.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "*",
        value_name = "ORIGINS"
    )]
    pub allowed_origins: Vec<String>,
    #[command(flatten)]
    pub runtime: crate::flags::RuntimeArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub trace: crate::trace::TraceArgs,
}

/// What the engine thread reports once the model is loaded.
struct Ready {
    model: Arc<crate::model::Loaded>,
    metrics: Arc<metrics::Metrics>,
    max_model_len: usize,
    num_blocks: usize,
}

/// Run `nanollm serve` until Ctrl-C / SIGTERM.
///
/// Errors: bad flags, a non-loopback `--host` without `--api-key`, a model that does not
/// load, an engine that cannot be sized, an address that cannot be bound.
pub fn run(args: ServeArgs) -> Result<ExitCode> {
    let addr = listen_addr(&args.host, args.port)?;
    if !addr.ip().is_loopback() && args.api_key.is_none() && !args.allow_unauthenticated_remote {
        bail!(
            "--host {}: listening beyond loopback without --api-key lets anyone who reaches the port use the model: add --api-key KEY (or --allow-unauthenticated-remote)",
            args.host
        );
    }
    if let Some(key) = &args.api_key {
        check_api_key(key)?;
    }
    if args
        .served_model_name
        .as_deref()
        .is_some_and(|n| n.trim().is_empty())
    {
        bail!("--served-model-name: empty (clients send it as `model`)");
    }
    if args.max_waiting_requests == Some(0) {
        bail!("--max-waiting-requests 0: must be at least 1");
    }
    let cors = access::cors(&args.allowed_origins)?;
    let cache = args.runtime.cache()?;
    args.trace.check(None)?;
    if let Some(path) = &args.trace.trace {
        args.engine.offload.check_not_output("--trace", path)?;
    }
    process::init_threads(args.runtime.threads)?;
    let path = source::resolve_at(args.model.as_deref(), None)?;
    args.trace.check(Some(&path))?;
    // Bind before the model loads: a port in use is an error at once, not after the load.
    let std_listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("--host {} --port {}: cannot listen", args.host, args.port))?;
    std_listener
        .set_nonblocking(true)
        .context("the listening socket")?;
    let model_name = args
        .served_model_name
        .clone()
        .unwrap_or_else(|| default_served_name(args.model.as_deref(), &path));
    let max_waiting = args
        .max_waiting_requests
        .unwrap_or(4 * args.engine.max_num_seqs.max(1));

    let (commands, command_rx) = std_mpsc::channel();
    let (ready_tx, ready_rx) = std_mpsc::channel::<Result<Ready>>();
    let engine_alive = Arc::new(AtomicBool::new(true));
    let alive = engine_alive.clone();
    let engine_args = args.engine.clone();
    let observer = Arc::new(observer::Observer::default());
    let engine_observer = observer.clone();
    let (kernel, quantize) = (args.runtime.prefill_kernel, args.runtime.quantize);
    let load_path = path.clone();
    let tracer = args.trace.start()?;
    let trace = tracer.as_ref().map(|t| t.process("nanollm serve"));
    let engine_thread = std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || {
            // However the thread ends — returned, or a panic unwinding through it — /health
            // then answers 503 (vLLM's dead-engine health check).
            let _alive_until_dropped = AliveGuard(alive.clone());
            let started = (|| -> Result<_> {
                let model = Arc::new(kernel.load(&load_path, quantize)?);
                let draft = engine_args.spec.load_draft(&model)?;
                let config = engine_args.engine_config_with(
                    model.config(),
                    draft.as_ref().map(|d| d.config()),
                    cache,
                )?;
                let config = engine_args.offload.apply(
                    config,
                    &load_path,
                    model.config(),
                    kernel,
                    quantize,
                )?;
                Ok((model, draft, config))
            })();
            let (model, draft, config): (Arc<crate::model::Loaded>, _, _) = match started {
                Ok(x) => x,
                Err(e) => {
                    alive.store(false, Ordering::SeqCst);
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let speculative = draft.is_some() || config.speculative.is_some();
            if let Err(e) = crate::engine::evict::check(&config.cache, speculative, model.config())
            {
                alive.store(false, Ordering::SeqCst);
                let _ = ready_tx.send(Err(e));
                return;
            }
            let mut engine = match LlmEngine::with_draft(
                &model.decoder,
                draft.as_ref().map(|d| &d.decoder),
                &model.tokenizer,
                config,
            ) {
                Ok(e) => e,
                Err(e) => {
                    alive.store(false, Ordering::SeqCst);
                    let _ = ready_tx.send(Err(engine_args.blame_kv_mem(config.max_model_len, e)));
                    return;
                }
            };
            // A server runs for days: no per-step record that grows with its uptime.
            engine.keep_steps(false);
            engine.record_trace(trace.is_some());
            let metrics = match metrics::Metrics::new(config.num_blocks) {
                Ok(m) => Arc::new(m),
                Err(e) => {
                    alive.store(false, Ordering::SeqCst);
                    let _ = ready_tx.send(Err(anyhow::anyhow!("metrics: {e}")));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(Ready {
                model: model.clone(),
                metrics: metrics.clone(),
                max_model_len: config.max_model_len,
                num_blocks: config.num_blocks,
            }));
            let loop_config = engine_loop::LoopConfig {
                max_waiting,
                observer: engine_observer,
                trace,
            };
            if let Err(e) = engine_loop::run(engine, command_rx, metrics, loop_config) {
                eprintln!("error: engine: {}", format!("{e:#}").replace('\n', " "));
            }
            alive.store(false, Ordering::SeqCst);
        })
        .context("cannot start the engine thread")?;
    let ready = ready_rx
        .recv()
        .context("the engine thread stopped while loading the model")??;

    let app = Arc::new(app::App {
        commands: Mutex::new(commands.clone()),
        model: ready.model,
        metrics: ready.metrics,
        model_name: model_name.clone(),
        max_model_len: ready.max_model_len,
        api_key: args.api_key.clone(),
        created: routes::unix_now(),
        engine_alive,
        observer,
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(std_listener)
            .with_context(|| format!("--host {} --port {}: cannot listen", args.host, args.port))?;
        let local = listener.local_addr().context("the listening address")?;
        eprintln!(
            "nanollm serve: listening on http://{local} — model {model_name} ({}), {} KV blocks of {} tokens ({} KV), --max-model-len {}, --max-num-seqs {}{}",
            path.display(),
            ready.num_blocks,
            cache.block_size,
            args.runtime.kv_cache_dtype,
            ready.max_model_len,
            args.engine.max_num_seqs,
            if args.api_key.is_some() { ", API key required" } else { "" },
        );
        let (signalled, on_signal) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            shutdown_signal().await;
            eprintln!("nanollm serve: shutting down (in-flight requests are cancelled)");
            let _ = commands.send(engine_loop::Command::Shutdown);
            let _ = signalled.send(());
        };
        let server = listener::serve(listener, routes::router(app).layer(cors), shutdown);
        // Connections that do not close (a client that sent half a request) cannot hold
        // the exit for longer than the grace period, or past a second signal.
        let forced = async move {
            if on_signal.await.is_err() {
                std::future::pending::<()>().await;
            }
            tokio::select! {
                _ = tokio::time::sleep(SHUTDOWN_GRACE) => {},
                _ = shutdown_signal() => {},
            }
        };
        tokio::select! {
            _ = server => anyhow::Ok(()),
            _ = forced => {
                eprintln!("nanollm serve: connections still open after {} s (or a second signal): exiting", SHUTDOWN_GRACE.as_secs());
                Ok(())
            }
        }
    });
    // Blocking tasks still tokenizing a huge prompt must not hold the exit.
    rt.shutdown_background();
    served?;
    let _ = engine_thread.join();
    // The engine's sender is gone with its thread: the writer closes the file (`]`).
    if let Some(t) = tracer {
        if let Err(e) = t.finish() {
            eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// Clears the engine's liveness flag when dropped: at the end of the engine thread, whether
/// it returned or unwound from a panic.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

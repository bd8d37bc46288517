//! [`App`]: what every handler of `nanollm serve` shares (the engine thread's channel, the
//! model, metrics, settings, the state observer), and the checks and sends every handler
//! makes through it.
use crate::model::Loaded;
use crate::openai::ApiError;
use crate::serve::access;
use crate::serve::engine_loop::{Command, Submission};
use crate::serve::metrics::Metrics;
use crate::serve::observer::Observer;
use axum::http::{HeaderMap, StatusCode};
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc as std_mpsc, Arc, Mutex};

/// What every handler shares.
pub struct App {
    /// The engine thread's command channel.
    pub commands: Mutex<std_mpsc::Sender<Command>>,
    /// The loaded model, shared with the engine thread: the HTTP side only tokenizes with it.
    pub model: Arc<Loaded>,
    /// The server's metrics.
    pub metrics: Arc<Metrics>,
    /// The model name clients send as `model` (`--served-model-name`).
    pub model_name: String,
    /// `--max-model-len`.
    pub max_model_len: usize,
    /// `--api-key`: required as `Authorization: Bearer KEY` on `/v1/*` when set.
    pub api_key: Option<String>,
    /// Server start, Unix seconds (`/v1/models`' `created`).
    pub created: u64,
    /// False once the engine thread has stopped.
    pub engine_alive: Arc<AtomicBool>,
    /// The engine's state for `/v1/state` and its stream.
    pub observer: Arc<Observer>,
}

/// 503: the engine thread has stopped.
pub(crate) fn unavailable() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        "the engine has stopped: the server is shutting down, or see its log",
    )
}

impl App {
    /// `--api-key`'s check (401 without the key).
    pub(crate) fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        access::authorize(self.api_key.as_deref(), headers)
    }

    /// Send `c` to the engine thread (503 once it has stopped).
    pub(crate) fn send(&self, c: Command) -> Result<(), ApiError> {
        let tx = self.commands.lock().map_err(|_| unavailable())?;
        tx.send(c).map_err(|_| unavailable())
    }

    pub(crate) fn submit(&self, s: Submission) -> Result<(), ApiError> {
        self.send(Command::Submit(Box::new(s)))
    }
}

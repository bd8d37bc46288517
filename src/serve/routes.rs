//! The HTTP routes of `nanollm serve`: OpenAI's `/v1/completions`, `/v1/chat/completions`
//! and `/v1/models`, plus `/health` and `/metrics`. Handlers only parse, forward to the
//! engine thread and shape answers; they never compute.
use crate::model::Loaded;
use crate::openai::{parse_body, ApiError, PromptInput};
use crate::serve::body_reader::{read_whole, BodyError, BODY_READ_TIMEOUT, MAX_BODY_BYTES};
use crate::serve::engine_loop::{Admitted, Command, SeqMsg, Submission};
use crate::serve::metrics::Metrics;
use crate::serve::response::{self, Meta};
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

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
}

/// The router with every route, the body limit and a JSON 404 for unknown paths.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        // A wildcard: ids may hold slashes ("org/name").
        .route("/v1/models/{*id}", get(model))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(read_body))
        .with_state(app)
}

/// Read the whole body before any handler runs ([`read_whole`]): 413 over
/// [`MAX_BODY_BYTES`], 408 past [`BODY_READ_TIMEOUT`].
async fn read_body(req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (parts, body) = req.into_parts();
    match read_whole(body, declared).await {
        Ok(bytes) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(BodyError::TooLarge) => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the body is larger than {MAX_BODY_BYTES} bytes"),
        )
        .into_response(),
        Err(BodyError::TimedOut) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!(
                "the body did not arrive within {} s",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )
        .with_code("request_timeout")
        .into_response(),
        Err(BodyError::Read(e)) => {
            ApiError::invalid(format!("cannot read the body: {e}"), None).into_response()
        }
    }
}

async fn completions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    complete(app, headers, body, false)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn chat_completions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    complete(app, headers, body, true)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

fn unavailable() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        "the engine has stopped (see the server's log)",
    )
}

impl App {
    fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(key) = &self.api_key else {
            return Ok(());
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            // The scheme is case-insensitive (RFC 9110, 11.1).
            .and_then(|v| v.split_once(' '))
            .and_then(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer").then_some(token));
        if given.map(str::trim) == Some(key.as_str()) {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "missing or wrong API key: send Authorization: Bearer <key> (the server's --api-key)",
            )
            .with_code("invalid_api_key"))
        }
    }

    fn submit(&self, s: Submission) -> Result<(), ApiError> {
        let tx = self.commands.lock().map_err(|_| unavailable())?;
        tx.send(Command::Submit(Box::new(s)))
            .map_err(|_| unavailable())
    }
}

async fn complete(
    app: Arc<App>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    chat: bool,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    app.authorize(&headers)?;
    // `read_body` has read the whole body already (413 and 408 are decided there).
    let bytes = body.map_err(|e| ApiError::invalid(format!("cannot read the body: {e}"), None))?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::invalid(format!("the body is not valid JSON: {e}"), None)
            .with_code("invalid_json")
    })?;
    let Value::Object(fields) = value else {
        return Err(ApiError::invalid("the body must be a JSON object", None));
    };
    let body = parse_body(&fields)?;
    match (&body.prompt, chat) {
        (PromptInput::Messages(_), false) => {
            return Err(ApiError::invalid(
                "/v1/completions takes a prompt; send messages to /v1/chat/completions",
                Some("messages"),
            ))
        }
        (PromptInput::Text(_) | PromptInput::TokenIds(_), true) => {
            return Err(ApiError::invalid(
                "/v1/chat/completions takes messages; send a raw prompt to /v1/completions",
                Some("prompt"),
            ))
        }
        _ => {}
    }
    if let Some(m) = &body.model {
        if *m != app.model_name {
            return Err(no_such_model(&app, m));
        }
    }
    // Tokenize here, on a blocking thread: a 4 MB prompt takes ~1 s, which on the engine
    // thread would stall every running stream.
    let model = app.model.clone();
    let (body, prompt_ids) = tokio::task::spawn_blocking(move || {
        let ids = crate::serve::prompt::prompt_ids(&model, &body.prompt);
        (body, ids)
    })
    .await
    .map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "tokenization failed (see the server's log)",
        )
    })?;
    let prompt_ids = prompt_ids?;
    let (events, rx) = mpsc::unbounded_channel();
    let (admitted_tx, admitted_rx) = oneshot::channel();
    let stream = body.stream;
    let include_usage = body.include_usage;
    app.submit(Submission {
        body,
        prompt_ids,
        default_max_tokens: if chat { None } else { Some(16) },
        received,
        events,
        admitted: admitted_tx,
    })?;
    let admitted = admitted_rx.await.map_err(|_| unavailable())??;
    let meta = Meta {
        id: format!(
            "{}-{:016x}",
            if chat { "chatcmpl" } else { "cmpl" },
            crate::openai::body::random_seed()
        ),
        created: unix_now(),
        model: app.model_name.clone(),
        chat,
    };
    if stream {
        Ok(sse(meta, admitted, rx, include_usage).into_response())
    } else {
        whole(meta, admitted, rx).await
    }
}

/// Wait for the end and answer one JSON.
async fn whole(
    meta: Meta,
    admitted: Admitted,
    mut rx: mpsc::UnboundedReceiver<SeqMsg>,
) -> Result<Response, ApiError> {
    while let Some(msg) = rx.recv().await {
        if let SeqMsg::Done(f) = msg {
            let g = &f.generation;
            let usage = response::usage(
                admitted.prompt_tokens,
                g.tokens.len(),
                f.cached_prompt_tokens,
            );
            let finish = response::finish_reason(g.finish_reason);
            return Ok(Json(response::full(&meta, &g.text, finish, usage)).into_response());
        }
    }
    Err(ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        "the engine stopped while generating (see the server's log)",
    ))
}

/// Where a stream is.
enum Phase {
    Tokens,
    Usage(Value),
    DoneMarker,
    Finished,
}

struct Stream {
    rx: mpsc::UnboundedReceiver<SeqMsg>,
    meta: Meta,
    admitted: Admitted,
    include_usage: bool,
    /// Bytes of text sent so far.
    sent: usize,
    first: bool,
    phase: Phase,
}

fn data(v: &Value) -> Result<Event, Infallible> {
    Ok(Event::default().data(v.to_string()))
}

/// Server-Sent Events: (chat) a first chunk with the role, a chunk per token that completed
/// text, a last chunk with the rest of the text and `finish_reason`, the usage chunk when
/// asked, then `data: [DONE]`.
fn sse(
    meta: Meta,
    admitted: Admitted,
    rx: mpsc::UnboundedReceiver<SeqMsg>,
    include_usage: bool,
) -> impl IntoResponse {
    let state = Stream {
        rx,
        meta,
        admitted,
        include_usage,
        sent: 0,
        first: true,
        phase: Phase::Tokens,
    };
    let events = futures_util::stream::unfold(state, |mut s| async move {
        match std::mem::replace(&mut s.phase, Phase::Finished) {
            Phase::Finished => None,
            Phase::DoneMarker => Some((Ok(Event::default().data("[DONE]")), s)),
            Phase::Usage(u) => {
                s.phase = Phase::DoneMarker;
                let chunk = response::usage_chunk(&s.meta, u);
                Some((data(&chunk), s))
            }
            Phase::Tokens => {
                if s.first && s.meta.chat {
                    s.first = false;
                    s.phase = Phase::Tokens;
                    return Some((data(&response::chunk(&s.meta, "", true, None)), s));
                }
                loop {
                    match s.rx.recv().await {
                        Some(SeqMsg::Token(ev)) => {
                            if ev.text_delta.is_empty() {
                                continue;
                            }
                            s.sent += ev.text_delta.len();
                            s.phase = Phase::Tokens;
                            let first = std::mem::replace(&mut s.first, false);
                            let chunk = response::chunk(&s.meta, &ev.text_delta, first, None);
                            return Some((data(&chunk), s));
                        }
                        Some(SeqMsg::Done(f)) => {
                            let g = &f.generation;
                            let rest = g.text.get(s.sent..).unwrap_or("");
                            let finish = response::finish_reason(g.finish_reason);
                            let first = std::mem::replace(&mut s.first, false);
                            let chunk = response::chunk(&s.meta, rest, first, Some(finish));
                            s.phase = if s.include_usage {
                                Phase::Usage(response::usage(
                                    s.admitted.prompt_tokens,
                                    g.tokens.len(),
                                    f.cached_prompt_tokens,
                                ))
                            } else {
                                Phase::DoneMarker
                            };
                            return Some((data(&chunk), s));
                        }
                        None => {
                            s.phase = Phase::DoneMarker;
                            let e = ApiError::new(
                                StatusCode::INTERNAL_SERVER_ERROR,
                                "server_error",
                                "the engine stopped while generating (see the server's log)",
                            );
                            return Some((data(&e.body()), s));
                        }
                    }
                }
            }
        }
    });
    Sse::new(events)
}

/// 404 for a model id this server does not serve (OpenAI's `model_not_found`).
fn no_such_model(app: &App, m: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "not_found_error",
        message: format!(
            "The model `{m}` does not exist; this server serves `{}`",
            app.model_name
        ),
        param: Some("model".into()),
        code: Some("model_not_found"),
    }
}

/// The served model as OpenAI's model object.
fn model_object(app: &App) -> Value {
    json!({
        "id": app.model_name,
        "object": "model",
        "created": app.created,
        "owned_by": "nanollm",
        "max_model_len": app.max_model_len,
    })
}

async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = app.authorize(&headers) {
        return e.into_response();
    }
    Json(json!({"object": "list", "data": [model_object(&app)]})).into_response()
}

/// `GET /v1/models/{id}` (the OpenAI client's `models.retrieve`): the model object, or 404.
async fn model(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(e) = app.authorize(&headers) {
        return e.into_response();
    }
    if id != app.model_name {
        return no_such_model(&app, &id).into_response();
    }
    Json(model_object(&app)).into_response()
}

async fn health(State(app): State<Arc<App>>) -> StatusCode {
    if app.engine_alive.load(Ordering::SeqCst) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.metrics.render(),
    )
        .into_response()
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let message = format!("{} does not take {method}", uri.path());
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        message,
    )
    .with_code("method_not_allowed")
    .into_response()
}

async fn not_found(method: Method, uri: Uri) -> Response {
    let message = format!("no route {method} {}", uri.path());
    ApiError::new(StatusCode::NOT_FOUND, "not_found_error", message)
        .with_code("not_found")
        .into_response()
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    u64::try_from(crate::model::chat::unix_now()).unwrap_or(0)
}

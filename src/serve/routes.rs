//! The HTTP routes of `nanollm serve`: OpenAI's `/v1/completions`, `/v1/chat/completions`
//! and `/v1/models`, plus `/health`, `/metrics`, the engine's state (`/v1/state`) and the
//! live page that draws it (`/`). Handlers only parse, forward to the
//! engine thread and shape answers; they never compute.
use crate::openai::{parse_body, ApiError, PromptInput};
use crate::serve::app::{unavailable, App};
use crate::serve::body_reader::MAX_BODY_BYTES;
use crate::serve::engine_loop::{Admitted, SeqMsg, Submission};
use crate::serve::response::{self, Meta};
use crate::serve::{body_limit, sse};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// The router with every route, the body limit and a JSON 404 for unknown paths.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        // A wildcard: ids may hold slashes ("org/name").
        .route("/v1/models/{*id}", get(model))
        .route("/v1/state", get(crate::serve::state::state))
        .route("/v1/state/stream", get(crate::serve::state::state_stream))
        .route("/", get(crate::serve::page::index))
        .route("/dashboard", get(crate::serve::page::index))
        .route("/assets/page.js", get(crate::serve::page::script))
        .route("/assets/page.css", get(crate::serve::page::style))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            body_limit::read_body,
        ))
        .with_state(app)
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
    // Parse and tokenize on a blocking thread: a 4 MB prompt takes ~1 s to tokenize and a
    // body of 100k messages ~0.1 s to parse, which on this (only) HTTP thread would stall
    // every running stream.
    let model = app.model.clone();
    let model_name = app.model_name.clone();
    let (body, prompt_ids) = tokio::task::spawn_blocking(move || {
        let body = parse_request(&bytes, chat, &model_name)?;
        let ids = crate::serve::prompt::prompt_ids(&model, &body.prompt);
        Ok::<_, ApiError>((body, ids))
    })
    .await
    .map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "parsing the request failed (see the server's log)",
        )
    })??;
    let prompt_ids = prompt_ids?;
    let (events, rx) = mpsc::unbounded_channel();
    let (admitted_tx, admitted_rx) = oneshot::channel();
    let stream = body.stream;
    let include_usage = body.include_usage;
    let continuous_usage = body.continuous_usage;
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
        // 128 random bits, as vLLM's uuid4 hex (32 bits collided at ~77k requests).
        id: format!(
            "{}-{:016x}{:016x}",
            if chat { "chatcmpl" } else { "cmpl" },
            crate::openai::body::random_bits(),
            crate::openai::body::random_bits()
        ),
        created: unix_now(),
        model: app.model_name.clone(),
        chat,
        include_usage,
        continuous_usage,
    };
    if stream {
        Ok(sse::sse(meta, admitted, rx, include_usage).into_response())
    } else {
        whole(meta, admitted, rx).await
    }
}

/// The request body parsed and checked against the route (`chat`) and the served model.
/// Errors: invalid JSON, not an object, a field error, prompt vs messages on the wrong
/// route, another model's name.
fn parse_request(
    bytes: &[u8],
    chat: bool,
    model_name: &str,
) -> Result<crate::openai::Body, ApiError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::invalid(format!("the body is not valid JSON: {e}"), None)
            .with_code("invalid_json")
    })?;
    let Value::Object(fields) = value else {
        return Err(ApiError::invalid("the body must be a JSON object", None));
    };
    // Neither field: name the one this route takes (parse_body names both).
    if !fields.contains_key("prompt") && !fields.contains_key("messages") {
        return Err(if chat {
            ApiError::invalid(
                "messages: required on /v1/chat/completions",
                Some("messages"),
            )
        } else {
            ApiError::invalid("prompt: required on /v1/completions", Some("prompt"))
        });
    }
    let body = parse_body(&fields)?;
    match (&body.prompt, chat) {
        (PromptInput::Messages(_), false) => Err(ApiError::invalid(
            "/v1/completions takes a prompt; send messages to /v1/chat/completions",
            Some("messages"),
        )),
        (PromptInput::Text(_) | PromptInput::TokenIds(_), true) => Err(ApiError::invalid(
            "/v1/chat/completions takes messages; send a raw prompt to /v1/completions",
            Some("prompt"),
        )),
        _ => match &body.model {
            Some(m) if m != model_name => Err(no_such_model(model_name, m)),
            _ => Ok(body),
        },
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
            if g.finish_reason == crate::engine::FinishReason::Interrupted && g.tokens.is_empty() {
                // Shut down before it ran: an error a client retries, not an empty success.
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "the server is shutting down; the request did not run: retry",
                ));
            }
            if let Some(e) = &f.error {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    format!("generation failed: {e}"),
                ));
            }
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

/// 404 for a model id this server does not serve (OpenAI's `model_not_found`).
fn no_such_model(served: &str, m: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "invalid_request_error",
        message: format!("The model `{m}` does not exist; this server serves `{served}`"),
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
        return no_such_model(&app.model_name, &id).into_response();
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
    ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
        .with_code("not_found")
        .into_response()
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    u64::try_from(crate::model::chat::unix_now()).unwrap_or(0)
}

//! The completion routes' body middleware ([`read_body`]): the API key checked, then the
//! whole body read within its size and time limits, before the handler runs.
use crate::openai::ApiError;
use crate::serve::access::authorize;
use crate::serve::app::App;
use crate::serve::body_reader::{read_whole, BodyError, BODY_READ_TIMEOUT, MAX_BODY_BYTES};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// For the two completion routes, read the whole body before the handler runs
/// ([`read_whole`]): 413 over [`MAX_BODY_BYTES`], 408 past [`BODY_READ_TIMEOUT`]. The API
/// key is checked first (401 before a byte of the body is read), and a declared length over
/// the limit with `Expect: 100-continue` gets its 413 at once, without `100 Continue` (RFC
/// 9110 §10.1.1). Other routes take no body: theirs is left unread.
pub async fn read_body(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let completion = req.method() == Method::POST
        && matches!(req.uri().path(), "/v1/completions" | "/v1/chat/completions");
    if !completion {
        return next.run(req).await;
    }
    if let Err(e) = authorize(app.api_key.as_deref(), req.headers()) {
        return e.into_response();
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let expects_continue = req
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if expects_continue && declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return too_large().into_response();
    }
    let (parts, body) = req.into_parts();
    match read_whole(body, declared).await {
        Ok(bytes) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(BodyError::TooLarge) => too_large().into_response(),
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

/// 413: the body is over [`MAX_BODY_BYTES`].
fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "invalid_request_error",
        format!("the body is larger than {MAX_BODY_BYTES} bytes"),
    )
}

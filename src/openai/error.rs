//! OpenAI-style error responses: an HTTP status and
//! `{"error": {"message", "type", "param", "code"}}`, as OpenAI's API and vLLM answer.
use crate::openai::FieldError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// One error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status (400, 401, 404, 413, 429, 500, 503).
    pub status: StatusCode,
    /// OpenAI's `type`: `invalid_request_error` (also for a wrong API key and an unknown
    /// model, with codes `invalid_api_key` / `model_not_found`, as OpenAI answers),
    /// `rate_limit_error`, `server_error`.
    pub kind: &'static str,
    /// What is wrong, one line.
    pub message: String,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `context_length_exceeded`, ...).
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400 `invalid_request_error`.
    pub fn invalid(message: impl Into<String>, param: Option<&str>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(str::to_string),
            code: None,
        }
    }

    /// This error with `code`.
    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    /// `status` with `kind`.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> ApiError {
        ApiError::invalid(e.to_string(), e.param.as_deref())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        use axum::http::{header, HeaderValue};
        let mut r = (self.status, axum::Json(self.body())).into_response();
        // RFC 9110: a 401 names its scheme (WWW-Authenticate), a 429 when to come back.
        match self.status {
            StatusCode::UNAUTHORIZED => {
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            StatusCode::TOO_MANY_REQUESTS => {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        if self.status == StatusCode::PAYLOAD_TOO_LARGE
            || self.status == StatusCode::REQUEST_TIMEOUT
        {
            // The rest of the body is never read: tell the client not to reuse the connection.
            r.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        r
    }
}

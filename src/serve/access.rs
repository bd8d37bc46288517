//! What happens to a request before its handler: CORS (`--allowed-origins`), the API key,
//! and reading the whole body of a completion request (limits, timeouts, `Expect`).
use crate::openai::ApiError;
use axum::http::{header, HeaderMap, StatusCode};

/// CORS for `--allowed-origins`: `*` (any origin) or a list, any method and header, as
/// vLLM's CORSMiddleware with its defaults. Errors: an origin that is not a valid header
/// value, or `*` inside a list.
pub fn cors(origins: &[String]) -> anyhow::Result<tower_http::cors::CorsLayer> {
    use tower_http::cors::{AllowOrigin, Any, CorsLayer};
    let layer = CorsLayer::new().allow_methods(Any).allow_headers(Any);
    if origins.iter().any(|o| o.trim() == "*") {
        if origins.len() > 1 {
            anyhow::bail!("--allowed-origins: `*` allows every origin; give it alone");
        }
        return Ok(layer.allow_origin(Any));
    }
    let values = origins
        .iter()
        .map(|o| {
            axum::http::HeaderValue::from_str(o.trim()).map_err(|_| {
                anyhow::anyhow!(
                    "--allowed-origins {o:?}: not an origin (e.g. http://localhost:3000)"
                )
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(layer.allow_origin(AllowOrigin::list(values)))
}

/// Check `Authorization: Bearer KEY` against `--api-key` (none: every request passes).
/// Errors: 401 `invalid_api_key`, as OpenAI answers a wrong key.
pub fn authorize(api_key: Option<&str>, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = api_key else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        // The scheme is case-insensitive (RFC 9110, 11.1).
        .and_then(|v| v.split_once(' '))
        .and_then(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer").then_some(token));
    if given.is_some_and(|g| same_secret(g.trim().as_bytes(), key.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "missing or wrong API key: send Authorization: Bearer <key> (the server's --api-key)",
        )
        .with_code("invalid_api_key"))
    }
}

/// `a == b` in time that depends on the lengths only, not on where they first differ (so the
/// API key cannot be guessed byte by byte from response times).
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

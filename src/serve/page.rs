//! The live page (`GET /` and `GET /dashboard`) and its two assets: HTML, CSS and JS embedded
//! in the binary, no CDN, no build step, so it works offline. The page is public; the data it
//! reads (`/v1/state/stream`) follows `--api-key`, sent from the page as a Bearer header
//! (docs/serving.md#the-live-page).
use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The page's HTML.
pub const INDEX_HTML: &str = include_str!("page/index.html");
/// The page's script: reads the state stream and updates the DOM.
pub const PAGE_JS: &str = include_str!("page/page.js");
/// The page's style sheet.
pub const PAGE_CSS: &str = include_str!("page/page.css");

/// `body` with its content type; revalidated on each load, so a new binary's page is seen.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `GET /` and `GET /dashboard`: the live page.
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// `GET /assets/page.js`.
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", PAGE_JS)
}

/// `GET /assets/page.css`.
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", PAGE_CSS)
}

//! Reading a request body before any handler runs: whole, within a size limit and a time
//! limit, so a client that stops half-way cannot hold a handler (or shutdown) forever.
use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use std::time::Duration;

/// Largest request body accepted (bytes); a larger one gets 413.
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// Longest a client may take to send its whole body (s); a slower one gets 408.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes of an oversized body read and dropped before answering 413, so a client still
/// writing it reads the answer instead of a broken pipe; beyond this the answer comes at
/// once and the connection closes.
pub const DRAIN_BYTES: u64 = 64 << 20;

/// Why a body was not read.
#[derive(Debug)]
pub enum BodyError {
    /// Over [`MAX_BODY_BYTES`] (declared or sent).
    TooLarge,
    /// Not all there within [`BODY_READ_TIMEOUT`].
    TimedOut,
    /// The connection failed while reading (the message says how).
    Read(String),
}

/// The whole body: at most [`MAX_BODY_BYTES`], within [`BODY_READ_TIMEOUT`], a leading UTF-8
/// byte-order mark dropped. `declared` is the `Content-Length`, when sent.
///
/// Errors: see [`BodyError`]; an oversized body is drained up to [`DRAIN_BYTES`] first.
pub async fn read_whole(body: Body, declared: Option<u64>) -> Result<Bytes, BodyError> {
    if declared.is_some_and(|n| n > DRAIN_BYTES) {
        return Err(BodyError::TooLarge);
    }
    let bytes = tokio::time::timeout(BODY_READ_TIMEOUT, collect(body))
        .await
        .map_err(|_| BodyError::TimedOut)??;
    Ok(match bytes.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) => Bytes::copy_from_slice(rest),
        None => bytes,
    })
}

/// Every data frame of `body`, up to [`MAX_BODY_BYTES`]; past it, frames are dropped until
/// the end or [`DRAIN_BYTES`].
async fn collect(mut body: Body) -> Result<Bytes, BodyError> {
    let mut kept: Vec<u8> = Vec::new();
    let mut total: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        total += data.len() as u64;
        if total > DRAIN_BYTES {
            return Err(BodyError::TooLarge);
        }
        if total <= MAX_BODY_BYTES as u64 {
            kept.extend_from_slice(&data);
        }
    }
    if total > MAX_BODY_BYTES as u64 {
        return Err(BodyError::TooLarge);
    }
    Ok(Bytes::from(kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(body: Vec<u8>, declared: Option<u64>) -> Result<Bytes, BodyError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(read_whole(Body::from(body), declared))
    }

    #[test]
    fn bodies_up_to_the_limit_pass_larger_ones_are_refused() {
        let exact = vec![b'a'; MAX_BODY_BYTES];
        assert_eq!(
            read(exact.clone(), None).map(|b| b.len()).ok(),
            Some(MAX_BODY_BYTES)
        );
        let over = vec![b'a'; MAX_BODY_BYTES + 1];
        assert!(matches!(read(over, None), Err(BodyError::TooLarge)));
        // A declared length beyond the drain limit is refused before reading.
        assert!(matches!(
            read(b"{}".to_vec(), Some(DRAIN_BYTES + 1)),
            Err(BodyError::TooLarge)
        ));
    }

    #[test]
    fn a_leading_byte_order_mark_is_dropped() {
        let body = b"\xEF\xBB\xBF{\"a\": 1}".to_vec();
        assert_eq!(read(body, None).ok().as_deref(), Some(&b"{\"a\": 1}"[..]));
        assert_eq!(read(b"{}".to_vec(), None).ok().as_deref(), Some(&b"{}"[..]));
    }
}

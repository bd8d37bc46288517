//! Server-Sent Events of a streamed completion: OpenAI's chunks as the engine sends tokens,
//! the usage chunk when asked, then `data: [DONE]`.
use crate::openai::ApiError;
use crate::serve::engine_loop::{Admitted, SeqMsg};
use crate::serve::response::{self, Meta};
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::IntoResponse;
use serde_json::Value;
use std::convert::Infallible;
use tokio::sync::mpsc;

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
    /// Tokens generated so far (each token message, with text or not).
    tokens: usize,
    first: bool,
    phase: Phase,
}

fn data(v: &Value) -> Result<Event, Infallible> {
    Ok(Event::default().data(v.to_string()))
}

impl Stream {
    /// A chunk of `text`, with the usage so far when the client asked for it in every chunk.
    fn chunk(&self, text: &str, first: bool, finish: Option<&str>) -> Result<Event, Infallible> {
        let mut c = response::chunk(&self.meta, text, first, finish);
        if self.meta.continuous_usage {
            c["usage"] = response::running_usage(self.admitted.prompt_tokens, self.tokens);
        }
        data(&c)
    }
}

/// Server-Sent Events: (chat) a first chunk with the role, a chunk per token that completed
/// text, a last chunk with the rest of the text and `finish_reason`, the usage chunk when
/// asked, then `data: [DONE]`.
pub fn sse(
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
        tokens: 0,
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
                    let role = s.chunk("", true, None);
                    return Some((role, s));
                }
                loop {
                    match s.rx.recv().await {
                        Some(SeqMsg::Token(ev)) => {
                            s.tokens += 1;
                            if ev.text_delta.is_empty() {
                                continue;
                            }
                            s.sent += ev.text_delta.len();
                            s.phase = Phase::Tokens;
                            let first = std::mem::replace(&mut s.first, false);
                            let chunk = s.chunk(&ev.text_delta, first, None);
                            return Some((chunk, s));
                        }
                        Some(SeqMsg::Done(f)) if f.error.is_some() => {
                            // Failed alone (vLLM streams an error object, then [DONE]).
                            s.phase = Phase::DoneMarker;
                            let e = ApiError::new(
                                StatusCode::INTERNAL_SERVER_ERROR,
                                "server_error",
                                format!("generation failed: {}", f.error.unwrap_or_default()),
                            );
                            return Some((data(&e.body()), s));
                        }
                        Some(SeqMsg::Done(f)) => {
                            let g = &f.generation;
                            let rest = g.text.get(s.sent..).unwrap_or("");
                            let finish = response::finish_reason(g.finish_reason);
                            let first = std::mem::replace(&mut s.first, false);
                            s.tokens = g.tokens.len();
                            let chunk = s.chunk(rest, first, Some(finish));
                            s.phase = if s.include_usage {
                                Phase::Usage(response::usage(
                                    s.admitted.prompt_tokens,
                                    g.tokens.len(),
                                    f.cached_prompt_tokens,
                                ))
                            } else {
                                Phase::DoneMarker
                            };
                            return Some((chunk, s));
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
    // Proxies such as nginx buffer a response unless told not to (llama-server says so too).
    ([("x-accel-buffering", "no")], Sse::new(events))
}

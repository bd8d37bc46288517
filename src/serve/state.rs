//! `GET /v1/state` and `GET /v1/state/stream`: the engine's state for the live page
//! (docs/observability.md).
//!
//! The engine thread builds an [`EngineState`] only when asked (`/v1/state`, a stream's first
//! event) or, while at least one stream is open, after a step at most every
//! [`PUBLISH_INTERVAL`](crate::serve::observer::PUBLISH_INTERVAL) and once more when it goes
//! idle; it times each build
//! ([`Observer::cpu_ms`](crate::serve::observer::Observer::cpu_ms)). Serializing and diffing
//! happen on the HTTP side: a stream sends a full `snapshot` first, then `delta` events
//! holding only the blocks that changed and the steps that are new. Every event has an id:
//! each new state is recorded once, as a delta from the one before, in the observer's bounded
//! journal ([`REPLAY_EVENTS`](crate::serve::observer::REPLAY_EVENTS) deltas), so a client
//! reconnecting with `Last-Event-ID` gets the deltas it missed, or a snapshot when its id is
//! too old or unknown. At most [`MAX_STATE_STREAMS`] streams are open at once (HTTP 429
//! beyond).
use crate::engine::snapshot::EngineState;
use crate::openai::ApiError;
use crate::serve::app::{unavailable, App};
use crate::serve::engine_loop::Command;
use crate::serve::observer::{Built, Next, MAX_STATE_STREAMS};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::{oneshot, watch};

/// Ask the engine thread for its state (answered between two steps).
async fn request_state(app: &App) -> Result<Built, ApiError> {
    let (tx, rx) = oneshot::channel();
    app.send(Command::State(tx))?;
    rx.await.map_err(|_| unavailable())
}

/// `v` (a state or a delta) with serve's fields added.
fn with_extra(app: &App, mut v: Value) -> Value {
    if let Value::Object(o) = &mut v {
        for (k, x) in app.observer.extra(&app.model_name) {
            o.insert(k.into(), x);
        }
    }
    v
}

/// `state` as JSON with serve's fields.
fn full_json(app: &App, state: &EngineState) -> Value {
    with_extra(app, serde_json::to_value(state).unwrap_or(Value::Null))
}

/// What changed from `prev` to `next`: the blocks that differ or are new, the steps after
/// `prev`'s last, the requests that ended since, and the rest whole.
fn delta_json(app: &App, prev: &EngineState, next: &EngineState) -> Value {
    let blocks: Vec<_> = next
        .blocks
        .iter()
        .enumerate()
        .filter(|(i, b)| prev.blocks.get(*i) != Some(*b))
        .map(|(_, b)| b)
        .collect();
    let last = prev.steps.last().map_or(0, |s| s.step);
    let steps: Vec<_> = next.steps.iter().filter(|s| s.step > last).collect();
    // Finished requests end in id order only within a step: compare with every kept one.
    let finished: Vec<_> = next
        .finished
        .iter()
        .filter(|f| !prev.finished.iter().any(|p| p.id == f.id))
        .collect();
    let v = json!({
        "step": next.step,
        "pool": next.pool,
        "blocks": blocks,
        "sequences": next.sequences,
        "finished": finished,
        "steps": steps,
        "counters": next.counters,
    });
    with_extra(app, v)
}

/// `GET /v1/state`: the engine's state now.
pub async fn state(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let answer = async {
        app.authorize(&headers)?;
        let (_, s) = request_state(&app).await?;
        Ok::<_, ApiError>(Json(full_json(&app, &s)).into_response())
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

/// Counts one open stream until dropped.
struct Slot(Arc<App>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.observer.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One open stream.
struct Stream {
    slot: Slot,
    /// The engine's published states.
    rx: watch::Receiver<Option<Built>>,
    /// The journal's newest id.
    ids: watch::Receiver<u64>,
    /// The last event sent (`None`: none yet, or the client's `Last-Event-ID` is not a
    /// number).
    sent: Option<u64>,
}

/// Record `built` in the journal (once, whichever stream sees it first) and wake the
/// streams.
fn record(app: &App, built: &Built) {
    let newest = {
        let mut journal = app.observer.journal();
        if !journal.record(built, |prev, next| delta_json(app, prev, next).to_string()) {
            return;
        }
        journal.newest()
    };
    app.observer.newest.send_replace(newest);
}

/// The client's `Last-Event-ID` (`None` when absent or not a number).
fn last_event_id(headers: &HeaderMap) -> Option<u64> {
    headers
        .get("last-event-id")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `GET /v1/state/stream`: Server-Sent Events, a `snapshot` then `delta`s (at most 10 a
/// second while the engine works), each with an `id`. A client sending `Last-Event-ID` of an
/// event the journal still follows gets the deltas after it instead of the snapshot.
pub async fn state_stream(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let answer = async {
        app.authorize(&headers)?;
        let open = app.observer.streams.fetch_add(1, Ordering::Relaxed);
        let slot = Slot(app.clone());
        if open >= MAX_STATE_STREAMS {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                format!("{MAX_STATE_STREAMS} state streams are open already: close one (a page tab) and retry"),
            )
            .with_code("too_many_streams"));
        }
        let mut rx = app.observer.latest.subscribe();
        rx.borrow_and_update();
        let ids = app.observer.newest.subscribe();
        // The state now, so that the first event is current (a snapshot, or the deltas up to
        // it).
        record(&app, &request_state(&app).await?);
        let stream = Stream {
            slot,
            rx,
            ids,
            sent: last_event_id(&headers),
        };
        let events = futures_util::stream::unfold(stream, |mut s| async move {
            let app = s.slot.0.clone();
            loop {
                s.ids.borrow_and_update();
                let next = app.observer.journal().next_after(s.sent);
                let ev = match next {
                    Next::UpToDate => {
                        tokio::select! {
                            r = s.rx.changed() => {
                                r.ok()?;
                                let built = s.rx.borrow_and_update().clone();
                                if let Some(built) = built {
                                    record(&app, &built);
                                }
                            }
                            r = s.ids.changed() => r.ok()?,
                        }
                        continue;
                    }
                    Next::Delta(id, text) => {
                        s.sent = Some(id);
                        Event::default()
                            .event("delta")
                            .id(id.to_string())
                            .data(&*text)
                    }
                    Next::Snapshot(id, state) => {
                        s.sent = Some(id);
                        let data = full_json(&app, &state).to_string();
                        Event::default()
                            .event("snapshot")
                            .id(id.to_string())
                            .data(data)
                    }
                };
                return Some((Ok::<_, Infallible>(ev), s));
            }
        });
        let sse = Sse::new(events).keep_alive(KeepAlive::default());
        Ok(([("x-accel-buffering", "no")], sse).into_response())
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

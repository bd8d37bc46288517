//! Reading a trace file back (`nanollm trace-svg`): Chrome's JSON Array Format, its closing
//! `]` optional, each event kept as the few fields a timeline needs. A hostile or broken file
//! cannot make it allocate without bound: the file is at most [`MAX_FILE_BYTES`], the events
//! at most [`MAX_EVENTS`] (counted while parsing, before they are kept), and args other than
//! the numbers drawn are skipped unread.
use anyhow::{Context, Result};
use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::io::Read;
use std::path::Path;

/// Largest trace file read (bytes): 1 GiB, four files of `--trace-max-bytes`' default.
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// Most events read from one file.
pub const MAX_EVENTS: usize = 4_000_000;

/// An event's `id`: a number or a string (the format allows both).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(untagged)]
pub enum EventId {
    /// A numeric id (nanollm writes the sequence id).
    Num(u64),
    /// A string id (`"0x1f"`).
    Str(String),
}

/// The args a timeline draws (others are skipped).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct EventArgs {
    /// `C` "KV blocks": blocks in use.
    pub used: Option<f64>,
    /// `C` "KV blocks": cached blocks no sequence uses.
    pub cached: Option<f64>,
    /// `M`: the process or thread name.
    pub name: Option<String>,
    /// Step `X`: sequences in the batch.
    pub batch_size: Option<f64>,
    /// Step `X`: tokens run.
    pub tokens: Option<f64>,
    /// Request `e`: why it ended.
    pub finish_reason: Option<String>,
}

/// One trace event.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Event {
    /// Its name ("step 3", "forward", "request 2", "prefill chunk 1/2" …).
    #[serde(default)]
    pub name: String,
    /// Its phase: `X` complete, `b`/`e` async begin/end, `C` counter, `M` metadata …
    #[serde(default)]
    pub ph: String,
    /// Timestamp (µs since the trace began).
    #[serde(default)]
    pub ts: f64,
    /// Duration of an `X` event (µs).
    #[serde(default)]
    pub dur: f64,
    /// Process id (one engine run).
    #[serde(default)]
    pub pid: u64,
    /// Thread id (1: the engine's steps).
    #[serde(default)]
    pub tid: u64,
    /// Category of async events ("request").
    #[serde(default)]
    pub cat: String,
    /// Async span id (the sequence id).
    pub id: Option<EventId>,
    /// The args drawn.
    #[serde(default)]
    pub args: EventArgs,
}

/// Read the trace at `path`. Errors: one line naming the file: unreadable, larger than
/// [`MAX_FILE_BYTES`], not a JSON array of events, more than [`MAX_EVENTS`] events.
pub fn read_trace(path: &Path) -> Result<Vec<Event>> {
    let name = path.display();
    let file = std::fs::File::open(path).with_context(|| format!("{name}: cannot read it"))?;
    let too_large = || {
        anyhow::anyhow!(
            "{name}: larger than {MAX_FILE_BYTES} bytes (1 GiB): not drawn (a --trace file rotates at --trace-max-bytes)"
        )
    };
    if file.metadata().is_ok_and(|m| m.len() > MAX_FILE_BYTES) {
        return Err(too_large());
    }
    let mut text = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut text)
        .with_context(|| format!("{name}: cannot read it"))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large());
    }
    parse_trace(&text, MAX_EVENTS)
        .with_context(|| format!("{name}: not a Chrome trace-event JSON array"))
}

/// Parse a trace's text (a JSON array of events; a missing closing `]` and a trailing `,`
/// are allowed, as the format allows them), at most `max_events` of them. Errors: not such
/// an array, more events.
pub fn parse_trace(text: &[u8], max_events: usize) -> Result<Vec<Event>> {
    let mut end = text.len();
    while end > 0 && text[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    let mut owned;
    let mut body = &text[..end];
    if body.last() != Some(&b']') {
        if body.last() == Some(&b',') {
            body = &body[..body.len() - 1];
        }
        owned = body.to_vec();
        owned.push(b']');
        body = &owned;
    } else {
        // `…},\n]`: a trailing comma before the `]` (another writer's clean end).
        let inner = &body[..body.len() - 1];
        let trimmed = inner.trim_ascii_end();
        if trimmed.last() == Some(&b',') {
            owned = trimmed[..trimmed.len() - 1].to_vec();
            owned.push(b']');
            body = &owned;
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let events = de
        .deserialize_seq(Capped(max_events))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    de.end().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(events)
}

/// Deserializes the array, refusing more than this many elements.
struct Capped(usize);

impl<'de> Visitor<'de> for Capped {
    type Value = Vec<Event>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "an array of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Event>, A::Error> {
        let mut out = Vec::new();
        while let Some(e) = seq.next_element::<Event>()? {
            if out.len() == self.0 {
                return Err(serde::de::Error::custom(format!(
                    "more than {} events",
                    self.0
                )));
            }
            out.push(e);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_bracket_and_a_trailing_comma_are_allowed() -> Result<()> {
        let e = r#"{"name":"step 1","ph":"X","ts":1.5,"dur":2,"pid":1,"tid":1}"#;
        for text in [
            format!("[\n{e},\n"),
            format!("[\n{e},\n]"),
            format!("[{e}]"),
            format!("[{e}"),
        ] {
            let ev = parse_trace(text.as_bytes(), 10)?;
            assert_eq!(ev.len(), 1, "{text}");
            assert_eq!((ev[0].ts, ev[0].dur), (1.5, 2.0));
        }
        assert!(parse_trace(b"{\"traceEvents\": []}", 10).is_err());
        assert!(parse_trace(b"[1, 2]", 10).is_err());
        assert!(parse_trace(b"", 10).is_err());
        // The cap counts while parsing: the 4th event is refused.
        let e = parse_trace(b"[{},{},{},{}]", 3)
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("more than 3 events")));
        Ok(())
    }
}

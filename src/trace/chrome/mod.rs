//! The engine's [`TraceEvent`]s as Chrome trace-event JSON, one event per line (the format
//! Perfetto and `chrome://tracing` open; docs/traces.md describes every event).
//!
//! Each engine run is a process (`pid`): its steps are `X` events on thread 1 ("step N",
//! holding "schedule", "forward" and "sample"), its KV blocks and bytes `C` counters, and
//! each request an async span tree (`b`/`e`, `cat` "request", `id` the sequence id):
//! "request N" around "queued", "prefill chunk k/n", "decode" and "preempted". The
//! formatter remembers each live request's open span, so its spans always nest (an event
//! earlier than the request's last one is moved up to it: a chunk's step may begin before
//! the request was admitted in that step's schedule). A request preempted after its first
//! token decodes again once its recompute's last chunk has run; the engine sends no event
//! then, so its "decode" span opens at the end of its last chunk, written when the next
//! event shows that chunk was the last (a preemption, its end, or the end of the file).
use crate::engine::trace::{RequestEvent, RequestPhase, StepTrace, TraceEvent};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Instant;

/// The track (thread id) of a process's engine steps.
pub const STEP_TID: u32 = 1;

/// The `cat` of every request span.
pub const REQUEST_CAT: &str = "request";

/// One live request: its prompt, its open inner span and the time of its last event (ns
/// since the trace's origin).
#[derive(Debug, Clone)]
struct Live {
    prompt_tokens: usize,
    inner: Option<&'static str>,
    cursor_ns: u64,
    /// It has had its first token (a recompute after a preemption decodes again).
    decoded: bool,
    /// The end of a recompute chunk after which it decodes, unless another chunk follows (ns).
    resume_ns: Option<u64>,
}

impl Live {
    /// Open the "decode" span a recompute's last chunk began, now that no chunk followed.
    fn resume(&mut self, pid: u32, id: usize, out: &mut Vec<Value>) {
        if let Some(t) = self.resume_ns.take() {
            out.push(span("b", pid, id, "decode", t, json!({})));
            self.inner = Some("decode");
        }
    }
}

/// One engine run in the trace.
#[derive(Debug, Clone)]
struct Process {
    name: String,
    /// End of its last step (ns), so steps never overlap on the track.
    last_step_end_ns: u64,
    requests: BTreeMap<usize, Live>,
}

/// Turns [`TraceEvent`]s into JSON lines; keeps what it must to close spans properly.
#[derive(Debug)]
pub struct Formatter {
    origin: Instant,
    processes: BTreeMap<u32, Process>,
    /// The latest timestamp formatted so far (ns since the origin).
    latest_ns: u64,
}

/// Microseconds (the format's unit) from nanoseconds, exact to the nanosecond.
fn us(ns: u64) -> Value {
    serde_json::Number::from_f64(ns as f64 / 1e3).map_or(Value::Null, Value::Number)
}

impl Formatter {
    /// A formatter whose timestamps count from `origin` (µs in the output).
    pub fn new(origin: Instant) -> Formatter {
        Formatter {
            origin,
            processes: BTreeMap::new(),
            latest_ns: 0,
        }
    }

    /// Nanoseconds from the origin to `t` (0 before it).
    fn ns(&self, t: Instant) -> u64 {
        ns_since(self.origin, t)
    }

    /// The latest timestamp formatted so far (ns since the origin): where a rotation cuts.
    pub fn latest_ns(&self) -> u64 {
        self.latest_ns
    }

    /// Register process `pid` named `name` (e.g. "nanollm serve") and push its `M` events.
    pub fn add_process(&mut self, pid: u32, name: &str, out: &mut Vec<Value>) {
        let p = Process {
            name: name.to_string(),
            last_step_end_ns: 0,
            requests: BTreeMap::new(),
        };
        self.processes.insert(pid, p);
        Self::metadata_of(pid, name, out);
    }

    fn metadata_of(pid: u32, name: &str, out: &mut Vec<Value>) {
        let m = |name: &str, tid: u32, value: &str| json!({"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {"name": value}});
        out.push(m("process_name", 0, name));
        out.push(m("thread_name", STEP_TID, "engine steps"));
    }

    /// Every process's `M` events again (the head of a new file after a rotation).
    pub fn metadata(&self, out: &mut Vec<Value>) {
        for (&pid, p) in &self.processes {
            Self::metadata_of(pid, &p.name, out);
        }
    }

    /// Format `events` of process `pid` (registered with [`Self::add_process`]; an unknown
    /// pid is registered as "nanollm").
    pub fn format(&mut self, pid: u32, events: &[TraceEvent], out: &mut Vec<Value>) {
        if !self.processes.contains_key(&pid) {
            self.add_process(pid, "nanollm", out);
        }
        for e in events {
            match e {
                TraceEvent::Step(s) => self.step(pid, s, out),
                TraceEvent::Request(r) => self.request(pid, r, out),
            }
        }
    }

    fn step(&mut self, pid: u32, s: &StepTrace, out: &mut Vec<Value>) {
        let start = self.ns(s.start);
        let Some(p) = self.processes.get_mut(&pid) else {
            return;
        };
        let start = start.max(p.last_step_end_ns);
        let d = |x: std::time::Duration| u64::try_from(x.as_nanos()).unwrap_or(u64::MAX / 4);
        let (sched, fwd, sample) = (d(s.schedule), d(s.forward), d(s.sample));
        let end = start + sched + fwd + sample;
        p.last_step_end_ns = end;
        self.latest_ns = self.latest_ns.max(end);
        let x = |name: &str, ts: u64, dur: u64, args: Value| json!({"name": name, "ph": "X", "ts": us(ts), "dur": us(dur), "pid": pid, "tid": STEP_TID, "args": args});
        out.push(x(
            &format!("step {}", s.step),
            start,
            end - start,
            json!({
                "batch_size": s.batch_size, "decode_seqs": s.decode_seqs,
                "prefill_seqs": s.prefill_seqs, "tokens": s.tokens,
                "prefill_tokens": s.prefill_tokens, "blocks_used": s.blocks_used,
                "blocks_cached": s.blocks_cached,
            }),
        ));
        out.push(x("schedule", start, sched, json!({})));
        out.push(x("forward", start + sched, fwd, json!({})));
        out.push(x("sample", start + sched + fwd, sample, json!({})));
        let c = |name: &str, args: Value| json!({"name": name, "ph": "C", "ts": us(end), "pid": pid, "tid": STEP_TID, "args": args});
        out.push(c(
            "KV blocks",
            json!({"used": s.blocks_used, "cached": s.blocks_cached}),
        ));
        out.push(c(
            "KV bytes",
            json!({"allocated": s.bytes_allocated, "held": s.bytes_held}),
        ));
    }

    fn request(&mut self, pid: u32, r: &RequestEvent, out: &mut Vec<Value>) {
        let origin = self.origin;
        let at = self.ns(r.at);
        let Some(p) = self.processes.get_mut(&pid) else {
            return;
        };
        let id = r.seq_id;
        // A request seen first mid-life (its queue event before the trace began) opens now.
        let live = p.requests.entry(id).or_insert_with(|| {
            let prompt_tokens = match r.phase {
                RequestPhase::Queued { prompt_tokens } => prompt_tokens,
                _ => 0,
            };
            out.push(span(
                "b",
                pid,
                id,
                &format!("request {id}"),
                at,
                json!({"prompt_tokens": prompt_tokens}),
            ));
            Live {
                prompt_tokens,
                inner: None,
                cursor_ns: at,
                decoded: false,
                resume_ns: None,
            }
        });
        let at = at.max(live.cursor_ns);
        match r.phase {
            RequestPhase::PrefillChunk { .. } => live.resume_ns = None,
            RequestPhase::Verified { .. } => {}
            _ => live.resume(pid, id, out),
        }
        let close = |live: &mut Live, at: u64, args: Value, out: &mut Vec<Value>| {
            if let Some(name) = live.inner.take() {
                out.push(span("e", pid, id, name, at, args));
            }
        };
        let open = |live: &mut Live, name: &'static str, out: &mut Vec<Value>| {
            close(live, at, json!({}), out);
            out.push(span("b", pid, id, name, at, json!({})));
            live.inner = Some(name);
        };
        match r.phase {
            RequestPhase::Queued { .. } => open(live, "queued", out),
            // The wait (queued or preempted) ends; its `e` says what the prefix cache served.
            RequestPhase::Admitted { cached_tokens } => {
                close(live, at, json!({"cached_tokens": cached_tokens}), out);
            }
            RequestPhase::PrefillChunk {
                step,
                index,
                of,
                start_pos,
                tokens,
                end,
            } => {
                close(live, at, json!({}), out);
                let name = format!("prefill chunk {index}/{of}");
                let args = json!({"step": step, "start_pos": start_pos, "tokens": tokens});
                out.push(span("b", pid, id, &name, at, args));
                let end = ns_since(origin, end).max(at);
                out.push(span("e", pid, id, &name, end, json!({})));
                live.cursor_ns = end;
                if live.decoded {
                    live.resume_ns = Some(end);
                }
            }
            RequestPhase::FirstToken => {
                live.decoded = true;
                open(live, "decode", out)
            }
            RequestPhase::Verified {
                step,
                drafted,
                accepted,
                blocks_freed,
            } => {
                // An instant on the request's track, inside its decode span.
                let name = format!("verify {accepted}/{drafted} drafts");
                let args = json!({"step": step, "drafted": drafted, "accepted": accepted,
                    "rolled_back": drafted - accepted, "blocks_freed": blocks_freed});
                out.push(span("n", pid, id, &name, at, args));
            }
            RequestPhase::Preempted => open(live, "preempted", out),
            RequestPhase::Finished {
                reason,
                generated_tokens,
            } => {
                close(live, at, json!({}), out);
                let args = json!({
                    "finish_reason": reason.name(), "generated_tokens": generated_tokens,
                    "prompt_tokens": live.prompt_tokens,
                });
                out.push(span("e", pid, id, &format!("request {id}"), at, args));
                p.requests.remove(&id);
            }
        }
        if let Some(live) = p.requests.get_mut(&id) {
            live.cursor_ns = live.cursor_ns.max(at);
            self.latest_ns = self.latest_ns.max(live.cursor_ns);
        } else {
            self.latest_ns = self.latest_ns.max(at);
        }
    }

    /// Close every open span at `at_ns` with args `{flag: true}`: `continued` at the tail of
    /// a file that a rotation ends ([`Self::reopen`] opens them again in the next file),
    /// `unfinished` at the clean end of a run cut short.
    pub fn close_all(&mut self, at_ns: u64, flag: &str, out: &mut Vec<Value>) {
        let cont = || json!({flag: true});
        for (&pid, p) in self.processes.iter_mut() {
            for (&id, live) in p.requests.iter_mut() {
                live.resume(pid, id, out);
                if let Some(name) = live.inner {
                    out.push(span("e", pid, id, name, at_ns, cont()));
                }
                out.push(span("e", pid, id, &format!("request {id}"), at_ns, cont()));
            }
        }
    }

    /// Open again, at `at_ns`, the spans [`Self::close_all`] closed (the head of the next
    /// file), and move every request's cursor there.
    pub fn reopen(&mut self, at_ns: u64, out: &mut Vec<Value>) {
        for (&pid, p) in self.processes.iter_mut() {
            for (&id, live) in p.requests.iter_mut() {
                let args = json!({"prompt_tokens": live.prompt_tokens, "continued": true});
                out.push(span("b", pid, id, &format!("request {id}"), at_ns, args));
                if let Some(name) = live.inner {
                    out.push(span("b", pid, id, name, at_ns, json!({"continued": true})));
                }
                live.cursor_ns = live.cursor_ns.max(at_ns);
            }
        }
    }
}

/// Nanoseconds from `origin` to `t` (0 before it).
fn ns_since(origin: Instant, t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(origin).as_nanos()).unwrap_or(u64::MAX / 4)
}

/// One async event (`b` begin, `e` end, `n` instant) of request `id` at `ns`.
fn span(ph: &str, pid: u32, id: usize, name: &str, ns: u64, args: Value) -> Value {
    json!({"name": name, "cat": REQUEST_CAT, "ph": ph, "id": id, "ts": us(ns), "pid": pid, "tid": STEP_TID, "args": args})
}

#[cfg(test)]
mod tests;

//! A trace's events gathered per engine run (process) for drawing: step phases, the KV
//! blocks counter, and each request's spans paired from its `b`/`e` events.
use crate::trace::read::{Event, EventId};
use std::collections::BTreeMap;

/// One request's spans, as (name, start µs, end µs).
pub type Spans = Vec<(String, f64, f64)>;

/// One engine run of the trace.
#[derive(Debug, Default)]
pub struct Run {
    /// Its process name ("nanollm serve", "concurrency 4" …; empty when unnamed).
    pub name: String,
    /// (phase: 0 schedule, 1 forward, 2 sample; start µs, end µs) of every step phase.
    pub phases: Vec<(usize, f64, f64)>,
    /// (µs, used, cached) of every "KV blocks" counter.
    pub blocks: Vec<(f64, f64, f64)>,
    /// Requests by id, in order of first appearance.
    pub requests: Vec<(EventId, Spans)>,
}

/// The runs of `events` by pid, and the trace's first and last time (µs). Each (pid, id)'s
/// `b`/`e` events are paired into spans (an `e` closes the latest open span of its name;
/// one left open ends with the trace).
pub fn gather(events: &[Event]) -> (BTreeMap<u64, Run>, f64, f64) {
    let mut runs: BTreeMap<u64, Run> = BTreeMap::new();
    let mut open: BTreeMap<(u64, EventId), Vec<(String, f64)>> = BTreeMap::new();
    let (mut t0, mut t1) = (f64::INFINITY, f64::NEG_INFINITY);
    for e in events {
        if !e.ts.is_finite() || !e.dur.is_finite() {
            continue;
        }
        let run = runs.entry(e.pid).or_default();
        if e.ph != "M" {
            t0 = t0.min(e.ts);
            t1 = t1.max(e.ts + e.dur.max(0.0));
        }
        match e.ph.as_str() {
            "M" if e.name == "process_name" => {
                run.name = e.args.name.clone().unwrap_or_default();
            }
            "X" => {
                let phase = match e.name.as_str() {
                    "schedule" => 0,
                    "forward" => 1,
                    "sample" => 2,
                    _ => continue,
                };
                run.phases.push((phase, e.ts, e.ts + e.dur.max(0.0)));
            }
            "C" if e.name == "KV blocks" => {
                let (u, c) = (e.args.used.unwrap_or(0.0), e.args.cached.unwrap_or(0.0));
                run.blocks.push((e.ts, u, c));
            }
            "b" | "e" => {
                let Some(id) = e.id.clone() else { continue };
                if !run.requests.iter().any(|(r, _)| *r == id) {
                    run.requests.push((id.clone(), Vec::new()));
                }
                let stack = open.entry((e.pid, id.clone())).or_default();
                if e.ph == "b" {
                    stack.push((e.name.clone(), e.ts));
                } else if let Some(k) = stack.iter().rposition(|(n, _)| *n == e.name) {
                    let (name, start) = stack.remove(k);
                    if let Some((_, spans)) = run.requests.iter_mut().find(|(r, _)| *r == id) {
                        spans.push((name, start, e.ts));
                    }
                }
            }
            _ => {}
        }
    }
    for ((pid, id), stack) in open {
        if let Some(run) = runs.get_mut(&pid) {
            if let Some((_, spans)) = run.requests.iter_mut().find(|(r, _)| *r == id) {
                spans.extend(stack.into_iter().map(|(n, s)| (n, s, t1)));
            }
        }
    }
    runs.retain(|_, r| !r.phases.is_empty() || !r.blocks.is_empty() || !r.requests.is_empty());
    (runs, t0, t1)
}

//! The formatter on a known sequence of engine events: spans of one request nest even when
//! a chunk's step began before the request was admitted, a preemption ends the decode span,
//! decode resumes after a recompute's last chunk, and steps hold their phases.
use super::*;
use crate::engine::trace::{RequestEvent, RequestPhase, StepTrace, TraceEvent};
use crate::engine::FinishReason;
use std::time::Duration;

fn at(origin: Instant, us: u64) -> Instant {
    origin + Duration::from_micros(us)
}

fn req(origin: Instant, us: u64, phase: RequestPhase) -> TraceEvent {
    TraceEvent::Request(RequestEvent {
        seq_id: 7,
        at: at(origin, us),
        phase,
    })
}

#[test]
fn a_requests_spans_nest_and_steps_hold_their_phases() {
    let o = Instant::now();
    let step = StepTrace {
        step: 1,
        start: at(o, 100),
        schedule: Duration::from_micros(10),
        forward: Duration::from_micros(80),
        sample: Duration::from_micros(10),
        batch_size: 1,
        decode_seqs: 0,
        prefill_seqs: 1,
        tokens: 16,
        prefill_tokens: 16,
        blocks_used: 1,
        blocks_cached: 0,
        bytes_allocated: 4096,
        bytes_held: 4096,
    };
    let events = [
        req(o, 50, RequestPhase::Queued { prompt_tokens: 16 }),
        // Admitted in step 1's schedule, after the step began (at 100).
        req(o, 105, RequestPhase::Admitted { cached_tokens: 0 }),
        req(
            o,
            100,
            RequestPhase::PrefillChunk {
                step: 1,
                index: 1,
                of: 1,
                start_pos: 0,
                tokens: 16,
                end: at(o, 200),
            },
        ),
        TraceEvent::Step(step),
        req(o, 195, RequestPhase::FirstToken),
        req(o, 300, RequestPhase::Preempted),
        req(o, 400, RequestPhase::Admitted { cached_tokens: 16 }),
        // The recompute (prompt and the token generated so far) in two chunks; decode
        // resumes after the second, with no event of its own.
        req(
            o,
            400,
            RequestPhase::PrefillChunk {
                step: 3,
                index: 1,
                of: 2,
                start_pos: 16,
                tokens: 1,
                end: at(o, 420),
            },
        ),
        req(
            o,
            430,
            RequestPhase::PrefillChunk {
                step: 4,
                index: 2,
                of: 2,
                start_pos: 17,
                tokens: 1,
                end: at(o, 450),
            },
        ),
        req(
            o,
            500,
            RequestPhase::Finished {
                reason: FinishReason::Length,
                generated_tokens: 2,
            },
        ),
    ];
    let mut f = Formatter::new(o);
    let mut out = Vec::new();
    f.add_process(1, "test", &mut out);
    f.format(1, &events, &mut out);
    let named = |ph: &str| -> Vec<(String, f64)> {
        out.iter()
            .filter(|v| v["ph"] == ph && v["cat"] == REQUEST_CAT)
            .map(|v| {
                (
                    v["name"].as_str().unwrap_or("").to_string(),
                    v["ts"].as_f64().unwrap_or(-1.0),
                )
            })
            .collect()
    };
    let (b, e) = (named("b"), named("e"));
    // In file order, each `e` closes the latest open span (LIFO), times never go back.
    let mut stack: Vec<String> = Vec::new();
    let mut last = 0.0;
    for v in out.iter().filter(|v| v["cat"] == REQUEST_CAT) {
        let (name, ts) = (
            v["name"].as_str().unwrap_or(""),
            v["ts"].as_f64().unwrap_or(-1.0),
        );
        assert!(ts >= last, "{name} at {ts} before {last}");
        last = ts;
        match v["ph"].as_str() {
            Some("b") => stack.push(name.to_string()),
            _ => assert_eq!(stack.pop().as_deref(), Some(name)),
        }
    }
    assert!(stack.is_empty(), "{stack:?}");
    let names: Vec<&str> = b.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "request 7",
            "queued",
            "prefill chunk 1/1",
            "decode",
            "preempted",
            "prefill chunk 1/2",
            "prefill chunk 2/2",
            "decode"
        ]
    );
    assert_eq!(b[7].1, 450.0);
    // The chunk starts at the admission (105 µs), not at its step's start (100 µs).
    assert_eq!(b[2].1, 105.0);
    assert_eq!(e.len(), b.len());
    let step: Vec<_> = out.iter().filter(|v| v["ph"] == "X").collect();
    assert_eq!(step.len(), 4);
    assert_eq!(
        (step[0]["ts"].as_f64(), step[0]["dur"].as_f64()),
        (Some(100.0), Some(100.0))
    );
    assert_eq!(step[3]["name"], "sample");
    assert_eq!(step[3]["ts"].as_f64(), Some(190.0));
    let counters: Vec<_> = out.iter().filter(|v| v["ph"] == "C").collect();
    assert_eq!(counters.len(), 2);
    assert_eq!(counters[0]["args"]["used"], 1);
}

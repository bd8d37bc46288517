//! The SVG timeline of a small known trace: two requests (one preempted and re-admitted),
//! three steps, the blocks counter.
use super::*;
use crate::trace::read::parse_trace;

const TRACE: &str = r#"[
{"name":"process_name","ph":"M","ts":0,"pid":1,"tid":0,"args":{"name":"nanollm run-batch"}},
{"name":"request 0","cat":"request","ph":"b","id":0,"ts":0,"pid":1,"tid":1,"args":{"prompt_tokens":20}},
{"name":"queued","cat":"request","ph":"b","id":0,"ts":0,"pid":1,"tid":1,"args":{}},
{"name":"queued","cat":"request","ph":"e","id":0,"ts":10,"pid":1,"tid":1,"args":{"cached_tokens":0}},
{"name":"prefill chunk 1/1","cat":"request","ph":"b","id":0,"ts":10,"pid":1,"tid":1,"args":{}},
{"name":"prefill chunk 1/1","cat":"request","ph":"e","id":0,"ts":1000,"pid":1,"tid":1,"args":{}},
{"name":"step 1","ph":"X","ts":0,"dur":1000,"pid":1,"tid":1,"args":{"batch_size":1}},
{"name":"schedule","ph":"X","ts":0,"dur":100,"pid":1,"tid":1,"args":{}},
{"name":"forward","ph":"X","ts":100,"dur":800,"pid":1,"tid":1,"args":{}},
{"name":"sample","ph":"X","ts":900,"dur":100,"pid":1,"tid":1,"args":{}},
{"name":"KV blocks","ph":"C","ts":1000,"pid":1,"tid":1,"args":{"used":2,"cached":0}},
{"name":"decode","cat":"request","ph":"b","id":0,"ts":1000,"pid":1,"tid":1,"args":{}},
{"name":"request 1","cat":"request","ph":"b","id":1,"ts":1100,"pid":1,"tid":1,"args":{"prompt_tokens":4}},
{"name":"decode","cat":"request","ph":"e","id":0,"ts":1500,"pid":1,"tid":1,"args":{}},
{"name":"preempted","cat":"request","ph":"b","id":0,"ts":1500,"pid":1,"tid":1,"args":{}},
{"name":"step 2","ph":"X","ts":1000,"dur":1000,"pid":1,"tid":1,"args":{}},
{"name":"forward","ph":"X","ts":1000,"dur":1000,"pid":1,"tid":1,"args":{}},
{"name":"KV blocks","ph":"C","ts":2000,"pid":1,"tid":1,"args":{"used":1,"cached":1}},
{"name":"preempted","cat":"request","ph":"e","id":0,"ts":2500,"pid":1,"tid":1,"args":{}},
{"name":"request 0","cat":"request","ph":"e","id":0,"ts":3000,"pid":1,"tid":1,"args":{"finish_reason":"abort"}},
"#;

#[test]
fn a_small_trace_draws_every_lane() -> anyhow::Result<()> {
    let events = parse_trace(TRACE.as_bytes(), 100)?;
    let svg = render(&events, "t <&>");
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    assert!(svg.contains("t &lt;&amp;&gt;"));
    for lane in [
        "nanollm run-batch",
        ">steps<",
        ">KV blocks<",
        ">request 0<",
        ">request 1<",
    ] {
        assert!(svg.contains(lane), "no {lane}");
    }
    // Request 0: its prefill chunk, decode and preemption; request 1, never ended, is drawn
    // to the end of the trace (its outer span only).
    for (colour, what) in [
        (PREFILL, "prefill chunk 1/1"),
        (DECODE, "decode"),
        (PREEMPTED, "preempted"),
        (QUEUED, "queued"),
    ] {
        let rect = format!(r#"fill="{colour}"><title>{what}</title>"#);
        assert_eq!(svg.matches(&rect).count(), 1, "{what}");
    }
    // The steps lane: every phase coloured (beyond its legend square); the blocks lane: two
    // areas.
    for colour in [SCHEDULE, FORWARD, SAMPLE] {
        let columns = svg.matches(r#"width="1" height=""#).count();
        let coloured = svg.matches(&format!(r#"fill="{colour}"/>"#)).count();
        assert!(columns > 0 && coloured > 1, "{colour}: {coloured}");
    }
    assert_eq!(svg.matches("<path d=\"M").count(), 2);
    Ok(())
}

#[test]
fn the_request_lanes_are_capped() -> anyhow::Result<()> {
    let mut text = String::from("[");
    for id in 0..(MAX_REQUEST_LANES + 5) {
        text += &format!(
            r#"{{"name":"request {id}","cat":"request","ph":"b","id":{id},"ts":{id},"pid":1,"tid":1}},{{"name":"request {id}","cat":"request","ph":"e","id":{id},"ts":{},"pid":1,"tid":1}},"#,
            id + 1
        );
    }
    let events = parse_trace(text.as_bytes(), 10_000)?;
    let svg = render(&events, "many");
    assert_eq!(svg.matches(">request ").count(), MAX_REQUEST_LANES);
    assert!(svg.contains("5 more requests not drawn"));
    Ok(())
}

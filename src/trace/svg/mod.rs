//! A trace as an SVG timeline (`nanollm trace-svg`), in the style of `bench --plot`'s
//! charts: for each engine run (process), a lane of the engine's steps (schedule, forward
//! and sample coloured), the KV blocks counter as an area (used, and cached on top), and one
//! lane per request (queued, prefill chunks, decode, preempted), against one time axis.
//!
//! The picture stays small whatever the trace: steps and blocks are drawn per pixel column
//! (a column's height is the share of its time each phase took, exact when steps are wider
//! than a pixel), and at most [`MAX_REQUEST_LANES`] requests get a lane.
use crate::trace::lanes::{gather, Run};
use crate::trace::read::{Event, EventId};
use std::fmt::Write;

const WIDTH: f64 = 960.0;
const LEFT: f64 = 130.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 70.0;
const STEP_LANE: f64 = 26.0;
const BLOCK_LANE: f64 = 60.0;
const REQUEST_LANE: f64 = 14.0;
const GAP: f64 = 10.0;

/// Most requests drawn, each in its lane (the rest are counted under the chart).
pub const MAX_REQUEST_LANES: usize = 64;

/// Colours (Okabe–Ito, colour-blind safe) of the step phases and request spans.
const SCHEDULE: &str = "#e69f00";
const FORWARD: &str = "#0072b2";
const SAMPLE: &str = "#009e73";
const QUEUED: &str = "#bbbbbb";
const PREFILL: &str = "#d55e00";
const DECODE: &str = "#56b4e9";
const PREEMPTED: &str = "#cc79a7";
const USED: &str = "#0072b2";
const CACHED: &str = "#9ecae1";

/// Escape text for XML content and attributes.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A tick step of 1, 2 or 5 × 10^k giving about 8 ticks over `range`.
fn tick_step(range: f64) -> f64 {
    let raw = (range / 8.0).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    let unit = raw / mag;
    mag * [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .find(|&n| unit <= n)
        .unwrap_or(10.0)
}

/// The colour of a request span by its name (None: the outer "request N" span).
fn span_colour(name: &str) -> Option<&'static str> {
    match name {
        "queued" => Some(QUEUED),
        "decode" => Some(DECODE),
        "preempted" => Some(PREEMPTED),
        n if n.starts_with("prefill chunk") => Some(PREFILL),
        _ => None,
    }
}

/// The timeline of `events` as an SVG document, `title` on top.
pub fn render(events: &[Event], title: &str) -> String {
    let (runs, t0, t1) = gather(events);
    let (t0, t1) = if t0.is_finite() && t1 > t0 {
        (t0, t1)
    } else {
        (0.0, 1.0)
    };
    let pw = WIDTH - LEFT - RIGHT;
    let cols = pw as usize;
    let sx = |t: f64| LEFT + (t - t0) / (t1 - t0) * pw;
    let lanes: usize = runs
        .values()
        .map(|r| r.requests.len().min(MAX_REQUEST_LANES))
        .sum();
    let height = TOP
        + runs.len() as f64 * (STEP_LANE + BLOCK_LANE + 3.0 * GAP + 18.0)
        + lanes as f64 * REQUEST_LANE
        + 70.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="24" font-size="16" font-weight="bold">{}</text>"#,
        escape(title)
    );
    legend(&mut s);
    let mut y = TOP;
    let mut omitted = 0;
    for run in runs.values() {
        let _ = writeln!(
            s,
            r#"<text x="10" y="{:.1}" font-weight="bold">{}</text>"#,
            y + 12.0,
            escape(if run.name.is_empty() {
                "engine"
            } else {
                &run.name
            })
        );
        y += 18.0;
        lane_label(&mut s, y, STEP_LANE, "steps");
        steps_lane(&mut s, run, y, cols, t0, t1);
        y += STEP_LANE + GAP;
        lane_label(&mut s, y, BLOCK_LANE, "KV blocks");
        blocks_lane(&mut s, run, y, cols, t0, t1);
        y += BLOCK_LANE + GAP;
        for (id, spans) in run.requests.iter().take(MAX_REQUEST_LANES) {
            let label = match id {
                EventId::Num(n) => format!("request {n}"),
                EventId::Str(t) => format!("request {t}"),
            };
            lane_label(&mut s, y, REQUEST_LANE, &label);
            for (name, a, b) in spans {
                let (x0, x1) = (sx(*a), sx(*b));
                let w = (x1 - x0).max(0.5);
                match span_colour(name) {
                    Some(c) => {
                        let _ = writeln!(
                            s,
                            r#"<rect x="{x0:.2}" y="{:.1}" width="{w:.2}" height="{:.1}" fill="{c}"><title>{}</title></rect>"#,
                            y + 2.0,
                            REQUEST_LANE - 4.0,
                            escape(name)
                        );
                    }
                    None => {
                        let _ = writeln!(
                            s,
                            r##"<rect x="{x0:.2}" y="{:.1}" width="{w:.2}" height="{:.1}" fill="none" stroke="#333" stroke-width="0.6"/>"##,
                            y + 1.0,
                            REQUEST_LANE - 2.0
                        );
                    }
                }
            }
            y += REQUEST_LANE;
        }
        omitted += run.requests.len().saturating_sub(MAX_REQUEST_LANES);
        y += GAP;
    }
    axis(&mut s, y, t0, t1);
    if omitted > 0 {
        let _ = writeln!(
            s,
            r##"<text x="{LEFT}" y="{:.1}" fill="#555">{omitted} more requests not drawn (at most {MAX_REQUEST_LANES} lanes per run)</text>"##,
            y + 44.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn lane_label(s: &mut String, y: f64, h: f64, text: &str) {
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
        LEFT - 6.0,
        y + h / 2.0 + 4.0,
        escape(text)
    );
}

/// Per pixel column, the share of its time each step phase took, stacked.
fn steps_lane(s: &mut String, run: &Run, y: f64, cols: usize, t0: f64, t1: f64) {
    let col_us = (t1 - t0) / cols as f64;
    let order = [SCHEDULE, FORWARD, SAMPLE];
    let mut busy = vec![[0f64; 3]; cols];
    for &(k, a, b) in &run.phases {
        let k = k.min(2);
        let first = (((a - t0) / col_us).floor().max(0.0) as usize).min(cols - 1);
        let last = (((b - t0) / col_us).floor().max(0.0) as usize).min(cols - 1);
        for (c, col) in busy.iter_mut().enumerate().take(last + 1).skip(first) {
            let (lo, hi) = (t0 + c as f64 * col_us, t0 + (c + 1) as f64 * col_us);
            col[k] += (b.min(hi) - a.max(lo)).max(0.0) / col_us;
        }
    }
    for (c, col) in busy.iter().enumerate() {
        let mut top = y + STEP_LANE;
        for (k, share) in col.iter().enumerate() {
            let h = share.min(1.0) * STEP_LANE;
            if h < 0.05 {
                continue;
            }
            top -= h;
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{top:.2}" width="1" height="{h:.2}" fill="{}"/>"#,
                LEFT + c as f64,
                order[k]
            );
        }
    }
}

/// The "KV blocks" counter as two step areas (used, cached on top), its last value in each
/// pixel column.
fn blocks_lane(s: &mut String, run: &Run, y: f64, cols: usize, t0: f64, t1: f64) {
    let top = run.blocks.iter().map(|b| b.1 + b.2).fold(1f64, f64::max);
    let mut col = vec![None; cols];
    let col_us = (t1 - t0) / cols as f64;
    for &(t, u, c) in &run.blocks {
        let k = (((t - t0) / col_us).floor().max(0.0) as usize).min(cols - 1);
        col[k] = Some((u, c));
    }
    let (mut used, mut both) = (String::new(), String::new());
    let mut last = (0.0, 0.0);
    for (k, v) in col.iter().enumerate() {
        if let Some(v) = v {
            last = *v;
        }
        let x = LEFT + k as f64;
        let yu = y + BLOCK_LANE - last.0 / top * BLOCK_LANE;
        let yb = y + BLOCK_LANE - (last.0 + last.1) / top * BLOCK_LANE;
        let _ = write!(used, " L{x:.1} {yu:.2} L{:.1} {yu:.2}", x + 1.0);
        let _ = write!(both, " L{x:.1} {yb:.2} L{:.1} {yb:.2}", x + 1.0);
    }
    let base = y + BLOCK_LANE;
    let end = LEFT + cols as f64;
    for (path, colour) in [(both, CACHED), (used, USED)] {
        let _ = writeln!(
            s,
            r#"<path d="M{LEFT} {base:.1}{path} L{end:.1} {base:.1} Z" fill="{colour}"/>"#
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" fill="#555">{top:.0}</text>"##,
        end + 4.0,
        y + 10.0
    );
}

/// The time axis under the lanes, in ms.
fn axis(s: &mut String, y: f64, t0: f64, t1: f64) {
    let span_ms = (t1 - t0) / 1e3;
    let step = tick_step(span_ms);
    let pw = WIDTH - LEFT - RIGHT;
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#333"/>"##,
        LEFT + pw
    );
    let mut t = 0.0;
    while t <= span_ms + step * 1e-9 {
        let x = LEFT + t / span_ms.max(1e-9) * pw;
        let label = format!("{t:.3}");
        let label = label.trim_end_matches('0').trim_end_matches('.');
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
            y + 14.0
        );
        t += step;
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time since the trace began (ms)</text>"#,
        LEFT + pw / 2.0,
        y + 30.0
    );
}

fn legend(s: &mut String) {
    let items = [
        (SCHEDULE, "schedule"),
        (FORWARD, "forward"),
        (SAMPLE, "sample"),
        (QUEUED, "queued"),
        (PREFILL, "prefill chunk"),
        (DECODE, "decode"),
        (PREEMPTED, "preempted"),
        (USED, "blocks used"),
        (CACHED, "blocks cached"),
    ];
    let mut x = LEFT;
    for (colour, label) in items {
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="38" width="10" height="10" fill="{colour}"/><text x="{:.1}" y="47">{label}</text>"#,
            x + 13.0
        );
        x += 20.0 + 5.6 * label.len() as f64;
    }
}

#[cfg(test)]
mod tests;

//! The serving benchmarks' step chart (`bench --concurrency … --plot FILE.svg`): for each run
//! (a concurrency level, or a scenario's setting), every engine step's latency and batch
//! size against the step index, in two panels sharing the x axis. Written by hand, as the
//! decode-mode chart ([`crate::bench::svg`]).
use crate::bench::svg::{escape, nice_step, tick_label};
use crate::engine::llm_engine::StepRecord;
use std::fmt::Write;

const WIDTH: f64 = 960.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 60.0;
const PANEL: f64 = 220.0;
const GAP: f64 = 50.0;

/// Line colours (Okabe–Ito, colour-blind safe), cycled.
const COLORS: [&str; 7] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000",
];

/// One panel: y ticks (whole numbers only when `whole`: counts), grid, the x axis ticks
/// (engine steps: whole numbers), and one polyline per run of `value(step)`.
#[allow(clippy::too_many_arguments)]
fn panel(
    s: &mut String,
    runs: &[(String, &[StepRecord])],
    top: f64,
    x_max: f64,
    y_label: &str,
    whole: bool,
    value: impl Fn(&StepRecord) -> f64,
) {
    let pw = WIDTH - LEFT - RIGHT;
    let y_top = runs
        .iter()
        .flat_map(|(_, st)| st.iter().map(&value))
        .fold(0f64, f64::max)
        .max(1e-9);
    let y_step = match whole {
        true => nice_step(y_top, 4).max(1.0),
        false => nice_step(y_top, 4),
    };
    let y_max = (y_top / y_step).ceil().max(1.0) * y_step;
    let sx = |x: f64| LEFT + x / x_max.max(1.0) * pw;
    let sy = |y: f64| top + PANEL - y / y_max * PANEL;
    let mut y = 0.0;
    while y <= y_max + y_step * 1e-9 {
        let py = sy(y);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e5e5e5"/>"##,
            LEFT + pw
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            py + 4.0,
            tick_label(y)
        );
        y += y_step;
    }
    let x_step = nice_step(x_max, 8).max(1.0);
    let mut x = 0.0;
    while x <= x_max + x_step * 1e-9 {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            sx(x),
            top + PANEL + 16.0,
            tick_label(x)
        );
        x += x_step;
    }
    let _ = writeln!(
        s,
        r##"<path d="M{LEFT} {top} V{:.1} H{:.1}" fill="none" stroke="#333"/>"##,
        top + PANEL,
        LEFT + pw
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(22 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        top + PANEL / 2.0,
        escape(y_label)
    );
    for (i, (_, steps)) in runs.iter().enumerate() {
        let pts: Vec<String> = steps
            .iter()
            .enumerate()
            .map(|(k, st)| format!("{:.1},{:.1}", sx(k as f64), sy(value(st))))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.4" points="{}"/>"#,
            COLORS[i % COLORS.len()],
            pts.join(" ")
        );
    }
}

/// The chart as an SVG document: step latency (ms) on top, batch size (sequences) below,
/// both against the step index, one colour per run (legend on the right).
pub fn render(runs: &[(String, &[StepRecord])], title: &str, subtitle: &str) -> String {
    let x_max = runs
        .iter()
        .map(|(_, s)| s.len())
        .max()
        .unwrap_or(1)
        .saturating_sub(1)
        .max(1) as f64;
    let height = TOP + 2.0 * PANEL + GAP + 50.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="24" font-size="16" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="42" fill="#555">{}</text>"##,
        escape(subtitle)
    );
    panel(&mut s, runs, TOP, x_max, "step latency (ms)", false, |st| {
        st.ms
    });
    let bottom = TOP + PANEL + GAP;
    panel(
        &mut s,
        runs,
        bottom,
        x_max,
        "batch size (sequences)",
        true,
        |st| st.batch_size as f64,
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">engine step</text>"#,
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        bottom + PANEL + 36.0
    );
    for (i, (label, _)) in runs.iter().enumerate() {
        let (x, y) = (WIDTH - RIGHT + 20.0, TOP + 10.0 + 20.0 * i as f64);
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{y}" x2="{:.1}" y2="{y}" stroke="{}" stroke-width="2"/>"#,
            x + 24.0,
            COLORS[i % COLORS.len()]
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            x + 30.0,
            y + 4.0,
            escape(label)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_polyline_per_run_and_panel() {
        let st = |ms, b| StepRecord {
            batch_size: b,
            decode_seqs: b,
            tokens: b,
            prefill_tokens: 0,
            ms,
            blocks_used: 0,
            ..Default::default()
        };
        let a = [st(5.0, 1), st(6.0, 1)];
        let b = [st(9.0, 4), st(12.0, 4), st(11.0, 3)];
        let svg = render(
            &[
                ("concurrency 1".into(), &a[..]),
                ("concurrency 4 <&>".into(), &b[..]),
            ],
            "t",
            "s",
        );
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert!(svg.contains("concurrency 4 &lt;&amp;&gt;"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    }
}

//! `--show-stats`' speculative decoding lines: the method, acceptance (overall and per draft
//! position), tokens per verify step, what a verify step cost against a one-token step, and
//! the draft model's time.
use crate::engine::spec::SpecReport;

/// The lines, as (label, value).
pub fn spec_lines(r: &SpecReport) -> Vec<(&'static str, String)> {
    let rule = if r.forced {
        "every draft verified (--spec-force)"
    } else {
        "turn-down rule on"
    };
    let mut lines = vec![("speculative", format!("{}, k {}, {rule}", r.method, r.k))];
    let c = &r.counts;
    match (r.acceptance_rate, r.mean_accepted_length) {
        (Some(rate), Some(len)) => {
            lines.push((
                "spec acceptance",
                format!(
                    "{:.1}%: {} of {} draft tokens in {} verify steps, {len:.2} tokens per verify step",
                    100.0 * rate,
                    c.num_accepted_tokens,
                    c.num_draft_tokens,
                    c.num_drafts
                ),
            ));
            let per_pos: Vec<String> = c
                .num_accepted_tokens_per_pos
                .iter()
                .zip(&c.num_draft_tokens_per_pos)
                .map(|(&a, &d)| format!("{:.0}% ({a}/{d})", 100.0 * a as f64 / d.max(1) as f64))
                .collect();
            lines.push(("spec by position", per_pos.join(", ")));
        }
        _ => lines.push(("spec acceptance", "no draft verified".into())),
    }
    let cost = match r.verify_cost() {
        Some(x) => format!(
            "verify step {:.2} ms ({:.1} rows) against a one-token step {:.2} ms: {x:.2}×",
            r.verify_step_ms, r.verify_rows, r.one_token_step_ms
        ),
        None if r.verify_steps > 0 => format!(
            "verify step {:.2} ms ({:.1} rows); no one-token step to compare",
            r.verify_step_ms, r.verify_rows
        ),
        None => format!(
            "one-token step {:.2} ms; no verify step",
            r.one_token_step_ms
        ),
    };
    lines.push(("spec verify cost", cost));
    if r.draft_ms > 0.0 && c.num_draft_tokens > 0 {
        lines.push((
            "spec draft model",
            format!(
                "{:.1} ms proposing {} drafts ({:.2} ms each), of which {:.1} ms catching up over {} rows (the prompt, tokens missed while idle)",
                r.draft_ms,
                c.num_draft_tokens,
                (r.draft_ms - r.draft_catch_up_ms).max(0.0) / c.num_draft_tokens.max(1) as f64,
                r.draft_catch_up_ms,
                r.draft_catch_up_rows
            ),
        ));
    }
    if r.turned_down_steps > 0 {
        lines.push((
            "spec turned down",
            format!(
                "{} steps had drafts the rule did not verify (acceptance too low to pay)",
                r.turned_down_steps
            ),
        ));
    }
    lines
}

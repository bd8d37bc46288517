//! The chat scenario (`nanollm bench --scenario chat`): a conversation of `--turns` user
//! turns, re-sending the whole history each turn (rendered with the model's chat template,
//! as a chat client does), with the prefix cache on and then off. Only blocks wholly inside
//! a previous prompt are cached (design rule R1: generated rows ran on other kernels), so
//! each turn recomputes the previous reply once, as prompt.
use super::prefix::{run_sequential, TurnResult};
use crate::bench::serving::BenchRequest;
use crate::engine::llm_engine::EngineConfig;
use crate::model::chat::encode_chat_messages;
use crate::model::chat::Message;
use crate::model::Loaded;
use anyhow::{bail, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use serde::Serialize;
use std::sync::atomic::AtomicBool;

/// The chat scenario's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ChatPlan {
    /// User turns.
    pub turns: usize,
    /// Most tokens per reply (a reply ends earlier at the model's end of turn).
    pub gen_len: usize,
}

impl ChatPlan {
    /// Errors, one line naming the flag: 0 turns or 0 tokens per reply.
    pub fn validate(&self) -> Result<()> {
        if self.turns == 0 {
            bail!("--turns 0: must be at least 1");
        }
        if self.gen_len == 0 {
            bail!("--gen-len 0: must be at least 1 token");
        }
        Ok(())
    }
}

/// Results of the chat scenario: per turn, cache on and off.
#[derive(Debug, Clone, Serialize)]
pub struct ChatResult {
    /// Settings.
    pub plan: ChatPlan,
    /// Per turn, prefix cache on.
    pub on: Vec<TurnResult>,
    /// Per turn, prefix cache off.
    pub off: Vec<TurnResult>,
    /// Whether every reply was the same with the cache on and off.
    pub identical: bool,
}

/// The user's questions, in order (cycled past the end).
const QUESTIONS: [&str; 8] = [
    "What is a KV cache in a transformer?",
    "Why does it grow with the context length?",
    "How much memory does it take for a small model?",
    "What is paged attention?",
    "How does prefix caching save time?",
    "What is continuous batching?",
    "Why is decoding memory-bound?",
    "Summarize what we discussed in two sentences.",
];

/// Run the chat scenario; None when interrupted.
///
/// Errors: a model without a chat template, 0 turns or tokens, engine failures.
pub fn chat(
    model: &Loaded,
    config: EngineConfig,
    plan: ChatPlan,
    interrupt: &AtomicBool,
    trace: Option<&crate::trace::Tracer>,
) -> Result<Option<ChatResult>> {
    plan.validate()?;
    if model.chat_template.is_none() {
        bail!("--scenario chat: this model has no chat template");
    }
    let run = |enable: bool| {
        let mut c = config;
        c.scheduler.enable_prefix_caching = enable;
        // The disk tier is a tier of the prefix cache: off with it.
        if !enable {
            c.offload = None;
        }
        let mut messages: Vec<Message> = Vec::new();
        let name = format!("chat, prefix cache {}", if enable { "on" } else { "off" });
        let sender = trace.map(|t| t.process(&name));
        run_sequential(
            model,
            c,
            "chat turn",
            interrupt,
            sender.as_ref(),
            |i, prev| {
                if let Some(p) = prev {
                    messages.push(Message {
                        role: "assistant".into(),
                        content: p.generation.text.clone(),
                    });
                }
                if i >= plan.turns {
                    return Ok(None);
                }
                messages.push(Message {
                    role: "user".into(),
                    content: QUESTIONS[i % QUESTIONS.len()].into(),
                });
                let prompt_ids = encode_chat_messages(model, &messages)?;
                let needed = prompt_ids.len().saturating_add(plan.gen_len);
                if needed > c.max_model_len {
                    bail!(
                    "--scenario chat: turn {} re-sends {} tokens of history, and with --gen-len {} that is {needed} tokens, past --max-model-len {}: give fewer --turns or a shorter --gen-len",
                    i + 1,
                    prompt_ids.len(),
                    plan.gen_len,
                    c.max_model_len
                );
                }
                Ok(Some(BenchRequest {
                    prompt_ids,
                    max_tokens: plan.gen_len,
                    arrival_s: 0.0,
                    ignore_eos: false,
                    after_decoding: false,
                }))
            },
        )
    };
    let Some((on, _)) = run(true)? else {
        return Ok(None);
    };
    let Some((off, _)) = run(false)? else {
        return Ok(None);
    };
    let on: Vec<TurnResult> = on.iter().map(TurnResult::of).collect();
    let off: Vec<TurnResult> = off.iter().map(TurnResult::of).collect();
    Ok(Some(ChatResult {
        plan,
        identical: on.iter().zip(&off).all(|(a, b)| a.tokens == b.tokens),
        on,
        off,
    }))
}

/// The chat table: TTFT per turn, cache on and off.
pub fn render_chat(r: &ChatResult) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "turn",
        "prompt tokens",
        "cached tokens",
        "TTFT ms (cache on)",
        "TTFT ms (cache off)",
        "TTFT off / on",
    ]);
    for (i, (a, b)) in r.on.iter().zip(&r.off).enumerate() {
        t.add_row(vec![
            (i + 1).to_string(),
            a.prompt_tokens.to_string(),
            a.cached_tokens.to_string(),
            format!("{:.1}", a.ttft_ms),
            format!("{:.1}", b.ttft_ms),
            format!("{:.1}×", b.ttft_ms / a.ttft_ms.max(1e-9)),
        ]);
    }
    for i in 1..=5 {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    format!(
        "chat: {}, the whole history re-sent each turn, replies of at most {} tokens\n{t}\nsame replies on and off: {}\n",
        crate::units::count_of(r.plan.turns, "turn"),
        r.plan.gen_len,
        if r.identical { "yes" } else { "NO" }
    )
}

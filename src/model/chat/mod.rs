//! Chat templates: the model's own Jinja template (GGUF `tokenizer.chat_template` or
//! tokenizer_config.json `chat_template` / chat_template.jinja) rendered with minijinja the
//! way transformers renders it, and the prompt's token ids with exactly one BOS.
//!
//! transformers (`utils/chat_template_utils.py`, `_compile_jinja_template` and
//! `render_jinja_template`) renders in a sandboxed jinja2 environment with `trim_blocks` and
//! `lstrip_blocks`, loop controls, its own `tojson` (Python `json.dumps`), `raise_exception`
//! and `strftime_now`, and passes `messages`, `tools` (None), `documents` (None),
//! `add_generation_prompt` and the tokenizer's special tokens (`bos_token`, `eos_token`) plus
//! any extra keyword (`enable_thinking`). We do the same; Python string methods
//! (`.strip()`, `.split()`, `.startswith()`, ...) come from minijinja-contrib's pycompat.
//! tests/chat_templates.rs holds real models' templates to transformers' renders byte for
//! byte. [`encode_messages`] turns messages into prompt ids with message text as data.
mod encode;
pub mod gemma;
mod guard;
pub mod prompt;
mod strftime;
mod tojson;

use crate::model::Tokenizer;
use anyhow::{bail, Context, Result};
pub use encode::{encode_messages, encode_messages_with};
use minijinja::{Environment, Error, ErrorKind, Value};
pub use prompt::{apply_chat, encode_chat_messages, prompt_messages, NO_TEMPLATE_FOR_CHAT};
use serde::Serialize;
pub use strftime::DateTime;

/// One chat message, as in the OpenAI / HF `messages` list.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message text.
    pub content: String,
}

/// What a template is rendered with besides the messages.
#[derive(Debug, Clone, Default)]
pub struct ChatOptions<'a> {
    /// End with the assistant's turn header, where the answer starts.
    pub add_generation_prompt: bool,
    /// The tokenizer's BOS text (`bos_token`), if it has one; otherwise undefined in the
    /// template, as in transformers.
    pub bos_token: Option<&'a str>,
    /// The tokenizer's EOS text (`eos_token`), if it has one.
    pub eos_token: Option<&'a str>,
    /// `enable_thinking` (Qwen3, SmolLM3), when given; otherwise undefined.
    pub enable_thinking: Option<bool>,
    /// The time `strftime_now` formats, seconds since the Unix epoch (UTC); `None`: now.
    pub now_unix: Option<i64>,
}

impl<'a> ChatOptions<'a> {
    /// The options of a prompt for the assistant's answer: `add_generation_prompt = true`
    /// and the model's `bos_token` / `eos_token` texts, the rest unset (as [`render`]).
    pub fn generation(bos_token: Option<&'a str>, eos_token: Option<&'a str>) -> Self {
        ChatOptions {
            add_generation_prompt: true,
            bos_token,
            eos_token,
            ..ChatOptions::default()
        }
    }
}

/// Render `template` for `messages` with `add_generation_prompt = true`, so the text ends
/// where the assistant's answer starts, and the model's `bos_token` / `eos_token` texts.
///
/// Errors: as [`render_with`].
pub fn render(
    template: &str,
    messages: &[Message],
    bos_token: Option<&str>,
    eos_token: Option<&str>,
) -> Result<String> {
    render_with(
        template,
        messages,
        &ChatOptions::generation(bos_token, eos_token),
    )
}

/// Render `template` for `messages` as transformers' `apply_chat_template(tokenize=False)`
/// does (see the module docs).
///
/// Errors: the template does not parse, fails to render, or raises an exception
/// (`raise_exception(...)`, e.g. roles that do not alternate).
pub fn render_with(template: &str, messages: &[Message], opts: &ChatOptions) -> Result<String> {
    let mut env = Environment::new();
    // A template is code from whoever made the file: bound what it may compute and write.
    let (fuel, max_bytes) = limits(messages, opts);
    env.set_fuel(Some(fuel));
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(guard::unknown_method);
    env.add_filter("indent", guard::indent);
    env.add_filter("format", guard::format);
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        },
    );
    let now = opts.now_unix.unwrap_or_else(unix_now);
    env.add_function("strftime_now", move |format: String| {
        DateTime::from_unix(now).format(&format)
    });
    env.add_filter("tojson", tojson::tojson);
    env.add_template("chat", template)
        .context("the model's chat template does not parse")?;
    let tmpl = env
        .get_template("chat")
        .context("the model's chat template is missing")?;
    let mut ctx = vec![
        ("messages", Value::from_serialize(messages)),
        ("tools", Value::from(())),
        ("documents", Value::from(())),
        (
            "add_generation_prompt",
            Value::from(opts.add_generation_prompt),
        ),
    ];
    if let Some(b) = opts.bos_token {
        ctx.push(("bos_token", Value::from(b)));
    }
    if let Some(e) = opts.eos_token {
        ctx.push(("eos_token", Value::from(e)));
    }
    if let Some(t) = opts.enable_thinking {
        ctx.push(("enable_thinking", Value::from(t)));
    }
    let ctx: Value = ctx.into_iter().collect();
    let mut out = LimitedWriter {
        bytes: Vec::new(),
        max: max_bytes,
    };
    let rendered = tmpl.render_captured_to(ctx, &mut out).map(|_| ());
    if out.bytes.len() >= max_bytes {
        bail!(
            "the model's chat template wrote more than {max_bytes} bytes for {} messages: refused (a template that loops or repeats without end)",
            messages.len()
        );
    }
    rendered.map_err(|e| match e.kind() {
        ErrorKind::OutOfFuel => anyhow::anyhow!(
            "the model's chat template ran past {fuel} steps for {} messages: refused (a template that loops without end)",
            messages.len()
        ),
        // One line: minijinja's alternate form adds the template source and a caret.
        _ => anyhow::anyhow!("cannot render the model's chat template: {e}"),
    })?;
    String::from_utf8(out.bytes).context("the model's chat template wrote text that is not UTF-8")
}

/// Instructions a template may run (minijinja's fuel) and bytes it may write, for
/// `messages`. The real templates of tests/chat_templates.rs (Llama 3.x, Qwen2.5/3, QwQ,
/// SmolLM3, Mistral-Nemo, Phi-3.5, DeepSeek-R1 distills) used at most 259 steps for 4
/// messages, about 65 per message: the budget is 100,000 plus 1,000 per message. Output is
/// the messages' text and markup: 1 MiB plus twice the messages' bytes plus 1 KiB per message.
fn limits(messages: &[Message], opts: &ChatOptions) -> (u64, usize) {
    let text: usize = messages
        .iter()
        .map(|m| m.content.len() + m.role.len())
        .sum::<usize>()
        + opts.bos_token.map_or(0, str::len)
        + opts.eos_token.map_or(0, str::len);
    let n = messages.len();
    let fuel = 100_000u64.saturating_add(1_000u64.saturating_mul(n as u64));
    let bytes = (1usize << 20)
        .saturating_add(text.saturating_mul(2))
        .saturating_add(n.saturating_mul(1024));
    (fuel, bytes)
}

/// A writer that takes at most `max` bytes, then fails (ending the render).
struct LimitedWriter {
    bytes: Vec<u8>,
    max: usize,
}

impl std::io::Write for LimitedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.max.saturating_sub(self.bytes.len());
        if buf.len() > room {
            self.bytes.extend_from_slice(&buf[..room]);
            return Err(std::io::Error::other("output limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Seconds since the Unix epoch now (0 if the clock is before it).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Token ids of a prompt `text` (a rendered chat template or raw text) with exactly one BOS
/// at the start when the model uses one: the tokenizer prepends its BOS
/// ([`Tokenizer::encode`]), and a template that writes the BOS text itself (Llama 3's
/// `{{- bos_token }}`, Mistral's) would otherwise give two. transformers'
/// `apply_chat_template(tokenize=True)` likewise adds no special tokens to a rendered chat,
/// and llama.cpp warns about a doubled BOS. Special-token text in `text` maps to its ids
/// (raw prompts, as llama.cpp); for chat messages use [`encode_messages`].
///
/// Errors: tokenization fails.
pub fn encode_prompt(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    let ids = tokenizer.encode_with(text, false)?;
    Ok(with_model_specials(tokenizer, ids, true))
}

/// `ids` with the model's BOS before and EOS after (when it asks for them and `add`), the
/// BOS not doubled when `ids` starts with one already (see [`encode_prompt`]).
fn with_model_specials(tokenizer: &Tokenizer, ids: Vec<u32>, add: bool) -> Vec<u32> {
    if !add {
        return ids;
    }
    let mut out = Vec::with_capacity(ids.len() + 2);
    out.extend(tokenizer.add_bos);
    out.extend(ids);
    out.extend(tokenizer.add_eos);
    if let Some(bos) = tokenizer.add_bos {
        if out.len() >= 2 && out[0] == bos && out[1] == bos {
            out.remove(0);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A template that loops without end, or writes without end, is refused quickly with one
    /// line naming the limit (a GGUF's template is code from whoever made the file).
    #[test]
    fn runaway_templates_are_refused() {
        let msgs = [Message {
            role: "user".into(),
            content: "hi".into(),
        }];
        let start = std::time::Instant::now();
        let e = render(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            &msgs,
            None,
            None,
        )
        .expect_err("a loop of 10^10 steps");
        assert!(
            e.to_string()
                .contains("ran past 101000 steps for 1 messages"),
            "{e}"
        );
        let e = render(
            "{% for i in range(20000) %}{{ 'x' * 1000 }}{% endfor %}",
            &msgs,
            None,
            None,
        )
        .expect_err("20 MB of output");
        assert!(e.to_string().contains("wrote more than"), "{e}");
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn renders_chatml() -> Result<()> {
        let t = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let msgs = [Message {
            role: "user".into(),
            content: " hi ".into(),
        }];
        assert_eq!(
            render(t, &msgs, None, None)?,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        Ok(())
    }

    #[test]
    fn raise_exception_is_a_one_line_error() {
        let t = "{{ raise_exception('only user and assistant roles') }}";
        let e = format!("{:#}", render(t, &[], None, None).unwrap_err());
        assert!(e.contains("only user and assistant roles"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }

    /// Python `json.dumps` output for the same values (ensure_ascii=False).
    #[test]
    fn tojson_is_pythons_json_dumps() -> Result<()> {
        let t = r#"{{ {"name": "f", "n": [1, 2.0, true, none], "s": "é\"\n"} | tojson }}|{{ [1, {"a": "b"}] | tojson(indent=2) }}|{{ "é" | tojson(ensure_ascii=true) }}|{{ [] | tojson }}"#;
        let got = render_with(t, &[], &ChatOptions::default())?;
        assert_eq!(
            got,
            "{\"name\": \"f\", \"n\": [1, 2.0, true, null], \"s\": \"é\\\"\\n\"}|[\n  1,\n  {\n    \"a\": \"b\"\n  }\n]|\"\\u00e9\"|[]"
        );
        Ok(())
    }

    #[test]
    fn strftime_now_uses_the_pinned_time() -> Result<()> {
        let opts = ChatOptions {
            now_unix: Some(1_741_529_106),
            ..ChatOptions::default()
        };
        assert_eq!(
            render_with("{{ strftime_now('%d %b %Y') }}", &[], &opts)?,
            "09 Mar 2025"
        );
        Ok(())
    }
}

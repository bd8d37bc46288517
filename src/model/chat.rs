//! Chat templates: the model's own Jinja template (GGUF `tokenizer.chat_template` or
//! tokenizer_config.json `chat_template`) rendered with minijinja.
use anyhow::{Context, Result};
use minijinja::{context, Environment, Error, ErrorKind};
use serde::Serialize;

/// One chat message, as in the OpenAI / HF `messages` list.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message text.
    pub content: String,
}

/// Render `template` for `messages` with `add_generation_prompt = true`, so the text ends
/// where the assistant's answer starts. `bos_token` / `eos_token` are exposed to the template
/// as HF transformers does.
///
/// Errors: the template does not parse, or raises an exception (`raise_exception(...)`).
pub fn render(
    template: &str,
    messages: &[Message],
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    let mut env = Environment::new();
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        },
    );
    env.add_template("chat", template)
        .context("the model's chat template does not parse")?;
    let tmpl = env
        .get_template("chat")
        .context("the model's chat template is missing")?;
    tmpl.render(context! {
        messages => messages,
        add_generation_prompt => true,
        bos_token => bos_token,
        eos_token => eos_token,
    })
    .context("cannot render the model's chat template")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_chatml() -> Result<()> {
        let t = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let msgs = [Message {
            role: "user".into(),
            content: " hi ".into(),
        }];
        assert_eq!(
            render(t, &msgs, "", "")?,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        Ok(())
    }

    #[test]
    fn raise_exception_is_an_error() {
        let t = "{{ raise_exception('only user and assistant roles') }}";
        assert!(render(t, &[], "", "").is_err());
    }
}

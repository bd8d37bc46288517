//! The chat format of Gemma (llama.cpp's built-in `--chat-template gemma`, and Gemma 3's
//! own template): `<start_of_turn>user\n…<end_of_turn>\n<start_of_turn>model\n`, the
//! assistant's turns named `model`, a system message put before the first user message's
//! text with a blank line, every message's text trimmed. Used for a `gemma3` GGUF that ships
//! no `tokenizer.chat_template` (the real Gemma 3 270M Q4_K_M does not), as llama.cpp does.

/// The template, as Jinja for [`super::render_with`].
pub const GEMMA_CHAT_TEMPLATE: &str = concat!(
    "{{ bos_token }}",
    "{% if messages and messages[0].role == 'system' %}",
    "{% set prefix = messages[0].content | trim ~ '\\n\\n' %}{% set turns = messages[1:] %}",
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}",
    "{% for m in turns %}",
    "{{ '<start_of_turn>' ~ ('model' if m.role == 'assistant' else m.role) ~ '\\n' }}",
    "{{ prefix if loop.first else '' }}{{ m.content | trim }}{{ '<end_of_turn>\\n' }}",
    "{% endfor %}",
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}",
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::chat::{render, Message};

    fn msg(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }

    /// The text llama.cpp's `gemma` template and Gemma 3's tokenizer_config.json template
    /// give for a system message and two turns.
    #[test]
    fn renders_gemmas_turns() {
        let got = render(
            GEMMA_CHAT_TEMPLATE,
            &[
                msg("system", "Be brief. "),
                msg("user", " Hi"),
                msg("assistant", "Hello!"),
                msg("user", "Capital of France?"),
            ],
            Some("<bos>"),
            Some("<eos>"),
        )
        .expect("render");
        assert_eq!(
            got,
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nCapital of France?<end_of_turn>\n<start_of_turn>model\n"
        );
        let plain = render(
            GEMMA_CHAT_TEMPLATE,
            &[msg("user", "Hi")],
            Some("<bos>"),
            None,
        )
        .expect("render");
        assert_eq!(
            plain,
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
    }
}

//! Token attributes llama.cpp derives from token text and the model's name when it loads a
//! GGUF vocabulary (llama-vocab.cpp, `llama_vocab::impl::load`), because converters do not
//! always write them into `tokenizer.ggml.token_type`:
//!
//! - **Control-looking tokens.** A token whose text ends a turn or a generation
//!   (`<|im_end|>`, `<|endoftext|>`, `</s>`, …) is made a control token even when its type
//!   says normal; so is the first token of each fill-in-the-middle role (`<|fim_prefix|>`,
//!   `<PRE>`, …) and of the end-of-turn / end-of-message roles, for the roles the GGUF does
//!   not name by id (`tokenizer.ggml.eot_token_id`, `fim_pre_token_id`, …). So
//!   `<|endoftext|>hi` is `[0, 10320]` in llama.cpp's Aquila vocabulary, where token 0 is
//!   typed normal, and `</s>` is one token of Qwen2's.
//! - **Phi-3's right strip.** When `general.name` contains `phi-3` or `phi3`, special
//!   tokens and `</s>` swallow the whitespace after them, except `<unk>`, `<s>` and
//!   `<|endoftext|>` (`<s>Hello</s> world` → `[1, 1, 15043, 2, 3186]`: no `▁` token).

/// Texts that end generation: every token with one of them is control (llama.cpp's
/// end-of-generation list).
const END_OF_GENERATION: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Roles found by text when the GGUF does not give their id: `(metadata key, texts)`. The
/// first token (lowest id) with one of the texts becomes control.
const ROLES: &[(&str, &[&str])] = &[
    (
        "tokenizer.ggml.eot_token_id",
        &[
            "<|eot_id|>",
            "<|im_end|>",
            "<|end|>",
            "<end_of_turn>",
            "<|endoftext|>",
            "<|end_of_text|>",
            "<EOT>",
            "_<EOT>",
            "[EOT]",
            "<｜end▁of▁sentence｜>",
            "<end_of_utterance>",
        ],
    ),
    ("tokenizer.ggml.eom_token_id", &["<|eom_id|>"]),
    (
        "tokenizer.ggml.fim_pre_token_id",
        &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ],
    ),
    (
        "tokenizer.ggml.fim_suf_token_id",
        &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ],
    ),
    (
        "tokenizer.ggml.fim_mid_token_id",
        &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ],
    ),
    (
        "tokenizer.ggml.fim_pad_token_id",
        &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    ),
    (
        "tokenizer.ggml.fim_rep_token_id",
        &[
            "<|fim_repo|>",
            "<|repo_name|>",
            "<fim-repo>",
            "<REPO>",
            "<reponame>",
        ],
    ),
    ("tokenizer.ggml.fim_sep_token_id", &["<|file_sep|>"]),
];

/// The ids of the tokens llama.cpp makes control by their text (see the module docs):
/// `tokens` the vocabulary, `has_key(k)` whether the GGUF holds metadata key `k`.
pub fn control_looking(tokens: &[String], has_key: impl Fn(&str) -> bool) -> Vec<usize> {
    let mut ids: Vec<usize> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| END_OF_GENERATION.contains(&t.as_str()))
        .map(|(i, _)| i)
        .collect();
    for (key, texts) in ROLES {
        if has_key(key) {
            continue;
        }
        if let Some(i) = tokens.iter().position(|t| texts.contains(&t.as_str())) {
            ids.push(i);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Whether llama.cpp gives the special tokens of the model named `name` (`general.name`)
/// its right strip: Phi-3's.
pub fn strips_right(name: Option<&str>) -> bool {
    name.is_some_and(|n| {
        let n = n.to_lowercase();
        n.contains("phi-3") || n.contains("phi3")
    })
}

/// Under [`strips_right`], whether the special token `text` strips the whitespace after it.
pub fn rstrip(text: &str) -> bool {
    !matches!(text, "<unk>" | "<s>" | "<|endoftext|>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_looking_tokens_by_text_and_role() {
        let vocab: Vec<String> = ["a", "</s>", "<PRE>", "<|fim_prefix|>", "<|im_end|>", "b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // Every end-of-generation text; the first FIM prefix text by id.
        assert_eq!(control_looking(&vocab, |_| false), vec![1, 2, 4]);
        // The GGUF names the FIM prefix token: none is found by text.
        assert_eq!(
            control_looking(&vocab, |k| k == "tokenizer.ggml.fim_pre_token_id"),
            vec![1, 4]
        );
        assert!(strips_right(Some("Phi-3-mini-4k-instruct")));
        assert!(!strips_right(Some("SmolLM2")) && !strips_right(None));
        assert!(rstrip("</s>") && rstrip("<|end|>") && !rstrip("<s>"));
    }
}

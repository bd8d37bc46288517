//! Request fields this server knows but does not implement (OpenAI's, vLLM's and
//! llama.cpp's): refused with a 400 naming the field unless they carry their neutral value.
use super::field_error::{FieldError, Parsed};
use serde_json::{Map, Value};

/// Refuse known OpenAI fields this server does not implement when they would change the
/// answer (`logprobs`, `top_logprobs`, `echo`, `best_of` > 1, `suffix`, non-zero
/// `frequency_penalty` / `presence_penalty`, `logit_bias`, a `response_format` other than
/// text, `tools`, `tool_choice` `required` or a function), and vLLM's and llama.cpp's
/// sampling extensions likewise (`repetition_penalty` / `repeat_penalty` other than 1,
/// `min_p` > 0, `min_tokens` > 0), and vLLM's extensions that change the text
/// (`include_stop_str_in_output`, `skip_special_tokens: false`, `bad_words`,
/// `allowed_token_ids`, `prompt_logprobs`, `truncate_prompt_tokens`, `use_beam_search`,
/// `logits_processors`, guided decoding and `structured_outputs`, and the chat request's
/// `add_generation_prompt: false`, `continue_final_message`, `chat_template`,
/// `chat_template_kwargs`, `documents`): ignoring them would hand the client a wrong answer
/// without a word. Their neutral values (null, false, 0, 1 for the penalties and `best_of`,
/// empty) pass. `logprobs` is neutral only as null or false: the completions API's
/// `"logprobs": 0` asks for the sampled tokens' log-probabilities.
pub(super) fn unsupported(o: &Map<String, Value>) -> Parsed<()> {
    // A boolean is neutral at its default: true for skip_special_tokens and
    // add_generation_prompt (vLLM's), false for the others.
    let neutral = |key: &str, v: &Value| match v {
        Value::Null => true,
        Value::Bool(b) => *b == matches!(key, "skip_special_tokens" | "add_generation_prompt"),
        Value::Number(_)
            if matches!(
                key,
                "logprobs" | "prompt_logprobs" | "truncate_prompt_tokens"
            ) =>
        {
            false
        }
        Value::Number(n) => {
            let one = matches!(key, "best_of" | "repetition_penalty" | "repeat_penalty");
            n.as_f64() == Some(if one { 1.0 } else { 0.0 })
        }
        Value::String(s) => s.is_empty() || (key == "tool_choice" && (s == "none" || s == "auto")),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => {
            m.is_empty()
                || (key == "response_format" && m.get("type") == Some(&Value::from("text")))
        }
    };
    for key in [
        "logprobs",
        "top_logprobs",
        "echo",
        "best_of",
        "suffix",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "response_format",
        "tools",
        "tool_choice",
        "repetition_penalty",
        "repeat_penalty",
        "min_p",
        "min_tokens",
        // vLLM's extensions that change the text (its SamplingParams and chat request).
        "include_stop_str_in_output",
        "skip_special_tokens",
        "bad_words",
        "allowed_token_ids",
        "prompt_logprobs",
        "truncate_prompt_tokens",
        "use_beam_search",
        "logits_processors",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "structured_outputs",
        "add_generation_prompt",
        "continue_final_message",
        "chat_template",
        "chat_template_kwargs",
        "documents",
    ] {
        if let Some(v) = o.get(key) {
            if !neutral(key, v) {
                return Err(FieldError::new(
                    key,
                    format!("{v} is not supported by nanollm; drop it"),
                ));
            }
        }
    }
    Ok(())
}

use super::*;

fn parse(text: &str) -> Parsed<Body> {
    let v: Value = serde_json::from_str(text).map_err(|e| FieldError::body(e.to_string()))?;
    parse_body(
        v.as_object()
            .ok_or_else(|| FieldError::body("not an object"))?,
    )
}

#[test]
fn openai_forms_parse() -> Result<(), FieldError> {
    let b = parse(
        r#"{"model": "m", "prompt": [1, 2, 3], "stream": true, "stream_options": {"include_usage": true}, "top_k": -1, "unknown": {}}"#,
    )?;
    assert_eq!(b.prompt, PromptInput::TokenIds(vec![1, 2, 3]));
    assert!(b.stream && b.include_usage && b.sampling.top_k.is_none());
    assert!(!b.continuous_usage);
    let c = |so: &str| {
        parse(&format!(
            r#"{{"prompt": "a", "stream": true, "stream_options": {so}}}"#
        ))
    };
    assert!(c(r#"{"include_usage": true, "continuous_usage_stats": true}"#)?.continuous_usage);
    // As vLLM: per-chunk usage only with the usage chunk.
    assert!(!c(r#"{"continuous_usage_stats": true}"#)?.continuous_usage);
    assert_eq!(b.model.as_deref(), Some("m"));
    let b = parse(
        r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, {"role": "assistant", "content": null}], "max_completion_tokens": 3, "stop": ["x", ""]}"#,
    )?;
    assert_eq!(b.max_tokens, Some(3));
    assert_eq!(b.stop, vec!["x".to_string()]);
    // Both given: the newer max_completion_tokens wins.
    let both = parse(r#"{"prompt": "a", "max_tokens": 5, "max_completion_tokens": 3}"#)?;
    assert_eq!(both.max_tokens, Some(3));
    let PromptInput::Messages(m) = b.prompt else {
        panic!("messages expected");
    };
    // Text parts one per line, as vLLM and llama-server render them.
    assert_eq!((m[0].content.as_str(), m[1].content.as_str()), ("a\nb", ""));
    let ids = parse(r#"{"prompt": "a", "stop_token_ids": [28, 2]}"#)?;
    assert_eq!(ids.stop_token_ids, vec![28, 2]);
    assert_eq!(
        parse(r#"{"prompt": ["hi"]}"#)?.prompt,
        PromptInput::Text("hi".into())
    );
    Ok(())
}

#[test]
fn errors_name_the_param() {
    let param = |t: &str| parse(t).unwrap_err().param;
    let p = |s: &str| Some(s.to_string());
    assert_eq!(param(r#"{"prompt": 3}"#), p("prompt"));
    assert_eq!(param(r#"{"prompt": ["a", "b"]}"#), p("prompt"));
    assert_eq!(
        param(r#"{"prompt": "a", "max_tokens": "5"}"#),
        p("max_tokens")
    );
    assert_eq!(
        param(r#"{"prompt": "a", "max_tokens": 0}"#),
        p("max_tokens")
    );
    assert_eq!(
        param(r#"{"prompt": "a", "temperature": -1}"#),
        p("temperature")
    );
    assert_eq!(param(r#"{"prompt": "a", "top_p": 2}"#), p("top_p"));
    assert_eq!(param(r#"{"prompt": "a", "stream": "yes"}"#), p("stream"));
    assert_eq!(param(r#"{"prompt": "a", "n": 2}"#), p("n"));
    assert_eq!(param(r#"{"prompt": "a", "stop": 1}"#), p("stop"));
    assert_eq!(
        param(r#"{"prompt": "a", "stream_options": {"include_usage": 1}}"#),
        p("stream_options.include_usage")
    );
    assert_eq!(
        param(
            r#"{"prompt": "a", "stream": true, "stream_options": {"continuous_usage_stats": 1}}"#
        ),
        p("stream_options.continuous_usage_stats")
    );
    assert_eq!(
        param(r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#),
        p("messages[0].content")
    );
    assert_eq!(
        param(r#"{"messages": [{"content": "x"}]}"#),
        p("messages[0].role")
    );
    assert_eq!(param(r#"{}"#), None);
    assert_eq!(
        param(r#"{"prompt": "a", "max_tokens": 1.5}"#),
        p("max_tokens")
    );
    assert_eq!(param(r#"{"prompt": "a", "seed": "7"}"#), p("seed"));
    assert_eq!(param(r#"{"prompt": "a", "logprobs": 2}"#), p("logprobs"));
    assert_eq!(param(r#"{"prompt": "a", "echo": true}"#), p("echo"));
    assert_eq!(
        param(r#"{"prompt": "a", "presence_penalty": 0.5}"#),
        p("presence_penalty")
    );
    assert_eq!(
        param(r#"{"prompt": "a", "response_format": {"type": "json_object"}}"#),
        p("response_format")
    );
    let long = format!(
        r#"{{"prompt": "a", "stop": "{}"}}"#,
        "x".repeat(MAX_STOP_BYTES + 1)
    );
    assert_eq!(param(&long), p("stop"));
    let many = format!(
        r#"{{"prompt": "a", "stop": {:?}}}"#,
        vec!["s"; MAX_STOP_STRINGS + 1]
    );
    assert_eq!(param(&many), p("stop"));
    // vLLM's and llama.cpp's sampling extensions this server does not implement.
    for (field, value) in [
        ("repetition_penalty", "1.3"),
        ("repeat_penalty", "1.5"),
        ("min_p", "0.5"),
        ("min_tokens", "10"),
        // The completions API's logprobs = 0: the sampled tokens' log-probabilities.
        ("logprobs", "0"),
        // vLLM's extensions that change the text (they were ignored with a 200).
        ("include_stop_str_in_output", "true"),
        ("skip_special_tokens", "false"),
        ("bad_words", r#"["Paris"]"#),
        ("allowed_token_ids", "[504]"),
        ("prompt_logprobs", "1"),
        ("prompt_logprobs", "0"),
        ("truncate_prompt_tokens", "3"),
        ("guided_choice", r#"["yes", "no"]"#),
        ("guided_json", r#"{"type": "object"}"#),
        ("structured_outputs", r#"{"regex": "a+"}"#),
        ("add_generation_prompt", "false"),
        ("continue_final_message", "true"),
        ("chat_template", r#""{{ messages }}""#),
        ("chat_template_kwargs", r#"{"enable_thinking": false}"#),
        ("use_beam_search", "true"),
    ] {
        assert_eq!(
            param(&format!(r#"{{"prompt": "a", "{field}": {value}}}"#)),
            p(field)
        );
    }
    assert_eq!(
        param(r#"{"prompt": "a", "stop_token_ids": [-1]}"#),
        p("stop_token_ids")
    );
    assert_eq!(
        param(r#"{"prompt": "a", "stop_token_ids": 28}"#),
        p("stop_token_ids")
    );
    assert_eq!(
        param(r#"{"prompt": "a", "stream_options": {"include_usage": true}}"#),
        p("stream_options")
    );
}

#[test]
fn lax_integers_and_seeds() -> Result<(), FieldError> {
    // Neutral values of unsupported fields pass.
    parse(
        r#"{"prompt": "a", "logprobs": null, "echo": false, "best_of": 1, "frequency_penalty": 0,
            "logit_bias": {}, "response_format": {"type": "text"}, "tools": [], "tool_choice": "auto",
            "repetition_penalty": 1, "repeat_penalty": 1.0, "min_p": 0, "min_tokens": 0,
            "stop_token_ids": [], "stream_options": null, "seed": -1.0, "top_k": -1.0,
            "include_stop_str_in_output": false, "skip_special_tokens": true, "bad_words": [],
            "allowed_token_ids": null, "prompt_logprobs": null, "guided_choice": null,
            "add_generation_prompt": true, "continue_final_message": false,
            "chat_template_kwargs": {}, "use_beam_search": false, "priority": 0,
            "spaces_between_special_tokens": true}"#,
    )?;
    // Token ids too, as every integer field (a stop id 2.0 was refused).
    let b = parse(r#"{"prompt": [1, 2.0], "stop_token_ids": [2.0]}"#)?;
    assert_eq!(b.stop_token_ids, vec![2]);
    assert_eq!(b.prompt, PromptInput::TokenIds(vec![1, 2]));
    let b = parse(r#"{"prompt": "a", "max_tokens": 16.0, "seed": 3.0}"#)?;
    assert_eq!((b.max_tokens, b.sampling.seed), (Some(16), 3));
    // -1 is "no seed": greedy keeps the default, sampling draws one.
    let b = parse(r#"{"prompt": "a", "seed": -1}"#)?;
    assert!(!b.seed_drawn);
    assert_eq!(b.sampling.seed, SamplingParams::greedy().seed);
    assert!(parse(r#"{"prompt": "a", "seed": -1, "temperature": 1}"#)?.seed_drawn);
    assert_eq!(
        parse(r#"{"prompt": "a", "seed": -2}"#)?.sampling.seed,
        u64::MAX - 1
    );
    let stops = format!(
        r#"{{"prompt": "a", "stop": {:?}}}"#,
        vec!["s"; MAX_STOP_STRINGS]
    );
    assert_eq!(parse(&stops)?.stop.len(), MAX_STOP_STRINGS);
    Ok(())
}

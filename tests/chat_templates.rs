//! Issue 14: real models' chat templates (llama.cpp's models/templates/, from the
//! llama-cpp-python 0.3.36 sdist; MIT, see tests/fixtures/chat_templates/LICENSE-llama.cpp)
//! rendered by our minijinja setup (src/model/chat/mod.rs) equal transformers' renders byte for
//! byte. The expected texts come from transformers' own `render_jinja_template`
//! (scripts/chat_template_fixtures.py, which records the transformers and jinja2 versions),
//! with `strftime_now` pinned to 2025-03-09T14:05:06.
//!
//! Run: `cargo test --release --test chat_templates`.
use nanollm::model::chat::{self, ChatOptions, Message};
use serde_json::Value;
use std::path::Path;

/// 2025-03-09T14:05:06Z, the time the fixture script pins `datetime.now()` to.
const PINNED_UNIX: i64 = 1_741_529_106;

fn fixtures() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/chat_templates"
    ))
}

fn text(v: &Value) -> Option<&str> {
    v.as_str()
}

#[test]
fn real_templates_render_as_transformers_renders() {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("renders.json")).expect("renders.json"),
    )
    .expect("renders.json is JSON");
    assert_eq!(
        doc["now"], "2025-03-09T14:05:06",
        "the script's pinned time"
    );
    let cases = doc["cases"].as_array().expect("cases");
    let (mut passed, mut failures) = (0, Vec::new());
    let mut templates = std::collections::BTreeSet::new();
    for case in cases {
        let name = case["template"].as_str().expect("template name");
        templates.insert(name.to_string());
        let template = std::fs::read_to_string(fixtures().join(format!("{name}.jinja")))
            .expect("template file");
        let messages: Vec<Message> = case["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| Message {
                role: m["role"].as_str().expect("role").into(),
                content: m["content"].as_str().expect("content").into(),
            })
            .collect();
        let opts = ChatOptions {
            add_generation_prompt: case["add_generation_prompt"].as_bool().expect("agp"),
            bos_token: text(&case["bos_token"]),
            eos_token: text(&case["eos_token"]),
            enable_thinking: case["enable_thinking"].as_bool(),
            now_unix: Some(PINNED_UNIX),
        };
        let label = format!(
            "{name} / {} (add_generation_prompt {}, enable_thinking {})",
            case["conversation"].as_str().unwrap_or("?"),
            opts.add_generation_prompt,
            case["enable_thinking"]
        );
        let got = chat::render_with(&template, &messages, &opts);
        match (case["expected"].as_str(), got) {
            (Some(want), Ok(got)) if got == want => passed += 1,
            (None, Err(_)) => passed += 1, // transformers raised too (raise_exception)
            (want, got) => failures.push(format!(
                "{label}:\n  transformers: {want:?}\n  ours:         {:?}",
                got.map_err(|e| format!("{e:#}"))
            )),
        }
    }
    eprintln!(
        "chat templates: {passed} of {} renders equal transformers' ({} templates)",
        cases.len(),
        templates.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for family in [
        "meta-llama-Llama-3.1-8B-Instruct",
        "meta-llama-Llama-3.2-3B-Instruct",
        "meta-llama-Llama-3.3-70B-Instruct",
        "Qwen-Qwen2.5-7B-Instruct",
        "Qwen-Qwen3-0.6B",
        "HuggingFaceTB-SmolLM3-3B",
        "mistralai-Mistral-Nemo-Instruct-2407",
        "microsoft-Phi-3.5-mini-instruct",
    ] {
        assert!(templates.contains(family), "no fixture for {family}");
    }
}

//! Issue 14: the chat template sees the model's real `bos_token` / `eos_token`, and a prompt
//! starts with exactly one BOS when the template writes it itself (as Llama 3's does) and the
//! tokenizer adds one too (the tiny Llama's tokenizer.json post-processor adds `<s>`).
use crate::ours;
use crate::tiny::{self, Arch, Spec};
use nanollm::model::chat::{self, Message};
use serde_json::json;

#[test]
fn a_template_that_writes_bos_gives_one_bos() {
    let dir = tempfile::tempdir().expect("tempdir");
    tiny::write_folder(dir.path(), &Spec::of(Arch::Llama), 3);
    let template =
        "{{- bos_token }}{% for m in messages %}{{ m.content }} {% endfor %}{{ eos_token }}";
    let tc = json!({"chat_template": template, "bos_token": "<s>", "eos_token": "</s>",
        "add_bos_token": true});
    std::fs::write(dir.path().join("tokenizer_config.json"), tc.to_string()).expect("write");
    let m = ours::load(dir.path(), None);
    assert_eq!(m.tokenizer.add_bos, Some(1));
    assert_eq!(
        (m.bos_token.as_deref(), m.eos_token.as_deref()),
        (Some("<s>"), Some("</s>"))
    );
    let msgs = [Message {
        role: "user".into(),
        content: "w5 w6".into(),
    }];
    let text = chat::render(
        m.chat_template.as_deref().expect("template"),
        &msgs,
        m.bos_token.as_deref(),
        m.eos_token.as_deref(),
    )
    .expect("render");
    assert_eq!(text, "<s>w5 w6 </s>");
    let ids = chat::encode_prompt(&m.tokenizer, &text).expect("encode");
    assert_eq!(ids, vec![1, 5, 6, 2], "one BOS, then the words and EOS");
    // Raw text still gets the tokenizer's BOS.
    assert_eq!(
        chat::encode_prompt(&m.tokenizer, "w5").expect("encode"),
        vec![1, 5]
    );

    // The CLI: --json reports the prompt's token count (4, not 5).
    let out = assert_cmd::Command::cargo_bin("nanollm")
        .expect("binary")
        .args(["generate", "--json", "-n", "1", "--model"])
        .arg(dir.path())
        .arg("w5 w6")
        .assert()
        .success()
        .get_output()
        .clone();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["stats"]["prompt_tokens"], 4, "{doc}");
}

/// `tokenize --model DIR` loads only the tokenizer: a folder with tokenizer.json and a
/// config.json that holds nothing but the special token ids is enough (no weights, no
/// hyper-parameters), and the ids come out as the tokenizer makes them.
#[test]
fn tokenize_needs_only_the_tokenizer_and_its_special_ids() {
    let dir = tempfile::tempdir().expect("tmp");
    super::tiny::write_tokenizer(&dir.path().join("tokenizer.json"), true);
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"bos_token_id": 1, "eos_token_id": 2}"#,
    )
    .expect("write config.json");
    let out = assert_cmd::Command::cargo_bin("nanollm")
        .expect("binary")
        .args(["tokenize", "--ids", "--model"])
        .arg(dir.path())
        .arg("w5 w6")
        .assert()
        .success()
        .get_output()
        .clone();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "[1, 5, 6]\n");
}

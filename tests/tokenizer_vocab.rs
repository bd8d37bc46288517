//! Issue 13: GGUF tokenizers against llama.cpp's own vocab tests. For every vocabulary,
//! `models/ggml-vocab-<name>.gguf` with `.gguf.inp` (test strings separated by a line
//! `__ggml_vocab_test__`) and `.gguf.out` (llama.cpp's ids, one line per string), as
//! llama.cpp's tests/test-tokenizer-0 reads them: no BOS, special tokens not parsed. Every
//! string must give the same ids, and decode(encode(s)) must give `s` back.
//!
//! The files come from the llama-cpp-python 0.3.36 sdist: run `scripts/fetch-llama-vocab.sh`
//! (CI does, in `.ci/run`). Missing files fail the test; nothing is downloaded here.
use nanollm::model::gguf::GgufFile;
use nanollm::model::source;
use nanollm::model::Tokenizer;
use std::path::PathBuf;

/// Every llama.cpp test vocabulary of a tokenizer this build supports.
const VOCABS: &[&str] = &[
    "llama-bpe",
    "qwen2",
    "qwen35",
    "gpt-2",
    "starcoder",
    "deepseek-llm",
    "deepseek-coder",
    "falcon",
    "command-r",
    "refact",
    "mpt",
    "llama-spm",
    "phi-3",
];

const SEPARATOR: &str = "\n__ggml_vocab_test__\n";

fn vocab_dir() -> PathBuf {
    let dir = source::cache_dir().join("llama-vocab");
    assert!(
        dir.join("ggml-vocab-gpt-2.gguf").is_file(),
        "llama.cpp vocab fixtures missing in {}: run scripts/fetch-llama-vocab.sh",
        dir.display()
    );
    dir
}

fn file(name: &str, ext: &str) -> PathBuf {
    vocab_dir().join(format!("ggml-vocab-{name}.gguf{ext}"))
}

/// The test strings and their reference ids, as test-tokenizer-0 splits them.
fn cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let inp = std::fs::read(file(name, ".inp")).expect("read .inp");
    let inp = String::from_utf8(inp).expect(".inp is UTF-8");
    let out = std::fs::read_to_string(file(name, ".out")).expect("read .out");
    let mut strings = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find(SEPARATOR) {
            Some(at) => {
                strings.push(rest[..at].to_string());
                rest = &rest[at + SEPARATOR.len()..];
            }
            None => {
                strings.push(rest.to_string());
                rest = "";
            }
        }
    }
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|t| t.parse().expect("an id"))
                .collect()
        })
        .collect();
    assert_eq!(strings.len(), ids.len(), "{name}: .inp and .out disagree");
    strings.into_iter().zip(ids).collect()
}

fn tokenizer(name: &str) -> Tokenizer {
    let gguf = GgufFile::open(&file(name, "")).expect("open vocab GGUF");
    let mut tok = Tokenizer::from_gguf(&gguf)
        .unwrap_or_else(|e| panic!("{name}: cannot build the tokenizer: {e:#}"));
    tok.set_parse_special(false);
    tok
}

/// SmolLM2's `smollm` pre-tokenizer has no llama.cpp vocab file: its cases are ids that
/// llama.cpp's llama-tokenize gave for the default model (tests/fixtures/smollm2-tokenize.json).
fn smollm_row(report: &mut String, failures: &mut Vec<String>) {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/smollm2-tokenize.json")).expect("fixture");
    let path = source::default_model_path();
    assert!(
        path.is_file(),
        "default model missing at {}: run scripts/install-model.sh",
        path.display()
    );
    let gguf = GgufFile::open(&path).expect("open the default model");
    let mut tok = Tokenizer::from_gguf(&gguf).expect("tokenizer");
    let cases = fixture["cases"].as_array().expect("cases");
    let (mut same, mut round) = (0, 0);
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let want: Vec<u32> = case["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        tok.set_parse_special(case["parse_special"].as_bool().unwrap_or(false));
        let got = tok.encode_with(text, false).expect("encode");
        if got == want {
            same += 1;
        } else {
            failures.push(format!("smollm: {text:?}: got {got:?}, llama.cpp {want:?}"));
        }
        if tok.inner.decode(&got, false).expect("decode") == text {
            round += 1;
        } else {
            failures.push(format!("smollm: {text:?} does not round-trip"));
        }
    }
    let n = cases.len();
    report.push_str(&format!("{:<16} {same:>2}/{n}  {round:>2}/{n}\n", "smollm"));
}

#[test]
fn every_llama_cpp_vocab_test_string_gives_llama_cpps_ids_and_round_trips() {
    let mut report = String::from("vocab            ids  round-trip\n");
    let mut failures = Vec::new();
    for &name in VOCABS {
        let tok = tokenizer(name);
        let cases = cases(name);
        let (mut same, mut round) = (0, 0);
        for (text, want) in &cases {
            let got = tok.encode_with(text, false).expect("encode");
            if &got == want {
                same += 1;
            } else {
                failures.push(format!("{name}: {text:?}: got {got:?}, llama.cpp {want:?}"));
            }
            let back = tok.decode(&got).expect("decode");
            if &back == text {
                round += 1;
            } else {
                failures.push(format!("{name}: {text:?} decodes back as {back:?}"));
            }
        }
        let n = cases.len();
        report.push_str(&format!("{name:<16} {same:>2}/{n}  {round:>2}/{n}\n"));
    }
    smollm_row(&mut report, &mut failures);
    eprintln!("{report}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bos_follows_add_bos_token_or_llama_cpps_default() {
    // llama-bpe has no add_bos_token key: llama.cpp adds BOS for the Llama 3 pre-tokenizer.
    let tok = tokenizer("llama-bpe");
    assert_eq!(tok.encode("Hello").expect("encode"), [128000, 9906]);
    // SentencePiece with add_bos_token = true.
    let tok = tokenizer("llama-spm");
    assert_eq!(tok.encode_with("Hello", true).expect("encode")[0], 1);
    // gpt-2: no key, no BOS.
    let tok = tokenizer("gpt-2");
    assert_eq!(tok.encode("Hello").expect("encode"), [15496]);
}

#[test]
fn spm_leading_space_follows_each_special_token() {
    let gguf = GgufFile::open(&file("llama-spm", "")).expect("open");
    let tok = Tokenizer::from_gguf(&gguf).expect("tokenizer");
    let plain = tok.encode_with("Hello", false).expect("encode");
    // "</s>" is a control token: parsed as id 2, and the text after it gets its own "▁".
    let ids = tok.encode_with("Hello</s>Hello", false).expect("encode");
    let mut want = plain.clone();
    want.push(2);
    want.extend(&plain);
    assert_eq!(ids, want);
}

/// With special tokens parsed (llama-tokenize's default), tokens llama.cpp makes control by
/// their text even where `token_type` says normal, and Phi-3's right strip after special
/// tokens. Expected ids: llama.cpp's llama-tokenize (0.3.36 sdist) on the same vocab files.
#[test]
fn control_looking_tokens_and_phi3_right_strip_as_llama_cpp() {
    let cases: &[(&str, &str, &[u32])] = &[
        // Aquila: token 0 "<|endoftext|>" is typed normal; no BOS.
        ("aquila", "<|endoftext|>hi", &[0, 10320]),
        // Qwen2 / Qwen3.5: "</s>" (id 128247) is a normal-typed end-of-generation text.
        ("qwen2", "<s>Hello</s> world", &[44047, 79497, 128247, 1879]),
        (
            "qwen35",
            "<s>Hello</s> world",
            &[44047, 79497, 128247, 1879],
        ),
        // Phi-3: "</s>" strips the space after it (no "▁" token 29871 before "world").
        ("phi-3", "<s>Hello</s> world", &[1, 1, 15043, 2, 3186]),
        // Llama SPM: no strip, the "▁" stays.
        (
            "llama-spm",
            "<s>Hello</s> world",
            &[1, 1, 15043, 2, 29871, 3186],
        ),
    ];
    for &(name, text, want) in cases {
        let gguf = GgufFile::open(&file(name, "")).expect("open vocab GGUF");
        let tok = Tokenizer::from_gguf(&gguf).expect("tokenizer");
        assert_eq!(tok.encode(text).expect("encode"), want, "{name}: {text:?}");
    }
}

//! Proptest versions of the fuzz targets: the same functions (`fuzz/src/harness.rs`, compiled
//! here by path) fed arbitrary bytes and mutated seeds (`fuzz/seeds/<target>/`), a bounded
//! number of cases each so the file runs in seconds. A case passes when the parser answers
//! (Ok or an error) without a panic, an abort or a huge allocation; the seeds, which are
//! valid, must give their known result. The coverage-guided fuzzers (`scripts/fuzz.sh`) run
//! the same functions for as long as they are given.
#[path = "../fuzz/src/harness.rs"]
mod harness;

use anyhow::Result;
use proptest::prelude::*;
use proptest::sample::Index;
use std::path::PathBuf;

/// Cases per proptest: the whole file runs in a few seconds in release.
const CASES: u32 = 256;

/// A target's seed files, as bytes, in name order.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "{} has no seeds", dir.display());
    paths
        .iter()
        .map(|p| std::fs::read(p).expect("a readable seed"))
        .collect()
}

/// One edit of a seed: overwrite a byte, write a big u64 (little-endian, as GGUF and
/// safetensors store counts and lengths), or cut the file there.
#[derive(Debug, Clone)]
enum Edit {
    Byte(Index, u8),
    Count(Index, u64),
    Truncate(Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    let big = prop_oneof![
        Just(u64::MAX),
        Just(1u64 << 40),
        Just(1u64 << 50),
        Just(u32::MAX as u64),
        Just(0u64),
        any::<u64>(),
    ];
    prop_oneof![
        4 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Byte(i, b)),
        2 => (any::<Index>(), big).prop_map(|(i, n)| Edit::Count(i, n)),
        1 => any::<Index>().prop_map(Edit::Truncate),
    ]
}

/// A seed of `target` with a few edits.
fn mutated(target: &str) -> impl Strategy<Value = Vec<u8>> {
    let seeds = seeds(target);
    (any::<Index>(), prop::collection::vec(edit(), 1..6)).prop_map(move |(which, edits)| {
        let mut data = which.get(&seeds).clone();
        for e in edits {
            if data.is_empty() {
                break;
            }
            match e {
                Edit::Byte(i, b) => {
                    let at = i.index(data.len());
                    data[at] = b;
                }
                Edit::Count(i, n) => {
                    let at = i.index(data.len());
                    let end = (at + 8).min(data.len());
                    data[at..end].copy_from_slice(&n.to_le_bytes()[..end - at]);
                }
                Edit::Truncate(i) => data.truncate(i.index(data.len())),
            }
        }
        data
    })
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..256)
}

/// Every proptest below: `$target` on arbitrary bytes and on mutated seeds.
macro_rules! fuzz_props {
    ($($target:ident),*) => {
        mod arbitrary_bytes {
            use super::*;
            proptest! {
                #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]
                $(#[test] fn $target(data in bytes()) { let _ = harness::$target(&data); })*
            }
        }
        mod mutated_seeds {
            use super::*;
            proptest! {
                #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]
                $(#[test] fn $target(data in mutated(stringify!($target))) { let _ = harness::$target(&data); })*
            }
        }
    };
}

fuzz_props!(
    gguf_header,
    safetensors_header,
    hf_config,
    tokenizer_config,
    openai_body,
    batch_jsonl,
    kv_size_config,
    kld_base,
    chat_template
);

/// Each seed is valid and gets its known verdict: the seed corpora start the fuzzers inside
/// each parser's accepting paths, not at its first check.
#[test]
fn seeds_are_accepted() -> Result<()> {
    type Target = fn(&[u8]) -> Result<()>;
    let targets: [(&str, Target); 9] = [
        ("gguf_header", harness::gguf_header),
        ("hf_config", harness::hf_config),
        ("tokenizer_config", harness::tokenizer_config),
        ("openai_body", harness::openai_body),
        ("batch_jsonl", harness::batch_jsonl),
        ("kv_size_config", harness::kv_size_config),
        ("kld_base", harness::kld_base),
        ("chat_template", harness::chat_template),
        ("safetensors_header", harness::safetensors_header),
    ];
    for (target, run) in targets {
        for (i, seed) in seeds(target).iter().enumerate() {
            let verdict = run(seed);
            // The one seed that is refused: a checkpoint with f64, i64 and u8 tensors.
            if target == "safetensors_header" && i == 0 {
                let e = verdict.expect_err("f64 tensors are refused").to_string();
                assert!(
                    e.contains("is stored as") && e.contains("only f32, f16 and bf16"),
                    "{e}"
                );
                continue;
            }
            if target == "hf_config" && seed.windows(11).any(|w| w == b"gemma3_text") {
                // A kv-size fixture: config.json's layer fields only, no vocabulary.
                let e = verdict.expect_err("no vocab_size").to_string();
                assert!(e.contains("vocab_size is missing"), "{e}");
                continue;
            }
            verdict.map_err(|e| anyhow::anyhow!("{target} seed {i}: {e:#}"))?;
        }
    }
    Ok(())
}

/// The seeds' contents, read back: what the parsers return for valid input.
#[test]
fn seeds_give_their_known_values() -> Result<()> {
    let smol = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/seeds/hf_config/smollm2-135m-instruct.json"),
    )?;
    let c = nanollm::model::hf::config::parse(&serde_json::from_slice(&smol)?)?;
    assert_eq!(
        (
            c.config.hidden_size,
            c.config.num_hidden_layers,
            c.config.head_dim
        ),
        (576, 30, 64)
    );
    assert_eq!(c.eos_token_ids, vec![2]);
    let jsonl = String::from_utf8(seeds("batch_jsonl")[0].clone())?;
    let batch = nanollm::cli::batch_input::parse_jsonl(&jsonl, 16)?;
    assert_eq!(batch.len(), 4);
    assert_eq!(batch[0].max_tokens, 16);
    assert_eq!(batch[2].custom_id, serde_json::json!(3));
    let dir = tempfile::tempdir()?;
    let gguf = dir.path().join("smollm2.gguf");
    std::fs::write(&gguf, &seeds("gguf_header")[0])?;
    let g = nanollm::model::gguf::GgufFile::open(&gguf)?;
    let config = g.config()?;
    assert_eq!((config.hidden_size, config.vocab_size), (576, 16));
    assert_eq!(g.content.tensor_infos.len(), 3);
    Ok(())
}

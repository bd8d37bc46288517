//! Files that declare huge counts or sizes (2^40 tensors, a 2^50-byte string, 2^40 layers)
//! are refused with one line naming the file and what is wrong, before anything of that size
//! is allocated: an allocation of that size would abort the test binary, so a test that
//! passes shows the refusal came first. Also the regressions found while writing and running
//! the fuzz targets (`scripts/fuzz.sh`, docs/testing.md "Fuzzing"); each failed (an abort, a
//! panic or another answer) before its fix.
use anyhow::Result;
use nanollm::eval::kld::BaseReader;
use nanollm::model::gguf::GgufFile;
use nanollm::model::safetensors::Checkpoint;
use std::path::{Path, PathBuf};

const T40: u64 = 1 << 40;
const T50: u64 = 1 << 50;

/// A GGUF v3 header declaring `tensors` tensors and `kvs` metadata entries, then `rest`.
fn gguf(tensors: u64, kvs: u64, rest: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(tensors.to_le_bytes());
    b.extend(kvs.to_le_bytes());
    b.extend(rest);
    b
}

/// A GGUF string: u64 length, bytes.
fn string(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u64).to_le_bytes().to_vec();
    b.extend(s.as_bytes());
    b
}

/// A metadata entry: key, value type, value bytes.
fn kv(key: &str, ty: u32, value: &[u8]) -> Vec<u8> {
    let mut b = string(key);
    b.extend(ty.to_le_bytes());
    b.extend(value);
    b
}

/// Write `data` as `name` in `dir`.
fn file(dir: &Path, name: &str, data: &[u8]) -> Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, data)?;
    Ok(path)
}

/// `GgufFile::open` of `data` fails with one line holding the path and every `needles`.
fn gguf_refused(data: &[u8], needles: &[&str]) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = file(dir.path(), "model.gguf", data)?;
    let e = match GgufFile::open(&path).and_then(|g| g.config()) {
        Ok(_) => panic!("accepted: {needles:?}"),
        Err(e) => format!("{e:#}"),
    };
    assert!(!e.contains('\n'), "{e}");
    assert!(e.contains(&path.display().to_string()), "{e}");
    for n in needles {
        assert!(e.contains(n), "{n:?} not in: {e}");
    }
    Ok(())
}

#[test]
fn gguf_declaring_2_40_tensors_or_entries_is_refused() -> Result<()> {
    let pad = [0u8; 64];
    gguf_refused(&gguf(T40, 0, &pad), &["1099511627776 tensors cannot fit"])?;
    gguf_refused(&gguf(0, T40, &pad), &["1099511627776 metadata keys"])
}

#[test]
fn gguf_declaring_a_2_50_byte_string_is_refused() -> Result<()> {
    let mut key = T50.to_le_bytes().to_vec();
    key.extend([b'k'; 32]);
    gguf_refused(
        &gguf(0, 1, &key),
        &["a metadata key of 1125899906842624 bytes at byte 32"],
    )?;
    let mut value = kv("general.name", 8, &T50.to_le_bytes());
    value.extend([b'v'; 32]);
    gguf_refused(
        &gguf(0, 1, &value),
        &["metadata key general.name: a string of 1125899906842624 bytes"],
    )
}

#[test]
fn gguf_declaring_a_2_40_element_array_is_refused() -> Result<()> {
    for (elem, needle) in [
        (6u32, "an array of 1099511627776 values of 4 bytes"),
        (8, "an array of 1099511627776 elements cannot fit"),
        (9, "an array of 1099511627776 elements cannot fit"),
    ] {
        let mut array = elem.to_le_bytes().to_vec();
        array.extend(T40.to_le_bytes());
        array.extend([0u8; 64]);
        let data = gguf(0, 1, &kv("tokenizer.ggml.scores", 9, &array));
        gguf_refused(&data, &["metadata key tokenizer.ggml.scores", needle])?;
    }
    Ok(())
}

#[test]
fn gguf_tensor_of_2_80_elements_is_refused() -> Result<()> {
    let mut info = string("token_embd.weight");
    info.extend(2u32.to_le_bytes());
    info.extend(T40.to_le_bytes());
    info.extend(T40.to_le_bytes());
    info.extend(0u32.to_le_bytes()); // F32
    info.extend(0u64.to_le_bytes());
    info.extend([0u8; 64]);
    gguf_refused(
        &gguf(1, 0, &info),
        &["tensor token_embd.weight has dimensions [1099511627776, 1099511627776]: too many elements"],
    )
}

/// Regression: a tensor of 2^62 − 1 F32 values (whose byte size overflows u64) was let
/// through with a saturated size, and the error named the *next* tensor, "at data offset
/// 0, expected 18446744073709551615". Now the tensor that overflows is named.
#[test]
fn gguf_tensor_whose_size_overflows_is_named() -> Result<()> {
    let mut info = Vec::new();
    for (name, ne0) in [
        ("token_embd.weight", (1u64 << 62) - 1),
        ("output.weight", 32),
    ] {
        info.extend(string(name));
        info.extend(1u32.to_le_bytes());
        info.extend(ne0.to_le_bytes());
        info.extend(0u32.to_le_bytes()); // F32
        info.extend(0u64.to_le_bytes());
    }
    info.extend([0u8; 64]);
    let data = gguf(2, 0, &info);
    gguf_refused(
        &data,
        &["tensor token_embd.weight has dimensions [4611686018427387903]: its size overflows"],
    )?;
    let dir = tempfile::tempdir()?;
    let e = match GgufFile::open(&file(dir.path(), "m.gguf", &data)?) {
        Ok(_) => panic!("accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        !e.contains("output.weight") && !e.contains("18446744073709551615"),
        "{e}"
    );
    Ok(())
}

/// Regression: `{arch}.block_count` 2^32 − 1 made a per-layer window list of that length
/// (a 64 GB allocation, an abort) before the layer count was checked.
#[test]
fn gguf_block_count_of_2_32_is_refused_before_the_layer_list() -> Result<()> {
    let u32v = |n: u32| n.to_le_bytes().to_vec();
    let mut tokens = 8u32.to_le_bytes().to_vec();
    tokens.extend(1u64.to_le_bytes());
    tokens.extend(string("a"));
    let entries = [
        kv("general.architecture", 8, &string("llama")),
        kv("llama.embedding_length", 4, &u32v(8)),
        kv("llama.attention.head_count", 4, &u32v(2)),
        kv("llama.context_length", 4, &u32v(16)),
        kv("llama.feed_forward_length", 4, &u32v(16)),
        kv("llama.block_count", 4, &u32v(u32::MAX)),
        kv("tokenizer.ggml.tokens", 9, &tokens),
    ];
    gguf_refused(
        &gguf(0, entries.len() as u64, &entries.concat()),
        &["llama.block_count is 4294967295, more than 100000 layers"],
    )
}

/// Regression: `num_hidden_layers` 2^40 made a per-layer window list of that length (16 TB,
/// an abort) before `ModelConfig::validate` refused the count.
#[test]
fn hf_config_of_2_40_layers_is_refused_before_the_layer_list() {
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_hidden_layers": T40, "vocab_size": 32,
    });
    let e = nanollm::model::hf::config::parse(&config).expect_err("2^40 layers");
    assert!(
        e.to_string()
            .contains("num_hidden_layers is 1099511627776, more than 100000 layers"),
        "{e}"
    );
}

#[test]
fn safetensors_header_length_of_2_50_is_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut data = T50.to_le_bytes().to_vec();
    data.extend(br#"{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}"#);
    let path = file(dir.path(), "model.safetensors", &data)?;
    let e = match Checkpoint::open(dir.path()) {
        Ok(_) => panic!("a 2^50-byte header was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(!e.contains('\n'), "{e}");
    assert!(e.contains(&path.display().to_string()), "{e}");
    assert!(
        e.contains("its header length says 1125899906842624 bytes but 61 bytes follow"),
        "{e}"
    );
    // Under the file's length but over the format's 100 MB limit: refused by its size alone.
    // (A sparse file: nothing of that size is written.)
    let mut data = 200_000_000u64.to_le_bytes().to_vec();
    data.push(b'{');
    let path = file(dir.path(), "model.safetensors", &data)?;
    std::fs::File::options()
        .write(true)
        .open(&path)?
        .set_len(200_000_008)?;
    let e = format!("{:#}", Checkpoint::open(dir.path()).err().expect("refused"));
    assert!(e.contains("over the format's limit of 100000000"), "{e}");
    Ok(())
}

/// A base file with `header` as its JSON line and `payload` bytes after it.
fn kld_file(dir: &Path, header: &str, payload: usize) -> Result<PathBuf> {
    let mut data = format!("nanollm-kld-base 1\n{header}\n").into_bytes();
    data.resize(data.len() + payload, 0);
    file(dir, "base.kld", &data)
}

/// Regression: the KL-divergence base reader read its header line with no bound (a file
/// without a newline was read whole into memory), and `next_rows` multiplied the header's
/// vocabulary unchecked (2^62 wrapped to a 0-byte read that "succeeded").
#[test]
fn kld_base_huge_or_endless_headers_are_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut endless = b"nanollm-kld-base 1\n{\"model\": \"".to_vec();
    endless.resize(1 << 20, b'x');
    let path = file(dir.path(), "base.kld", &endless)?;
    let e = format!("{:#}", BaseReader::open(&path).err().expect("refused"));
    assert!(
        e.contains(&path.display().to_string())
            && e.contains("JSON header line does not end within 65536 bytes"),
        "{e}"
    );
    let header = |chunks: u64, vocab: u64| {
        format!(
            r#"{{"model": "m.gguf", "kv_cache_dtype": "f32", "ctx_size": 4, "chunks": {chunks}, "vocab": {vocab}, "targets_fnv1a": 1}}"#
        )
    };
    let path = kld_file(dir.path(), &header(1, 1 << 62), 16)?;
    let mut r = BaseReader::open(&path)?;
    assert!(r.check_length(4).is_err());
    let e = r.next_rows(4).expect_err("2^64 bytes of rows").to_string();
    assert!(
        e.contains("the file ends early (truncated?): 4 positions of 4611686018427387904 log-probabilities are more than its 16 bytes"),
        "{e}"
    );
    let path = kld_file(dir.path(), &header(5, 0), 0)?;
    let e = format!("{:#}", BaseReader::open(&path).err().expect("refused"));
    assert!(e.contains("5 chunks of a vocabulary of 0 tokens"), "{e}");
    Ok(())
}

/// `template` rendered for one user message.
fn render(template: &str) -> Result<String> {
    let messages = [nanollm::model::chat::Message {
        role: "user".to_string(),
        content: "hi".to_string(),
    }];
    nanollm::model::chat::render(template, &messages, None, None)
}

/// Regression: a template asking for a 2^40-space indent aborted on a 1 TB allocation, a 10^11-digit precision panicked
/// inside minijinja, a 10^11 width asked for 100 GB. Each is now one error; sizes a real
/// template uses still render as before.
#[test]
fn chat_template_sizes_are_bounded() -> Result<()> {
    for (template, needle) in [
        (
            "{{ messages | tojson(indent=1099511627776) }}",
            "tojson indent of 1099511627776",
        ),
        (
            "{{ messages | tojson(indent=' ' * 5000) }}",
            "tojson indent of 5000",
        ),
        (
            "{{ 'a\nb' | indent(1099511627776) }}",
            "indent of 1099511627776",
        ),
        (
            "{{ 'a\nb' | indent(width=1099511627776) }}",
            "indent of 1099511627776",
        ),
        ("{{ '%.99999999999f' | format(1.0) }}", "of 99999999999"),
        ("{{ '%99999999999d' | format(1) }}", "of 99999999999"),
        ("{{ '{:>99999999999}'.format('a') }}", "of 99999999999"),
    ] {
        let e = render(template).expect_err(template).to_string();
        assert!(
            e.contains(needle) && e.contains("over the limit of 4096") && !e.contains('\n'),
            "{template}: {e}"
        );
    }
    for (template, want) in [
        ("{{ 'a\nb' | indent(2) }}", "a\n  b"),
        ("{{ 'a\nb' | indent(width=3, first=true) }}", "   a\n   b"),
        ("{{ '%5d|%.2f' | format(3, 0.5) }}", "    3|0.50"),
        ("{{ '{:>4}{}'.format('a', 7) }}", "   a7"),
        (
            "{{ messages | tojson(indent=1) }}",
            "[\n {\n  \"role\": \"user\",\n  \"content\": \"hi\"\n }\n]",
        ),
    ] {
        assert_eq!(render(template)?, want, "{template}");
    }
    Ok(())
}

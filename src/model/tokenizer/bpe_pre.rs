//! Byte-level BPE pre-tokenizers: which regexes split the text before BPE merges, per GGUF
//! `tokenizer.ggml.pre`, as llama.cpp maps them.
//!
//! Source: llama.cpp `src/llama-vocab.cpp` (the `tokenizer_pre` → pre-type table and the
//! regexes of `llm_tokenizer_bpe`), llama-cpp-python 0.3.36's vendored copy. Where llama.cpp
//! notes the original regex of the model's `tokenizer.json` (Llama 3, Qwen2, Qwen3.5) we use
//! that one: it is what llama.cpp's custom splitters implement, and what produced the
//! reference ids of its vocab tests. Each regex splits every piece the previous one left,
//! keeping matches and the text between them as pieces (Hugging Face `Split` with
//! `Isolated` behaviour, llama.cpp `unicode_regex_split`).

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

/// GPT-2's pre-tokenizer regex (Hugging Face `ByteLevel`'s own).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Llama 3's `tokenizer.json` regex: case-insensitive contractions, numbers in groups of up
/// to three digits, newlines kept apart from other whitespace.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's `tokenizer.json` regex: as Llama 3's, but every digit on its own.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5's `tokenizer.json` regex: as Qwen2's, with combining marks (`\p{M}`) in words.
const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// DeepSeek LLM's letters (Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee and other
/// cased scripts, full-width Latin), as its `tokenizer.json` lists them.
const DEEPSEEK_LLM_LETTERS: &str = r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+";

/// CJK ideographs and Hangul runs (DeepSeek LLM and Coder).
const DEEPSEEK_CJK: &str = r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+";

/// How a `tokenizer.ggml.pre` value pre-tokenizes, and the llama.cpp flags that go with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreTokenizer {
    /// llama.cpp's name for the pre-tokenizer type (e.g. `LLAMA3`), for messages.
    pub kind: &'static str,
    /// Regexes applied one after another; each splits the pieces the previous one left.
    pub regexes: Vec<&'static str>,
    /// A whole pre-tokenized word that is itself a token maps to it without merges
    /// (llama.cpp `ignore_merges`, Hugging Face BPE `ignore_merges`).
    pub ignore_merges: bool,
    /// Whether llama.cpp adds BOS when the GGUF has no `tokenizer.ggml.add_bos_token`.
    pub add_bos_default: bool,
}

impl PreTokenizer {
    /// The Hugging Face `tokenizers` pre-tokenizer: one `Split` (regex, isolated) per regex,
    /// then GPT-2's byte-to-unicode mapping (`ByteLevel` without its own regex).
    ///
    /// Errors: a regex the `fancy-regex` engine rejects.
    pub fn pipeline(&self) -> anyhow::Result<PreTokenizerWrapper> {
        let mut steps = Vec::with_capacity(self.regexes.len() + 1);
        for re in &self.regexes {
            let split = Split::new(
                SplitPattern::Regex(re.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| anyhow::anyhow!("pre-tokenizer {}: bad regex {re:?}: {e}", self.kind))?;
            steps.push(PreTokenizerWrapper::Split(split));
        }
        steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
            false, true, false,
        )));
        Ok(PreTokenizerWrapper::Sequence(Sequence::new(steps)))
    }
}

/// The `tokenizer.ggml.pre` values this build implements, grouped as llama.cpp groups them;
/// the README and the refusal message list them.
pub const SUPPORTED: &[&str] = &[
    "default",
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "dbrx",
    "smaug-bpe",
    "qwen2",
    "deepseek-r1-qwen",
    "qwen35",
    "stablelm2",
    "deepseek-llm",
    "deepseek-coder",
    "falcon",
    "gpt-2",
    "phi-2",
    "mpt",
    "olmo",
    "starcoder",
    "refact",
    "command-r",
    "smollm",
    "codeshell",
];

/// The pre-tokenizer for a GGUF `tokenizer.ggml.pre` value (`None` when the key is absent:
/// llama.cpp then uses `default`, warning that quality will degrade).
///
/// Source: llama.cpp llama-vocab.cpp, `tokenizer_pre` → `LLAMA_VOCAB_PRE_TYPE_*` and
/// `llm_tokenizer_bpe`'s `regex_exprs`.
///
/// Errors: a value llama.cpp does not know, or one this build does not implement; the
/// message names the key and the value and lists the supported values.
pub fn for_pre(pre: Option<&str>) -> anyhow::Result<PreTokenizer> {
    let p = |kind, regexes: Vec<&'static str>| PreTokenizer {
        kind,
        regexes,
        ignore_merges: false,
        add_bos_default: false,
    };
    let pre_tokenizer = match pre.unwrap_or("default") {
        "default" => p(
            "DEFAULT",
            vec![
                r"[\p{P}\$\+<=>\^~\|]+",
                GPT2,
                r"\p{N}+",
                "[0-9][0-9][0-9]",
            ],
        ),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" => PreTokenizer {
            ignore_merges: true,
            add_bos_default: true,
            ..p("LLAMA3", vec![LLAMA3])
        },
        "dbrx" | "smaug-bpe" => p("LLAMA3", vec![LLAMA3]),
        "qwen2" | "deepseek-r1-qwen" | "stablelm2" => p("QWEN2", vec![QWEN2]),
        "qwen35" => p("QWEN35", vec![QWEN35]),
        "deepseek-llm" => p(
            "DEEPSEEK_LLM",
            vec![
                r"[\r\n]",
                DEEPSEEK_LLM_LETTERS,
                r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+",
                r"\s+$",
                DEEPSEEK_CJK,
                r"\p{N}+",
            ],
        ),
        "deepseek-coder" => p(
            "DEEPSEEK_CODER",
            vec![
                r"[\r\n]",
                r"\s?\p{L}+",
                r"\s?\p{P}+",
                DEEPSEEK_CJK,
                r"\p{N}",
            ],
        ),
        "falcon" => p(
            "FALCON",
            vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
        ),
        "gpt-2" | "phi-2" | "mpt" | "olmo" => p("GPT2", vec![GPT2]),
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" => {
            p("STARCODER", vec![r"\p{N}", GPT2])
        }
        other => anyhow::bail!(
            "tokenizer.ggml.pre = {other:?} is not supported (llama.cpp pre-tokenizers implemented here: {})",
            SUPPORTED.join(", ")
        ),
    };
    Ok(pre_tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_value_resolves_and_unknown_is_refused_naming_key_and_value() {
        for pre in SUPPORTED {
            assert!(for_pre(Some(pre)).is_ok(), "{pre}");
        }
        let err = for_pre(Some("tekken")).unwrap_err().to_string();
        assert!(err.contains("tokenizer.ggml.pre = \"tekken\""), "{err}");
        assert_eq!(err.lines().count(), 1);
        assert_eq!(for_pre(None).ok().map(|p| p.kind), Some("DEFAULT"));
    }

    #[test]
    fn every_pipeline_builds() {
        for pre in SUPPORTED {
            let built = for_pre(Some(pre)).and_then(|p| p.pipeline());
            assert!(built.is_ok(), "{pre}: {:?}", built.err());
        }
    }
}

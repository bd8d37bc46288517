//! `nanollm generate`'s arguments (clap) and what they imply (the fixed seed).
use crate::cli::seed::{parse_seed, SeedArg};
use crate::engine::DecodeMode;
use crate::flags::PrefillKernel;
use crate::kv::DEFAULT_BLOCK_SIZE;
use crate::model::quantize_at_load::InSitu;
use crate::model::WeightDtype;
use clap::Args;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Examples:
  nanollm generate --show-stats \"What is the capital of France?\"
  nanollm generate --decode naive --max-new-tokens 32 --no-chat \"Once upon a time\"
  echo \"Explain the KV cache\" | nanollm generate --json - > run.json

Chat: when the model ships a chat template (the default model does), the prompt is wrapped in
it as one user turn (--system adds a system turn), as llama.cpp's conversation mode and vLLM's
chat API do. --no-chat sends the prompt as raw text.

Stats (--show-stats, on stderr; --json puts them in the JSON on stdout), as vLLM defines them:
  TTFT   time to first token: from after tokenization to the first sampled token (prefill + sample)
  TPOT   time per output token: (end-to-end - TTFT) / (generated - 1), the first token excluded
  ITL    inter-token latency: each gap between two consecutive tokens (p50/p90/p99/max)
  E2EL   end-to-end latency of the request

Roofline (--show-stats, --json): prefill FLOPs counted from the model's shapes (2 per weight per
prompt row, attention's QK^T and PV over the causal triangle, the LM head for the last row only)
over the prefill time (GFLOP/s), and per decode token the bytes read (every weight matrix once,
LM head included, + the K/V at the mean context in the KV dtype) over TPOT (GB/s), with each
phase's FLOP/byte. --roofline also measures this machine's limits after the run (f32 FMA peak,
int8 roof, read bandwidth from memory and over the decode weights' size, core-to-core latency:
about 1–2 s) to show % of peak and which roof binds each phase.

KV cache: a paged block pool (PagedAttention): blocks of --block-size tokens taken on demand,
stored as --kv-cache-dtype (f16 by default, as llama.cpp). Bytes per token =
2 x layers x kv_heads x head_dim x bytes per value (q8_0: 34 bytes per 32 values, the 4-bit
dtypes 18); the stats
show the bytes measured from the pool next to kv-size's estimate, the blocks held and how much
of a contiguous reservation (prompt + max_new_tokens, or the full context) would be used.";

/// Arguments of `nanollm generate`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP, allow_negative_numbers = true)]
pub struct GenerateArgs {
    /// The prompt; `-` reads it from stdin.
    pub prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(long, value_name = "FILE", conflicts_with = "prompt")]
    pub prompt_file: Option<PathBuf>,
    /// A .gguf file, a Hugging Face model folder (config.json, model.safetensors or shards,
    /// tokenizer.json), or a hub id (org/name) already in the local HF cache
    /// [default: SmolLM2-135M-Instruct Q4_1 in the nanollm cache].
    #[arg(long, short = 'm', value_name = "PATH|ORG/NAME")]
    pub model: Option<PathBuf>,
    /// Hub revision (branch, tag or commit) for a hub id --model [default: main].
    #[arg(long, value_name = "REV")]
    pub revision: Option<String>,
    /// Weight compute dtype. Only f32 runs on the CPU: f32, f16 and bf16 safetensors are
    /// converted to f32 at load (4 bytes per parameter) and computed in f32, as attention is
    /// (the KV cache's storage is --kv-cache-dtype); a GGUF keeps its quantized matrices.
    /// bf16 and f16 are refused:
    /// candle's CPU bf16/f16 matrix-vector kernels are slower than f32 gemm, and its f16 gemm
    /// rounds activations to f16.
    #[arg(long, value_name = "f32|bf16|f16")]
    pub dtype: Option<WeightDtype>,
    /// Quantize a Hugging Face folder's matrices at load into GGUF blocks (llama.cpp's type
    /// names; ggml's reference quantizers), to run on the quantized kernels in a quarter to
    /// an eighth of the f32 memory. q4_k takes q5_0 for rows that are not whole blocks of
    /// 256, as llama-quantize does. Not for a GGUF, which is quantized already.
    #[arg(long, value_name = "q8_0|q4_0|q4_k")]
    pub quantize: Option<InSitu>,
    /// Most tokens to generate.
    #[arg(long, short = 'n', default_value_t = 256)]
    pub max_new_tokens: usize,
    /// Decode with the KV cache (prefill once, one token per step) or naively (recompute the
    /// whole sequence every step).
    #[arg(long, value_enum, default_value_t = DecodeMode::KvCache)]
    pub decode: DecodeMode,
    /// Sampling temperature; 0 = greedy.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f64,
    /// Sample only from the k most likely tokens.
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Nucleus sampling threshold, in (0, 1].
    #[arg(long, allow_negative_numbers = true)]
    pub top_p: Option<f64>,
    /// Random seed for sampling [default: drawn at random and reported when sampling
    /// (--temperature above 0), so the run can be repeated with --seed]. -1 draws one, as
    /// llama.cpp's -1; another negative seed is taken modulo 2^64, as run-batch and serve
    /// take a JSON seed.
    #[arg(long, allow_negative_numbers = true, value_parser = parse_seed)]
    pub seed: Option<SeedArg>,
    /// Penalty for repeating recent tokens (1.0 = off).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub repeat_penalty: f32,
    /// How many recent tokens the repeat penalty considers.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Stop when the text contains this string (repeatable).
    #[arg(long, value_name = "TEXT")]
    pub stop: Vec<String>,
    /// Wrap the prompt in the model's chat template (the default when it has one). The
    /// prompt is message text, data: control-token text in it (such as <|im_end|>) is
    /// tokenized as plain text; only the template's markup gives control tokens.
    #[arg(long, overrides_with = "no_chat")]
    pub chat: bool,
    /// Send the prompt as raw text, without the chat template. Control-token text in it
    /// (such as <|im_start|>) maps to its ids, as in llama.cpp.
    #[arg(long, overrides_with = "chat")]
    pub no_chat: bool,
    /// System message for the chat template.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// How the KV cache stores K and V: f32, f16, bf16, q8_0 (ggml's 8-bit blocks: 34
    /// bytes per 32 values), q4_0 or iq4_nl (ggml's 4-bit blocks, 18 bytes per 32 values;
    /// iq4_nl's non-linear codebook is the more accurate), q4_0r or iq4_nlr (the same after a
    /// Hadamard rotation in groups of up to 128 values, as llama.cpp rotates: the most accurate
    /// 4-bit caches on SmolLM2; on Gemma 3 iq4_nl unrotated is), dequantized inside attention.
    #[arg(
        long,
        value_name = "f32|f16|bf16|q8_0|q4_0|iq4_nl|q4_0r|iq4_nlr",
        default_value = "f16"
    )]
    pub kv_cache_dtype: String,
    /// Tokens per block of the paged KV cache (1 to 256).
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE)]
    pub block_size: usize,
    /// Sliding-window layers (Gemma 3) keep every block and apply their window as a mask,
    /// as llama.cpp's --swa-full does; by default they hold only the window's blocks and
    /// read only its keys. The same tokens either way.
    #[arg(long)]
    pub swa_full: bool,
    #[arg(long, value_name = "POLICY:budget=N", help = crate::flags::runtime::KV_EVICT_HELP)]
    pub kv_evict: Option<String>,
    /// Print timing, KV-cache and roofline stats and a per-token table on stderr (with
    /// --json as well: the JSON on stdout, these on stderr).
    #[arg(long)]
    pub show_stats: bool,
    /// After the run, measure this machine's limits (f32 FMA peak, int8 roof, read
    /// bandwidth from memory and over the decode weights' size, core-to-core latency; about
    /// 1–2 s) and show each phase as % of its roof (implies --show-stats; with --json, adds
    /// them to the JSON).
    #[arg(long)]
    pub roofline: bool,
    /// Write one JSON document (text, stats, per-token rows) to stdout instead of the text.
    #[arg(long)]
    pub json: bool,
    /// Matrix kernels for prefill: `quantized` (the default) runs prompts on the GGUF
    /// kernels with 8-bit activations, as llama.cpp does, and holds no f32 copy of the
    /// weights; `dense` also dequantizes the weights to f32 at load (4 bytes per weight) and
    /// runs prefill as f32 GEMMs, the full-precision reference (on this small model it
    /// answers "What is the capital of France?" with "The capital of France is Paris."
    /// where 8-bit activations, and llama.cpp, get "L'Étoile, …"); `auto` picks per request
    /// by prompt length (quantized below 128 tokens; holds the f32 copy). Decode steps
    /// always use the quantized kernels.
    #[arg(long, value_enum, default_value_t = PrefillKernel::Quantized)]
    pub prefill_kernel: PrefillKernel,
    /// CPU threads [default: RAYON_NUM_THREADS when set, else the number of physical cores].
    #[arg(long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub spec: crate::flags::SpecArgs,
    #[command(flatten)]
    pub trace: crate::trace::TraceArgs,
}

impl GenerateArgs {
    /// The fixed seed `--seed` gives, if any (`None` without it or for `-1`).
    pub fn fixed_seed(&self) -> Option<u64> {
        match self.seed {
            Some(SeedArg::Fixed(s)) => Some(s),
            _ => None,
        }
    }
}

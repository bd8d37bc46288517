//! `nanollm kv-size`'s arguments ([`KvSizeArgs`]) and their help text.
use clap::Args;

const AFTER_HELP: &str = "\
Examples:
  nanollm kv-size --model qwen3-32b --seq 128k
  nanollm kv-size --model llama-3.1-70b --seq 8k,32k,128k --batch 16 --tp 4 --gpu-mem 80GiB
  nanollm kv-size --model ./Qwen3-0.6B/config.json --seq 32k --dtype fp8 --json
  nanollm kv-size --model model.gguf --seq 4096 --dtype f32
  nanollm kv-size --layers 32 --kv-heads 8 --head-dim 128 --seq 1m
  nanollm kv-size --list

Units: bytes are exact; GiB = 2^30 bytes, GB = 10^9 bytes. In --seq and --batch, k and K
both mean 1,024 and m and M 1,048,576 (context lengths are named that way: \"128k\" is
131,072 tokens); the resolved count is always printed.

Arithmetic, per token and layer: MHA/GQA/MQA 2 · num_key_value_heads · head_dim values;
MLA kv_lora_rank + qk_rope_head_dim values; a sliding-window layer holds min(T, window)
tokens; linear-attention and Mamba layers hold no KV, only a constant state per sequence.
\"As if MHA\" is plain full attention in every layer: num_key_value_heads = num_attention_heads,
no sliding windows, no MLA latent, no linear-attention or Mamba layers (2 · layers ·
num_attention_heads · head_dim values per token; for MLA heads · v_head_dim, the DeepSeek-V2
paper's 2·n_h·d_h·l baseline), per GPU like the main figure under --tp. num_attention_heads must be a
multiple of num_key_value_heads (--heads of --kv-heads).
--dtype defaults to auto, as vLLM's --kv-cache-dtype: the dtype config.json names (bf16 for
bfloat16, f16 for float16 and float32), bf16 for a preset or a shape (bf16 models), f16 for a
.gguf (llama.cpp's default cache type); nanollm generate caches f16 by default (--kv-cache-dtype f32|f16|bf16|q8_0|q4_0|iq4_nl|q4_0r|iq4_nlr).";

/// Arguments of `nanollm kv-size`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP, allow_negative_numbers = true)]
pub struct KvSizeArgs {
    /// A built-in preset (see --list; case-insensitive), a config.json, an HF model directory,
    /// a .gguf file, or a hub id (org/name) found in the local HF cache.
    #[arg(long, short)]
    pub model: Option<String>,

    /// Tokens per sequence: 4096, 32k, 128K, 1m (k = 1,024, m = 1,048,576), or a list
    /// 4k,32k,128k (one row each). Default: the model's max_position_embeddings.
    #[arg(long, allow_hyphen_values = true)]
    pub seq: Option<String>,

    /// Concurrent sequences (each of --seq tokens).
    #[arg(long, default_value = "1", allow_hyphen_values = true)]
    pub batch: String,

    /// KV-cache dtype: f32, f16, bf16, fp8, int8, q8_0 (34 bytes per 32 values), q4_0,
    /// iq4_nl, q4_0r or iq4_nlr (18 bytes per 32), or auto (vLLM's: the model's 16-bit dtype, bf16 for a bfloat16 model,
    /// f16 for float16 and float32 ones and for a .gguf). Default: auto (bf16 for a preset or
    /// a shape). `--kv-cache-dtype` (generate's and vLLM's name) is the same flag.
    #[arg(long, visible_alias = "kv-cache-dtype")]
    pub dtype: Option<String>,

    /// Tensor-parallel degree: bytes are per GPU; KV heads are split across GPUs, replicated
    /// when --tp exceeds num_key_value_heads; an MLA latent is replicated on every GPU.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub tp: u64,

    /// Paged allocation: each sequence rounds up to whole blocks of this many tokens (vLLM's
    /// default is 16).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub block_size: Option<u64>,

    /// Memory of one GPU, e.g. 80GiB or 141GB: with the weights' size, how many sequences of
    /// --seq fit and the most tokens one sequence can reach. No allowance for activations.
    #[arg(long)]
    pub gpu_mem: Option<String>,

    /// The weights' total size for --gpu-mem, e.g. 16GiB (default: the .safetensors files of
    /// an HF directory, a .gguf's tensor data, or a preset's parameter count × --weight-dtype).
    #[arg(long)]
    pub weights: Option<String>,

    /// Parameter count for the weights' size, e.g. 8B, 70.6B, 135M (K/M/B/T = 10^3/6/9/12).
    #[arg(long, conflicts_with = "weights")]
    pub params: Option<String>,

    /// Bytes per parameter for --params and presets: f32, f16, bf16, fp8, int8, q8_0, q4_0, iq4_nl.
    #[arg(long, default_value = "bf16")]
    pub weight_dtype: String,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// List the built-in presets and exit.
    #[arg(long)]
    pub list: bool,

    /// Custom shape: number of layers (num_hidden_layers).
    #[arg(long, conflicts_with = "model", value_parser = clap::value_parser!(u64).range(1..))]
    pub layers: Option<u64>,

    /// Custom shape: K/V heads per layer (num_key_value_heads; default --heads).
    #[arg(long, conflicts_with = "model", value_parser = clap::value_parser!(u64).range(1..))]
    pub kv_heads: Option<u64>,

    /// Custom shape: values per head (head_dim; default --hidden / --heads).
    #[arg(long, conflicts_with = "model", value_parser = clap::value_parser!(u64).range(1..))]
    pub head_dim: Option<u64>,

    /// Custom shape: attention heads (num_attention_heads; a multiple of --kv-heads), for the
    /// "as if plain MHA" figure.
    #[arg(long, conflicts_with = "model", value_parser = clap::value_parser!(u64).range(1..))]
    pub heads: Option<u64>,

    /// Custom shape: model width (hidden_size), for head_dim (and the "as if plain MHA" figure
    /// when --heads is not given).
    #[arg(long, conflicts_with = "model", value_parser = clap::value_parser!(u64).range(1..))]
    pub hidden: Option<u64>,
}

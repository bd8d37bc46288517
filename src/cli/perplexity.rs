//! `nanollm perplexity`: how much a KV dtype costs in accuracy, measured as llama.cpp's
//! `llama-perplexity` measures it (PPL over a text in chunks; KL divergence from a saved base
//! run).
use crate::bench::text::{TEXT, TEXT_NAME};
use crate::cli::clobber::{check_not_input, check_not_model};
use crate::cli::outfile::OutFile;
use crate::cli::output::write_stdout;
use crate::eval::kld::{fnv1a, BaseHeader, BaseReader, BaseWriter, KldAccumulator, KldStats};
use crate::eval::perplexity::{perplexity, score_chunk, ChunkPlan};
use crate::flags::{cache_config, PrefillKernel};
use crate::kv::KvCache;
use crate::model::quantize_at_load::InSitu;
use crate::model::source;
use crate::process;
use crate::units::human_bytes;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Instant;

const AFTER_HELP: &str = "\
Examples:
  nanollm perplexity --kv-cache-dtype f32 --kl-divergence-base /tmp/f32.kld
  nanollm perplexity --kv-cache-dtype q8_0 --kl-divergence-base /tmp/f32.kld --kl-divergence

As llama.cpp's llama-perplexity: the text (by default the shipped Pride and Prejudice
chapters, 2,262 tokens) is cut into chunks of --ctx-size tokens, each run from an empty KV
cache, and the second half of each chunk is scored: PPL = exp(mean negative log-likelihood).
--kl-divergence-base FILE alone saves this run's token distributions (f32 log-probabilities:
about ctx-size/2 x vocab x 4 bytes per chunk, ~200 MB for the default text at 512);
with --kl-divergence it compares this run against FILE instead: Mean KLD, 99.0% KLD,
Maximum KLD, RMS Δp (the change in the probability of the right token) and Same top p (how
often the most likely token is unchanged).";

/// Arguments of `nanollm perplexity`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP, allow_negative_numbers = true)]
pub struct PerplexityArgs {
    /// A .gguf file, an HF folder or a cached hub id [default: the default model].
    #[arg(long, short = 'm', value_name = "PATH|ORG/NAME")]
    pub model: Option<PathBuf>,
    /// Text to score [default: the shipped public-domain text].
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Tokens per chunk (llama.cpp's -c).
    #[arg(long, short = 'c', default_value_t = 512)]
    pub ctx_size: usize,
    /// Score at most this many chunks.
    #[arg(long)]
    pub chunks: Option<usize>,
    /// How the KV cache stores K and V: f32, f16, bf16, q8_0, q4_0, iq4_nl, q4_0r or iq4_nlr
    /// (r: Hadamard-rotated in groups of up to 128 values before quantizing).
    #[arg(
        long,
        value_name = "f32|f16|bf16|q8_0|q4_0|iq4_nl|q4_0r|iq4_nlr",
        default_value = "f16"
    )]
    pub kv_cache_dtype: String,
    /// Tokens per block of the paged KV cache (1 to 256).
    #[arg(long, default_value_t = crate::kv::DEFAULT_BLOCK_SIZE)]
    pub block_size: usize,
    /// Sliding-window layers (Gemma 3) keep every block and apply their window as a mask,
    /// as llama.cpp's --swa-full does; by default they hold only the window's blocks and
    /// read only its keys. The same tokens either way.
    #[arg(long)]
    pub swa_full: bool,
    /// Base file: written by a run without --kl-divergence, read by a run with it.
    #[arg(long, value_name = "FILE")]
    pub kl_divergence_base: Option<PathBuf>,
    /// Compare this run against --kl-divergence-base FILE.
    #[arg(long, requires = "kl_divergence_base")]
    pub kl_divergence: bool,
    /// Write one JSON document to stdout instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// CPU threads [default: RAYON_NUM_THREADS when set, else the number of physical cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Matrix kernels for the chunks (prompt rows): `dense` (the default here) runs f32
    /// weights dequantized at load against f32 activations, so two runs differ by what they
    /// change (a KV dtype, the weights) and not by 8-bit activations rounding their changed
    /// inputs anew; `quantized` the GGUF kernels with 8-bit activations, as `generate` and
    /// `serve` run by default (how much that costs: a dense base, a quantized comparison).
    #[arg(long, value_enum, default_value_t = PrefillKernel::Dense)]
    pub prefill_kernel: PrefillKernel,
    /// Quantize a Hugging Face folder's matrices at load (see `nanollm generate --help`).
    #[arg(long, value_name = "q8_0|q4_0|q4_k")]
    pub quantize: Option<InSitu>,
}

/// Run `nanollm perplexity`.
pub fn run(args: PerplexityArgs) -> Result<ExitCode> {
    let cache_cfg = cache_config(&args.kv_cache_dtype, args.block_size, args.swa_full)?;
    let threads = process::init_threads(args.threads)?;
    let (text, text_name) = match &args.file {
        Some(f) => {
            let bytes = std::fs::read(f)
                .with_context(|| format!("--file {}: cannot read it", f.display()))?;
            let text = String::from_utf8(bytes)
                .map_err(|_| anyhow::anyhow!("--file {}: is not UTF-8 text", f.display()))?;
            (text, f.display().to_string())
        }
        None => (TEXT.to_string(), TEXT_NAME.to_string()),
    };
    let path = source::resolve(args.model.as_deref())?;
    if let (Some(base), false) = (&args.kl_divergence_base, args.kl_divergence) {
        if let Some(f) = &args.file {
            check_not_input("--kl-divergence-base", base, "--file", f)?;
        }
        check_not_model("--kl-divergence-base", base, &path)?;
    }
    // The flags' own errors before the model loads (the context window is checked after).
    ChunkPlan::check_flags(args.ctx_size, args.chunks, usize::MAX)?;
    let mut model = args.prefill_kernel.load(&path, args.quantize)?;
    // The text is data: control-token text in it (`<|im_start|>`) stays plain text, as
    // llama-perplexity tokenizes (`parse_special` off, the model's BOS on).
    model.tokenizer.set_parse_special(false);
    let tokens = model.tokenizer.encode(&text)?;
    let config = model.config();
    let source = match &args.file {
        Some(f) => format!("--file {}", f.display()),
        None => format!("the built-in text {TEXT_NAME}"),
    };
    let plan = ChunkPlan::new(
        tokens.len(),
        args.ctx_size,
        args.chunks,
        config.max_position_embeddings,
        &source,
    )?;
    let bos = model.tokenizer.add_bos;
    let model_name = path.file_name().map_or(path.display().to_string(), |f| {
        f.to_string_lossy().into_owned()
    });
    let scored = plan.scored_per_chunk();
    let targets: Vec<u32> = (0..plan.chunks)
        .flat_map(|c| {
            tokens[c * plan.ctx_size + plan.first() + 1..(c + 1) * plan.ctx_size].to_vec()
        })
        .collect();
    let header = BaseHeader {
        model: model_name.clone(),
        kv_cache_dtype: cache_cfg.dtype.name().to_string(),
        ctx_size: plan.ctx_size,
        chunks: plan.chunks,
        vocab: config.vocab_size,
        targets_fnv1a: fnv1a(&targets),
    };
    let (mut writer, mut reader) = match (&args.kl_divergence_base, args.kl_divergence) {
        (Some(file), false) => {
            let out = OutFile::create("--kl-divergence-base", file)?;
            (Some(BaseWriter::new(out, &header)?), None)
        }
        (Some(file), true) => {
            let r = BaseReader::open(file)?;
            check_base(&r.header, &header)?;
            r.check_length(scored)?;
            (None, Some(r))
        }
        _ => (None, None),
    };
    eprintln!(
        "perplexity: {model_name}, {} tokens of {text_name}, {} of {} tokens ({} scored each), KV cache {} in blocks of {}, {}",
        tokens.len(),
        crate::units::count_of(plan.chunks, "chunk"),
        plan.ctx_size,
        scored,
        cache_cfg.dtype.name(),
        cache_cfg.block_size,
        crate::units::count_of(threads, "thread")
    );
    let mut cache = KvCache::new(
        config.kv_shape(cache_cfg.dtype),
        cache_cfg.block_size,
        plan.ctx_size,
    )?;
    let interrupt = process::interrupt_flag();
    let mut nll = Vec::new();
    let mut kld = KldAccumulator::default();
    let mut running = Vec::new();
    let t0 = Instant::now();
    let mut done = 0;
    for c in 0..plan.chunks {
        if interrupt.load(Ordering::Relaxed) {
            break;
        }
        let step = (|| -> Result<()> {
            let chunk = score_chunk(&model.decoder, &mut cache, &tokens, plan, c, bos)?;
            nll.extend(chunk.nll());
            if let Some(w) = writer.as_mut() {
                w.push(&chunk)?;
            }
            if let Some(r) = reader.as_mut() {
                let base = r.next_rows(scored)?;
                kld.push(&chunk, &base);
            }
            Ok(())
        })();
        if let Err(e) = step {
            // End the progress line first, so the error gets a line of its own.
            if done > 0 && !args.json {
                eprintln!();
            }
            return Err(e);
        }
        let (ppl, _) = perplexity(&nll);
        running.push(ppl);
        done += 1;
        if !args.json {
            eprint!("[{}]{ppl:.4},", c + 1);
        }
    }
    if !args.json {
        eprintln!();
    }
    let seconds = t0.elapsed().as_secs_f64();
    let interrupted = done < plan.chunks;
    if let (Some(w), false) = (writer, interrupted) {
        w.into_inner().finish()?;
    }
    if let (Some(r), false) = (reader.as_mut(), interrupted) {
        r.expect_end()?;
    }
    let (ppl, ppl_err) = perplexity(&nll);
    let kld_stats = reader.as_ref().map(|_| kld.stats());
    if args.json {
        let doc = serde_json::json!({
            "model": path.display().to_string(),
            "text": text_name,
            "text_tokens": tokens.len(),
            "ctx_size": plan.ctx_size,
            "chunks": done,
            "scored_tokens": nll.len(),
            "kv_cache_dtype": cache_cfg.dtype.name(),
            "block_size": cache_cfg.block_size,
            "kv_bytes_per_token": cache.pool.bytes_per_token(),
            // Each K/V row's Hadamard groups (every layer), or null when not rotated.
            "kv_rotation_groups": cache_cfg.dtype.rotated().then(|| {
                crate::kv::codec_q4::rotation_groups(cache.pool.shape().head_dim)
            }),
            "ppl": ppl,
            "ppl_err": ppl_err,
            "ppl_running": running,
            "kl_divergence": kld_stats,
            "duration_s": seconds,
            "interrupted": interrupted,
        });
        write_stdout(&(serde_json::to_string_pretty(&doc)? + "\n"))?;
    } else {
        let mut out = format!(
            "Final estimate: PPL = {ppl:.4} +/- {ppl_err:.5}  ({}, {} scored tokens, KV cache {} = {} per token, {seconds:.1} s)\n",
            crate::units::count_of(done, "chunk"),
            nll.len(),
            cache_cfg.dtype.name(),
            human_bytes(cache.pool.bytes_per_token() as u64)
        );
        if let Some(s) = &kld_stats {
            out.push_str(&render_kld(s, ppl));
        }
        write_stdout(&out)?;
        if interrupted {
            // A notice, not a result: stderr, so `| tail -1` still reads the estimate.
            eprintln!(
                "interrupted after {done} of {} chunks: the estimate covers those only{}",
                plan.chunks,
                match (&args.kl_divergence_base, args.kl_divergence) {
                    (Some(_), false) => "; --kl-divergence-base was not written",
                    _ => "",
                }
            );
        }
    }
    Ok(if interrupted {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

/// A comparison run must score the same tokens with the same model as its base.
fn check_base(base: &BaseHeader, run: &BaseHeader) -> Result<()> {
    let differs = if base.vocab != run.vocab {
        format!(
            "a vocabulary of {} tokens (this run: {} tokens, {})",
            base.vocab, run.vocab, run.model
        )
    } else if base.model != run.model {
        format!("model {} (this run: {})", base.model, run.model)
    } else if base.ctx_size != run.ctx_size {
        format!("--ctx-size {} (this run: {})", base.ctx_size, run.ctx_size)
    } else if base.chunks != run.chunks {
        format!("{} chunks (this run: {})", base.chunks, run.chunks)
    } else if base.targets_fnv1a != run.targets_fnv1a {
        "another text (the scored tokens differ)".to_string()
    } else {
        return Ok(());
    };
    bail!("--kl-divergence-base was made with {differs}: they do not compare")
}

/// llama.cpp's labels for the KL-divergence summary.
fn render_kld(s: &KldStats, ppl: f64) -> String {
    format!(
        "Mean PPL(Q)    : {ppl:.6}\nMean PPL(base) : {:.6}\nMean    KLD    : {:.3e} ± {:.1e}\nMaximum KLD    : {:.3e}\n99.0%   KLD    : {:.3e}\nMedian  KLD    : {:.3e}\nRMS Δp         : {:.3} %\nSame top p     : {:.3} ± {:.3} %\n",
        s.ppl_base,
        s.mean_kld,
        s.mean_kld_err,
        s.max_kld,
        s.p99_kld,
        s.median_kld,
        s.rms_dp_pct,
        s.same_top_p_pct,
        s.same_top_p_err_pct
    )
}

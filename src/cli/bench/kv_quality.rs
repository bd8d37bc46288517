//! `nanollm bench --kv-quality`: KV memory against quality — the KV dtypes and eviction
//! policies scored against the full f16 cache ([`crate::bench::kv_quality`]).
use super::args::BenchArgs;
use super::output::{check_outputs, check_outputs_not_model, interrupted, is_stdout, write_output};
use crate::bench::kv_quality::{self, passkey, KvChoice, QualityPlan};
use crate::bench::text::PromptText;
use crate::kv::codec::parse_runtime_dtype;
use crate::model::source;
use crate::process;
use crate::units::parse_tokens;
use anyhow::{bail, Context, Result};
use std::process::ExitCode;

/// Passkey haystacks when `--passkey-lengths` is not given, in filler sentences (~25 tokens
/// each on SmolLM2's and Gemma 3's tokenizers).
pub const DEFAULT_PASSKEY_LENGTHS: [usize; 3] = [8, 20, 40];
/// Needle depths of the passkey set.
pub const PASSKEY_DEPTHS: [f64; 3] = [0.1, 0.5, 0.9];

/// The configurations of `--kv-quality-configs` (`;`-separated, each `DTYPE` or
/// `DTYPE+POLICY:…`), the reference f16 first; the default set when empty.
///
/// Errors: a bad dtype or `--kv-evict` value, naming the flag.
pub fn choices(list: Option<&str>, block_size: usize) -> Result<Vec<KvChoice>> {
    let Some(list) = list else {
        return kv_quality::default_choices(block_size);
    };
    let mut out = vec![KvChoice::new(crate::kv::KvDtype::F16, None, block_size)?];
    for item in list.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (dtype, evict) = match item.split_once('+') {
            Some((d, e)) => (d.trim(), Some(e.trim())),
            None => (item, None),
        };
        let dtype = parse_runtime_dtype("--kv-quality-configs", dtype)?;
        let choice = KvChoice::new(dtype, evict, block_size)
            .with_context(|| format!("--kv-quality-configs {item:?}"))?;
        if out.iter().any(|c| c.label == choice.label) {
            bail!(
                "--kv-quality-configs: {:?} is listed twice (f16 alone is always the reference)",
                choice.label
            );
        }
        out.push(choice);
    }
    if out.len() == 1 {
        bail!("--kv-quality-configs {list:?}: no configuration to score against f16");
    }
    Ok(out)
}

/// Score the configurations and print the table (stdout; stderr when `--json -` takes it).
///
/// Errors: bad flags, outputs or model; a forward-pass failure.
pub fn run(args: BenchArgs) -> Result<ExitCode> {
    let choices = choices(args.kv_quality_configs.as_deref(), args.block_size)?;
    if args.prompt_len.len() > 1 {
        bail!("--prompt-len: --kv-quality takes one prompt length (the text window's prompt)");
    }
    let ctx = parse_tokens("--prompt-len", args.prompt_len.first().map_or("512", |s| s))?;
    let cont = parse_tokens("--gen-len", &args.gen_len)?;
    if ctx == 0 || cont < 2 {
        bail!("--prompt-len {ctx} and --gen-len {cont}: --kv-quality needs a prompt and at least 2 continuation tokens (the first is predicted before the prompt's end evicts, so it is not scored)");
    }
    if args.runs == 0 || args.runs > 64 {
        bail!(
            "--runs {}: --kv-quality scores 1 to 64 text windows",
            args.runs
        );
    }
    let lengths = if args.passkey_lengths.is_empty() {
        DEFAULT_PASSKEY_LENGTHS.to_vec()
    } else {
        args.passkey_lengths.clone()
    };
    if let Some(l) = lengths.iter().find(|&&l| l == 0 || l > 10_000) {
        bail!("--passkey-lengths {l}: a haystack is 1 to 10000 filler sentences");
    }
    check_outputs(args.json.as_deref(), args.plot.as_deref())?;
    let threads = process::init_threads(args.threads)?;
    let path = source::resolve(args.model.as_deref())?;
    check_outputs_not_model(&args, &path)?;
    let model = args.prefill_kernel.load(&path, args.quantize)?;
    let context = model.config().max_position_embeddings;
    let plan = QualityPlan {
        choices,
        ctx,
        cont,
        windows: args.runs,
        passkey: passkey::cases(&lengths, &PASSKEY_DEPTHS, 0),
        answer_tokens: 8,
    };
    for c in &plan.choices {
        crate::engine::evict::check(&c.cache, false, model.config())?;
    }
    if ctx + cont > context {
        bail!("--prompt-len {ctx} with --gen-len {cont}: beyond the model's context window of {context} tokens");
    }
    let text = PromptText::tokenize(&model.tokenizer)?;
    if args.runs * (ctx + cont) > text.len() {
        bail!(
            "--runs {} windows of --prompt-len {ctx} + --gen-len {cont} tokens need {} tokens, and the shipped text has {} on this tokenizer",
            args.runs,
            args.runs * (ctx + cont),
            text.len()
        );
    }
    let text = text.prompt(args.runs * (ctx + cont))?;
    let longest = plan
        .passkey
        .iter()
        .map(|c| model.tokenizer.encode(&c.prompt).map(|ids| ids.len()))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .max()
        .unwrap_or(0);
    if longest + plan.answer_tokens > context {
        bail!("--passkey-lengths: the longest haystack is {longest} tokens, beyond the model's context window of {context}");
    }
    let interrupt = process::interrupt_flag();
    let Some(rows) = kv_quality::run(
        &model.decoder,
        &model.tokenizer,
        &plan,
        &text,
        interrupt,
        |label| eprintln!("{label}"),
    )?
    else {
        return interrupted();
    };
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let subtitle = format!(
        "{name}; {} windows of {ctx} + {cont} tokens of the shipped text; {} passkey cases up to {longest} tokens; {threads} threads",
        plan.windows,
        plan.passkey.len()
    );
    let table = format!(
        "{subtitle}\n{}",
        kv_quality::table(&rows, plan.passkey.len())
    );
    if args.json.as_deref().is_some_and(is_stdout) {
        eprint!("{table}");
    } else {
        crate::cli::output::write_stdout(&table)?;
    }
    if let Some(p) = &args.plot {
        write_output(
            "--plot",
            p,
            &kv_quality::svg::render(&rows, plan.passkey.len(), &subtitle),
        )?;
    }
    if let Some(p) = &args.json {
        let doc = serde_json::json!({ "plan": plan, "threads": threads, "model": path.display().to_string(), "rows": rows });
        write_output("--json", p, &(serde_json::to_string_pretty(&doc)? + "\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}

//! `nanollm kv-size`: KV-cache memory for a model at a context length, exact to the byte.
//!
//! Reads only a model's config (a preset, config.json, HF directory, GGUF metadata or a hub
//! id in the local HF cache), never its weights. The arithmetic is [`crate::sizing::estimate`].
mod args;
mod auto;
mod fit;
mod list;
mod notes;
mod parse;
mod render;
mod resolve;
mod sizes;

use crate::cli::output::write_stdout;
use crate::sizing::estimate::{estimate, Layout, Query};
use anyhow::{anyhow, bail, Result};
pub use args::KvSizeArgs;
use auto::auto_dtype;
use fit::gpu_fit;
use list::{list_json, list_table};
use notes::{fit_notes, notes};
use parse::{parse_dtype, parse_seq_list, SeqArg};

/// Token counts with kv-size's grammar (`4096`, `32k`, `1.5k`, `1m`; k = 1,024), for bench.
use crate::units::parse_count;
use render::Report;
use resolve::resolve;
use std::process::ExitCode;

/// Run `nanollm kv-size`.
///
/// Errors: bad input (one line naming the flag or file and what is wrong), an unknown model
/// (with the closest preset names), an overflowing size, or a closed stdout.
pub fn run(args: KvSizeArgs) -> Result<ExitCode> {
    if args.list {
        let out = if args.json {
            list_json()?
        } else {
            list_table()?
        };
        write_stdout(&out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.gpu_mem.is_none() {
        for (flag, value) in [("--weights", &args.weights), ("--params", &args.params)] {
            if let Some(v) = value {
                bail!("{flag} {v}: sizes the weights for --gpu-mem; give --gpu-mem too");
            }
        }
    }
    let model = resolve(&args)?;
    let seqs = match &args.seq {
        Some(s) => parse_seq_list(s)?,
        None => {
            let max = model.spec.max_position_embeddings.ok_or_else(|| {
                anyhow!("--seq is needed: the model does not give max_position_embeddings")
            })?;
            vec![SeqArg {
                input: "max_position_embeddings".into(),
                tokens: max,
            }]
        }
    };
    let batch = parse_count("--batch", &args.batch)?;
    let dtype_auto = args
        .dtype
        .as_deref()
        .is_some_and(|d| d.trim().eq_ignore_ascii_case("auto"));
    let (dtype, dtype_default) = match args.dtype.as_deref() {
        Some(_) if dtype_auto => (auto_dtype(&model), false),
        Some(d) => (parse_dtype("--dtype (--kv-cache-dtype)", d)?, false),
        // As vLLM's default (--kv-cache-dtype auto): the model's dtype where config.json
        // names it (bf16 for a preset or a shape).
        None => (auto_dtype(&model), true),
    };
    let layout = Layout {
        tp: args.tp,
        block_size: args.block_size,
    };
    let mut rows = Vec::with_capacity(seqs.len());
    for s in &seqs {
        let q = Query {
            seq: s.tokens,
            batch,
            dtype,
            layout,
        };
        rows.push(estimate(&model.spec, &q)?);
    }
    let gpu = match &args.gpu_mem {
        Some(mem) => Some(gpu_fit(&args, &model, mem, &seqs, dtype, layout)?),
        None => None,
    };
    let mut notes = notes(&model, &seqs, &layout, gpu.is_some());
    if let Some(g) = &gpu {
        notes.extend(fit_notes(
            g,
            &seqs,
            &rows,
            model.spec.max_position_embeddings,
        ));
    }
    let report = Report {
        model: &model,
        seqs: &seqs,
        rows: &rows,
        dtype,
        dtype_default,
        dtype_auto,
        gpu: gpu.as_ref(),
        notes,
    };
    let out = if args.json {
        report.json()?
    } else {
        report.text()
    };
    write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}

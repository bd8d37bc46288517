//! `--gpu-mem`: the weights' size and how many sequences fit in what a GPU has left.
use super::args::KvSizeArgs;
use super::parse::{parse_dtype, SeqArg};
use super::resolve::{Model, WeightsHint};
use super::sizes::bytes_per_value;
use crate::kv::KvDtype;
use crate::sizing::estimate::{fit, free_per_gpu, Fit, Layout, Query};
use crate::units::{parse_bytes, parse_params};
use anyhow::{anyhow, bail, Context, Result};

/// The answer to `--gpu-mem`: the weights' size and a [`Fit`] per `--seq`.
#[derive(Debug)]
pub(super) struct GpuFit {
    pub(super) gpu_mem: u64,
    pub(super) weights: u64,
    pub(super) weights_from: String,
    pub(super) fits: Vec<Fit>,
}

pub(super) fn gpu_fit(
    args: &KvSizeArgs,
    model: &Model,
    mem: &str,
    seqs: &[SeqArg],
    dtype: KvDtype,
    layout: Layout,
) -> Result<GpuFit> {
    let gpu_mem = parse_bytes("--gpu-mem", mem)?;
    let wdt = parse_dtype("--weight-dtype", &args.weight_dtype)?;
    let by_params = |n: u64, from: &str| -> Result<(u64, String)> {
        let b = wdt
            .bytes_for(n)
            .ok_or_else(|| anyhow!("weights of {n} parameters overflow 64 bits"))?;
        Ok((
            b,
            format!("{from} × {} ({})", wdt.name(), bytes_per_value(wdt)),
        ))
    };
    let (weights, weights_from) = if let Some(w) = &args.weights {
        (parse_bytes("--weights", w)?, format!("--weights {w}"))
    } else if let Some(p) = &args.params {
        by_params(parse_params(p)?, &format!("--params {p}"))?
    } else {
        match &model.weights {
            Some(WeightsHint::Bytes(b, from)) => (*b, from.clone()),
            Some(WeightsHint::Params(n, from)) => by_params(*n, from)?,
            None => bail!("--gpu-mem needs the weights' size: pass --weights (e.g. 16GiB) or --params (e.g. 8B)"),
        }
    };
    let free =
        free_per_gpu(gpu_mem, weights, layout.tp).with_context(|| format!("--gpu-mem {mem}"))?;
    let fits = seqs
        .iter()
        .map(|s| {
            fit(
                &model.spec,
                &Query {
                    seq: s.tokens,
                    batch: 1,
                    dtype,
                    layout,
                },
                free,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(GpuFit {
        gpu_mem,
        weights,
        weights_from,
        fits,
    })
}

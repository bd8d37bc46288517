//! What `nanollm generate --show-stats` and `--json` report about a run: latency, the KV
//! cache (measured against the estimate and a contiguous reservation) and the roofline line.
use crate::cli::generate_args::GenerateArgs;
use crate::engine::{Generation, Request, SamplingParams};
use crate::model::Loaded;
use crate::roofline::{self, MachineLimits, ModelWeights, RooflineLine, RunShape};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use memory::{kv_lines, moe_lines, weights_line};

mod memory;
mod spec;

fn opt(v: Option<f64>, unit: &str) -> String {
    v.map_or("n/a".to_string(), |x| format!("{x:.2} {unit}"))
}

/// A run's roofline figures, or why there are none, and the limits when measured.
pub struct RooflineStats {
    line: Result<(ModelWeights, RooflineLine), String>,
    limits: Option<MachineLimits>,
    /// `--roofline` was asked for, but Ctrl-C came before or during the measurement: the
    /// limits were not measured, or were dropped (a disturbed measurement).
    limits_interrupted: bool,
}

impl RooflineStats {
    /// The `roofline` object of `--json`: weights, prefill, decode and limits (null when not
    /// measured); `{"error": ...}` when the weights could not be counted.
    pub fn json(&self) -> serde_json::Value {
        match &self.line {
            Ok((w, line)) => serde_json::json!({
                "weights": w,
                "prefill": line.prefill,
                "decode": line.decode,
                "limits": self.limits,
            }),
            Err(e) => serde_json::json!({ "error": e, "limits": self.limits }),
        }
    }

    /// The `--show-stats` lines.
    fn lines(&self) -> Vec<(&'static str, String)> {
        let limits = self.limits.as_ref();
        let mut out = match &self.line {
            Ok((_, line)) => {
                let mut v = vec![("roofline prefill", line.prefill_text(limits))];
                v.push((
                    "roofline decode",
                    line.decode_text(limits)
                        .unwrap_or_else(|| "n/a (fewer than two tokens)".to_string()),
                ));
                v
            }
            Err(e) => vec![("roofline", format!("n/a ({e})"))],
        };
        out.push((
            "machine limits",
            match limits {
                Some(l) => l.describe(),
                None if self.limits_interrupted => "not measured: interrupted (Ctrl-C)".to_string(),
                None => "not measured: add --roofline (about 1–2 s) for % of this machine's f32 peak and read bandwidth".to_string(),
            },
        ));
        out
    }
}

/// Count the run's work and, with `--roofline`, measure the machine's limits now (after
/// the run, so the measurement does not delay the answer).
pub fn run_roofline(
    model: &Loaded,
    args: &GenerateArgs,
    gen: &Generation,
    request: &Request,
) -> RooflineStats {
    // The kernels this request's prompt really ran on (auto picks by its length).
    let dense = args.prefill_kernel.loads_dense_copy()
        && model.decoder.prompt_is_dense(request.prompt_ids.len());
    let weights = roofline::weights::loaded_model_weights(
        &model.path,
        model.config(),
        model.decoder.weights(),
        dense,
    );
    // Ctrl-C (the run's, or one during the 1.6 s measurement) skips or drops the limits:
    // the user asked to stop, and the stats so far come at once.
    let interrupt = crate::process::interrupt_flag();
    let stopped = || interrupt.load(std::sync::atomic::Ordering::SeqCst);
    let limits = (args.roofline && !stopped())
        .then(|| match &weights {
            Ok(w) => roofline::measure().with_working_set(w.decode.total()),
            Err(_) => roofline::measure(),
        })
        .filter(|_| !stopped());
    let limits_interrupted = args.roofline && limits.is_none();
    if gen.tokens.is_empty() {
        return RooflineStats {
            line: Err("interrupted before the first token: the prefill did not finish".into()),
            limits,
            limits_interrupted,
        };
    }
    let line = weights
        .map(|w| {
            let s = &gen.stats;
            let shape = RunShape {
                prompt: s.prompt_tokens as u64,
                generated: s.generated_tokens as u64,
                mode: s.decode_mode,
                kv_dtype: request.cache.dtype,
                mla_path: Default::default(),
            };
            let line = RooflineLine::new(
                model.config(),
                &w,
                shape,
                s.prefill_ms,
                s.tpot_ms,
                limits.as_ref(),
            );
            (w, line)
        })
        .map_err(|e| format!("{e:#}"));
    RooflineStats {
        line,
        limits,
        limits_interrupted,
    }
}

/// The `--show-stats` block (stderr): model, load time, threads, sampling, token counts,
/// TTFT, TPOT and ITL (ms), prefill/decode split, the weights and KV-cache lines (`memory.rs`) and, when
/// counted, the roofline lines.
pub fn render_stats(
    model: &Loaded,
    gen: &Generation,
    load_ms: f64,
    threads: usize,
    (sampling, seed_drawn): (&SamplingParams, bool),
    roofline: Option<&RooflineStats>,
) -> String {
    let s = &gen.stats;
    let kv = &s.kv_cache;
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<22}{v}\n"));
    line("model", model.path.display().to_string());
    line(
        "decode mode",
        format!(
            "{} ({})",
            s.decode_mode.name(),
            crate::units::count_of(threads, "thread")
        ),
    );
    line("finish reason", gen.finish_reason.name().to_string());
    line("sampling", describe_sampling(sampling, seed_drawn));
    line("prompt tokens", s.prompt_tokens.to_string());
    line("generated tokens", s.generated_tokens.to_string());
    line("model load", format!("{load_ms:.1} ms"));
    if gen.tokens.is_empty() {
        line("TTFT", "n/a (interrupted before the first token)".into());
        line(
            "prefill",
            format!(
                "{:.2} ms, {} of {} prompt tokens (interrupted)",
                s.prefill_ms, kv.tokens, s.prompt_tokens
            ),
        );
    } else {
        line("TTFT", format!("{:.2} ms", s.ttft_ms));
        line(
            "prefill",
            format!(
                "{:.2} ms ({:.1} tokens/s)",
                s.prefill_ms, s.prefill_tokens_per_s
            ),
        );
    }
    line("TPOT", opt(s.tpot_ms, "ms"));
    line(
        "ITL",
        s.itl_ms()
            .map_or("n/a (fewer than two tokens)".into(), |p| {
                format!(
                    "p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                    p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms
                )
            }),
    );
    line(
        "decode",
        format!(
            "{:.2} ms ({})",
            s.decode_ms,
            opt(s.decode_tokens_per_s, "tokens/s")
        ),
    );
    line("end-to-end (E2EL)", format!("{:.2} ms", s.e2el_ms));
    for (k, v) in s.spec.as_ref().map(spec::spec_lines).unwrap_or_default() {
        line(k, v);
    }
    line("weights held", weights_line(&model.decoder.weights_held()));
    if let Some(m) = &s.moe {
        for (k, v) in moe_lines(m, model.decoder.config().num_hidden_layers) {
            line(k, v);
        }
    }
    for (k, v) in kv_lines(kv) {
        line(k, v);
    }
    if let Some(v) = memory::mla_line(model.decoder.config(), kv) {
        line("KV latent (MLA)", v);
    }
    for (k, v) in roofline.map(RooflineStats::lines).unwrap_or_default() {
        line(k, v);
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(["#", "id", "text", "position", "step ms", "cumulative ms"]);
    for ev in &gen.steps {
        table.add_row([
            ev.index.to_string(),
            ev.token_id.to_string(),
            format!("{:?}", model.tokenizer.token_text(ev.token_id)),
            ev.position.to_string(),
            format!("{:.2}", ev.latency_ms),
            format!("{:.2}", ev.elapsed_ms),
        ]);
    }
    if gen.steps.is_empty() {
        return format!("\n{out}");
    }
    format!("\n{out}\n{table}\n")
}

/// The `--json` document: `model`, `settings` (sampling, KV dtype, block size, kernels,
/// threads), `prompt_ids`, every token (`id`, `text`, `position`, `latency_ms`,
/// `elapsed_ms`), `stats` (TTFT, TPOT, ITL in ms; KV bytes measured and estimated),
/// `finish_reason` and the generated `text`.
pub fn json_report(
    model: &Loaded,
    args: &GenerateArgs,
    gen: &Generation,
    load_ms: f64,
    threads: usize,
    chat: bool,
    request: &Request,
) -> serde_json::Value {
    let tokens: Vec<serde_json::Value> = gen
        .steps
        .iter()
        .map(|ev| {
            serde_json::json!({
                "index": ev.index,
                "id": ev.token_id,
                "text": model.tokenizer.token_text(ev.token_id),
                "position": ev.position,
                "latency_ms": ev.latency_ms,
                "elapsed_ms": ev.elapsed_ms,
            })
        })
        .collect();
    let mut doc = serde_json::json!({
        "model": model.path.display().to_string(),
        "settings": {
            "decode_mode": args.decode,
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "top_k": args.top_k,
            "top_p": args.top_p,
            "seed": (!request.sampling.is_greedy()).then_some(request.sampling.seed),
            "seed_drawn": args.fixed_seed().is_none() && !request.sampling.is_greedy(),
            "repeat_penalty": args.repeat_penalty,
            "repeat_last_n": args.repeat_last_n,
            "chat": chat,
            "threads": threads,
            "prefill_kernel": args.prefill_kernel,
            "kv_cache_dtype": gen.stats.kv_cache.dtype,
            "block_size": gen.stats.kv_cache.block_size,
            "kv_evict": request.cache.evict.map(|e| e.label()),
            "speculative": gen.stats.spec.as_ref().map(|r| serde_json::json!({
                "method": r.method, "k": r.k, "force": r.forced,
            })),
        },
        "prompt_ids": request.prompt_ids,
        "text": gen.text,
        "finish_reason": gen.finish_reason,
        "model_load_ms": load_ms,
        "stats": gen.stats,
        "tokens": tokens,
    });
    let held = model.decoder.weights_held();
    if let Some(doc) = doc.as_object_mut() {
        let mut w = serde_json::json!(held);
        if let Some(w) = w.as_object_mut() {
            w.insert("total".into(), held.total().into());
        }
        doc.insert("weights_held".into(), w);
    }
    // No inter-token latency exists with fewer than two tokens: null, not zeros.
    if let Some(stats) = doc.get_mut("stats").and_then(|v| v.as_object_mut()) {
        stats.insert("itl".into(), serde_json::json!(gen.stats.itl_ms()));
        // No first token (interrupted during prefill): no TTFT, as the text says "n/a".
        if gen.stats.generated_tokens == 0 {
            stats.insert("ttft_ms".into(), serde_json::Value::Null);
        }
        let kv = &gen.stats.kv_cache;
        if let Some(k) = stats.get_mut("kv_cache").and_then(|v| v.as_object_mut()) {
            k.insert(
                "paged_utilisation_pct".into(),
                kv.paged_utilisation_pct().into(),
            );
            k.insert(
                "reserved_utilisation_pct".into(),
                kv.reserved_utilisation_pct().into(),
            );
            k.insert(
                "context_utilisation_pct".into(),
                kv.context_utilisation_pct().into(),
            );
        }
    }
    doc
}

/// `greedy`, or the temperature, top-k/top-p and seed (and how to repeat a drawn seed).
fn describe_sampling(p: &SamplingParams, seed_drawn: bool) -> String {
    if p.is_greedy() {
        return "greedy".into();
    }
    let mut out = format!("temperature {}", crate::units::short_number(p.temperature));
    if let Some(k) = p.top_k {
        out += &format!(", top-k {k}");
    }
    if let Some(tp) = p.top_p {
        out += &format!(", top-p {tp}");
    }
    out += &format!(", seed {}", p.seed);
    if seed_drawn {
        out += &format!(" (drawn at random: --seed {} repeats this run)", p.seed);
    }
    out
}

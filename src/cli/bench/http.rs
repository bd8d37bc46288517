//! `nanollm bench --base-url URL`: the serving benchmark against a running OpenAI-compatible
//! server ([`crate::bench::http`]): arguments, prompts, table and JSON.
use super::args::BenchArgs;
use super::output::{check_outputs, check_request_rate, is_stdout, write_output};
use crate::bench::http::{self, HttpPlan};
use crate::bench::text::{PromptText, TEXT_NAME};
use crate::cli::output::write_stdout;
use crate::model::source;
use crate::units::parse_tokens;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::process::ExitCode;

/// Exit code when some request failed.
const EXIT_REQUESTS_FAILED: u8 = 3;

/// Run `nanollm bench --base-url`.
///
/// Errors: bad flags (`--plot`, a non-http URL, an endpoint without a leading `/`, 0 levels
/// or prompts), a tokenizer that does not load, a server that cannot be reached or fails the
/// warm-up request. Failed measured requests are counted, reported, and exit with 3.
pub fn run(args: BenchArgs) -> Result<ExitCode> {
    let raw = args.base_url.clone().unwrap_or_default();
    let mut base_url = raw.trim_end_matches('/').to_string();
    // `http://host:8000/v1` (the form OpenAI clients take) with the default endpoint would
    // request /v1/v1/completions.
    if base_url.ends_with("/v1") && args.endpoint.starts_with("/v1/") {
        base_url.truncate(base_url.len() - "/v1".len());
        eprintln!(
            "note: --base-url {raw}: using {base_url} with --endpoint {} (the base URL is the server's root, as in vLLM's bench)",
            args.endpoint
        );
    }
    if base_url.starts_with("https://") {
        bail!("--base-url {raw}: https is not supported by this build; use http:// (e.g. through a local proxy)");
    }
    if !base_url.starts_with("http://") || base_url.len() <= "http://".len() {
        bail!("--base-url {raw}: expected http://HOST:PORT");
    }
    if base_url.contains(['?', '#']) {
        bail!("--base-url {raw}: expected http://HOST:PORT without a query or fragment");
    }
    if !args.endpoint.starts_with('/') {
        bail!(
            "--endpoint {}: expected a path such as /v1/completions",
            args.endpoint
        );
    }
    if args.plot.is_some() {
        bail!("--plot: not available with --base-url (the server's steps are not visible from outside); see --json");
    }
    if args.scenario.is_some() {
        bail!("--scenario: runs in-process only; drop --base-url");
    }
    if let Some(t) = &args.trace.trace {
        bail!("--trace {}: not available with --base-url (the engine runs in the server): give `nanollm serve` the --trace flag", t.display());
    }
    check_outputs(args.json.as_deref(), None)?;
    check_request_rate(args.request_rate)?;
    if args.concurrency.contains(&0) {
        bail!("--max-concurrency 0: every level must be at least 1");
    }
    let num_prompts = args
        .num_prompts
        .or_else(|| args.concurrency.iter().copied().max())
        .unwrap_or(16);
    if num_prompts == 0 {
        bail!("--num-prompts 0: must be at least 1");
    }
    let levels = if args.concurrency.is_empty() {
        vec![num_prompts]
    } else {
        args.concurrency.clone()
    };
    let prompt_len = match &args.prompt_len[..] {
        [] => 128,
        [one] => parse_tokens("--prompt-len", one)?,
        _ => bail!("--prompt-len: give one length with --base-url"),
    };
    let gen_len = parse_tokens("--gen-len", &args.gen_len)?;
    if prompt_len == 0 || gen_len == 0 {
        bail!("--prompt-len and --gen-len must be at least 1 token");
    }
    let tok_path = source::resolve_flag("--tokenizer", args.tokenizer.as_deref(), None)?;
    if let Some(json) = &args.json {
        crate::cli::clobber::check_not_model("--json", json, &tok_path)?;
    }
    let files = source::load_tokenizer(&tok_path).with_context(|| match &args.tokenizer {
        Some(p) => format!("--tokenizer {}", p.display()),
        None => "the default model's tokenizer".to_string(),
    })?;
    let text = PromptText::tokenize(&files.tokenizer)?;
    // Window k starts at token 397·k (mod the text): distinct for every level and seed, so
    // no level hits the prefix cache with an earlier level's prompts.
    let first = (args.seed as usize)
        .wrapping_mul(levels.len())
        .wrapping_mul(num_prompts);
    let prompts: Vec<Vec<String>> = (0..levels.len())
        .map(|level| {
            (0..num_prompts)
                .map(|i| {
                    let k = first.wrapping_add(level * num_prompts + i) % text.len().max(1);
                    files.tokenizer.decode(&text.window(k * 397, prompt_len)?)
                })
                .collect::<Result<Vec<String>>>()
        })
        .collect::<Result<_>>()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // A fresh connection per request, as vLLM's benchmark opens a session per request:
    // servers that close kept-alive connections (llama-server after 5 requests) would
    // otherwise fail requests sent on a connection they just closed.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .connect_timeout(http::CONNECT_TIMEOUT)
        .read_timeout(http::READ_TIMEOUT)
        .build()
        .context("cannot build the HTTP client")?;
    let api_key = args.api_key.clone();
    let model_arg = args
        .model
        .as_ref()
        .map(|m| m.to_string_lossy().into_owned());
    let (plan, levels_out) = rt.block_on(async {
        let model = match model_arg {
            Some(m) => m,
            None => http::served_model(&client, &base_url, api_key.as_deref()).await?,
        };
        let mut plan = HttpPlan {
            base_url: base_url.clone(),
            endpoint: args.endpoint.clone(),
            model,
            levels,
            num_prompts,
            gen_len,
            request_rate: args.request_rate.filter(|r| r.is_finite()),
            continuous_usage: true,
            api_key,
        };
        eprintln!(
            "running {} requests per level against {}{} (model {})…",
            num_prompts, plan.base_url, plan.endpoint, plan.model
        );
        let out = http::run_levels(&client, &mut plan, &prompts).await?;
        anyhow::Ok((plan, out))
    })?;
    let text_out = format!(
        "{} requests of ~{prompt_len} prompt tokens ({TEXT_NAME}, cut with {}) + {gen_len} generated tokens per level, {}, streamed from {}{}\n{}\n",
        plan.num_prompts,
        tok_path.display(),
        plan.request_rate
            .map_or("all arriving at once".to_string(), |r| format!("Poisson arrivals at {r} requests/s")),
        plan.base_url,
        plan.endpoint,
        http::render(&levels_out)
    );
    if let Some(file) = &args.json {
        let doc = json!({"settings": plan, "prompt_len": prompt_len, "seed": args.seed, "levels": levels_out});
        let doc = serde_json::to_string_pretty(&doc).context("cannot serialise the report")? + "\n";
        write_output("--json", file, &doc)?;
    }
    if args.json.as_deref().is_some_and(is_stdout) {
        eprint!("{text_out}");
    } else {
        write_stdout(&text_out)?;
    }
    let failed: usize = levels_out.iter().map(|l| l.failed).sum();
    if failed > 0 {
        for l in &levels_out {
            for e in &l.errors {
                eprintln!(
                    "failed request (max concurrency {}): {e}",
                    l.max_concurrency
                );
            }
        }
        eprintln!("warning: {failed} requests failed");
        return Ok(ExitCode::from(EXIT_REQUESTS_FAILED));
    }
    Ok(ExitCode::SUCCESS)
}

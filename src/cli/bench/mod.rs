//! `nanollm bench`: the decode-mode benchmark (`--compare`), the serving benchmarks on the
//! batched engine (`--concurrency`, `--scenario`), against a running server (`--base-url`),
//! and the machine's limits alone (`--machine`). This file only picks one; each lives in
//! its own file over the shared arguments ([`args`]) and outputs ([`output`]).
pub mod args;
pub mod decode;
mod help;
pub mod http;
pub mod kv_quality;
pub mod machine;
pub mod output;
pub mod serving;
pub mod spec_synth;

pub use args::BenchArgs;
pub use decode::EXIT_TOKENS_DIFFER;

use anyhow::Result;
use std::process::ExitCode;

/// Run `nanollm bench`: warn about flags the chosen benchmark ignores, then run it.
pub fn run(args: BenchArgs) -> Result<ExitCode> {
    args::warn_unused_scenario_flags(&args);
    if args.machine {
        return machine::run_machine(&args);
    }
    if args.base_url.is_some() {
        return http::run(args);
    }
    if !args.spec_synth_rates.is_empty() {
        return spec_synth::run(args);
    }
    if args.kv_quality {
        return kv_quality::run(args);
    }
    if !args.concurrency.is_empty() || args.scenario.is_some() {
        return serving::run(args);
    }
    decode::run(args)
}

//! `nanollm bench`: compare decode modes on the same prompts.
use clap::Args;
use std::process::ExitCode;

/// Arguments of `nanollm bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {}

/// Run `nanollm bench`.
pub fn run(_args: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bench: not implemented yet")
}

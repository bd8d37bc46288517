//! `nanollm completions SHELL`: the shell's completion script for every subcommand and
//! flag, generated from the same clap definitions the parser uses (clap_complete), on
//! stdout.
use crate::cli::output::write_stdout;
use anyhow::{Context, Result};
use clap::Args;
use clap_complete::Shell;
use std::process::ExitCode;

const AFTER_HELP: &str = "\
Install (each shell reads its completions from its own place):
  bash:        nanollm completions bash > ~/.local/share/bash-completion/completions/nanollm
  zsh:         nanollm completions zsh > ~/.zfunc/_nanollm   (with fpath+=~/.zfunc before compinit)
  fish:        nanollm completions fish > ~/.config/fish/completions/nanollm.fish
  powershell:  nanollm completions powershell >> $PROFILE
  elvish:      nanollm completions elvish >> ~/.config/elvish/rc.elv";

/// Arguments of `nanollm completions`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Write `cmd`'s completion script for `args.shell` to stdout. Errors: stdout cannot be
/// written (a closed pipe ends quietly, as every command's output does).
pub fn run(args: CompletionsArgs, mut cmd: clap::Command) -> Result<ExitCode> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "nanollm", &mut out);
    let text = String::from_utf8(out).context("the completion script is not UTF-8")?;
    write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

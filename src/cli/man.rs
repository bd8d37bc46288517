//! `nanollm man`: manual pages (roff, section 1) generated from the same clap definitions
//! the parser uses (clap_mangen): `nanollm.1` on stdout, or with `--dir DIR` one page per
//! command written into DIR (`nanollm.1`, `nanollm-generate.1`, …), each written whole.
use crate::cli::outfile::write_whole;
use crate::cli::output::write_stdout;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const AFTER_HELP: &str = "\
Examples:
  nanollm man | man -l -
  nanollm man --dir ~/.local/share/man/man1   (then: man nanollm-serve)";

/// Arguments of `nanollm man`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct ManArgs {
    /// Write every page (nanollm.1 and nanollm-COMMAND.1 for each subcommand) into this
    /// folder, created if missing, instead of nanollm.1 to stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// One page per visible command of `cmd` (the top command first): (file name, roff text).
/// Errors: a page that cannot be rendered (roff into memory: not expected).
pub fn pages(cmd: clap::Command) -> Result<Vec<(String, String)>> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut commands = vec![cmd.clone()];
    commands.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    commands
        .into_iter()
        .map(|c| {
            let page = clap_mangen::Man::new(c).date(env!("NANOLLM_GIT_DATE"));
            let mut roff = Vec::new();
            page.render(&mut roff)
                .context("cannot render the manual page")?;
            let text = String::from_utf8(roff).context("the manual page is not UTF-8")?;
            Ok((page.get_filename(), text))
        })
        .collect()
}

/// Run `nanollm man` over `cmd` (the whole command line's definition).
///
/// Errors: `--dir` names a file, or a folder that cannot be created or written; stdout
/// cannot be written. Each page is written whole or not at all.
pub fn run(args: ManArgs, cmd: clap::Command) -> Result<ExitCode> {
    let pages = pages(cmd)?;
    let Some(dir) = args.dir else {
        if let Some((_, top)) = pages.first() {
            write_stdout(top)?;
        }
        return Ok(ExitCode::SUCCESS);
    };
    make_dir(&dir)?;
    for (name, text) in &pages {
        write_whole("--dir", &dir.join(name), text.as_bytes())?;
    }
    eprintln!("wrote {} manual pages into {}", pages.len(), dir.display());
    Ok(ExitCode::SUCCESS)
}

/// Create `dir` (and its parents) unless it exists. Errors: it is a file, or cannot be made.
fn make_dir(dir: &Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!("--dir {}: is a file, not a folder", dir.display());
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--dir {}: cannot create the folder", dir.display()))
}

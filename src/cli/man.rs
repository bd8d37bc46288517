//! `nanollm man`: manual pages (roff, section 1) generated from the same clap definitions
//! the parser uses (clap_mangen): `nanollm.1` on stdout, or with `--dir DIR` one page per
//! command written into DIR (`nanollm.1`, `nanollm-generate.1`, …), each written whole.
use crate::cli::outfile::{check_writable, write_whole};
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
/// Pages carry only the short version (`nanollm 0.1.0 (commit date)`, not `--version`'s
/// kernels line, which belongs to the machine that runs the command, not to the manual),
/// and the `after_help` text (examples, tables) as written, line for line.
/// Errors: a page that cannot be rendered (roff into memory: not expected).
pub fn pages(cmd: clap::Command) -> Result<Vec<(String, String)>> {
    let source = format!("nanollm {}", super::version::short());
    let date = match env!("NANOLLM_GIT_DATE") {
        "" => "undated",
        d => d,
    };
    let mut cmd = cmd
        .disable_help_subcommand(true)
        .long_version(None::<&'static str>);
    cmd.build();
    let mut commands = vec![cmd.clone()];
    commands.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    commands
        .into_iter()
        .map(|c| {
            let extra = c
                .get_after_long_help()
                .or_else(|| c.get_after_help())
                .map(|t| t.to_string());
            let page = clap_mangen::Man::new(c.clone())
                .date(date)
                .source(source.clone());
            let mut roff = Vec::new();
            render(&page, &c, extra.as_deref(), &mut roff)
                .context("cannot render the manual page")?;
            let text = String::from_utf8(roff).context("the manual page is not UTF-8")?;
            Ok((page.get_filename(), text))
        })
        .collect()
}

/// clap_mangen's sections in its order, with `extra` (the command's after-help) as a
/// NOTES section kept line for line (`.nf`) instead of clap_mangen's reflowed EXTRA.
fn render(
    page: &clap_mangen::Man,
    cmd: &clap::Command,
    extra: Option<&str>,
    w: &mut Vec<u8>,
) -> std::io::Result<()> {
    page.render_title(w)?;
    page.render_name_section(w)?;
    page.render_synopsis_section(w)?;
    page.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        page.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        page.render_subcommands_section(w)?;
    }
    if let Some(text) = extra {
        w.extend_from_slice(b".SH NOTES\n.nf\n");
        for line in text.lines() {
            w.extend_from_slice(roff_line(line).as_bytes());
            w.push(b'\n');
        }
        w.extend_from_slice(b".fi\n");
    }
    if cmd.get_version().is_some() {
        page.render_version_section(w)?;
    }
    Ok(())
}

/// One line of text for roff, taken literally: backslashes and hyphens escaped, and a line
/// that would start with a control character (`.`, `'`) guarded with `\&`.
fn roff_line(line: &str) -> String {
    let escaped = line.replace('\\', "\\e").replace('-', "\\-");
    match escaped.starts_with('.') || escaped.starts_with('\'') {
        true => format!("\\&{escaped}"),
        false => escaped,
    }
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
    if dir.as_os_str() == "-" {
        bail!("--dir -: expects a folder; `nanollm man` alone writes nanollm.1 to stdout");
    }
    make_dir(&dir)?;
    // Every page's place first, so that a page that cannot be written stops the run before
    // the others are.
    for (name, _) in &pages {
        let path = dir.join(name);
        if path.exists() && !path.is_file() {
            bail!(
                "--dir {}: {name} there is not a file (a folder?); remove it or give another folder",
                dir.display()
            );
        }
        check_writable("--dir", &path)?;
    }
    for (name, text) in &pages {
        write_whole("--dir", &dir.join(name), text.as_bytes())?;
    }
    eprintln!("wrote {} manual pages into {}", pages.len(), dir.display());
    Ok(ExitCode::SUCCESS)
}

/// Create `dir` (and its parents) unless it exists. Errors: it is a file, or cannot be made.
fn make_dir(dir: &Path) -> Result<()> {
    // symlink_metadata: a dangling symlink exists too, and is no folder.
    let exists = std::fs::symlink_metadata(dir).is_ok() || dir.exists();
    if exists && !dir.is_dir() {
        bail!("--dir {}: is a file, not a folder", dir.display());
    }
    // A trailing slash on a file's name (`a-file/`) is no folder either.
    if let Some(parent) = dir.to_str().and_then(|s| s.strip_suffix('/')) {
        if !parent.is_empty() && Path::new(parent).is_file() {
            bail!("--dir {}: is a file, not a folder", dir.display());
        }
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--dir {}: cannot create the folder", dir.display()))
}

//! `nanollm trace-svg TRACE.json -o timeline.svg`: draw a `--trace` file as an SVG
//! timeline (engine steps, KV blocks, one lane per request), for docs and for machines
//! where Perfetto's UI cannot be reached ([`crate::trace::svg`]).
use crate::cli::clobber::same_file;
use crate::cli::outfile::{check_writable, write_whole};
use crate::cli::output::write_stdout;
use crate::trace::read::read_trace;
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

const AFTER_HELP: &str = "\
The trace is any file `--trace` wrote (generate, bench, run-batch, serve), a rotated one
(FILE.1.json) included; its closing `]` may be missing (a killed serve). Files over 1 GiB or
with more than 4,000,000 events are refused. At most 64 requests per engine run get a lane.

Examples:
  nanollm run-batch -i requests.jsonl -o results.jsonl --trace batch.json
  nanollm trace-svg batch.json -o timeline.svg";

/// Arguments of `nanollm trace-svg`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct TraceSvgArgs {
    /// The trace file (Chrome trace-event JSON, as --trace writes it).
    #[arg(value_name = "TRACE.json")]
    pub trace: PathBuf,
    /// The SVG file to write; `-` writes to stdout.
    #[arg(long, short = 'o', value_name = "FILE.svg")]
    pub output: PathBuf,
    /// The title on top [default: the trace's file name].
    #[arg(long)]
    pub title: Option<String>,
}

/// Run `nanollm trace-svg`. Errors: an output that cannot be written or is the trace, a
/// trace that cannot be read or parsed, or is too large.
pub fn run(args: TraceSvgArgs) -> Result<ExitCode> {
    let to_stdout = args.output.as_os_str() == "-";
    if !to_stdout {
        check_writable("--output", &args.output)?;
        if same_file(&args.output, &args.trace) {
            bail!(
                "--output {}: the same file as the trace; writing it would replace the input",
                args.output.display()
            );
        }
    }
    let events = read_trace(&args.trace)?;
    if events.is_empty() {
        bail!("{}: no events to draw", args.trace.display());
    }
    let title = args.title.clone().unwrap_or_else(|| {
        let name = args.trace.file_name().unwrap_or_default().to_string_lossy();
        format!("nanollm trace: {name}")
    });
    let svg = crate::trace::svg::render(&events, &title);
    if to_stdout {
        write_stdout(&svg)?;
    } else {
        write_whole("--output", &args.output, svg.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

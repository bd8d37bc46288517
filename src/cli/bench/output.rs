//! What every kind of `nanollm bench` does with its outputs: `--json` and `--plot` checked
//! before anything runs (writable, not stdout twice, not the model), written whole or to
//! stdout for `-`; `--request-rate` checked; the Ctrl-C ending.
use super::args::BenchArgs;
use crate::cli::clobber::{check_not_model, same_file};
use crate::cli::outfile::{check_writable, write_whole};
use crate::cli::output::write_stdout;
use anyhow::{bail, Result};
use std::path::Path;
use std::process::ExitCode;

/// `--request-rate`, shared by the in-process and HTTP serving benchmarks. Errors: not
/// above 0 (NaN included; `inf` means all at once), or below 0.001 requests/s.
pub(crate) fn check_request_rate(rate: Option<f64>) -> Result<()> {
    let Some(r) = rate else {
        return Ok(());
    };
    let shown = crate::units::short_number(r);
    if r.is_nan() || r <= 0.0 {
        bail!("--request-rate {shown}: must be > 0 requests/s (inf: all at once)");
    }
    if r < 1e-3 {
        bail!("--request-rate {shown}: requests would arrive more than 1,000 s apart on average; give at least 0.001");
    }
    Ok(())
}

/// True when an output path is `-`, meaning stdout.
pub(crate) fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-" || crate::cli::outfile::std_stream(path) == Some(1)
}

/// Check the `--json` and `--plot` outputs before anything runs: each a writable file (or
/// `-` for stdout), and not both the same file or both stdout. Errors: one line.
pub(crate) fn check_outputs(json: Option<&Path>, plot: Option<&Path>) -> Result<()> {
    for (flag, path) in [("--json", json), ("--plot", plot)] {
        if let Some(path) = path.filter(|p| !is_stdout(p)) {
            check_writable(flag, path)?;
        }
    }
    if let (Some(j), Some(p)) = (json, plot) {
        if is_stdout(j) && is_stdout(p) {
            bail!(
                "--json - and --plot -: both would write to stdout; give one of them a file name"
            );
        }
        if !is_stdout(j) && !is_stdout(p) && same_file(j, p) {
            bail!(
                "--json {} and --plot {}: the same file; the one written last would overwrite the other",
                j.display(),
                p.display()
            );
        }
    }
    Ok(())
}

/// Check `--trace` before anything runs: a writable file, not `--json`'s or `--plot`'s.
/// Errors: one line.
pub(crate) fn check_trace(args: &BenchArgs) -> Result<()> {
    args.trace.check(None)?;
    let Some(trace) = &args.trace.trace else {
        return Ok(());
    };
    for (flag, path) in [("--json", &args.json), ("--plot", &args.plot)] {
        if let Some(path) = path.as_deref().filter(|p| !is_stdout(p)) {
            if same_file(trace, path) {
                bail!("--trace {}: the same file as {flag}", trace.display());
            }
        }
    }
    Ok(())
}

/// Refuse `--json`, `--plot` or `--trace` naming the model this run reads (`model`: the
/// resolved path); see [`check_not_model`]. Errors: one line.
pub(crate) fn check_outputs_not_model(args: &BenchArgs, model: &Path) -> Result<()> {
    for (flag, path) in [("--json", &args.json), ("--plot", &args.plot)] {
        if let Some(path) = path {
            check_not_model(flag, path, model)?;
            args.engine.offload.check_not_output(flag, path)?;
        }
    }
    if let Some(path) = &args.trace.trace {
        args.engine.offload.check_not_output("--trace", path)?;
    }
    args.trace.check(Some(model))
}

/// Write `contents` to stdout when `path` is `-`, else to the file, whole ([`write_whole`]).
pub(crate) fn write_output(flag: &str, path: &Path, contents: &str) -> Result<()> {
    if is_stdout(path) {
        return Ok(write_stdout(contents)?);
    }
    write_whole(flag, path, contents.as_bytes())
}

/// A benchmark stopped by Ctrl-C (or SIGTERM/SIGHUP): says so on stderr and exits 130,
/// writing no report.
pub(crate) fn interrupted() -> Result<ExitCode> {
    eprintln!("interrupted: no report written");
    Ok(ExitCode::from(130))
}

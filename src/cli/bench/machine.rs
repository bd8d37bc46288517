//! `nanollm bench --machine`: this machine's limits alone (f32 FMA peak, int8 roof, read
//! bandwidth, core-to-core latency), printed or written as JSON; no model is loaded.
use super::args::BenchArgs;
use super::output::{interrupted, is_stdout, write_output};
use crate::bench::machine::Machine;
use crate::cli::outfile::check_writable;
use crate::cli::output::write_stdout;
use crate::process;
use crate::roofline::cpu_times::CpuTimes;
use crate::roofline::{self, MachineLimits};
use anyhow::{Context, Result};
use std::process::ExitCode;

/// Measure this machine's limits, saying so on stderr (it takes a second or two); `weights`:
/// whether the caller will also time a read over the decode weights' size (a loaded model);
/// `again`: a second measurement (after a bench's runs).
pub(crate) fn measure_limits(weights: bool, again: bool) -> MachineLimits {
    eprintln!(
        "measuring this machine's limits{} (f32 FMA peak, int8 roof, read bandwidth from memory{}, core-to-core latency; about 1–2 s)",
        if again { " again, after the runs" } else { "" },
        if weights {
            " and over the decode weights' size"
        } else {
            ""
        }
    );
    roofline::measure()
}

/// `nanollm bench --machine`: measure the limits and print them (or their JSON).
pub(crate) fn run_machine(args: &BenchArgs) -> Result<ExitCode> {
    if let Some(file) = args.json.as_deref().filter(|p| !is_stdout(p)) {
        check_writable("--json", file)?;
    }
    let threads = process::init_threads(args.threads)?;
    let interrupt = process::interrupt_flag();
    let mut machine = Machine::detect(threads);
    let before = CpuTimes::now();
    let limits = measure_limits(false, false);
    // Ctrl-C during the measurement (1–2 s, not interruptible inside): no report, as the
    // other benchmarks.
    if interrupt.load(std::sync::atomic::Ordering::Relaxed) {
        return interrupted();
    }
    machine.record_cpu_use(before, CpuTimes::now());
    let text = machine_text(&machine, &limits);
    match &args.json {
        Some(file) => {
            let doc = serde_json::json!({ "machine": machine, "limits": limits });
            let doc = serde_json::to_string_pretty(&doc).context("cannot serialise the limits")?;
            write_output("--json", file, &(doc + "\n"))?;
            if is_stdout(file) {
                eprint!("{text}");
            } else {
                write_stdout(&text)?;
            }
        }
        None => write_stdout(&text)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// What `bench --machine` prints: one labelled line per limit.
fn machine_text(machine: &Machine, l: &MachineLimits) -> String {
    let rows = [
        ("machine", machine.describe()),
        (
            "f32 FMA peak",
            format!(
                "{:.1} GFLOP/s on {}, {:.1} GFLOP/s on one core ({}: {} independent {}-lane FMA chains, 2 FLOPs per lane; the prefill GEMM's width)",
                l.f32_gflop_s,
                crate::units::count_of(l.threads, "thread"),
                l.f32_gflop_s_per_core,
                l.kernel,
                roofline::peak::FMA_CHAINS,
                l.fma_lanes
            ),
        ),
        (
            "int8 dot roof",
            format!(
                "{:.1} GOP/s on {}, {:.1} GOP/s on one core ({}: the decode kernels' instruction, 2 ops per multiply-add)",
                l.int8_gop_s,
                crate::units::count_of(l.threads, "thread"),
                l.int8_gop_s_per_core, l.int8_kernel
            ),
        ),
        (
            "read bandwidth",
            format!(
                "{:.2} GB/s on {}, {:.2} GB/s on one core (sum over a {} MiB buffer; GB = 10^9 bytes)",
                l.read_gb_s,
                crate::units::count_of(l.threads, "thread"),
                l.read_gb_s_per_core, l.buffer_bytes >> 20
            ),
        ),
        (
            "ridge point",
            format!(
                "{:.1} FLOP/byte (f32 peak / bandwidth: below it a phase is memory-bound)",
                l.ridge_flop_per_byte
            ),
        ),
        ("core-to-core", core_to_core_text(l.core_to_core_round_trip_ns, l.threads)),
        (
            "measured in",
            format!("{:.2} s{}", l.measure_ms / 1e3, l.disturbed_text()),
        ),
    ];
    rows.iter().map(|(k, v)| format!("{k:<16}{v}\n")).collect()
}

/// The core-to-core row: the round trip, what it costs a decode step, or why there is none.
fn core_to_core_text(round_trip_ns: Option<f64>, threads: usize) -> String {
    match round_trip_ns {
        Some(ns) => format!(
            "{ns:.0} ns round trip of one cache line between two threads (each parallel region's hand-off pays it; a decode step forks about 5 per layer)"
        ),
        None => format!(
            "not measured: {}",
            roofline::handoff::why_not_measured(threads)
        ),
    }
}

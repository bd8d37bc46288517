//! Process-wide set-up shared by the subcommands and the server: CPU threads, Ctrl-C (and
//! SIGTERM/SIGHUP), and the temporary files a hard exit must not leave behind.
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

static INTERRUPT: AtomicBool = AtomicBool::new(false);
static HANDLER: OnceLock<()> = OnceLock::new();
/// Temporary output files to delete when a second Ctrl-C exits at once.
static TEMP_FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Remember `path`, a temporary file that must not outlive a hard exit (second Ctrl-C).
pub fn register_temp_file(path: &Path) {
    if let Ok(mut v) = TEMP_FILES.lock() {
        v.push(path.to_path_buf());
    }
}

/// Forget `path` (it was renamed into place or removed).
pub fn forget_temp_file(path: &Path) {
    if let Ok(mut v) = TEMP_FILES.lock() {
        v.retain(|p| p != path);
    }
}

/// Set the CPU threads candle's kernels use (rayon's global pool and the
/// `RAYON_NUM_THREADS` that candle reads); default: `RAYON_NUM_THREADS` when set, else the
/// physical cores.
/// Returns the count. Errors: `--threads 0`.
pub fn init_threads(threads: Option<usize>) -> Result<usize> {
    let n = match threads {
        Some(0) => bail!("--threads 0: must be at least 1"),
        Some(n) if n > 4 * num_cpus::get().max(1) => bail!(
            "--threads {n}: more than 4x this machine's {} logical CPUs would only slow it down",
            num_cpus::get()
        ),
        Some(n) => n,
        // rayon's own variable, when the user set it (a positive count); else the
        // physical cores.
        None => std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|&n| n > 0 && n <= 4 * num_cpus::get().max(1))
            .unwrap_or_else(|| num_cpus::get_physical().max(1)),
    };
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    // Fails only when the pool already exists (a second call in one process): keep it.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global();
    Ok(n)
}

/// A second signal this soon after the first is the same one delivered twice (GNU
/// `timeout -s INT` signals the child and then its process group), not a second Ctrl-C.
const SAME_SIGNAL: std::time::Duration = std::time::Duration::from_millis(250);

/// A flag set by Ctrl-C (SIGINT), SIGTERM or SIGHUP; the decode loop stops after the
/// current step and the stats so far are printed. A second signal (more than 250 ms later)
/// exits at once with code 130, deleting temporary output files.
pub fn interrupt_flag() -> &'static AtomicBool {
    static FIRST: OnceLock<std::time::Instant> = OnceLock::new();
    HANDLER.get_or_init(|| {
        let _ = ctrlc::set_handler(|| {
            if INTERRUPT.swap(true, Ordering::SeqCst) {
                if FIRST.get().is_some_and(|t| t.elapsed() < SAME_SIGNAL) {
                    return;
                }
                if let Ok(v) = TEMP_FILES.lock() {
                    for p in v.iter() {
                        let _ = std::fs::remove_file(p);
                    }
                }
                // End a line the interrupted output may have left open (ignore a closed
                // stderr: this must not panic).
                use std::io::Write as _;
                let _ = std::io::stderr().write_all(b"\ninterrupted again: exiting now\n");
                std::process::exit(130);
            }
            let _ = FIRST.set(std::time::Instant::now());
        });
    });
    &INTERRUPT
}

/// This machine's physical memory in bytes (`MemTotal` of `/proc/meminfo`, Linux); None
/// where it cannot be read.
pub fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

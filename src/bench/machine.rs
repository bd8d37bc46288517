//! The machine a benchmark ran on: CPU model, cores, threads, crate versions.
use crate::roofline::cpu_times::{CpuTimes, NAMED_CPUS};
use serde::Serialize;
use std::collections::BTreeMap;

/// candle's version (the `candle-core` requirement in Cargo.toml).
pub const CANDLE_VERSION: &str = "0.11.1";

/// Where and with what a benchmark ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    /// CPU model name (`model name` in /proc/cpuinfo), or `unknown`.
    pub cpu_model: String,
    /// Logical CPUs the OS reports.
    pub logical_cpus: usize,
    /// Physical cores.
    pub physical_cores: usize,
    /// Threads candle's kernels ran on (`--threads`).
    pub threads: usize,
    /// Operating system (`linux`, `macos`, ...).
    pub os: String,
    /// CPU architecture (`x86_64`, `aarch64`, ...).
    pub arch: String,
    /// Versions of nanollm and the crates that do the math.
    pub crate_versions: BTreeMap<String, String>,
    /// 1, 5 and 15-minute load averages (/proc/loadavg) before the runs.
    pub load_average_before: Option<[f64; 3]>,
    /// CPUs kept busy by other processes during the runs, on average (0 = the machine was
    /// ours; 1.0 = another process used one whole CPU): other work competes for the cores and
    /// inflates every latency. From /proc/stat minus this process's /proc/self/stat time
    /// and minus steal time.
    pub other_processes_cpus: Option<f64>,
    /// CPUs the hypervisor ran something else on while this machine's CPUs wanted to run,
    /// on average during the runs (/proc/stat `steal`, a virtual machine's time taken by its
    /// host: 0 on bare metal; 0.5 = half a CPU): the host's other guests compete for the
    /// cores, and no process here shows it. None where /proc/stat is missing.
    pub hypervisor_steal_cpus: Option<f64>,
}

impl Machine {
    /// Set `other_processes_cpus` and `hypervisor_steal_cpus` from CPU counters read before
    /// and after the runs ([`CpuTimes::shares`]).
    pub fn record_cpu_use(&mut self, before: Option<CpuTimes>, after: Option<CpuTimes>) {
        (self.other_processes_cpus, self.hypervisor_steal_cpus) = CpuTimes::shares(before, after);
    }

    /// Describe this machine; `threads` is what the run uses.
    pub fn detect(threads: usize) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let versions = [
            ("nanollm", env!("CARGO_PKG_VERSION")),
            ("candle-core", CANDLE_VERSION),
        ];
        Machine {
            cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".to_string()),
            logical_cpus: num_cpus::get(),
            physical_cores: num_cpus::get_physical(),
            threads,
            os: std::env::consts::OS.to_string(),
            arch: std::env::consts::ARCH.to_string(),
            crate_versions: versions
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            load_average_before: load_average(),
            other_processes_cpus: None,
            hypervisor_steal_cpus: None,
        }
    }

    /// One line, e.g. `AMD EPYC · 2 threads (2 cores, 2 logical CPUs) · candle-core 0.11.1,
    /// nanollm 0.1.0 · load average 0.12 before; other processes used 0.01 CPUs during the
    /// runs`, and `; the hypervisor took 0.31 CPUs as steal time` when it took 0.01 or more.
    pub fn describe(&self) -> String {
        let versions: Vec<String> = self
            .crate_versions
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let load = self
            .load_average_before
            .map_or("n/a".to_string(), |l| format!("{:.2}", l[0]));
        let others = self
            .other_processes_cpus
            .map_or("n/a".to_string(), |c| format!("{c:.2}"));
        let steal = match self.hypervisor_steal_cpus {
            Some(c) if c >= NAMED_CPUS => {
                format!("; the hypervisor took {c:.2} CPUs as steal time")
            }
            _ => String::new(),
        };
        format!(
            "{} · {} ({}, {}) · {} · load average {} before; other processes used {} CPUs during the runs{}",
            self.cpu_model,
            crate::units::count_of(self.threads, "thread"),
            crate::units::count_of(self.physical_cores, "core"),
            crate::units::count_of(self.logical_cpus, "logical CPU"),
            versions.join(", "),
            load,
            others,
            steal,
        )
    }
}

/// The 1, 5 and 15-minute load averages from /proc/loadavg; None where there is none.
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// The CPU model from /proc/cpuinfo text: the first `model name` (x86) or, failing that,
/// `Model`/`Hardware`/`cpu model` (Arm and others) line's value.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    for key in ["model name", "Model", "Hardware", "cpu model"] {
        let found = cpuinfo.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k.trim() == key && !v.trim().is_empty()).then(|| v.trim().to_string())
        });
        if found.is_some() {
            return found;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_model_name() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 85\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(
            cpu_model(x86).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        assert_eq!(
            cpu_model("Hardware\t: BCM2835\n").as_deref(),
            Some("BCM2835")
        );
        assert_eq!(cpu_model("processor : 0\n"), None);
    }

    #[test]
    fn describes_the_machine() {
        let mut m = Machine::detect(2);
        assert_eq!(m.threads, 2);
        assert_eq!(m.crate_versions["nanollm"], env!("CARGO_PKG_VERSION"));
        // Steal time shows in the machine line from 0.01 CPUs on.
        m.hypervisor_steal_cpus = Some(0.004);
        assert!(!m.describe().contains("hypervisor"), "{}", m.describe());
        m.hypervisor_steal_cpus = Some(0.31);
        assert!(
            m.describe()
                .ends_with("; the hypervisor took 0.31 CPUs as steal time"),
            "{}",
            m.describe()
        );
    }
}

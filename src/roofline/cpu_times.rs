//! CPU time counters (/proc/stat, /proc/self/stat): what other processes and the hypervisor
//! (steal time) took from this machine's CPUs between two readings. The limits say whether
//! they were measured on a quiet machine; `bench`'s machine line says the same of its runs.
/// CPUs (on average) from which a share taken by others (other processes, steal time) is
/// named in a line: below it the share is a rounding of nothing.
pub const NAMED_CPUS: f64 = 0.01;

/// CPU time counters at one instant (clock ticks), to measure what other processes used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    /// All CPUs' ticks, busy and idle (/proc/stat `cpu` line: user … steal).
    pub total: u64,
    /// All CPUs' idle and I/O-wait ticks.
    pub idle: u64,
    /// All CPUs' steal ticks: time a virtual CPU wanted to run while its host ran
    /// something else (the 8th value of the `cpu` line; 0 on bare metal and where the line
    /// has no such value).
    pub steal: u64,
    /// CPUs the `cpu` line sums over: the `cpuN` lines of /proc/stat (all of the machine's,
    /// whatever CPUs this process may use).
    pub cpus: usize,
    /// This process's user + system ticks, all threads (/proc/self/stat).
    pub own: u64,
}

impl CpuTimes {
    /// Read the counters now; None where /proc is missing or unreadable.
    pub fn now() -> Option<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        CpuTimes::parse(&stat, &own)
    }

    /// Parse /proc/stat and /proc/self/stat text.
    pub fn parse(stat: &str, self_stat: &str) -> Option<CpuTimes> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        // After "pid (comm)": state is field 3; utime and stime are fields 14 and 15.
        let after = self_stat.rsplit_once(')')?.1;
        let f: Vec<&str> = after.split_whitespace().collect();
        let own = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        let cpus = stat
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.strip_prefix("cpu"))
            .filter(|n| n.parse::<usize>().is_ok())
            .count();
        Some(CpuTimes {
            total: v.iter().sum(),
            idle: v.get(3)? + v.get(4)?,
            steal: v.get(7).copied().unwrap_or(0),
            cpus: cpus.max(1),
            own,
        })
    }

    /// The ticks between `self` and `later`: (all, busy but not stolen, stolen, this
    /// process's), steal capped at the busy ticks (a migrated VM's steal counter can jump, or
    /// go backwards: then none stolen). None when the other counters went backwards (another
    /// boot between the readings) or no tick passed.
    fn ticks_since(&self, later: &CpuTimes) -> Option<(u64, u64, u64, u64)> {
        let total = later.total.checked_sub(self.total)?;
        let busy = total.checked_sub(later.idle.checked_sub(self.idle)?)?;
        let steal = later.steal.saturating_sub(self.steal).min(busy);
        let own = later.own.checked_sub(self.own)?;
        (total > 0).then_some((total, busy - steal, steal, own))
    }

    /// CPUs other processes kept busy on average between `self` and `later` (busy ticks
    /// minus steal time, which is the host's, and minus this process's, over one CPU's
    /// wall-clock ticks; the CPU count is /proc/stat's, not this process's affinity). None
    /// when the counters went backwards (another boot between the readings) or no tick
    /// passed.
    pub fn others_since(&self, later: &CpuTimes) -> Option<f64> {
        let (total, busy, _, own) = self.ticks_since(later)?;
        Some(busy.saturating_sub(own) as f64 / (total as f64 / later.cpus.max(1) as f64))
    }

    /// Both shares, (other processes, steal time) in CPUs ([`Self::others_since`],
    /// [`Self::steal_since`]), from `before` to `after`: (None, None) when either reading is
    /// missing (no /proc/stat).
    pub fn shares(before: Option<CpuTimes>, after: Option<CpuTimes>) -> (Option<f64>, Option<f64>) {
        match (before, after) {
            (Some(b), Some(a)) => (b.others_since(&a), b.steal_since(&a)),
            _ => (None, None),
        }
    }

    /// CPUs the hypervisor took on average between `self` and `later`: steal ticks over
    /// one CPU's wall-clock ticks. None when the counters went backwards (another boot
    /// between the readings) or no tick passed.
    pub fn steal_since(&self, later: &CpuTimes) -> Option<f64> {
        let (total, _, steal, _) = self.ticks_since(later)?;
        Some(steal as f64 / (total as f64 / later.cpus.max(1) as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_other_processes_and_steal_time() {
        // Two CPUs (cpu0, cpu1; `cpu` is their sum), the 8th value steal.
        let stat = "cpu  100 0 50 800 40 0 0 10 0 0\ncpu0 1 2 3\ncpu1 4 5 6\nintr 7\n";
        let own = "42 (nano llm) R 1 2 3 4 5 6 7 8 9 10 60 20 0 0";
        let before = CpuTimes {
            total: 1000,
            idle: 840,
            steal: 10,
            cpus: 2,
            own: 80,
        };
        assert_eq!(CpuTimes::parse(stat, own), Some(before));
        // A `cpu` line without the steal column (kernels before 2.6.11): no steal.
        let old = CpuTimes::parse("cpu  100 0 50 800 50 0 0\ncpu0 1\n", own);
        assert_eq!(
            old.map(|t| (t.total, t.idle, t.steal, t.cpus)),
            Some((1000, 850, 0, 1))
        );
        // 2 CPUs, 1000 ticks later: 600 busy, 400 of them ours: others kept 0.4 CPUs busy.
        let later = CpuTimes {
            total: 2000,
            idle: 1240,
            steal: 10,
            cpus: 2,
            own: 480,
        };
        let others = before.others_since(&later);
        assert!((others.unwrap_or(f64::NAN) - 0.4).abs() < 1e-12);
        assert_eq!(before.steal_since(&later), Some(0.0));
        // The same 1000 ticks with 100 of the 600 busy ones stolen by the host: of the 500
        // left, 400 ours, so others kept 0.2 CPUs busy (not blamed for the host's time);
        // the host took 0.2 (100 ticks over 500 ticks of one CPU).
        let stolen = CpuTimes {
            steal: 110,
            ..later
        };
        let others = before.others_since(&stolen).unwrap_or(f64::NAN);
        assert!((others - 0.2).abs() < 1e-12, "{others}");
        let steal = before.steal_since(&stolen).unwrap_or(f64::NAN);
        assert!((steal - 0.2).abs() < 1e-12, "{steal}");
        // A steal counter that jumped past the busy ticks (a migrated VM) counts as all of
        // them, one that went backwards as none.
        let jumped = CpuTimes {
            steal: 5_000,
            ..later
        };
        assert_eq!(before.steal_since(&jumped), Some(1.2));
        assert_eq!(before.others_since(&jumped), Some(0.0));
        let back = CpuTimes { steal: 0, ..later };
        assert_eq!(before.steal_since(&back), Some(0.0));
        // Counters that went backwards (another boot between the readings), or no tick
        // passed: no figure.
        assert_eq!(later.steal_since(&before), None);
        assert_eq!(later.others_since(&before), None);
        assert_eq!(before.steal_since(&before), None);
    }
}

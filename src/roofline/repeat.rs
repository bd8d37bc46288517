//! Limits measured more than once in a run (`bench` measures them before and after its
//! runs): the roofs are the best each figure reached, and how far the measurements moved
//! tells whether another tenant shared the machine meanwhile (seen: docs/benchmarks.md,
//! "Limits that moved within a run").
use super::bandwidth::WorkingSetRead;
use super::limits::MachineLimits;

/// Above this relative move (max / min − 1) of the f32 peak or the read bandwidth between
/// measurements, a report says that the machine's limits moved.
pub const MOVED_NOTICE: f64 = 0.15;

impl MachineLimits {
    /// Each figure the better of `self`'s and `other`'s (a roof is what the hardware can do;
    /// a lower figure was measured while something else ran), the ridge recomputed from the
    /// kept peak and bandwidth, the measuring times added, `other_processes_cpus` and
    /// `hypervisor_steal_cpus` the larger and the core-to-core round trip the shorter. The
    /// kernels and thread count are `self`'s (one process measures the same loops both
    /// times).
    pub fn best_of(&self, other: &MachineLimits) -> MachineLimits {
        let f32_gflop_s = self.f32_gflop_s.max(other.f32_gflop_s);
        let read_gb_s = self.read_gb_s.max(other.read_gb_s);
        let working_set = match (self.working_set, other.working_set) {
            (Some(a), Some(b)) if a.bytes == b.bytes => Some(WorkingSetRead {
                bytes: a.bytes,
                read_gb_s: a.read_gb_s.max(b.read_gb_s),
            }),
            (a, b) => a.or(b),
        };
        MachineLimits {
            f32_gflop_s_per_core: self.f32_gflop_s_per_core.max(other.f32_gflop_s_per_core),
            f32_gflop_s,
            int8_gop_s_per_core: self.int8_gop_s_per_core.max(other.int8_gop_s_per_core),
            int8_gop_s: self.int8_gop_s.max(other.int8_gop_s),
            read_gb_s_per_core: self.read_gb_s_per_core.max(other.read_gb_s_per_core),
            read_gb_s,
            ridge_flop_per_byte: f32_gflop_s / read_gb_s.max(f64::MIN_POSITIVE),
            working_set,
            measure_ms: self.measure_ms + other.measure_ms,
            other_processes_cpus: either(
                self.other_processes_cpus,
                other.other_processes_cpus,
                f64::max,
            ),
            hypervisor_steal_cpus: either(
                self.hypervisor_steal_cpus,
                other.hypervisor_steal_cpus,
                f64::max,
            ),
            core_to_core_round_trip_ns: either(
                self.core_to_core_round_trip_ns,
                other.core_to_core_round_trip_ns,
                f64::min,
            ),
            ..*self
        }
    }
}

/// `pick(a, b)` when both were measured, else whichever was.
fn either(a: Option<f64>, b: Option<f64>, pick: fn(f64, f64) -> f64) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(pick(a, b)),
        (a, b) => a.or(b),
    }
}

/// The best of `measurements`, figure by figure ([`MachineLimits::best_of`]); None when
/// there are none.
pub fn best_of_all(measurements: &[MachineLimits]) -> Option<MachineLimits> {
    let (first, rest) = measurements.split_first()?;
    Some(rest.iter().fold(*first, |best, m| best.best_of(m)))
}

/// The lowest and highest `f` over `measurements` (`(∞, 0)` when there are none).
fn range(measurements: &[MachineLimits], f: fn(&MachineLimits) -> f64) -> (f64, f64) {
    measurements
        .iter()
        .map(f)
        .fold((f64::INFINITY, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// How far the all-threads f32 peak and read bandwidth moved across `measurements`:
/// `(max / min − 1)` of each, as fractions (0.35 = the higher figure is 35% above the
/// lower); `(0, 0)` for fewer than two measurements or a non-positive figure.
pub fn moved(measurements: &[MachineLimits]) -> (f64, f64) {
    let spread = |f: fn(&MachineLimits) -> f64| {
        let (lo, hi) = range(measurements, f);
        if measurements.len() < 2 || lo <= 0.0 || !lo.is_finite() {
            0.0
        } else {
            hi / lo - 1.0
        }
    };
    (spread(|m| m.f32_gflop_s), spread(|m| m.read_gb_s))
}

/// From this ratio (max / min) of the core-to-core round trip between measurements on, a
/// report says that the threads' cores moved (seen: docs/benchmarks.md, "Limits that moved
/// within a run").
pub const ROUND_TRIP_MOVED: f64 = 2.0;

/// The core-to-core round trips (ns) of `measurements` that have one, in order, when the
/// longest is at least [`ROUND_TRIP_MOVED`] × the shortest; None otherwise (or for fewer
/// than two).
fn round_trips_moved(measurements: &[MachineLimits]) -> Option<Vec<f64>> {
    let got: Vec<f64> = measurements
        .iter()
        .filter_map(|m| m.core_to_core_round_trip_ns)
        .collect();
    let lo = got.iter().copied().reduce(f64::min)?;
    let hi = got.iter().copied().reduce(f64::max)?;
    (got.len() >= 2 && hi >= ROUND_TRIP_MOVED * lo).then_some(got)
}

/// One line saying what moved across `measurements`, or None when everything held still:
/// the f32 peak or the read bandwidth by more than [`MOVED_NOTICE`] (e.g. `the limits moved
/// during this run (f32 peak 117.2–179.6 GFLOP/s, read bandwidth 16.50–21.23 GB/s over 2
/// measurements): …`), and the core-to-core round trip by [`ROUND_TRIP_MOVED`]× or more
/// (its readings in order, e.g. `288 → 60 ns`).
pub fn moved_notice(measurements: &[MachineLimits]) -> Option<String> {
    let (f32_moved, read_moved) = moved(measurements);
    let limits_moved = f32_moved > MOVED_NOTICE || read_moved > MOVED_NOTICE;
    let trips = round_trips_moved(measurements).map(|t| {
        let t: Vec<String> = t.iter().map(|ns| format!("{ns:.0}")).collect();
        format!(
            "the core-to-core round trip went {} ns: the two threads' cores were placed farther apart or closer (a VM's vCPUs moved), which changes what each parallel region's hand-off costs and can change the bandwidth too",
            t.join(" → ")
        )
    });
    let limits = limits_moved.then(|| {
        let (f_lo, f_hi) = range(measurements, |m| m.f32_gflop_s);
        let (r_lo, r_hi) = range(measurements, |m| m.read_gb_s);
        format!(
            "the limits moved during this run (f32 peak {f_lo:.1}–{f_hi:.1} GFLOP/s, read bandwidth {r_lo:.2}–{r_hi:.2} GB/s over {} measurements): something else shared this machine's cores or memory, so the runs' figures may be low too; the % columns use the higher figures",
            measurements.len()
        )
    });
    match (limits, trips) {
        (Some(l), Some(t)) => Some(format!("{l}; {t}")),
        (l, t) => l.or(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(f32_gflop_s: f64, read_gb_s: f64, ws: Option<f64>) -> MachineLimits {
        MachineLimits {
            kernel: "avx2+fma",
            fma_lanes: 8,
            int8_kernel: "vpmaddubsw + vpmaddwd",
            threads: 2,
            f32_gflop_s_per_core: f32_gflop_s / 2.0,
            f32_gflop_s,
            int8_gop_s_per_core: 2.0 * f32_gflop_s,
            int8_gop_s: 4.0 * f32_gflop_s,
            read_gb_s_per_core: read_gb_s / 1.5,
            read_gb_s,
            buffer_bytes: 512 << 20,
            ridge_flop_per_byte: f32_gflop_s / read_gb_s,
            working_set: ws.map(|r| WorkingSetRead {
                bytes: 96_000_000,
                read_gb_s: r,
            }),
            measure_ms: 1500.0,
            other_processes_cpus: Some(0.1),
            hypervisor_steal_cpus: Some(0.0),
            core_to_core_round_trip_ns: Some(80.0),
        }
    }

    #[test]
    fn best_of_keeps_each_figures_maximum_and_recomputes_the_ridge() {
        // The VM's two measurements of 2026-12-02 (one run, a minute apart): the peak from
        // the second, the bandwidth from the first.
        let mut before = limits(117.2, 21.23, Some(30.0));
        before.hypervisor_steal_cpus = Some(0.45);
        let mut after = limits(179.6, 16.50, Some(25.0));
        after.core_to_core_round_trip_ns = Some(345.0);
        after.hypervisor_steal_cpus = None;
        let best = best_of_all(&[before, after]).expect("two measurements");
        assert_eq!(best.core_to_core_round_trip_ns, Some(80.0));
        // The larger steal time of those measured (as for other processes).
        assert_eq!(best.hypervisor_steal_cpus, Some(0.45));
        assert_eq!(best.other_processes_cpus, Some(0.1));
        let mut one_thread = before;
        one_thread.core_to_core_round_trip_ns = None;
        assert_eq!(
            one_thread.best_of(&after).core_to_core_round_trip_ns,
            Some(345.0)
        );
        assert_eq!(best.f32_gflop_s, 179.6);
        assert_eq!(best.f32_gflop_s_per_core, 89.8);
        assert_eq!(best.int8_gop_s, 4.0 * 179.6);
        assert_eq!(best.read_gb_s, 21.23);
        assert_eq!(best.read_gb_s_per_core, 21.23 / 1.5);
        assert_eq!(best.ridge_flop_per_byte, 179.6 / 21.23);
        assert_eq!(best.working_set.map(|w| w.read_gb_s), Some(30.0));
        assert_eq!(best.measure_ms, 3000.0);
        assert_eq!(best_of_all(&[]), None);
        assert_eq!(best_of_all(&[after]), Some(after));
    }

    #[test]
    fn moved_limits_get_one_notice_and_still_ones_none() {
        let a = limits(117.2, 21.23, None);
        let b = limits(179.6, 16.50, None);
        let (f, r) = moved(&[a, b]);
        assert!((f - (179.6 / 117.2 - 1.0)).abs() < 1e-12);
        assert!((r - (21.23 / 16.50 - 1.0)).abs() < 1e-12);
        let notice = moved_notice(&[a, b]).expect("moved by 53%");
        assert!(
            notice.contains("117.2–179.6 GFLOP/s") && notice.contains("16.50–21.23 GB/s"),
            "{notice}"
        );
        // 10% apart: within the notice's threshold; one measurement cannot move.
        let c = limits(180.0, 20.0, None);
        let d = limits(198.0, 18.5, None);
        assert_eq!(moved_notice(&[c, d]), None);
        assert_eq!(moved(&[a]), (0.0, 0.0));
        assert_eq!(moved_notice(&[a]), None);
        // The VM's vCPUs moved between two measurements of one run (2026-12-03, 07:44):
        // 60 ns then 316 ns, read 34.0 then 51.3 GB/s. The round trip alone, at 2× or more,
        // gets a notice of its own; just under 2× does not.
        let (mut near, mut far) = (limits(233.0, 34.0, None), limits(233.0, 51.3, None));
        near.core_to_core_round_trip_ns = Some(60.0);
        far.core_to_core_round_trip_ns = Some(316.0);
        let notice = moved_notice(&[near, far]).expect("moved");
        assert!(notice.contains("34.00–51.30 GB/s"), "{notice}");
        assert!(
            notice.contains("; the core-to-core round trip went 60 → 316 ns"),
            "{notice}"
        );
        // In the order measured (a bug hunt's run: 288 ns before the runs, 60 after).
        let notice = moved_notice(&[far, near]).expect("moved");
        assert!(notice.contains("went 316 → 60 ns"), "{notice}");
        // The round trip alone: no word of other tenants or low figures.
        let mut c2 = c;
        c2.core_to_core_round_trip_ns = Some(160.0);
        let notice = moved_notice(&[c, c2]).expect("round trip 80 → 160 ns");
        assert!(
            notice.starts_with("the core-to-core round trip went 80 → 160 ns: "),
            "{notice}"
        );
        assert!(!notice.contains("something else shared"), "{notice}");
        c2.core_to_core_round_trip_ns = Some(159.0);
        assert_eq!(moved_notice(&[c, c2]), None);
        c2.core_to_core_round_trip_ns = None;
        assert_eq!(moved_notice(&[c, c2]), None);
    }
}

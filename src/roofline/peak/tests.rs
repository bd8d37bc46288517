use super::*;
use crate::roofline::limits::disturbed_text;

/// A disturbed all-threads figure is measured again (at most twice), the best kept; a
/// plausible one, or one thread, is not measured again.
#[test]
fn a_disturbed_all_threads_figure_is_measured_again() {
    let calls = std::cell::Cell::new(0);
    let seq = [230.0, 999.0];
    let got = rate_all(2, 117.0, 117.0, || {
        calls.set(calls.get() + 1);
        seq[calls.get() - 1]
    });
    assert_eq!((got, calls.get()), (230.0, 1));
    calls.set(0);
    let got = rate_all(2, 117.0, 100.0, || {
        calls.set(calls.get() + 1);
        [120.0, 110.0][calls.get() - 1]
    });
    assert_eq!((got, calls.get()), (120.0, 2));
    calls.set(0);
    let again = || {
        calls.set(calls.get() + 1);
        999.0
    };
    assert_eq!(rate_all(2, 117.0, 228.0, again), 228.0);
    assert_eq!(rate_all(1, 117.0, 117.0, again), 117.0);
    assert_eq!(calls.get(), 0);
    assert!(!looks_disturbed(2, 117.0, 228.0));
    assert!(looks_disturbed(2, 117.0, 150.0));
}

#[test]
fn measured_limits_are_positive_and_finite() {
    let opts = MeasureOptions {
        trial_ms: 3.0,
        trials: 1,
        buffer_bytes: 8 << 20,
    };
    let m = measure_with(opts);
    for (what, v) in [
        ("f32 per core", m.f32_gflop_s_per_core),
        ("f32", m.f32_gflop_s),
        ("int8 per core", m.int8_gop_s_per_core),
        ("int8", m.int8_gop_s),
        ("read per core", m.read_gb_s_per_core),
        ("read", m.read_gb_s),
        ("ridge", m.ridge_flop_per_byte),
    ] {
        assert!(v.is_finite() && v > 0.0, "{what}: {v}");
    }
    assert_eq!(m.buffer_bytes, 8 << 20);
    assert!(m.threads >= 1);
    assert!(m.describe().contains("GFLOP/s"));
    assert_eq!(m.working_set, None);
    let w = m.with_working_set(3 << 20);
    let ws = w.working_set.expect("measured");
    assert_eq!(ws.bytes, 3 << 20);
    assert!(ws.read_gb_s.is_finite() && ws.read_gb_s > 0.0, "{ws:?}");
    assert!(w.measure_ms > m.measure_ms);
    // A small working set (an L1-sized one) is read many times per trial: its figure is
    // still positive and finite, at the size asked for; above 1 GiB none is measured.
    let small = m.with_working_set(24 * 1024).working_set.expect("measured");
    assert_eq!(small.bytes, 24 * 1024);
    assert!(
        small.read_gb_s.is_finite() && small.read_gb_s > 0.0,
        "{small:?}"
    );
    assert_eq!(m.with_working_set(WORKING_SET_MAX_BYTES + 1), m);
    // The round trip in the line, or on 2 threads or more why there is none.
    let mut two = m;
    two.threads = 2;
    two.core_to_core_round_trip_ns = Some(63.4);
    assert!(two
        .describe()
        .contains("; core-to-core round trip 63 ns · 2 threads"));
    two.core_to_core_round_trip_ns = None;
    assert!(
        two.describe().contains("; core-to-core not measured: "),
        "{}",
        two.describe()
    );
    two.threads = 1;
    assert!(!two.describe().contains("core-to-core"));
    assert_eq!((w.read_gb_s, w.f32_gflop_s), (m.read_gb_s, m.f32_gflop_s));
    assert!(
        w.describe().contains("MiB buffer; ")
            && w.describe()
                .contains(" over 3.15 MB, the decode weights' size); ridge"),
        "{}",
        w.describe()
    );
}

/// The limits line says who took CPUs while they were measured: other processes, the
/// hypervisor (steal time, as on this project's VMs), or both, from 0.2 CPUs together.
#[test]
fn the_limits_line_names_who_took_cpus_meanwhile() {
    assert_eq!(disturbed_text(Some(0.1), Some(0.09)), "");
    assert_eq!(disturbed_text(None, None), "");
    assert_eq!(disturbed_text(Some(0.19), None), "");
    let low = ": the all-thread figures are low)";
    assert_eq!(
        disturbed_text(Some(0.45), Some(0.005)),
        format!(" (other processes used 0.45 CPUs meanwhile{low}")
    );
    assert_eq!(
        disturbed_text(Some(0.0), Some(0.62)),
        format!(" (the hypervisor took 0.62 CPUs as steal time meanwhile{low}")
    );
    assert_eq!(
        disturbed_text(None, Some(0.2)),
        disturbed_text(Some(0.0), Some(0.2))
    );
    // Neither alone reaches 0.2, together they do: both named.
    assert_eq!(
        disturbed_text(Some(0.15), Some(0.15)),
        format!(" (other processes used 0.15 CPUs and the hypervisor took 0.15 CPUs as steal time meanwhile{low}")
    );
    // A real measurement reads its steal time (0 or more where /proc/stat exists).
    let m = measure_with(MeasureOptions {
        trial_ms: 1.0,
        trials: 1,
        buffer_bytes: 1 << 20,
    });
    if std::path::Path::new("/proc/stat").exists() {
        assert!(m.hypervisor_steal_cpus.is_some_and(|c| c >= 0.0), "{m:?}");
    }
}

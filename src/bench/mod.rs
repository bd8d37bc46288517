//! Benchmark scenarios, runs, aggregation and report rendering.

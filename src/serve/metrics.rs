//! `GET /metrics`: the server's own view in Prometheus text format, with vLLM V1's metric
//! names (`vllm:time_to_first_token_seconds` → `nanollm_time_to_first_token_seconds`, ...)
//! and vLLM's histogram buckets, so the same dashboards and queries work. Latencies are
//! measured on the engine side: TTFT from the moment the HTTP side received the request to
//! the step that sampled the first token, ITL between a request's tokens, E2E to its end.
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    /// The disk tier's series (`--kv-offload-dir`).
    pub offload: super::metrics_offload::OffloadMetrics,
    /// Speculative decoding's series (`--spec`).
    pub spec: super::metrics_spec::SpecMetrics,
    /// `nanollm_time_to_first_token_seconds`.
    pub ttft: Histogram,
    /// `nanollm_inter_token_latency_seconds`.
    pub itl: Histogram,
    /// `nanollm_e2e_request_latency_seconds`.
    pub e2e: Histogram,
    /// `nanollm_num_requests_running`.
    pub running: IntGauge,
    /// `nanollm_num_requests_waiting`.
    pub waiting: IntGauge,
    /// `nanollm_kv_cache_usage_perc`: blocks in use / blocks in the pool (0 to 1, as vLLM).
    pub kv_usage: Gauge,
    /// `nanollm_kv_cache_blocks_used`: blocks some sequence holds (the idle level is 0;
    /// cached prefix blocks nobody holds do not count).
    pub blocks_used: IntGauge,
    /// `nanollm_kv_cache_blocks_total`: blocks in the pool.
    pub blocks_total: IntGauge,
    /// `nanollm_kv_cache_blocks_cached`: prefix-cache blocks no sequence holds (kept for
    /// later hits, evicted when the pool needs them).
    pub blocks_cached: IntGauge,
    /// `nanollm_kv_cache_bytes_allocated`: memory the pool has claimed (blocks materialized
    /// so far × block bytes); grows until `--kv-mem`, then stays.
    pub bytes_allocated: IntGauge,
    /// `nanollm_kv_cache_bytes_held{kind="full"|"sliding"}`: bytes of the blocks the running
    /// sequences hold, by the kind of layer group (summed per sequence: a shared prefix
    /// block counts once per sequence holding it).
    pub bytes_held: IntGaugeVec,
    /// `nanollm_kv_cache_bytes_full_cache`: what those sequences would hold with every
    /// layer keeping every block (`--swa-full`; equal to the held bytes without sliding
    /// layers).
    pub bytes_full_cache: IntGauge,
    /// `nanollm_prefix_cache_queries_total`: prompt tokens looked up, once per request (at
    /// its first admission; none with prefix caching off).
    pub prefix_queries: IntCounter,
    /// `nanollm_prefix_cache_hits_total`: prompt tokens the prefix cache's pool served
    /// (the disk tier's: [`super::metrics_offload::OffloadMetrics::disk_hits`]).
    pub prefix_hits: IntCounter,
    /// `nanollm_prompt_tokens_total`.
    pub prompt_tokens: IntCounter,
    /// `nanollm_generation_tokens_total`.
    pub generation_tokens: IntCounter,
    /// `nanollm_request_success_total{finished_reason}`.
    pub success: IntCounterVec,
    /// `nanollm_request_aborted_total`: requests whose client went away (also counted in
    /// `request_success_total{finished_reason="abort"}`, as vLLM V1 does).
    pub aborted: IntCounter,
    /// `nanollm_num_preemptions_total`: sequences preempted for want of KV blocks and queued
    /// for recompute (vLLM's `num_preemptions`).
    pub preemptions: IntCounter,
    /// `nanollm_heap_live_bytes`: heap bytes allocated and not freed ([`crate::heap`]), read
    /// at each scrape; flat once the pool is materialized (the soak test checks it).
    pub heap_live: IntGauge,
    /// `nanollm_process_resident_memory_bytes`: the resident set, read at each scrape.
    pub resident: IntGauge,
}

/// vLLM's TTFT buckets (seconds).
const TTFT_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's inter-token latency buckets (seconds).
const ITL_BUCKETS: [f64; 19] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's request-latency buckets (seconds).
const E2E_BUCKETS: [f64; 21] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

impl Metrics {
    /// Register every metric (the pool has `blocks_total` blocks).
    ///
    /// Errors: a metric the registry refuses (a name clash: a bug).
    pub fn new(blocks_total: usize) -> prometheus::Result<Metrics> {
        let registry = Registry::new_custom(Some("nanollm".to_string()), None)?;
        let hist = |name: &str, help: &str, buckets: &[f64]| -> prometheus::Result<Histogram> {
            let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))?;
            registry.register(Box::new(h.clone()))?;
            Ok(h)
        };
        let counter = |name: &str, help: &str| -> prometheus::Result<IntCounter> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let gauge = |name: &str, help: &str| -> prometheus::Result<IntGauge> {
            let g = IntGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let kv_usage = Gauge::new(
            "kv_cache_usage_perc",
            "KV-cache usage: blocks in use over blocks in the pool (1 = full).",
        )?;
        registry.register(Box::new(kv_usage.clone()))?;
        let success = IntCounterVec::new(
            Opts::new(
                "request_success_total",
                "Finished requests by finish reason.",
            ),
            &["finished_reason"],
        )?;
        registry.register(Box::new(success.clone()))?;
        let bytes_held = IntGaugeVec::new(
            Opts::new(
                "kv_cache_bytes_held",
                "Bytes of KV blocks the running sequences hold, by layer group kind (full, sliding).",
            ),
            &["kind"],
        )?;
        registry.register(Box::new(bytes_held.clone()))?;
        let m = Metrics {
            offload: super::metrics_offload::OffloadMetrics::new(&registry)?,
            spec: super::metrics_spec::SpecMetrics::new(&registry)?,
            bytes_held,
            bytes_full_cache: gauge(
                "kv_cache_bytes_full_cache",
                "Bytes the running sequences would hold if every layer kept every block (--swa-full).",
            )?,
            ttft: hist(
                "time_to_first_token_seconds",
                "Time to first token, from request receipt (seconds).",
                &TTFT_BUCKETS,
            )?,
            itl: hist(
                "inter_token_latency_seconds",
                "Time between two tokens of one request (seconds).",
                &ITL_BUCKETS,
            )?,
            e2e: hist(
                "e2e_request_latency_seconds",
                "Request latency, receipt to last token (seconds).",
                &E2E_BUCKETS,
            )?,
            running: gauge("num_requests_running", "Requests in the running batch.")?,
            waiting: gauge("num_requests_waiting", "Requests waiting for a slot.")?,
            kv_usage,
            blocks_used: gauge(
                "kv_cache_blocks_used",
                "KV blocks some sequence holds (0 when idle).",
            )?,
            blocks_total: gauge("kv_cache_blocks_total", "KV blocks in the pool.")?,
            blocks_cached: gauge(
                "kv_cache_blocks_cached",
                "Prefix-cache blocks no sequence holds (evicted when the pool needs them).",
            )?,
            bytes_allocated: gauge(
                "kv_cache_bytes_allocated",
                "Bytes of KV blocks materialized so far (bounded by --kv-mem).",
            )?,
            prefix_queries: counter(
                "prefix_cache_queries_total",
                "Prompt tokens looked up in the prefix cache.",
            )?,
            prefix_hits: counter(
                "prefix_cache_hits_total",
                "Prompt tokens served by the prefix cache's pool (disk-tier hits: prefix_cache_disk_hits_total).",
            )?,
            prompt_tokens: counter("prompt_tokens_total", "Prompt tokens admitted.")?,
            generation_tokens: counter("generation_tokens_total", "Tokens generated.")?,
            success,
            aborted: counter(
                "request_aborted_total",
                "Requests ended because their client went away.",
            )?,
            preemptions: counter(
                "num_preemptions_total",
                "Sequences preempted (KV blocks freed, queued for recompute).",
            )?,
            heap_live: gauge(
                "heap_live_bytes",
                "Heap bytes allocated and not freed (counted by the server's allocator).",
            )?,
            resident: gauge(
                "process_resident_memory_bytes",
                "Resident set size of the server process (bytes).",
            )?,
            registry,
        };
        m.blocks_total
            .set(i64::try_from(blocks_total).unwrap_or(i64::MAX));
        Ok(m)
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let big = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
        if let Some(b) = crate::heap::live_bytes() {
            self.heap_live.set(big(b as u64));
        }
        if let Some(b) = crate::heap::resident_bytes() {
            self.resident.set(big(b));
        }
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

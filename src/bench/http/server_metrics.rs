//! The server's own latency view, read from its Prometheus `/metrics`: the `_sum` and
//! `_count` of the TTFT, inter-token and end-to-end histograms under vLLM's names
//! (`vllm:time_to_first_token_seconds`, `nanollm_time_to_first_token_seconds`, ... — any
//! prefix), before and after a level, so their difference is that level's mean.
use serde::Serialize;
use std::collections::HashMap;

/// Sums and counts of the latency histograms at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    values: HashMap<&'static str, f64>,
}

/// The server's mean latencies over an interval (ms).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServerView {
    /// Mean TTFT on the server (receipt to first token).
    pub ttft_mean_ms: Option<f64>,
    /// Mean inter-token latency on the server.
    pub itl_mean_ms: Option<f64>,
    /// Mean end-to-end request latency on the server.
    pub e2e_mean_ms: Option<f64>,
}

const SERIES: [&str; 6] = [
    "time_to_first_token_seconds_sum",
    "time_to_first_token_seconds_count",
    "inter_token_latency_seconds_sum",
    "inter_token_latency_seconds_count",
    "e2e_request_latency_seconds_sum",
    "e2e_request_latency_seconds_count",
];

/// Parse Prometheus text: every sample whose name ends with one of the series (after a
/// `_` or `:` prefix), summed over label sets.
pub fn parse(text: &str) -> Snapshot {
    let mut values = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = name_labels.split('{').next().unwrap_or("");
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        if let Some(s) = SERIES.iter().find(|s| {
            name.strip_suffix(**s)
                .is_some_and(|p| p.is_empty() || p.ends_with('_') || p.ends_with(':'))
        }) {
            *values.entry(*s).or_insert(0.0) += v;
        }
    }
    Snapshot { values }
}

impl Snapshot {
    /// Means over the interval from `before` to this snapshot; None when the server exports
    /// none of the histograms.
    pub fn since(&self, before: &Snapshot) -> Option<ServerView> {
        let mean = |stem: &str| {
            let d = |k: &str| -> Option<f64> {
                let key = SERIES.iter().find(|s| **s == format!("{stem}_{k}"))?;
                Some(self.values.get(key)? - before.values.get(key).copied().unwrap_or(0.0))
            };
            let (sum, count) = (d("sum")?, d("count")?);
            (count > 0.0).then(|| sum / count * 1e3)
        };
        let view = ServerView {
            ttft_mean_ms: mean("time_to_first_token_seconds"),
            itl_mean_ms: mean("inter_token_latency_seconds"),
            e2e_mean_ms: mean("e2e_request_latency_seconds"),
        };
        (view.ttft_mean_ms.is_some() || view.itl_mean_ms.is_some()).then_some(view)
    }
}

/// `GET {base_url}/metrics`, parsed; None when the server has no such route.
pub async fn scrape(
    client: &reqwest::Client,
    base_url: &str,
    api_key: Option<&str>,
) -> Option<Snapshot> {
    let mut req = client.get(format!("{base_url}/metrics"));
    if let Some(k) = api_key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    Some(parse(&resp.text().await.ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_come_from_sum_and_count_deltas_under_any_prefix() {
        let before = parse("# HELP x\nvllm:time_to_first_token_seconds_sum{model_name=\"m\"} 1.0\nvllm:time_to_first_token_seconds_count{model_name=\"m\"} 2\nvllm:inter_token_latency_seconds_sum 0\nvllm:inter_token_latency_seconds_count 0\n");
        let after = parse("vllm:time_to_first_token_seconds_sum{model_name=\"m\"} 1.5\nvllm:time_to_first_token_seconds_count{model_name=\"m\"} 4\nvllm:inter_token_latency_seconds_sum 0.2\nvllm:inter_token_latency_seconds_count 10\nnot_time_to_first_token_seconds_summary 9\n");
        let v = after.since(&before).expect("a view");
        assert_eq!(v.ttft_mean_ms, Some(250.0));
        assert!((v.itl_mean_ms.unwrap_or(0.0) - 20.0).abs() < 1e-9);
        assert_eq!(v.e2e_mean_ms, None);
        assert_eq!(parse("other 1\n").since(&Snapshot::default()), None);
        let ours = parse("nanollm_time_to_first_token_seconds_sum 3\nnanollm_time_to_first_token_seconds_count 3\n");
        assert_eq!(
            ours.since(&Snapshot::default())
                .and_then(|v| v.ttft_mean_ms),
            Some(1000.0)
        );
    }
}

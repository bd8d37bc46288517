//! [`EvictConfig`]: which token rows a sequence's cache keeps (`--kv-evict
//! POLICY[:budget=N][,sinks=N]…`), parsed and checked once.
//!
//! Names follow the papers and NVIDIA's kvpress, whose "presses" score the same things:
//! StreamingLLM (Xiao et al. 2023, "Efficient Streaming Language Models with Attention
//! Sinks"), SnapKV (Li et al. 2024), H2O (Zhang et al. 2023, "Heavy-Hitter Oracle"), TOVA
//! (Oren et al. 2024, "Transformers are Multi-State RNNs"), KNorm (Devoto et al. 2024, "A
//! Simple and Effective L2 Norm-Based Strategy for KV Cache Compression").
use anyhow::{bail, Context, Result};
use serde::Serialize;

/// How a policy scores the rows it may drop; the `budget` highest-scoring rows stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EvictPolicy {
    /// The first `sinks` rows and the most recent ones (StreamingLLM): no scores.
    Streaming,
    /// Attention of the prompt's last `window` queries, averaged over them and over the
    /// query heads of each KV head, smoothed over 5 neighbouring keys (SnapKV); the window's
    /// own keys always stay.
    SnapKv,
    /// Attention each key received, summed over every query since it was written (H2O's
    /// heavy hitters, kvpress's ObservedAttention), for half the budget; the other half
    /// keeps the most recent rows, as the H2O paper does.
    H2o,
    /// Attention of the newest query alone, averaged over the query heads (TOVA); the
    /// newest key always stays.
    Tova,
    /// The L2 norm of each key, smallest kept (KNorm): no queries.
    KNorm,
    /// A seeded random score per row: the baseline every other policy must beat.
    Random,
}

impl EvictPolicy {
    /// Every policy, in the order `--help` lists them.
    pub const ALL: [EvictPolicy; 6] = [
        EvictPolicy::Streaming,
        EvictPolicy::SnapKv,
        EvictPolicy::H2o,
        EvictPolicy::Tova,
        EvictPolicy::KNorm,
        EvictPolicy::Random,
    ];

    /// The name `--kv-evict` takes.
    pub fn name(self) -> &'static str {
        match self {
            EvictPolicy::Streaming => "streaming",
            EvictPolicy::SnapKv => "snapkv",
            EvictPolicy::H2o => "h2o",
            EvictPolicy::Tova => "tova",
            EvictPolicy::KNorm => "knorm",
            EvictPolicy::Random => "random",
        }
    }

    /// Whether its scores come from attention probabilities (so the forward pass must hand
    /// it queries).
    pub fn needs_queries(self) -> bool {
        matches!(
            self,
            EvictPolicy::SnapKv | EvictPolicy::H2o | EvictPolicy::Tova
        )
    }
}

/// How many rows a sequence keeps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Budget {
    /// At most this many rows (`budget=256`).
    Tokens(usize),
    /// This fraction of the prompt's rows, in (0, 1] (`budget=50%` or `budget=0.5`), fixed
    /// in tokens when the prompt is known.
    Ratio(f64),
}

// A ratio is a parsed number in (0, 1], never NaN, so equality is total.
impl Eq for Budget {}

/// `--kv-evict`: the policy and its settings, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EvictConfig {
    /// What scores the rows.
    pub policy: EvictPolicy,
    /// Rows kept per layer (and per KV head).
    pub budget: Budget,
    /// The first rows always kept (attention sinks; `sinks=4`); default 4 for `streaming`,
    /// 0 for the others.
    pub sinks: usize,
    /// SnapKV's observation window: the prompt's last queries that score the keys
    /// (`window=64`, kvpress's default).
    pub window: usize,
    /// During decode, the budget is restored every this many generated tokens (`every=16`);
    /// between two evictions a sequence holds up to `budget + every` rows.
    pub every: usize,
    /// `random`'s seed (`seed=0`).
    pub seed: u64,
}

/// SnapKV's observation window when `window=` is not given (kvpress's `window_size`).
pub const DEFAULT_WINDOW: usize = 64;
/// Generated tokens between two decode-time evictions when `every=` is not given: one
/// block of the default size, so each eviction gives back at least one block.
pub const DEFAULT_EVERY: usize = 16;
/// StreamingLLM's sink tokens when `sinks=` is not given (the paper's 4).
pub const DEFAULT_STREAMING_SINKS: usize = 4;
/// The most rows a budget, window or sink count may name (a bound on what a flag makes us
/// allocate: 2^24 tokens is past every context window we run).
pub const MAX_ROWS: usize = 1 << 24;

impl EvictConfig {
    /// Parse `POLICY[:key=value[,key=value]…]` (keys: `budget`, `sinks`, `window`, `every`,
    /// `seed`). `budget` is required: a token count or a fraction of the prompt (`50%`,
    /// `0.5`).
    ///
    /// Errors (one line naming `--kv-evict`): an unknown policy or key, a value that is not a
    /// number, a budget of 0 or above 2^24 tokens or outside (0, 100%], sinks not below the
    /// budget, a window or `every` of 0.
    pub fn parse(s: &str) -> Result<EvictConfig> {
        let (name, rest) = s.split_once(':').unwrap_or((s, ""));
        let names: Vec<&str> = EvictPolicy::ALL.iter().map(|p| p.name()).collect();
        let Some(policy) = EvictPolicy::ALL.into_iter().find(|p| p.name() == name) else {
            bail!(
                "--kv-evict {s:?}: unknown policy {name:?} (expected {})",
                names.join(", ")
            );
        };
        let mut budget = None;
        let mut cfg = EvictConfig {
            policy,
            budget: Budget::Tokens(0),
            sinks: match policy {
                EvictPolicy::Streaming => DEFAULT_STREAMING_SINKS,
                _ => 0,
            },
            window: DEFAULT_WINDOW,
            every: DEFAULT_EVERY,
            seed: 0,
        };
        let mut seen: Vec<&str> = Vec::new();
        for item in rest.split(',').filter(|i| !i.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                bail!("--kv-evict {s:?}: {item:?} is not key=value");
            };
            if seen.contains(&key) {
                bail!("--kv-evict {s:?}: {key} is given twice");
            }
            seen.push(key);
            let count = || -> Result<usize> {
                let n: usize = value
                    .parse()
                    .with_context(|| format!("--kv-evict {s:?}: {key}={value:?} is not a count"))?;
                if n > MAX_ROWS {
                    bail!("--kv-evict {s:?}: {key}={n} is above {MAX_ROWS} tokens");
                }
                Ok(n)
            };
            match key {
                "budget" => budget = Some(parse_budget(s, value)?),
                "sinks" => cfg.sinks = count()?,
                "window" => cfg.window = count()?,
                "every" => cfg.every = count()?,
                "seed" => {
                    cfg.seed = value.parse().with_context(|| {
                        format!("--kv-evict {s:?}: seed={value:?} is not a number")
                    })?
                }
                _ => bail!(
                    "--kv-evict {s:?}: unknown key {key:?} (expected budget, sinks, window, every, seed)"
                ),
            }
        }
        let Some(budget) = budget else {
            bail!("--kv-evict {s:?}: no budget (add :budget=N tokens or :budget=50%)");
        };
        cfg.budget = budget;
        if let Budget::Tokens(n) = budget {
            if cfg.sinks >= n {
                bail!(
                    "--kv-evict {s:?}: budget={n} must be above sinks={}{} (the sinks alone fill it)",
                    cfg.sinks,
                    if seen.contains(&"sinks") { "" } else { ", streaming's default" }
                );
            }
        }
        if cfg.window == 0 || cfg.every == 0 {
            bail!("--kv-evict {s:?}: window and every must be at least 1");
        }
        Ok(cfg)
    }

    /// The rows kept for a sequence whose prompt has `prompt_len` tokens: the token budget,
    /// or the ratio of the prompt rounded up, at least `sinks + 1`.
    pub fn budget_tokens(&self, prompt_len: usize) -> usize {
        match self.budget {
            Budget::Tokens(n) => n,
            Budget::Ratio(r) => ((prompt_len as f64 * r).ceil() as usize).max(self.sinks + 1),
        }
    }

    /// The most rows a sequence with a prompt of `prompt_len` tokens holds in a full
    /// layer, ending at `tokens` tokens: its whole prompt until the prompt's end evicts,
    /// then up to the budget plus `every` generated rows.
    pub fn most_rows(&self, prompt_len: usize, tokens: usize) -> usize {
        prompt_len
            .max(self.budget_tokens(prompt_len) + self.every)
            .min(tokens)
    }

    /// The flag's text back (`snapkv:budget=512,window=64`), for reports.
    pub fn label(&self) -> String {
        let budget = match self.budget {
            Budget::Tokens(n) => n.to_string(),
            Budget::Ratio(r) => format!("{}%", (r * 100.0 * 1e6).round() / 1e6),
        };
        let mut s = format!("{}:budget={budget}", self.policy.name());
        if self.sinks > 0 {
            s += &format!(",sinks={}", self.sinks);
        }
        if self.policy == EvictPolicy::SnapKv {
            s += &format!(",window={}", self.window);
        }
        s
    }
}

/// `budget=`'s value: a token count, a percentage or a fraction.
fn parse_budget(flag: &str, value: &str) -> Result<Budget> {
    let bad = || format!("--kv-evict {flag:?}: budget={value:?} is not a token count, 50% or 0.5");
    let ratio = if let Some(p) = value.strip_suffix('%') {
        Some(p.parse::<f64>().with_context(bad)? / 100.0)
    } else if value.contains('.') {
        Some(value.parse::<f64>().with_context(bad)?)
    } else {
        None
    };
    match ratio {
        Some(r) if r > 0.0 && r <= 1.0 => Ok(Budget::Ratio(r)),
        Some(_) => bail!("--kv-evict {flag:?}: budget={value} must be above 0 and at most 100%"),
        None => {
            let n: usize = value.parse().with_context(bad)?;
            if n == 0 || n > MAX_ROWS {
                bail!("--kv-evict {flag:?}: budget={n} must be 1 to {MAX_ROWS} tokens");
            }
            Ok(Budget::Tokens(n))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_examples_parse() -> Result<()> {
        let s = EvictConfig::parse("streaming:budget=256,sinks=4")?;
        assert_eq!(
            (s.policy, s.budget, s.sinks),
            (EvictPolicy::Streaming, Budget::Tokens(256), 4)
        );
        let k = EvictConfig::parse("snapkv:budget=512")?;
        assert_eq!((k.policy, k.sinks, k.window), (EvictPolicy::SnapKv, 0, 64));
        assert_eq!(k.label(), "snapkv:budget=512,window=64");
        let r = EvictConfig::parse("knorm:budget=25%")?;
        assert_eq!(r.budget, Budget::Ratio(0.25));
        assert_eq!(r.budget_tokens(101), 26);
        assert_eq!(
            EvictConfig::parse("h2o:budget=0.5")?.budget,
            Budget::Ratio(0.5)
        );
        Ok(())
    }

    #[test]
    fn bad_flags_get_one_line_naming_the_flag() {
        for (flag, says) in [
            ("lru:budget=4", "unknown policy \"lru\""),
            ("streaming", "no budget"),
            ("streaming:budget=0", "must be 1 to"),
            ("streaming:budget=4", "must be above sinks=4"),
            ("knorm:budget=2,sinks=2", "must be above sinks=2"),
            ("knorm:budget=-3", "not a token count"),
            ("knorm:budget=150%", "at most 100%"),
            ("knorm:budget=0%", "above 0"),
            ("knorm:budget=99999999999999999999999", "not a token count"),
            ("knorm:budget=20000000", "must be 1 to"),
            ("snapkv:budget=8,window=0", "at least 1"),
            ("snapkv:budget=8,size=3", "unknown key \"size\""),
            ("snapkv:budget=8,window", "is not key=value"),
            ("knorm:budget=8,budget=9", "budget is given twice"),
            ("streaming:budget=1", "streaming's default"),
        ] {
            match EvictConfig::parse(flag) {
                Ok(c) => panic!("{flag} parsed: {c:?}"),
                Err(e) => {
                    let e = format!("{e:#}");
                    assert!(e.contains("--kv-evict") && e.contains(says), "{flag}: {e}");
                    assert!(!e.contains('\n'), "{e}");
                }
            }
        }
    }
}

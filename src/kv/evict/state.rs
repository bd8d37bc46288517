//! [`EvictState`]: one sequence's eviction — its policy, the queries its forward passes
//! logged ([`QueryLog`]), H2O's accumulated attention, and when to evict.
use super::policy::{EvictConfig, EvictPolicy};
use super::score;
use super::KeptRows;
use crate::kv::{BlockTable, KvPool};
use std::sync::Mutex;

/// One query row logged by the forward pass.
#[derive(Debug, Clone)]
pub struct LoggedQuery {
    /// Model layer.
    pub layer: usize,
    /// Position of the token.
    pub pos: usize,
    /// `[num_attention_heads · head_dim]`: every query head of the row, rotated at `pos`
    /// and scaled by the layer's score scale (as attention uses it).
    pub q: Vec<f32>,
}

/// The query rows a sequence's policy reads, logged by the attention block of each layer
/// for the positions from [`QueryLog::from`] on (the forward pass holds it shared; one lock,
/// layers run one after another).
#[derive(Debug, Default)]
pub struct QueryLog {
    /// The first position logged (`usize::MAX`: none).
    pub from: usize,
    rows: Mutex<Vec<LoggedQuery>>,
}

impl QueryLog {
    /// Whether the rows of positions `start .. start + n` include one to log.
    pub fn wants(&self, start: usize, n: usize) -> bool {
        start + n > self.from
    }

    /// Log row `pos` of `layer`.
    pub fn push(&self, layer: usize, pos: usize, q: Vec<f32>) {
        if pos >= self.from {
            if let Ok(mut rows) = self.rows.lock() {
                rows.push(LoggedQuery { layer, pos, q });
            }
        }
    }

    /// Take every row logged so far.
    pub fn take(&mut self) -> Vec<LoggedQuery> {
        match self.rows.get_mut() {
            Ok(rows) => std::mem::take(rows),
            Err(p) => std::mem::take(p.into_inner()),
        }
    }
}

/// One sequence's eviction.
#[derive(Debug)]
pub struct EvictState {
    /// The policy and its settings.
    pub config: EvictConfig,
    /// Prompt tokens (the first eviction point).
    pub num_prompt: usize,
    /// Rows kept per layer and KV head (the budget in tokens for this prompt).
    pub budget: usize,
    /// Queries the forward pass logs for the policy (policies that need them).
    pub log: QueryLog,
    /// H2O: per `layer · kv_heads + head`, the attention each row held received so far.
    h2o: Vec<Vec<f64>>,
    heads: usize,
    kv_heads: usize,
    /// Evictions done.
    pub evictions: usize,
}

impl EvictState {
    /// The state of a sequence whose prompt has `num_prompt` tokens, for a model of
    /// `layers` layers, `heads` query heads and `kv_heads` KV heads.
    pub fn new(
        config: EvictConfig,
        num_prompt: usize,
        layers: usize,
        heads: usize,
        kv_heads: usize,
    ) -> Self {
        let mut s = EvictState {
            config,
            num_prompt,
            budget: config.budget_tokens(num_prompt),
            log: QueryLog::default(),
            h2o: match config.policy {
                EvictPolicy::H2o => vec![Vec::new(); layers * kv_heads],
                _ => Vec::new(),
            },
            heads,
            kv_heads,
            evictions: 0,
        };
        s.reset();
        s
    }

    /// Back to no token computed (a preempted sequence is recomputed from its tokens).
    pub fn reset(&mut self) {
        self.log.take();
        self.h2o.iter_mut().for_each(Vec::clear);
        self.evictions = 0;
        self.log.from = self.log_from(0);
    }

    /// The first position whose queries the policy reads, with `computed` tokens done.
    fn log_from(&self, computed: usize) -> usize {
        let p = self.num_prompt;
        match self.config.policy {
            EvictPolicy::H2o => computed,
            EvictPolicy::SnapKv if computed < p => p.saturating_sub(self.config.window),
            EvictPolicy::Tova if computed < p => p.saturating_sub(1),
            EvictPolicy::SnapKv | EvictPolicy::Tova => computed,
            _ => usize::MAX,
        }
    }

    /// The next position (> `computed`) at which the cache is evicted: the prompt's end,
    /// then every `every` tokens. A chunk never runs past it, so evictions happen at the
    /// same positions however the tokens were batched or chunked.
    pub fn next_point(&self, computed: usize) -> usize {
        let (p, every) = (self.num_prompt, self.config.every);
        if computed < p {
            p
        } else {
            p + ((computed - p) / every + 1) * every
        }
    }

    /// After a forward pass committed `table` to its length: fold logged queries into
    /// H2O's sums, and evict when the length is an eviction point. Returns what each layer's
    /// KV head kept (empty: nothing evicted; the rows evicted so far are the table's
    /// `evicted`).
    pub fn after_commit(&mut self, pool: &mut KvPool, table: &mut BlockTable) -> Vec<KeptRows> {
        let len = table.len();
        if self.config.policy == EvictPolicy::H2o {
            self.fold_h2o(pool, table);
        }
        let at_point = len == self.num_prompt
            || (len > self.num_prompt && (len - self.num_prompt).is_multiple_of(self.config.every));
        if !at_point {
            return Vec::new();
        }
        let kept = self.evict(pool, table);
        self.log.take();
        self.log.from = self.log_from(len);
        if !kept.is_empty() {
            self.evictions += 1;
        }
        kept
    }

    /// Score, choose and compact now (whatever the length); what stayed per layer and head.
    pub fn evict(&mut self, pool: &mut KvPool, table: &mut BlockTable) -> Vec<KeptRows> {
        let cfg = self.config;
        let logged = self.log.take();
        let (heads, kv_heads) = (self.heads, self.kv_heads);
        let first_pos = table.evicted(0);
        let protect = match cfg.policy {
            EvictPolicy::SnapKv => logged
                .iter()
                .filter(|q| q.layer == logged.first().map_or(0, |f| f.layer))
                .count(),
            EvictPolicy::Tova => 1,
            // H2O keeps as many recent tokens as heavy hitters (Zhang et al. 2023, §4).
            EvictPolicy::H2o => self.budget / 2,
            _ => 0,
        };
        let h2o = &self.h2o;
        let kept = super::evict(
            pool,
            table,
            self.budget,
            (cfg.sinks, protect),
            |layer, head, view, rows| match cfg.policy {
                EvictPolicy::Streaming => score::streaming(rows),
                EvictPolicy::KNorm => score::knorm(view, head, rows),
                EvictPolicy::Random => score::random(cfg.seed, layer, head, first_pos, rows),
                EvictPolicy::H2o => {
                    let mut s = h2o[layer * kv_heads + head].clone();
                    s.resize(rows, 0.0);
                    s
                }
                EvictPolicy::SnapKv | EvictPolicy::Tova => {
                    let mut mass = vec![0f64; rows];
                    let newest = cfg.policy == EvictPolicy::Tova;
                    let n = add_mass(
                        &logged,
                        (layer, head),
                        (heads, kv_heads),
                        view,
                        (first_pos, newest),
                        &mut mass,
                    );
                    let n = n.max(1) as f64;
                    mass.iter_mut().for_each(|m| *m /= n);
                    match cfg.policy {
                        EvictPolicy::SnapKv => score::pool_mean(&mass),
                        _ => mass,
                    }
                }
            },
        );
        for k in &kept {
            if let Some(acc) = self.h2o.get_mut(k.layer * kv_heads + k.head) {
                let old = std::mem::take(acc);
                *acc = k
                    .rows
                    .iter()
                    .map(|&r| old.get(r).copied().unwrap_or(0.0))
                    .collect();
            }
        }
        kept
    }

    /// Add the attention of the queries logged since the last step to H2O's sums.
    fn fold_h2o(&mut self, pool: &KvPool, table: &BlockTable) {
        let logged = self.log.take();
        self.log.from = table.len();
        if logged.is_empty() {
            return;
        }
        let groups = pool.groups();
        let (heads, kv_heads) = (self.heads, self.kv_heads);
        for (g, group) in groups.groups.iter().enumerate() {
            if group.window.is_some() {
                continue;
            }
            let rows = table.rows(g);
            for (slot, &layer) in group.layers.iter().enumerate() {
                let view = pool.layer_view(table.group(g), slot);
                for head in 0..kv_heads {
                    let acc = &mut self.h2o[layer * kv_heads + head];
                    acc.resize(rows, 0.0);
                    let evicted = table.evicted(g);
                    add_mass(
                        &logged,
                        (layer, head),
                        (heads, kv_heads),
                        &view,
                        (evicted, false),
                        acc,
                    );
                }
            }
        }
    }
}

/// Add to `mass` (one entry per row held) the attention probabilities of the logged query
/// rows of `layer` for the query heads sharing KV head `head` (of `heads` query and
/// `kv_heads` KV heads), each at its row (position − `evicted`) and in the stored space
/// (rotated for a rotated dtype); `newest`: only the last position's rows. Returns the query
/// rows added.
fn add_mass(
    logged: &[super::LoggedQuery],
    (layer, head): (usize, usize),
    (heads, kv_heads): (usize, usize),
    view: &crate::kv::LayerKv,
    (evicted, newest): (usize, bool),
    mass: &mut [f64],
) -> usize {
    let d = view.head_dim;
    let g = heads / kv_heads.max(1);
    let mine: Vec<&super::LoggedQuery> = logged.iter().filter(|q| q.layer == layer).collect();
    let last = mine.iter().map(|q| q.pos).max();
    let keys = score::keys(view, head, mass.len());
    let mut added = 0;
    for q in mine {
        if newest && Some(q.pos) != last {
            continue;
        }
        for h in head * g..(head + 1) * g {
            let mut row = q.q[h * d..(h + 1) * d].to_vec();
            if view.dtype.rotated() {
                crate::kv::codec_q4::rotate(&mut row);
            }
            score::add_attention(&keys, d, &row, q.pos - evicted, mass);
            added += 1;
        }
    }
    added
}

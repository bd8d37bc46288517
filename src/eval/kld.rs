//! KL divergence of a run's token distributions from a saved base run, with llama.cpp's
//! `llama-perplexity --kl-divergence` statistics and labels (Mean KLD, 99.0% KLD, Maximum
//! KLD, RMS Δp, Same top p), and the base file they are read from.
//!
//! Per scored position, with `P` the base distribution and `Q` this run's:
//! `KLD = Σ_v P(v) · (ln P(v) − ln Q(v))`; `Δp = Q(target) − P(target)`; "same top" when
//! `argmax P = argmax Q`.
//!
//! Base file (`--kl-divergence-base FILE`, ours, not llama.cpp's uint16 format): a line
//! `nanollm-kld-base 1`, a one-line JSON header ([`BaseHeader`]), then for every scored
//! position in order its `vocab` log-probabilities as little-endian f32.
use crate::engine::stats::percentile;
use crate::eval::perplexity::ScoredChunk;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &str = "nanollm-kld-base 1";

/// Longest JSON header line read: a model file name and five numbers fit many times over; a
/// file without a newline near its start is not read into memory whole.
const MAX_HEADER_LINE: u64 = 64 * 1024;

/// What a base file was made from; a comparison run must match it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseHeader {
    /// File name of the model.
    pub model: String,
    /// KV dtype of the base run.
    pub kv_cache_dtype: String,
    /// Tokens per chunk.
    pub ctx_size: usize,
    /// Chunks scored.
    pub chunks: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// FNV-1a hash of every scored target token id, in order.
    pub targets_fnv1a: u64,
}

/// FNV-1a over token ids (little-endian bytes): a cheap check that two runs scored the same
/// tokens.
pub fn fnv1a(ids: &[u32]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in ids.iter().flat_map(|t| t.to_le_bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Writes a base file into `out` (the CLI hands it a file that is renamed into place only
/// when complete, so an error or Ctrl-C leaves no partial file under the requested name).
pub struct BaseWriter<W: Write> {
    out: W,
}

impl<W: Write> BaseWriter<W> {
    /// Start a base file in `out`: the magic line and the header. Errors: write failures.
    pub fn new(mut out: W, header: &BaseHeader) -> Result<BaseWriter<W>> {
        writeln!(out, "{MAGIC}")?;
        writeln!(out, "{}", serde_json::to_string(header)?)?;
        Ok(BaseWriter { out })
    }

    /// Append one chunk's log-probabilities. Errors: write failures.
    pub fn push(&mut self, chunk: &ScoredChunk) -> Result<()> {
        for v in &chunk.log_probs {
            self.out.write_all(&v.to_le_bytes())?;
        }
        Ok(())
    }

    /// The writer, to finish it.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Reads a base file chunk by chunk.
pub struct BaseReader {
    input: BufReader<File>,
    path: PathBuf,
    /// Bytes after the header (the log-probabilities), from the file's length.
    payload_bytes: u64,
    /// The base run's header.
    pub header: BaseHeader,
}

impl BaseReader {
    /// Open `path` and read its header. Errors: a missing file, or one that is not a base
    /// file (names the path).
    pub fn open(path: &Path) -> Result<BaseReader> {
        let what = || format!("--kl-divergence-base {}", path.display());
        let file = File::open(path).with_context(|| format!("{}: cannot read it", what()))?;
        let mut input = BufReader::new(file);
        let not_base = || {
            anyhow::anyhow!("{}: not a nanollm KL-divergence base file (make one with --kl-divergence-base FILE and no --kl-divergence)", what())
        };
        let len = input.get_ref().metadata().with_context(what)?.len();
        let mut line = Vec::new();
        let magic_line = MAGIC.len() as u64 + 1;
        (&mut input)
            .take(magic_line)
            .read_until(b'\n', &mut line)
            .with_context(what)?;
        if line.strip_suffix(b"\n") != Some(MAGIC.as_bytes()) {
            return Err(not_base());
        }
        let mut consumed = line.len() as u64;
        line.clear();
        (&mut input)
            .take(MAX_HEADER_LINE)
            .read_until(b'\n', &mut line)
            .with_context(what)?;
        if !line.ends_with(b"\n") {
            bail!(
                "{}: its JSON header line does not end within {MAX_HEADER_LINE} bytes (damaged, or not a base file)",
                what()
            );
        }
        consumed += line.len() as u64;
        let header: BaseHeader = serde_json::from_slice(&line).map_err(|_| not_base())?;
        if header.vocab == 0 || header.chunks == 0 {
            bail!(
                "{}: its header says {} chunks of a vocabulary of {} tokens: a base run scores at least one chunk of a real vocabulary (damaged?)",
                what(),
                header.chunks,
                header.vocab
            );
        }
        Ok(BaseReader {
            input,
            path: path.to_path_buf(),
            payload_bytes: len.saturating_sub(consumed),
            header,
        })
    }

    /// Check, before any chunk runs, that the file holds exactly the header's chunks of
    /// `scored` positions of `vocab` f32 log-probabilities. Errors: a truncated or
    /// over-long file (its size and the size its header implies).
    pub fn check_length(&self, scored: usize) -> Result<()> {
        let want = (self.header.chunks as u64)
            .saturating_mul(scored as u64)
            .saturating_mul(self.header.vocab as u64)
            .saturating_mul(4);
        if self.payload_bytes != want {
            bail!(
                "--kl-divergence-base {}: {} bytes of log-probabilities after the header, but {} chunks × {scored} positions × {} tokens × 4 bytes = {want}: {} (not made by this version, or damaged)",
                self.path.display(),
                self.payload_bytes,
                self.header.chunks,
                self.header.vocab,
                if self.payload_bytes < want { "truncated" } else { "longer than its header says" }
            );
        }
        Ok(())
    }

    /// The next `rows` positions of `vocab` log-probabilities. Errors: more bytes than the
    /// file has left (a truncated file, or rows × vocab past what its length allows).
    pub fn next_rows(&mut self, rows: usize) -> Result<Vec<f32>> {
        let want = (rows as u64)
            .checked_mul(self.header.vocab as u64)
            .and_then(|n| n.checked_mul(4))
            .filter(|&n| n <= self.payload_bytes);
        let Some(want) = want else {
            bail!(
                "--kl-divergence-base {}: the file ends early (truncated?): {rows} positions of {} log-probabilities are more than its {} bytes after the header",
                self.path.display(),
                self.header.vocab,
                self.payload_bytes
            );
        };
        let mut bytes = vec![0u8; want as usize];
        self.input.read_exact(&mut bytes).with_context(|| {
            format!(
                "--kl-divergence-base {}: the file ends early (truncated?)",
                self.path.display()
            )
        })?;
        let rows: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        // A log-probability is at most 0; NaN or +∞ is a damaged file, not a distribution.
        if let Some(at) = rows.iter().position(|v| v.is_nan() || *v == f32::INFINITY) {
            bail!(
                "--kl-divergence-base {}: value {} of these rows is {}, not a log-probability (damaged?)",
                self.path.display(),
                at + 1,
                rows[at]
            );
        }
        Ok(rows)
    }
}

impl BaseReader {
    /// Check that every position was read. Errors: bytes left over (not the file its header
    /// describes).
    pub fn expect_end(&mut self) -> Result<()> {
        let mut rest = [0u8; 1];
        if self.input.read(&mut rest)? != 0 {
            bail!(
                "--kl-divergence-base {}: longer than its header says (not made by this version, or damaged)",
                self.path.display()
            );
        }
        Ok(())
    }
}

/// Per-position comparison of one run against its base.
#[derive(Debug, Clone, Default)]
pub struct KldAccumulator {
    kld: Vec<f64>,
    dp: Vec<f64>,
    same_top: usize,
    nll_base: Vec<f64>,
}

fn argmax(x: &[f32]) -> usize {
    x.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| {
            if v > bv {
                (i, v)
            } else {
                (bi, bv)
            }
        })
        .0
}

impl KldAccumulator {
    /// Compare `chunk` (this run) with `base` (`[scored, vocab]` base log-probabilities).
    pub fn push(&mut self, chunk: &ScoredChunk, base: &[f32]) {
        let v = chunk.vocab;
        for (i, &t) in chunk.targets.iter().enumerate() {
            let q = &chunk.log_probs[i * v..(i + 1) * v];
            let p = &base[i * v..(i + 1) * v];
            let kld: f64 = p
                .iter()
                .zip(q)
                .map(|(&lp, &lq)| (lp as f64).exp() * (lp as f64 - lq as f64))
                .sum();
            self.kld.push(kld.max(0.0));
            let t = t as usize;
            self.dp.push((q[t] as f64).exp() - (p[t] as f64).exp());
            self.same_top += usize::from(argmax(p) == argmax(q));
            self.nll_base.push(-(p[t] as f64));
        }
    }

    /// The statistics so far.
    pub fn stats(&self) -> KldStats {
        let n = self.kld.len().max(1) as f64;
        let mean = self.kld.iter().sum::<f64>() / n;
        let var = self.kld.iter().map(|k| (k - mean).powi(2)).sum::<f64>() / n;
        let mut sorted = self.kld.clone();
        sorted.sort_by(f64::total_cmp);
        let pick = |q: f64| {
            if sorted.is_empty() {
                0.0
            } else {
                percentile(&sorted, q)
            }
        };
        let rms = (self.dp.iter().map(|d| d * d).sum::<f64>() / n).sqrt();
        let same = self.same_top as f64 / n;
        KldStats {
            positions: self.kld.len(),
            mean_kld: mean,
            mean_kld_err: (var / (n - 1.0).max(1.0)).sqrt(),
            max_kld: sorted.last().copied().unwrap_or(0.0),
            p99_kld: pick(99.0),
            median_kld: pick(50.0),
            rms_dp_pct: 100.0 * rms,
            same_top_p_pct: 100.0 * same,
            same_top_p_err_pct: 100.0 * (same * (1.0 - same) / (n - 1.0).max(1.0)).sqrt(),
            ppl_base: crate::eval::perplexity::perplexity(&self.nll_base).0,
        }
    }
}

/// llama.cpp's KL-divergence summary.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KldStats {
    /// Positions compared.
    pub positions: usize,
    /// Mean KLD (nats).
    pub mean_kld: f64,
    /// Its standard error.
    pub mean_kld_err: f64,
    /// Maximum KLD.
    pub max_kld: f64,
    /// 99th percentile KLD.
    pub p99_kld: f64,
    /// Median KLD.
    pub median_kld: f64,
    /// Root mean square of Δp, in percentage points.
    pub rms_dp_pct: f64,
    /// Positions whose most likely token is the base's, in %.
    pub same_top_p_pct: f64,
    /// Its standard error, in %.
    pub same_top_p_err_pct: f64,
    /// Perplexity of the base run over the same positions.
    pub ppl_base: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::perplexity::log_softmax;

    fn chunk(logits: &[[f32; 3]], targets: &[u32]) -> ScoredChunk {
        ScoredChunk {
            log_probs: logits.iter().flat_map(|r| log_softmax(r)).collect(),
            targets: targets.to_vec(),
            vocab: 3,
        }
    }

    /// KLD against hand-computed values: P = (0.5, 0.25, 0.25), Q uniform:
    /// Σ P ln(P/Q) = 0.5 ln 1.5 + 2 · 0.25 ln 0.75.
    #[test]
    fn kld_and_delta_p_by_hand() {
        let (l2, l4) = ((0.5f32).ln(), (0.25f32).ln());
        let base = chunk(&[[l2, l4, l4]], &[1]);
        let run = chunk(&[[0.0, 0.0, 0.0]], &[1]);
        let mut acc = KldAccumulator::default();
        acc.push(&run, &base.log_probs);
        let s = acc.stats();
        let want = 0.5 * 1.5f64.ln() + 0.5 * 0.75f64.ln();
        assert!((s.mean_kld - want).abs() < 1e-6, "{} vs {want}", s.mean_kld);
        assert!((s.rms_dp_pct - 100.0 * (1.0 / 3.0 - 0.25)).abs() < 1e-4);
        // argmax: base token 0, uniform Q picks token 0 (first of equals).
        assert_eq!(s.same_top_p_pct, 100.0);
        let same = chunk(&[[l2, l4, l4]], &[1]);
        let mut acc = KldAccumulator::default();
        acc.push(&same, &base.log_probs);
        assert!(acc.stats().mean_kld.abs() < 1e-9);
    }

    #[test]
    fn base_file_round_trips_and_refuses_damaged_files() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("base.kld");
        let header = BaseHeader {
            model: "m.gguf".into(),
            kv_cache_dtype: "f32".into(),
            ctx_size: 4,
            chunks: 1,
            vocab: 3,
            targets_fnv1a: fnv1a(&[1, 2]),
        };
        let c = chunk(&[[1.0, 2.0, 3.0], [0.0, -1.0, 5.0]], &[1, 2]);
        let mut w = BaseWriter::new(Vec::new(), &header)?;
        w.push(&c)?;
        let bytes = w.into_inner();
        std::fs::write(&path, &bytes)?;
        let mut r = BaseReader::open(&path)?;
        assert_eq!(r.header, header);
        assert_eq!(r.next_rows(2)?, c.log_probs);
        r.expect_end()?;
        assert!(r.next_rows(1).is_err());
        // Extra bytes, random bytes, a truncated file: each refused, naming the file.
        let mut longer = bytes.clone();
        longer.push(0);
        std::fs::write(&path, &longer)?;
        let mut r = BaseReader::open(&path)?;
        r.next_rows(2)?;
        assert!(r.expect_end().unwrap_err().to_string().contains("longer"));
        std::fs::write(&path, [0xffu8, 0xfe, 0x00, 0x10])?;
        let e = BaseReader::open(&path)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("not a nanollm KL-divergence base file"), "{e}");
        std::fs::write(&path, &bytes[..bytes.len() - 5])?;
        let e = BaseReader::open(&path)?
            .next_rows(2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("base.kld") && e.contains("ends early"), "{e}");
        Ok(())
    }
}

//! `--kv-offload-dir DIR --kv-offload-size BYTES` (serve, run-batch, bench): the prefix
//! cache's disk tier ([`crate::kv::offload`]), and the fingerprint of everything that
//! decides a block's bytes.
use crate::engine::llm_engine::EngineConfig;
use crate::kv::offload::{model_digest, Fingerprint, OffloadConfig};
use crate::model::quantize_at_load::InSitu;
use crate::model::ModelConfig;
use crate::units::parse_bytes;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};

/// Default `--kv-offload-size`: 4 GiB.
pub const DEFAULT_OFFLOAD_BYTES: u64 = 4 << 30;

/// The disk tier's flags.
#[derive(Args, Debug, Clone, Default)]
pub struct OffloadArgs {
    /// Keep prefix-cache blocks in files in DIR too (a disk tier under the KV pool,
    /// written through as blocks are cached): a prompt whose blocks were evicted, or
    /// computed by an earlier run, is read back instead of prefilled. Created if missing;
    /// files are keyed by the model file, KV dtype, block size, kernels and version.
    #[arg(long, value_name = "DIR")]
    pub kv_offload_dir: Option<PathBuf>,
    /// Most bytes the disk tier's files take, e.g. 2GiB (least recently used files are
    /// deleted past it) [default: 4GiB].
    #[arg(long, value_name = "BYTES", requires = "kv_offload_dir")]
    pub kv_offload_size: Option<String>,
}

impl OffloadArgs {
    /// Refuse an output file (`flag path`) that is `--kv-offload-dir` itself, before the run
    /// creates the directory and then cannot write the file.
    ///
    /// Errors: one line naming both flags.
    pub fn check_not_output(&self, flag: &str, path: &Path) -> Result<()> {
        match &self.kv_offload_dir {
            Some(dir) if path.as_os_str() != "-" && crate::files::clobber::same_file(path, dir) => {
                bail!(
                    "{flag} {}: the same path as --kv-offload-dir; pick another file or directory",
                    path.display()
                )
            }
            _ => Ok(()),
        }
    }

    /// `config` with its disk tier set from these flags, for the model loaded from
    /// `model_path` (its bytes are hashed: ~0.1 s per 100 MB) with `prefill` and `quantize`
    /// (the `--prefill-kernel` and `--quantize` values, in the fingerprint). Unchanged
    /// without `--kv-offload-dir`.
    ///
    /// Errors: prefix caching off, a `--kv-offload-size` that does not parse or holds less
    /// than one block's file, a `--kv-offload-dir` that is a file or cannot be created or
    /// written, a model file that cannot be read; each names its flag.
    pub fn apply(
        &self,
        mut config: EngineConfig,
        model_path: &Path,
        model: &ModelConfig,
        prefill: crate::flags::PrefillKernel,
        quantize: Option<InSitu>,
    ) -> Result<EngineConfig> {
        let Some(dir) = &self.kv_offload_dir else {
            return Ok(config);
        };
        if !config.scheduler.enable_prefix_caching {
            bail!(
                "--kv-offload-dir {}: the disk tier keeps the prefix cache's blocks; drop --no-enable-prefix-caching",
                dir.display()
            );
        }
        let max_bytes = match &self.kv_offload_size {
            Some(s) => parse_bytes("--kv-offload-size", s)?,
            None => DEFAULT_OFFLOAD_BYTES,
        };
        let cache = config.cache;
        let groups = model.kv_groups(cache.swa_full);
        let block_bytes = model.kv_shape(cache.dtype).bytes_per_token_per_layer()
            * groups.layers_per_block as u64
            * cache.block_size as u64;
        let one_file = crate::kv::offload::format::file_len(
            &crate::kv::offload::format::Geometry {
                fingerprint: 0,
                block_bytes,
                block_size: cache.block_size as u32,
            },
            1,
        );
        if max_bytes < one_file {
            bail!(
                "--kv-offload-size {}: smaller than one block's file ({}), so nothing could be kept",
                self.kv_offload_size.as_deref().unwrap_or(""),
                crate::units::human_bytes(one_file)
            );
        }
        if dir.symlink_metadata().is_ok() && !dir.exists() {
            bail!(
                "--kv-offload-dir {}: a symbolic link to a missing directory",
                dir.display()
            );
        }
        if dir.exists() && !dir.is_dir() {
            bail!("--kv-offload-dir {}: not a directory", dir.display());
        }
        // Fail here, naming the flag, rather than when the engine opens the tier.
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--kv-offload-dir {}", dir.display()))?;
        let probe = dir.join(format!(".probe-{}", std::process::id()));
        std::fs::write(&probe, b"")
            .with_context(|| format!("--kv-offload-dir {}: not writable", dir.display()))?;
        let _ = std::fs::remove_file(&probe);
        let digest = model_digest(model_path).with_context(|| {
            format!(
                "--kv-offload-dir: fingerprinting the model {}",
                model_path.display()
            )
        })?;
        let fingerprint = Fingerprint::of(&[
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("model", digest),
            ("kv_cache_dtype", cache.dtype.name().to_string()),
            ("block_size", cache.block_size.to_string()),
            ("kv_groups", format!("{:?}", groups.groups)),
            ("kernels", format!("{:?}", crate::kernels::report::chosen())),
            ("prefill_kernel", format!("{prefill:?}").to_lowercase()),
            (
                "quantize",
                quantize.map_or("none", |q| q.name()).to_string(),
            ),
        ]);
        let offload = OffloadConfig {
            dir: dir.clone(),
            max_bytes,
            fingerprint,
        };
        // One small value per command, alive as long as it runs (see EngineConfig::offload).
        config.offload = Some(Box::leak(Box::new(offload)));
        Ok(config)
    }
}

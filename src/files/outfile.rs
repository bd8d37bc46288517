//! Output files written whole or not at all (`bench --json/--plot`, `perplexity
//! --kl-divergence-base`): the contents go to a temporary file beside the target, renamed
//! over it only when complete, so an error or Ctrl-C never leaves a partial file. A target
//! that is a symlink is written through (the file it points to is replaced, the link kept);
//! one that exists but is not a regular file (a device such as `/dev/null`, a FIFO) is
//! written directly, never replaced.
use crate::process;
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Fail early, before minutes of work, when `path` cannot be an output file: a directory, or
/// a file in a directory that does not exist. Errors: one line naming `flag`.
pub fn check_writable(flag: &str, path: &Path) -> Result<()> {
    if path.is_dir() {
        bail!(
            "{flag} {}: is a directory; expected a file name",
            path.display()
        );
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        bail!(
            "{flag} {}: directory {} does not exist",
            path.display(),
            parent.display()
        );
    }
    // A device, a FIFO or the terminal is written directly; a file goes through a temporary
    // file beside it: create (and remove) that one now, so a read-only directory or a name
    // too long for it fails before the run, not after.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) || std_stream(path).is_some() {
        return Ok(());
    }
    let tmp = temp_name(&resolve_link(path).unwrap_or_else(|| path.to_path_buf()));
    File::create(&tmp)
        .and_then(|_| std::fs::remove_file(&tmp))
        .with_context(|| format!("{flag} {}: cannot write it", path.display()))?;
    Ok(())
}

/// A symlink's target (`None`: not a symlink, or a dangling one).
fn resolve_link(path: &Path) -> Option<PathBuf> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path).ok(),
        _ => None,
    }
}

/// The temporary file beside `dest`: `.NAME.partial-PID`.
fn temp_name(dest: &Path) -> PathBuf {
    let name = dest
        .file_name()
        .map_or("output".into(), |n| n.to_string_lossy().into_owned());
    dest.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// Which of this process's standard streams `path` is, if any: the same file as stdout
/// (1) or stderr (2), as `/dev/stdout` with stdout redirected to a file is. Such a path is
/// written through the stream (its offset and append mode kept), never truncated or
/// replaced, as `tee /dev/stdout` writes.
pub fn std_stream(path: &Path) -> Option<u8> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        use std::os::unix::fs::MetadataExt;
        let target = std::fs::metadata(path).ok()?;
        let same = |fd: std::os::fd::BorrowedFd<'_>| {
            fd.try_clone_to_owned()
                .ok()
                .and_then(|fd| File::from(fd).metadata().ok())
                .is_some_and(|m| m.dev() == target.dev() && m.ino() == target.ino())
        };
        if same(std::io::stdout().as_fd()) {
            return Some(1);
        }
        if same(std::io::stderr().as_fd()) {
            return Some(2);
        }
    }
    let _ = path;
    None
}

/// A duplicate of stream `which` (1 stdout, 2 stderr) as a file.
fn dup_stream(which: u8) -> std::io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        let fd = match which {
            1 => std::io::stdout().as_fd().try_clone_to_owned()?,
            _ => std::io::stderr().as_fd().try_clone_to_owned()?,
        };
        Ok(File::from(fd))
    }
    #[cfg(not(unix))]
    {
        let _ = which;
        Err(std::io::Error::other("no standard stream files here"))
    }
}

/// An output file being written; [`OutFile::finish`] puts it in place.
pub struct OutFile {
    out: BufWriter<File>,
    /// The temporary file, renamed to `dest` by `finish` (None: written in place).
    tmp: Option<PathBuf>,
    dest: PathBuf,
    flag: String,
    shown: PathBuf,
}

impl OutFile {
    /// Start writing `path` for `flag`. Errors: one line naming the flag and the file.
    pub fn create(flag: &str, path: &Path) -> Result<OutFile> {
        check_writable(flag, path)?;
        let cannot = || format!("{flag} {}: cannot write it", path.display());
        // Write through a symlink to the file it names.
        let dest = resolve_link(path).unwrap_or_else(|| path.to_path_buf());
        let special = std::fs::metadata(&dest).is_ok_and(|m| !m.is_file());
        let (file, tmp) = if let Some(which) = std_stream(path) {
            (dup_stream(which).with_context(cannot)?, None)
        } else if special {
            (File::create(&dest).with_context(cannot)?, None)
        } else {
            let tmp = temp_name(&dest);
            process::register_temp_file(&tmp);
            let created = File::create(&tmp).and_then(|f| {
                // A file rewritten keeps its permissions (as sed -i and editors keep them).
                if let Ok(m) = std::fs::metadata(&dest) {
                    f.set_permissions(m.permissions())?;
                }
                Ok(f)
            });
            match created {
                Ok(f) => (f, Some(tmp)),
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    process::forget_temp_file(&tmp);
                    return Err(e).with_context(cannot);
                }
            }
        };
        Ok(OutFile {
            out: BufWriter::new(file),
            tmp,
            dest,
            flag: flag.to_string(),
            shown: path.to_path_buf(),
        })
    }

    /// Flush and move the file into place. Errors: flush or rename failures.
    pub fn finish(mut self) -> Result<()> {
        let what = format!("{} {}: cannot write it", self.flag, self.shown.display());
        self.out.flush().context(what.clone())?;
        if let Some(tmp) = self.tmp.take() {
            let renamed = std::fs::rename(&tmp, &self.dest);
            if renamed.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            process::forget_temp_file(&tmp);
            renamed.context(what)?;
        }
        Ok(())
    }
}

impl OutFile {
    /// `e` as one line naming the flag and the file (a full disk mid-write).
    fn named(&self, e: std::io::Error) -> std::io::Error {
        std::io::Error::new(
            e.kind(),
            format!(
                "{} {}: cannot write it: {e}",
                self.flag,
                self.shown.display()
            ),
        )
    }
}

impl Write for OutFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.write(buf).map_err(|e| self.named(e))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush().map_err(|e| self.named(e))
    }
}

impl Drop for OutFile {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = std::fs::remove_file(&tmp);
            process::forget_temp_file(&tmp);
        }
    }
}

/// Write `contents` to `path` whole ([`OutFile`]). Errors: one line naming `flag` and the file.
pub fn write_whole(flag: &str, path: &Path, contents: &[u8]) -> Result<()> {
    let mut f = OutFile::create(flag, path)?;
    // A failed write names the flag and the file itself (OutFile's Write).
    f.write_all(contents)?;
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write that fails mid-file (a full disk) is one line naming the flag and the file,
    /// whether it comes from `write_whole` or from writes through the `OutFile`.
    #[test]
    fn a_failed_write_names_the_flag_and_the_file() -> Result<()> {
        let full = Path::new("/dev/full");
        if !full.exists() {
            return Ok(());
        }
        let e = write_whole("--json", full, &[b'x'; 1 << 16])
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(e.starts_with("--json /dev/full: cannot write it: "), "{e}");
        assert_eq!(e.matches("cannot write it").count(), 1, "{e}");
        let mut f = OutFile::create("--kl-divergence-base", full)?;
        let e = f
            .write_all(&[b'x'; 1 << 16])
            .and_then(|_| f.flush())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("--kl-divergence-base /dev/full: cannot write it: "),
            "{e}"
        );
        Ok(())
    }

    #[test]
    fn writes_whole_files_through_symlinks_and_into_devices() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let plain = dir.path().join("out.json");
        write_whole("--json", &plain, b"{}")?;
        assert_eq!(std::fs::read(&plain)?, b"{}");
        // A symlink stays a symlink; its target gets the contents.
        let target = dir.path().join("real.json");
        std::fs::write(&target, b"old")?;
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&target, &link)?;
        write_whole("--json", &link, b"new")?;
        assert!(std::fs::symlink_metadata(&link)?.file_type().is_symlink());
        assert_eq!(std::fs::read(&target)?, b"new");
        // A device is written, not replaced.
        write_whole("--json", Path::new("/dev/null"), b"x")?;
        assert!(!std::fs::metadata("/dev/null")?.is_file());
        // An abandoned file leaves nothing behind.
        let gone = dir.path().join("gone.json");
        {
            let mut f = OutFile::create("--json", &gone)?;
            f.write_all(b"partial")?;
        }
        assert!(!gone.exists());
        let names: Vec<_> = std::fs::read_dir(dir.path())?
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        Ok(())
    }
}

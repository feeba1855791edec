//! Spill files: random names, O_EXCL|O_NOFOLLOW, mode 0600, inside a private
//! 0700 directory that is created on first use and removed at dispose.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::sys::create_private_dirs;

/// 16 random hex characters from the kernel's CSPRNG; an error (never a
/// spin) if the kernel cannot provide them.
pub(crate) fn random_hex() -> Result<String, String> {
    let mut bytes = [0u8; 8];
    fill_random(&mut bytes, |unfilled| {
        // The raw system call, not glibc's getrandom(), which only exists
        // from glibc 2.25: one binary serves every glibc from 2.17 on.
        // SAFETY: the pointer and length describe `unfilled`, a live
        // mutable slice that getrandom writes at most `len` bytes into.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getrandom,
                unfilled.as_mut_ptr(),
                unfilled.len(),
                0 as libc::c_uint,
            )
        };
        usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Fills `bytes` from `source` (a getrandom-like call that fills a prefix
/// of what it is given). Retries only EINTR; any other error, and a call
/// that makes no progress, ends the loop with an error instead of spinning.
fn fill_random(
    bytes: &mut [u8],
    mut source: impl FnMut(&mut [u8]) -> std::io::Result<usize>,
) -> Result<(), String> {
    let mut filled = 0;
    while filled < bytes.len() {
        match source(&mut bytes[filled..]) {
            Ok(0) => return Err("no random bytes from the kernel: getrandom returned 0".to_owned()),
            Ok(n) => filled += n.min(bytes.len() - filled),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("no random bytes from the kernel: {e}")),
        }
    }
    Ok(())
}

pub(crate) struct SpillDir {
    base: PathBuf,
    /// `Some(path)` once created; creation is retried if it failed before.
    dir: Mutex<Option<PathBuf>>,
}

impl SpillDir {
    pub(crate) fn new(base: PathBuf) -> Self {
        SpillDir {
            base,
            dir: Mutex::new(None),
        }
    }

    /// The private directory, made now if it does not exist yet (or no
    /// longer does: a temp cleaner may delete it, and then the base too).
    fn ensure(&self, fresh: bool) -> Result<PathBuf, String> {
        let mut dir = self.dir.lock().unwrap_or_else(|e| e.into_inner());
        if fresh {
            *dir = None;
        }
        if let Some(d) = dir.as_ref() {
            return Ok(d.clone());
        }
        if !self.base.is_dir() {
            create_private_dirs(&self.base)
                .map_err(|e| format!("cannot create the spill directory {}: {e}", self.base.display()))?;
        }
        let path = self.base.join(format!("dsh-spill-{}", random_hex()?));
        create_private_dirs(&path)
            .map_err(|e| format!("cannot create the spill directory {}: {e}", path.display()))?;
        *dir = Some(path.clone());
        Ok(path)
    }

    /// A fresh spill file for one stream, or why none can be made (the
    /// stream then reports no spill path, and this reason instead). A
    /// private directory that was deleted is made again, once.
    pub(crate) fn create(&self, label: &str) -> Result<SpillFile, String> {
        match self.create_in(label, self.ensure(false)?) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self
                .create_in(label, self.ensure(true)?)
                .map_err(|e| format!("cannot create a spill file: {e}")),
            other => other.map_err(|e| format!("cannot create a spill file: {e}")),
        }
    }

    fn create_in(&self, label: &str, dir: PathBuf) -> std::io::Result<SpillFile> {
        let name = random_hex().map_err(std::io::Error::other)?;
        let path = dir.join(format!("{label}-{name}.log"));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        // Open while the command runs: never a standard stream's number.
        let file = File::from(crate::sys::prefer_above_stdio(file.into()));
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
        let meta = file.metadata()?;
        let path = path
            .into_os_string()
            .into_string()
            .map_err(|p| std::io::Error::other(format!("spill path is not UTF-8: {p:?}")))?;
        Ok(SpillFile {
            file: Some(file),
            path,
            id: (meta.dev(), meta.ino()),
        })
    }

    /// The private directory, if it was ever created.
    pub fn path(&self) -> Option<PathBuf> {
        self.dir.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Deletes the private directory and every spill file in it.
    pub(crate) fn remove(&self) {
        if let Some(dir) = self.dir.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

pub(crate) struct SpillFile {
    /// Open while the stream is; closed at `finish` so no fd outlives it.
    file: Option<File>,
    path: String,
    /// The file's device and inode: its path names it while `stat` of the
    /// path gives these.
    id: (u64, u64),
}

impl SpillFile {
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Appends; an error says why (the caller abandons the file), also
    /// when the file was removed.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        match &mut self.file {
            Some(f) => f
                .write_all(bytes)
                .map_err(|e| format!("cannot write the spill file: {e}"))?,
            None => return Err("the spill file is closed".into()),
        }
        self.removed().map_or(Ok(()), Err)
    }

    /// The one rule for a spill path that no longer holds the stream: why
    /// (its directory was deleted, by a temp cleaner say, or the file was
    /// removed or replaced), or `None` while the path still names this
    /// file. A path is reported only while this is `None`; after it, the
    /// reason is the stream's `spill_error`.
    pub(crate) fn removed(&self) -> Option<String> {
        match fs::symlink_metadata(Path::new(&self.path)) {
            Ok(m) if (m.dev(), m.ino()) == self.id => None,
            Ok(_) => Some(format!(
                "the spill file was removed: {} is now another file",
                self.path
            )),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                Some(format!("the spill file was removed: {}: {e}", self.path))
            }
            // Cannot tell (no memory, no permission to look): not removed,
            // since a removal abandons the spill for good.
            Err(_) => None,
        }
    }

    pub(crate) fn finish(&mut self) {
        self.file = None;
    }

    pub(crate) fn discard(mut self) {
        self.file = None;
        // Only this file: a path that names another one now is left alone.
        if self.removed().is_none() {
            let _ = fs::remove_file(Path::new(&self.path));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn random_hex_is_16_hex_digits_and_differs_between_calls() {
        let a = random_hex().unwrap();
        let b = random_hex().unwrap();
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn fill_random_retries_eintr_and_short_reads() {
        let mut calls = 0;
        let mut bytes = [0u8; 8];
        fill_random(&mut bytes, |unfilled| {
            calls += 1;
            match calls {
                1 => Err(io::Error::from_raw_os_error(libc::EINTR)),
                _ => {
                    unfilled[0] = calls as u8;
                    Ok(1)
                }
            }
        })
        .unwrap();
        assert_eq!(bytes, [2, 3, 4, 5, 6, 7, 8, 9]);
    }

    #[test]
    fn fill_random_fails_instead_of_spinning() {
        let mut bytes = [0u8; 8];
        let mut calls = 0;
        let no_progress = fill_random(&mut bytes, |_| {
            calls += 1;
            Ok(0)
        });
        assert!(no_progress.unwrap_err().contains("returned 0"));
        assert_eq!(calls, 1);
        let no_syscall = fill_random(&mut bytes, |_| Err(io::Error::from_raw_os_error(libc::ENOSYS)));
        assert!(no_syscall.unwrap_err().contains("no random bytes"));
    }
}

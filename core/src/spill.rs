//! Spill files: random names, O_EXCL|O_NOFOLLOW, mode 0600, inside a private
//! 0700 directory that is created on first use and removed at dispose.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// 16 random hex characters from the kernel's CSPRNG.
pub(crate) fn random_hex() -> String {
    let mut bytes = [0u8; 8];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: the pointer and length describe the unfilled part of `bytes`.
        let n = unsafe { libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

    fn ensure(&self) -> Option<PathBuf> {
        let mut dir = self.dir.lock().unwrap_or_else(|e| e.into_inner());
        if dir.is_none() {
            let path = self.base.join(format!("dsh-spill-{}", random_hex()));
            fs::DirBuilder::new().mode(0o700).create(&path).ok()?;
            // mkdir's mode passes through the umask; make it exactly 0700.
            fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).ok()?;
            *dir = Some(path);
        }
        dir.clone()
    }

    /// A fresh spill file for one stream, or `None` when none can be made
    /// (the stream then reports no spill path).
    pub(crate) fn create(&self, label: &str) -> Option<SpillFile> {
        let dir = self.ensure()?;
        let path = dir.join(format!("{label}-{}.log", random_hex()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .ok()?;
        file.set_permissions(fs::Permissions::from_mode(0o600)).ok()?;
        Some(SpillFile {
            file: Some(file),
            path: path.to_str()?.to_owned(),
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
}

impl SpillFile {
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Appends; false when the write failed (the caller abandons the file).
    pub(crate) fn write(&mut self, bytes: &[u8]) -> bool {
        match &mut self.file {
            Some(f) => f.write_all(bytes).is_ok(),
            None => false,
        }
    }

    pub(crate) fn finish(&mut self) {
        self.file = None;
    }

    pub(crate) fn discard(mut self) {
        self.file = None;
        let _ = fs::remove_file(Path::new(&self.path));
    }
}

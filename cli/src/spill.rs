//! The core removes its private spill directory at dispose, and dsh-cli
//! always disposes before exiting (that is what kills anything the command
//! left running). A spill path it prints has to outlive it, so files worth
//! keeping are moved out of the private directory first, into one the user
//! owns. Without `--keep-spill` no path is printed at all: the files are
//! gone by the time anyone could read them.

use std::collections::hash_map::RandomState;
use std::fs::{self, DirBuilder};
use std::hash::BuildHasher;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// What became of one stream's spill file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spill {
    /// The stream needed none, or the core gave up on it (too large,
    /// unwritable).
    None,
    /// Left to dispose: `--keep-spill` was not given.
    Dropped,
    Kept(String),
    Failed(String),
}

impl Spill {
    /// The path to report: only one that will still exist.
    pub fn path(&self) -> Option<String> {
        match self {
            Spill::Kept(p) => Some(p.clone()),
            _ => None,
        }
    }
}

pub struct Keeper {
    /// Where kept files go: `--spill-dir`, or a fresh directory made on
    /// first use (the executor's spill base, so a rename never crosses a
    /// filesystem).
    dir: Option<PathBuf>,
    base: PathBuf,
    enabled: bool,
}

impl Keeper {
    /// `base` is the executor's configured spill directory; `explicit` says
    /// it came from `--spill-dir` and files go straight into it.
    pub fn new(enabled: bool, base: PathBuf, explicit: bool) -> Self {
        Keeper {
            dir: explicit.then(|| base.clone()),
            base,
            enabled,
        }
    }

    pub fn keep(&mut self, path: Option<String>) -> Spill {
        let Some(path) = path else { return Spill::None };
        if !self.enabled {
            return Spill::Dropped;
        }
        match self.move_out(Path::new(&path)) {
            Ok(kept) => Spill::Kept(kept),
            Err(e) => Spill::Failed(format!("cannot keep {path}: {e}")),
        }
    }

    fn move_out(&mut self, file: &Path) -> io::Result<String> {
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => self.dir.insert(fresh_dir(&self.base)?).clone(),
        };
        let name = file.file_name().ok_or(io::ErrorKind::InvalidInput)?;
        let target = dir.join(name);
        fs::rename(file, &target).or_else(|_| fs::copy(file, &target).map(drop))?;
        target
            .into_os_string()
            .into_string()
            .map_err(|_| io::ErrorKind::InvalidData.into())
    }
}

/// A new `dsh-cli-<random>` directory, mode 0700 like the core's own.
fn fresh_dir(base: &Path) -> io::Result<PathBuf> {
    loop {
        let n = RandomState::new().hash_one(std::process::id());
        let dir = base.join(format!("dsh-cli-{n:016x}"));
        match DirBuilder::new().mode(0o700).create(&dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            r => return r.map(|()| dir),
        }
    }
}

//! Where this process's cgroups are: the cgroup mounts of
//! `/proc/self/mountinfo`, the process's group paths of
//! `/proc/self/cgroup`, and the directory a group of the command's own is
//! made in. Read by the governor (v1 `memory` and `pids`) and by
//! `netfilter` (the v2 hierarchy its programs attach to).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One cgroup mount: the hierarchy's path at its root and where it is
/// mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupMount {
    pub root: String,
    pub mountpoint: String,
    pub writable: bool,
}

/// The first mount of filesystem type `fstype` (`cgroup` or `cgroup2`)
/// whose super options satisfy `options`.
pub(crate) fn find_mount(
    mountinfo: &str,
    fstype: &str,
    options: impl Fn(&str) -> bool,
) -> Option<CgroupMount> {
    // id parent maj:min root mountpoint options ... - fstype source superoptions
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut r = right.split(' ');
        let (ty, _source, superoptions) = (r.next()?, r.next()?, r.next().unwrap_or(""));
        if ty != fstype || !options(superoptions) {
            return None;
        }
        let l: Vec<&str> = left.split(' ').collect();
        Some(CgroupMount {
            root: unescape(l.get(3)?),
            mountpoint: unescape(l.get(4)?),
            writable: l.get(5)?.split(',').any(|o| o == "rw"),
        })
    })
}

/// This process's group path in the hierarchy whose line of
/// `/proc/self/cgroup` (`id:controllers:path`) `controllers` accepts.
pub(crate) fn own_path(cgroups: &str, controllers: impl Fn(&str) -> bool) -> Option<String> {
    cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers(list).then(|| path.to_owned())
    })
}

/// The directory of group `path` under `mount`, if this process may create
/// groups in it.
pub(crate) fn writable_group_dir(mount: &CgroupMount, path: &str) -> Result<PathBuf, String> {
    let relative = path
        .strip_prefix(mount.root.as_str())
        .unwrap_or(path)
        .trim_start_matches('/');
    let dir = Path::new(&mount.mountpoint).join(relative);
    writable(&dir).map_err(|e| format!("cannot create groups under {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Whether this process may write `path` (a group directory, to make
/// groups in it; a `cgroup.procs`, to move processes), or why not.
pub(crate) fn writable(path: &Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path holds a NUL byte"))?;
    // SAFETY: `c` is a valid C string that lives across the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

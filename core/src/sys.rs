//! The system-call helpers, once: every other module calls these instead
//! of writing its own wrapper.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::ptr;
use std::sync::{Mutex, MutexGuard};

/// A libc return value as a `Result`: negative is the thread's errno.
pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A close-on-exec pipe, (read end, write end), with `flags` (`O_NONBLOCK`)
/// on both; each end is ≥ 3, so that a host that closed its own 0/1/2
/// cannot make a `dup2` in a child clobber another pipe end.
pub(crate) fn pipe(flags: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | flags) })?;
    // SAFETY: pipe2 succeeded, so both descriptors are fresh and ours alone.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(r)?, above_stdio(w)?))
}

pub(crate) fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: `fd` is open (an OwnedFd), and F_DUPFD_CLOEXEC takes only
    // integers.
    let new = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) })?;
    // SAFETY: the fcntl succeeded (cvt), so `new` is a descriptor it just
    // created, which nothing else owns; `fd` is closed on return.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Makes `fd` non-blocking. Only for a descriptor this library opened with
/// no other status flag (a fresh pipe end, a pty master): F_SETFL replaces
/// them, and reading them first would cost a system call per descriptor on
/// every spawn.
pub(crate) fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: plain fcntl flag manipulation on a descriptor we own.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) })?;
    Ok(())
}

/// `pidfd_open(2)`: a descriptor that stays tied to this exact process,
/// immune to pid reuse.
pub(crate) fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: the syscall takes two integers and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a non-negative return is a fresh close-on-exec fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

pub(crate) fn pidfd_send_signal(pidfd: &OwnedFd, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: a null siginfo means "as kill(2) would"; flags must be 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `mkdir -p` whose created directories are exactly 0700 (mkdir's mode
/// passes through the umask).
pub(crate) fn create_private_dirs(path: &Path) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut p = path;
    while !p.exists() {
        missing.push(p.to_path_buf());
        match p.parent() {
            Some(parent) => p = parent,
            None => break,
        }
    }
    for dir in missing.iter().rev() {
        match fs::DirBuilder::new().mode(0o700).create(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Locks `m`, taking the data of a poisoned lock as it is: a panic on
/// another thread (a caller's callback) must not take the executor with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The state letter of `/proc/<pid>/stat` (`R`, `S`, `T`, `Z`, …), read after
/// the command name, which may itself hold spaces and parentheses.
pub(crate) fn process_state(pid: libc::pid_t) -> Option<u8> {
    let stat = proc::read(&format!("{pid}/stat")).ok()?;
    let end = stat.iter().rposition(|&b| b == b')')?;
    stat.get(end + 2).copied()
}

/// `/proc` as the host saw it when its first executor was made: every
/// read of `/proc` by the sweeps, the stops and the terminal's foreground
/// goes through a descriptor of that mount (`openat`), so a command that
/// later mounts something over `/proc` in the host's mount namespace (as
/// root can) or unmounts it hides nothing from them (docs/guarantees.md).
/// Paths are relative to `/proc` (`"42/stat"`).
pub(crate) mod proc {
    use std::ffi::CString;
    use std::fs;
    use std::io::{self, Read};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::sync::OnceLock;

    use super::cvt;

    static ROOT: OnceLock<Option<OwnedFd>> = OnceLock::new();

    /// Opens the view once (later calls do nothing); called when an
    /// executor is made, before any command can run. Without it (no
    /// `/proc` then), paths go through `/proc` as it is at each read.
    pub(crate) fn keep() {
        ROOT.get_or_init(|| {
            // SAFETY: a constant C string and flags.
            let fd = unsafe {
                libc::open(
                    c"/proc".as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            };
            let fd = cvt(fd).ok()?;
            // SAFETY: open succeeded: the descriptor is fresh and ours.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // Only a procfs counts (something may already cover /proc).
            // SAFETY: an all-zero statfs is a valid value to be overwritten.
            let mut fs_info: libc::statfs = unsafe { std::mem::zeroed() };
            // SAFETY: `fd` is open; `fs_info` is a valid statfs to fill.
            let r = unsafe { libc::fstatfs(fd.as_raw_fd(), &mut fs_info) };
            (r == 0 && fs_info.f_type == libc::PROC_SUPER_MAGIC).then_some(fd)
        });
    }

    fn at(path: &str) -> io::Result<(RawFd, CString)> {
        keep();
        let (dir, full) = match ROOT.get().and_then(Option::as_ref) {
            Some(fd) => (fd.as_raw_fd(), path.to_owned()),
            None => (libc::AT_FDCWD, format!("/proc/{path}")),
        };
        let c = CString::new(full).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok((dir, c))
    }

    /// Opens `path` (read-only, or as `flags` say).
    pub(crate) fn open(path: &str, flags: libc::c_int) -> io::Result<fs::File> {
        let (dir, c) = at(path)?;
        // SAFETY: `dir` is open (or AT_FDCWD) and `c` a valid C string.
        let fd = cvt(unsafe { libc::openat(dir, c.as_ptr(), flags | libc::O_CLOEXEC) })?;
        // SAFETY: openat succeeded: the descriptor is fresh and ours.
        Ok(unsafe { fs::File::from_raw_fd(fd) })
    }

    /// Reads all of `path` into `buf` (cleared first).
    pub(crate) fn read_into(path: &str, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.clear();
        open(path, libc::O_RDONLY)?.read_to_end(buf).map(drop)
    }

    /// All of `path`.
    pub(crate) fn read(path: &str) -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        read_into(path, &mut buf)?;
        Ok(buf)
    }

    /// `stat` of `path`, following a last symbolic link (so of the file a
    /// `PID/fd/N` link refers to).
    pub(crate) fn stat(path: &str) -> io::Result<libc::stat> {
        let (dir, c) = at(path)?;
        // SAFETY: an all-zero stat is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `dir` is open (or AT_FDCWD), `c` a valid C string, `st` a
        // valid stat to fill.
        cvt(unsafe { libc::fstatat(dir, c.as_ptr(), &mut st, 0) })?;
        Ok(st)
    }

    /// The target of the symbolic link `path` (`anon_inode:[eventpoll]`).
    pub(crate) fn read_link(path: &str) -> io::Result<Vec<u8>> {
        let (dir, c) = at(path)?;
        let mut buf = vec![0u8; 256];
        // SAFETY: `dir` is open (or AT_FDCWD), `c` a valid C string, and
        // `buf` has room for the length given.
        let n = unsafe { libc::readlinkat(dir, c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    /// The numeric names in the directory `path` (`""`: the pids of
    /// `/proc`; `"42/task"`, `"42/fd"`); empty when it cannot be read.
    pub(crate) fn numbers(path: &str) -> Vec<u64> {
        let path = if path.is_empty() { "." } else { path };
        let Ok(dir) = open(path, libc::O_RDONLY | libc::O_DIRECTORY) else {
            return Vec::new();
        };
        let fd = std::os::fd::IntoRawFd::into_raw_fd(dir);
        // SAFETY: `fd` is an open directory whose ownership passes to the
        // stream (closedir closes it).
        let stream = unsafe { libc::fdopendir(fd) };
        if stream.is_null() {
            // SAFETY: fdopendir failed, so `fd` is still ours to close.
            unsafe { libc::close(fd) };
            return Vec::new();
        }
        let mut found = Vec::new();
        loop {
            // SAFETY: `stream` is an open directory stream.
            let entry = unsafe { libc::readdir64(stream) };
            if entry.is_null() {
                break;
            }
            // SAFETY: readdir returned an entry whose d_name is a NUL-
            // terminated string, valid until the next readdir.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
            if let Some(n) = name.to_str().ok().and_then(|s| s.parse().ok()) {
                found.push(n);
            }
        }
        // SAFETY: `stream` is open and closed once, here.
        unsafe { libc::closedir(stream) };
        found
    }

    /// The pids `/proc` lists.
    pub(crate) fn pids() -> Vec<libc::pid_t> {
        numbers("")
            .into_iter()
            .filter_map(|n| libc::pid_t::try_from(n).ok())
            .collect()
    }
}

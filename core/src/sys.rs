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
    let stat = fs::read(format!("/proc/{pid}/stat")).ok()?;
    let end = stat.iter().rposition(|&b| b == b')')?;
    stat.get(end + 2).copied()
}

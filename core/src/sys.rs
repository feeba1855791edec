//! The system-call helpers, once: every other module calls these instead
//! of writing its own wrapper.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rustix::process::{Pid, PidfdFlags};

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

/// Runs `f` with each standard descriptor the host has closed (0, 1, 2)
/// held by `/dev/null`, closed again after: what `f` makes for the
/// executor's whole life (a reactor's epoll and eventfd, made by a library)
/// never takes a standard stream's number, which an inheriting child would
/// then get in place of the host's.
pub(crate) fn with_std_fds_held<T>(f: impl FnOnce() -> T) -> T {
    let mut held = Vec::new();
    for fd in 0..3 {
        // SAFETY: F_GETFD only reads a descriptor's flags.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1 {
            continue;
        }
        // SAFETY: open takes a NUL-terminated path and flags.
        let got = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        // The lowest free number: this one, unless another thread took it.
        if got == fd {
            held.push(fd);
        } else if got >= 0 {
            // SAFETY: `got` was just opened here and is not used elsewhere.
            unsafe { libc::close(got) };
        }
    }
    let out = f();
    for fd in held {
        // SAFETY: `fd` was opened above and nothing else knows of it.
        unsafe { libc::close(fd) };
    }
    out
}

/// A close-on-exec copy of `fd`, numbered 3 or above (a closed `fd` is
/// EBADF).
pub(crate) fn dup_above_stdio(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC takes only integers and makes a new descriptor.
    let new = cvt(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) })?;
    // SAFETY: the fcntl succeeded (cvt), so `new` is a descriptor it just
    // created, which nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// [`above_stdio`] where failing is worse than keeping the number: `fd`
/// itself when no descriptor is left to move it to.
pub(crate) fn prefer_above_stdio(fd: OwnedFd) -> OwnedFd {
    if fd.as_raw_fd() > 2 {
        return fd;
    }
    dup_above_stdio(fd.as_raw_fd()).unwrap_or(fd)
}

/// `fd`, moved to a number ≥ 3 if it is 0, 1 or 2: the executor's own
/// descriptors never take a standard stream's number, which a host that
/// closed its own would free (a child inheriting that stream would get it).
pub(crate) fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // `fd` is closed on return.
    dup_above_stdio(fd.as_raw_fd())
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
    let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    above_stdio(rustix::process::pidfd_open(pid, PidfdFlags::empty())?)
}

/// `pidfd_send_signal(2)`, as kill(2) would send `sig`. Signal 0 (is it
/// alive?) is one the sweeps send, which rustix's `Signal` cannot carry.
pub(crate) fn pidfd_send_signal(pidfd: &OwnedFd, sig: libc::c_int) -> io::Result<()> {
    pidfd_send_signal_with(pidfd, sig, 0)
}

/// `pidfd_send_signal(2)` with `flags` (`PIDFD_SIGNAL_PROCESS_GROUP`, Linux
/// 6.9: to the pinned process's group), which rustix does not take either.
pub(crate) fn pidfd_send_signal_with(
    pidfd: &OwnedFd,
    sig: libc::c_int,
    flags: libc::c_uint,
) -> io::Result<()> {
    // SAFETY: a null siginfo means "as kill(2) would"; the kernel checks
    // the flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            flags,
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

/// The fields of a `/proc/<pid>/stat` line after the command name (which
/// may itself hold spaces and parentheses), from the state on: `nth(0)` is
/// the state, 1 the parent, 2 the process group, 3 the session, 4 the
/// controlling terminal, 5 its foreground group, 11 and 12 utime and stime.
pub(crate) fn stat_fields(stat: &[u8]) -> impl Iterator<Item = &str> {
    let after_name = stat
        .iter()
        .rposition(|&b| b == b')')
        .map_or(&[][..], |close| &stat[close + 1..]);
    std::str::from_utf8(after_name).unwrap_or("").split_whitespace()
}

/// The state letter of `/proc/<pid>/stat` (`R`, `S`, `T`, `Z`, …).
pub(crate) fn process_state(pid: libc::pid_t) -> Option<u8> {
    let stat = proc::read(&format!("{pid}/stat")).ok()?;
    let state = stat_fields(&stat).next()?.bytes().next();
    state
}

/// `PF_EXITING` in the flags of `/proc/<pid>/stat`: set as a process
/// begins to exit, before its descriptors are closed.
const PF_EXITING: u64 = 0x4;

/// Whether `pid` has ended or begun to end: a zombie, or exiting. True of
/// a leader whose exit is what closed a pipe it held, however soon after
/// the close this is asked.
pub(crate) fn process_exiting(pid: libc::pid_t) -> bool {
    let Ok(stat) = proc::read(&format!("{pid}/stat")) else {
        return false;
    };
    let mut fields = stat_fields(&stat);
    let state = fields.next().and_then(|s| s.bytes().next());
    // After the state: ppid, pgrp, session, tty_nr, tpgid, then flags.
    let flags = fields.nth(5).and_then(|f| f.parse::<u64>().ok());
    matches!(state, Some(b'Z' | b'X')) || flags.is_some_and(|f| f & PF_EXITING != 0)
}

/// `/proc` as the host saw it when its first executor was made: every
/// read of `/proc` by the sweeps, the stops and the terminal's foreground
/// goes through a descriptor of that mount (`openat`), so a command that
/// later mounts something over `/proc` in the host's mount namespace (as
/// root can) or unmounts it hides nothing from them (docs/guarantees.md).
/// Paths are relative to `/proc` (`"42/stat"`).
pub(crate) mod proc {
    use std::fs;
    use std::io::{self, Read};
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::sync::OnceLock;

    use rustix::fs::{AtFlags, Dir, Mode, OFlags, Stat, CWD, PROC_SUPER_MAGIC};

    static ROOT: OnceLock<Option<OwnedFd>> = OnceLock::new();

    /// Opens the view once (later calls do nothing); called when an
    /// executor is made, before any command can run. Without it (no
    /// `/proc` then), paths go through `/proc` as it is at each read.
    pub(crate) fn keep() {
        ROOT.get_or_init(|| {
            let fd = rustix::fs::open(
                "/proc",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok()?;
            // Only a procfs counts (something may already cover /proc).
            let procfs = rustix::fs::fstatfs(&fd).is_ok_and(|f| f.f_type == PROC_SUPER_MAGIC);
            // Kept for the host's life: never a standard stream's number.
            procfs.then(|| super::above_stdio(fd).ok()).flatten()
        });
    }

    /// The directory `path` is resolved in, and `path` relative to it.
    fn at(path: &str) -> (BorrowedFd<'static>, String) {
        keep();
        match ROOT.get().and_then(Option::as_ref) {
            Some(fd) => (fd.as_fd(), path.to_owned()),
            None => (CWD, format!("/proc/{path}")),
        }
    }

    /// Opens `path` read-only (`directory`: a directory).
    pub(crate) fn open(path: &str, directory: bool) -> io::Result<fs::File> {
        let (dir, path) = at(path);
        let flags = OFlags::RDONLY
            | OFlags::CLOEXEC
            | if directory {
                OFlags::DIRECTORY
            } else {
                OFlags::empty()
            };
        Ok(fs::File::from(rustix::fs::openat(
            dir,
            path,
            flags,
            Mode::empty(),
        )?))
    }

    /// Reads all of `path` into `buf` (cleared first).
    pub(crate) fn read_into(path: &str, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.clear();
        open(path, false)?.read_to_end(buf).map(drop)
    }

    /// All of `path`.
    pub(crate) fn read(path: &str) -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        read_into(path, &mut buf)?;
        Ok(buf)
    }

    /// `stat` of `path`, following a last symbolic link (so of the file a
    /// `PID/fd/N` link refers to).
    pub(crate) fn stat(path: &str) -> io::Result<Stat> {
        let (dir, path) = at(path);
        Ok(rustix::fs::statat(dir, path, AtFlags::empty())?)
    }

    /// The target of the symbolic link `path` (`anon_inode:[eventpoll]`).
    pub(crate) fn read_link(path: &str) -> io::Result<Vec<u8>> {
        let (dir, path) = at(path);
        Ok(rustix::fs::readlinkat(dir, path, Vec::new())?.into_bytes())
    }

    /// The numeric names in the directory `path` (`""`: the pids of
    /// `/proc`; `"42/task"`, `"42/fd"`); empty when it cannot be read.
    pub(crate) fn numbers(path: &str) -> Vec<u64> {
        let path = if path.is_empty() { "." } else { path };
        let Ok(dir) = open(path, true)
            .map_err(drop)
            .and_then(|d| Dir::read_from(d).map_err(drop))
        else {
            return Vec::new();
        };
        dir.filter_map(|entry| entry.ok()?.file_name().to_str().ok()?.parse().ok())
            .collect()
    }

    /// The pids `/proc` lists.
    pub(crate) fn pids() -> Vec<libc::pid_t> {
        numbers("")
            .into_iter()
            .filter_map(|n| libc::pid_t::try_from(n).ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_lists_and_reads_this_process() {
        let me = std::process::id() as libc::pid_t;
        let mut listed = proc::pids();
        let mut std_listed: Vec<libc::pid_t> = fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        listed.sort_unstable();
        std_listed.sort_unstable();
        assert!(listed.contains(&me), "{} pids, not {me}", listed.len());
        assert!(
            listed.len().abs_diff(std_listed.len()) <= 2,
            "{listed:?} / {std_listed:?}"
        );
        assert!(!proc::numbers(&format!("{me}/task")).is_empty());
        assert!(proc::numbers(&format!("{me}/fd")).contains(&0));
        assert!(proc::read(&format!("{me}/stat"))
            .unwrap()
            .starts_with(me.to_string().as_bytes()));
        assert!(matches!(process_state(me), Some(b'R' | b'S')));
        assert!(proc::read_link(&format!("{me}/exe")).unwrap().starts_with(b"/"));
        assert!(proc::stat(&format!("{me}/fd/0")).is_ok());
    }

    #[test]
    fn a_pidfd_takes_signal_0_and_a_named_signal() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = std::process::Command::new("sleep").arg("100").spawn().unwrap();
        let pidfd = pidfd_open(child.id() as libc::pid_t).unwrap();
        pidfd_send_signal(&pidfd, 0).expect("signal 0: the sweeps' count of the living");
        pidfd_send_signal(&pidfd, libc::SIGKILL).unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
    }
}

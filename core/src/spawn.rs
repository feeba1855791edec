//! Starting `bash -c` (in the executor's supervisor, which never copies the
//! host's page tables: see `supervisor.rs`), and the raw fd helpers around
//! it.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;

use crate::supervisor::{SpawnError, SpawnRequest, Supervisor};

/// A started command: the leader's pid, the socket on which the supervisor
/// reports its exit (see [`crate::supervisor::Leader`]), and the parent
/// ends of its pipes (close-on-exec, non-blocking).
pub(crate) struct Spawned {
    pub pid: libc::pid_t,
    pub report: OwnedFd,
    pub stdin: Option<OwnedFd>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A close-on-exec pipe whose ends are both ≥ 3, so that a host that closed
/// its own 0/1/2 cannot make a `dup2` in the child clobber another pipe end.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both descriptors are fresh and ours alone.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(r)?, above_stdio(w)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
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

pub(crate) fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: plain fcntl flag manipulation on a descriptor we own.
    unsafe {
        let flags = cvt(libc::fcntl(fd.as_raw_fd(), libc::F_GETFL))?;
        cvt(libc::fcntl(
            fd.as_raw_fd(),
            libc::F_SETFL,
            flags | libc::O_NONBLOCK,
        ))?;
    }
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

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitStatus {
    Code(i32),
    Signal(i32),
    /// Nobody could say: the supervisor that was the command's parent was
    /// itself killed.
    Unavailable,
}

/// Finds `bash` on a PATH, as `execvp` would.
pub(crate) fn find_shell(path: Option<&[u8]>) -> Option<CString> {
    let path = path.unwrap_or(b"/usr/local/bin:/usr/bin:/bin");
    path.split(|&b| b == b':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| {
            let mut p = dir.to_vec();
            p.extend_from_slice(b"/bash");
            p
        })
        .find_map(|p| {
            let c = CString::new(p).ok()?;
            // SAFETY: `c` is a valid NUL-terminated path.
            let ok = unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
                && Path::new(std::ffi::OsStr::from_bytes(c.as_bytes())).is_file();
            ok.then_some(c)
        })
}

/// Starts `shell -c -- command` in `workdir` with `envp` through
/// `supervisor`, as the leader of a new session (so of a new process group,
/// with no controlling terminal: a read of `/dev/tty` fails at once instead
/// of stopping the command in the host's terminal), with default signal
/// dispositions and an empty signal mask, with only fds 0, 1 and 2 open,
/// and confined by `ruleset` when there is one.
pub(crate) fn spawn(
    supervisor: &Supervisor,
    shell: &CStr,
    command: &CStr,
    workdir: &CStr,
    envp: &[CString],
    with_stdin: bool,
    ruleset: Option<RawFd>,
) -> Result<Spawned, SpawnError> {
    let (out_r, out_w) = pipe().map_err(SpawnError::Io)?;
    let (err_r, err_w) = pipe().map_err(SpawnError::Io)?;
    let stdin_pipe = if with_stdin {
        Some(pipe().map_err(SpawnError::Io)?)
    } else {
        None
    };
    // `--`: a command that starts with `-` is a command, not bash options.
    let argv = [c"bash", c"-c", c"--", command];
    let leader = supervisor.spawn(&SpawnRequest {
        path: shell,
        argv: &argv,
        envp,
        workdir,
        stdin: stdin_pipe.as_ref().map(|(r, _)| r.as_raw_fd()),
        stdout: out_w.as_raw_fd(),
        stderr: err_w.as_raw_fd(),
        ruleset,
    })?;
    drop((out_w, err_w));
    let stdin = stdin_pipe.map(|(_, w)| w);
    for fd in [Some(&out_r), Some(&err_r), stdin.as_ref()].into_iter().flatten() {
        set_nonblocking(fd).map_err(SpawnError::Io)?;
    }
    Ok(Spawned {
        pid: leader.pid,
        report: leader.report,
        stdin,
        stdout: out_r,
        stderr: err_r,
    })
}

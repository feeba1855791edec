//! Starting `bash -c` (through [`clone_exec`], which never copies the host's
//! page tables), reaping it, and the raw fd helpers around both.

use std::ffi::{CStr, CString};
use std::io;
use std::mem::MaybeUninit;

use crate::clone_exec::clone_exec;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;

/// A started command: the leader's pid, a pidfd for it, and the parent ends
/// of its pipes (close-on-exec, non-blocking).
pub(crate) struct Spawned {
    pub pid: libc::pid_t,
    pub pidfd: OwnedFd,
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
    /// Someone else took the status: a host that ignores SIGCHLD (the
    /// kernel reaps at once) or reaps with `waitpid(-1)`, on a kernel too old
    /// to keep it for the pidfd.
    Unavailable,
}

impl ExitStatus {
    /// Decodes a `wait(2)` status word.
    fn from_wait_status(status: libc::c_int) -> Self {
        if libc::WIFEXITED(status) {
            ExitStatus::Code(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            ExitStatus::Signal(libc::WTERMSIG(status))
        } else {
            ExitStatus::Unavailable
        }
    }
}

/// `struct pidfd_info` of `<linux/pidfd.h>` (its first version, 64 bytes;
/// the kernel accepts any size it knows and fills what it has).
#[repr(C)]
#[derive(Default)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    pid: u32,
    tgid: u32,
    ppid: u32,
    ruid: u32,
    rgid: u32,
    euid: u32,
    egid: u32,
    suid: u32,
    sgid: u32,
    fsuid: u32,
    fsgid: u32,
    exit_code: i32,
}

const PIDFD_INFO_EXIT: u64 = 1 << 3;
/// `_IOWR(PIDFS_IOCTL_MAGIC, 11, struct pidfd_info)`.
const PIDFD_GET_INFO: libc::c_ulong =
    (3 << 30) | ((std::mem::size_of::<PidfdInfo>() as libc::c_ulong) << 16) | (0xFF << 8) | 11;

/// The exit status the kernel kept for a reaped process (Linux 6.15+):
/// what `waitid` can no longer give when someone else reaped it.
fn exit_status_kept_by_pidfd(pidfd: &OwnedFd) -> Option<ExitStatus> {
    let mut info = PidfdInfo {
        mask: PIDFD_INFO_EXIT,
        ..PidfdInfo::default()
    };
    // SAFETY: PIDFD_GET_INFO reads and writes one `struct pidfd_info` of the
    // size encoded in the request, which is `info`'s size; older kernels
    // fail with ENOTTY/EINVAL and write nothing.
    let r = unsafe {
        libc::ioctl(
            pidfd.as_raw_fd(),
            PIDFD_GET_INFO as _,
            &mut info as *mut PidfdInfo,
        )
    };
    (r == 0 && info.mask & PIDFD_INFO_EXIT != 0).then(|| ExitStatus::from_wait_status(info.exit_code))
}

/// Reaps the process behind `pidfd` (it must have exited, or this blocks).
/// `waitid(P_PIDFD)` touches this one child only: no `waitpid(-1)`, so the
/// host's other children are never reaped from under it. When the host took
/// the status first (SIGCHLD ignored, a `waitpid(-1)` reaper), the kernel's
/// copy kept for the pidfd is used, else the status is `Unavailable`; the
/// command ran either way, so this never fails.
pub(crate) fn reap(pidfd: &OwnedFd) -> ExitStatus {
    let mut info = MaybeUninit::<libc::siginfo_t>::zeroed();
    loop {
        // SAFETY: `info` is a valid siginfo_t buffer; P_PIDFD takes the fd as id.
        let r = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                info.as_mut_ptr(),
                libc::WEXITED,
            )
        };
        if r == 0 {
            break;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            // ECHILD: reaped by someone else (or never ours to reap).
            return exit_status_kept_by_pidfd(pidfd).unwrap_or(ExitStatus::Unavailable);
        }
    }
    // SAFETY: waitid succeeded and filled `info`.
    let info = unsafe { info.assume_init() };
    // SAFETY: for CLD_* codes si_status is the valid union member.
    let status = unsafe { info.si_status() };
    match info.si_code {
        libc::CLD_EXITED => ExitStatus::Code(status),
        _ => ExitStatus::Signal(status),
    }
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

/// Starts `shell -c -- command` in `workdir` with `envp`, as the leader of
/// a new session (so of a new process group, with no controlling terminal:
/// a read of `/dev/tty` fails at once instead of stopping the command in
/// the host's terminal), with default signal dispositions and an empty
/// signal mask, and with only fds 0, 1 and 2 open.
pub(crate) fn spawn(
    shell: &CStr,
    command: &CStr,
    workdir: &CStr,
    envp: &[CString],
    with_stdin: bool,
) -> io::Result<Spawned> {
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let stdin_pipe = if with_stdin { Some(pipe()?) } else { None };
    // `--`: a command that starts with `-` is a command, not bash options.
    let argv = [c"bash", c"-c", c"--", command];
    let stdio = [
        stdin_pipe.as_ref().map(|(r, _)| r.as_raw_fd()),
        Some(out_w.as_raw_fd()),
        Some(err_w.as_raw_fd()),
    ];
    let child = clone_exec(shell, &argv, envp, workdir, stdio)?;
    drop((out_w, err_w));
    let stdin = stdin_pipe.map(|(_, w)| w);
    for fd in [Some(&out_r), Some(&err_r), stdin.as_ref()].into_iter().flatten() {
        set_nonblocking(fd)?;
    }
    Ok(Spawned {
        pid: child.pid,
        pidfd: child.pidfd,
        stdin,
        stdout: out_r,
        stderr: err_r,
    })
}

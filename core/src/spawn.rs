//! Starting `bash -c` with posix_spawn (glibc uses CLONE_VM|CLONE_VFORK, so
//! the host's page tables are never copied), and the raw fd helpers around
//! it. All of the core's process-creation `unsafe` lives here.

use std::ffi::{CStr, CString};
use std::io;
use std::mem::MaybeUninit;
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

/// posix_spawn* functions return the error instead of setting errno.
fn cvt_spawn(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
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
    // SAFETY: F_DUPFD_CLOEXEC on a valid fd returns a new fd we then own.
    let new = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) })?;
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
}

/// Reaps the process behind `pidfd` (it must have exited, or this blocks).
/// `waitid(P_PIDFD)` touches this one child only: no `waitpid(-1)`, so the
/// host's other children are never reaped from under it.
pub(crate) fn reap(pidfd: &OwnedFd) -> io::Result<ExitStatus> {
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
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    // SAFETY: waitid succeeded and filled `info`.
    let info = unsafe { info.assume_init() };
    // SAFETY: for CLD_* codes si_status is the valid union member.
    let status = unsafe { info.si_status() };
    Ok(match info.si_code {
        libc::CLD_EXITED => ExitStatus::Code(status),
        _ => ExitStatus::Signal(status),
    })
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

/// RAII for the two posix_spawn attribute objects.
struct SpawnAttrs {
    actions: libc::posix_spawn_file_actions_t,
    attr: libc::posix_spawnattr_t,
}

impl SpawnAttrs {
    /// Boxed: glibc's objects must not move once initialised.
    fn new() -> io::Result<Box<Self>> {
        // SAFETY: zeroed storage is what the init functions expect to fill.
        let mut s: Box<Self> = Box::new(unsafe { std::mem::zeroed() });
        cvt_spawn(unsafe { libc::posix_spawn_file_actions_init(&mut s.actions) })?;
        if let Err(e) = cvt_spawn(unsafe { libc::posix_spawnattr_init(&mut s.attr) }) {
            unsafe { libc::posix_spawn_file_actions_destroy(&mut s.actions) };
            return Err(e);
        }
        Ok(s)
    }
}

impl Drop for SpawnAttrs {
    fn drop(&mut self) {
        // SAFETY: both objects were initialised in `new`.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut self.actions);
            libc::posix_spawnattr_destroy(&mut self.attr);
        }
    }
}

/// Starts `shell -c command` in `workdir` with `envp`, as the leader of a
/// new process group, with default signal dispositions and an empty signal
/// mask, and with only fds 0, 1 and 2 open.
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

    let mut a = SpawnAttrs::new()?;
    // SAFETY (whole block): `a` holds initialised objects; every fd named is
    // open until posix_spawn returns; every C string outlives the call.
    unsafe {
        match &stdin_pipe {
            Some((r, _)) => cvt_spawn(libc::posix_spawn_file_actions_adddup2(
                &mut a.actions,
                r.as_raw_fd(),
                0,
            ))?,
            None => cvt_spawn(libc::posix_spawn_file_actions_addopen(
                &mut a.actions,
                0,
                c"/dev/null".as_ptr(),
                libc::O_RDONLY,
                0,
            ))?,
        }
        cvt_spawn(libc::posix_spawn_file_actions_adddup2(
            &mut a.actions,
            out_w.as_raw_fd(),
            1,
        ))?;
        cvt_spawn(libc::posix_spawn_file_actions_adddup2(
            &mut a.actions,
            err_w.as_raw_fd(),
            2,
        ))?;
        cvt_spawn(libc::posix_spawn_file_actions_addchdir_np(
            &mut a.actions,
            workdir.as_ptr(),
        ))?;
        // Every other fd the host holds, CLOEXEC or not, stays out of the child.
        cvt_spawn(libc::posix_spawn_file_actions_addclosefrom_np(&mut a.actions, 3))?;

        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        cvt_spawn(libc::posix_spawnattr_setsigmask(&mut a.attr, &empty))?;
        // Hosts (Node, Python) ignore SIGPIPE; a command must not inherit that.
        cvt_spawn(libc::posix_spawnattr_setsigdefault(&mut a.attr, &all))?;
        cvt_spawn(libc::posix_spawnattr_setpgroup(&mut a.attr, 0))?;
        let flags = libc::POSIX_SPAWN_SETPGROUP | libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
        cvt_spawn(libc::posix_spawnattr_setflags(
            &mut a.attr,
            flags as libc::c_short,
        ))?;
    }

    let argv: [*mut libc::c_char; 4] = [
        c"bash".as_ptr() as *mut _,
        c"-c".as_ptr() as *mut _,
        command.as_ptr() as *mut _,
        ptr::null_mut(),
    ];
    let mut envp_ptrs: Vec<*mut libc::c_char> = envp.iter().map(|e| e.as_ptr() as *mut _).collect();
    envp_ptrs.push(ptr::null_mut());

    let mut pid: libc::pid_t = 0;
    // SAFETY: argv and envp are NULL-terminated arrays of valid C strings that
    // outlive the call; glibc does not write through them.
    cvt_spawn(unsafe {
        libc::posix_spawn(
            &mut pid,
            shell.as_ptr(),
            &a.actions,
            &a.attr,
            argv.as_ptr(),
            envp_ptrs.as_ptr(),
        )
    })?;
    drop((out_w, err_w));

    let pidfd = match pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) => {
            // Without a pidfd we cannot supervise it: kill and reap it now.
            // SAFETY: `pid` is our unreaped child, so it cannot have been reused.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::waitpid(pid, ptr::null_mut(), 0);
            }
            return Err(e);
        }
    };
    let stdin = stdin_pipe.map(|(_, w)| w);
    for fd in [Some(&out_r), Some(&err_r), stdin.as_ref()].into_iter().flatten() {
        set_nonblocking(fd)?;
    }
    Ok(Spawned {
        pid,
        pidfd,
        stdin,
        stdout: out_r,
        stderr: err_r,
    })
}

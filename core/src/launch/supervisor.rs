//! The host's side of the per-executor supervisor (`docs/host-death.md`).
//!
//! The supervisor is a small C program (`core/supervisor/supervisor.c`),
//! compiled by `build.rs` and embedded here, so nothing is shipped or
//! looked up at run time: it is written to a sealed memfd and executed from
//! it. Each executor starts one on its first command; it is a child
//! subreaper and the parent of every command of that executor, so whatever
//! a command starts stays in its subtree. When the host dies by any cause
//! it kills that subtree; `dispose()` shuts it down the same way.
//!
//! Spawning happens in the supervisor: the host sends one request over a
//! unix socket with the pipe ends, a Landlock ruleset and the program
//! (path, argv, environment, workdir), and gets back the leader's pid, or
//! the step and errno that failed. Each command has a pipe of its own from
//! the supervisor, on which its leader's exit status arrives; the leader stays
//! an unreaped zombie until the host releases it (its pid on the executor's
//! release pipe), so its pid and process group id cannot be reused while
//! the host may still signal them. Only pipes, files and memfds travel to
//! the supervisor, never a unix socket (see supervisor.c).
//!
//! The supervisor is started by one thread of the host (`dsh-supervise`)
//! that lives as long as the process: the supervisor's parent-death signal
//! fires when the thread that created it ends, which is then only when the
//! host ends.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{mpsc, Arc, Mutex};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::host::forked::{current_pid, PerProcess};
use crate::launch::clone_exec::clone_exec_fd;
use crate::launch::env::Envp;
use crate::launch::wire::*;
use crate::sys::{pipe, set_nonblocking};

/// The supervisor program, compiled by `build.rs`.
static PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/dsh-supervisor"));

/// An executor's release pipe: the supervisor reads the pids of released
/// leaders from it. The host keeps a copy of the read end as long as it
/// can write, so a write never meets a pipe without readers (which would
/// be SIGPIPE to a host that did not ignore it), even after the
/// supervisor died.
struct ReleasePipe {
    _read: OwnedFd,
    write: OwnedFd,
    /// A copy of the supervisor's pidfd, to continue it (see
    /// [`watch_for_a_stop`]).
    supervisor: OwnedFd,
    supervisor_pid: libc::pid_t,
}

/// Releases one leader (see [`Releaser::release`]).
pub(crate) struct Releaser {
    pipe: Arc<ReleasePipe>,
}

impl Releaser {
    /// Lets the supervisor reap the leader `pid`: after this, its pid and
    /// group id may be reused, so nothing may signal them. Closing the
    /// report pipe alone does the same (all there is to do when the pid
    /// never came), but a forked copy of the host could keep it open.
    pub(crate) fn release(self, pid: Option<libc::pid_t>, report: OwnedFd) {
        self.announce(pid);
        drop(report);
    }

    /// Writes `pid` on the release pipe, which wakes the supervisor: it
    /// reaps the leader, then closes its end of the leader's report pipe
    /// (the end of file there is the proof that the pid is free).
    pub(crate) fn announce(&self, pid: Option<libc::pid_t>) {
        if let Some(pid) = pid {
            // A full pipe (the supervisor is gone or stalled) leaves the close.
            let _ = write_all(&self.pipe.write, &pid.to_ne_bytes());
        }
    }
}

/// The descriptors a command gets: its pipe ends and, to confine it, a
/// Landlock ruleset it restricts itself with before exec; to govern it,
/// the `cgroup.procs` files of its groups, its resource limits and its
/// network filter.
pub(crate) struct ChildFds {
    pub stdin: Option<RawFd>,
    pub stdout: RawFd,
    pub stderr: RawFd,
    pub ruleset: Option<RawFd>,
    /// The ruleset only scopes signals (see `landlock::Ruleset`).
    pub ruleset_scope_only: bool,
    /// The v1 groups' `cgroup.procs`.
    pub cgroups: Vec<RawFd>,
    /// The v2 group's directory, which the command is born in.
    pub born_in: Option<RawFd>,
    pub rlimits: Option<crate::confine::governor::Rlimits>,
    /// A compiled seccomp filter: BPF instructions, 8 bytes each.
    pub seccomp: Option<Vec<u8>>,
    /// The read-only file system of a confined command.
    pub mounts: Option<ReadOnlyMounts>,
    /// `stdin` is a pseudo-terminal's slave, to become the command's
    /// controlling terminal (a terminal session).
    pub terminal: bool,
}

/// What to run: `path` with `argv` and `envp`, in `workdir`; the strings go
/// as they are to `execve`.
pub(crate) struct Program<'a> {
    pub path: &'a CStr,
    pub argv: &'a [&'a CStr],
    pub envp: &'a Envp,
    pub workdir: &'a CStr,
}

impl Program<'_> {
    /// The wire form: struct payload { argc, envc, len } and `len` bytes:
    /// `extra` (the limits, the filter and the writable directories its
    /// flags announce), then the strings.
    fn payload(&self, extra: &[u8]) -> Vec<u8> {
        let strings = [self.path, self.workdir]
            .into_iter()
            .chain(self.argv.iter().copied());
        let mut payload = Vec::with_capacity(4096 + self.envp.as_bytes_with_nuls().len());
        payload.extend_from_slice(&(self.argv.len() as u32).to_ne_bytes());
        payload.extend_from_slice(&(self.envp.len() as u32).to_ne_bytes());
        payload.extend_from_slice(&[0; 8]);
        payload.extend_from_slice(extra);
        for s in strings {
            payload.extend_from_slice(s.to_bytes_with_nul());
        }
        payload.extend_from_slice(self.envp.as_bytes_with_nuls());
        let len = (payload.len() - 16) as u64;
        payload[8..16].copy_from_slice(&len.to_ne_bytes());
        payload
    }
}

fn ended() -> SpawnError {
    SpawnError::Io(io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the dsh supervisor ended while starting the command",
    ))
}

/// Waits for the supervisor's answer to a spawn on the command's report
/// pipe.
fn spawned(report: OwnedFd, releaser: Releaser) -> Result<(libc::pid_t, Launched), SpawnError> {
    match recv_reply(&report).map_err(SpawnError::Io)? {
        None => Err(ended()),
        Some(words) => match decode_report(words) {
            Report::Spawned(pid) => {
                set_nonblocking(&report).map_err(SpawnError::Io)?;
                Ok((pid, Launched { report, releaser }))
            }
            Report::Failed(e) => Err(e),
            Report::Exited { .. } | Report::Ended => Err(SpawnError::Io(io::Error::other(
                "unexpected reply from the dsh supervisor",
            ))),
        },
    }
}

/// A command the supervisor was asked to start (the one name for it): its
/// report pipe (non-blocking) says how the start went (SPAWNED with the
/// leader's pid: at once for a terminal session, held back for a command:
/// [`Supervisor::start_deferred`]) and then how the leader ended, and what
/// releases the leader.
pub(crate) struct Launched {
    pub report: OwnedFd,
    pub releaser: Releaser,
}

/// One executor's supervisor process.
pub(crate) struct Supervisor {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
    control: OwnedFd,
    releases: Arc<ReleasePipe>,
    /// The process that started it; a forked child must not shut it down.
    host_pid: libc::pid_t,
}

impl Supervisor {
    pub(crate) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Starts `program` with `fds` and returns once it has exec'd, or
    /// failed to.
    pub(crate) fn spawn(
        &self,
        fds: &ChildFds,
        program: &Program<'_>,
    ) -> Result<(libc::pid_t, Launched), SpawnError> {
        let report = self.request(fds, program, 0, None)?;
        spawned(report, self.releaser())
    }

    /// Asks for `program` to be started with `fds` and returns at once:
    /// the pid comes on the report pipe just before the exit report, or
    /// once the command has run a few milliseconds (supervisor.c,
    /// FLAG_DEFER_SPAWNED); a failure to start comes at once. With
    /// `pid_pipe`, the pid is also written there as soon as it has exec'd
    /// (FLAG_PID_PIPE), for a host that may ask for it before; the
    /// supervisor keeps its end until the exit, and a pid still unread
    /// there then was told to nobody (FLAG_REAP_EMPTY).
    pub(crate) fn start_deferred(
        &self,
        fds: &ChildFds,
        program: &Program<'_>,
        pid_pipe: Option<RawFd>,
    ) -> Result<Launched, SpawnError> {
        // Every deferred start is supervised by `supervise`, which takes a
        // leader reaped at its exit; the supervisor rules out one whose pid
        // was told (on the report pipe, or read from the pid pipe).
        let report = self.request(fds, program, FLAG_DEFER_SPAWNED | FLAG_REAP_EMPTY, pid_pipe)?;
        set_nonblocking(&report).map_err(SpawnError::Io)?;
        Ok(Launched {
            report,
            releaser: self.releaser(),
        })
    }

    fn releaser(&self) -> Releaser {
        Releaser {
            pipe: self.releases.clone(),
        }
    }

    /// Sends the request; returns the read end of the command's report
    /// pipe. The usual program travels in the request's own message; a
    /// larger one in a memfd. (No unix socket is ever passed: see
    /// supervisor.c.)
    fn request(
        &self,
        fds: &ChildFds,
        program: &Program<'_>,
        flags: u32,
        pid_pipe: Option<RawFd>,
    ) -> Result<OwnedFd, SpawnError> {
        let (mine, theirs) = pipe(0).map_err(SpawnError::Io)?;
        let mut flags = flags;
        let mut passed = vec![theirs.as_raw_fd()];
        let mut extra = Vec::new();
        if let Some(r) = &fds.rlimits {
            flags |= FLAG_RLIMITS;
            extra.extend_from_slice(&limits_bytes(r));
        }
        if let Some(bpf) = &fds.seccomp {
            flags |= FLAG_SECCOMP;
            extra.extend_from_slice(&((bpf.len() / 8) as u32).to_ne_bytes());
            extra.extend_from_slice(&[0; 4]);
            extra.extend_from_slice(bpf);
        }
        if let Some(mounts) = &fds.mounts {
            flags |= FLAG_MOUNTS;
            if mounts.user {
                flags |= FLAG_USER_NS;
            }
            extra.extend_from_slice(&(mounts.writable.len() as u32).to_ne_bytes());
            extra.extend_from_slice(&[0; 4]);
            for dir in &mounts.writable {
                extra.extend_from_slice(dir.to_bytes_with_nul());
            }
        }
        let payload = program.payload(&extra);
        let inline = payload.len() <= MAX_INLINE;
        let memfd = if inline {
            flags |= FLAG_INLINE;
            None
        } else {
            let memfd = payload_memfd(&payload).map_err(SpawnError::Io)?;
            passed.push(memfd.as_raw_fd());
            Some(memfd)
        };
        passed.extend([fds.stdout, fds.stderr]);
        if let Some(fd) = fds.stdin {
            flags |= FLAG_STDIN;
            passed.push(fd);
        }
        if let Some(fd) = fds.ruleset {
            flags |= FLAG_RULESET;
            if fds.ruleset_scope_only {
                flags |= FLAG_SCOPE_ONLY;
            }
            passed.push(fd);
        }
        if fds.terminal {
            flags |= FLAG_TERMINAL;
        }
        debug_assert!(fds.cgroups.len() <= 2);
        for (fd, flag) in fds.cgroups.iter().zip([FLAG_CGROUP1, FLAG_CGROUP2]) {
            flags |= flag;
            passed.push(*fd);
        }
        if let Some(fd) = fds.born_in {
            flags |= FLAG_CGROUP_INTO;
            passed.push(fd);
        }
        if let Some(fd) = pid_pipe {
            flags |= FLAG_PID_PIPE;
            passed.push(fd);
        }
        let header = Header { op: OP_SPAWN, flags };
        let rest: &[u8] = if inline { &payload } else { &[] };
        send_with_fds(&self.control, &header, rest, &passed).map_err(|e| match e.raw_os_error() {
            Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ECONNREFUSED) => {
                SpawnError::Unreachable(e)
            }
            _ => SpawnError::Io(e),
        })?;
        // Ours gone, the supervisor's end is the only writer: its end of
        // file means the supervisor ended.
        drop(theirs);
        drop(memfd);
        Ok(mine)
    }

    /// Asks the supervisor to kill whatever is left of its subtree and
    /// exit, waits until it has, and reaps it.
    pub(crate) async fn shutdown(mut self) {
        let _ = send_with_fds(&self.control, &SHUTDOWN, &[], &[]);
        let Some(pidfd) = self.pidfd.take() else {
            return;
        };
        // SAFETY: an OwnedFd is open and always returns the same raw fd,
        // and the AsyncFd owns it until it is dropped.
        match unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) } {
            Ok(fd) => {
                let exited =
                    crate::host::runtime::timer(|| tokio::time::timeout(crate::KILL_GIVE_UP, fd.readable()));
                if exited.await.is_ok() {
                    reap(fd.get_ref());
                } else {
                    // A member stuck in the kernel keeps it waiting (it
                    // ends the subtree before it exits): dispose does not
                    // wait for that; a task reaps it when it ends.
                    crate::host::runtime::handle().spawn(async move {
                        let _ = fd.readable().await;
                        reap(fd.get_ref());
                    });
                }
            }
            Err(e) => {
                let (pidfd, _) = e.into_parts();
                reap(&pidfd);
            }
        }
    }
}

/// Reaps the supervisor (blocking until it has exited); ECHILD (a host
/// that reaps every child, or ignores SIGCHLD, took it) is fine.
fn reap(pidfd: &OwnedFd) {
    let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
    // SAFETY: `info` is a valid siginfo_t buffer; P_PIDFD takes the fd as id.
    while unsafe {
        libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            info.as_mut_ptr(),
            libc::WEXITED,
        )
    } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
}

impl Drop for Supervisor {
    /// Only when an executor goes without `dispose()` having shut its
    /// supervisor down (it always does, so this is a safety net): ask it to
    /// end, and reap it on the core's threads. Never in a forked child:
    /// the supervisor is the parent's.
    fn drop(&mut self) {
        if self.host_pid != current_pid() {
            return;
        }
        if let Some(pidfd) = self.pidfd.take() {
            let _ = send_with_fds(&self.control, &SHUTDOWN, &[], &[]);
            crate::host::runtime::handle().spawn_blocking(move || reap(&pidfd));
        }
    }
}

const MFD_CLOEXEC: libc::c_uint = 0x1;
const MFD_ALLOW_SEALING: libc::c_uint = 0x2;
/// Linux 6.3+: ask for an executable memfd (older kernels refuse the flag
/// with EINVAL, and their memfds are executable).
const MFD_EXEC: libc::c_uint = 0x10;

/// A memfd holding a program too large to travel inline: its head and
/// payload, as the supervisor reads them (from offset 0).
fn payload_memfd(payload: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: memfd_create takes a C string and flags (the raw call: see
    // `program_memfd`).
    let fd = unsafe { libc::syscall(libc::SYS_memfd_create, c"dsh-program".as_ptr(), MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a non-negative return is a fresh descriptor, ours alone.
    let fd = crate::sys::above_stdio(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })?;
    write_all(&fd, payload)?;
    Ok(fd)
}

/// A sealed, executable memfd holding the program.
pub(crate) fn program_memfd() -> io::Result<OwnedFd> {
    let create = |flags: libc::c_uint| {
        // SAFETY: memfd_create takes a C string and flags; the raw call
        // because glibc's wrapper needs 2.27 and the library targets 2.17.
        unsafe { libc::syscall(libc::SYS_memfd_create, c"dsh-supervisor".as_ptr(), flags) }
    };
    let mut fd = create(MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        fd = create(MFD_CLOEXEC | MFD_ALLOW_SEALING);
    }
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a non-negative return is a fresh descriptor, ours alone.
    let fd = crate::sys::above_stdio(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })?;
    write_all(&fd, PROGRAM)?;
    // Nobody can change the program once it is written.
    // SAFETY: fcntl with integer arguments on a descriptor we own.
    unsafe {
        libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE,
        )
    };
    Ok(fd)
}

/// Runs on the `dsh-supervise` thread: the supervisor's parent.
fn start_here() -> io::Result<Supervisor> {
    let program = program_memfd()?;
    let (control, theirs) = socketpair(libc::SOCK_SEQPACKET)?;
    let (read, write) = pipe(libc::O_NONBLOCK)?;
    let host_pid = current_pid();
    let pid_arg = CString::new(host_pid.to_string()).expect("digits have no NUL");
    // The directories its commands' cgroups are made in: it removes what
    // is left of them when it ends.
    let groups: Vec<CString> = crate::confine::governor::group_parents()
        .into_iter()
        .filter_map(|d| CString::new(std::os::unix::ffi::OsStrExt::as_bytes(d.as_os_str())).ok())
        .collect();
    let mut argv: Vec<&CStr> = vec![c"dsh-supervisor", &pid_arg];
    argv.extend(groups.iter().map(CString::as_c_str));
    let child = clone_exec_fd(program.as_raw_fd(), &argv, &[], theirs.as_raw_fd())?;
    let releases = Header {
        op: OP_RELEASES,
        flags: 0,
    };
    // Queued before any request, so read first. Should it fail, the
    // supervisor is already gone: the first spawn finds that out.
    let _ = send_with_fds(&control, &releases, &[], &[read.as_raw_fd()]);
    let supervisor = child.pidfd.try_clone()?;
    let releases = Arc::new(ReleasePipe {
        _read: read,
        write,
        supervisor,
        supervisor_pid: child.pid,
    });
    watch_for_a_stop(Arc::downgrade(&releases));
    Ok(Supervisor {
        pid: child.pid,
        pidfd: Some(child.pidfd),
        control,
        releases,
        host_pid,
    })
}

/// How often the executor looks for a stopped supervisor.
const STOP_WATCH: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a supervisor may be seen stopped, look after look, before it is
/// lost: SIGCONT does not end a ptrace stop, and a process that stops it
/// again and again keeps every run late.
const UNRESPONSIVE: std::time::Duration = std::time::Duration::from_secs(2);

/// The one place that continues a supervisor something stopped (a
/// command's `kill -STOP $PPID` where signals are not scoped, what a
/// ptrace attach left behind once its tracer died): a stopped supervisor
/// reports no exit and reaps nothing, so runs waiting on it would never
/// settle. It looks every STOP_WATCH for as long as anything of its
/// executor can still use it; a running supervisor is left alone. One seen
/// stopped at every look for UNRESPONSIVE (and not held by a debugger of
/// the host's own) is lost: it is SIGKILLed, and
/// the executor does what it does for any supervisor that died (its runs
/// settle with the exit status unavailable, the tag sweep ends their
/// trees, the next command starts a new supervisor).
fn watch_for_a_stop(releases: std::sync::Weak<ReleasePipe>) {
    crate::host::runtime::handle().spawn(async move {
        let mut stopped_since: Option<std::time::Instant> = None;
        loop {
            tokio::time::sleep(STOP_WATCH).await;
            let Some(pipe) = releases.upgrade() else { return };
            if !matches!(crate::sys::process_state(pipe.supervisor_pid), Some(b'T' | b't')) {
                stopped_since = None;
                continue;
            }
            // The pidfd pins the supervisor: a recycled pid is never hit.
            let stopped_for = stopped_since
                .get_or_insert_with(std::time::Instant::now)
                .elapsed();
            if stopped_for >= UNRESPONSIVE && !traced_by_a_debugger_of_the_host(pipe.supervisor_pid) {
                let _ = crate::sys::pidfd_send_signal(&pipe.supervisor, libc::SIGKILL);
                return;
            }
            let _ = crate::sys::pidfd_send_signal(&pipe.supervisor, libc::SIGCONT);
        }
    });
}

/// Whether `pid` is traced by the host or one of its ancestors (`gdb` or
/// `strace -f` on the host follows into the supervisor): a debugger of the
/// host's own, which no command can be, so its stops are left alone.
fn traced_by_a_debugger_of_the_host(pid: libc::pid_t) -> bool {
    let Ok(status) = crate::sys::proc::read(&format!("{pid}/status")) else {
        return false;
    };
    let tracer = String::from_utf8_lossy(&status)
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:")?.trim().parse::<libc::pid_t>().ok())
        .unwrap_or(0);
    if tracer <= 0 {
        return false;
    }
    let mut ancestor = current_pid();
    for _ in 0..64 {
        if ancestor == tracer {
            return true;
        }
        let parent = crate::sys::proc::read(&format!("{ancestor}/stat"))
            .ok()
            .and_then(|stat| crate::sys::stat_fields(&stat).nth(1)?.parse().ok());
        match parent {
            Some(p) if p > 0 => ancestor = p,
            _ => return false,
        }
    }
    false
}

type StartReply = mpsc::SyncSender<io::Result<Supervisor>>;

/// The thread that starts supervisors, one per host process (rebuilt in a
/// forked child). It never ends while the process lives.
static STARTER: PerProcess<mpsc::Sender<StartReply>> = PerProcess::new();

/// Why a supervisor could not start: the errno, and words a user can act on.
#[derive(Debug)]
pub(crate) struct StartFailed {
    pub errno: i32,
    message: String,
}

impl std::fmt::Display for StartFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StartFailed {}

fn explain(e: io::Error) -> io::Error {
    let noexec = std::fs::read_to_string("/proc/sys/vm/memfd_noexec")
        .map(|v| v.trim() == "2")
        .unwrap_or(false);
    let hint = match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) if noexec => {
            " (executable memfds are forbidden here: vm.memfd_noexec = 2; set it to 0 or 1)"
        }
        Some(libc::EACCES | libc::EPERM) => {
            " (executing it from a memfd was refused: a security policy such as SELinux may forbid it)"
        }
        _ => "",
    };
    io::Error::new(
        e.kind(),
        StartFailed {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            message: format!("cannot start the dsh supervisor: {e}{hint}"),
        },
    )
}

/// Starts a supervisor (on the `dsh-supervise` thread) and returns it.
fn start() -> io::Result<Supervisor> {
    let tx = STARTER.get(|| {
        let (tx, rx) = mpsc::channel::<StartReply>();
        std::thread::Builder::new()
            .name("dsh-supervise".into())
            .spawn(move || {
                for reply in rx {
                    let _ = reply.send(start_here().map_err(explain));
                }
            })
            .expect("cannot start the dsh-supervise thread");
        tx
    });
    let gone = || io::Error::other("the dsh-supervise thread is gone");
    let (reply, answer) = mpsc::sync_channel(1);
    tx.send(reply).map_err(|_| gone())?;
    answer.recv().map_err(|_| gone())?
}

/// An executor's supervisor: started on first use, replaced if it was
/// killed, shut down by `dispose()`.
#[derive(Default)]
pub(crate) struct Slot {
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    current: Option<Arc<Supervisor>>,
    closed: bool,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The supervisor, started if there is none yet.
    pub(crate) fn get(&self) -> io::Result<Arc<Supervisor>> {
        let mut state = self.lock();
        if state.closed {
            return Err(io::Error::other("the executor's supervisor is shut down"));
        }
        if let Some(s) = &state.current {
            return Ok(s.clone());
        }
        let fresh = Arc::new(start()?);
        state.current = Some(fresh.clone());
        Ok(fresh)
    }

    /// A new supervisor in place of `dead`, which could not be reached (it
    /// was killed); its commands are gone with it.
    pub(crate) fn renew(&self, dead: &Arc<Supervisor>) -> io::Result<Arc<Supervisor>> {
        {
            let mut state = self.lock();
            if state.current.as_ref().is_some_and(|s| Arc::ptr_eq(s, dead)) {
                state.current = None;
            }
        }
        self.get()
    }

    /// The supervisor's pid, if one runs.
    pub(crate) fn pid(&self) -> Option<libc::pid_t> {
        self.lock().current.as_ref().map(|s| s.pid())
    }

    /// Closes the slot for good and shuts its supervisor down.
    pub(crate) async fn shutdown(&self) {
        let current = {
            let mut state = self.lock();
            state.closed = true;
            state.current.take()
        };
        // Spawns hold a clone only for the length of a spawn, and none run
        // once the executor is disposing.
        if let Some(s) = current.and_then(|s| Arc::try_unwrap(s).ok()) {
            s.shutdown().await;
        }
    }
}

// The host's side of the protocol against the real supervisor.
#[cfg(test)]
#[path = "supervisor_tests.rs"]
mod tests;

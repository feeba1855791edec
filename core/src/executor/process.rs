//! A background process handle (docs/running.md): live status, consuming
//! reads, kill, and a completion that settles exactly once and never fails.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::host::callbacks;
use crate::host::forked;
use crate::host::latch::Latch;
use crate::host::runtime;
use crate::launch::ending::ExitFields;
use crate::spec::error::Result;
use crate::spec::limits::{LimitKind, LimitsEnforcement};
use crate::spec::sandbox::SandboxInfo;
use crate::sys::lock;
use crate::watch::stdin::{not_piped, Enqueued, StdinPipe, StdinWriter};
use crate::watch::supervise::{Stop, Streams};

/// Where a background process stands (docs/running.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Not settled, and no stop requested.
    Running,
    /// Settled: exited by itself (or its exit status was taken by someone
    /// else) with no stop requested.
    Completed,
    /// A stop was requested (at once, before it has exited), or it died from
    /// a signal, or it never started.
    Killed,
}

impl Status {
    /// `"running"`, `"completed"` or `"killed"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Killed => "killed",
        }
    }
}

/// What one `read_output` call returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessRead {
    /// Output since the previous read: stdout, then a marked stderr section.
    pub delta: String,
    /// Unread bytes slid out of the in-memory window before this read.
    pub lossy: bool,
    /// The file holding the complete stdout, once it outgrew its window.
    pub stdout_spill_path: Option<String>,
    /// The file holding the complete stderr, once it outgrew its window.
    pub stderr_spill_path: Option<String>,
    /// Why a stream that outgrew its window has no spill path (see
    /// [`CollectedOutput::spill_error`](crate::CollectedOutput)).
    pub stdout_spill_error: Option<String>,
    /// As `stdout_spill_error`, for stderr.
    pub stderr_spill_error: Option<String>,
}

pub(crate) struct State {
    pub status: Status,
    pub ending: ExitFields,
    pub sandbox: Option<SandboxInfo>,
    pub survivors: u32,
    /// The end has been recorded (`settle` ran).
    pub ended: bool,
    /// The supervision loop still acts on a stop request (see
    /// `Process::close_stops`).
    pub stoppable: bool,
}

impl State {
    pub(crate) fn running() -> Self {
        State {
            status: Status::Running,
            ending: ExitFields::default(),
            sandbox: None,
            survivors: 0,
            ended: false,
            stoppable: true,
        }
    }
}

pub use crate::host::latch::WaiterId;

pub(crate) struct ProcessInner {
    /// The host process that started it; a forked child cannot wait for it.
    pub host_pid: libc::pid_t,
    /// Set once, at registration: at `start`, or when a foreground run is
    /// handed over at its timeout.
    pub id: std::sync::OnceLock<String>,
    pub command: String,
    pub owner: Option<String>,
    pub state: Mutex<State>,
    /// Set when the process settles, after `state` has its end.
    pub settled: Latch,
    pub streams: Mutex<Streams>,
    /// Set once, by the first stop request.
    pub stop_tx: watch::Sender<Option<Stop>>,
    /// The writable stdin, when started with a stdin pipe.
    pub stdin: Option<StdinPipe>,
    /// A spawned program's tree (docs/spawn.md); `None` for commands.
    pub tree: Option<Tree>,
}

/// What a spawned program's handle knows of its tree: the leader's pid,
/// the tag every member inherits, and the tree's own end, which comes
/// after the leader's.
pub(crate) struct Tree {
    pub pid: LeaderPid,
    pub tag: String,
    pub grace: Duration,
    /// Set by the first `terminate`.
    pub terminating: std::sync::atomic::AtomicBool,
    /// Whether something watches for the tree's end yet.
    pub watched: std::sync::atomic::AtomicBool,
    /// Nothing of it was left at the leader's exit (the supervisor said
    /// so): over once the program settles, with no census. Set before the
    /// settlement; `gone` is set after it.
    pub over_at_exit: std::sync::atomic::AtomicBool,
    /// Set once no process carrying the tag is left.
    pub gone: Latch,
}

/// A spawned program's leader pid: known at once when the spawn waited for
/// the exec; otherwise read, on first need, from the pipe the supervisor
/// writes it to at the exec (`PidReport::Piped`), whose end of file says
/// it did not start.
pub(crate) struct LeaderPid {
    known: OnceLock<Option<libc::pid_t>>,
    pipe: Mutex<Option<OwnedFd>>,
}

impl LeaderPid {
    pub(crate) fn known(pid: libc::pid_t) -> LeaderPid {
        LeaderPid {
            known: OnceLock::from(Some(pid)),
            pipe: Mutex::new(None),
        }
    }

    pub(crate) fn piped(pipe: OwnedFd) -> LeaderPid {
        LeaderPid {
            known: OnceLock::new(),
            pipe: Mutex::new(Some(pipe)),
        }
    }

    /// The pid if it is known without waiting.
    pub(crate) fn now(&self) -> Option<libc::pid_t> {
        self.known.get().copied().flatten()
    }

    /// Settles what is known when the supervision ends, and lets the pipe
    /// go (a spawn holds no descriptor past its end): the supervisor wrote
    /// the pid before it reported the exit, or closed the pipe unwritten
    /// when it did not start. Nothing waiting there (a supervisor given up
    /// on while stopped) is no pid: it never said one.
    pub(crate) fn settle(&self) {
        let mut pipe = crate::sys::lock(&self.pipe);
        let Some(fd) = pipe.take() else { return };
        let mut ready = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the call; a zero timeout.
        let waiting = unsafe { libc::poll(&mut ready, 1, 0) } == 1;
        let pid = if waiting { read_pid(fd) } else { None };
        let _ = self.known.set(pid);
    }

    /// The pid, waiting for the exec if it has not come yet (as long as a
    /// spawn that waits for it would have); `None` when it did not start.
    pub(crate) fn get(&self) -> Option<libc::pid_t> {
        if let Some(pid) = self.known.get() {
            return *pid;
        }
        let mut pipe = crate::sys::lock(&self.pipe);
        *self.known.get_or_init(|| pipe.take().and_then(read_pid))
    }
}

/// Reads the pid the supervisor writes on a spawn's pid pipe: four bytes
/// at once by one write(2) (so whole), or nothing before the end of file.
/// The pipe is blocking.
fn read_pid(pipe: OwnedFd) -> Option<libc::pid_t> {
    let mut bytes = [0u8; 4];
    std::io::Read::read_exact(&mut std::fs::File::from(pipe), &mut bytes).ok()?;
    Some(libc::pid_t::from_ne_bytes(bytes)).filter(|&p| p > 0)
}

impl ProcessInner {
    pub(crate) fn id(&self) -> &str {
        self.id.get().map_or("", String::as_str)
    }
}

/// A cheap, cloneable handle to one background process.
#[derive(Clone)]
pub struct Process {
    pub(crate) shared: Arc<ProcessInner>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("Process")
            .field("id", &self.shared.id())
            .field("status", &s.status)
            .field("exit_code", &s.ending.exit_code)
            .field("signal", &s.ending.signal)
            .finish()
    }
}

/// `delta` (docs/running.md, "Reading output"): stdout part, then — only when the stderr part is
/// non-empty — a newline if the stdout part lacks one, `[stderr]\n`, stderr.
/// Public for a face that mirrors a process by offset (a remote client)
/// and must compose its reads exactly as a consuming read does.
pub fn compose_delta(stdout: String, stderr: &str) -> String {
    let mut delta = stdout;
    if !stderr.is_empty() {
        if !delta.is_empty() && !delta.ends_with('\n') {
            delta.push('\n');
        }
        delta.push_str("[stderr]\n");
        delta.push_str(stderr);
    }
    delta
}

impl Process {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// The registry id: `bash-1`, `bash-2`, …
    pub fn id(&self) -> &str {
        self.shared.id()
    }

    /// The command as started.
    pub fn command(&self) -> &str {
        &self.shared.command
    }

    /// The owner token of the request (never interpreted).
    pub fn owner(&self) -> Option<&str> {
        self.shared.owner.as_deref()
    }

    /// The live status: `Killed` as soon as a stop is requested.
    pub fn status(&self) -> Status {
        self.state().status
    }

    /// `None` while running and when ended by a signal.
    pub fn exit_code(&self) -> Option<i32> {
        self.state().ending.exit_code
    }

    /// The terminating signal's name (`SIGTERM`), when ended by one.
    pub fn signal(&self) -> Option<String> {
        self.state().ending.signal.clone()
    }

    /// True once a spawned program was stopped at its timeout
    /// ([`SpawnSpec::timeout_ms`](crate::SpawnSpec::timeout_ms)).
    pub fn timed_out(&self) -> bool {
        self.state().ending.timed_out
    }

    /// True when the process ended but nobody could say how (see
    /// [`RunResult::exit_status_unavailable`](crate::RunResult)):
    /// `exit_code` and `signal` are then both `None`, and the status is
    /// `completed` unless a stop was requested.
    pub fn exit_status_unavailable(&self) -> bool {
        self.state().ending.unavailable
    }

    /// Sandbox facts, stamped at settlement (absent while running and when
    /// the process ran unconfined without a policy).
    pub fn sandbox(&self) -> Option<SandboxInfo> {
        self.state().sandbox.clone()
    }

    /// After `kill()`, a cancellation or disposal: how many processes of its
    /// tree were still alive when the stop finished (see
    /// [`RunResult::survivors`](crate::RunResult)). 0 while running and
    /// when it ended by itself.
    pub fn survivors(&self) -> u32 {
        self.state().survivors
    }

    /// The limit that ended it, as the kernel reported it (see
    /// [`RunResult::limit`](crate::RunResult)); `None` while running.
    pub fn limit(&self) -> Option<LimitKind> {
        self.state().ending.limit
    }

    /// The mechanism of each limit it ran with (empty while running and
    /// when it had none).
    pub fn limits_enforcement(&self) -> LimitsEnforcement {
        self.state().ending.limits_enforcement
    }

    /// True once the process has settled (`done`).
    pub fn is_settled(&self) -> bool {
        // The end recorded under the same lock as the status: never a
        // final status on a process that says it has not settled.
        self.state().ended
    }

    /// Consuming read: what arrived since the previous call, never the same
    /// bytes twice; keeps working after exit.
    pub fn read_output(&self) -> ProcessRead {
        let settled = self.is_settled();
        let mut s = lock(&self.shared.streams);
        let (out, out_lossy) = s.stdout.take_unread();
        let (err, err_lossy) = s.stderr.take_unread();
        if settled && s.stdout.fully_read() && s.stderr.fully_read() {
            // The final output has been read: a settled process keeps no
            // window (up to 2 × max_output_bytes) for the rest of its life.
            s.stdout.release();
            s.stderr.release();
        }
        let (stdout_spill_path, stdout_spill_error) = s.stdout.spill();
        let (stderr_spill_path, stderr_spill_error) = s.stderr.spill();
        ProcessRead {
            delta: compose_delta(out, &err),
            lossy: out_lossy || err_lossy,
            stdout_spill_path,
            stderr_spill_path,
            stdout_spill_error,
            stderr_spill_error,
        }
    }

    /// Begins termination (SIGTERM, SIGKILL after the grace period). True when
    /// the process was running and this call began it; false otherwise.
    /// In a forked child, a process of the parent is not this process's to
    /// stop: false, nothing is done.
    pub fn kill(&self) -> bool {
        self.check_host().is_ok() && self.request_stop(Stop::Kill)
    }

    fn stdin_pipe(&self) -> Result<&StdinPipe> {
        self.check_host()?;
        self.shared.stdin.as_ref().ok_or_else(|| not_piped(self.id()))
    }

    /// True when it was started with a stdin pipe (`stdin_pipe`).
    pub fn has_stdin_pipe(&self) -> bool {
        self.shared.stdin.is_some()
    }

    /// Non-blocking write to the command's stdin: takes what fits in its
    /// buffer ([`STDIN_BUFFER_BYTES`](crate::STDIN_BUFFER_BYTES)) now and
    /// returns how many bytes that was: 0 when the buffer is full or an
    /// ordered write ([`Process::write_stdin`]) is waiting for its turn.
    /// [`DshError::StdinClosed`](crate::DshError::StdinClosed) when it has
    /// no stdin pipe, after `close_stdin`, and once the command exited or
    /// closed its stdin.
    pub fn try_write_stdin(&self, bytes: &[u8]) -> Result<usize> {
        self.stdin_pipe()?.try_write(self.id(), bytes)
    }

    /// One write made of several [`StdinWriter::try_write`] takes (a host's
    /// own blocking loop, as Python's `write_stdin`): from now until the
    /// writer is dropped it counts as one write, so a `close_stdin` made
    /// meanwhile waits for all of it. Errors as
    /// [`Process::try_write_stdin`].
    pub fn stdin_writer(&self) -> Result<StdinWriter<'_>> {
        self.stdin_pipe()?.writer(self.id())
    }

    /// Writes all of `bytes` to the command's stdin, waiting for room as
    /// the command reads (back-pressure): at most
    /// [`STDIN_BUFFER_BYTES`](crate::STDIN_BUFFER_BYTES) are buffered,
    /// however much is written. Writes complete in the order they were
    /// made and are never interleaved. Completes when every byte was taken
    /// (not when the command has read it). Errors as
    /// [`Process::try_write_stdin`]; dropping the future stops the write
    /// (bytes already taken stay taken).
    pub async fn write_stdin(&self, bytes: &[u8]) -> Result<()> {
        self.stdin_pipe()?.write_all(self.id(), bytes).await
    }

    /// [`Process::write_stdin`] for hosts with their own event loop:
    /// returns at once and calls `on_done` on the callback thread. Writes
    /// made this way are written in call order, each whole.
    pub fn write_stdin_with(&self, bytes: Vec<u8>, on_done: impl FnOnce(Result<()>) + Send + 'static) {
        let pipe = match self.stdin_pipe() {
            Ok(pipe) => pipe,
            Err(e) => return callbacks::dispatch(move || on_done(Err(e))),
        };
        match pipe.enqueue(self.id(), (bytes, Box::new(on_done))) {
            Enqueued::Taken(on_done, outcome) => return callbacks::dispatch(move || on_done(outcome)),
            Enqueued::Queued(false) => return, // the task writing the queue takes it in turn
            Enqueued::Queued(true) => {}
        }
        let process = self.clone();
        runtime::handle().spawn(async move {
            let Some(pipe) = process.shared.stdin.as_ref() else {
                return;
            };
            while let Some((bytes, on_done)) = pipe.next_queued() {
                let outcome = pipe.write_queued(process.id(), &bytes).await;
                callbacks::dispatch(move || on_done(outcome));
            }
        });
    }

    /// Blocks until a write to stdin would take at least one byte (or fail,
    /// the stdin having ended), or until `timeout` passes (`None`: no
    /// limit); returns whether it is writable. A zero timeout only looks.
    /// Refused where blocking is, as [`Process::wait_timeout`].
    pub fn wait_stdin_writable(&self, timeout: Option<Duration>) -> Result<bool> {
        self.stdin_pipe()?.wait_writable(timeout)
    }

    /// Closes the command's stdin once the bytes already written are
    /// delivered, so it reads EOF; later writes fail. True when this call
    /// closed it, false when it was already closed or ended.
    /// [`DshError::StdinClosed`](crate::DshError::StdinClosed) when it has
    /// no stdin pipe.
    pub fn close_stdin(&self) -> Result<bool> {
        Ok(self.stdin_pipe()?.close())
    }

    /// Bytes written to stdin and not yet taken by the pipe: never more than
    /// [`STDIN_BUFFER_BYTES`](crate::STDIN_BUFFER_BYTES).
    pub fn stdin_buffered(&self) -> usize {
        self.shared.stdin.as_ref().map_or(0, StdinPipe::buffered)
    }

    /// Frees what a forgotten process holds: its windows and spill files.
    pub(crate) fn discard_output(&self) {
        let mut guard = lock(&self.shared.streams);
        let streams = &mut *guard;
        for stream in [&mut streams.stdout, &mut streams.stderr] {
            stream.release();
            stream.discard_spill();
        }
    }

    pub(crate) fn request_stop(&self, reason: Stop) -> bool {
        {
            let mut s = self.state();
            if s.status != Status::Running || !s.stoppable {
                return false;
            }
            s.status = Status::Killed;
        }
        self.shared.stop_tx.send_replace(Some(reason));
        true
    }

    /// Called once the supervision loop has returned, with whether it acted
    /// on a stop: from now on `request_stop` refuses (its callers then take
    /// their own path). True when a stop was requested too late for the
    /// loop, which had already ended: the caller does what it asked.
    pub(crate) fn close_stops(&self, acted: bool) -> bool {
        let mut s = self.state();
        s.stoppable = false;
        // Before the settlement only `request_stop` makes it Killed (its
        // send may not have happened yet: the status says enough).
        !acted && s.status == Status::Killed
    }

    /// A stop was requested and the supervision loop will still act on it.
    pub(crate) fn stop_pending(&self) -> bool {
        let s = self.state();
        s.status == Status::Killed && s.stoppable && !s.ended
    }

    /// Completes when the process has settled. Never fails.
    pub async fn wait(&self) {
        self.shared.settled.wait().await
    }

    /// Refuses to wait in a forked child for a process of the parent: its
    /// supervisor lives in the parent, so it would never settle here.
    pub(crate) fn check_host(&self) -> Result<()> {
        forked::check_host(self.shared.host_pid)
    }

    /// Calls `f` on the callback thread once the process has settled (soon,
    /// if it already has); for hosts with their own loop. The returned id
    /// withdraws it ([`Process::cancel_when_settled`]), so a caller that
    /// stops waiting leaves nothing behind.
    pub fn when_settled(&self, f: impl FnOnce() + Send + 'static) -> Result<WaiterId> {
        self.check_host()?;
        Ok(WaiterId(self.shared.settled.when_set(f)))
    }

    /// Withdraws a `when_settled` callback that has not run; false if it
    /// already ran (or was queued to run) or was withdrawn.
    pub fn cancel_when_settled(&self, id: WaiterId) -> bool {
        self.shared.settled.withdraw(id.0)
    }

    /// Blocks until settled or until `timeout` passes (`None`: no limit).
    /// Returns whether it settled. Never blocks where blocking is refused
    /// (inside a callback or an async runtime): a settled process answers
    /// `true` there, a running one is
    /// [`DshError::BlockingInAsync`](crate::DshError::BlockingInAsync)
    /// unless `timeout` is zero. In a forked child, waiting for the parent's
    /// process is [`DshError::ForkedChild`](crate::DshError::ForkedChild).
    pub fn wait_timeout(&self, timeout: Option<Duration>) -> Result<bool> {
        if self.is_settled() {
            return Ok(true);
        }
        if !runtime::may_block(timeout, Some(self.shared.host_pid))? {
            return Ok(false);
        }
        Ok(self.shared.settled.wait_timeout(timeout))
    }

    /// Records the end exactly once. `status` stays `killed` if a stop was
    /// requested; any signal death is `killed` too. The process is settled
    /// (`done`, waits return) before any callback hears of it: `listeners`
    /// queues the task-done listeners, then the `when_settled` callbacks
    /// are queued, in that order.
    pub(crate) fn settle(
        &self,
        ending: ExitFields,
        sandbox: Option<SandboxInfo>,
        survivors: u32,
        listeners: impl FnOnce(&Process),
    ) {
        {
            let mut s = self.state();
            if s.ended {
                return;
            }
            if ending.signal.is_some() {
                s.status = Status::Killed;
            } else if s.status == Status::Running {
                s.status = Status::Completed;
            }
            s.ending = ending;
            s.sandbox = sandbox;
            s.survivors = survivors;
            s.ended = true;
        }
        {
            let mut streams = lock(&self.shared.streams);
            streams.stdout.shrink();
            streams.stderr.shrink();
        }
        self.shared.settled.set(|| listeners(self));
    }
}

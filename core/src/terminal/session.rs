//! A terminal session's task: it pumps the terminal's output and input,
//! waits for the leader's exit, stops the session on request (SIGHUP and
//! SIGTERM, SIGKILL after the grace period), drains what is left, and
//! releases the leader once it has been reaped.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::{sleep_until, Instant};

use crate::host::cancel::CancelToken;
use crate::host::forked;
use crate::host::runtime::{self, timer};
use crate::launch::ending::ExitFields;
use crate::launch::ending::ExitStatus;
use crate::launch::supervisor::Releaser;
use crate::launch::sweeper::{sweep, sweep_counted};
use crate::launch::tree::{LiveLeader, TagMatch};
use crate::launch::wire::Report;
use crate::launch::wire::ReportReader;
use crate::watch::escalation::Escalation;
use crate::watch::pipes::{watch as register, write_some};
use crate::watch::supervise::{read_exit, signal_tree, take_waiting_reports, Stop};

use super::*;

/// What [`start`] needs from the executor.
pub(crate) struct SessionParts {
    pub pid: libc::pid_t,
    pub report: OwnedFd,
    pub releaser: Releaser,
    pub master: OwnedFd,
    /// A copy of `master`, made before the spawn (so that nothing can fail
    /// once the program runs).
    pub control: OwnedFd,
    pub rdev: libc::dev_t,
    pub tag: String,
    pub grace: Duration,
    pub max_output_bytes: u64,
    /// Until the task returns, a dispose leaves the session's group to it
    /// (which hangs it up), also before the task first runs.
    pub live: LiveLeader,
}

/// A terminal session's task, not started yet (see
/// [`Executor::spawn_terminal_task`](crate::Executor::spawn_terminal_task)):
/// started on a host's own loop, which then reads and writes the terminal
/// on the host's thread, or on the core's threads ([`TerminalTask::start`]).
/// Dropped unstarted, it starts on the core's threads: a session is never
/// left unwatched.
pub struct TerminalTask {
    pub(crate) run: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// The master and the report pipe: what a host's loop watches for it.
    pub(crate) fds: [RawFd; 2],
    /// Stops the session (as `terminate` does) when its host lets go of it.
    pub(crate) on_drop: CancelToken,
    /// Set by a host's loop that must be told when the session waits to
    /// write (it wakes only for what it was asked to watch).
    pub(crate) wants_writable: WantsWritable,
}

/// What ties a session's task to the host that runs it: the stop when the
/// host lets go of it, and what the host must watch for it.
struct HostTies {
    on_drop: CancelToken,
    wants_writable: WantsWritable,
}

/// Told `true` while the session waits for room to write to the terminal,
/// `false` once it no longer does.
pub(crate) type WantsWritable = Arc<OnceLock<Box<dyn Fn(bool) + Send + Sync>>>;

impl std::fmt::Debug for TerminalTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalTask").field("fds", &self.fds).finish()
    }
}

impl TerminalTask {
    /// Starts the session's task on the core's threads.
    pub fn start(self) {
        drop(self)
    }
}

impl Drop for TerminalTask {
    /// Not started on a host's loop: started on the core's threads.
    fn drop(&mut self) {
        if let Some(run) = self.run.take() {
            runtime::handle().spawn(run);
        }
    }
}

/// The handle of a session and its task, for the caller to start; the
/// task ends the session when `disposing` completes, and `guard` lives as
/// long as it (dispose waits for it).
pub(crate) fn prepare<G: Send + 'static>(
    started: SessionParts,
    disposing: impl std::future::Future<Output = ()> + Send + 'static,
    guard: G,
) -> (Terminal, TerminalTask) {
    let (writes, write_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(SessionInner {
        host_pid: forked::current_pid(),
        pid: started.pid,
        tag: started.tag,
        grace: started.grace,
        control: Mutex::new(Some(started.control)),
        rdev: started.rdev,
        state: Mutex::new(State {
            ending: ExitFields::default(),
            finished: false,
            stopped: false,
            survivors: 0,
        }),
        exited: Latch::default(),
        finished_tx: watch::channel(false).0,
        output: Mutex::new(Output {
            bytes: VecDeque::new(),
            cap: usize::try_from(started.max_output_bytes)
                .unwrap_or(usize::MAX)
                .max(4),
            ended: false,
        }),
        output_cv: Condvar::new(),
        output_tx: watch::channel(0).0,
        output_news: Mutex::new(None),
        room: Notify::new(),
        writes,
        write_gate: Arc::new(Mutex::new(0)),
        stop_tx: watch::channel(None).0,
        terminated: tokio::sync::Mutex::new(None),
    });
    let terminal = Terminal { shared };
    let task = terminal.clone();
    let (master, report, releaser, live) = (started.master, started.report, started.releaser, started.live);
    let fds = [master.as_raw_fd(), report.as_raw_fd()];
    let on_drop = CancelToken::new();
    let wants_writable = WantsWritable::default();
    let host = HostTies {
        on_drop: on_drop.clone(),
        wants_writable: wants_writable.clone(),
    };
    let run = async move {
        let (_guard, _live) = (guard, live);
        task.run(master, report, releaser, write_rx, disposing, host)
            .await;
    };
    let task = TerminalTask {
        run: Some(Box::pin(run)),
        fds,
        on_drop,
        wants_writable,
    };
    (terminal, task)
}

enum Event {
    Read(io::Result<usize>),
    Room,
    Write(Option<WriteRequest>),
    /// Progress on the write at hand: `true` once it is done.
    Wrote(io::Result<bool>),
    Exited(ExitStatus),
    Stop(Stop),
    KillNow,
    DrainOver,
    /// The leader has not exited long after its SIGKILL: stuck.
    GiveUp,
}

/// Writes some of the write at hand, or takes its next piece from its
/// caller; `Ok(true)` once it is all written (the last piece taken, or its
/// caller gone). Cancel-safe: the request changes only after a step
/// completed.
async fn advance(master: &AsyncFd<OwnedFd>, request: Option<&mut WriteRequest>) -> io::Result<bool> {
    let Some(request) = request else {
        return std::future::pending().await;
    };
    loop {
        if !request.rest().is_empty() {
            let n = write_some(master, request.rest()).await?;
            request.at += n;
            return Ok(request.rest().is_empty() && request.more.is_none());
        }
        let Some(more) = request.more.as_mut() else {
            return Ok(true);
        };
        match more.recv().await {
            Some(piece) => {
                request.held = piece;
                request.at = 0;
            }
            None => return Ok(true),
        }
    }
}

/// Reads what is available into the output (at most its room), or with
/// `keep` false reads it only to drop it.
async fn read_some(
    fd: &AsyncFd<OwnedFd>,
    shared: &SessionInner,
    buf: &mut [u8],
    keep: bool,
) -> io::Result<usize> {
    loop {
        let mut guard = fd.readable().await?;
        match guard.try_io(|fd| read_into(fd.as_raw_fd(), shared, buf, keep)) {
            Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
            Ok(r) => return r,
            Err(_would_block) => continue,
        }
    }
}

/// One read of the master into the output (at most `buf`'s length), or
/// dropped with `keep` false.
fn read_into(fd: RawFd, shared: &SessionInner, buf: &mut [u8], keep: bool) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    if n > 0 && keep {
        lock(&shared.output).bytes.extend(&buf[..n]);
        shared.output_changed();
    }
    Ok(n)
}

/// Reads what already waits on the master without the reactor, while the
/// output has room; true when the terminal has hung up (nobody holds it).
/// A session on a host's loop whose stop or drain is answered by a core
/// thread would otherwise leave the program's last output (a TERM trap's)
/// unread, its readiness never handed out by a busy host.
fn read_waiting(fd: &AsyncFd<OwnedFd>, shared: &SessionInner, buf: &mut [u8]) -> bool {
    loop {
        let room = lock(&shared.output).room().min(buf.len());
        if room == 0 {
            return false;
        }
        match read_into(fd.as_raw_fd(), shared, &mut buf[..room], true) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return e.kind() != io::ErrorKind::WouldBlock,
        }
    }
}

/// The leader's exit if its report already waits on the pipe, read
/// without the reactor (see `take_waiting_reports`), as the event that
/// handles it.
fn exit_waiting(
    fd: &AsyncFd<OwnedFd>,
    reader: &mut ReportReader,
    pid: libc::pid_t,
    lost: &mut bool,
) -> Option<Event> {
    let report = take_waiting_reports(fd, reader, &mut Some(pid), lost)?;
    Some(Event::Exited(match report {
        Report::Exited { status, .. } => status,
        _ => ExitStatus::Unavailable,
    }))
}

impl Terminal {
    /// Signals the session: a hangup (what closing a terminal sends) and
    /// SIGTERM, or SIGKILL.
    fn signal_session(&self, lost: bool, sig: libc::c_int, with_sweep: bool) {
        let (pid, tag) = (self.shared.pid, self.shared.tag.as_str());
        let sigs: &[libc::c_int] = if sig == libc::SIGKILL {
            &[libc::SIGKILL]
        } else {
            &[libc::SIGHUP, libc::SIGTERM]
        };
        for &s in sigs {
            if lost {
                sweep(TagMatch::command(tag), s);
            } else {
                signal_tree(pid, tag, s, with_sweep);
            }
        }
    }

    fn on_exit(&self, status: ExitStatus) {
        self.state().ending = ExitFields::from(status);
        self.shared.exited.set(|| {});
    }

    /// The session's life: pump output and input, wait for the leader's
    /// exit, stop it on request, then release it.
    async fn run(
        self,
        master: OwnedFd,
        report_fd: OwnedFd,
        releaser: Releaser,
        mut write_rx: mpsc::UnboundedReceiver<WriteRequest>,
        disposing: impl std::future::Future<Output = ()>,
        host: HostTies,
    ) {
        let HostTies {
            on_drop,
            wants_writable,
        } = host;
        let pid = self.shared.pid;
        let tag = self.shared.tag.clone();
        let grace = self.shared.grace;
        let master = register(master, Interest::READABLE | Interest::WRITABLE);
        // SAFETY: as in pipes::watch.
        let report = unsafe { AsyncFd::register_with_interest(report_fd, Interest::READABLE) };
        let (master, report_fd) = match (master, report) {
            (Ok(m), Ok(r)) => (m, r),
            (_, report) => {
                // Cannot be watched: killed and released here.
                let fd = match report {
                    Ok(r) => r.into_inner(),
                    Err(e) => e.into_parts().0,
                };
                signal_tree(pid, &tag, libc::SIGKILL, true);
                ReportReader::default().wait(fd.as_raw_fd(), |_| {});
                releaser.release(Some(pid), fd);
                self.on_exit(ExitStatus::Unavailable);
                self.finish(0, false);
                return;
            }
        };
        let mut report = ReportReader::default();
        let mut lost = false;
        let mut open = true;
        let mut exited = false;
        let mut escalation = Escalation::default();
        let mut given_up = false;
        // An exit read outside the select (see `take_waiting_reports`): handled next.
        let mut unhandled: Option<Event> = None;
        let mut drain_until: Option<Instant> = None;
        let mut current: Option<WriteRequest> = None;
        let never = Instant::now() + Duration::from_secs(100 * 365 * 86_400);
        let mut buf = vec![0u8; CHUNK];
        let mut stop_rx = self.shared.stop_tx.subscribe();
        let stop = async {
            tokio::select! {
                r = stop_rx.wait_for(|s| s.is_some()) => r.ok().and_then(|s| *s).unwrap_or(Stop::Kill),
                _ = on_drop.cancelled() => Stop::Kill,
                _ = disposing => Stop::Dispose,
            }
        };
        tokio::pin!(stop);
        // Whether the host's loop was last told the session waits to write.
        let mut waits_to_write = false;
        while !exited || open {
            if waits_to_write != current.is_some() {
                waits_to_write = current.is_some();
                if let Some(wants) = wants_writable.get() {
                    wants(waits_to_write);
                }
            }
            let room = lock(&self.shared.output).room();
            // Terminated with its output full and unread: what the terminal
            // still holds is read and dropped (docs/terminals.md), so that
            // its hang-up is seen without waiting for a reader.
            let dropping = room == 0 && escalation.stopped().is_some();
            if exited && drain_until.is_none() && (room > 0 || escalation.stopped().is_some()) {
                drain_until = Some(Instant::now() + grace);
            }
            let event = if let Some(event) = unhandled.take() {
                event
            } else {
                tokio::select! {
                biased;
                s = &mut stop, if escalation.stopped().is_none() => Event::Stop(s),
                _ = timer(|| sleep_until(escalation.kill_due().unwrap_or(never))), if escalation.kill_due().is_some() => Event::KillNow,
                s = read_exit(&report_fd, &mut report), if !exited => Event::Exited(s),
                r = read_some(&master, &self.shared, &mut buf[..if dropping { CHUNK } else { room.min(CHUNK) }], !dropping), if open && (room > 0 || dropping) => Event::Read(r),
                _ = self.shared.room.notified(), if open && room == 0 && !dropping => Event::Room,
                r = advance(&master, current.as_mut()), if current.is_some() => Event::Wrote(r),
                w = write_rx.recv(), if current.is_none() && !exited => Event::Write(w),
                _ = timer(|| sleep_until(drain_until.unwrap_or(never))), if drain_until.is_some() => Event::DrainOver,
                _ = timer(|| sleep_until(escalation.give_up_at().unwrap_or(never))), if !exited && escalation.give_up_at().is_some() => Event::GiveUp,
                }
            };
            match event {
                Event::Read(Ok(n)) if n > 0 => {}
                // EIO: nobody holds the terminal any more.
                Event::Read(_) => open = false,
                Event::Room => {}
                Event::Write(Some(request)) => current = Some(request),
                Event::Write(None) => {}
                Event::Wrote(Ok(false)) => {}
                Event::Wrote(Ok(true)) => {
                    if let Some(request) = current.take() {
                        let _ = request.reply.send(Ok(()));
                    }
                }
                Event::Wrote(Err(e)) => {
                    if let Some(request) = current.take() {
                        let _ = request
                            .reply
                            .send(Err(closed(&format!("cannot write to the terminal: {e}"))));
                    }
                }
                Event::Exited(s) => {
                    if s == ExitStatus::Unavailable {
                        lost = true;
                        sweep(TagMatch::command(&tag), libc::SIGKILL);
                    }
                    exited = true;
                    self.on_exit(s);
                    drain_until = Some(Instant::now() + grace);
                    // What the program left, and the hangup, read now: a
                    // busy host's loop may not hand their readiness out
                    // before the drain's end.
                    if open && read_waiting(&master, &self.shared, &mut buf) {
                        open = false;
                    }
                    if let Some(request) = current.take() {
                        let _ = request.reply.send(Err(input_gone()));
                    }
                    write_rx.close();
                    while let Ok(request) = write_rx.try_recv() {
                        let _ = request.reply.send(Err(input_gone()));
                    }
                }
                Event::Stop(reason) => {
                    escalation.begin(reason, grace);
                    // An exit already reported happened before this stop
                    // (a host's loop may not have handed it out yet).
                    if !exited && unhandled.is_none() {
                        unhandled = exit_waiting(&report_fd, &mut report, pid, &mut lost);
                    }
                    self.signal_session(lost, libc::SIGTERM, reason != Stop::Dispose);
                }
                Event::KillNow => {
                    if !exited && unhandled.is_none() {
                        unhandled = exit_waiting(&report_fd, &mut report, pid, &mut lost);
                    }
                    escalation.killed();
                    self.signal_session(lost, libc::SIGKILL, escalation.stopped() != Some(Stop::Dispose));
                }
                // While the unread output is full, the session does not read
                // the terminal: what the program left in it waits for the
                // reader, and the grace counts again once there is room.
                Event::DrainOver if room == 0 && escalation.stopped().is_none() => drain_until = None,
                Event::DrainOver => {
                    if open {
                        read_waiting(&master, &self.shared, &mut buf);
                    }
                    break;
                }
                Event::GiveUp => {
                    // The exit may wait for a busy host's loop to hand it
                    // out (this poll is a core thread's): handled next.
                    if unhandled.is_none() {
                        unhandled = exit_waiting(&report_fd, &mut report, pid, &mut lost);
                        if unhandled.is_some() {
                            continue;
                        }
                    }
                    // Stuck: the session ends without its exit status; the
                    // leader is counted in `survivors`.
                    given_up = true;
                    self.on_exit(ExitStatus::Unavailable);
                    break;
                }
            }
        }
        lock(&self.shared.output).ended = true;
        self.shared.output_changed();
        let survivors = if lost {
            sweep_counted(TagMatch::command(&tag), libc::SIGKILL).await.last as u32
        } else {
            escalation.finish(pid, &tag).await
        };
        let reaped = Some(pid).filter(|_| !given_up);
        crate::watch::supervise::release_reaped(releaser, reaped, report_fd, &mut report).await;
        drop(master);
        self.finish(survivors, escalation.stopped().is_some());
    }

    fn finish(&self, survivors: u32, stopped: bool) {
        {
            let mut s = self.state();
            s.finished = true;
            s.stopped = stopped;
            s.survivors = survivors;
        }
        // The last copy of the master: the terminal hangs up.
        drop(lock(&self.shared.control).take());
        lock(&self.shared.output).ended = true;
        self.shared.output_changed();
        self.shared.finished_tx.send_replace(true);
    }
}

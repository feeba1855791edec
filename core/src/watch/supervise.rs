//! The life of one started command, shared by `run` and `start`: pump its
//! pipes, feed its stdin, wait for the supervisor's report of its exit, and
//! on a timeout or a stop request terminate its tree (SIGTERM, then SIGKILL
//! after the grace period).

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::time::Instant;

use crate::host::runtime::timer;
use crate::launch::ending::ExitStatus;
use crate::launch::spawn::LaunchedCommand;
use crate::launch::sweeper::{sweep, sweep_counted};
use crate::launch::tree::{continued_after, signal_group, Spare, TagMatch};
use crate::launch::wire::{Report, ReportReader};
use crate::spec::error::DshError;
use crate::sys::lock;
use crate::watch::escalation::Escalation;
pub(crate) use crate::watch::escalation::{tree, Stop};
use crate::watch::limit_events::LimitEvents;
use crate::watch::output::{feed, OutputStream, OutputValve};
use crate::watch::pipes::{pump, read_chunk, read_waiting, watch, write_chunk};
use crate::watch::stdin::{PipeWork, StdinEnd, StdinPipe};

/// Output read between two yields of the supervision: a command that
/// writes as fast as it is read never leaves the pipe empty, and without
/// them its reading would hold the thread that polls it, a Node host's JS
/// thread for a run on its loop (half a second and more with a large
/// spill file), or a core thread's other tasks.
const YIELD_EVERY: usize = 1 << 20;

/// How often a running command's cgroup counters are read when the kernel
/// cannot be asked to announce a change (see `limit_events.rs`).
const LIMIT_TICK: Duration = Duration::from_millis(50);
/// How often they are read anyway when it was asked: a backstop.
const LIMIT_BACKSTOP: Duration = Duration::from_secs(1);

pub(crate) use crate::watch::output::Streams;

pub(crate) struct Outcome {
    pub status: ExitStatus,
    pub stop: Option<Stop>,
    /// After a stop: processes of the tree still alive when it finished
    /// (after the final SIGKILL sweep). 0 when nothing was stopped.
    pub survivors: u32,
    /// The command's cgroups, for the facts and then removal.
    pub group: Option<crate::confine::governor::CommandGroup>,
    /// It ran in its read-only mounts (the facts' `metadata`).
    pub read_only_mounts: bool,
    /// The leader's own CPU time when it died of a signal, read while it
    /// was still unreaped: the fact behind a CPU-limit signal.
    pub leader_cpu: Option<Duration>,
    /// Nothing of its tree was left at the leader's exit: over for good.
    pub tree_empty: bool,
}

/// Signals the command's tree, each process once: the group (the leader
/// is never reaped before this, so its id cannot have been reused), and
/// with `with_sweep` the processes of the tree that left the group.
pub(crate) fn signal_tree(pid: libc::pid_t, tag: &str, sig: libc::c_int, with_sweep: bool) {
    if !signal_group(pid, sig) {
        // SAFETY: kill(2) takes integers; `pid` is the leader, unreaped
        // until it is released, so the id is still its.
        if unsafe { libc::kill(pid, sig) } == 0 && continued_after(sig) {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }
    if with_sweep {
        sweep(tree(pid, tag).sparing(Spare::Group(pid)), sig);
    }
}

/// Kills a command that cannot be watched, waits (blocking) for its
/// leader's exit, and releases it: its tag at once, its group when its pid
/// comes.
fn kill_unwatched(report_fd: OwnedFd, releaser: crate::launch::supervisor::Releaser, tag: &str) {
    sweep(TagMatch::command(tag), libc::SIGKILL);
    let mut pid = None;
    let end = ReportReader::default().wait(report_fd.as_raw_fd(), |p| {
        pid = Some(p);
        signal_tree(p, tag, libc::SIGKILL, true);
    });
    releaser.release(pid.filter(|_| !reaped(&end)), report_fd);
}

/// What the command's stdin is fed from.
#[derive(Clone, Copy)]
pub(crate) enum StdinSource<'a> {
    /// `/dev/null`, or bytes written then closed (empty: closed at once).
    Bytes(Option<&'a [u8]>),
    /// A pipe the caller writes to while it runs (`stdin_pipe`).
    Pipe(&'a StdinPipe),
}

/// A foreground run whose timeout hands the command over instead of
/// stopping it: called once at the timeout; true when it was handed over
/// (supervision then goes on without a timeout), false to stop it as
/// usual.
pub(crate) type Handover<'a> = &'a mut (dyn FnMut() -> bool + Send);

enum Event {
    Stdout(io::Result<usize>),
    Stderr(io::Result<usize>),
    Stdin(io::Result<usize>),
    Pipe(PipeWork),
    Report(Report),
    Stop(Stop),
    KillNow,
    DrainOver,
    Tick,
    /// The leader has not exited long after its SIGKILL: stuck.
    GiveUp,
}

/// Reads the next message of the supervisor's report pipe.
pub(crate) async fn read_report(fd: &AsyncFd<OwnedFd>, reader: &mut ReportReader) -> Report {
    loop {
        let Ok(mut guard) = fd.readable().await else {
            return reader.wait(fd.as_raw_fd(), |_| {});
        };
        match guard.try_io(|fd| reader.read(fd.as_raw_fd())) {
            Ok(Ok(report)) => return report,
            Ok(Err(_)) => return Report::Ended,
            Err(_would_block) => continue,
        }
    }
}

/// The exit of a leader reaped at once (FLAG_REAP_EMPTY: its tree is over for
/// good): nothing is signalled or released after it, its pid may be reused.
fn reaped(report: &Report) -> bool {
    matches!(report, Report::Exited { reaped: true, .. })
}

/// Whether that exit was handled, or waits to be: the pid is not ours.
fn leader_gone(handled: bool, waiting: &Option<Report>) -> bool {
    handled || waiting.as_ref().is_some_and(reaped)
}

/// How long a settle waits for the supervisor to confirm the reap of a released
/// leader: microseconds, bounded for one that cannot answer (stopped, too busy).
pub(crate) const REAP_WAIT: Duration = Duration::from_secs(2);

/// Releases an exited leader and waits until the supervisor has reaped it
/// (it closes the report pipe right after the reap), at most [`REAP_WAIT`]:
/// whoever hears of the settlement next may rely on the pid being free
/// (`kill(pid, 0)` is ESRCH), as a harness checks that a cancelled hook was
/// reaped. Nothing may signal the leader's pid or group after this.
pub(crate) async fn release_reaped(
    releaser: crate::launch::supervisor::Releaser,
    pid: Option<libc::pid_t>,
    report_fd: AsyncFd<OwnedFd>,
    reader: &mut ReportReader,
) {
    // `None`: no pid came, or the leader was reaped at its exit (`reaped`),
    // when a release could free another leader that has its pid now.
    releaser.announce(pid);
    if pid.is_some() {
        let reaped = async { while !matches!(read_report(&report_fd, reader).await, Report::Ended) {} };
        let _ = timer(|| tokio::time::timeout(REAP_WAIT, reaped)).await;
    }
    releaser.release(None, report_fd.into_inner());
}

/// Whether a stop that comes after the leader's own exit is not what ended
/// the run (docs/running.md: `timed_out` and `aborted` say which came
/// first): the timeout and the caller's cancellation. Not dispose, whose
/// signals come from outside and cause the exit they race with.
fn moot_after_an_exit(stop: Stop) -> bool {
    matches!(stop, Stop::Cancel | Stop::Timeout)
}

/// Why a stdin pipe that met EPIPE ended: the leader `pid` (unreaped, so
/// still its) exiting closed it, or the command closed it and runs on.
fn why_stdin_broke(pid: libc::pid_t) -> StdinEnd {
    if crate::sys::process_exiting(pid) {
        StdinEnd::Exited
    } else {
        StdinEnd::Broken
    }
}

/// The reports already waiting on the pipe, read without the reactor: a
/// run on a host's loop is polled by a core thread when its timer fires,
/// while the pipe's readiness is the host's to dispatch, and a busy host
/// would hold back the leader's pid (and with it the SIGTERM of a stop)
/// until the SIGKILL. The pid is taken; the first other report is returned,
/// to be handled next; a supervisor found gone sets `lost` (its leader's
/// pid is then no longer held for us: only tag sweeps are safe).
pub(crate) fn take_waiting_reports(
    fd: &AsyncFd<OwnedFd>,
    reader: &mut ReportReader,
    pid: &mut Option<libc::pid_t>,
    lost: &mut bool,
) -> Option<Report> {
    while let Ok(report) = reader.read(fd.as_raw_fd()) {
        match report {
            Report::Spawned(p) => *pid = Some(p),
            other => {
                *lost |= matches!(other, Report::Ended);
                return Some(other);
            }
        }
    }
    None
}

/// Reads the supervisor's report of the leader's exit, for a leader whose
/// pid is known already (a terminal session's).
pub(crate) async fn read_exit(fd: &AsyncFd<OwnedFd>, reader: &mut ReportReader) -> ExitStatus {
    loop {
        match read_report(fd, reader).await {
            Report::Spawned(_) => continue,
            Report::Exited { status, .. } => return status,
            Report::Failed(_) | Report::Ended => return ExitStatus::Unavailable,
        }
    }
}

/// Why a command could not be supervised to its end.
#[derive(Debug)]
pub(crate) enum SuperviseError {
    /// It started but could not be watched: it was killed and released.
    Unwatchable(io::Error),
    /// It never started (the supervisor says so after the request: see
    /// [`Launched`](crate::launch::supervisor::Launched)); nothing runs.
    NotStarted(DshError),
}

impl From<SuperviseError> for DshError {
    fn from(e: SuperviseError) -> DshError {
        match e {
            SuperviseError::Unwatchable(e) => DshError::Internal(format!(
                "the command started but could not be supervised ({e}); it was killed"
            )),
            SuperviseError::NotStarted(e) => e,
        }
    }
}

/// Signals the tree of the leader `pid`, or, while its pid has not come,
/// everything carrying the command's tag (the group and the session,
/// which need the pid, follow when it comes: see `deferred`).
fn signal_known(pid: Option<libc::pid_t>, tag: &str, sig: libc::c_int, with_sweep: bool) {
    match pid {
        Some(pid) => signal_tree(pid, tag, sig, with_sweep),
        None => sweep(TagMatch::command(tag), sig),
    }
}

/// Supervises `spawned` until its leader has exited and its pipes closed (or
/// `grace` passed since the exit), then releases it to the supervisor,
/// which reaps it. The leader stays an unreaped zombie until then, so
/// signalling its group can never hit a recycled process group id. Fails
/// only when the command cannot be watched at all; it is then killed and
/// released before this returns.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn supervise(
    spawned: LaunchedCommand,
    tag: &str,
    stdin: StdinSource<'_>,
    streams: &Mutex<Streams>,
    timeout: Option<Duration>,
    mut handover: Option<Handover<'_>>,
    grace: Duration,
    stop: impl Future<Output = Stop>,
) -> Result<Outcome, SuperviseError> {
    let pipe = match stdin {
        StdinSource::Pipe(p) => Some(p),
        StdinSource::Bytes(_) => None,
    };
    let outcome = supervise_inner(spawned, tag, stdin, streams, timeout, &mut handover, grace, stop).await;
    // However it ended, the stdin takes nothing more.
    if let Some(p) = pipe {
        p.end(StdinEnd::Exited);
    }
    outcome
}

#[allow(clippy::too_many_arguments)]
async fn supervise_inner(
    spawned: LaunchedCommand,
    tag: &str,
    stdin: StdinSource<'_>,
    streams: &Mutex<Streams>,
    timeout: Option<Duration>,
    handover: &mut Option<Handover<'_>>,
    grace: Duration,
    stop: impl Future<Output = Stop>,
) -> Result<Outcome, SuperviseError> {
    let LaunchedCommand {
        report: report_fd,
        releaser,
        pid: known_pid,
        pid_pipe: _,
        stdin: stdin_fd,
        stdout,
        stderr,
        handed: _,
        group,
        start,
        read_only_mounts,
        // Until this returns, dispose leaves the leader's group to this
        // loop (claimed at the launch, marked with the pid when it comes).
        mut live,
    } = spawned;
    // The leader's pid: it comes on the report pipe, late (see `Launched`),
    // unless the launch waited for it.
    let mut pid: Option<libc::pid_t> = known_pid;
    // A signal for the leader's group, held until its pid comes.
    let mut deferred: Option<(libc::c_int, bool)> = None;
    // A stdin write met EPIPE before the leader's pid came.
    let mut stdin_broke = false;
    let registered = (|| {
        Ok::<_, io::Error>((
            stdout.map(|fd| watch(fd, Interest::READABLE)).transpose()?,
            stderr.map(|fd| watch(fd, Interest::READABLE)).transpose()?,
            stdin_fd.map(|fd| watch(fd, Interest::WRITABLE)).transpose()?,
        ))
    })();
    let (out, err, mut stdin_fd) = match registered {
        Ok(fds) => fds,
        Err(e) => {
            // Cannot watch it, so do not leave it running.
            kill_unwatched(report_fd, releaser, tag);
            return Err(SuperviseError::Unwatchable(e));
        }
    };
    // Registered last: on failure the pipes above are already owned (and
    // closed on return), and the leader must still be killed and released.
    // SAFETY: as in `watch`.
    let report_fd = match unsafe { AsyncFd::register_with_interest(report_fd, Interest::READABLE) } {
        Ok(fd) => fd,
        Err(e) => {
            let (report_fd, e) = e.into_parts();
            kill_unwatched(report_fd, releaser, tag);
            return Err(SuperviseError::Unwatchable(e));
        }
    };
    let mut report = ReportReader::default();
    let mut status = ExitStatus::Unavailable;
    // The supervisor was killed: the leader's pid and group are no longer
    // held for us, so only pid-safe tag sweeps may signal the tree.
    let mut lost = false;
    // The leader's reaped exit was handled (see `reaped`); its tree was empty.
    let (mut leader_reaped, mut tree_empty) = (false, false);
    let (stdin, pipe) = match stdin {
        StdinSource::Bytes(b) => (b.unwrap_or(&[]), None),
        StdinSource::Pipe(p) => (&[][..], Some(p)),
    };
    let mut stdin_pos = 0;
    if stdin.is_empty() && pipe.is_none() {
        stdin_fd = None;
    }
    let mut timeout_at = timeout.map(|t| Instant::now() + t);

    // A stream not read here (handed to the caller, or inherited) has
    // nothing to wait for.
    let (mut out_open, mut err_open, mut exited) = (out.is_some(), err.is_some(), false);
    let mut escalation = Escalation::default();
    // The leader had exited on its own when the stop came: a late
    // cancellation still ends what is left, but is not the run's cause.
    let mut stop_after_exit = false;
    // The leader did not exit after its SIGKILL (see KILL_GIVE_UP).
    let mut given_up = false;
    let mut drain_until: Option<Instant> = None;
    // A reached cgroup limit does not end a tree by itself (a refused fork
    // leaves shells retrying, a v1 OOM holds a process): its counters are
    // read when the kernel announces a change, and the tree ended when one
    // moved; every LIMIT_TICK instead where it cannot announce.
    let limit_events = group.as_ref().and_then(|g| {
        let (files, oom_group) = g.event_sources()?;
        LimitEvents::new(&files, oom_group).ok()
    });
    let period = if limit_events.is_some() {
        LIMIT_BACKSTOP
    } else {
        LIMIT_TICK
    };
    let mut limit_tick = timer(|| tokio::time::interval(period));
    limit_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let never = Instant::now() + Duration::from_secs(100 * 365 * 86_400);
    tokio::pin!(stop);

    // A report read outside the select (see `take_waiting_reports`): handled next.
    let mut unhandled: Option<Report> = None;

    let mut marked = pid.is_some();
    let mut read_since_yield = 0;
    while !(exited && !out_open && !err_open) {
        if let (false, Some(p)) = (marked, pid) {
            live.mark(p);
            marked = true;
        }
        // A streamed run's reader may hold the output back while the
        // command runs; never once it exited or is being stopped.
        let valve = lock(streams).valve.clone();
        let held = !exited && escalation.stopped().is_none() && valve.as_ref().is_some_and(|v| v.is_shut());
        let event = if let Some(r) = unhandled.take() {
            Event::Report(r)
        } else {
            tokio::select! {
            // Biased, stop requests first: a stop that caused the exit (dispose
            // signals the tree from outside) is seen before the exit it caused.
            biased;
            s = &mut stop, if escalation.stopped().is_none() => Event::Stop(s),
            _ = limit_tick.tick(), if group.is_some() && escalation.stopped().is_none() => match group.as_ref().and_then(|g| g.reached()) {
                Some(kind) => Event::Stop(Stop::Limit(kind)),
                None => Event::Tick,
            },
            _ = LimitEvents::changed(limit_events.as_ref()), if escalation.stopped().is_none() => match group.as_ref().and_then(|g| g.reached()) {
                Some(kind) => Event::Stop(Stop::Limit(kind)),
                None => Event::Tick,
            },
            _ = timer(|| tokio::time::sleep_until(timeout_at.unwrap_or(never))), if timeout_at.is_some() && escalation.stopped().is_none() && !exited => Event::Stop(Stop::Timeout),
            _ = timer(|| tokio::time::sleep_until(escalation.kill_due().unwrap_or(never))), if escalation.kill_due().is_some() => Event::KillNow,
            r = read_chunk(out.as_ref(), |b| feed(streams, OutputStream::Stdout, b)), if out_open && !held => Event::Stdout(r),
            r = read_chunk(err.as_ref(), |b| feed(streams, OutputStream::Stderr, b)), if err_open && !held => Event::Stderr(r),
            _ = OutputValve::opened(valve.as_deref()), if held => Event::Tick,
            r = write_chunk(stdin_fd.as_ref(), &stdin[stdin_pos..]), if stdin_fd.is_some() && pipe.is_none() => Event::Stdin(r),
            w = pump(pipe, stdin_fd.as_ref()), if stdin_fd.is_some() && pipe.is_some() => Event::Pipe(w),
            r = read_report(&report_fd, &mut report), if !exited => Event::Report(r),
            _ = timer(|| tokio::time::sleep_until(drain_until.unwrap_or(never))), if drain_until.is_some() => Event::DrainOver,
            _ = timer(|| tokio::time::sleep_until(escalation.give_up_at().unwrap_or(never))), if !exited && escalation.give_up_at().is_some() => Event::GiveUp,
            }
        };
        if let Event::Stdout(Ok(n)) | Event::Stderr(Ok(n)) = event {
            read_since_yield += n;
            if read_since_yield >= YIELD_EVERY {
                read_since_yield = 0;
                tokio::task::yield_now().await;
            }
        }
        match event {
            Event::Stdout(Ok(n)) if n > 0 => {}
            Event::Stdout(_) => {
                out_open = false;
                lock(streams).stdout.close();
            }
            Event::Stderr(Ok(n)) if n > 0 => {}
            Event::Stderr(_) => {
                err_open = false;
                lock(streams).stderr.close();
            }
            Event::Stdin(Ok(n)) => {
                stdin_pos += n;
                if stdin_pos >= stdin.len() {
                    stdin_fd = None; // EOF for the command
                }
            }
            // EPIPE: the command stopped reading, which is its business.
            Event::Stdin(Err(_)) => stdin_fd = None,
            Event::Pipe(PipeWork::Wrote) => {}
            Event::Pipe(PipeWork::Close) => {
                stdin_fd = None; // EOF for the command
                if let Some(p) = pipe {
                    p.end(StdinEnd::Closed);
                }
            }
            Event::Pipe(PipeWork::Failed) => {
                // EPIPE: the command closed its stdin, or its leader's exit
                // closed it; told apart by the leader, once its pid is known.
                stdin_fd = None;
                if let Some(p) = pipe {
                    match pid {
                        Some(leader) => p.end(why_stdin_broke(leader)),
                        None => stdin_broke = true,
                    }
                }
            }
            Event::Report(Report::Spawned(p)) => {
                pid = Some(p);
                // An exit that came with the pid may be a reaped one: taken
                // before anything (a stop, a stdin error) uses the pid.
                if unhandled.is_none() {
                    unhandled = take_waiting_reports(&report_fd, &mut report, &mut pid, &mut lost);
                }
                let gone = leader_gone(leader_reaped, &unhandled);
                if std::mem::take(&mut stdin_broke) {
                    if let Some(pipe) = pipe {
                        pipe.end(if gone {
                            StdinEnd::Exited
                        } else {
                            why_stdin_broke(p)
                        });
                    }
                }
                if let Some((sig, with_sweep)) = deferred.take() {
                    // A cancellation held until the pid came: if the leader
                    // ended meanwhile and nothing of ours reached it (its
                    // SIGKILL by tag had not gone out), it ended on its own.
                    stop_after_exit |= escalation.stopped().is_some_and(moot_after_an_exit)
                        && escalation.kill_due().is_some()
                        && (gone || crate::sys::process_exiting(p));
                    if !gone {
                        signal_tree(p, tag, sig, with_sweep);
                    }
                }
            }
            Event::Report(Report::Failed(e)) => {
                // Nothing runs; the supervisor has closed its ends of the
                // pipes and of the report pipe.
                releaser.release(None, report_fd.into_inner());
                return Err(SuperviseError::NotStarted(crate::launch::not_started(
                    e,
                    tag,
                    &start,
                    group.as_ref(),
                )));
            }
            Event::Report(report) => {
                leader_reaped = reaped(&report);
                tree_empty = matches!(report, Report::Exited { tree_empty: true, .. });
                let s = match report {
                    Report::Exited { status, .. } => status,
                    _ => ExitStatus::Unavailable,
                };
                // A command that has exited takes no more input.
                if let Some(p) = pipe {
                    p.end(StdinEnd::Exited);
                    stdin_fd = None;
                }
                if s == ExitStatus::Unavailable {
                    // The supervisor itself was killed: the leader may still
                    // run, re-parented to someone else (docs/host-death.md).
                    // So too when it died before saying the leader's pid:
                    // the command may have run, so it is a run whose ending
                    // nobody knows, not a failed start.
                    lost = true;
                    sweep(TagMatch::command(tag), libc::SIGKILL);
                }
                status = s;
                exited = true;
                drain_until = Some(Instant::now() + grace);
            }
            Event::Stop(Stop::Timeout) if handover.as_mut().is_some_and(|h| h()) => {
                // Handed over: from now on it runs like a started process.
                timeout_at = None;
                *handover = None;
            }
            Event::Tick => {}
            Event::Stop(Stop::Limit(kind)) => {
                escalation.begin_killed(Stop::Limit(kind));
                if let Some(g) = &group {
                    g.kill_members();
                }
                if leader_reaped {
                    // Its tree is empty: nothing to signal.
                } else if lost {
                    sweep(TagMatch::command(tag), libc::SIGKILL);
                } else {
                    signal_known(pid, tag, libc::SIGKILL, true);
                    deferred = pid.is_none().then_some((libc::SIGKILL, true));
                }
            }
            Event::Stop(reason) => {
                escalation.begin(reason, grace);
                // What already waits on the report pipe happened before
                // this stop: the leader's pid, and maybe its exit (the
                // select looks at stops first, for dispose, whose signals
                // come from outside and cause the exit they race with).
                if !exited && unhandled.is_none() {
                    unhandled = take_waiting_reports(&report_fd, &mut report, &mut pid, &mut lost);
                    stop_after_exit =
                        moot_after_an_exit(reason) && matches!(unhandled, Some(Report::Exited { .. }));
                }
                let gone = leader_gone(leader_reaped, &unhandled);
                // The leader is unreaped until released: one exiting (or a
                // zombie) ended on its own before this stop (its exit
                // report is on its way), and a signal now is lost on it.
                stop_after_exit |= moot_after_an_exit(reason)
                    && (exited || gone || pid.is_some_and(crate::sys::process_exiting));
                if gone {
                    // Its tree is empty: nothing to signal.
                } else if lost {
                    sweep(TagMatch::command(tag), libc::SIGTERM);
                } else if let Some(pid) = pid {
                    signal_tree(pid, tag, libc::SIGTERM, reason != Stop::Dispose);
                } else {
                    // Held until the pid comes (within DEFER_MS of the
                    // start, or with the exit): a sweep by tag now and the
                    // group's signal then would give a TERM trap two
                    // SIGTERMs. A SIGKILL at the grace is not held.
                    deferred = Some((libc::SIGTERM, reason != Stop::Dispose));
                }
            }
            Event::KillNow => {
                escalation.killed();
                if pid.is_none() && !exited && unhandled.is_none() {
                    unhandled = take_waiting_reports(&report_fd, &mut report, &mut pid, &mut lost);
                }
                if leader_gone(leader_reaped, &unhandled) {
                    // Its tree is empty: nothing to signal.
                } else if lost {
                    sweep(TagMatch::command(tag), libc::SIGKILL);
                } else {
                    let with_sweep = escalation.stopped() != Some(Stop::Dispose);
                    signal_known(pid, tag, libc::SIGKILL, with_sweep);
                    deferred = pid.is_none().then_some((libc::SIGKILL, with_sweep));
                }
            }
            Event::DrainOver => {
                // What the streams hold already is the command's output,
                // whether or not the host's loop has handed it out.
                if out_open {
                    read_waiting(out.as_ref(), |b| feed(streams, OutputStream::Stdout, b));
                }
                if err_open {
                    read_waiting(err.as_ref(), |b| feed(streams, OutputStream::Stderr, b));
                }
                break;
            }
            Event::GiveUp => {
                // The exit may have been reported to a busy host's loop that
                // has not handed the report out (this poll is a core
                // thread's): it is handled next, not given up on.
                if unhandled.is_none() {
                    unhandled = take_waiting_reports(&report_fd, &mut report, &mut pid, &mut lost);
                    if unhandled.is_some() {
                        continue;
                    }
                }
                // Nobody can say how it ends (it may never): settled
                // without its exit status, and counted in `survivors`.
                status = ExitStatus::Unavailable;
                given_up = true;
                break;
            }
        }
    }
    // The pid has come by now (SPAWNED precedes EXITED), unless the
    // supervisor was lost: then only tag sweeps are safe.
    let leader = pid.filter(|_| !lost && !leader_reaped);
    // A limit reached by what the leader left behind (a fork bomb's
    // processes after their shell exited) ends them too.
    if let (None, Some(leader)) = (escalation.stopped(), leader) {
        if let Some(kind) = group.as_ref().and_then(|g| g.reached()) {
            escalation.begin_killed(Stop::Limit(kind));
            if let Some(g) = &group {
                g.kill_members();
            }
            signal_tree(leader, tag, libc::SIGKILL, true);
        }
    }
    {
        let mut s = lock(streams);
        s.stdout.close();
        s.stderr.close();
    }
    // A reached limit ends every process the kernel counts in the group,
    // whatever it did to leave the tree the sweeps follow; a fork loop is
    // caught by the next pass, each pass after a millisecond.
    if matches!(escalation.stopped(), Some(Stop::Limit(_))) {
        if let Some(g) = &group {
            for _ in 0..200 {
                if g.kill_members() == 0 {
                    break;
                }
                timer(|| tokio::time::sleep(Duration::from_millis(1))).await;
            }
        }
    }
    let survivors = match leader {
        // Nothing of its tree was left at its exit, nor can be since.
        None if leader_reaped => 0,
        None => sweep_counted(TagMatch::command(tag), libc::SIGKILL).await.last as u32,
        Some(leader) => escalation.finish(leader, tag).await,
    };
    // Still unreaped until `release` (its pid cannot be reused): its own
    // CPU time says whether a SIGXCPU or SIGKILL came from the CPU limit.
    let leader_cpu = match (status, leader) {
        (ExitStatus::Signal(_), Some(leader)) => crate::confine::cause::own_cpu_time(leader),
        _ => None,
    };
    // A stuck leader is released unreaped: the supervisor reaps it if it
    // ever exits.
    release_reaped(
        releaser,
        pid.filter(|_| !given_up && !leader_reaped),
        report_fd,
        &mut report,
    )
    .await;
    Ok(Outcome {
        status,
        stop: escalation.stopped().filter(|_| !stop_after_exit),
        survivors,
        group,
        leader_cpu,
        read_only_mounts,
        tree_empty,
    })
}

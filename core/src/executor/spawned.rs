//! Spawned programs (docs/spawn.md): an argv program with a disposition for
//! each stream, started by the same launch and supervised by the same loop
//! as a command, and handled by a [`Process`] that also knows its tree:
//! reads by offset, a terminate that reaches the whole tree even after the
//! leader has exited, and a wait for the tree's end.

use std::collections::BTreeMap;
use std::future::Future;
use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::confine;
use crate::confine::governor;
use crate::executor::host_loop::{HostLoop, HostRun};
use crate::executor::process::{LeaderPid, Process, ProcessInner, State, Tree, WaiterId};
use crate::host::cancel::CancelToken;
use crate::host::latch::Latch;
use crate::host::runtime::{self, timer};
use crate::launch::env::HostEnv;
use crate::launch::sweeper::{census, sweep};
use crate::launch::tree::TagMatch;
use crate::launch::{launch_spawn, PidReport};
use crate::spec::error::{DshError, Result};
use crate::spec::spawn::{SpawnOutput, SpawnRequest, SpawnSpec, SpawnStdin};
use crate::watch::escalation::kill_after;
use crate::watch::output::{OffsetRead, OutputOffsets, StreamBuffer};
use crate::watch::pipes::watch;
use crate::watch::supervise::{supervise, StdinSource, Stop, Streams, SuperviseError};
use tokio::io::Interest;

use super::background::{background_ending, failed_ending};
use super::{Executor, ExecutorInner};

/// How long a wait for a tree's end trusts the members it found before it
/// looks again (a backstop: their ends are events).
const TREE_BACKSTOP: Duration = Duration::from_secs(2);

/// A program [`Executor::spawn`] started: its handle, and the raw ends of
/// the streams the spec gave as `Pipe`.
#[derive(Debug)]
pub struct Spawned {
    /// The handle: the leader's pid ([`Process::pid`]), exit facts once
    /// settled, offset reads of collected streams, [`Process::terminate`],
    /// [`Process::wait_tree`].
    pub process: Process,
    /// The write end of its stdin, for `SpawnStdin::Pipe`.
    pub stdin: Option<OwnedFd>,
    /// The read end of its stdout, for `SpawnOutput::Pipe`.
    pub stdout: Option<OwnedFd>,
    /// The read end of its stderr, for `SpawnOutput::Pipe`.
    pub stderr: Option<OwnedFd>,
}

pub use crate::watch::output::OutputStream;

impl Spawned {
    /// The leader's pid after [`Executor::spawn`], which returns once the
    /// program has exec'd (so it is known); a face that keeps it beside
    /// the handle takes it here. After [`Executor::spawn_on_host_loop`],
    /// ask [`Process::pid`] when needed instead: this one waits for it.
    pub fn exec_pid(&self) -> Result<i32> {
        self.process
            .pid()
            .ok_or_else(|| DshError::Internal("a spawned program has no pid".into()))
    }
}

impl ExecutorInner {
    fn spawn_streams(&self, spec: &SpawnSpec) -> Mutex<Streams> {
        let buffer = |output: SpawnOutput, label| {
            let (cap, spill) = match output {
                SpawnOutput::Collect {
                    max_bytes,
                    spill_max_bytes,
                } => (max_bytes, spill_max_bytes),
                // Never fed: the stream is not read here.
                SpawnOutput::Pipe | SpawnOutput::Inherit => (0, None),
            };
            StreamBuffer::new(cap, spill, self.spill.clone(), label)
        };
        Mutex::new(Streams {
            stdout: buffer(spec.stdout, "stdout"),
            stderr: buffer(spec.stderr, "stderr"),
            tap: None,
            valve: None,
        })
    }
}

impl Executor {
    /// Starts `spec`'s program (docs/spawn.md) and returns once it has
    /// exec'd, with its pid and the pipes handed to the caller. A program
    /// that cannot start is an error here ([`DshError::Spawn`], naming it
    /// or the workdir), and nothing runs. The program is not registered:
    /// [`Executor::list`] and friends are for background commands; dispose
    /// still stops it and waits for it.
    pub fn spawn(&self, spec: &SpawnSpec) -> Result<Spawned> {
        let started = self.start_spawn(spec, CancelToken::new(), PidReport::AtExec)?;
        let supervision = started.supervision;
        runtime::handle().spawn(async move {
            // It exec'd: its supervision cannot find it not started.
            let _ = supervision.await;
        });
        Ok(started.spawned)
    }

    /// [`Executor::spawn`] for a host with its own event loop (see
    /// [`HostLoop`]): the program is watched by the host's thread, which
    /// polls the returned [`HostRun`] whenever `host.fd()` is readable,
    /// and settles there. The process settles when the `HostRun` is ready;
    /// a `HostRun` dropped before that kills the program's tree (with its
    /// grace) and waits for it. A spawn that writes its stdin from bytes
    /// is watched by the core's threads instead (a write may raise
    /// SIGPIPE), as is one whose descriptors the host's loop refuses.
    ///
    /// It returns once the request is made, not after the exec: a short
    /// program then costs the host one wake-up, as a command does.
    /// [`Process::pid`] waits for the exec when asked before it. A program
    /// that turns out not to start settles as one that failed, and its
    /// `HostRun` ends with the error [`Executor::spawn`] would have
    /// returned ([`DshError::Spawn`], naming it or the workdir); what the
    /// host can check before the request (the program found, the spec)
    /// is still an error here.
    pub fn spawn_on_host_loop(&self, host: &HostLoop, spec: &SpawnSpec) -> Result<(Spawned, HostRun<()>)> {
        let on_drop = CancelToken::new();
        let started = self.start_spawn(spec, on_drop.clone(), PidReport::Piped)?;
        let on_host = !matches!(spec.stdin, SpawnStdin::Bytes(_));
        let run = HostRun::watching(host, on_host, &started.watched, started.supervision, on_drop);
        Ok((started.spawned, run))
    }

    /// Admits and launches `spec`'s program; its supervision, which
    /// settles the process, is for the caller to run. `on_drop` ends the
    /// program as `terminate` does.
    fn start_spawn(&self, spec: &SpawnSpec, on_drop: CancelToken, report: PidReport) -> Result<StartedSpawn> {
        let shared = self.shared();
        let active = shared.admit(|config| spec.check(config), None)?;
        confine::check(spec.sandbox_policy.as_ref())?;
        governor::check(&spec.limits)?;
        let tag = shared.next_tag();
        let mut launched = launch_spawn(spec, HostEnv::capture(), &tag, &shared.supervisors, report)?;
        let pid = match (launched.pid, launched.pid_pipe.take()) {
            (Some(pid), _) => LeaderPid::known(pid),
            (None, Some(pipe)) => LeaderPid::piped(pipe),
            (None, None) => return Err(DshError::Internal("a spawn returned without its pid".into())),
        };
        let handed = std::mem::take(&mut launched.handed);
        let watched = launched.watched_fds();
        let process = Process {
            shared: Arc::new(ProcessInner {
                host_pid: shared.host_pid,
                id: std::sync::OnceLock::new(),
                command: spec.argv.join(" "),
                owner: None,
                state: Mutex::new(State::running()),
                settled: Latch::default(),
                streams: shared.spawn_streams(spec),
                stop_tx: watch::channel(None).0,
                stdin: None,
                tree: Some(Tree {
                    pid,
                    tag: tag.clone(),
                    grace: Duration::from_millis(spec.grace_ms),
                    terminating: Default::default(),
                    watched: Default::default(),
                    over_at_exit: Default::default(),
                    gone: Latch::default(),
                }),
            }),
        };
        let supervision = {
            let shared = shared.clone();
            let process = process.clone();
            let spec = spec.clone();
            async move {
                let _active = active;
                let mut stop_rx = process.shared.stop_tx.subscribe();
                let stop = async {
                    tokio::select! {
                        r = stop_rx.wait_for(|s| s.is_some()) => r.ok().and_then(|s| *s).unwrap_or(Stop::Kill),
                        _ = on_drop.cancelled() => Stop::Kill,
                        _ = shared.disposing() => Stop::Dispose,
                    }
                };
                let stdin = match &spec.stdin {
                    SpawnStdin::Bytes(b) => StdinSource::Bytes(Some(b)),
                    SpawnStdin::Null | SpawnStdin::Pipe | SpawnStdin::Inherit => StdinSource::Bytes(None),
                };
                let grace = Duration::from_millis(spec.grace_ms);
                let streams = &process.shared.streams;
                let timeout = spec.timeout_ms.map(Duration::from_millis);
                let outcome = supervise(launched, &tag, stdin, streams, timeout, None, grace, stop).await;
                let acted = matches!(&outcome, Ok(o) if o.stop.is_some());
                if process.close_stops(acted) {
                    process.end_left_behind();
                }
                let mut not_started = None;
                // Known over without a census (`waitForExit` with an aborted
                // signal after `done` says so), its end set once settled.
                let known_over = process
                    .tree()
                    .filter(|_| matches!(&outcome, Ok(o) if o.tree_empty));
                if let Some(tree) = known_over {
                    tree.watched.store(true, Ordering::SeqCst);
                    tree.over_at_exit.store(true, Ordering::SeqCst);
                }
                let (ending, sandbox, survivors) = match outcome {
                    Ok(outcome) => {
                        background_ending(spec.sandbox_policy.as_ref(), &spec.limits, &process, outcome)
                    }
                    Err(SuperviseError::NotStarted(e)) => {
                        not_started = Some(e);
                        failed_ending(&process, None, None)
                    }
                    Err(e) => failed_ending(&process, Some(DshError::from(e).to_string()), None),
                };
                if let Some(tree) = process.tree() {
                    tree.pid.settle();
                }
                process.settle(ending, sandbox, survivors, |_| {});
                if let Some(tree) = known_over {
                    tree.gone.set(|| {});
                }
                not_started.map_or(Ok(()), Err)
            }
        };
        Ok(StartedSpawn {
            spawned: Spawned {
                process,
                stdin: handed.stdin,
                stdout: handed.stdout,
                stderr: handed.stderr,
            },
            watched,
            supervision: Box::pin(supervision),
        })
    }
}

/// A launched spawn whose supervision has not started yet.
struct StartedSpawn {
    spawned: Spawned,
    /// The descriptors its supervision reads (the report, collected streams).
    watched: Vec<RawFd>,
    /// Watches the program until it ends, then settles its process; the
    /// error of a program that did not start (only when the launch did
    /// not wait for its exec).
    supervision: Pin<Box<dyn Future<Output = Result<()>> + Send>>,
}

impl Executor {
    /// Request → spec for a spawn (docs/spawn.md): the configuration fills
    /// what the request leaves out.
    pub fn resolve_spawn(&self, request: SpawnRequest) -> Result<SpawnSpec> {
        crate::spec::spawn::resolve_spawn(&self.config(), request)
    }

    /// Where [`Executor::spawn`] would find `command`, with `env`'s changes
    /// to the scrubbed host environment (docs/spawn.md, "Finding the
    /// program"). An error names what is wrong: a relative path with a
    /// `/` ([`DshError::InvalidArgument`] on `spawn.command`), or no such
    /// executable ([`DshError::Spawn`], `NoProgram`).
    pub fn resolve_executable(
        &self,
        command: &str,
        env: &BTreeMap<String, Option<String>>,
    ) -> Result<PathBuf> {
        crate::launch::spawn::resolve_executable(command, env)
    }
}

impl Process {
    fn tree(&self) -> Option<&Tree> {
        self.shared.tree.as_ref()
    }

    /// A spawned program's pid (the root of its tree); `None` for a
    /// command started with [`Executor::start`], and for a program that
    /// did not start. After [`Executor::spawn_on_host_loop`], the first
    /// call before the exec waits for it (no longer than the spawn would
    /// have); in a forked child it only says what the parent knew already.
    /// A pid first read after a short program's exit may already be free
    /// before it settles (docs/spawn.md): it was reaped at its exit.
    pub fn pid(&self) -> Option<i32> {
        let tree = self.tree()?;
        if self.check_host().is_err() {
            // The pipe is the parent's too: reading it would steal its pid.
            return tree.pid.now();
        }
        tree.pid.get()
    }

    /// A non-consuming read of a collected stream from the whole-stream
    /// offset `from` (docs/spawn.md, "Reading by offset"): any number of
    /// readers, each with its own offsets, before and after the program's
    /// exit. A stream that was not collected reads as empty.
    pub fn read_from(&self, stream: OutputStream, from: u64) -> OffsetRead {
        let streams = crate::sys::lock(&self.shared.streams);
        match stream {
            OutputStream::Stdout => streams.stdout.read_from(from),
            OutputStream::Stderr => streams.stderr.read_from(from),
        }
    }

    /// Where the output stands: the consuming reads' position and how much
    /// arrived, per stream (for a reader by offset that starts where
    /// consuming reads would, and for a watcher of new output).
    pub fn output_offsets(&self) -> OutputOffsets {
        let streams = crate::sys::lock(&self.shared.streams);
        let (stdout_read, stdout_end) = streams.stdout.offsets();
        let (stderr_read, stderr_end) = streams.stderr.offsets();
        OutputOffsets {
            stdout_read,
            stderr_read,
            stdout_end,
            stderr_end,
        }
    }

    /// Ends a spawned program's whole tree: SIGTERM, then SIGKILL after the
    /// spec's grace to whatever is left. While the leader runs this is
    /// [`Process::kill`]; after it exited, the members it left behind (every
    /// process carrying its tag, in whatever session or group) get the same
    /// escalation. Idempotent: only the first call does anything. For a
    /// command from [`Executor::start`] it is [`Process::kill`].
    /// [`DshError::ForkedChild`] in a forked copy of the host, which does
    /// nothing to its parent's programs.
    pub fn terminate(&self) -> Result<()> {
        self.check_host()?;
        let Some(tree) = self.tree() else {
            self.kill();
            return Ok(());
        };
        if tree.terminating.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        if self.kill() || self.stop_pending() {
            // The supervision loop escalates (for this stop, or a `kill`
            // before it), then sweeps the tree; should it have ended just
            // before, the spawn's task calls `end_left_behind` (see
            // `close_stops`).
            return Ok(());
        }
        self.end_left_behind();
        Ok(())
    }

    /// The escalation for what a leader that has exited left behind: every
    /// process carrying the tag gets SIGTERM, then SIGKILL after the grace.
    fn end_left_behind(&self) {
        let Some(tree) = self.tree() else { return };
        let matcher = TagMatch::command(&tree.tag);
        let deadline = tokio::time::Instant::now() + tree.grace;
        runtime::handle().spawn(async move {
            sweep(matcher.clone(), libc::SIGTERM);
            kill_after(matcher, deadline).await;
        });
    }

    /// Completes when a spawned program's whole tree has ended: it has
    /// settled and no process carrying its tag is left (the leader's exit
    /// alone does not end the tree). For a command, when it settles.
    pub async fn wait_tree(&self) {
        match self.tree() {
            Some(tree) => {
                self.watch_tree();
                tree.gone.wait().await
            }
            None => self.wait().await,
        }
    }

    /// Blocks until the tree has ended (see [`Process::wait_tree`]) or
    /// `timeout` passed (`None`: no limit); whether it ended. Refused where
    /// blocking is (inside a callback or an async runtime) unless it
    /// already ended or `timeout` is zero.
    pub fn wait_tree_timeout(&self, timeout: Option<Duration>) -> Result<bool> {
        let Some(tree) = self.tree() else {
            return self.wait_timeout(timeout);
        };
        if self.tree_gone() {
            return Ok(true);
        }
        if !runtime::may_block(timeout, Some(self.shared.host_pid))? {
            return Ok(false);
        }
        Ok(tree.gone.wait_timeout(timeout))
    }

    /// True once [`Process::wait_tree`] would complete at once.
    pub fn tree_gone(&self) -> bool {
        match self.tree() {
            Some(tree) => {
                if tree.over_at_exit.load(Ordering::SeqCst) && self.is_settled() {
                    return true;
                }
                self.watch_tree();
                tree.gone.is_set()
            }
            None => self.is_settled(),
        }
    }

    /// Calls `f` on the callback thread once the tree has ended (see
    /// [`Process::wait_tree`]); the id withdraws it
    /// ([`Process::cancel_when_tree_gone`]).
    pub fn when_tree_gone(&self, f: impl FnOnce() + Send + 'static) -> Result<WaiterId> {
        self.check_host()?;
        match self.tree() {
            Some(tree) => {
                self.watch_tree();
                Ok(WaiterId(tree.gone.when_set(f)))
            }
            None => self.when_settled(f),
        }
    }

    /// Withdraws a `when_tree_gone` callback that has not run.
    pub fn cancel_when_tree_gone(&self, id: WaiterId) -> bool {
        match self.tree() {
            Some(tree) => tree.gone.withdraw(id.0),
            None => self.cancel_when_settled(id),
        }
    }

    /// Starts the one watcher of the tree's end, on first need: after the
    /// settlement, a census of the tree, then a wait for the end of the
    /// members it pinned (a pidfd or two: no CPU while they run), then
    /// another, until one finds nobody. A tree only grows by its members' forks, so the
    /// census after its members ended is exact; [`TREE_BACKSTOP`] rescans
    /// anyway. Dispose ends every tree, so the watcher ends too.
    fn watch_tree(&self) {
        let Some(tree) = self.tree() else { return };
        if tree.watched.swap(true, Ordering::SeqCst) || self.check_host().is_err() {
            return;
        }
        let process = self.clone();
        runtime::handle().spawn(async move {
            process.wait().await;
            let Some(tree) = process.tree() else { return };
            loop {
                let found = census(TagMatch::command(&tree.tag)).await;
                if found.total == 0 {
                    break;
                }
                let ends: Vec<_> = found
                    .members
                    .into_iter()
                    .filter_map(|fd| watch(fd, Interest::READABLE).ok())
                    .collect();
                if ends.is_empty() {
                    // Members it could not pin (no descriptor to spare):
                    // look again later.
                    timer(|| tokio::time::sleep(TREE_BACKSTOP)).await;
                } else {
                    let _ = timer(|| tokio::time::timeout(TREE_BACKSTOP, all_readable(ends))).await;
                }
            }
            tree.gone.set(|| {});
        });
    }
}

/// Completes once every pidfd is readable: each process has ended.
async fn all_readable(pidfds: Vec<tokio::io::unix::AsyncFd<OwnedFd>>) {
    for fd in &pidfds {
        let _ = fd.readable().await;
    }
}

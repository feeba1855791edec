//! The executor: foreground runs, background starts (docs/running.md), the
//! registry of what it started, completion listeners, and dispose
//! (docs/registry.md).

pub(crate) mod host_loop;
pub(crate) mod process;
pub(crate) mod run;

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::confine;
use crate::confine::governor;
use crate::executor::host_loop::{HostLoop, HostRun};
use crate::executor::process::{Process, ProcessRead, ProcessShared, State, Status};
use crate::executor::run::{RunFuture, RunFutureInner, RunResult};
use crate::host::callbacks;
use crate::host::cancel::CancelToken;
use crate::host::forked::current_pid;
use crate::host::runtime;
use crate::launch::ending::ExitFields;
use crate::launch::env::HostEnv;
use crate::launch::pty;
use crate::launch::spawn::Spawned;
use crate::launch::supervisor::Slot;
use crate::launch::tree::{sweep_counted, Spare, TagMatch};
use crate::launch::{launch, launch_terminal, spawn_error};
use crate::spec::config::{Config, ConfigInput};
use crate::spec::error::{DshError, Field, FieldName, Result, Scope};
use crate::spec::request::{resolve, OnExpiry, Request, Spec};
use crate::spec::sandbox::{SandboxInfo, SandboxMode};
use crate::spec::terminal::{resolve_terminal, TerminalRequest, TerminalSpec};
use crate::sys::lock;
use crate::terminal::{self, Started, Terminal};
use crate::watch::output::StreamBuffer;
use crate::watch::spill::{random_hex, SpillDir};
use crate::watch::stdin::{StdinEnd, StdinPipe};
use crate::watch::supervise::{supervise, Outcome, StdinSource, Stop, Streams, SuperviseError};

/// Identifies a task-done listener for [`Executor::off_task_done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerId(u64);

impl ListenerId {
    /// The raw value, for faces that hand ids across a language boundary.
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// The id whose [`ListenerId::as_u64`] is `raw`.
    pub fn from_u64(raw: u64) -> Self {
        ListenerId(raw)
    }
}

/// A task-done listener: called on the callback thread with each background
/// process that settles (see [`Executor::on_task_done`]).
pub type TaskListener = Arc<dyn Fn(&Process) + Send + Sync>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    Open,
    Disposing,
    Disposed,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    in_order: Vec<Process>,
    by_id: HashMap<String, Process>,
}

struct Shared {
    /// The host process that created the executor. In a forked child the
    /// executor is inert: its commands and spill files are the parent's.
    host_pid: libc::pid_t,
    /// Swapped whole by `reconfigure`; each operation reads one snapshot, so
    /// a command keeps the limits it started with.
    config: RwLock<Arc<Config>>,
    spill: Arc<SpillDir>,
    /// Every command's `DSH_EXEC_TAG` starts with this, so dispose can find
    /// all of this executor's descendants in one `/proc` sweep.
    tag_prefix: String,
    seq: AtomicU64,
    registry: Mutex<Registry>,
    listeners: Mutex<Vec<(ListenerId, TaskListener)>>,
    next_listener: AtomicU64,
    lifecycle: watch::Sender<Lifecycle>,
    active_runs: watch::Sender<usize>,
    /// Listener deliveries queued or running; dispose waits for none.
    pending_notifications: watch::Sender<usize>,
    /// The parent of every command (`supervisor.rs`), started with the
    /// first one and shut down by dispose.
    supervisors: Slot,
}

/// Disposes the executor (in the background) when the last handle goes.
struct Owner {
    shared: Arc<Shared>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        if self.shared.is_here() && *self.shared.lifecycle.borrow() == Lifecycle::Open {
            let shared = self.shared.clone();
            runtime::handle().spawn(async move { shared.dispose().await });
        }
    }
}

/// A bash executor. Cloning shares it; when the last clone is dropped
/// without `dispose`, disposal runs in the background.
#[derive(Clone)]
pub struct Executor {
    owner: Arc<Owner>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("config", &self.shared().config())
            .finish()
    }
}

/// A command that started but could not be watched was killed at once; it
/// is not a spawn failure (it ran), so a caller never retries it as one.
/// Drives `run` while calling `check`'s function every its period (see
/// [`Executor::run_blocking_checked`]); `interrupt` stops the run.
async fn checked<F: std::future::Future<Output = Result<RunResult>>>(
    run: F,
    check: Option<(Duration, &mut dyn FnMut() -> bool)>,
    interrupt: CancelToken,
) -> Result<RunResult> {
    let Some((every, interrupted)) = check else {
        return run.await;
    };
    tokio::pin!(run);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            biased;
            r = &mut run => return r,
            _ = tick.tick() => {
                if interrupted() {
                    interrupt.cancel();
                }
            }
        }
    }
}

/// Counts a foreground run for `dispose` to wait on.
struct ActiveRun(Arc<Shared>);

impl Drop for ActiveRun {
    fn drop(&mut self) {
        self.0.active_runs.send_modify(|n| *n -= 1);
    }
}

/// A listener delivery counted in `pending_notifications` from before the
/// process settled until every listener has run, or until it is dropped
/// undelivered (the process had already settled), so dispose never waits
/// for a delivery that will not come.
struct Notification {
    shared: Arc<Shared>,
    listeners: Vec<TaskListener>,
}

impl Notification {
    fn deliver(self, process: &Process) {
        let process = process.clone();
        callbacks::dispatch(move || {
            for listener in &self.listeners {
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| listener(&process))) {
                    eprintln!(
                        "dsh: a task-done listener panicked ({}); other listeners still run",
                        callbacks::panic_message(&*panic)
                    );
                }
            }
            drop(self);
        });
    }
}

impl Drop for Notification {
    fn drop(&mut self) {
        self.shared.pending_notifications.send_modify(|n| *n -= 1);
    }
}

impl Shared {
    fn is_open(&self) -> bool {
        *self.lifecycle.borrow() == Lifecycle::Open
    }

    /// False in a forked child of the host that created the executor.
    fn is_here(&self) -> bool {
        self.host_pid == current_pid()
    }

    fn check_here(&self) -> Result<()> {
        crate::host::forked::check_host(self.host_pid)
    }

    fn next_tag(&self) -> String {
        format!("{}.{}", self.tag_prefix, self.seq.fetch_add(1, Ordering::Relaxed))
    }

    fn config(&self) -> Arc<Config> {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn streams(&self, stdout_cap: u64) -> Mutex<Streams> {
        let c = self.config();
        Mutex::new(Streams {
            stdout: StreamBuffer::new(stdout_cap, c.max_spill_bytes, self.spill.clone(), "stdout"),
            stderr: StreamBuffer::new(
                c.max_output_bytes,
                c.max_spill_bytes,
                self.spill.clone(),
                "stderr",
            ),
        })
    }

    fn grace(&self) -> Duration {
        Duration::from_millis(self.config().grace_ms)
    }

    async fn disposing(&self) {
        let mut rx = self.lifecycle.subscribe();
        let _ = rx.wait_for(|l| *l != Lifecycle::Open).await;
    }

    async fn run_task(
        self: Arc<Self>,
        spec: Spec,
        host_env: HostEnv,
        cancel: Option<CancelToken>,
        on_drop: CancelToken,
        active: ActiveRun,
    ) -> Result<RunResult> {
        if spec.on_expiry == OnExpiry::Background {
            return self
                .run_handing_over(spec, host_env, cancel, on_drop, active)
                .await;
        }
        let (tag, spawned) = self.launch_run(&spec, host_env)?;
        self.supervise_run(spec, tag, spawned, cancel, on_drop, active)
            .await
    }

    /// The synchronous half of a foreground run: the command is asked for.
    fn launch_run(&self, spec: &Spec, host_env: HostEnv) -> Result<(String, Spawned)> {
        let tag = self.next_tag();
        let spawned = launch(spec, host_env, &tag, &self.supervisors)?;
        Ok((tag, spawned))
    }

    /// The rest of a foreground run, from the launched command to its result.
    async fn supervise_run(
        self: Arc<Self>,
        spec: Spec,
        tag: String,
        spawned: Spawned,
        cancel: Option<CancelToken>,
        on_drop: CancelToken,
        active: ActiveRun,
    ) -> Result<RunResult> {
        let _active = active;
        let streams = self.streams(spec.stdout_max_bytes);
        let stop = async {
            let caller = async {
                match &cancel {
                    Some(c) => c.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = caller => Stop::Cancel,
                _ = on_drop.cancelled() => Stop::Cancel,
                _ = self.disposing() => Stop::Dispose,
            }
        };
        let timeout = Duration::from_millis(spec.timeout_ms);
        let outcome = supervise(
            spawned,
            &tag,
            StdinSource::Bytes(spec.stdin.as_deref()),
            &streams,
            Some(timeout),
            None,
            self.grace(),
            stop,
        )
        .await
        .map_err(DshError::from)?;
        Ok(run_result(&spec, outcome, &streams))
    }

    /// A foreground run with `on_expiry` background: supervised on the
    /// core's threads by a task that outlives the run when the timeout
    /// hands the command over to the registry (docs/running.md).
    async fn run_handing_over(
        self: Arc<Self>,
        spec: Spec,
        host_env: HostEnv,
        cancel: Option<CancelToken>,
        on_drop: CancelToken,
        active: ActiveRun,
    ) -> Result<RunResult> {
        let tag = self.next_tag();
        let spawned = launch(&spec, host_env, &tag, &self.supervisors)?;
        let process = self.new_process(&spec, spec.stdout_max_bytes);
        let (tx, rx) = tokio::sync::oneshot::channel::<Result<RunResult>>();
        let shared = self;
        runtime::handle().spawn(async move {
            let _active = active;
            let mut tx = Some(tx);
            let handed = |p: &Process| p.shared.id.get().is_some();
            let mut stop_rx = process.shared.stop_tx.subscribe();
            let stop = async {
                let caller = async {
                    match &cancel {
                        Some(c) => c.cancelled().await,
                        None => std::future::pending().await,
                    }
                };
                let dropped = async {
                    on_drop.cancelled().await;
                    if handed(&process) {
                        // The run is over; the registry owns the process.
                        std::future::pending::<()>().await;
                    }
                };
                tokio::select! {
                    r = stop_rx.wait_for(|s| s.is_some()) => r.ok().and_then(|s| *s).unwrap_or(Stop::Kill),
                    _ = shared.disposing() => Stop::Dispose,
                    _ = dropped => Stop::Cancel,
                    // Before the hand-over the caller's cancellation aborts
                    // the run; after it, it kills the process (as for start).
                    _ = caller => if handed(&process) {
                        process.request_stop(Stop::Kill);
                        Stop::Kill
                    } else {
                        Stop::Cancel
                    },
                }
            };
            let config = shared.config();
            let mut hand_over = || {
                if !shared.register(&process) {
                    return false;
                }
                let result = {
                    let mut streams = lock(&process.shared.streams);
                    let stdout = streams.stdout.hand_over(config.max_output_bytes);
                    let stderr = streams.stderr.hand_over(config.max_output_bytes);
                    RunResult {
                        exit_code: None,
                        signal: None,
                        exit_status_unavailable: false,
                        timed_out: true,
                        aborted: false,
                        timeout_ms: spec.timeout_ms,
                        sandbox: confine::facts(spec.sandbox_policy.as_ref(), None, &stderr.text),
                        stdout,
                        stderr,
                        survivors: 0,
                        background_id: Some(process.id().to_owned()),
                        // Still running: no limit has ended it.
                        limit: None,
                        limits_enforcement: governor::check(&spec.limits).unwrap_or_default(),
                    }
                };
                if let Some(tx) = tx.take() {
                    let _ = tx.send(Ok(result));
                }
                true
            };
            let stdin = match &process.shared.stdin {
                Some(pipe) => StdinSource::Pipe(pipe),
                None => StdinSource::Bytes(spec.stdin.as_deref()),
            };
            let outcome = supervise(
                spawned,
                &tag,
                stdin,
                &process.shared.streams,
                Some(Duration::from_millis(spec.timeout_ms)),
                Some(&mut hand_over),
                Duration::from_millis(config.grace_ms),
                stop,
            )
            .await;
            if handed(&process) {
                let (ending, sandbox, survivors) = match outcome {
                    Ok(outcome) => background_ending(&spec, &process, outcome),
                    Err(e) => failed_ending(&process, DshError::from(e).to_string(), None),
                };
                shared.settle_background(&process, ending, sandbox, survivors);
            } else if let Some(tx) = tx.take() {
                let result = outcome
                    .map_err(DshError::from)
                    .map(|o| run_result(&spec, o, &process.shared.streams));
                let _ = tx.send(result);
            }
        });
        rx.await
            .unwrap_or_else(|_| Err(DshError::Internal("the run ended without a result".into())))
    }

    /// A process not yet registered (no id), with its output windows and,
    /// for `stdin_pipe`, its writable stdin.
    fn new_process(&self, spec: &Spec, stdout_cap: u64) -> Process {
        Process {
            shared: Arc::new(ProcessShared {
                host_pid: self.host_pid,
                id: std::sync::OnceLock::new(),
                command: spec.command.clone(),
                owner: spec.owner.clone(),
                state: Mutex::new(State::running()),
                settled_cv: Condvar::new(),
                settled_tx: watch::channel(false).0,
                streams: self.streams(stdout_cap),
                stop_tx: watch::channel(None).0,
                stdin: spec.stdin_pipe.then(StdinPipe::new),
            }),
        }
    }

    /// Registers `process` under the next id; false once disposal began.
    fn register(&self, process: &Process) -> bool {
        let mut reg = lock(&self.registry);
        if !self.is_open() {
            return false;
        }
        reg.next_id += 1;
        let id = format!("bash-{}", reg.next_id);
        let _ = process.shared.id.set(id.clone());
        reg.in_order.push(process.clone());
        reg.by_id.insert(id, process.clone());
        true
    }

    async fn background_task(
        self: Arc<Self>,
        process: Process,
        spec: Spec,
        host_env: HostEnv,
        cancel: Option<CancelToken>,
    ) {
        let tag = self.next_tag();
        let shared = &process.shared;
        let launched = confine::check(spec.sandbox_policy.as_ref())
            .and_then(|_| governor::check(&spec.limits))
            .and_then(|_| launch(&spec, host_env, &tag, &self.supervisors));
        // A start that failed, whether the request was refused or the
        // supervisor said so afterwards.
        let spawn_failed = |e: DshError| {
            if let Some(pipe) = &shared.stdin {
                pipe.end(StdinEnd::Exited);
            }
            let reason = match &e {
                DshError::Spawn { message, .. } => message.clone(),
                other => other.message(crate::NameStyle::Snake),
            };
            let runner_failed = matches!(e, DshError::SandboxUnavailable(_));
            let sandbox = confine::runner_failed_facts(spec.sandbox_policy.as_ref(), runner_failed);
            failed_ending(&process, format!("spawn failed: {reason}"), sandbox)
        };
        let (ending, sandbox, survivors) = match launched {
            Err(e) => spawn_failed(e),
            Ok(spawned) => {
                let mut stop_rx = shared.stop_tx.subscribe();
                let cancelled = async {
                    match &cancel {
                        Some(token) => token.cancelled().await,
                        None => std::future::pending().await,
                    }
                };
                let stop = async {
                    tokio::select! {
                        r = stop_rx.wait_for(|s| s.is_some()) => r.ok().and_then(|s| *s).unwrap_or(Stop::Kill),
                        _ = self.disposing() => Stop::Dispose,
                        // The caller's cancellation is a kill(): the status
                        // turns `killed` as the stop begins.
                        _ = cancelled => {
                            process.request_stop(Stop::Kill);
                            Stop::Kill
                        }
                    }
                };
                let stdin = match &shared.stdin {
                    Some(pipe) => StdinSource::Pipe(pipe),
                    None => StdinSource::Bytes(spec.stdin.as_deref()),
                };
                match supervise(
                    spawned,
                    &tag,
                    stdin,
                    &shared.streams,
                    None,
                    None,
                    self.grace(),
                    stop,
                )
                .await
                {
                    Ok(outcome) => background_ending(&spec, &process, outcome),
                    Err(SuperviseError::NotStarted(e)) => spawn_failed(e),
                    Err(e) => failed_ending(&process, DshError::from(e).to_string(), None),
                }
            }
        };
        self.settle_background(&process, ending, sandbox, survivors);
    }

    /// Settles a registered background process and tells the listeners.
    fn settle_background(
        self: &Arc<Self>,
        process: &Process,
        ending: ExitFields,
        sandbox: Option<SandboxInfo>,
        survivors: u32,
    ) {
        // Room is made before `process` settles, so a caller whose wait for
        // it returns already sees the older one forgotten; the second pass
        // covers `process` itself (retain_settled = 0) and a neighbour that
        // settled at the same moment.
        self.retire_oldest_settled(1);
        let notification = self.reserve_notification();
        process.settle(ending, sandbox, survivors, |p| {
            if let Some(n) = notification {
                n.deliver(p);
            }
        });
        self.retire_oldest_settled(0);
    }

    /// The retention rule: at most `retain_settled` settled processes stay
    /// registered; the oldest settled ones beyond that are forgotten.
    /// `settling` counts processes about to settle, whose room is made now.
    fn retire_oldest_settled(&self, settling: u64) {
        let retired: Vec<Process> = {
            let mut reg = lock(&self.registry);
            let settled = reg.in_order.iter().filter(|p| p.is_settled()).count() as u64 + settling;
            let mut excess = settled.saturating_sub(self.config().retain_settled);
            let mut retired = Vec::new();
            reg.in_order.retain(|p| {
                if excess > 0 && p.is_settled() {
                    excess -= 1;
                    retired.push(p.clone());
                    false
                } else {
                    true
                }
            });
            for p in &retired {
                reg.by_id.remove(p.id());
            }
            retired
        };
        for p in retired {
            p.discard_output();
        }
    }

    /// Queues one delivery of `process` to the listeners registered now, on
    /// the callback thread. A completion while the executor is open is
    /// delivered even if disposal begins meanwhile (dispose waits for every
    /// queued delivery, so none runs after it returns); completions caused by
    /// disposal are not delivered.
    /// Takes the listeners that will hear of a process about to settle, and
    /// counts the delivery as pending *before* the process is seen settled:
    /// a waiter that wakes on the settle and disposes at once still finds the
    /// delivery pending, so dispose waits for it instead of dropping it.
    fn reserve_notification(self: &Arc<Self>) -> Option<Notification> {
        if !self.is_open() {
            return None;
        }
        let listeners: Vec<TaskListener> = lock(&self.listeners).iter().map(|(_, l)| l.clone()).collect();
        if listeners.is_empty() {
            return None;
        }
        self.pending_notifications.send_modify(|n| *n += 1);
        Some(Notification {
            shared: self.clone(),
            listeners,
        })
    }

    async fn dispose(self: Arc<Self>) {
        let first = self.lifecycle.send_if_modified(|l| {
            if *l == Lifecycle::Open {
                *l = Lifecycle::Disposing;
                true
            } else {
                false
            }
        });
        if !first {
            let mut rx = self.lifecycle.subscribe();
            let _ = rx.wait_for(|l| *l == Lifecycle::Disposed).await;
            return;
        }
        lock(&self.listeners).clear();
        let processes: Vec<Process> = lock(&self.registry).in_order.clone();
        for p in &processes {
            p.request_stop(Stop::Dispose);
        }
        // Descendants that left their groups, and daemons of commands that
        // already ended: one sweep for the whole executor, with escalation.
        let all = TagMatch::executor(&self.tag_prefix).under(self.supervisors.pid());
        // Each running command signals its own group on the stop above.
        let spare_groups = all.clone().sparing(Spare::CommandGroups);
        let term_hit = sweep_counted(spare_groups, libc::SIGTERM).await.total > 0;
        for p in &processes {
            p.wait().await;
        }
        let mut rx = self.active_runs.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
        let mut rx = self.pending_notifications.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
        if term_hit || sweep_counted(all.clone(), 0).await.total > 0 {
            let deadline = tokio::time::Instant::now() + self.grace();
            while sweep_counted(all.clone(), 0).await.total > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            sweep_counted(all, libc::SIGKILL).await;
        }
        // Whatever is left of the supervisor's subtree dies with it.
        self.supervisors.shutdown().await;
        // Groups a dead supervisor could not remove (emptied by the sweeps).
        governor::remove_leftovers();
        self.spill.remove();
        self.lifecycle.send_replace(Lifecycle::Disposed);
    }
}

/// The result of a foreground run that ended (or was stopped).
fn run_result(spec: &Spec, outcome: Outcome, streams: &Mutex<Streams>) -> RunResult {
    let Outcome {
        status,
        stop,
        survivors,
        group,
        leader_cpu,
    } = outcome;
    let ending = governed(ExitFields::from(status), spec, stop, status, group, leader_cpu);
    let streams = lock(streams);
    let stderr = streams.stderr.collected();
    let sandbox = confine::facts(spec.sandbox_policy.as_ref(), ending.exit_code, &stderr.text);
    RunResult {
        exit_code: ending.exit_code,
        signal: ending.signal,
        exit_status_unavailable: ending.unavailable,
        timed_out: stop == Some(Stop::Timeout),
        aborted: matches!(stop, Some(Stop::Cancel | Stop::Dispose)),
        timeout_ms: spec.timeout_ms,
        stdout: streams.stdout.collected(),
        stderr,
        sandbox,
        survivors,
        background_id: None,
        limit: ending.limit,
        limits_enforcement: ending.limits_enforcement,
    }
}

/// How a supervised background process ended.
fn background_ending(
    spec: &Spec,
    process: &Process,
    outcome: Outcome,
) -> (ExitFields, Option<SandboxInfo>, u32) {
    let ending = governed(
        ExitFields::from(outcome.status),
        spec,
        outcome.stop,
        outcome.status,
        outcome.group,
        outcome.leader_cpu,
    );
    let stderr = lock(&process.shared.streams).stderr.collected().text;
    let sandbox = confine::facts(spec.sandbox_policy.as_ref(), ending.exit_code, &stderr);
    (ending, sandbox, outcome.survivors)
}

/// A background process that could not run (or be watched): `line` goes to
/// its stderr and it settles as `killed`.
fn failed_ending(
    process: &Process,
    line: String,
    sandbox: Option<SandboxInfo>,
) -> (ExitFields, Option<SandboxInfo>, u32) {
    let mut streams = lock(&process.shared.streams);
    streams.stderr.push(format!("{line}\n").as_bytes());
    streams.stdout.close();
    streams.stderr.close();
    lock(&process.shared.state).status = Status::Killed;
    (ExitFields::default(), sandbox, 0)
}

impl Executor {
    /// Validates `input` (docs/configuration.md); a bad field is an error
    /// naming it.
    pub fn new(input: ConfigInput) -> Result<Executor> {
        let config = Config::new(input)?;
        let shared = Arc::new(Shared {
            host_pid: current_pid(),
            spill: Arc::new(SpillDir::new(config.spill_dir.clone())),
            config: RwLock::new(Arc::new(config)),
            tag_prefix: random_hex().map_err(DshError::Internal)?,
            seq: AtomicU64::new(1),
            registry: Mutex::new(Registry::default()),
            listeners: Mutex::new(Vec::new()),
            next_listener: AtomicU64::new(1),
            lifecycle: watch::channel(Lifecycle::Open).0,
            active_runs: watch::channel(0).0,
            pending_notifications: watch::channel(0).0,
            supervisors: Slot::default(),
        });
        Ok(Executor {
            owner: Arc::new(Owner { shared }),
        })
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.owner.shared
    }

    /// The configuration new commands get (see [`Executor::reconfigure`]).
    pub fn config(&self) -> Arc<Config> {
        self.shared().config()
    }

    /// Replaces the configuration for everything resolved or started from
    /// now on; running commands keep the limits they started with. Hosts
    /// whose settings change at run time call this instead of making a new
    /// executor, so background processes stay owned by one executor. The
    /// spill directory is the one fixed field: spill files already written
    /// live there until the executor is disposed. Left out, it stays as it
    /// is; given, it must name the same directory.
    pub fn reconfigure(&self, input: ConfigInput) -> Result<()> {
        let shared = self.shared();
        shared.check_here()?;
        if !shared.is_open() {
            return Err(DshError::Disposed);
        }
        let keeps_spill_dir = input.spill_dir.is_none();
        let mut next = Config::new(input)?;
        let mut current = shared.config.write().unwrap_or_else(|p| p.into_inner());
        if keeps_spill_dir {
            next.spill_dir = current.spill_dir.clone();
        }
        if next.spill_dir != current.spill_dir {
            return Err(DshError::invalid(
                Field::new(Scope::Config, FieldName::SpillDir),
                format!(
                    "cannot change after the executor is made (it is {})",
                    current.spill_dir.display()
                ),
            ));
        }
        *current = Arc::new(next);
        Ok(())
    }

    /// The pid of the executor's supervisor (`docs/host-death.md`), while
    /// one runs: the parent of its commands, and the owner of their cgroups
    /// (`dsh.<this pid>.<n>`, docs/limits.md). For diagnostics and tests.
    pub fn supervisor_pid(&self) -> Option<i32> {
        self.shared().supervisors.pid()
    }

    /// The default sandbox mode this executor stamps (`None`: it does not
    /// confine unless a spec asks).
    pub fn sandbox_mode(&self) -> Option<SandboxMode> {
        self.shared().config().sandbox_mode
    }

    /// Request → spec (docs/requests.md); the only place defaults are applied.
    pub fn resolve(&self, request: Request) -> Result<Spec> {
        resolve(&self.shared().config(), request)
    }

    /// The private spill directory, once a spill has created it.
    pub fn spill_dir(&self) -> Option<std::path::PathBuf> {
        self.shared().spill.path()
    }

    fn admit_run(&self, spec: &Spec, cancel: Option<&CancelToken>) -> Result<ActiveRun> {
        let shared = self.shared();
        shared.active_runs.send_modify(|n| *n += 1);
        let active = ActiveRun(shared.clone());
        shared.check_here()?;
        if !shared.is_open() {
            return Err(DshError::Disposed);
        }
        spec.check(&shared.config())?;
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return Err(DshError::AlreadyCancelled);
        }
        if spec.stdin_pipe && spec.on_expiry == OnExpiry::Kill {
            return Err(DshError::invalid(
                Field::new(Scope::Spec, FieldName::Stdin),
                "is a pipe, which a foreground run cannot write to: use start, or on_expiry background",
            ));
        }
        confine::check(spec.sandbox_policy.as_ref())?;
        governor::check(&spec.limits)?;
        Ok(active)
    }

    /// Runs `spec` in the foreground (docs/running.md). Fails only when the command could
    /// not be started; every ending of a started command is a result.
    pub fn run(&self, spec: &Spec, cancel: Option<&CancelToken>) -> RunFuture {
        let active = match self.admit_run(spec, cancel) {
            Ok(a) => a,
            Err(e) => {
                return RunFuture {
                    inner: RunFutureInner::Failed(Some(e)),
                }
            }
        };
        let on_drop = CancelToken::new();
        let task = runtime::handle().spawn(self.shared().clone().run_task(
            spec.clone(),
            HostEnv::capture(),
            cancel.cloned(),
            on_drop.clone(),
            active,
        ));
        RunFuture {
            inner: RunFutureInner::Running { task, on_drop },
        }
    }

    /// [`Executor::run`] for hosts with their own event loop (Python's
    /// asyncio): returns at once and calls `on_done` with the outcome on
    /// the callback thread.
    pub fn run_with(
        &self,
        spec: &Spec,
        cancel: Option<&CancelToken>,
        on_done: impl FnOnce(Result<RunResult>) + Send + 'static,
    ) {
        self.run_then(spec, cancel, move |outcome| {
            callbacks::dispatch(move || on_done(outcome))
        });
    }

    /// [`Executor::run`] for a host whose hand-off to its own event loop
    /// is thread-safe and never blocks (Node's promises): returns at once
    /// and calls `on_done` with the outcome on one of the core's I/O
    /// threads, with no hop through the callback thread. `on_done` must
    /// return quickly and must not block.
    pub fn run_then(
        &self,
        spec: &Spec,
        cancel: Option<&CancelToken>,
        on_done: impl FnOnce(Result<RunResult>) + Send + 'static,
    ) {
        // One task, not `run` plus a task awaiting it: each task spawned
        // from outside the runtime may wake a worker.
        let active = match self.admit_run(spec, cancel) {
            Ok(a) => a,
            Err(e) => {
                runtime::handle().spawn(async move { on_done(Err(e)) });
                return;
            }
        };
        let run = self.shared().clone().run_task(
            spec.clone(),
            HostEnv::capture(),
            cancel.cloned(),
            CancelToken::new(),
            active,
        );
        runtime::handle().spawn(async move { on_done(run.await) });
    }

    /// [`Executor::run`] on a host's own event loop (see [`HostLoop`]): the
    /// command is asked for on the calling thread, and its events are read
    /// there, by [`HostLoop::poll`], whenever `host.fd()` is readable.
    /// Only for specs that [`Spec::runs_on_host_loop`]; the others go
    /// through [`Executor::run_then`].
    pub fn run_on(&self, host: &HostLoop, spec: &Spec, cancel: Option<&CancelToken>) -> Result<HostRun> {
        if !spec.runs_on_host_loop() {
            return Err(DshError::Internal(
                "run_on was given a spec that writes stdin or hands over at its timeout".into(),
            ));
        }
        let active = self.admit_run(spec, cancel)?;
        let shared = self.shared().clone();
        let (tag, spawned) = shared.launch_run(spec, HostEnv::capture())?;
        let watched = host.watch(&[
            spawned.report.as_raw_fd(),
            spawned.stdout.as_raw_fd(),
            spawned.stderr.as_raw_fd(),
        ]);
        let on_drop = CancelToken::new();
        let run = shared.supervise_run(
            spec.clone(),
            tag,
            spawned,
            cancel.cloned(),
            on_drop.clone(),
            active,
        );
        if watched.is_err() {
            // The host's loop would not hear of it: the core's threads
            // watch it instead (nothing has registered its descriptors yet).
            let joined = runtime::spawned(run);
            return Ok(HostRun::new(host, async move { joined.await? }, on_drop));
        }
        Ok(HostRun::new(host, run, on_drop))
    }

    /// [`Executor::run`] for threads that are not in an async runtime.
    pub fn run_blocking(&self, spec: &Spec, cancel: Option<&CancelToken>) -> Result<RunResult> {
        self.run_blocking_inner(spec, cancel, None)
    }

    /// [`Executor::run_blocking`] for a host that must look at something of
    /// its own while it waits (Python's Ctrl-C): `interrupted` is called on
    /// the calling thread every `every`, and once it returns true the run
    /// is stopped as a cancellation would stop it, and still waited for.
    pub fn run_blocking_checked(
        &self,
        spec: &Spec,
        cancel: Option<&CancelToken>,
        every: Duration,
        mut interrupted: impl FnMut() -> bool,
    ) -> Result<RunResult> {
        self.run_blocking_inner(spec, cancel, Some((every, &mut interrupted)))
    }

    fn run_blocking_inner(
        &self,
        spec: &Spec,
        cancel: Option<&CancelToken>,
        check: Option<(Duration, &mut dyn FnMut() -> bool)>,
    ) -> Result<RunResult> {
        let active = self.admit_run(spec, cancel)?;
        let interrupt = CancelToken::new();
        let task = self.shared().clone().run_task(
            spec.clone(),
            HostEnv::capture(),
            cancel.cloned(),
            interrupt.clone(),
            active,
        );
        if spec.stdin.is_some() || spec.stdin_pipe {
            // Writing stdin may raise SIGPIPE: do it on the core's threads.
            let joined = runtime::spawned(task);
            runtime::block_on_here(checked(async move { joined.await? }, check, interrupt))?
        } else {
            // No pipe written: the calling thread's own reactor drives it.
            runtime::block_on_here(checked(task, check, interrupt))?
        }
    }

    /// Starts `spec` in the background (docs/running.md) and returns at once; spawning
    /// happens on the executor's threads. A spawn failure settles the
    /// process as `killed` with `spawn failed: …` in its output.
    pub fn start(&self, spec: &Spec) -> Result<Process> {
        self.start_cancellable(spec, None)
    }

    /// [`Executor::start`] with the caller's cancellation: a token that has
    /// already fired is [`DshError::AlreadyCancelled`] and nothing runs (as
    /// for [`Executor::run`]); one that fires later stops the process as
    /// [`Process::kill`] does.
    pub fn start_cancellable(&self, spec: &Spec, cancel: Option<&CancelToken>) -> Result<Process> {
        let shared = self.shared();
        shared.check_here()?;
        spec.check(&shared.config())?;
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return Err(DshError::AlreadyCancelled);
        }
        let process = shared.new_process(spec, shared.config().max_output_bytes);
        if !shared.register(&process) {
            return Err(DshError::Disposed);
        }
        runtime::handle().spawn(shared.clone().background_task(
            process.clone(),
            spec.clone(),
            HostEnv::capture(),
            cancel.cloned(),
        ));
        Ok(process)
    }

    /// The process registered under `id`, if any.
    pub fn get(&self, id: &str) -> Option<Process> {
        lock(&self.shared().registry).by_id.get(id).cloned()
    }

    fn known(&self, id: &str) -> Result<Process> {
        self.get(id).ok_or_else(|| DshError::NotFound(id.to_owned()))
    }

    /// The owner token stored at `start` (never interpreted).
    pub fn owner_of(&self, id: &str) -> Result<Option<String>> {
        Ok(self.known(id)?.owner().map(str::to_owned))
    }

    /// Terminal request → spec (docs/terminals.md); the only place its
    /// defaults are applied.
    pub fn resolve_terminal(&self, request: TerminalRequest) -> Result<TerminalSpec> {
        resolve_terminal(&self.shared().config(), request)
    }

    /// Starts a terminal session (docs/terminals.md): the program leads a
    /// new session whose controlling terminal is a fresh pseudo-terminal,
    /// started by the executor's supervisor like every command (the host
    /// never forks). Returns once it has started; its handle reads, writes,
    /// resizes, inspects and signals it, and `terminate()` ends the whole
    /// session. Dispose ends it too.
    pub fn spawn_terminal(&self, spec: &TerminalSpec) -> Result<Terminal> {
        self.spawn_terminal_in(spec, HostEnv::capture())
    }

    /// [`Executor::spawn_terminal`] for hosts with their own event loop: the
    /// environment is taken now, the spawn happens on the core's threads,
    /// and `on_done` gets the outcome on the callback thread.
    pub fn spawn_terminal_with(
        &self,
        spec: &TerminalSpec,
        on_done: impl FnOnce(Result<Terminal>) + Send + 'static,
    ) {
        let (this, spec, env) = (self.clone(), spec.clone(), HostEnv::capture());
        runtime::handle().spawn_blocking(move || {
            let outcome = this.spawn_terminal_in(&spec, env);
            callbacks::dispatch(move || on_done(outcome));
        });
    }

    fn spawn_terminal_in(&self, spec: &TerminalSpec, host_env: HostEnv) -> Result<Terminal> {
        let shared = self.shared();
        shared.active_runs.send_modify(|n| *n += 1);
        let active = ActiveRun(shared.clone());
        shared.check_here()?;
        if !shared.is_open() {
            return Err(DshError::Disposed);
        }
        spec.check()?;
        confine::check(spec.sandbox_policy.as_ref())?;
        let tag = shared.next_tag();
        let os_error = |e: std::io::Error| spawn_error(e, &spec.cwd);
        let pty = pty::open(spec.rows, spec.cols).map_err(os_error)?;
        crate::sys::set_nonblocking(&pty.master).map_err(os_error)?;
        let control = pty.master.try_clone().map_err(os_error)?;
        let leader = launch_terminal(spec, host_env, &tag, &shared.supervisors, &pty)?;
        let pty::Pty { master, rdev, .. } = pty; // the slave is closed here
        let disposing = {
            let shared = shared.clone();
            async move { shared.disposing().await }
        };
        Ok(terminal::start(
            Started {
                pid: leader.pid,
                report: leader.report,
                releaser: leader.releaser,
                master,
                control,
                rdev,
                tag,
                grace: Duration::from_millis(spec.grace_ms),
                max_output_bytes: shared.config().max_output_bytes,
            },
            disposing,
            active,
        ))
    }

    /// Every process started, in start order.
    pub fn list(&self) -> Vec<Process> {
        lock(&self.shared().registry).in_order.clone()
    }

    /// [`Process::read_output`] of the process registered under `id`;
    /// [`DshError::NotFound`] for an unknown id.
    pub fn read_output(&self, id: &str) -> Result<ProcessRead> {
        Ok(self.known(id)?.read_output())
    }

    /// [`Process::kill`] of the process registered under `id`;
    /// [`DshError::NotFound`] for an unknown id.
    pub fn kill(&self, id: &str) -> Result<bool> {
        Ok(self.known(id)?.kill())
    }

    /// Removes a settled process from the registry and deletes its spill
    /// files and buffered output; its id is then unknown. Handles to it
    /// still answer status questions. A running process is
    /// [`DshError::StillRunning`]; an unknown id is [`DshError::NotFound`].
    pub fn forget(&self, id: &str) -> Result<()> {
        let process = {
            let mut reg = lock(&self.shared().registry);
            let process = reg
                .by_id
                .get(id)
                .cloned()
                .ok_or_else(|| DshError::NotFound(id.to_owned()))?;
            if !process.is_settled() {
                return Err(DshError::StillRunning(id.to_owned()));
            }
            reg.by_id.remove(id);
            reg.in_order.retain(|p| p.id() != id);
            process
        };
        process.discard_output();
        Ok(())
    }

    /// Calls `listener` once for each background process that settles from
    /// now on, until removed or the executor is disposed. A panicking
    /// listener is contained and the others still run. A listener that
    /// holds this executor keeps it alive until `dispose` (which drops every
    /// listener) or `off_task_done`.
    pub fn on_task_done(&self, listener: TaskListener) -> ListenerId {
        let shared = self.shared();
        let id = ListenerId(shared.next_listener.fetch_add(1, Ordering::Relaxed));
        if shared.is_open() {
            lock(&shared.listeners).push((id, listener));
        }
        id
    }

    /// Removes a listener; false if it was not registered.
    pub fn off_task_done(&self, id: ListenerId) -> bool {
        let mut listeners = lock(&self.shared().listeners);
        let before = listeners.len();
        listeners.retain(|(l, _)| *l != id);
        listeners.len() != before
    }

    /// True once disposal has begun (or this is a forked child's copy that
    /// was disposed).
    pub fn is_disposed(&self) -> bool {
        !self.shared().is_open()
    }

    /// Kills every running process (with the escalation), waits until all
    /// have exited, and removes the spill directory. Idempotent; afterwards
    /// `run` and `start` fail with [`DshError::Disposed`]. In a forked child
    /// it only closes this copy: the commands and spill files are the
    /// parent's, and the parent's executor still owns them.
    pub async fn dispose(&self) {
        let shared = self.shared().clone();
        if !shared.is_here() {
            shared.lifecycle.send_replace(Lifecycle::Disposed);
            return;
        }
        // On the core's runtime, whatever runtime awaits this.
        let _ = runtime::handle().spawn(shared.dispose()).await;
    }

    /// [`Executor::dispose`] for hosts with their own event loop: returns at
    /// once and calls `on_done` on the callback thread when disposal is
    /// complete.
    pub fn start_dispose(&self, on_done: impl FnOnce() + Send + 'static) {
        let shared = self.shared().clone();
        if !shared.is_here() {
            shared.lifecycle.send_replace(Lifecycle::Disposed);
            callbacks::dispatch(on_done);
            return;
        }
        runtime::handle().spawn(async move {
            shared.dispose().await;
            callbacks::dispatch(on_done);
        });
    }

    /// [`Executor::dispose`] for threads that are not in an async runtime:
    /// blocks until disposal is complete. Refused
    /// ([`DshError::BlockingInAsync`]) inside a callback or a runtime.
    pub fn dispose_blocking(&self) -> Result<()> {
        let shared = self.shared().clone();
        if !shared.is_here() {
            shared.lifecycle.send_replace(Lifecycle::Disposed);
            return Ok(());
        }
        runtime::block_on(shared.dispose())
    }
}

/// The governor's facts on an ending: which limit ended the command (the
/// one the executor stopped it for, else the kernel's counters and the
/// leader's death signal when it ended by itself; never after a timeout or
/// a cancellation), how each limit was enforced; then the command's groups
/// are removed.
fn governed(
    mut ending: ExitFields,
    spec: &Spec,
    stop: Option<Stop>,
    status: crate::launch::ending::ExitStatus,
    group: Option<crate::confine::governor::CommandGroup>,
    leader_cpu: Option<Duration>,
) -> ExitFields {
    let signal = match status {
        crate::launch::ending::ExitStatus::Signal(s) => Some(s),
        _ => None,
    };
    ending.limit = match stop {
        Some(Stop::Limit(kind)) => Some(kind),
        None => governor::cause(&spec.limits, group.as_ref(), signal, leader_cpu),
        Some(_) => None,
    };
    ending.limits_enforcement = governor::check(&spec.limits).unwrap_or_default();
    if let Some(g) = group {
        g.remove();
    }
    ending
}

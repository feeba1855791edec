//! Background processes: the start, the process's task, its settlement,
//! and the delivery to task-done listeners. docs/running.md, "Background".

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::confine;
use crate::confine::governor;
use crate::executor::process::{Process, ProcessInner, State, Status};
use crate::host::callbacks;
use crate::host::cancel::CancelToken;
use crate::host::latch::Latch;
use crate::host::runtime;
use crate::launch::ending::ExitFields;
use crate::launch::env::HostEnv;
use crate::launch::launch;
use crate::spec::error::{DshError, Field, FieldName, Result, Scope};
use crate::spec::request::Spec;
use crate::spec::sandbox::SandboxInfo;
use crate::sys::lock;
use crate::watch::stdin::{StdinEnd, StdinPipe};
use crate::watch::supervise::{supervise, Outcome, StdinSource, Stop, SuperviseError};

use super::{governed, Executor, ExecutorInner, Registered};

/// A background process that could not run (or be watched): `line` goes to
/// its stderr and it settles as `killed`. A spawned program that did not
/// start gives no line (`None`): as the seam's provider, it has collected
/// nothing, and its error is its run's.
pub(super) fn failed_ending(
    process: &Process,
    line: Option<String>,
    sandbox: Option<SandboxInfo>,
) -> (ExitFields, Option<SandboxInfo>, u32) {
    let mut streams = lock(&process.shared.streams);
    if let Some(line) = line {
        streams.stderr.push(format!("{line}\n").as_bytes());
    }
    streams.stdout.close();
    streams.stderr.close();
    lock(&process.shared.state).status = Status::Killed;
    (ExitFields::default(), sandbox, 0)
}

/// How a supervised background process (or spawned program) ended.
pub(super) fn background_ending(
    policy: Option<&crate::spec::sandbox::SandboxPolicy>,
    limits: &crate::spec::limits::Limits,
    process: &Process,
    outcome: Outcome,
) -> (ExitFields, Option<SandboxInfo>, u32) {
    let mut ending = governed(
        ExitFields::from(outcome.status),
        limits,
        outcome.stop,
        outcome.status,
        outcome.group,
        outcome.leader_cpu,
    );
    ending.timed_out = outcome.stop == Some(Stop::Timeout);
    let stderr = lock(&process.shared.streams).stderr.collected().text;
    let sandbox = confine::facts(policy, outcome.read_only_mounts, ending.exit_code, &stderr);
    (ending, sandbox, outcome.survivors)
}

impl Drop for Notification {
    fn drop(&mut self) {
        self.shared.pending_notifications.send_modify(|n| *n -= 1);
    }
}

impl Notification {
    pub(super) fn deliver(self, process: &Process) {
        let process = process.clone();
        callbacks::dispatch(move || {
            for listener in &self.listeners {
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| listener.call_unless_removed(&process)))
                {
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

/// A listener delivery counted in `pending_notifications` from before the
/// process settled until every listener has run, or until it is dropped
/// undelivered (the process had already settled), so dispose never waits
/// for a delivery that will not come.
pub(super) struct Notification {
    shared: Arc<ExecutorInner>,
    listeners: Vec<Arc<Registered>>,
}

impl ExecutorInner {
    /// A process not yet registered (no id), with its output windows and,
    /// for `stdin_pipe`, its writable stdin.
    pub(super) fn new_process(&self, spec: &Spec, stdout_cap: u64) -> Process {
        Process {
            shared: Arc::new(ProcessInner {
                host_pid: self.host_pid,
                id: std::sync::OnceLock::new(),
                command: spec.command.clone(),
                owner: spec.owner.clone(),
                state: Mutex::new(State::running()),
                settled: Latch::default(),
                streams: self.streams(stdout_cap),
                stop_tx: watch::channel(None).0,
                stdin: spec.stdin_pipe.then(StdinPipe::new),
                tree: None,
            }),
        }
    }

    /// Registers `process` under `wanted` (an id reserved for it) or the
    /// next `bash-N` nobody holds; false once disposal began.
    pub(super) fn register(&self, process: &Process, wanted: Option<&Reservation>) -> bool {
        let mut reg = lock(&self.registry);
        if !self.is_open() {
            return false;
        }
        let id = match wanted {
            Some(r) => {
                reg.reserved.remove(&r.id);
                r.id.clone()
            }
            None => loop {
                reg.next_id += 1;
                let id = format!("bash-{}", reg.next_id);
                if !reg.by_id.contains_key(&id) && !reg.reserved.contains(&id) {
                    break id;
                }
            },
        };
        let _ = process.shared.id.set(id.clone());
        reg.in_order.push(process.clone());
        reg.by_id.insert(id, process.clone());
        true
    }

    /// Holds `id` for one process until it registers (or the reservation
    /// is dropped): a caller's own id (`start_as`, `run_as`), refused when
    /// empty or held by another.
    pub(super) fn reserve(self: &Arc<Self>, id: &str) -> Result<Reservation> {
        let field = Field::new(Scope::Spec, FieldName::Id);
        if id.is_empty() || id.contains('\0') {
            return Err(DshError::invalid(
                field,
                "must be a non-empty string without NUL bytes",
            ));
        }
        let mut reg = lock(&self.registry);
        if reg.by_id.contains_key(id) || !reg.reserved.insert(id.to_owned()) {
            return Err(DshError::invalid(
                field,
                format!("{id:?} is taken by another process"),
            ));
        }
        Ok(Reservation {
            shared: self.clone(),
            id: id.to_owned(),
        })
    }

    pub(super) async fn background_task(
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
            failed_ending(&process, Some(format!("spawn failed: {reason}")), sandbox)
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
                    Ok(outcome) => {
                        background_ending(spec.sandbox_policy.as_ref(), &spec.limits, &process, outcome)
                    }
                    Err(SuperviseError::NotStarted(e)) => spawn_failed(e),
                    Err(e) => failed_ending(&process, Some(DshError::from(e).to_string()), None),
                }
            }
        };
        self.settle_background(&process, ending, sandbox, survivors);
    }

    /// Settles a registered background process and tells the listeners.
    pub(super) fn settle_background(
        self: &Arc<Self>,
        process: &Process,
        ending: ExitFields,
        sandbox: Option<SandboxInfo>,
        survivors: u32,
    ) {
        // Room is made before `process` settles, so a caller whose wait for
        // it returns already sees the older one forgotten; the second pass
        // covers `process` itself (retain_settled = 0). One process settles
        // at a time (`settling`), so the count never passes the bound.
        let _one_at_a_time = lock(&self.settling);
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
    pub(super) fn retire_oldest_settled(&self, settling: u64) {
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
    pub(super) fn reserve_notification(self: &Arc<Self>) -> Option<Notification> {
        if !self.is_open() {
            return None;
        }
        let listeners: Vec<Arc<Registered>> = lock(&self.listeners).clone();
        if listeners.is_empty() {
            return None;
        }
        self.pending_notifications.send_modify(|n| *n += 1);
        Some(Notification {
            shared: self.clone(),
            listeners,
        })
    }
}

impl Executor {
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
        self.start_registered(spec, cancel, None)
    }

    /// [`Executor::start_cancellable`] registering the process as `id`
    /// instead of the next `bash-N`: for a caller that must name the
    /// process before it hears back (a remote client's synchronous
    /// `start`). An id that is empty or held by another process is
    /// [`DshError::InvalidArgument`] on `spec.id`, and nothing runs; an id
    /// chosen here is never given to another process while this one is
    /// registered, and `bash-N` ids skip it.
    pub fn start_as(&self, spec: &Spec, cancel: Option<&CancelToken>, id: &str) -> Result<Process> {
        let reservation = self.shared().reserve(id)?;
        self.start_registered(spec, cancel, Some(reservation))
    }

    fn start_registered(
        &self,
        spec: &Spec,
        cancel: Option<&CancelToken>,
        reservation: Option<Reservation>,
    ) -> Result<Process> {
        let shared = self.shared();
        let _admitted = shared.admit(|config| spec.check(config), cancel)?;
        let process = shared.new_process(spec, shared.config().max_output_bytes);
        if !shared.register(&process, reservation.as_ref()) {
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
}

/// An id held for a process that has not registered yet; released when
/// dropped (a run that ended before its hand-over, a refused start).
pub(super) struct Reservation {
    shared: Arc<ExecutorInner>,
    id: String,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        lock(&self.shared.registry).reserved.remove(&self.id);
    }
}

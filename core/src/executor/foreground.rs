//! Foreground runs: admission, the run's task, its result, and the ways a
//! face drives one (a future, a callback, a host's own loop, a blocking
//! call). docs/running.md, "Foreground".

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::confine;
use crate::confine::governor;
use crate::executor::host_loop::{HostLoop, HostRun};
use crate::executor::process::Process;
use crate::executor::run::{RunFuture, RunFutureInner, RunResult};
use crate::host::callbacks;
use crate::host::cancel::CancelToken;
use crate::host::runtime;
use crate::launch::ending::ExitFields;
use crate::launch::env::HostEnv;
use crate::launch::launch;
use crate::launch::spawn::LaunchedCommand;
use crate::spec::error::{DshError, Field, FieldName, Result, Scope};
use crate::spec::request::{OnExpiry, Spec};
use crate::sys::lock;
use crate::watch::output::{OutputTap, OutputValve};
use crate::watch::supervise::{supervise, Outcome, StdinSource, Stop, Streams};

use super::background::{background_ending, failed_ending, Reservation};
use super::{governed, ActiveRun, Executor, ExecutorInner};

/// The result of a foreground run that ended (or was stopped).
pub(super) fn run_result(spec: &Spec, outcome: Outcome, streams: &Mutex<Streams>) -> RunResult {
    let Outcome {
        status,
        stop,
        survivors,
        group,
        leader_cpu,
        read_only_mounts,
        // A command's tree is not watched past its run.
        tree_empty: _,
    } = outcome;
    let ending = governed(
        ExitFields::from(status),
        &spec.limits,
        stop,
        status,
        group,
        leader_cpu,
    );
    let streams = lock(streams);
    let stderr = streams.stderr.collected();
    let sandbox = confine::facts(
        spec.sandbox_policy.as_ref(),
        read_only_mounts,
        ending.exit_code,
        &stderr.text,
    );
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

/// Drives `run` while calling `check`'s function every its period (see
/// [`BlockingRun::wait_checked`]); `interrupt` stops the run.
pub(super) async fn checked<F: std::future::Future<Output = Result<RunResult>>>(
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

/// What may stop a foreground run from outside: the caller's
/// cancellation and the run's future being dropped (or the blocking
/// caller interrupted); `active` counts the run for `dispose` while it
/// lasts.
pub(super) struct RunStops {
    pub cancel: Option<CancelToken>,
    pub on_drop: CancelToken,
    pub active: ActiveRun,
    /// The id a hand-over registers the process as (`run_as`).
    pub background_id: Option<Reservation>,
    /// Shown the output as it arrives, until the run ends or is handed
    /// over, and what holds the command back meanwhile (`run_streamed`).
    pub tap: Option<(OutputTap, Option<Arc<OutputValve>>)>,
}

impl RunStops {
    fn new(active: ActiveRun, cancel: Option<&CancelToken>, on_drop: &CancelToken) -> RunStops {
        RunStops {
            cancel: cancel.cloned(),
            on_drop: on_drop.clone(),
            active,
            background_id: None,
            tap: None,
        }
    }

    /// Resolves when the caller's token fires; never without one.
    async fn caller_cancelled(cancel: &Option<CancelToken>) {
        match cancel {
            Some(c) => c.cancelled().await,
            None => std::future::pending().await,
        }
    }
}

impl ExecutorInner {
    pub(super) async fn run_task(
        self: Arc<Self>,
        spec: Spec,
        host_env: HostEnv,
        stops: RunStops,
    ) -> Result<RunResult> {
        if spec.on_expiry == OnExpiry::Background {
            return self.run_handing_over(spec, host_env, stops).await;
        }
        let (tag, spawned) = self.launch_run(&spec, host_env)?;
        self.supervise_run(spec, tag, spawned, stops).await
    }

    /// The synchronous half of a foreground run: the command is asked for.
    pub(super) fn launch_run(&self, spec: &Spec, host_env: HostEnv) -> Result<(String, LaunchedCommand)> {
        let tag = self.next_tag();
        let spawned = launch(spec, host_env, &tag, &self.supervisors)?;
        Ok((tag, spawned))
    }

    /// The rest of a foreground run, from the launched command to its result.
    pub(super) async fn supervise_run(
        self: Arc<Self>,
        spec: Spec,
        tag: String,
        spawned: LaunchedCommand,
        stops: RunStops,
    ) -> Result<RunResult> {
        let RunStops {
            cancel,
            on_drop,
            active: _active,
            background_id: _,
            tap,
        } = stops;
        let streams = self.streams(spec.stdout_max_bytes);
        if let Some((tap, valve)) = tap {
            let mut s = lock(&streams);
            (s.tap, s.valve) = (Some(tap), valve);
        }
        let stop = async {
            tokio::select! {
                _ = RunStops::caller_cancelled(&cancel) => Stop::Cancel,
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
    pub(super) async fn run_handing_over(
        self: Arc<Self>,
        spec: Spec,
        host_env: HostEnv,
        stops: RunStops,
    ) -> Result<RunResult> {
        let tag = self.next_tag();
        let spawned = launch(&spec, host_env, &tag, &self.supervisors)?;
        let read_only_mounts = spawned.read_only_mounts;
        let process = self.new_process(&spec, spec.stdout_max_bytes);
        if let Some((tap, valve)) = stops.tap.clone() {
            let mut s = lock(&process.shared.streams);
            (s.tap, s.valve) = (Some(tap), valve);
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<Result<RunResult>>();
        let shared = self;
        runtime::handle().spawn(async move {
            let RunStops {
                cancel,
                on_drop,
                active: _active,
                background_id,
                tap: _,
            } = stops;
            let mut tx = Some(tx);
            let handed = |p: &Process| p.shared.id.get().is_some();
            let mut stop_rx = process.shared.stop_tx.subscribe();
            let stop = async {
                let caller = RunStops::caller_cancelled(&cancel);
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
                if !shared.register(&process, background_id.as_ref()) {
                    return false;
                }
                let result = {
                    let mut streams = lock(&process.shared.streams);
                    // The run is over: what comes next is read from the registry.
                    (streams.tap, streams.valve) = (None, None);
                    let stdout = streams.stdout.hand_over(config.max_output_bytes);
                    let stderr = streams.stderr.hand_over(config.max_output_bytes);
                    RunResult {
                        exit_code: None,
                        signal: None,
                        exit_status_unavailable: false,
                        timed_out: true,
                        aborted: false,
                        timeout_ms: spec.timeout_ms,
                        sandbox: confine::facts(
                            spec.sandbox_policy.as_ref(),
                            read_only_mounts,
                            None,
                            &stderr.text,
                        ),
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
                    Ok(outcome) => {
                        background_ending(spec.sandbox_policy.as_ref(), &spec.limits, &process, outcome)
                    }
                    Err(e) => failed_ending(&process, Some(DshError::from(e).to_string()), None),
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
}

impl Executor {
    pub(super) fn admit_run(&self, spec: &Spec, cancel: Option<&CancelToken>) -> Result<ActiveRun> {
        let active = self.shared().admit(|config| spec.check(config), cancel)?;
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
        self.run_registering(spec, cancel, None, None)
    }

    /// [`Executor::run`] whose hand-over at the timeout (`on_expiry`
    /// background) registers the process as `background_id` instead of the
    /// next `bash-N`; the id is held from now on, so nothing else takes
    /// it, and freed if the run ends without a hand-over. An id that is
    /// empty or held is [`DshError::InvalidArgument`] on `spec.id`.
    pub fn run_as(&self, spec: &Spec, cancel: Option<&CancelToken>, background_id: &str) -> RunFuture {
        match self.shared().reserve(background_id) {
            Ok(r) => self.run_registering(spec, cancel, Some(r), None),
            Err(e) => RunFuture {
                inner: RunFutureInner::Failed(Some(e)),
            },
        }
    }

    /// [`Executor::run`] (or [`Executor::run_as`], given a `background_id`)
    /// that shows `tap` the output as it arrives, each chunk once and in
    /// order per stream, all of it before the run's future resolves (and
    /// nothing after a hand-over). The result is the same as without a
    /// tap: the tap sees every byte, the result keeps what the caps keep.
    /// While `valve` is shut the output is not read (see [`OutputValve`]).
    pub fn run_streamed(
        &self,
        spec: &Spec,
        cancel: Option<&CancelToken>,
        background_id: Option<&str>,
        tap: OutputTap,
        valve: Option<Arc<OutputValve>>,
    ) -> RunFuture {
        let reservation = match background_id.map(|id| self.shared().reserve(id)).transpose() {
            Ok(r) => r,
            Err(e) => {
                return RunFuture {
                    inner: RunFutureInner::Failed(Some(e)),
                }
            }
        };
        self.run_registering(spec, cancel, reservation, Some((tap, valve)))
    }

    fn run_registering(
        &self,
        spec: &Spec,
        cancel: Option<&CancelToken>,
        background_id: Option<Reservation>,
        tap: Option<(OutputTap, Option<Arc<OutputValve>>)>,
    ) -> RunFuture {
        let active = match self.admit_run(spec, cancel) {
            Ok(a) => a,
            Err(e) => {
                return RunFuture {
                    inner: RunFutureInner::Failed(Some(e)),
                }
            }
        };
        let on_drop = CancelToken::new();
        let mut stops = RunStops::new(active, cancel, &on_drop);
        stops.background_id = background_id;
        stops.tap = tap;
        let task = runtime::handle().spawn(self.shared().clone().run_task(
            spec.clone(),
            HostEnv::capture(),
            stops,
        ));
        RunFuture {
            inner: RunFutureInner::Running { task, on_drop },
        }
    }

    /// [`Executor::run`] for hosts with their own event loop (Python's
    /// asyncio): returns at once and calls `on_done` with the outcome on
    /// the callback thread.
    pub fn run_callback(
        &self,
        spec: &Spec,
        cancel: Option<&CancelToken>,
        on_done: impl FnOnce(Result<RunResult>) + Send + 'static,
    ) {
        self.run_io_callback(spec, cancel, move |outcome| {
            callbacks::dispatch(move || on_done(outcome))
        });
    }

    /// [`Executor::run`] for a host whose hand-off to its own event loop
    /// is thread-safe and never blocks (Node's promises): returns at once
    /// and calls `on_done` with the outcome on one of the core's I/O
    /// threads, with no hop through the callback thread. `on_done` must
    /// return quickly and must not block.
    pub fn run_io_callback(
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
            RunStops::new(active, cancel, &CancelToken::new()),
        );
        runtime::handle().spawn(async move { on_done(run.await) });
    }

    /// [`Executor::run`] on a host's own event loop (see [`HostLoop`]): the
    /// command is asked for on the calling thread, and its events are read
    /// there, by [`HostLoop::poll`], whenever `host.fd()` is readable.
    /// Only for specs that [`Spec::runs_on_host_loop`]; the others go
    /// through [`Executor::run_io_callback`].
    pub fn run_on_host_loop(
        &self,
        host: &HostLoop,
        spec: &Spec,
        cancel: Option<&CancelToken>,
    ) -> Result<HostRun> {
        if !spec.runs_on_host_loop() {
            return Err(DshError::Internal(
                "run_on_host_loop was given a spec that writes stdin or hands over at its timeout".into(),
            ));
        }
        let active = self.admit_run(spec, cancel)?;
        let shared = self.shared().clone();
        let (tag, spawned) = shared.launch_run(spec, HostEnv::capture())?;
        let fds = spawned.watched_fds();
        let on_drop = CancelToken::new();
        let run = shared.supervise_run(
            spec.clone(),
            tag,
            spawned,
            RunStops::new(active, cancel, &on_drop),
        );
        Ok(HostRun::watching(host, true, &fds, run, on_drop))
    }

    /// [`Executor::run`] for threads that are not in an async runtime.
    pub fn run_blocking(&self, spec: &Spec, cancel: Option<&CancelToken>) -> Result<RunResult> {
        self.ask_blocking(spec, cancel)?.wait()
    }

    /// The first half of [`Executor::run_blocking`], for a host that must
    /// let go of something of its own while it waits (Python's GIL): the
    /// run is admitted and the host's environment read here, on the
    /// calling thread inside its call, where the host keeps its other
    /// threads from rewriting the environment; the command starts when
    /// [`BlockingRun::wait`] is first called. A `BlockingRun` dropped
    /// unwaited starts nothing.
    pub fn ask_blocking(&self, spec: &Spec, cancel: Option<&CancelToken>) -> Result<BlockingRun> {
        // The thread's reactor first: if the kernel refuses it, nothing
        // was admitted or started.
        runtime::reactor_here()?;
        let active = self.admit_run(spec, cancel)?;
        let interrupt = CancelToken::new();
        let task = self.shared().clone().run_task(
            spec.clone(),
            HostEnv::capture(),
            RunStops::new(active, cancel, &interrupt),
        );
        Ok(BlockingRun {
            task: Box::pin(task),
            writes_stdin: spec.stdin.is_some() || spec.stdin_pipe,
            interrupt,
        })
    }
}

/// A foreground run asked for by [`Executor::ask_blocking`], started and
/// waited for by a blocking `wait`.
pub struct BlockingRun {
    task: Pin<Box<dyn Future<Output = Result<RunResult>> + Send>>,
    writes_stdin: bool,
    interrupt: CancelToken,
}

impl BlockingRun {
    /// Runs the command and blocks until its result.
    pub fn wait(self) -> Result<RunResult> {
        self.wait_inner(None)
    }

    /// [`BlockingRun::wait`] for a host that must look at something of its
    /// own while it waits (Python's Ctrl-C): `interrupted` is called on
    /// the calling thread every `every`, and once it returns true the run
    /// is stopped as a cancellation would stop it, and still waited for.
    pub fn wait_checked(self, every: Duration, mut interrupted: impl FnMut() -> bool) -> Result<RunResult> {
        self.wait_inner(Some((every, &mut interrupted)))
    }

    fn wait_inner(self, check: Option<(Duration, &mut dyn FnMut() -> bool)>) -> Result<RunResult> {
        // Refused here (in an async context, a callback) before anything
        // starts: spawning the stdin-writing task below would start the
        // command at once.
        runtime::reactor_here()?;
        let BlockingRun {
            task,
            writes_stdin,
            interrupt,
        } = self;
        if writes_stdin {
            // Writing stdin may raise SIGPIPE: do it on the core's threads.
            let joined = runtime::spawned(task);
            runtime::block_on_here(checked(async move { joined.await? }, check, interrupt))?
        } else {
            // No pipe written: the calling thread's own reactor drives it.
            runtime::block_on_here(checked(task, check, interrupt))?
        }
    }
}

//! What a foreground run gives back: the result, and the future of an
//! async run (which aborts its command when dropped).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::task::JoinHandle;

use crate::host::cancel::CancelToken;
use crate::spec::error::{DshError, Result};
use crate::spec::limits::{LimitKind, LimitsEnforcement};
use crate::spec::sandbox::SandboxInfo;
use crate::watch::output::CollectedOutput;

/// The outcome of one foreground run. A nonzero exit, a timeout and an abort
/// are all results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    /// `None` when the command died from a signal.
    pub exit_code: Option<i32>,
    /// The terminating signal's name (`SIGTERM`), or `None`.
    pub signal: Option<String>,
    /// The command ran and ended, but nobody could say how: the executor's
    /// supervisor, its parent, was itself killed (see
    /// `docs/host-death.md`). `exit_code` and `signal` are then both `None`,
    /// and the output is complete.
    pub exit_status_unavailable: bool,
    /// The executor's own timeout fired first.
    pub timed_out: bool,
    /// The caller's cancellation (or the executor's disposal) fired first.
    pub aborted: bool,
    /// The effective timeout of this run.
    pub timeout_ms: u64,
    /// The command's stdout: its tail, and the spill file if truncated.
    pub stdout: CollectedOutput,
    /// The command's stderr, kept the same way.
    pub stderr: CollectedOutput,
    /// Present iff the spec carried a sandbox policy.
    pub sandbox: Option<SandboxInfo>,
    /// After a timeout, a cancellation or disposal: how many processes of
    /// the command's tree were still alive when the stop finished (after
    /// the final SIGKILL sweep). Expected 0; anything else means something
    /// could not be killed (a process stuck in the kernel) and a harness
    /// should warn instead of trusting. 0 for a command that was not
    /// stopped (it ended by itself; `server &` left running is not a
    /// survivor: see `dispose`).
    pub survivors: u32,
    /// Set when the timeout was reached with `on_expiry` background: the
    /// command was not stopped but handed over to the registry under this
    /// id (`timed_out` is true, `exit_code` and `signal` are `None`). Its
    /// consuming reads start right after this result's output.
    pub background_id: Option<String>,
    /// The limit that ended the command, as the kernel reported it
    /// (docs/limits.md); `None` when no limit did. Never together with
    /// `timed_out` or `aborted`.
    pub limit: Option<LimitKind>,
    /// The mechanism that enforced each limit the command ran with.
    pub limits_enforcement: LimitsEnforcement,
}

/// The future of [`Executor::run`](crate::Executor::run). Dropping it before completion aborts the
/// command (with the usual escalation).
pub struct RunFuture {
    pub(crate) inner: RunFutureInner,
}

pub(crate) enum RunFutureInner {
    /// Refused before it started.
    Failed(Option<DshError>),
    Running {
        task: JoinHandle<Result<RunResult>>,
        on_drop: CancelToken,
    },
}

impl Future for RunFuture {
    type Output = Result<RunResult>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.inner {
            RunFutureInner::Failed(e) => {
                Poll::Ready(Err(e.take().expect("RunFuture polled after completion")))
            }
            RunFutureInner::Running { task, .. } => Pin::new(task)
                .poll(cx)
                .map(|r| r.unwrap_or_else(|e| Err(DshError::Internal(format!("run task failed: {e}"))))),
        }
    }
}

impl Drop for RunFuture {
    fn drop(&mut self) {
        if let RunFutureInner::Running { task, on_drop } = &self.inner {
            if !task.is_finished() {
                on_drop.cancel();
            }
        }
    }
}

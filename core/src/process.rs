//! A background process handle (§6): live status, consuming reads, kill,
//! and a completion that settles exactly once and never fails.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::sandbox::SandboxInfo;
use crate::supervise::{Stop, Streams};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Running,
    Completed,
    Killed,
}

impl Status {
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
    pub stdout_spill_path: Option<String>,
    pub stderr_spill_path: Option<String>,
}

pub(crate) struct State {
    pub status: Status,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub sandbox: Option<SandboxInfo>,
    pub settled: bool,
}

pub(crate) struct ProcessShared {
    pub id: String,
    pub command: String,
    pub owner: Option<String>,
    pub state: Mutex<State>,
    /// Signalled (with `state`) when the process settles, for blocking waiters.
    pub settled_cv: Condvar,
    /// The same event for async waiters.
    pub settled_tx: watch::Sender<bool>,
    pub streams: Mutex<Streams>,
    /// Set once, by the first stop request.
    pub stop_tx: watch::Sender<Option<Stop>>,
}

/// A cheap, cloneable handle to one background process.
#[derive(Clone)]
pub struct Process {
    pub(crate) shared: Arc<ProcessShared>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("Process")
            .field("id", &self.shared.id)
            .field("status", &s.status)
            .field("exit_code", &s.exit_code)
            .field("signal", &s.signal)
            .finish()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `delta` per §6: stdout part, then — only when the stderr part is
/// non-empty — a newline if the stdout part lacks one, `[stderr]\n`, stderr.
pub(crate) fn compose_delta(stdout: String, stderr: &str) -> String {
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

    pub fn id(&self) -> &str {
        &self.shared.id
    }

    pub fn command(&self) -> &str {
        &self.shared.command
    }

    pub fn owner(&self) -> Option<&str> {
        self.shared.owner.as_deref()
    }

    pub fn status(&self) -> Status {
        self.state().status
    }

    /// `None` while running and when ended by a signal.
    pub fn exit_code(&self) -> Option<i32> {
        self.state().exit_code
    }

    /// The terminating signal's name (`SIGTERM`), when ended by one.
    pub fn signal(&self) -> Option<String> {
        self.state().signal.clone()
    }

    /// Sandbox facts, stamped at settlement (absent while running and when
    /// the process ran unconfined without a policy).
    pub fn sandbox(&self) -> Option<SandboxInfo> {
        self.state().sandbox.clone()
    }

    /// True once the process has settled (`done`).
    pub fn is_settled(&self) -> bool {
        self.state().settled
    }

    /// Consuming read: what arrived since the previous call, never the same
    /// bytes twice; keeps working after exit.
    pub fn read_output(&self) -> ProcessRead {
        let mut s = lock(&self.shared.streams);
        let (out, out_lossy) = s.stdout.take_unread();
        let (err, err_lossy) = s.stderr.take_unread();
        ProcessRead {
            delta: compose_delta(out, &err),
            lossy: out_lossy || err_lossy,
            stdout_spill_path: s.stdout.spill_path(),
            stderr_spill_path: s.stderr.spill_path(),
        }
    }

    /// Begins termination (SIGTERM, SIGKILL after the grace period). True when
    /// the process was running and this call began it; false otherwise.
    pub fn kill(&self) -> bool {
        self.request_stop(Stop::Kill)
    }

    pub(crate) fn request_stop(&self, reason: Stop) -> bool {
        {
            let mut s = self.state();
            if s.status != Status::Running {
                return false;
            }
            s.status = Status::Killed;
        }
        self.shared.stop_tx.send_replace(Some(reason));
        true
    }

    /// Completes when the process has settled. Never fails.
    pub async fn wait(&self) {
        let mut rx = self.shared.settled_tx.subscribe();
        // The sender lives in `shared`, which `self` keeps alive.
        let _ = rx.wait_for(|settled| *settled).await;
    }

    /// Calls `f` from a core thread once the process has settled (at once,
    /// on that thread, if it already has); for hosts with their own loop.
    pub fn when_settled(&self, f: impl FnOnce() + Send + 'static) {
        let this = self.clone();
        crate::runtime::handle().spawn(async move {
            this.wait().await;
            f();
        });
    }

    /// Blocks until settled or until `timeout` passes (`None`: no limit).
    /// Returns whether it settled.
    pub fn wait_timeout(&self, timeout: Option<Duration>) -> bool {
        let guard = self.state();
        match timeout {
            None => {
                let _g = self
                    .shared
                    .settled_cv
                    .wait_while(guard, |s| !s.settled)
                    .unwrap_or_else(|e| e.into_inner());
                true
            }
            Some(t) => {
                let (g, _) = self
                    .shared
                    .settled_cv
                    .wait_timeout_while(guard, t, |s| !s.settled)
                    .unwrap_or_else(|e| e.into_inner());
                g.settled
            }
        }
    }

    /// Records the end exactly once. `status` stays `killed` if a stop was
    /// requested; any signal death is `killed` too.
    pub(crate) fn settle(
        &self,
        exit_code: Option<i32>,
        signal: Option<String>,
        sandbox: Option<SandboxInfo>,
        before_done: impl FnOnce(&Process),
    ) {
        {
            let mut s = self.state();
            if s.settled {
                return;
            }
            if signal.is_some() {
                s.status = Status::Killed;
            } else if s.status == Status::Running {
                s.status = Status::Completed;
            }
            s.exit_code = exit_code;
            s.signal = signal;
            s.sandbox = sandbox;
        }
        before_done(self);
        let mut s = self.state();
        s.settled = true;
        self.shared.settled_cv.notify_all();
        drop(s);
        self.shared.settled_tx.send_replace(true);
    }
}

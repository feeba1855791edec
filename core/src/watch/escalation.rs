//! The one escalation of a stop, shared by foreground runs, background
//! processes, terminal sessions and dispose: SIGTERM at once, SIGKILL when
//! the grace period is over, then whatever is left of the tree swept until
//! a scan finds nobody. The callers send the signals (they know the
//! leader's pid, group and session); this keeps when and what happened.

use std::time::Duration;

use tokio::time::Instant;

use crate::host::runtime::timer;
use crate::launch::sweeper::sweep_counted;
use crate::launch::tree::{signal_group, TagMatch};

/// Why termination began; the first one wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Timeout,
    /// The caller's cancellation.
    Cancel,
    /// `kill()` on a background process.
    Kill,
    /// The executor is being disposed; it sweeps every tag itself, so the
    /// per-command `/proc` sweep is skipped.
    Dispose,
    /// The kernel says a limit of the command's cgroups was reached: the
    /// tree is killed at once (SIGKILL, no grace), as the OOM killer would.
    Limit(crate::spec::limits::LimitKind),
}

/// The command's tree for a sweep: its tag, and its session (its leader
/// `pid` is unreaped while this is used, so the session id is its own).
pub(crate) fn tree(pid: libc::pid_t, tag: &str) -> TagMatch {
    TagMatch::command(tag).in_session(pid)
}

/// How long after its SIGKILL a stop waits for the leader's exit before it
/// gives up on it: a leader stuck in the kernel (or frozen) takes no
/// signal, and a run, a process or a session must still settle. It then
/// settles with the leader counted in `survivors` and its exit status
/// unavailable (docs/running.md, "Survivors").
pub const KILL_GIVE_UP: Duration = Duration::from_secs(2);

/// Where one command's stop stands.
#[derive(Debug, Default)]
pub(crate) struct Escalation {
    stopped: Option<Stop>,
    kill_at: Option<Instant>,
    /// When the SIGKILL went out (none yet: not killed).
    killed_at: Option<Instant>,
}

impl Escalation {
    /// Why it is being stopped, once a stop began.
    pub(crate) fn stopped(&self) -> Option<Stop> {
        self.stopped
    }

    /// A stop begins: the caller sends SIGTERM now; SIGKILL is due after
    /// `grace`.
    pub(crate) fn begin(&mut self, reason: Stop, grace: Duration) {
        self.stopped = Some(reason);
        self.kill_at = Some(Instant::now() + grace);
    }

    /// A stop that kills at once, with no grace (a reached limit): the
    /// caller sends SIGKILL now.
    pub(crate) fn begin_killed(&mut self, reason: Stop) {
        self.stopped = Some(reason);
        self.killed();
    }

    /// When the SIGKILL is due, while it has not been sent.
    pub(crate) fn kill_due(&self) -> Option<Instant> {
        self.kill_at.filter(|_| self.killed_at.is_none())
    }

    /// The caller sent the SIGKILL.
    pub(crate) fn killed(&mut self) {
        self.killed_at.get_or_insert_with(Instant::now);
    }

    /// When a leader that has not exited since its SIGKILL is given up on.
    pub(crate) fn give_up_at(&self) -> Option<Instant> {
        self.killed_at.map(|at| at + KILL_GIVE_UP)
    }

    /// Finishes a stop once the leader `pid` has exited (it is still
    /// unreaped): what is left of its tree gets the rest of the grace
    /// period, then SIGKILL, repeated until a scan finds nobody. Returns how
    /// many processes of the tree that last scan still found alive: the
    /// survivors (expected: 0). Nothing to do when no stop began.
    pub(crate) async fn finish(&self, pid: libc::pid_t, tag: &str) -> u32 {
        if self.stopped.is_none() {
            return 0;
        }
        if self.killed_at.is_none() {
            // Usually the SIGTERM ended everything: one scan says so.
            if sweep_counted(tree(pid, tag), 0).await.total == 0 {
                return 0;
            }
            if let Some(at) = self.kill_at {
                timer(|| tokio::time::sleep_until(at)).await;
            }
            signal_group(pid, libc::SIGKILL);
        }
        sweep_counted(tree(pid, tag), libc::SIGKILL).await.last as u32
    }
}

/// The end of an escalation for what a sweep finds, after its SIGTERM: waits
/// until a scan finds nobody or `deadline` passes, then SIGKILLs what is
/// left; returns how many the last scan still found alive.
pub(crate) async fn kill_after(matcher: TagMatch, deadline: Instant) -> u32 {
    while sweep_counted(matcher.clone(), 0).await.total > 0 && Instant::now() < deadline {
        timer(|| tokio::time::sleep(Duration::from_millis(20))).await;
    }
    sweep_counted(matcher, libc::SIGKILL).await.last as u32
}

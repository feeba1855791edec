//! Sandbox policy at run time: whether a policy can be enforced, the spawn
//! that enforces it, and the facts a result reports. Confined modes fail
//! closed: nothing runs unconfined by accident.

use std::io;

use crate::error::{DshError, Result};
use crate::landlock;
use crate::sandbox::{SandboxInfo, SandboxMode, SandboxPolicy};

fn confined(policy: Option<&SandboxPolicy>) -> Option<&SandboxPolicy> {
    policy.filter(|p| p.mode != SandboxMode::DangerFullAccess)
}

/// Fail closed: a confined mode on a kernel without Landlock is an error.
pub(crate) fn check(policy: Option<&SandboxPolicy>) -> Result<()> {
    match confined(policy) {
        None => Ok(()),
        Some(p) => landlock::abi()
            .map(|_| ())
            .map_err(|why| DshError::SandboxUnavailable(format!("{} needs Landlock: {why}", p.mode))),
    }
}

/// Runs `spawn` unconfined, or — for a confined policy — on a thread made
/// for it that first restricts itself, so the child (and every descendant)
/// inherits the Landlock domain while the host's threads stay free. An
/// outer error means confinement could not be applied and nothing ran.
pub(crate) fn spawn_under<T: Send>(
    policy: Option<&SandboxPolicy>,
    spawn: impl FnOnce() -> io::Result<T> + Send,
) -> Result<io::Result<T>> {
    let Some(policy) = confined(policy) else {
        return Ok(spawn());
    };
    let unavailable = |why: String| DshError::SandboxUnavailable(format!("{}: {why}", policy.mode));
    let ruleset = landlock::ruleset(policy).map_err(unavailable)?;
    std::thread::scope(|scope| {
        let confined_spawn = std::thread::Builder::new()
            .name("dsh-confine".into())
            .spawn_scoped(scope, move || {
                landlock::restrict_current_thread(&ruleset)
                    .map_err(|e| format!("cannot apply the Landlock ruleset: {e}"))?;
                Ok::<_, String>(spawn())
            })
            .map_err(|e| unavailable(format!("cannot start the confining thread: {e}")))?;
        match confined_spawn.join() {
            Ok(outcome) => outcome.map_err(unavailable),
            Err(_) => Err(DshError::Internal("the confining thread panicked".into())),
        }
    })
}

/// The conservative denial classification: a failed exit (not a signal)
/// whose collected stderr carries a filesystem-permission signature.
fn looks_denied(exit_code: Option<i32>, stderr: &str) -> bool {
    matches!(exit_code, Some(c) if c != 0)
        && [
            "Permission denied",
            "Read-only file system",
            "Operation not permitted",
        ]
        .iter()
        .any(|sig| stderr.contains(sig))
}

/// The facts one policy reports; the enforcement level is the kernel's,
/// and absent for an unconfined mode.
fn info(policy: &SandboxPolicy, denied: bool, runner_failed: Option<bool>) -> SandboxInfo {
    SandboxInfo {
        mode: policy.mode,
        denied,
        enforcement: confined(Some(policy)).and_then(|_| landlock::enforcement()),
        runner_failed,
    }
}

/// Facts for a command that ran under `policy`.
pub(crate) fn facts(
    policy: Option<&SandboxPolicy>,
    exit_code: Option<i32>,
    stderr: &str,
) -> Option<SandboxInfo> {
    let policy = policy?;
    let denied = confined(Some(policy)).is_some() && looks_denied(exit_code, stderr);
    Some(info(policy, denied, None))
}

/// Facts for a background command whose confinement failed: it never ran.
pub(crate) fn runner_failed_facts(
    policy: Option<&SandboxPolicy>,
    runner_failed: bool,
) -> Option<SandboxInfo> {
    Some(info(policy?, false, runner_failed.then_some(true)))
}

//! Sandbox policy at run time: whether a policy can be enforced, and the
//! facts a result reports. Confined modes fail closed until native Landlock
//! enforcement exists (issue 8): nothing runs unconfined by accident.

use crate::error::{DshError, Result};
use crate::sandbox::{SandboxInfo, SandboxMode, SandboxPolicy};

/// Fail closed: a confined mode that cannot be enforced is an error.
pub(crate) fn check(policy: Option<&SandboxPolicy>) -> Result<()> {
    match policy.map(|p| p.mode) {
        None | Some(SandboxMode::DangerFullAccess) => Ok(()),
        Some(mode) => Err(DshError::SandboxUnavailable(format!(
            "{mode} needs Landlock confinement, which this build cannot apply"
        ))),
    }
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

/// Facts for a command that ran under `policy`.
pub(crate) fn facts(
    policy: Option<&SandboxPolicy>,
    exit_code: Option<i32>,
    stderr: &str,
) -> Option<SandboxInfo> {
    let policy = policy?;
    let confined = policy.mode != SandboxMode::DangerFullAccess;
    Some(SandboxInfo {
        mode: policy.mode,
        denied: confined && looks_denied(exit_code, stderr),
        enforcement: None,
        runner_failed: None,
    })
}

/// Facts for a background command that never ran.
pub(crate) fn runner_failed_facts(
    policy: Option<&SandboxPolicy>,
    runner_failed: bool,
) -> Option<SandboxInfo> {
    let policy = policy?;
    Some(SandboxInfo {
        mode: policy.mode,
        denied: false,
        enforcement: None,
        runner_failed: runner_failed.then_some(true),
    })
}

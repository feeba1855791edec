//! Sandbox policy at run time: whether a policy can be enforced, the spawn
//! that enforces it, and the facts a result reports. Confined modes fail
//! closed: nothing runs unconfined by accident.

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

/// The Landlock ruleset a command of `policy` restricts itself with before
/// it execs (`None`: unconfined). An error means confinement cannot be
/// applied, and nothing may run.
pub(crate) fn ruleset(policy: Option<&SandboxPolicy>) -> Result<Option<landlock::Ruleset>> {
    let Some(policy) = confined(policy) else {
        return Ok(None);
    };
    landlock::ruleset(policy)
        .map(Some)
        .map_err(|why| DshError::SandboxUnavailable(format!("{}: {why}", policy.mode)))
}

/// The error for a command whose restriction failed in its own process.
pub(crate) fn restrict_failed(policy: Option<&SandboxPolicy>, errno: i32) -> DshError {
    let mode = confined(policy).map_or("sandbox".to_owned(), |p| p.mode.to_string());
    DshError::SandboxUnavailable(format!(
        "{mode}: cannot apply the Landlock ruleset: {}",
        std::io::Error::from_raw_os_error(errno)
    ))
}

/// The conservative denial classification: a failed exit (not a signal)
/// whose collected stderr carries a filesystem-permission signature, in any
/// case: C tools write "Permission denied", Node and Go "permission denied".
fn looks_denied(exit_code: Option<i32>, stderr: &str) -> bool {
    let stderr = stderr.to_ascii_lowercase();
    matches!(exit_code, Some(c) if c != 0)
        && [
            "permission denied",
            "read-only file system",
            "operation not permitted",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(mode: SandboxMode) -> SandboxPolicy {
        SandboxPolicy {
            mode,
            workspace_root: "/srv/ws".into(),
            session_id: None,
        }
    }

    #[test]
    fn a_denial_is_a_failed_exit_with_a_permission_signature_on_stderr() {
        for stderr in [
            "cp: cannot create regular file '/etc/out': Permission denied\n",
            "bash: line 1: /usr/x: Read-only file system\n",
            "touch: setting times of 'x': Operation not permitted\n",
            "noise\nmore noise\nmkdir: cannot create directory 'd': Permission denied\ntrailer\n",
            "Error: EACCES: permission denied, open '/etc/x'\n",
            "open /etc/x: read-only file system\n",
            "PermissionError: [Errno 1] Operation not permitted: 'x'\n",
        ] {
            for code in [1, 2, 126, 255] {
                assert!(looks_denied(Some(code), stderr), "exit {code}: {stderr:?}");
            }
        }
    }

    #[test]
    fn never_a_denial_without_a_failed_exit_or_without_the_signature() {
        let signature = "sh: /etc/x: Permission denied\n";
        assert!(!looks_denied(Some(0), signature), "a clean exit is never denied");
        assert!(
            !looks_denied(None, signature),
            "a signal death (or an unknown status) is not an exit"
        );
        for stderr in [
            "",
            "cat: /nope: No such file or directory\n",
            "make: *** [all] Error 2\n",
            "Permission\ndenied\n",
        ] {
            assert!(!looks_denied(Some(1), stderr), "{stderr:?}");
        }
    }

    #[test]
    fn facts_only_for_a_policy_and_denied_only_when_confined() {
        let denied_stderr = "echo: write error: Permission denied\n";
        assert_eq!(facts(None, Some(1), denied_stderr), None, "no policy, no facts");

        let full = facts(
            Some(&policy(SandboxMode::DangerFullAccess)),
            Some(1),
            denied_stderr,
        )
        .unwrap();
        assert_eq!(
            (full.mode, full.denied, full.enforcement, full.runner_failed),
            (SandboxMode::DangerFullAccess, false, None, None),
            "an unconfined command is never classified as denied and reports no enforcement"
        );

        for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
            let p = policy(mode);
            let info = facts(Some(&p), Some(1), denied_stderr).unwrap();
            assert_eq!((info.mode, info.denied, info.runner_failed), (mode, true, None));
            assert_eq!(info.enforcement, landlock::enforcement(), "the kernel's level");
            assert!(!facts(Some(&p), Some(0), denied_stderr).unwrap().denied);
            assert!(!facts(Some(&p), None, denied_stderr).unwrap().denied);
            assert!(!facts(Some(&p), Some(1), "failed\n").unwrap().denied);
        }
    }

    #[test]
    fn runner_failed_facts_say_the_command_never_ran() {
        assert_eq!(runner_failed_facts(None, true), None);
        let p = policy(SandboxMode::WorkspaceWrite);
        let failed = runner_failed_facts(Some(&p), true).unwrap();
        assert_eq!(
            (failed.mode, failed.denied, failed.runner_failed),
            (SandboxMode::WorkspaceWrite, false, Some(true))
        );
        // A spawn failure that was not the sandbox's (a missing workdir).
        let other = runner_failed_facts(Some(&p), false).unwrap();
        assert_eq!((other.denied, other.runner_failed), (false, None));
    }
}

//! Preparing and spawning one command: its environment, its shell, its
//! confinement, and the error a caller can act on when it cannot start.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::confine;
use crate::env::{child_environment, path_of, terminal_environment, HostEnv};
use crate::error::{errno_name, DshError, Result, SpawnFailure};
use crate::pty::Pty;
use crate::request::Spec;
use crate::sandbox::SandboxPolicy;
use crate::spawn::{find_program, find_shell, Pipes, Spawned};
use crate::supervisor::{ChildFds, Leader, Pending, Slot, SpawnError, StartFailed, Step, Supervisor};
use crate::terminal::{TerminalProgram, TerminalSpec};
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Turns a spawn error into the error a caller can act on: a missing or
/// unusable workdir names the path; anything else names the errno.
pub(crate) fn spawn_error(err: std::io::Error, workdir: &Path) -> DshError {
    let shown = workdir.display();
    let errno = err.raw_os_error().unwrap_or(libc::EIO);
    match std::fs::metadata(workdir) {
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(errno);
            DshError::Spawn {
                kind: SpawnFailure::Workdir,
                errno,
                message: format!("{}: cannot use workdir {shown}: {e}", errno_name(errno)),
            }
        }
        Ok(m) if !m.is_dir() => DshError::Spawn {
            kind: SpawnFailure::Workdir,
            errno: libc::ENOTDIR,
            message: format!("ENOTDIR: workdir {shown} is not a directory"),
        },
        Ok(_) => DshError::Spawn {
            kind: SpawnFailure::Os,
            errno,
            message: format!("{}: {err}", errno_name(errno)),
        },
    }
}

/// Environment, shell lookup, confinement and the spawn, in the executor's
/// supervisor (`supervisors`), of one command. The request goes to the
/// supervisor first, and the environment is built while it wakes up. A
/// supervisor that was killed is replaced once, transparently: the request
/// never reached it, so nothing ran.
pub(crate) fn launch(spec: &Spec, host_env: HostEnv, tag: &str, supervisors: &Slot) -> Result<Spawned> {
    // Both were checked for NUL bytes by resolve / Spec::check.
    let command = CString::new(spec.command.as_str())
        .map_err(|_| DshError::Internal("NUL in checked command".into()))?;
    let workdir = CString::new(spec.workdir.as_os_str().as_bytes())
        .map_err(|_| DshError::Internal("NUL in checked workdir".into()))?;
    let ruleset = confine::ruleset(spec.sandbox_policy.as_ref())?;
    let os_error = |e: std::io::Error| spawn_error(e, &spec.workdir);
    let pipes = Pipes::new(spec.stdin.is_some()).map_err(os_error)?;
    let fds = pipes.child_fds(ruleset.as_ref().map(|r| r.fd()));
    let pending = begin(supervisors, &fds, |e| {
        failed(e, &spec.workdir, spec.sandbox_policy.as_ref())
    })?;
    // Dropping `pending` on an error below cancels the request.
    let envp = child_environment(host_env, spec, tag);
    let shell = find_shell(path_of(&envp)).ok_or_else(no_shell)?;
    // `--`: a command that starts with `-` is a command, not bash options.
    let argv = [c"bash", c"-c", c"--", command.as_c_str()];
    let leader = pending
        .finish(&shell, &argv, &envp, &workdir)
        .map_err(|e| failed(e, &spec.workdir, spec.sandbox_policy.as_ref()))?;
    pipes.started(leader).map_err(os_error)
}

fn no_shell() -> DshError {
    DshError::Spawn {
        kind: SpawnFailure::NoShell,
        errno: libc::ENOENT,
        message: "ENOENT: no bash found on the command's PATH".to_owned(),
    }
}

/// Sends the request for `fds` to the executor's supervisor, replacing a
/// supervisor that was killed once, transparently.
/// `failed` turns the supervisor's refusal into the caller's error.
fn begin(supervisors: &Slot, fds: &ChildFds, failed: impl Fn(SpawnError) -> DshError) -> Result<Pending> {
    let mut supervisor: Arc<Supervisor> = supervisors.get().map_err(supervisor_error)?;
    match supervisor.begin(fds) {
        Err(SpawnError::Unreachable(_)) => {
            supervisor = supervisors.renew(&supervisor).map_err(supervisor_error)?;
            supervisor.begin(fds)
        }
        other => other,
    }
    .map_err(failed)
}

/// Starts a terminal session's program (docs/terminals.md) in the
/// executor's supervisor, with `pty`'s slave as its controlling terminal
/// and its stdin, stdout and stderr.
pub(crate) fn launch_terminal(
    spec: &TerminalSpec,
    host_env: HostEnv,
    tag: &str,
    supervisors: &Slot,
    pty: &Pty,
) -> Result<Leader> {
    let nul = || DshError::Internal("NUL in a checked terminal spec".into());
    let workdir = CString::new(spec.cwd.as_os_str().as_bytes()).map_err(|_| nul())?;
    let policy = spec.sandbox_policy.as_ref();
    let ruleset = confine::ruleset(policy)?;
    let slave = pty.slave.as_raw_fd();
    let fds = ChildFds {
        stdin: Some(slave),
        stdout: slave,
        stderr: slave,
        ruleset: ruleset.as_ref().map(|r| r.fd()),
        terminal: true,
    };
    let pending = begin(supervisors, &fds, |e| failed(e, &spec.cwd, policy))?;
    // Dropping `pending` on an error below cancels the request.
    let envp = terminal_environment(host_env, spec.env.as_ref(), spec.dsh_env.as_ref(), tag);
    let (path, argv): (CString, Vec<CString>) = match &spec.program {
        TerminalProgram::Command(command) => {
            let shell = find_shell(path_of(&envp)).ok_or_else(no_shell)?;
            let command = CString::new(command.as_str()).map_err(|_| nul())?;
            (shell, vec![c"bash".into(), c"-c".into(), c"--".into(), command])
        }
        TerminalProgram::Argv(argv) => {
            let argv: Vec<CString> = argv
                .iter()
                .map(|a| CString::new(a.as_str()))
                .collect::<std::result::Result<_, _>>()
                .map_err(|_| nul())?;
            let name = argv.first().ok_or_else(nul)?;
            let path = find_program(name.as_bytes(), path_of(&envp)).ok_or_else(|| DshError::Spawn {
                kind: SpawnFailure::NoProgram,
                errno: libc::ENOENT,
                message: format!(
                    "ENOENT: no {} found on the terminal's PATH",
                    name.to_string_lossy()
                ),
            })?;
            (path, argv)
        }
    };
    let argv: Vec<&std::ffi::CStr> = argv.iter().map(CString::as_c_str).collect();
    pending
        .finish(&path, &argv, &envp, &workdir)
        .map_err(|e| failed(e, &spec.cwd, policy))
}

/// The error for a command the supervisor could not start.
fn failed(e: SpawnError, workdir: &Path, policy: Option<&SandboxPolicy>) -> DshError {
    match e {
        SpawnError::Unreachable(e) | SpawnError::Io(e) => spawn_error(e, workdir),
        SpawnError::Failed {
            step: Step::Confine,
            errno,
        } => confine::restrict_failed(policy, errno),
        SpawnError::Failed { errno, .. } => spawn_error(std::io::Error::from_raw_os_error(errno), workdir),
    }
}

/// The supervisor could not be started: nothing can run.
fn supervisor_error(e: std::io::Error) -> DshError {
    let errno = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<StartFailed>())
        .map(|s| s.errno)
        .or(e.raw_os_error())
        .unwrap_or(libc::EIO);
    DshError::Spawn {
        kind: SpawnFailure::Supervisor,
        errno,
        message: format!("{}: {e}", errno_name(errno)),
    }
}

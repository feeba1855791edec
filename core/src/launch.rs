//! Preparing and spawning one command: its environment, its shell, its
//! confinement, and the error a caller can act on when it cannot start.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::confine;
use crate::env::{child_environment, path_of, HostEnv};
use crate::error::{errno_name, DshError, Result, SpawnFailure};
use crate::governor::{self, CommandGroup};
use crate::request::Spec;
use crate::spawn::{find_shell, Pipes, Spawned};
use crate::supervisor::{Program, Slot, SpawnError, StartFailed, Step};

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
/// supervisor (`supervisors`), of one command. A supervisor that was killed
/// is replaced once, transparently: the request never reached it, so
/// nothing ran.
pub(crate) fn launch(spec: &Spec, host_env: HostEnv, tag: &str, supervisors: &Slot) -> Result<Spawned> {
    // Both were checked for NUL bytes by resolve / Spec::check.
    let command = CString::new(spec.command.as_str())
        .map_err(|_| DshError::Internal("NUL in checked command".into()))?;
    let workdir = CString::new(spec.workdir.as_os_str().as_bytes())
        .map_err(|_| DshError::Internal("NUL in checked workdir".into()))?;
    let ruleset = confine::ruleset(spec.sandbox_policy.as_ref())?;
    let envp = child_environment(host_env, spec, tag);
    let shell = find_shell(path_of(&envp)).ok_or_else(|| DshError::Spawn {
        kind: SpawnFailure::NoShell,
        errno: libc::ENOENT,
        message: "ENOENT: no bash found on the command's PATH".to_owned(),
    })?;
    // `--`: a command that starts with `-` is a command, not bash options.
    let argv = [c"bash", c"-c", c"--", command.as_c_str()];
    let program = Program {
        path: &shell,
        argv: &argv,
        envp: &envp,
        workdir: &workdir,
    };
    let os_error = |e: std::io::Error| spawn_error(e, &spec.workdir);
    let pipes = Pipes::new(spec.stdin.is_some() || spec.stdin_pipe).map_err(os_error)?;
    let mut fds = pipes.child_fds(ruleset.as_ref().map(|r| r.fd()));
    fds.rlimits = governor::rlimits(&spec.limits);
    fds.seccomp = confine::network_filter(spec.sandbox_policy.as_ref())?;
    let loopback = spec
        .sandbox_policy
        .as_ref()
        .is_some_and(|p| p.network == crate::sandbox::NetworkPolicy::Loopback);
    let mut supervisor = supervisors.get().map_err(supervisor_error)?;
    // The groups are named after the supervisor, which removes what is
    // left of them when it ends.
    let mut group = CommandGroup::new(&spec.limits, loopback, supervisor.pid())?;
    fds.cgroups = group.as_ref().map(CommandGroup::procs).unwrap_or_default();
    let leader = match supervisor.spawn(&fds, &program) {
        Err(SpawnError::Unreachable(_)) => {
            supervisor = supervisors.renew(&supervisor).map_err(supervisor_error)?;
            drop(group.take());
            group = CommandGroup::new(&spec.limits, loopback, supervisor.pid())?;
            fds.cgroups = group.as_ref().map(CommandGroup::procs).unwrap_or_default();
            supervisor.spawn(&fds, &program)
        }
        other => other,
    }
    .map_err(|e| failed(e, spec, group.as_ref()))?;
    pipes.started(leader, group).map_err(os_error)
}

/// The error for a command the supervisor could not start.
fn failed(e: SpawnError, spec: &Spec, group: Option<&CommandGroup>) -> DshError {
    match e {
        SpawnError::Unreachable(e) | SpawnError::Io(e) => spawn_error(e, &spec.workdir),
        SpawnError::Failed {
            step: Step::Confine,
            errno,
            ..
        } => confine::restrict_failed(spec.sandbox_policy.as_ref(), errno),
        SpawnError::Failed {
            step: Step::Network,
            errno,
            ..
        } => confine::network_failed(spec.sandbox_policy.as_ref(), errno),
        SpawnError::Failed {
            step: Step::Limits,
            errno,
            detail,
        } => governor::apply_failed(detail, errno, group),
        SpawnError::Failed { errno, .. } => {
            spawn_error(std::io::Error::from_raw_os_error(errno), &spec.workdir)
        }
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

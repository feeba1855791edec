//! Preparing and spawning one command: its environment, its shell, its
//! confinement, and the error a caller can act on when it cannot start.

pub(crate) mod clone_exec;
pub(crate) mod ending;
pub(crate) mod env;
pub(crate) mod mounts;
pub(crate) mod pty;
pub(crate) mod spawn;
pub(crate) mod supervisor;
pub(crate) mod sweeper;
pub(crate) mod tree;
pub(crate) mod wire;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::confine;
use crate::confine::governor::{self, CommandGroup};
use crate::launch::env::{child_environment, path_of, spawn_environment, terminal_environment, HostEnv};
use crate::launch::pty::Pty;
use crate::launch::spawn::{find_program, find_shell, LaunchedCommand, Pipes, StartContext, Stdio};
use crate::launch::supervisor::{ChildFds, Launched, Program, Slot, StartFailed};
use crate::launch::sweeper::sweep;
use crate::launch::tree::{LiveLeader, TagMatch};
use crate::launch::wire::{SpawnError, Step};
use crate::spec::error::{errno_name, DshError, Result, SpawnFailure};
use crate::spec::request::Spec;
use crate::spec::sandbox::{NetworkPolicy, SandboxPolicy};
use crate::spec::spawn::{SpawnOutput, SpawnSpec, SpawnStdin};
use crate::spec::terminal::{TerminalProgram, TerminalSpec};
use std::os::fd::AsRawFd;

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
/// supervisor (`supervisors`), of one command.
pub(crate) fn launch(
    spec: &Spec,
    host_env: HostEnv,
    tag: &str,
    supervisors: &Slot,
) -> Result<LaunchedCommand> {
    // Both were checked for NUL bytes by resolve / Spec::check.
    let command = CString::new(spec.command.as_str())
        .map_err(|_| DshError::Internal("NUL in checked command".into()))?;
    let envp = child_environment(host_env, spec, tag);
    let shell = find_shell(path_of(&envp)).ok_or_else(no_shell)?;
    // `--`: a command that starts with `-` is a command, not bash options.
    let argv = [c"bash", c"-c", c"--", command.as_c_str()];
    let pipes = Pipes::for_command(spec.stdin.is_some() || spec.stdin_pipe)
        .map_err(|e| spawn_error(e, &spec.workdir))?;
    let plan = Plan {
        path: &shell,
        argv: &argv,
        envp: &envp,
        workdir: &spec.workdir,
        policy: spec.sandbox_policy.as_ref(),
        limits: &spec.limits,
        pid: PidReport::WithExit,
    };
    plan.start(pipes, tag, supervisors)
}

/// When the host learns a command's leader pid.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum PidReport {
    /// The start returns once the leader has exec'd, with its pid: a
    /// failure to start is the start's error.
    AtExec,
    /// The start returns at once; the pid comes on the report pipe with
    /// the exit, or after DEFER_MS (a command: one wake-up of the host).
    WithExit,
    /// As `WithExit`, and the pid is also written, at the exec, on a pipe
    /// the host reads only when asked for it
    /// ([`LaunchedCommand::pid_pipe`]).
    Piped,
}

/// [`launch`] for a spawn spec (docs/spawn.md): its program as it is, its
/// streams as the spec disposes them; returns once the program has
/// exec'd (its pid known) or failed to, or at once (`pid`).
pub(crate) fn launch_spawn(
    spec: &SpawnSpec,
    host_env: HostEnv,
    tag: &str,
    supervisors: &Slot,
    pid: PidReport,
) -> Result<LaunchedCommand> {
    let nul = || DshError::Internal("NUL in a checked spawn spec".into());
    let argv: Vec<CString> = spec
        .argv
        .iter()
        .map(|a| CString::new(a.as_str()))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| nul())?;
    let envp = spawn_environment(host_env, &spec.env, tag);
    let name = argv.first().ok_or_else(nul)?;
    let path = find_program(name.as_bytes(), path_of(&envp), &spec.cwd)
        .map_err(|e| no_program(name, "program", e))?;
    let argv: Vec<&std::ffi::CStr> = argv.iter().map(CString::as_c_str).collect();
    let stdin = match spec.stdin {
        SpawnStdin::Null => Stdio::Null,
        SpawnStdin::Bytes(_) => Stdio::Watched,
        SpawnStdin::Pipe => Stdio::Handed,
        SpawnStdin::Inherit => Stdio::Inherited,
    };
    let out = |o: SpawnOutput| match o {
        SpawnOutput::Collect { .. } => Stdio::Watched,
        SpawnOutput::Pipe => Stdio::Handed,
        SpawnOutput::Inherit => Stdio::Inherited,
    };
    for (fd, how, name) in [
        (0, stdin, "stdin"),
        (1, out(spec.stdout), "stdout"),
        (2, out(spec.stderr), "stderr"),
    ] {
        // SAFETY: F_GETFD only reads the descriptor's flags.
        if how == Stdio::Inherited && unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(DshError::Spawn {
                kind: SpawnFailure::Os,
                errno: libc::EBADF,
                message: format!("EBADF: {name} is inherited, but the host's fd {fd} is closed"),
            });
        }
    }
    let pipes =
        Pipes::new(stdin, out(spec.stdout), out(spec.stderr)).map_err(|e| spawn_error(e, &spec.cwd))?;
    let plan = Plan {
        path: &path,
        argv: &argv,
        envp: &envp,
        workdir: &spec.cwd,
        policy: spec.sandbox_policy.as_ref(),
        limits: &spec.limits,
        pid,
    };
    plan.start(pipes, tag, supervisors)
}

/// What the supervisor is asked to start, and under which rules.
struct Plan<'a> {
    path: &'a std::ffi::CStr,
    argv: &'a [&'a std::ffi::CStr],
    envp: &'a crate::launch::env::Envp,
    workdir: &'a Path,
    policy: Option<&'a SandboxPolicy>,
    limits: &'a crate::spec::limits::Limits,
    pid: PidReport,
}

impl Plan<'_> {
    /// Confinement, limits, and the request to the supervisor. A supervisor
    /// that was killed is replaced once, transparently: the request never
    /// reached it, so nothing ran.
    fn start(&self, pipes: Pipes, tag: &str, supervisors: &Slot) -> Result<LaunchedCommand> {
        let workdir = CString::new(self.workdir.as_os_str().as_bytes())
            .map_err(|_| DshError::Internal("NUL in checked workdir".into()))?;
        let ruleset = confine::ruleset(self.policy)?;
        let program = Program {
            path: self.path,
            argv: self.argv,
            envp: self.envp,
            workdir: &workdir,
        };
        let os_error = |e: std::io::Error| spawn_error(e, self.workdir);
        let mut fds = pipes.child_fds(ruleset.as_deref());
        fds.rlimits = governor::rlimits(self.limits);
        fds.seccomp = confine::network_filter(self.policy)?;
        fds.mounts = mounts::read_only_mounts(self.policy);
        let loopback = self.policy.is_some_and(|p| p.network == NetworkPolicy::Loopback);
        let mut supervisor = supervisors.get().map_err(supervisor_error)?;
        // The groups are named after the supervisor, which removes what is
        // left of them when it ends.
        let mut group = CommandGroup::new(self.limits, loopback, supervisor.pid())?;
        let pid_pipe = match self.pid {
            PidReport::Piped => Some(crate::sys::pipe(0).map_err(os_error)?),
            PidReport::AtExec | PidReport::WithExit => None,
        };
        let ask = |supervisor: &crate::launch::supervisor::Supervisor,
                   fds: &mut ChildFds,
                   group: &Option<CommandGroup>| {
            fds.cgroups = group.as_ref().map(CommandGroup::procs).unwrap_or_default();
            fds.born_in = group.as_ref().and_then(CommandGroup::born_in);
            match self.pid {
                PidReport::AtExec => supervisor.spawn(fds, &program).map(|(pid, l)| (Some(pid), l)),
                PidReport::WithExit | PidReport::Piped => {
                    let theirs = pid_pipe.as_ref().map(|(_, w)| w.as_raw_fd());
                    supervisor
                        .start_deferred(fds, &program, theirs)
                        .map(|l| (None, l))
                }
            }
        };
        let start = StartContext {
            workdir: self.workdir.to_path_buf(),
            policy: self.policy.cloned(),
        };
        let mut live = LiveLeader::new(tag);
        let asked = match ask(&supervisor, &mut fds, &group) {
            Err(SpawnError::Unreachable(_)) => {
                supervisor = supervisors.renew(&supervisor).map_err(supervisor_error)?;
                drop(group.take());
                group = CommandGroup::new(self.limits, loopback, supervisor.pid())?;
                ask(&supervisor, &mut fds, &group)
            }
            other => other,
        }
        .map_err(|e| not_started(e, tag, &start, group.as_ref()))?;
        let (pid, launched) = asked;
        if let Some(p) = pid {
            live.mark(p);
        }
        // Ours gone, the supervisor's copy is the only writer: an end of
        // file there means it did not start (or the supervisor ended).
        let pid_pipe = pid_pipe.map(|(mine, _theirs)| mine);
        let mut command = pipes.started(launched, pid, group, start, fds.mounts.is_some(), live);
        command.pid_pipe = pid_pipe;
        Ok(command)
    }
}

/// The error of a command that did not start; whatever carries its tag is
/// killed first when the supervisor may have started it.
pub(crate) fn not_started(
    e: SpawnError,
    tag: &str,
    start: &StartContext,
    group: Option<&CommandGroup>,
) -> DshError {
    end_if_started(&e, tag);
    failed(e, &start.workdir, start.policy.as_ref(), group)
}

/// `name` (a terminal's or a spawn's program) is not on the PATH it was
/// looked up on (ENOENT), or is there but cannot be run (EACCES).
fn no_program(name: &std::ffi::CStr, whose: &str, errno: i32) -> DshError {
    let name = name.to_string_lossy();
    let message = match errno {
        libc::EACCES => {
            format!("EACCES: {name} on the {whose}'s PATH cannot be run (not an executable file)")
        }
        _ => format!("{}: no {name} found on the {whose}'s PATH", errno_name(errno)),
    };
    DshError::Spawn {
        kind: SpawnFailure::NoProgram,
        errno,
        message,
    }
}

fn no_shell() -> DshError {
    DshError::Spawn {
        kind: SpawnFailure::NoShell,
        errno: libc::ENOENT,
        message: "ENOENT: no bash found on the command's PATH".to_owned(),
    }
}

/// Starts a terminal session's program (docs/terminals.md) in the
/// executor's supervisor, with `pty`'s slave as its controlling terminal
/// and its stdin, stdout and stderr; with the session's claim on its group
/// (as [`LaunchedCommand::live`]).
pub(crate) fn launch_terminal(
    spec: &TerminalSpec,
    host_env: HostEnv,
    tag: &str,
    supervisors: &Slot,
    pty: &Pty,
) -> Result<(libc::pid_t, Launched, LiveLeader)> {
    let nul = || DshError::Internal("NUL in a checked terminal spec".into());
    let workdir = CString::new(spec.cwd.as_os_str().as_bytes()).map_err(|_| nul())?;
    let policy = spec.sandbox_policy.as_ref();
    let ruleset = confine::ruleset(policy)?;
    if policy.is_some_and(|p| p.network == NetworkPolicy::Loopback) {
        // Loopback needs a cgroup of the session's own, which terminal
        // sessions do not make: refused rather than silently weaker.
        return Err(DshError::SandboxUnavailable(
            "network loopback is not available for terminal sessions (use deny or allow)".into(),
        ));
    }
    let slave = pty.slave.as_raw_fd();
    let fds = ChildFds {
        stdin: Some(slave),
        stdout: slave,
        stderr: slave,
        ruleset: ruleset.as_ref().map(|r| r.fd()),
        ruleset_scope_only: ruleset.as_ref().is_some_and(|r| r.scope_only()),
        cgroups: Vec::new(),
        born_in: None,
        rlimits: None,
        seccomp: confine::network_filter(policy)?,
        mounts: mounts::read_only_mounts(policy),
        terminal: true,
    };
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
            let path = find_program(name.as_bytes(), path_of(&envp), &spec.cwd)
                .map_err(|e| no_program(name, "terminal", e))?;
            (path, argv)
        }
    };
    let argv: Vec<&std::ffi::CStr> = argv.iter().map(CString::as_c_str).collect();
    let program = Program {
        path: &path,
        argv: &argv,
        envp: &envp,
        workdir: &workdir,
    };
    let supervisor = supervisors.get().map_err(supervisor_error)?;
    let mut live = LiveLeader::new(tag);
    let (pid, launched) = match supervisor.spawn(&fds, &program) {
        Err(SpawnError::Unreachable(_)) => supervisors
            .renew(&supervisor)
            .map_err(supervisor_error)?
            .spawn(&fds, &program),
        other => other,
    }
    .map_err(|e| {
        end_if_started(&e, tag);
        failed(e, &spec.cwd, policy, None)
    })?;
    live.mark(pid);
    Ok((pid, launched, live))
}

/// A supervisor that ended after it took the request may have started the
/// command first (a command can kill its own supervisor before its pid is
/// reported): whatever carries the command's tag is killed, so a start
/// that fails leaves nothing running.
fn end_if_started(e: &SpawnError, tag: &str) {
    if matches!(e, SpawnError::Io(_)) {
        sweep(TagMatch::command(tag), libc::SIGKILL);
    }
}

/// The error for a command the supervisor could not start.
fn failed(
    e: SpawnError,
    workdir: &Path,
    policy: Option<&SandboxPolicy>,
    group: Option<&CommandGroup>,
) -> DshError {
    match e {
        SpawnError::Unreachable(e) | SpawnError::Io(e) => spawn_error(e, workdir),
        SpawnError::Failed {
            step: Step::Confine,
            errno,
            ..
        } => confine::restrict_failed(policy, errno),
        SpawnError::Failed {
            step: Step::Network,
            errno,
            ..
        } => confine::network_failed(policy, errno),
        SpawnError::Failed {
            step: Step::Mounts,
            errno,
            detail,
        } => mounts::failed(policy, detail, errno),
        SpawnError::Failed {
            step: Step::Limits,
            errno,
            detail,
        } => governor::apply_failed(crate::launch::wire::unapplied(detail), errno, group),
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

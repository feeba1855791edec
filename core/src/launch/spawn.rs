//! Starting `bash -c` (in the executor's supervisor, which never copies the
//! host's page tables: see `supervisor.rs`), and the raw fd helpers around
//! it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::confine::landlock::Ruleset;
use crate::host::forked::PerProcess;
use crate::launch::supervisor::{ChildFds, Launched};
use crate::launch::tree::LiveLeader;
use crate::sys::{pipe, set_nonblocking};

/// What names the error of a command that did not start, when that comes
/// after the request (see [`Launched`](crate::launch::supervisor::Launched)).
pub(crate) struct StartContext {
    pub workdir: std::path::PathBuf,
    pub policy: Option<crate::spec::sandbox::SandboxPolicy>,
}

/// A command asked for: the pipe on which the supervisor reports whether
/// it started (its leader's pid, which comes late: see
/// [`Launched`](crate::launch::supervisor::Launched)) and how it ended, and the
/// parent ends of its pipes: those the core feeds and reads (close-on-exec,
/// non-blocking), and those handed to the caller raw.
pub(crate) struct LaunchedCommand {
    pub report: OwnedFd,
    /// Releases the leader once its report has been read.
    pub releaser: crate::launch::supervisor::Releaser,
    /// The leader's pid when it is known already (a spawn waits for it);
    /// otherwise it comes on the report pipe.
    pub pid: Option<libc::pid_t>,
    /// Where the pid is written at the exec ([`PidReport::Piped`]
    /// (crate::launch::PidReport)): read only by whoever asks for it.
    pub pid_pipe: Option<OwnedFd>,
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    /// The ends handed to the caller (a spawn's `Pipe` dispositions).
    pub handed: HandedPipes,
    /// The command's cgroups, when a limit needs them.
    pub group: Option<crate::confine::governor::CommandGroup>,
    /// What names the error if it turns out not to have started.
    pub start: StartContext,
    /// It runs in its read-only mounts (the facts' `metadata`).
    pub read_only_mounts: bool,
    /// Its supervision's claim on its group, from before the request: a
    /// dispose leaves the group to the supervision, which stops it.
    pub live: LiveLeader,
}

impl LaunchedCommand {
    /// The descriptors its supervision reads: the report pipe, and the
    /// streams it collects (for a host's loop to watch).
    pub(crate) fn watched_fds(&self) -> Vec<RawFd> {
        [Some(&self.report), self.stdout.as_ref(), self.stderr.as_ref()]
            .into_iter()
            .flatten()
            .map(AsRawFd::as_raw_fd)
            .collect()
    }
}

/// The parent ends of a spawn's raw pipes, for the caller: blocking and
/// close-on-exec, as `std::process` gives them.
#[derive(Debug, Default)]
pub struct HandedPipes {
    /// The write end of the program's stdin.
    pub stdin: Option<OwnedFd>,
    /// The read end of its stdout.
    pub stdout: Option<OwnedFd>,
    /// The read end of its stderr.
    pub stderr: Option<OwnedFd>,
}

/// Finds `bash` on a PATH, as `execvp` would. The last answer is kept per
/// PATH value and re-checked with one `access` call, so a shell removed or
/// installed meanwhile is noticed when the cached one stops being usable.
pub(crate) fn find_shell(path: Option<&[u8]>) -> Option<CString> {
    // Per process: a child forked while another thread held the lock gets
    // a cache of its own instead of a lock held forever.
    type PathAndShell = (Vec<u8>, CString);
    static LAST: PerProcess<std::sync::Mutex<Option<PathAndShell>>> = PerProcess::new();
    let path = path.unwrap_or(b"/usr/local/bin:/usr/bin:/bin");
    let usable = |c: &CString| {
        // SAFETY: `c` is a valid NUL-terminated path.
        unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
    };
    let last = LAST.get(Default::default);
    let lock = || last.lock().unwrap_or_else(|e| e.into_inner());
    {
        let last = lock();
        if let Some((p, shell)) = last.as_ref() {
            if p.as_slice() == path && usable(shell) {
                return Some(shell.clone());
            }
        }
    }
    let found = path
        .split(|&b| b == b':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| {
            let mut p = dir.to_vec();
            p.extend_from_slice(b"/bash");
            p
        })
        .find_map(|p| {
            let c = CString::new(p).ok()?;
            let ok = usable(&c) && Path::new(std::ffi::OsStr::from_bytes(c.as_bytes())).is_file();
            ok.then_some(c)
        })?;
    *lock() = Some((path.to_vec(), found.clone()));
    Some(found)
}

/// Where one of a command's standard streams goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stdio {
    /// Nothing: stdin on `/dev/null` (never for stdout or stderr).
    Null,
    /// A pipe the core feeds (stdin) or reads (stdout, stderr).
    Watched,
    /// A pipe whose end is handed to the caller.
    Handed,
    /// The host's own descriptor of the same number.
    Inherited,
}

/// One stream's descriptors: ours (none when inherited) and the child's.
struct End {
    ours: Option<OwnedFd>,
    child: Option<OwnedFd>,
    how: Stdio,
}

impl End {
    /// `reads`: the child reads this stream (stdin), so it gets the read end.
    fn new(how: Stdio, host_fd: std::os::fd::RawFd, reads: bool) -> io::Result<End> {
        let (ours, child) = match how {
            Stdio::Null => (None, None),
            // A copy made now, first: the host's descriptor as it is at the
            // spawn (closed: EBADF), whatever the launch opens after.
            Stdio::Inherited => (None, Some(crate::sys::dup_above_stdio(host_fd)?)),
            Stdio::Watched | Stdio::Handed => {
                let (r, w) = pipe(0)?;
                let (ours, child) = if reads { (w, r) } else { (r, w) };
                // Made non-blocking now, before the start is asked for:
                // nothing can fail once the program may be running.
                if how == Stdio::Watched {
                    set_nonblocking(&ours)?;
                }
                (Some(ours), Some(child))
            }
        };
        Ok(End { ours, child, how })
    }

    fn child_fd(&self) -> Option<std::os::fd::RawFd> {
        self.child.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Ours, split into (watched, handed).
    fn split(self) -> (Option<OwnedFd>, Option<OwnedFd>) {
        match (self.how, self.ours) {
            (Stdio::Watched, fd) => (fd, None),
            (Stdio::Handed, fd) => (None, fd),
            _ => (None, None),
        }
    }
}

/// The pipes of a command about to start: the child's ends go to the
/// supervisor, ours are kept (close-on-exec).
pub(crate) struct Pipes {
    stdin: End,
    stdout: End,
    stderr: End,
}

impl Pipes {
    /// A bash command's: its stdout and stderr read by the core, its stdin
    /// fed by the core or `/dev/null`.
    pub(crate) fn for_command(with_stdin: bool) -> io::Result<Pipes> {
        let stdin = if with_stdin { Stdio::Watched } else { Stdio::Null };
        Pipes::new(stdin, Stdio::Watched, Stdio::Watched)
    }

    pub(crate) fn new(stdin: Stdio, stdout: Stdio, stderr: Stdio) -> io::Result<Pipes> {
        Ok(Pipes {
            stdin: End::new(stdin, libc::STDIN_FILENO, true)?,
            stdout: End::new(stdout, libc::STDOUT_FILENO, false)?,
            stderr: End::new(stderr, libc::STDERR_FILENO, false)?,
        })
    }

    /// The child's ends, for the supervisor.
    pub(crate) fn child_fds(&self, ruleset: Option<&Ruleset>) -> ChildFds {
        ChildFds {
            stdin: self.stdin.child_fd(),
            // A stream neither piped nor inherited does not exist for
            // stdout and stderr (`Pipes::new` never gets `Null` for them).
            stdout: self.stdout.child_fd().unwrap_or(libc::STDOUT_FILENO),
            stderr: self.stderr.child_fd().unwrap_or(libc::STDERR_FILENO),
            ruleset: ruleset.map(Ruleset::fd),
            ruleset_scope_only: ruleset.is_some_and(Ruleset::scope_only),
            cgroups: Vec::new(),
            born_in: None,
            rlimits: None,
            seccomp: None,
            mounts: None,
            terminal: false,
        }
    }

    /// Ours, once the start is asked for: the child's ends are closed here.
    /// Infallible: a program the supervisor may have started is always
    /// handed to its supervision.
    pub(crate) fn started(
        self,
        leader: Launched,
        pid: Option<libc::pid_t>,
        group: Option<crate::confine::governor::CommandGroup>,
        start: StartContext,
        read_only_mounts: bool,
        live: LiveLeader,
    ) -> LaunchedCommand {
        let (stdin, handed_stdin) = self.stdin.split();
        let (stdout, handed_stdout) = self.stdout.split();
        let (stderr, handed_stderr) = self.stderr.split();
        LaunchedCommand {
            report: leader.report,
            releaser: leader.releaser,
            pid,
            pid_pipe: None,
            stdin,
            stdout,
            stderr,
            handed: HandedPipes {
                stdin: handed_stdin,
                stdout: handed_stdout,
                stderr: handed_stderr,
            },
            group,
            start,
            read_only_mounts,
            live,
        }
    }
}

/// The default PATH when the environment has none, as `execvp`'s.
const DEFAULT_PATH: &[u8] = b"/usr/local/bin:/usr/bin:/bin";

/// Looks `name` (without a `/`) up on `path` as `execvp` does, with
/// `base` as the directory a relative entry (an empty one is `.`) is
/// relative to: the first executable regular file, as `base`, the entry
/// and `name` joined (the kernel resolves its `..` after the symlinks
/// before them, as it will at the exec). Otherwise the errno `execvp` would
/// give: EACCES when a candidate was there but could not be run, else
/// ENOENT. The one lookup of a spawn, a terminal's program and
/// `resolve_executable`.
pub(crate) fn lookup(name: &[u8], path: Option<&[u8]>, base: &Path) -> Result<std::path::PathBuf, i32> {
    let mut errno = libc::ENOENT;
    for dir in path.unwrap_or(DEFAULT_PATH).split(|&b| b == b':') {
        let dir = if dir.is_empty() { &b"."[..] } else { dir };
        let candidate = base
            .join(std::ffi::OsStr::from_bytes(dir))
            .join(std::ffi::OsStr::from_bytes(name));
        let Ok(c) = CString::new(candidate.as_os_str().as_bytes()) else {
            continue;
        };
        // Most entries do not have it: one stat each, the access check only
        // for a file that is there.
        match std::fs::metadata(&candidate) {
            // SAFETY: `c` is a valid NUL-terminated path.
            Ok(m) if m.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 => {
                return Ok(candidate)
            }
            // There, but not something to run (a directory, no x bit).
            Ok(_) => errno = libc::EACCES,
            Err(_) => {}
        }
    }
    Err(errno)
}

/// Finds a spawn's or a terminal session's program as `execvp` would in
/// `workdir`: a name with a `/` is used as it is (relative to the
/// workdir); any other is [`lookup`]ed on `path` from the workdir.
pub(crate) fn find_program(name: &[u8], path: Option<&[u8]>, workdir: &Path) -> Result<CString, i32> {
    if name.contains(&b'/') {
        return CString::new(name).map_err(|_| libc::ENOENT);
    }
    let found = lookup(name, path, workdir)?;
    CString::new(std::os::unix::ffi::OsStringExt::into_vec(found.into_os_string())).map_err(|_| libc::ENOENT)
}

/// `path` with `.` and empty parts dropped and `..` folded, without asking
/// the filesystem (a symlink stays as named, as `execvp` names it).
fn lexically_normal(path: &Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                // Above the root is the root.
                if out.parent().is_some() {
                    out.pop();
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The executable a spawn of `command` would run (docs/spawn.md,
/// "Finding the program"): an absolute path if it is an executable file; a
/// bare name on the PATH of `env` over the scrubbed host environment (a
/// relative PATH entry is relative to the host's cwd), the first hit, as
/// an absolute path without `.` or `..`, not what a symlink points to. A
/// relative path with a `/` has no base to resolve against, so it is
/// refused rather than guessed.
pub(crate) fn resolve_executable(
    command: &str,
    env: &std::collections::BTreeMap<String, Option<String>>,
) -> crate::spec::error::Result<std::path::PathBuf> {
    use crate::spec::error::{errno_name, DshError, Field, FieldName, Scope, SpawnFailure};
    let field = Field::new(Scope::Spawn, FieldName::Command);
    if command.is_empty() {
        return Err(DshError::invalid(field, "must name a program, got \"\""));
    }
    if command.contains('\0') {
        return Err(DshError::invalid(field, "contains a NUL byte"));
    }
    let missing = |message: String| DshError::Spawn {
        kind: SpawnFailure::NoProgram,
        errno: libc::ENOENT,
        message,
    };
    let executable = |p: &Path| {
        let c = CString::new(p.as_os_str().as_bytes()).ok()?;
        // SAFETY: `c` is a valid NUL-terminated path.
        let runs = unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0;
        (runs && p.is_file()).then(|| p.to_path_buf())
    };
    let path = Path::new(command);
    if path.is_absolute() {
        return executable(path).ok_or_else(|| match path.exists() {
            // There, but not something to run: what exec would say.
            true => DshError::Spawn {
                kind: SpawnFailure::NoProgram,
                errno: libc::EACCES,
                message: format!("EACCES: command {command:?} is not an executable file"),
            },
            false => missing(format!("ENOENT: command {command:?} is not an executable file")),
        });
    }
    if command.contains('/') {
        return Err(DshError::invalid(
            field,
            format!("{command:?} is a relative path: give an absolute path or a bare name for PATH"),
        ));
    }
    let envp = crate::launch::env::spawn_environment(crate::launch::env::HostEnv::capture(), env, "");
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    // No PATH at all: the default one, as for the spawn itself.
    let path = crate::launch::env::path_of(&envp);
    // Reported as the seam's provider reports it: without `.` or `..`.
    lookup(command.as_bytes(), path, &cwd)
        .map(|p| lexically_normal(&p))
        .map_err(|errno| DshError::Spawn {
            kind: SpawnFailure::NoProgram,
            errno,
            message: format!("{}: command {command:?} was not found on PATH", errno_name(errno)),
        })
}

//! Starting `bash -c` (in the executor's supervisor, which never copies the
//! host's page tables: see `supervisor.rs`), and the raw fd helpers around
//! it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::confine::landlock::Ruleset;
use crate::host::forked::PerProcess;
use crate::launch::supervisor::{ChildFds, Launched};
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
/// parent ends of its pipes (close-on-exec, non-blocking).
pub(crate) struct LaunchedCommand {
    pub report: OwnedFd,
    /// Releases the leader once its report has been read.
    pub releaser: crate::launch::supervisor::Releaser,
    pub stdin: Option<OwnedFd>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// The command's cgroups, when a limit needs them.
    pub group: Option<crate::confine::governor::CommandGroup>,
    /// What names the error if it turns out not to have started.
    pub start: StartContext,
    /// It runs in its read-only mounts (the facts' `metadata`).
    pub read_only_mounts: bool,
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

/// The pipes of a command about to start: the child's ends go to the
/// supervisor, ours are kept (close-on-exec, non-blocking once started).
pub(crate) struct Pipes {
    stdin: Option<(OwnedFd, OwnedFd)>,
    stdout: (OwnedFd, OwnedFd),
    stderr: (OwnedFd, OwnedFd),
}

impl Pipes {
    pub(crate) fn new(with_stdin: bool) -> io::Result<Pipes> {
        Ok(Pipes {
            stdout: pipe(0)?,
            stderr: pipe(0)?,
            stdin: if with_stdin { Some(pipe(0)?) } else { None },
        })
    }

    /// The child's ends, for the supervisor.
    pub(crate) fn child_fds(&self, ruleset: Option<&Ruleset>) -> ChildFds {
        ChildFds {
            stdin: self.stdin.as_ref().map(|(r, _)| r.as_raw_fd()),
            stdout: self.stdout.1.as_raw_fd(),
            stderr: self.stderr.1.as_raw_fd(),
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
    pub(crate) fn started(
        self,
        leader: Launched,
        group: Option<crate::confine::governor::CommandGroup>,
        start: StartContext,
        read_only_mounts: bool,
    ) -> io::Result<LaunchedCommand> {
        let stdin = self.stdin.map(|(_, w)| w);
        let (stdout, stderr) = (self.stdout.0, self.stderr.0);
        for fd in [Some(&stdout), Some(&stderr), stdin.as_ref()]
            .into_iter()
            .flatten()
        {
            set_nonblocking(fd)?;
        }
        Ok(LaunchedCommand {
            report: leader.report,
            releaser: leader.releaser,
            stdin,
            stdout,
            stderr,
            group,
            start,
            read_only_mounts,
        })
    }
}

/// Finds a terminal session's program as `execvp` would: a name with a `/`
/// is used as it is (relative to the workdir); any other is looked up on
/// `path` (default `/usr/local/bin:/usr/bin:/bin`) for an executable file.
pub(crate) fn find_program(name: &[u8], path: Option<&[u8]>) -> Option<CString> {
    if name.contains(&b'/') {
        return CString::new(name).ok();
    }
    let path = path.unwrap_or(b"/usr/local/bin:/usr/bin:/bin");
    path.split(|&b| b == b':')
        .filter(|dir| !dir.is_empty())
        .find_map(|dir| {
            let mut p = dir.to_vec();
            p.push(b'/');
            p.extend_from_slice(name);
            let c = CString::new(p).ok()?;
            // SAFETY: `c` is a valid NUL-terminated path.
            let executable = unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0;
            let file = Path::new(std::ffi::OsStr::from_bytes(c.as_bytes())).is_file();
            (executable && file).then_some(c)
        })
}

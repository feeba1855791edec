//! Native Landlock confinement (no external runner). A ruleset is built in
//! the host and passed to the executor's supervisor with the spawn request;
//! the command's process restricts *itself* with it (no_new_privs, then
//! `landlock_restrict_self`) between fork and exec, so the command and
//! every descendant are confined — a domain cannot be left — while neither
//! the host's threads nor the supervisor ever are.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};

use landlock::{
    AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, PathFdError,
    Ruleset as Builder, RulesetAttr, RulesetCreatedAttr, Scope,
};

use crate::host::forked::PerProcess;
use crate::spec::sandbox::{Enforcement, SandboxMode, SandboxPolicy};
use crate::sys::lock;

/// The Landlock ABI version query (include/uapi/linux/landlock.h): the
/// one call the `landlock` crate does not expose.
const CREATE_RULESET_VERSION: u32 = 1 << 0;

/// The first ABI that governs every file effect a mode promises (writes,
/// creations, removals, cross-directory links and truncation).
const FULL_ABI: u32 = 3;
/// The first ABI with network rules (TCP bind and connect, by port).
pub(crate) const NET_ABI: u32 = 4;
/// The first ABI with scopes: a domain that scopes signals keeps its
/// processes from signalling any process outside it (Linux 6.12).
pub(crate) const SCOPE_ABI: u32 = 6;

/// The kernel's Landlock ABI version, or why there is none.
pub(crate) fn abi() -> Result<u32, String> {
    static ABI: OnceLock<Result<u32, String>> = OnceLock::new();
    ABI.get_or_init(|| {
        // SAFETY: a NULL attr with size 0 and the VERSION flag only queries.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u64>(),
                0usize,
                CREATE_RULESET_VERSION,
            )
        };
        if v < 0 {
            let e = io::Error::last_os_error();
            Err(match e.raw_os_error() {
                Some(libc::ENOSYS) => "this kernel has no Landlock (ENOSYS)".to_owned(),
                Some(libc::EOPNOTSUPP) => "Landlock is disabled on this kernel (EOPNOTSUPP)".to_owned(),
                _ => format!("Landlock is unavailable: {e}"),
            })
        } else {
            Ok(v as u32)
        }
    })
    .clone()
}

/// How completely this kernel can enforce the confined modes.
pub(crate) fn enforcement() -> Option<Enforcement> {
    abi().ok().map(|v| {
        if v >= FULL_ABI {
            Enforcement::Full
        } else {
            Enforcement::Partial
        }
    })
}

/// What the confined modes govern at this ABI (docs/sandbox.md): every
/// write, creation and removal; cross-directory links (ABI 2) and
/// truncation (ABI 3). Not `AccessFs::from_write`, which from ABI 5 also
/// governs device ioctls, which no mode promises.
fn write_rights(abi: u32) -> BitFlags<AccessFs> {
    let mut rights = AccessFs::WriteFile
        | AccessFs::RemoveDir
        | AccessFs::RemoveFile
        | AccessFs::MakeChar
        | AccessFs::MakeDir
        | AccessFs::MakeReg
        | AccessFs::MakeSock
        | AccessFs::MakeFifo
        | AccessFs::MakeBlock
        | AccessFs::MakeSym;
    if abi >= 2 {
        rights |= AccessFs::Refer;
    }
    if abi >= 3 {
        rights |= AccessFs::Truncate;
    }
    rights
}

/// Character devices that swallow or produce bytes: writing to them changes
/// no file, and shell redirections to them are everywhere.
const SINKS: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// A ready ruleset for one command: its descriptor.
pub(crate) struct Ruleset {
    fd: OwnedFd,
    /// It governs no file or network access, only whom the command may
    /// signal: the supervisor applies it without `no_new_privs` where the
    /// command may (see supervisor.c), so setuid programs keep working.
    scope_only: bool,
}

/// The directories a mode may write under (and, where the command runs in
/// its read-only mounts, change metadata under), each once, resolved
/// (symlinks followed, as Landlock's rules and the mounts both would): the
/// same directories for both layers. One that cannot be resolved stays as
/// it is, for the ruleset to name in its error.
pub(crate) fn writable_dirs(policy: &SandboxPolicy) -> Vec<std::path::PathBuf> {
    match policy.mode {
        SandboxMode::WorkspaceWrite => {
            let mut dirs: Vec<std::path::PathBuf> = Vec::new();
            for dir in [policy.workspace_root.clone(), "/tmp".into(), std::env::temp_dir()] {
                let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
                if !dirs.contains(&dir) {
                    dirs.push(dir);
                }
            }
            dirs
        }
        _ => Vec::new(),
    }
}

/// Why a ruleset could not be made: words for the error, and the errno
/// when the kernel refused a resource (no descriptor left, no memory),
/// which is a spawn error, not an unavailable sandbox.
#[derive(Debug)]
pub(crate) struct Failure {
    pub why: String,
    pub refused: Option<io::Error>,
}

impl Failure {
    fn new(what: String, e: &(dyn std::error::Error + 'static)) -> Failure {
        let mut cause = Some(e);
        let mut refused = None;
        while let Some(c) = cause {
            if let Some(os) = c.downcast_ref::<io::Error>() {
                if matches!(
                    os.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)
                ) {
                    refused = os.raw_os_error().map(io::Error::from_raw_os_error);
                }
            }
            cause = c.source();
        }
        Failure {
            why: format!("{what}: {e}"),
            refused,
        }
    }
}

impl From<String> for Failure {
    fn from(why: String) -> Failure {
        Failure { why, refused: None }
    }
}

/// A command's ruleset: with `files` (a policy's writable directories),
/// reads and execution stay unrestricted and every file write is denied
/// except under those directories and to the sinks; with `deny_tcp` (ABI
/// 4+ only), every TCP bind and connect is denied; from ABI 6 every
/// ruleset also scopes signals, so the command cannot signal (stop, kill)
/// or trace its supervisor, the host or any process outside its own tree.
/// Built with the `landlock` crate as a hard requirement (nothing silently
/// dropped: the rights asked for are exactly those this ABI has), and
/// handed over as a descriptor: the command's process restricts itself
/// with it. The ruleset that only scopes signals is made once per process
/// and shared. `None`: nothing to restrict on this kernel. An error means
/// confinement cannot be applied (the caller fails closed).
pub(crate) fn ruleset(
    files: Option<&SandboxPolicy>,
    deny_tcp: bool,
) -> Result<Option<Arc<Ruleset>>, Failure> {
    let v = match abi() {
        Ok(v) => v,
        Err(why) if files.is_some() => return Err(why.into()),
        // No Landlock: nothing else asks for it (`deny_tcp` is asked for
        // only from ABI 4).
        Err(_) => return Ok(None),
    };
    let net = deny_tcp && v >= NET_ABI;
    let scope = v >= SCOPE_ABI;
    if files.is_some() || net {
        return build(v, files, net, scope).map(|r| Some(Arc::new(r)));
    }
    if !scope {
        return Ok(None);
    }
    // Per process: a forked child makes its own (and never meets a lock
    // that a thread of its parent held).
    static SCOPE_ONLY: PerProcess<Mutex<Option<Arc<Ruleset>>>> = PerProcess::new();
    let mut shared = lock(SCOPE_ONLY.get(|| Mutex::new(None)));
    if shared.is_none() {
        *shared = Some(Arc::new(build(v, None, false, true)?));
    }
    Ok(shared.clone())
}

fn build(v: u32, files: Option<&SandboxPolicy>, net: bool, scope: bool) -> Result<Ruleset, Failure> {
    let handled = write_rights(v);
    let cannot = |e: landlock::RulesetError| Failure::new("cannot create a Landlock ruleset".into(), &e);
    let mut rs = Builder::default().set_compatibility(CompatLevel::HardRequirement);
    if files.is_some() {
        rs = rs.handle_access(handled).map_err(cannot)?;
    }
    if scope {
        rs = rs.scope(Scope::Signal).map_err(cannot)?;
    }
    if net {
        rs = rs
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(cannot)?;
    }
    let mut created = rs.create().map_err(cannot)?;
    if let Some(policy) = files {
        for dir in writable_dirs(policy) {
            let what = || format!("cannot allow writes under {}", dir.display());
            let fd = PathFd::new(&dir).map_err(|e| Failure::new(what(), &e))?;
            created = created
                .add_rule(PathBeneath::new(fd, handled))
                .map_err(|e| Failure::new(what(), &e))?;
        }
        let file_rights = handled & (AccessFs::WriteFile | AccessFs::Truncate);
        for sink in SINKS {
            let what = || format!("cannot allow writes to {sink}");
            let fd = match PathFd::new(sink) {
                Ok(fd) => fd,
                // A host without /dev/tty (no controlling terminal) is fine.
                Err(PathFdError::OpenCall { source, .. })
                    if matches!(source.raw_os_error(), Some(libc::ENOENT | libc::ENXIO)) =>
                {
                    continue
                }
                Err(e) => return Err(Failure::new(what(), &e)),
            };
            created = created
                .add_rule(PathBeneath::new(fd, file_rights))
                .map_err(|e| Failure::new(what(), &e))?;
        }
    }
    let fd: Option<OwnedFd> = created.into();
    // Never 0, 1 or 2 (a host that closed its own): an inherited stream of
    // that number would be the ruleset.
    let fd = fd
        .map(crate::sys::above_stdio)
        .transpose()
        .map_err(|e| Failure::new("the Landlock ruleset".to_owned(), &e))?;
    let scope_only = files.is_none() && !net;
    fd.map(|fd| Ruleset { fd, scope_only }).ok_or_else(|| {
        "Landlock is unavailable: no ruleset was created"
            .to_owned()
            .into()
    })
}

impl Ruleset {
    /// The ruleset's descriptor, for the supervisor's `landlock_restrict_self`.
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    /// See [`Ruleset::scope_only`].
    pub(crate) fn scope_only(&self) -> bool {
        self.scope_only
    }
}

//! Native Landlock confinement (no external runner). A ruleset is built in
//! the host and passed to the executor's supervisor with the spawn request;
//! the command's process restricts *itself* with it (no_new_privs, then
//! `landlock_restrict_self`) between fork and exec, so the command and
//! every descendant are confined — a domain cannot be left — while neither
//! the host's threads nor the supervisor ever are.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

use crate::sandbox::{Enforcement, SandboxMode, SandboxPolicy};

// From include/uapi/linux/landlock.h.
const CREATE_RULESET_VERSION: u32 = 1 << 0;
const RULE_PATH_BENEATH: libc::c_int = 1;
const ACCESS_FS_WRITE_FILE: u64 = 1 << 1;
const ACCESS_FS_REMOVE_DIR: u64 = 1 << 4;
const ACCESS_FS_REMOVE_FILE: u64 = 1 << 5;
const ACCESS_FS_MAKE_CHAR: u64 = 1 << 6;
const ACCESS_FS_MAKE_DIR: u64 = 1 << 7;
const ACCESS_FS_MAKE_REG: u64 = 1 << 8;
const ACCESS_FS_MAKE_SOCK: u64 = 1 << 9;
const ACCESS_FS_MAKE_FIFO: u64 = 1 << 10;
const ACCESS_FS_MAKE_BLOCK: u64 = 1 << 11;
const ACCESS_FS_MAKE_SYM: u64 = 1 << 12;
/// ABI 2: linking or renaming a file into another directory.
const ACCESS_FS_REFER: u64 = 1 << 13;
/// ABI 3: truncate(2), ftruncate(2), open(O_TRUNC).
const ACCESS_FS_TRUNCATE: u64 = 1 << 14;

/// The first ABI that governs every file effect a mode promises (writes,
/// creations, removals, cross-directory links and truncation).
const FULL_ABI: u32 = 3;

/// ABI 4: TCP bind(2) and connect(2), by port.
const ACCESS_NET_BIND_TCP: u64 = 1 << 0;
const ACCESS_NET_CONNECT_TCP: u64 = 1 << 1;
/// The first ABI with network rules.
pub(crate) const NET_ABI: u32 = 4;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    /// Read by the kernel only when the size passed covers it (ABI 4+).
    handled_access_net: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The kernel's Landlock ABI version, or why there is none.
pub(crate) fn abi() -> Result<u32, String> {
    static ABI: OnceLock<Result<u32, String>> = OnceLock::new();
    ABI.get_or_init(|| {
        // SAFETY: a NULL attr with size 0 and the VERSION flag only queries.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<RulesetAttr>(),
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

fn write_rights(abi: u32) -> u64 {
    let mut rights = ACCESS_FS_WRITE_FILE
        | ACCESS_FS_REMOVE_DIR
        | ACCESS_FS_REMOVE_FILE
        | ACCESS_FS_MAKE_CHAR
        | ACCESS_FS_MAKE_DIR
        | ACCESS_FS_MAKE_REG
        | ACCESS_FS_MAKE_SOCK
        | ACCESS_FS_MAKE_FIFO
        | ACCESS_FS_MAKE_BLOCK
        | ACCESS_FS_MAKE_SYM;
    if abi >= 2 {
        rights |= ACCESS_FS_REFER;
    }
    if abi >= 3 {
        rights |= ACCESS_FS_TRUNCATE;
    }
    rights
}

/// Character devices that swallow or produce bytes: writing to them changes
/// no file, and shell redirections to them are everywhere.
const SINKS: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// A ready ruleset for one policy.
pub(crate) struct Ruleset {
    fd: OwnedFd,
}

fn open_path(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid C string; O_PATH opens no file contents.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open succeeded (fd ≥ 0), so `fd` is a descriptor it just
    // created, which nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn add_rule(ruleset: &OwnedFd, path: &Path, allowed: u64) -> io::Result<()> {
    let parent = open_path(path)?;
    let attr = PathBeneathAttr {
        allowed_access: allowed,
        parent_fd: parent.as_raw_fd(),
    };
    // SAFETY: `attr` is a live, initialised `struct landlock_path_beneath_attr`
    // (packed, as the kernel declares it) that the kernel only reads during
    // the call; `ruleset` and `parent` are open descriptors.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The directories a mode may write under.
fn writable_dirs(policy: &SandboxPolicy) -> Vec<std::path::PathBuf> {
    match policy.mode {
        SandboxMode::WorkspaceWrite => {
            let mut dirs = vec![policy.workspace_root.clone(), "/tmp".into(), std::env::temp_dir()];
            dirs.dedup();
            dirs
        }
        _ => Vec::new(),
    }
}

/// Builds the ruleset for a policy: with `files`, reads and execution stay
/// unrestricted and every file write is denied except under the writable
/// directories and to the sinks; with `deny_tcp` (ABI 4+ only), every TCP
/// bind and connect is denied. An error means confinement cannot be
/// applied (the caller fails closed).
pub(crate) fn ruleset(policy: &SandboxPolicy, files: bool, deny_tcp: bool) -> Result<Ruleset, String> {
    let abi = abi()?;
    let handled = if files { write_rights(abi) } else { 0 };
    let net = deny_tcp && abi >= NET_ABI;
    let attr = RulesetAttr {
        handled_access_fs: handled,
        handled_access_net: if net {
            ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP
        } else {
            0
        },
    };
    // The ABI-1 layout (the first field) unless network rights are handled.
    let size = if net {
        std::mem::size_of::<RulesetAttr>()
    } else {
        std::mem::size_of::<u64>()
    };
    if handled == 0 && !net {
        return Err("nothing to confine".to_owned());
    }
    // SAFETY: `attr` is a live `struct landlock_ruleset_attr` that the kernel
    // only reads, for the size passed (the ABI-1 layout, accepted by every
    // kernel with Landlock, or the ABI-4 one on a kernel that has it).
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0u32,
        )
    };
    if fd < 0 {
        return Err(format!(
            "cannot create a Landlock ruleset: {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: landlock_create_ruleset succeeded (fd ≥ 0), so `fd` is a
    // descriptor it just created, which nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    if !files {
        return Ok(Ruleset { fd });
    }
    for dir in writable_dirs(policy) {
        add_rule(&fd, &dir, handled)
            .map_err(|e| format!("cannot allow writes under {}: {e}", dir.display()))?;
    }
    let file_rights = handled & (ACCESS_FS_WRITE_FILE | ACCESS_FS_TRUNCATE);
    for sink in SINKS {
        match add_rule(&fd, Path::new(sink), file_rights) {
            Ok(()) => {}
            // A host without /dev/tty (no controlling terminal) is fine.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENXIO)) => {}
            Err(e) => return Err(format!("cannot allow writes to {sink}: {e}")),
        }
    }
    Ok(Ruleset { fd })
}

impl Ruleset {
    /// The ruleset's descriptor, for the supervisor's `landlock_restrict_self`.
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

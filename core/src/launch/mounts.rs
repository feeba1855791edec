//! A confined command's read-only file system (docs/sandbox.md,
//! "Metadata"). Landlock governs a file's contents, name and existence,
//! never its metadata; where the host may make namespaces, a command of
//! `read-only` or `workspace-write` also enters a mount namespace of its
//! own in which every mount is read-only but its writable directories, so
//! `chmod`, `chown`, `utimensat` and extended attributes outside them fail
//! with EROFS. The supervisor's child does it (core/supervisor/mounts.c);
//! whether this host may is found once per process, by running that same
//! code in a probe, and a host that may not runs its commands as before,
//! with `metadata: false` in their facts.

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;

use crate::confine;
use crate::host::forked::PerProcess;
use crate::launch::clone_exec::clone_exec_fd;
use crate::launch::supervisor::program_memfd;
use crate::launch::wire::*;
use crate::spec::error::DshError;
use crate::spec::sandbox::SandboxPolicy;
use crate::sys::pipe;

/// The namespaces this host may make for its commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespaces {
    /// A mount namespace alone (root with CAP_SYS_ADMIN).
    Mount,
    /// A user namespace with it.
    User,
}

/// The probe's answer, once per host process (a forked host asks again).
fn support() -> &'static Result<Namespaces, String> {
    static SUPPORT: PerProcess<Result<Namespaces, String>> = PerProcess::new();
    SUPPORT.get(probe)
}

/// Runs `dsh-supervisor probe-mounts /dev`: the namespace is entered in a
/// child with /dev writable, and checked.
fn probe() -> Result<Namespaces, String> {
    let cannot = |e: io::Error| format!("cannot run the namespace probe: {e}");
    let program = program_memfd().map_err(cannot)?;
    let (read, write) = pipe(0).map_err(cannot)?;
    let argv = [c"dsh-supervisor", c"probe-mounts", c"/dev"];
    let child = clone_exec_fd(program.as_raw_fd(), &argv, &[], write.as_raw_fd()).map_err(cannot)?;
    drop(write);
    let mut reply = [0u8; REPLY];
    let mut got = 0;
    while got < REPLY {
        // SAFETY: the range written is inside `reply`.
        let n = unsafe { libc::read(read.as_raw_fd(), reply[got..].as_mut_ptr().cast(), REPLY - got) };
        match n {
            n if n > 0 => got += n as usize,
            0 => break,
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
    // SAFETY: `info` is a valid siginfo_t buffer; P_PIDFD takes the fd.
    // (A host that reaps every child may have taken it first: harmless.)
    while unsafe {
        libc::waitid(
            libc::P_PIDFD,
            child.pidfd.as_raw_fd() as libc::id_t,
            info.as_mut_ptr(),
            libc::WEXITED,
        )
    } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
    if got < REPLY {
        return Err("the namespace probe ended without an answer".to_owned());
    }
    match decode(&reply) {
        [R_PROBED, NAMESPACES_MOUNT, ..] => Ok(Namespaces::Mount),
        [R_PROBED, NAMESPACES_USER, ..] => Ok(Namespaces::User),
        [R_PROBED, _, step, errno] => Err(refused(step, errno)),
        _ => Err("the namespace probe gave an unexpected answer".to_owned()),
    }
}

/// The words for a part of the namespace that failed, with its errno.
fn refused(step: i32, errno: i32) -> String {
    let what = match step {
        MOUNTS_UNSHARE => "cannot make a mount namespace",
        MOUNTS_MAP => "cannot map the host's ids in a user namespace",
        MOUNTS_PROPAGATION => "cannot keep its mounts from the host's namespace",
        MOUNTS_KEEP => "cannot keep a writable directory writable",
        MOUNTS_READ_ONLY => "cannot make the mounts read-only",
        MOUNTS_ATTACH => "cannot attach a writable directory again",
        MOUNTS_CAPABILITY => "cannot drop CAP_SYS_ADMIN and CAP_DAC_READ_SEARCH",
        MOUNTS_CHECK => "the mounts were not read-only after all",
        _ => "an unknown step failed",
    };
    format!("{what}: {}", io::Error::from_raw_os_error(errno))
}

/// What a command of `policy` enters, or `None`: an unconfined mode, a
/// host that may make no namespace (see [`support`]), or a policy whose
/// writable directories include `/` (nothing is left to make read-only).
pub(crate) fn read_only_mounts(policy: Option<&SandboxPolicy>) -> Option<ReadOnlyMounts> {
    let policy = confine::confined(policy)?;
    let namespaces = support().as_ref().ok()?;
    let dirs = confine::landlock::writable_dirs(policy);
    if dirs.iter().any(|d| d.as_os_str() == "/") || dirs.len() > MAX_WRITABLE {
        return None;
    }
    // A directory under another is in that one's writable copy already.
    let outermost = dirs
        .iter()
        .filter(|d| !dirs.iter().any(|other| other != *d && d.starts_with(other)));
    let writable = outermost
        .map(|d| CString::new(d.as_os_str().as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    Some(ReadOnlyMounts {
        user: *namespaces == Namespaces::User,
        writable,
    })
}

/// Why this host's confined commands run without their read-only mounts
/// (their facts say `metadata: false`); `None` where they run in them.
pub fn metadata_unavailable() -> Option<&'static str> {
    support().as_ref().err().map(String::as_str)
}

/// The error for a command whose namespace failed in its own process (the
/// probe said it would not): nothing ran.
pub(crate) fn failed(policy: Option<&SandboxPolicy>, detail: i32, errno: i32) -> DshError {
    let mode = policy.map_or("sandbox".to_owned(), |p| p.mode.to_string());
    DshError::SandboxUnavailable(format!(
        "{mode}: cannot make the file system read-only in a mount namespace of the command's own: {}",
        refused(detail, errno)
    ))
}

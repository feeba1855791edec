//! The supervisor's wire format: requests on the control socket, the
//! payload of a spawn, and the replies on a command's report pipe
//! (core/supervisor/supervisor.c describes each message). Every code and
//! size both sides use is defined once, in `wire_codes.rs`: `build.rs`
//! writes them into `wire.h`, which the supervisor includes, and this
//! module makes them constants, so the two cannot drift.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::sys::cvt;

use crate::confine::governor::{Rlimits, Unapplied};
use crate::launch::ending::ExitStatus;
use crate::spec::limits::LimitKind;

macro_rules! wire {
    ($($(#[$meta:meta])* $name:ident: $ty:ty = $value:expr;)*) => {
        $($(#[$meta])* #[allow(dead_code)] pub(crate) const $name: $ty = $value;)*
    };
}
include!("wire_codes.rs");

/// What a command's process enters before exec (FLAG_MOUNTS;
/// `launch/mounts.rs`): a mount namespace (and a user namespace too, with
/// `user`) where all but `writable` is read-only.
pub(crate) struct ReadOnlyMounts {
    pub user: bool,
    pub writable: Vec<std::ffi::CString>,
}

/// A request on the control socket.
#[repr(C)]
pub(crate) struct Header {
    pub op: u32,
    pub flags: u32,
}

pub(crate) const SHUTDOWN: Header = Header {
    op: OP_SHUTDOWN,
    flags: 0,
};

/// A reply on a command's report pipe: four native-endian i32s.
pub(crate) const REPLY: usize = REPLY_SIZE;

pub(crate) fn decode(bytes: &[u8; REPLY]) -> [i32; 4] {
    let word = |i: usize| i32::from_ne_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    [word(0), word(4), word(8), word(12)]
}

/// Which step of starting a command failed in the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Session,
    Stdio,
    Workdir,
    Confine,
    Exec,
    Request,
    Clone,
    /// Entering the command's cgroups or setting its resource limits.
    Limits,
    /// Installing the network filter.
    Network,
    /// Making the pseudo-terminal the controlling terminal.
    Terminal,
    /// Making the file system read-only in a mount namespace of the
    /// command's own (`detail`: which part, a `MOUNTS_*` code).
    Mounts,
    Unknown,
}

impl Step {
    fn from_wire(step: i32) -> Step {
        match step {
            STEP_SESSION => Step::Session,
            STEP_STDIO => Step::Stdio,
            STEP_WORKDIR => Step::Workdir,
            STEP_CONFINE => Step::Confine,
            STEP_EXEC => Step::Exec,
            STEP_REQUEST => Step::Request,
            STEP_CLONE => Step::Clone,
            STEP_LIMITS => Step::Limits,
            STEP_NETWORK => Step::Network,
            STEP_TERMINAL => Step::Terminal,
            STEP_MOUNTS => Step::Mounts,
            _ => Step::Unknown,
        }
    }
}

/// Why a command did not start.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// The supervisor tried: `step` failed with `errno` (`detail`: which
    /// limit, for [`Step::Limits`]; which part, for [`Step::Mounts`]).
    /// Nothing runs.
    Failed { step: Step, errno: i32, detail: i32 },
    /// The request never reached the supervisor (it has ended): nothing
    /// runs, and a new supervisor may be asked.
    Unreachable(io::Error),
    /// Anything else: a local resource, or the supervisor ended while
    /// starting the command.
    Io(io::Error),
}

/// What the supervisor reported on a command's report pipe.
pub(crate) fn exit_status(code: i32, status: i32) -> ExitStatus {
    match code {
        libc::CLD_EXITED => ExitStatus::Code(status),
        libc::CLD_KILLED | libc::CLD_DUMPED => ExitStatus::Signal(status),
        _ => ExitStatus::Unavailable,
    }
}

/// One message of a command's report pipe.
#[derive(Debug)]
pub(crate) enum Report {
    /// The leader runs: its pid.
    Spawned(libc::pid_t),
    /// It did not start (nothing runs).
    Failed(SpawnError),
    /// The leader exited: it stays unreaped until released, unless the
    /// supervisor reaped it already (FLAG_REAP_EMPTY: nobody had its pid,
    /// its tree is empty), when no release may be sent. `tree_empty`: no
    /// process of its tree was left at its exit (so none can be since).
    Exited {
        status: ExitStatus,
        reaped: bool,
        tree_empty: bool,
    },
    /// End of file before the leader's exit was reported: the supervisor
    /// itself was killed.
    Ended,
}

/// The messages of a report pipe, read as they arrive (non-blocking).
#[derive(Default)]
pub(crate) struct ReportReader {
    buf: [u8; REPLY],
    got: usize,
}

impl ReportReader {
    /// Reads the next message; `WouldBlock` while it has not come whole.
    pub(crate) fn read(&mut self, fd: RawFd) -> io::Result<Report> {
        loop {
            // SAFETY: the range written is inside `self.buf`.
            let n = unsafe { libc::read(fd, self.buf[self.got..].as_mut_ptr().cast(), REPLY - self.got) };
            if n == 0 {
                return Ok(Report::Ended);
            }
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            self.got += n as usize;
            if self.got == REPLY {
                self.got = 0;
                return Ok(decode_report(decode(&self.buf)));
            }
        }
    }

    /// Blocks (in `poll`) until the leader's exit has been reported, and
    /// returns that report (`Exited`, or `Ended` when none can come).
    /// `on_spawned` gets the leader's pid if it came before the exit and
    /// the exit is not already waiting behind it: a pid that comes with an
    /// exit may be one the supervisor reaped (and freed) already.
    pub(crate) fn wait(&mut self, fd: RawFd, mut on_spawned: impl FnMut(libc::pid_t)) -> Report {
        let mut spawned = None;
        loop {
            match self.read(fd) {
                Ok(Report::Spawned(pid)) => spawned = Some(pid),
                Ok(exited @ Report::Exited { .. }) => return exited,
                Ok(Report::Failed(_) | Report::Ended) => return Report::Ended,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Some(pid) = spawned.take() {
                        on_spawned(pid);
                    }
                    let mut pfd = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd.
                    unsafe { libc::poll(&mut pfd, 1, -1) };
                }
                Err(_) => return Report::Ended,
            }
        }
    }
}

pub(crate) fn decode_report(words: [i32; 4]) -> Report {
    match words {
        [R_SPAWNED, pid, ..] => Report::Spawned(pid),
        [R_FAILED, step, errno, detail] => Report::Failed(SpawnError::Failed {
            step: Step::from_wire(step),
            errno,
            detail,
        }),
        [R_EXITED, code, status, facts] => Report::Exited {
            status: exit_status(code, status),
            reaped: facts & EXITED_REAPED != 0,
            // Reaped at its exit only with nothing of its tree left.
            tree_empty: facts & (EXITED_REAPED | EXITED_TREE_EMPTY) != 0,
        },
        _ => Report::Failed(SpawnError::Io(io::Error::other(
            "unexpected reply from the dsh supervisor",
        ))),
    }
}

/// `struct limits` of a spawn's payload: `{ u32 set; u32 pad; u64 cpu,
/// fsize, nofile; }`, native-endian; bit i of `set` marks field i.
pub(crate) fn limits_bytes(limits: &Rlimits) -> [u8; LIMITS_SIZE] {
    let mut out = [0u8; LIMITS_SIZE];
    let mut set = 0u32;
    for (i, v) in [limits.cpu, limits.fsize, limits.nofile].into_iter().enumerate() {
        if let Some(v) = v {
            set |= 1 << i;
            out[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_ne_bytes());
        }
    }
    out[..4].copy_from_slice(&set.to_ne_bytes());
    out
}

/// The detail of a STEP_LIMITS failure: which resource limit, or which of
/// the groups passed.
pub(crate) fn unapplied(detail: i32) -> Unapplied {
    match detail {
        LIMIT_CPU => Unapplied::Rlimit(LimitKind::Cpu),
        LIMIT_FSIZE => Unapplied::Rlimit(LimitKind::FileSize),
        LIMIT_NOFILE => Unapplied::Rlimit(LimitKind::OpenFiles),
        d if d >= LIMIT_GROUP => Unapplied::Group((d - LIMIT_GROUP) as usize),
        _ => Unapplied::Unknown,
    }
}

// The transport: the control socket and the report pipes.

pub(crate) fn socketpair(kind: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    cvt(unsafe { libc::socketpair(libc::AF_UNIX, kind | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) })?;
    // SAFETY: socketpair succeeded: both descriptors are fresh and ours.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((crate::sys::above_stdio(a)?, crate::sys::above_stdio(b)?))
}

/// `write(2)` of all of `bytes`, retried on EINTR.
pub(crate) fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is valid for reads of its length.
        let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Sends `header`, then `rest`, with `fds` attached (SCM_RIGHTS) as one
/// message.
pub(crate) fn send_with_fds(fd: &OwnedFd, header: &Header, rest: &[u8], fds: &[RawFd]) -> io::Result<()> {
    debug_assert!(fds.len() <= MAX_FDS);
    // Room for MAX_FDS descriptors, aligned for a cmsghdr.
    let mut control = [0u64; 8];
    const _: () = assert!(MAX_FDS * 4 + 16 <= 64, "control has room for MAX_FDS descriptors");
    let fd_bytes = std::mem::size_of_val(fds);
    let mut iov = [
        libc::iovec {
            iov_base: (header as *const Header).cast_mut().cast(),
            iov_len: size_of::<Header>(),
        },
        libc::iovec {
            iov_base: rest.as_ptr().cast_mut().cast(),
            iov_len: rest.len(),
        },
    ];
    // SAFETY: a zeroed msghdr is valid (null pointers, zero lengths); the
    // CMSG_* macros compute sizes and walk `control`, which is big enough
    // for one cmsghdr carrying MAX_FDS ints (CMSG_SPACE(40) = 56 bytes
    // here, `control` has 64) and 8-byte aligned; `iov`, `header` and
    // `rest` live across the call; sendmsg only reads them.
    let r = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len() as _;
        if !fds.is_empty() {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(fd_bytes as u32) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), fd_bytes);
        }
        loop {
            let r = libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
            if r >= 0 || *libc::__errno_location() != libc::EINTR {
                break r;
            }
        }
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Reads one reply, blocking; `None` at end of file (the supervisor ended).
pub(crate) fn recv_reply(fd: &OwnedFd) -> io::Result<Option<[i32; 4]>> {
    let mut buf = [0u8; REPLY];
    let mut got = 0;
    while got < REPLY {
        // SAFETY: the range written is inside `buf`.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf[got..].as_mut_ptr().cast(), REPLY - got) };
        match n {
            0 => return Ok(None),
            n if n > 0 => got += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(Some(decode(&buf)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rlimit_wire_form_marks_what_is_set() {
        let w = limits_bytes(&Rlimits {
            cpu: Some(2),
            fsize: None,
            nofile: Some(64),
        });
        assert_eq!(u32::from_ne_bytes(w[..4].try_into().unwrap()), 0b101);
        assert_eq!(u64::from_ne_bytes(w[8..16].try_into().unwrap()), 2);
        assert_eq!(u64::from_ne_bytes(w[24..32].try_into().unwrap()), 64);
    }

    #[test]
    fn a_limits_failure_names_the_limit_or_the_group() {
        assert_eq!(unapplied(LIMIT_CPU), Unapplied::Rlimit(LimitKind::Cpu));
        assert_eq!(unapplied(LIMIT_NOFILE), Unapplied::Rlimit(LimitKind::OpenFiles));
        assert_eq!(unapplied(LIMIT_GROUP + 2), Unapplied::Group(2));
        assert_eq!(unapplied(0), Unapplied::Unknown);
    }
}

//! Pseudo-terminals for terminal sessions (docs/terminals.md): the host
//! opens the master and the slave; the slave goes to the supervisor, whose
//! child makes it its controlling terminal; the host keeps the master.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `TIOCGPTPEER` (Linux 4.13+): opens the slave of a master directly,
/// without a path lookup that could race with another mount of devpts.
use crate::sys::cvt;

const TIOCGPTPEER: libc::c_ulong = 0x5441;

/// A freshly opened pseudo-terminal.
pub(crate) struct Pty {
    /// The host's end, close-on-exec, not the host's controlling terminal.
    pub master: OwnedFd,
    /// The program's end, close-on-exec (the supervisor's child dups it
    /// onto 0, 1 and 2).
    pub slave: OwnedFd,
    /// The slave's device number: a descriptor of any process refers to
    /// this terminal when it has this `st_rdev`.
    pub rdev: libc::dev_t,
}

/// Opens a pseudo-terminal of `rows` × `cols`, in UTF-8 mode (`IUTF8`:
/// erasing a character erases all its bytes).
pub(crate) fn open(rows: u16, cols: u16) -> io::Result<Pty> {
    // SAFETY: posix_openpt takes flags and returns a new descriptor or -1.
    let fd = cvt(unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) })?;
    // SAFETY: the descriptor was just created and is ours alone.
    let master = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: both take an open descriptor; grantpt is a no-op on devpts.
    cvt(unsafe { libc::grantpt(master.as_raw_fd()) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::unlockpt(master.as_raw_fd()) })?;
    let slave = open_slave(&master)?;
    set_size(&master, rows, cols)?;
    // SAFETY: a zeroed termios is a valid buffer for tcgetattr to fill.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is a valid termios; the descriptor is open.
    if unsafe { libc::tcgetattr(slave.as_raw_fd(), &mut t) } == 0 {
        t.c_iflag |= libc::IUTF8;
        // SAFETY: as above; tcsetattr only reads `t`.
        unsafe { libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &t) };
    }
    // SAFETY: a zeroed stat is a valid buffer for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid buffer; the descriptor is open.
    cvt(unsafe { libc::fstat(slave.as_raw_fd(), &mut st) })?;
    Ok(Pty {
        master,
        slave,
        rdev: st.st_rdev,
    })
}

fn open_slave(master: &OwnedFd) -> io::Result<OwnedFd> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: TIOCGPTPEER takes the open flags as its integer argument.
    let fd = unsafe { libc::ioctl(master.as_raw_fd(), TIOCGPTPEER, flags) };
    if fd >= 0 {
        // SAFETY: the ioctl returned a fresh descriptor, ours alone.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    // Older kernels: by name.
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: `name` has room for the length given.
    if unsafe { libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ptsname_r wrote a NUL-terminated path into `name`.
    let fd = cvt(unsafe { libc::open(name.as_ptr(), flags) })?;
    // SAFETY: open returned a fresh descriptor, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets the window size; the kernel sends SIGWINCH to the foreground group
/// when it changes.
pub(crate) fn set_size(master: &impl AsRawFd, rows: u16, cols: u16) -> io::Result<()> {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize, which lives across the call.
    cvt(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) }).map(drop)
}

/// The terminal's foreground process group, as its driver publishes it
/// (`tcgetpgrp` on the master); `None` when it has none (the session
/// leader has gone and nobody took the terminal).
pub(crate) fn foreground_group(master: RawFd) -> Option<libc::pid_t> {
    let mut pgid: libc::pid_t = 0;
    // SAFETY: TIOCGPGRP writes one pid_t, which lives across the call.
    let r = unsafe { libc::ioctl(master, libc::TIOCGPGRP, &mut pgid) };
    (r == 0 && pgid > 0).then_some(pgid)
}

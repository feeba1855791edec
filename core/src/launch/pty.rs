//! Pseudo-terminals for terminal sessions (docs/terminals.md): the host
//! opens the master and the slave; the slave goes to the supervisor, whose
//! child makes it its controlling terminal; the host keeps the master.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::pty::{grantpt, ioctl_tiocgptpeer, openpt, ptsname, unlockpt, OpenptFlags};
use rustix::termios::{tcgetattr, tcgetpgrp, tcsetattr, tcsetwinsize, InputModes, OptionalActions, Winsize};

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

const FLAGS: OpenptFlags = OpenptFlags::RDWR
    .union(OpenptFlags::NOCTTY)
    .union(OpenptFlags::CLOEXEC);

/// Opens a pseudo-terminal of `rows` × `cols`, in UTF-8 mode (`IUTF8`:
/// erasing a character erases all its bytes).
pub(crate) fn open(rows: u16, cols: u16) -> io::Result<Pty> {
    // Held for the session's life: never a standard stream's number.
    let master = crate::sys::above_stdio(openpt(FLAGS)?)?;
    // grantpt is a no-op on devpts.
    grantpt(&master)?;
    unlockpt(&master)?;
    let slave = open_slave(&master)?;
    set_size(&master, rows, cols)?;
    if let Ok(mut t) = tcgetattr(&slave) {
        t.input_modes |= InputModes::IUTF8;
        let _ = tcsetattr(&slave, OptionalActions::Now, &t);
    }
    let rdev = rustix::fs::fstat(&slave)?.st_rdev;
    Ok(Pty { master, slave, rdev })
}

fn open_slave(master: &OwnedFd) -> io::Result<OwnedFd> {
    // `TIOCGPTPEER` (Linux 4.13+): the slave of this master directly,
    // without a path lookup that could race with another mount of devpts.
    if let Ok(slave) = ioctl_tiocgptpeer(master, FLAGS) {
        return Ok(slave);
    }
    // Older kernels: by name.
    let name = ptsname(master, Vec::new())?;
    let flags = rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC;
    Ok(rustix::fs::open(
        name.as_c_str(),
        flags,
        rustix::fs::Mode::empty(),
    )?)
}

/// Sets the window size; the kernel sends SIGWINCH to the foreground group
/// when it changes.
pub(crate) fn set_size(master: impl AsFd, rows: u16, cols: u16) -> io::Result<()> {
    let size = Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    Ok(tcsetwinsize(master, size)?)
}

/// The terminal's foreground process group, as its driver publishes it
/// (`tcgetpgrp` on the master); `None` when it has none (the session
/// leader has gone and nobody took the terminal).
pub(crate) fn foreground_group(master: impl AsFd) -> Option<libc::pid_t> {
    tcgetpgrp(master).ok().map(|pgid| pgid.as_raw_nonzero().get())
}

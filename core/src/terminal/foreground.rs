//! Whether a terminal's foreground process group is waiting for input, as
//! the kernel tells it (docs/terminals.md, "Waiting for input"): never
//! guessed from output silence.
//!
//! The rule, on one snapshot of `/proc`: the group is *waiting for input*
//! when it has at least one live member, and
//!
//! 1. at least one thread of a member is asleep (state `S`) in a read of
//!    this terminal: `read`, `readv`, `pread64`, `preadv`, `preadv2` on a
//!    descriptor that is this terminal, or `select`, `pselect6`, `poll`,
//!    `ppoll`, `epoll_wait`, `epoll_pwait`, `epoll_pwait2` watching such a
//!    descriptor for input; and
//! 2. no thread of any member is running: none is runnable (`R`), in
//!    uninterruptible sleep (`D`), stopped (`T`, `t`), or asleep outside a
//!    system call. Threads asleep in any other system call (a pipe from
//!    another member, a futex, `wait4`, a timed sleep) wait on something
//!    else and do not count either way: `cat | sort` waits for input (cat
//!    reads the terminal, sort the pipe), `sleep 5; read` does not while
//!    it sleeps (nobody reads the terminal), and neither does `sleep 100 |
//!    cat` (cat reads the pipe). A background job of a shell without job
//!    control shares the shell's group, so a shell reading its next line
//!    beside it is waiting.
//!
//! Each thread's state comes from `/proc/PID/task/TID/stat` and its current
//! system call and arguments from `/proc/PID/task/TID/syscall`; a descriptor
//! is this terminal when `stat` of `/proc/PID/fd/N` gives its device
//! number, or is `/dev/tty` in a process whose controlling terminal is this
//! one (password prompts read it); `select` and `poll` sets are read from
//! `/proc/PID/mem`, epoll interest lists from `/proc/PID/fdinfo/EPFD`. An
//! epoll entry names the descriptor number the file had when it was
//! registered, which may now be another file: the entry is resolved by the
//! file itself (its inode and device in the fdinfo line, and `kcmp` to tell
//! epoll instances apart, which share one inode), and an epoll watched by
//! an epoll is followed (at most [`DEPTH`] levels). Whatever cannot be read
//! (another user's process, a kernel without these files) proves nothing:
//! the answer is then `false`.
//!
//! Two more facts keep the answer honest:
//!
//! - **Input not read yet.** Right after a write, the reader is still
//!   asleep in its read until the kernel wakes it. Input that a read of the
//!   terminal would return now (a complete line in canonical mode, `VMIN`
//!   bytes in raw mode; `poll` on the terminal says, after the kernel
//!   delivered what was written) means the group is about to run: not
//!   waiting.
//! - **Relays.** A member that reads this terminal while holding the master
//!   of another pseudo-terminal (`script`, `sudo` with `use_pty`, `expect`)
//!   forwards the keys to the program there: the group waits for input
//!   exactly when the foreground group of that terminal does, by the same
//!   rule (followed at most [`DEPTH`] relays deep; a terminal whose
//!   foreground cannot be found proves nothing).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use crate::launch::tree::{group_in_stat, session_in_stat};
use crate::sys::{pidfd_open, proc};
use crate::terminal::{Foreground, Terminal};

/// How deep nested epolls and relays are followed (the kernel nests
/// epolls at most 4 deep).
pub(crate) const DEPTH: usize = 4;

/// What one thread is doing, as far as input goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activity {
    /// Asleep reading (or polling for input on) the terminal.
    ReadsTerminal,
    /// Asleep waiting on something else: another member, a child, a lock.
    WaitsElsewhere,
    /// Can make progress without input, or cannot be told.
    Busy,
}

/// System calls that read one descriptor, the first argument.
fn reads_fd(nr: i64) -> bool {
    [
        libc::SYS_read,
        libc::SYS_readv,
        libc::SYS_pread64,
        libc::SYS_preadv,
        libc::SYS_preadv2,
    ]
    .contains(&nr)
}

#[derive(Clone, Copy)]
enum Wait {
    Select,
    Poll,
    Epoll,
}

fn multiplexer(nr: i64) -> Option<Wait> {
    #[cfg(target_arch = "x86_64")]
    {
        if nr == libc::SYS_select {
            return Some(Wait::Select);
        }
        if nr == libc::SYS_poll {
            return Some(Wait::Poll);
        }
        if nr == libc::SYS_epoll_wait {
            return Some(Wait::Epoll);
        }
    }
    match nr {
        libc::SYS_pselect6 => Some(Wait::Select),
        libc::SYS_ppoll => Some(Wait::Poll),
        libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2 => Some(Wait::Epoll),
        _ => None,
    }
}

/// What `stat` of one descriptor says.
#[derive(Clone, Copy)]
struct File {
    mode: u32,
    rdev: libc::dev_t,
    dev: libc::dev_t,
    ino: u64,
}

impl File {
    fn char_device(&self, major: u32, minor: u32) -> bool {
        (self.mode & libc::S_IFMT) == libc::S_IFCHR
            && (libc::major(self.rdev), libc::minor(self.rdev)) == (major, minor)
    }
}

/// One process being inspected: its descriptors, as far as they matter.
struct Member {
    pid: libc::pid_t,
    tty: libc::dev_t,
    files: HashMap<u64, Option<File>>,
    fds: Option<Vec<u64>>,
}

/// `/dev/tty`'s device number: a descriptor of it is the controlling
/// terminal of the process that opened it.
const DEV_TTY: (u32, u32) = (5, 0);
/// `/dev/ptmx` (and `/dev/pts/ptmx`): a descriptor of it is a master.
const PTMX: (u32, u32) = (5, 2);
/// The first major of pseudo-terminal slaves (`/dev/pts/N`).
const PTS_MAJOR: u32 = 136;
/// `kcmp(2)`'s "is this descriptor the file that epoll entry watches".
const KCMP_EPOLL_TFD: libc::c_int = 7;

impl Member {
    fn new(pid: libc::pid_t, tty: libc::dev_t) -> Member {
        Member {
            pid,
            tty,
            files: HashMap::new(),
            fds: None,
        }
    }

    fn file(&mut self, fd: u64) -> Option<File> {
        let pid = self.pid;
        *self.files.entry(fd).or_insert_with(|| {
            let st = proc::stat(&format!("{pid}/fd/{fd}")).ok()?;
            Some(File {
                mode: st.st_mode,
                rdev: st.st_rdev,
                dev: st.st_dev,
                ino: st.st_ino,
            })
        })
    }

    /// The descriptors it has open now.
    fn fds(&mut self) -> Vec<u64> {
        let pid = self.pid;
        self.fds
            .get_or_insert_with(|| proc::numbers(&format!("{pid}/fd")))
            .clone()
    }

    fn is_tty(&mut self, fd: u64) -> bool {
        let Some(f) = self.file(fd) else {
            return false;
        };
        (f.mode & libc::S_IFMT) == libc::S_IFCHR
            && (f.rdev == self.tty
                || (f.char_device(DEV_TTY.0, DEV_TTY.1)
                    && controlling_terminal(self.pid) == Some(encode_dev(self.tty))))
    }

    fn is_epoll(&self, fd: u64) -> bool {
        proc::read_link(&format!("{}/fd/{fd}", self.pid)).is_ok_and(|l| l == b"anon_inode:[eventpoll]")
    }

    fn memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let file = proc::open(&format!("{}/mem", self.pid), false).ok()?;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, addr).ok()?;
        Some(buf)
    }

    /// Whether a `select` read set (`nfds`, at `addr`) holds the terminal.
    fn select_watches(&mut self, nfds: u64, addr: u64) -> bool {
        if addr == 0 || nfds == 0 || nfds > 1 << 20 {
            return false;
        }
        let words = nfds.div_ceil(64) as usize;
        let Some(set) = self.memory(addr, words * 8) else {
            return false;
        };
        (0..nfds).any(|fd| set[(fd / 8) as usize] & (1 << (fd % 8)) != 0 && self.is_tty(fd))
    }

    /// Whether a `poll` array (`nfds` entries at `addr`) asks for input on
    /// the terminal.
    fn poll_watches(&mut self, addr: u64, nfds: u64) -> bool {
        if addr == 0 || nfds == 0 || nfds > 1 << 16 {
            return false;
        }
        let Some(fds) = self.memory(addr, nfds as usize * 8) else {
            return false;
        };
        let input = libc::POLLIN | libc::POLLPRI | libc::POLLRDNORM;
        fds.chunks_exact(8).any(|p| {
            let fd = i32::from_ne_bytes([p[0], p[1], p[2], p[3]]);
            let events = i16::from_ne_bytes([p[4], p[5]]);
            fd >= 0 && events & input != 0 && self.is_tty(fd as u64)
        })
    }

    /// Whether the epoll instance `epfd` watches the terminal for input,
    /// itself or through the epolls it watches (`depth` more levels).
    fn epoll_watches(&mut self, epfd: u64, depth: usize) -> bool {
        let Ok(info) = proc::read(&format!("{}/fdinfo/{epfd}", self.pid)) else {
            return false;
        };
        let input = (libc::EPOLLIN | libc::EPOLLPRI) as u32;
        String::from_utf8_lossy(&info)
            .lines()
            .filter_map(parse_epoll_entry)
            .filter(|e| e.events & input != 0)
            .any(|e| self.entry_watches(epfd, &e, depth))
    }

    /// Whether one epoll entry is the terminal (or an epoll that watches
    /// it): the registered file is found among the descriptors open now by
    /// its inode (and for epolls, which share one inode, by `kcmp`), never
    /// by the number it was registered under.
    fn entry_watches(&mut self, epfd: u64, e: &EpollEntry, depth: usize) -> bool {
        let Some((ino, dev)) = e.file else {
            // A kernel that does not name the file: it proves nothing.
            return false;
        };
        let candidates = std::iter::once(e.fd).chain(self.fds().into_iter().filter(|&fd| fd != e.fd));
        for fd in candidates.collect::<Vec<_>>() {
            let Some(f) = self.file(fd) else {
                continue;
            };
            if f.ino != ino || f.dev != dev {
                continue;
            }
            if self.is_tty(fd) {
                return true;
            }
            if depth > 0
                && fd != epfd
                && self.is_epoll(fd)
                && same_epoll_target(self.pid, fd, epfd, e.fd)
                && self.epoll_watches(fd, depth - 1)
            {
                return true;
            }
        }
        false
    }

    /// What thread `tid` is doing, from its state and current system call.
    fn activity(&mut self, tid: u64) -> Activity {
        let base = format!("{}/task/{tid}", self.pid);
        let Ok(stat) = proc::read(&format!("{base}/stat")) else {
            // Gone meanwhile: it waits for nothing.
            return Activity::WaitsElsewhere;
        };
        match state_in_stat(&stat) {
            Some('S') => {}
            Some('Z' | 'X') => return Activity::WaitsElsewhere,
            _ => return Activity::Busy,
        }
        let Ok(syscall) = proc::read(&format!("{base}/syscall")) else {
            return Activity::Busy;
        };
        self.classify(&String::from_utf8_lossy(&syscall))
    }

    /// Classifies a `/proc/…/syscall` line: `running`, `-1 SP PC` (asleep
    /// outside a system call), or `NR ARG0 … ARG5 SP PC` in hex.
    fn classify(&mut self, line: &str) -> Activity {
        let mut words = line.split_whitespace();
        let Some(nr) = words.next().and_then(|w| w.parse::<i64>().ok()) else {
            return Activity::Busy;
        };
        if nr < 0 {
            return Activity::Busy;
        }
        let args: Vec<u64> = words
            .take(6)
            .filter_map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16).ok())
            .collect();
        let arg = |i: usize| args.get(i).copied().unwrap_or(0);
        if reads_fd(nr) {
            return if self.is_tty(arg(0)) {
                Activity::ReadsTerminal
            } else {
                Activity::WaitsElsewhere
            };
        }
        let watches = match multiplexer(nr) {
            Some(Wait::Select) => self.select_watches(arg(0), arg(1)),
            Some(Wait::Poll) => self.poll_watches(arg(0), arg(1)),
            Some(Wait::Epoll) => self.epoll_watches(arg(0), DEPTH),
            None => false,
        };
        if watches {
            Activity::ReadsTerminal
        } else {
            Activity::WaitsElsewhere
        }
    }

    /// The pseudo-terminals it holds the master of (their slaves' device
    /// numbers, from `tty-index` in the master's fdinfo).
    fn served_terminals(&mut self) -> Vec<libc::dev_t> {
        let mut served = Vec::new();
        for fd in self.fds() {
            if !self.file(fd).is_some_and(|f| f.char_device(PTMX.0, PTMX.1)) {
                continue;
            }
            let Ok(info) = proc::read(&format!("{}/fdinfo/{fd}", self.pid)) else {
                continue;
            };
            let index = String::from_utf8_lossy(&info)
                .lines()
                .find_map(|l| l.strip_prefix("tty-index:")?.trim().parse::<u32>().ok());
            if let Some(i) = index {
                served.push(libc::makedev(PTS_MAJOR + i / 256, i % 256));
            }
        }
        served
    }

    /// A descriptor of ours for the terminal itself (not `/dev/tty`), taken
    /// from this member with `pidfd_getfd` (Linux 5.6).
    fn terminal_copy(&mut self) -> Option<OwnedFd> {
        let fd = self.fds().into_iter().find(|&fd| {
            self.file(fd)
                .is_some_and(|f| (f.mode & libc::S_IFMT) == libc::S_IFCHR && f.rdev == self.tty)
        })?;
        let pidfd = pidfd_open(self.pid).ok()?;
        let copy = rustix::process::pidfd_getfd(&pidfd, fd as i32, rustix::process::PidfdGetfdFlags::empty())
            .ok()?;
        // It may have been replaced since the stat: check what we got.
        let st = rustix::fs::fstat(&copy).ok()?;
        let ok = (st.st_mode & libc::S_IFMT) == libc::S_IFCHR && st.st_rdev == self.tty;
        ok.then_some(copy)
    }
}

/// One line of an epoll's fdinfo: `tfd: N events: E data: D pos:P ino:I
/// sdev:S` (the last three since Linux 4.x).
struct EpollEntry {
    fd: u64,
    events: u32,
    /// The registered file's inode and device, when the kernel says.
    file: Option<(u64, libc::dev_t)>,
}

fn parse_epoll_entry(line: &str) -> Option<EpollEntry> {
    let mut words = line.split_whitespace();
    (words.next()? == "tfd:").then_some(())?;
    let fd = words.next()?.parse().ok()?;
    (words.next()? == "events:").then_some(())?;
    let events = u32::from_str_radix(words.next()?, 16).ok()?;
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v, 16).ok())
    };
    // `sdev` is the kernel's own encoding: major << 20 | minor.
    let file = field("ino:")
        .zip(field("sdev:"))
        .map(|(ino, sdev)| (ino, libc::makedev((sdev >> 20) as u32, (sdev & 0xfffff) as u32)));
    Some(EpollEntry { fd, events, file })
}

/// Whether descriptor `fd` of `pid` is the very file entry `tfd` of its
/// epoll `epfd` watches (`kcmp`; false where the kernel has none).
fn same_epoll_target(pid: libc::pid_t, fd: u64, epfd: u64, tfd: u64) -> bool {
    #[repr(C)]
    struct Slot {
        efd: u32,
        tfd: u32,
        toff: u32,
    }
    let slot = Slot {
        efd: epfd as u32,
        tfd: tfd as u32,
        toff: 0,
    };
    // SAFETY: kcmp takes pids, a type, a descriptor number and, for
    // KCMP_EPOLL_TFD, a pointer to a valid slot that outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, pid, pid, KCMP_EPOLL_TFD, fd, &slot as *const Slot) };
    r == 0
}

/// The kernel's encoding of a device number in `/proc/…/stat`'s `tty_nr`.
fn encode_dev(dev: libc::dev_t) -> u64 {
    let (major, minor) = (libc::major(dev) as u64, libc::minor(dev) as u64);
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// Field `n` (0: the state) after the command name of a `stat` line.
fn stat_field(stat: &[u8], n: usize) -> Option<i64> {
    crate::sys::stat_fields(stat).nth(n)?.parse().ok()
}

/// The controlling terminal of `pid` (`tty_nr` of its `stat`), encoded as
/// [`encode_dev`] does.
fn controlling_terminal(pid: libc::pid_t) -> Option<u64> {
    let stat = proc::read(&format!("{pid}/stat")).ok()?;
    u64::try_from(stat_field(&stat, 4)?).ok().filter(|&t| t != 0)
}

/// The state letter of a `/proc/…/stat` line.
fn state_in_stat(stat: &[u8]) -> Option<char> {
    crate::sys::stat_fields(stat).next()?.chars().next()
}

/// The live members of process group `pgid` in session `session`.
pub(crate) fn members(session: libc::pid_t, pgid: libc::pid_t) -> Vec<libc::pid_t> {
    proc::pids()
        .into_iter()
        .filter(|pid| {
            let Ok(stat) = proc::read(&format!("{pid}/stat")) else {
                return false;
            };
            group_in_stat(&stat) == Some(pgid)
                && session_in_stat(&stat) == Some(session)
                && !matches!(state_in_stat(&stat), Some('Z' | 'X'))
        })
        .collect()
}

/// The session and foreground group of the terminal whose slave is `tty`,
/// as a process it controls publishes them (`session` and `tpgid` of its
/// `stat`).
fn foreground_of(tty: libc::dev_t) -> Option<(libc::pid_t, libc::pid_t)> {
    let encoded = encode_dev(tty) as i64;
    proc::pids().into_iter().find_map(|pid| {
        let stat = proc::read(&format!("{pid}/stat")).ok()?;
        if stat_field(&stat, 4)? != encoded || matches!(state_in_stat(&stat), Some('Z' | 'X')) {
            return None;
        }
        let (session, tpgid) = (stat_field(&stat, 3)?, stat_field(&stat, 5)?);
        (tpgid > 0).then_some((session as libc::pid_t, tpgid as libc::pid_t))
    })
}

/// Whether the terminal holds input that a read would return now: `poll`
/// on it (which first hands the line discipline what was written). False
/// when no member holds the terminal itself or its copy cannot be taken.
fn input_pending(members: &mut [Member]) -> bool {
    let Some(copy) = members.iter_mut().find_map(Member::terminal_copy) else {
        return false;
    };
    let mut p = libc::pollfd {
        fd: copy.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r == 1 && p.revents & libc::POLLIN != 0
}

/// The rule of this module's documentation, for the foreground group
/// `pgid` of the terminal whose slave has device number `tty`, in
/// `session`.
pub(crate) fn input_waiting(session: libc::pid_t, pgid: libc::pid_t, tty: libc::dev_t) -> bool {
    waiting(session, pgid, tty, DEPTH, &mut HashSet::new())
}

fn waiting(
    session: libc::pid_t,
    pgid: libc::pid_t,
    tty: libc::dev_t,
    depth: usize,
    seen: &mut HashSet<libc::dev_t>,
) -> bool {
    seen.insert(tty);
    let mut members: Vec<Member> = members(session, pgid)
        .into_iter()
        .map(|pid| Member::new(pid, tty))
        .collect();
    // Input that a read would return now first: looked at after the
    // states, it could be gone because a reader took it in between, and
    // that reader's state read before would say it still sleeps.
    if members.is_empty() || input_pending(&mut members) {
        return false;
    }
    let mut reads = false;
    for member in &mut members {
        let mut member_reads = false;
        for tid in proc::numbers(&format!("{}/task", member.pid)) {
            match member.activity(tid) {
                Activity::ReadsTerminal => member_reads = true,
                Activity::WaitsElsewhere => {}
                Activity::Busy => return false,
            }
        }
        if !member_reads {
            continue;
        }
        let served = member.served_terminals();
        if !served.is_empty() {
            // A relay: it waits for input when a terminal it serves does.
            let inner_waits = depth > 0
                && served.into_iter().any(|inner| {
                    !seen.contains(&inner)
                        && foreground_of(inner).is_some_and(|(s, g)| waiting(s, g, inner, depth - 1, seen))
                });
            if !inner_waits {
                return false;
            }
        }
        reads = true;
    }
    reads
}

impl Terminal {
    /// Blocks until the kernel shows the foreground group waiting for input
    /// ([`Terminal::inspect_foreground`]'s `input_waiting`), `timeout`
    /// passed, or the program exited; whether it is waiting. Right after a
    /// `write`, the answer is `true` only once the program has taken what
    /// was written and waits again. Refused where blocking is (inside a
    /// callback or an async runtime), unless `timeout` is zero.
    pub fn wait_input_waiting(&self, timeout: Option<Duration>) -> crate::Result<bool> {
        crate::host::runtime::may_block(timeout, Some(self.shared.host_pid))?;
        Ok(self.poll_input_waiting(timeout))
    }

    /// [`Terminal::wait_input_waiting`] off the caller's thread: `on_done`
    /// gets the answer on the callback thread.
    pub fn wait_input_waiting_with(
        &self,
        timeout: Option<Duration>,
        on_done: impl FnOnce(bool) + Send + 'static,
    ) {
        let this = self.clone();
        crate::host::runtime::handle().spawn_blocking(move || {
            let waiting = this.poll_input_waiting(timeout);
            crate::host::callbacks::dispatch(move || on_done(waiting));
        });
    }

    /// The kernel offers no event for "a reader went to sleep": look at
    /// `/proc` every few milliseconds (1 ms at first, then up to 20 ms),
    /// waking early when the program exits.
    fn poll_input_waiting(&self, timeout: Option<Duration>) -> bool {
        // A timeout past what an Instant can hold is no limit.
        let end = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut step = Duration::from_millis(1);
        loop {
            match self.inspect_foreground() {
                Some(Foreground {
                    input_waiting: true, ..
                }) => return true,
                None => return false,
                Some(_) => {}
            }
            let left = end.map(|e| e.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return false;
            }
            let nap = left.map_or(step, |l| l.min(step));
            if self.shared.exited.wait_timeout(Some(nap)) {
                return false;
            }
            step = (step * 2).min(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member() -> Member {
        // Nothing of pid 0 is readable: every descriptor is "not the tty".
        Member::new(0, 0)
    }

    #[test]
    fn syscall_lines_are_classified() {
        let mut m = member();
        assert_eq!(m.classify("running"), Activity::Busy);
        assert_eq!(m.classify("-1 0x7ffd 0x4011"), Activity::Busy);
        let sleep = format!(
            "{} 0x0 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x4011",
            libc::SYS_clock_nanosleep
        );
        assert_eq!(m.classify(&sleep), Activity::WaitsElsewhere);
        let read = format!("{} 0x3 0x7ffd 0x1 0x0 0x0 0x0 0x7ffd 0x4011", libc::SYS_read);
        assert_eq!(
            m.classify(&read),
            Activity::WaitsElsewhere,
            "fd 3 is not the terminal"
        );
        m.files.insert(
            3,
            Some(File {
                mode: libc::S_IFCHR,
                rdev: 0,
                dev: 0,
                ino: 0,
            }),
        );
        assert_eq!(m.classify(&read), Activity::ReadsTerminal);
        let wait = format!(
            "{} 0xffffffffffffffff 0x7ffd 0x0 0x0 0x0 0x0 0x7ffd 0x4011",
            libc::SYS_wait4
        );
        assert_eq!(m.classify(&wait), Activity::WaitsElsewhere);
    }

    #[test]
    fn state_is_read_after_the_name() {
        assert_eq!(state_in_stat(b"42 (a) R) S 1 42 42"), Some('S'));
        assert_eq!(state_in_stat(b"42 (x) R 1"), Some('R'));
    }
}

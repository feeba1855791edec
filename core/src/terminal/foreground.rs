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
//! one (password prompts read it); `select` and `poll` sets are read from `/proc/PID/mem`, epoll
//! interest lists from `/proc/PID/fdinfo/EPFD`. Whatever cannot be read
//! (another user's process, a kernel without these files) proves nothing:
//! the answer is then `false`.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};

use crate::launch::tree::{group_in_stat, session_in_stat};

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

/// One process being inspected: which of its descriptors are the terminal.
struct Member {
    pid: libc::pid_t,
    tty: libc::dev_t,
    known: HashMap<u64, bool>,
}

/// `/dev/tty`'s device number: a descriptor of it is the controlling
/// terminal of the process that opened it.
const DEV_TTY: (u32, u32) = (5, 0);

impl Member {
    fn is_tty(&mut self, fd: u64) -> bool {
        let (pid, tty) = (self.pid, self.tty);
        *self.known.entry(fd).or_insert_with(|| {
            let Ok(m) = fs::metadata(format!("/proc/{pid}/fd/{fd}")) else {
                return false;
            };
            if (m.mode() & libc::S_IFMT) != libc::S_IFCHR {
                return false;
            }
            m.rdev() == tty
                || ((libc::major(m.rdev()), libc::minor(m.rdev())) == DEV_TTY
                    && controlling_terminal(pid) == Some(encode_dev(tty)))
        })
    }

    fn memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let file = fs::File::open(format!("/proc/{}/mem", self.pid)).ok()?;
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

    /// Whether the epoll instance `epfd` watches the terminal for input.
    fn epoll_watches(&mut self, epfd: u64) -> bool {
        let Ok(info) = fs::read_to_string(format!("/proc/{}/fdinfo/{epfd}", self.pid)) else {
            return false;
        };
        let watched: Vec<(u64, u32)> = info
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                (words.next()? == "tfd:").then_some(())?;
                let fd = words.next()?.parse().ok()?;
                (words.next()? == "events:").then_some(())?;
                let events = u32::from_str_radix(words.next()?, 16).ok()?;
                Some((fd, events))
            })
            .collect();
        watched
            .into_iter()
            .any(|(fd, events)| events & (libc::EPOLLIN | libc::EPOLLPRI) as u32 != 0 && self.is_tty(fd))
    }

    /// What thread `tid` is doing, from its state and current system call.
    fn activity(&mut self, tid: libc::pid_t) -> Activity {
        let base = format!("/proc/{}/task/{tid}", self.pid);
        let Ok(stat) = fs::read(format!("{base}/stat")) else {
            // Gone meanwhile: it waits for nothing.
            return Activity::WaitsElsewhere;
        };
        match state_in_stat(&stat) {
            Some('S') => {}
            Some('Z' | 'X') => return Activity::WaitsElsewhere,
            _ => return Activity::Busy,
        }
        let Ok(syscall) = fs::read_to_string(format!("{base}/syscall")) else {
            return Activity::Busy;
        };
        self.classify(&syscall)
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
            Some(Wait::Epoll) => self.epoll_watches(arg(0)),
            None => false,
        };
        if watches {
            Activity::ReadsTerminal
        } else {
            Activity::WaitsElsewhere
        }
    }
}

/// The kernel's encoding of a device number in `/proc/…/stat`'s `tty_nr`.
fn encode_dev(dev: libc::dev_t) -> u64 {
    let (major, minor) = (libc::major(dev) as u64, libc::minor(dev) as u64);
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// The controlling terminal of `pid` (`tty_nr` of its `stat`), encoded as
/// [`encode_dev`] does.
fn controlling_terminal(pid: libc::pid_t) -> Option<u64> {
    let stat = fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    let tty_nr: i64 = std::str::from_utf8(&stat[close + 1..])
        .ok()?
        .split_whitespace()
        .nth(4)?
        .parse()
        .ok()?;
    u64::try_from(tty_nr).ok().filter(|&t| t != 0)
}

/// The state letter of a `/proc/…/stat` line.
fn state_in_stat(stat: &[u8]) -> Option<char> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    std::str::from_utf8(&stat[close + 1..])
        .ok()?
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// The live members of process group `pgid` in session `session`.
pub(crate) fn members(session: libc::pid_t, pgid: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|pid| {
            let Ok(stat) = fs::read(format!("/proc/{pid}/stat")) else {
                return false;
            };
            group_in_stat(&stat) == Some(pgid)
                && session_in_stat(&stat) == Some(session)
                && !matches!(state_in_stat(&stat), Some('Z' | 'X'))
        })
        .collect()
}

/// The rule of this module's documentation, for the foreground group
/// `pgid` of the terminal whose slave has device number `tty`, in
/// `session`.
pub(crate) fn input_waiting(session: libc::pid_t, pgid: libc::pid_t, tty: libc::dev_t) -> bool {
    let members = members(session, pgid);
    if members.is_empty() {
        return false;
    }
    let mut reads = false;
    for pid in members {
        let mut member = Member {
            pid,
            tty,
            known: HashMap::new(),
        };
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for tid in tasks
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        {
            match member.activity(tid) {
                Activity::ReadsTerminal => reads = true,
                Activity::WaitsElsewhere => {}
                Activity::Busy => return false,
            }
        }
    }
    reads
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member() -> Member {
        // Nothing of pid 0 is readable: every descriptor is "not the tty".
        Member {
            pid: 0,
            tty: 0,
            known: HashMap::new(),
        }
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
        m.known.insert(3, true);
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

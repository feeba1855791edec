//! Signalling a command's whole tree: its process group while the leader is
//! unreaped, plus every process carrying the command's `DSH_EXEC_TAG` and
//! every descendant of one (by parent pid). That catches descendants that
//! left the group (`setsid`, double forks, `nohup`) and children that
//! replaced their environment (`env -i`) while their parent still lives.
//!
//! Not covered: a process that both dropped the tag (exec with a new
//! environment) *and* was orphaned before the sweep, and processes of
//! another user (their environ is unreadable). The tag is read from
//! `/proc/<pid>/environ`, the environment at exec time, so a process that
//! merely unsets the variable keeps it there.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Read;

use crate::spawn::{pidfd_open, pidfd_send_signal};

/// Signals the process group `pgid`. Only sound while its leader is our
/// unreaped child: until then no other process can be given that id.
pub(crate) fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: killpg takes plain integers; ESRCH (group empty) is fine.
    unsafe {
        libc::killpg(pgid, sig);
    }
}

/// What to look for in `/proc/<pid>/environ`: one command's exact tag, or
/// any tag starting with an executor's prefix. The `NAME=value` needle is
/// built once, not per process a sweep reads.
pub(crate) struct TagMatch {
    needle: Vec<u8>,
    exact: bool,
}

impl TagMatch {
    /// Processes of one command.
    pub(crate) fn command(tag: &str) -> Self {
        Self::new(tag, true)
    }

    /// Processes of every command of an executor.
    pub(crate) fn executor(prefix: &str) -> Self {
        Self::new(prefix, false)
    }

    fn new(tag: &str, exact: bool) -> Self {
        TagMatch {
            needle: format!("{}={tag}", crate::env::EXEC_TAG_VAR).into_bytes(),
            exact,
        }
    }

    fn matches(&self, environ: &[u8]) -> bool {
        environ.split(|&b| b == 0).any(|entry| {
            if self.exact {
                entry == self.needle.as_slice()
            } else {
                entry.starts_with(&self.needle)
            }
        })
    }
}

fn read_file(path: &str, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    match fs::File::open(path) {
        Ok(mut f) => f.read_to_end(buf).is_ok(),
        Err(_) => false,
    }
}

/// The parent pid of a live process from `/proc/<pid>/stat`; `None` for a
/// zombie or a vanished pid. (State and ppid follow the last ')': the
/// command name may itself contain one.)
fn parent_of(pid: libc::pid_t, buf: &mut Vec<u8>) -> Option<libc::pid_t> {
    if !read_file(&format!("/proc/{pid}/stat"), buf) {
        return None;
    }
    let close = buf.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&buf[close + 1..]).ok()?;
    let mut fields = rest.split_whitespace();
    if matches!(fields.next(), Some("Z" | "X")) {
        return None;
    }
    fields.next()?.parse().ok()
}

fn tagged(pid: libc::pid_t, m: &TagMatch, buf: &mut Vec<u8>) -> bool {
    read_file(&format!("/proc/{pid}/environ"), buf) && m.matches(buf)
}

/// Sends `sig` to every live process that carries the tag or descends from
/// one that does. Each target is pinned with a pidfd and re-checked before
/// the signal, so a pid recycled between the scan and the kill is never hit.
/// Returns how many processes were signalled.
pub(crate) fn signal_tagged(m: &TagMatch, sig: libc::c_int) -> usize {
    let Ok(dir) = fs::read_dir("/proc") else {
        return 0;
    };
    let me = std::process::id() as libc::pid_t;
    let mut buf = Vec::with_capacity(4096);
    let mut parents: HashMap<libc::pid_t, libc::pid_t> = HashMap::new();
    let mut selected: HashSet<libc::pid_t> = HashSet::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        if tagged(pid, m, &mut buf) {
            selected.insert(pid);
        } else if let Some(ppid) = parent_of(pid, &mut buf) {
            parents.insert(pid, ppid);
        }
    }
    // Descendants of selected processes, to a fixpoint.
    loop {
        let before = selected.len();
        parents.retain(|pid, ppid| {
            if selected.contains(ppid) {
                selected.insert(*pid);
                false
            } else {
                true
            }
        });
        if selected.len() == before {
            break;
        }
    }
    let mut hit = 0;
    for &pid in &selected {
        let Ok(pidfd) = pidfd_open(pid) else { continue };
        // The pidfd pins this incarnation; confirm it is still one of ours.
        let still_ours =
            tagged(pid, m, &mut buf) || parent_of(pid, &mut buf).is_some_and(|pp| selected.contains(&pp));
        if still_ours && pidfd_send_signal(&pidfd, sig).is_ok() {
            hit += 1;
        }
    }
    hit
}

/// [`signal_tagged`], and for SIGKILL again until a sweep finds nobody: a
/// process forked while a sweep was reading `/proc` is caught by the next.
/// (A SIGKILLed process is a zombie at once, with an empty environ.)
pub(crate) fn sweep_tagged(m: &TagMatch, sig: libc::c_int) -> usize {
    let mut total = signal_tagged(m, sig);
    if sig == libc::SIGKILL {
        let mut last = total;
        for _ in 0..16 {
            if last == 0 {
                break;
            }
            last = signal_tagged(m, sig);
            total += last;
        }
    }
    total
}

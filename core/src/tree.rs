//! Signalling a command's whole tree: its process group while the leader is
//! unreaped, plus every process carrying the command's `DSH_EXEC_TAG` — which
//! catches descendants that left the group (`setsid`, double forks, `nohup`).
//!
//! Not covered: a descendant that replaced its environment at exec (`env -i`)
//! *and* left the group, and processes of another user (we cannot read their
//! environ). The tag is read from `/proc/<pid>/environ`, the environment at
//! exec time, so a process that merely unsets the variable keeps it there.

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

/// What to look for in `/proc/<pid>/environ`: `exact` matches one command's
/// tag, otherwise any tag starting with `tag` (an executor's prefix).
pub(crate) struct TagMatch<'a> {
    pub tag: &'a str,
    pub exact: bool,
}

impl TagMatch<'_> {
    fn matches(&self, environ: &[u8]) -> bool {
        let needle = format!("{}={}", crate::env::EXEC_TAG_VAR, self.tag);
        environ.split(|&b| b == 0).any(|entry| {
            if self.exact {
                entry == needle.as_bytes()
            } else {
                entry.starts_with(needle.as_bytes())
            }
        })
    }
}

fn read_environ(pid: &str, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    match fs::File::open(format!("/proc/{pid}/environ")) {
        Ok(mut f) => f.read_to_end(buf).is_ok(),
        Err(_) => false,
    }
}

/// Sends `sig` to every live process whose environment carries the tag.
/// Each target is pinned with a pidfd and re-checked before the signal, so a
/// pid recycled between the scan and the kill is never hit. Returns how many
/// processes were signalled.
pub(crate) fn signal_tagged(m: &TagMatch<'_>, sig: libc::c_int) -> usize {
    let Ok(dir) = fs::read_dir("/proc") else {
        return 0;
    };
    let me = std::process::id().to_string();
    let mut buf = Vec::with_capacity(4096);
    let mut hit = 0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str() else { continue };
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
            continue;
        }
        if !read_environ(pid, &mut buf) || !m.matches(&buf) {
            continue;
        }
        let Ok(pid_num) = pid.parse::<libc::pid_t>() else {
            continue;
        };
        let Ok(pidfd) = pidfd_open(pid_num) else { continue };
        // The pidfd pins this incarnation; confirm it is still the tagged one.
        if read_environ(pid, &mut buf) && m.matches(&buf) && pidfd_send_signal(&pidfd, sig).is_ok() {
            hit += 1;
        }
    }
    hit
}

//! Waiting for a command's cgroup to say that a limit may have been
//! reached (docs/limits.md): the kernel announces a change of v2
//! `memory.events` and `pids.events` to inotify, and a v1 OOM through an
//! eventfd registered in the group's `cgroup.event_control` (v1
//! `pids.events` announces nothing: measured on 6.18). The governor reads
//! the counters when woken, so a fork bomb or an OOM is met within a wake,
//! not within a polling period.

use std::future::poll_fn;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::task::Poll;

use rustix::event::{eventfd, EventfdFlags};
use rustix::fs::inotify;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// The descriptors that wake the governor for one command's group.
pub(crate) struct LimitEvents {
    fds: Vec<AsyncFd<OwnedFd>>,
}

impl LimitEvents {
    /// Watches `files` (inotify, on a change) and the OOM of the v1 memory
    /// group `oom_group`. An error leaves the caller to poll.
    pub(crate) fn new(files: &[PathBuf], oom_group: Option<&Path>) -> io::Result<LimitEvents> {
        let mut fds = Vec::new();
        if !files.is_empty() {
            let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
            for file in files {
                inotify::add_watch(&fd, file, inotify::WatchFlags::MODIFY)?;
            }
            fds.push(fd);
        }
        if let Some(dir) = oom_group {
            fds.push(oom_eventfd(dir)?);
        }
        let fds = fds
            .into_iter()
            .map(|fd| {
                // SAFETY: an OwnedFd is open and always returns the same
                // raw fd, and the AsyncFd owns it until it is dropped.
                unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
                    .map_err(|e| e.into_parts().1)
            })
            .collect::<io::Result<_>>()?;
        Ok(LimitEvents { fds })
    }

    /// Returns once any of the sources has announced something (what it
    /// announced is read and dropped: the counters are the facts); never
    /// without sources.
    pub(crate) async fn changed(events: Option<&LimitEvents>) {
        let Some(this) = events else {
            return std::future::pending().await;
        };
        poll_fn(|cx| {
            let mut woke = false;
            for fd in &this.fds {
                if let Poll::Ready(Ok(mut ready)) = fd.poll_read_ready(cx) {
                    drain(fd.get_ref());
                    ready.clear_ready();
                    woke = true;
                }
            }
            if woke {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

/// An eventfd the kernel signals when the v1 memory group `dir` is out of
/// memory (or removed).
fn oom_eventfd(dir: &Path) -> io::Result<OwnedFd> {
    let efd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
    // Needed only while registering: the kernel keeps the group, not the
    // file.
    let oom = std::fs::File::open(dir.join("memory.oom_control"))?;
    let line = format!("{} {}", efd.as_raw_fd(), oom.as_raw_fd());
    std::fs::write(dir.join("cgroup.event_control"), line)?;
    Ok(efd)
}

/// Reads what a source has (inotify events, an eventfd count) until none
/// is left.
fn drain(fd: &OwnedFd) {
    let mut buf = [0u8; 1024];
    loop {
        match rustix::io::read(fd.as_fd(), &mut buf) {
            Ok(n) if n > 0 => {}
            Err(rustix::io::Errno::INTR) => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change of a watched file wakes the waiter; nothing else does.
    #[test]
    fn a_change_of_a_watched_file_wakes_the_waiter() {
        let dir = std::env::temp_dir().join(format!("dsh-limit-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pids.events");
        std::fs::write(&file, "max 0\n").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let events = LimitEvents::new(std::slice::from_ref(&file), None).unwrap();
            let quiet = tokio::time::timeout(
                std::time::Duration::from_millis(100),
                LimitEvents::changed(Some(&events)),
            )
            .await;
            assert!(quiet.is_err(), "woke with no change");
            std::fs::write(&file, "max 1\n").unwrap();
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                LimitEvents::changed(Some(&events)),
            )
            .await
            .expect("a change woke it");
            // What it announced was taken: no second wake for the same change.
            let again = tokio::time::timeout(
                std::time::Duration::from_millis(100),
                LimitEvents::changed(Some(&events)),
            )
            .await;
            assert!(again.is_err(), "woke twice for one change");
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}

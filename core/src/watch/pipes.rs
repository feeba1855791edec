//! A command's pipes as the supervision loop reads and writes them: each
//! read handed to its sink within the poll that made it (a select that
//! drops the future loses nothing), and what waits read without the
//! reactor where a busy host's loop has not handed the readiness out.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::watch::stdin::{PipeWork, StdinPipe};

const CHUNK: usize = 64 * 1024;

/// Registers an fd with the core's reactor.
pub(crate) fn watch(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd is open and always returns the same raw fd, and the
    // AsyncFd owns it until it is dropped.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(|e| e.into_parts().1)
}

thread_local! {
    /// One read buffer per I/O thread, not per process: an idle background
    /// process costs no buffer at all.
    static SCRATCH: std::cell::RefCell<Box<[u8]>> = std::cell::RefCell::new(vec![0u8; CHUNK].into_boxed_slice());
}

/// Reads what is available and hands it to `sink` within the same poll, so
/// dropping this future in a select never loses bytes. Returns the count
/// (0 at EOF). `None` (a stream not read here) never completes: select!
/// builds the future even for a disabled branch.
pub(crate) async fn read_chunk(
    fd: Option<&AsyncFd<OwnedFd>>,
    mut sink: impl FnMut(&[u8]),
) -> io::Result<usize> {
    let Some(fd) = fd else {
        return std::future::pending().await;
    };
    loop {
        let mut guard = fd.readable().await?;
        match guard.try_io(|fd| {
            SCRATCH.with(|scratch| {
                let mut buf = scratch.borrow_mut();
                // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
                let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    return Err(io::Error::last_os_error());
                }
                sink(&buf[..n as usize]);
                Ok(n as usize)
            })
        }) {
            Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
            Ok(r) => return r,
            Err(_would_block) => continue,
        }
    }
}

/// Most a drain ended by its timer reads without the reactor (see
/// [`read_waiting`]): a descendant that keeps writing cannot keep it going.
const READ_WAITING_MAX: usize = 16 << 20;

/// Reads what already waits in a stream without the reactor, until it is
/// empty or at its end of file. A drain ended by a core thread's poll of a
/// run on a busy host's loop (its timer fired there) would otherwise leave
/// bytes the host's loop never handed out unread: the command's last
/// output.
pub(crate) fn read_waiting(fd: Option<&AsyncFd<OwnedFd>>, mut sink: impl FnMut(&[u8])) {
    let Some(fd) = fd else { return };
    let mut taken = 0;
    SCRATCH.with(|scratch| {
        let mut buf = scratch.borrow_mut();
        while taken < READ_WAITING_MAX {
            // SAFETY: `buf` is valid for writes of `buf.len()` bytes; the
            // descriptor is non-blocking.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            match n {
                0 => return,
                n if n > 0 => {
                    sink(&buf[..n as usize]);
                    taken += n as usize;
                }
                _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                _ => return,
            }
        }
    })
}

pub(crate) async fn pump(pipe: Option<&StdinPipe>, fd: Option<&AsyncFd<OwnedFd>>) -> PipeWork {
    match (pipe, fd) {
        (Some(pipe), Some(fd)) => pipe.pump(fd).await,
        _ => std::future::pending().await,
    }
}

pub(crate) async fn write_chunk(fd: Option<&AsyncFd<OwnedFd>>, bytes: &[u8]) -> io::Result<usize> {
    match fd {
        Some(fd) => write_some(fd, bytes).await,
        None => std::future::pending().await,
    }
}

/// Writes some of `bytes` once `fd` is writable; `Ok(0)` when it took
/// nothing after all (back to the caller's loop, which looks at a stop
/// first: a write the other side never reads must not keep it deaf).
pub(crate) async fn write_some(fd: &AsyncFd<OwnedFd>, bytes: &[u8]) -> io::Result<usize> {
    loop {
        let mut guard = fd.writable().await?;
        match guard.try_io(|fd| {
            // SAFETY: `bytes` is valid for reads of its length.
            let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else if n == 0 && !bytes.is_empty() {
                // Nothing taken is "not now": a pty master can report
                // itself writable while its program reads nothing. As
                // WouldBlock, the readiness is cleared until the next edge.
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(n as usize)
            }
        }) {
            Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
            Ok(Ok(0)) | Err(_) => {
                tokio::task::yield_now().await;
                return Ok(0);
            }
            Ok(r) => return r,
        }
    }
}

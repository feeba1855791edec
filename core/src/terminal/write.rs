//! Writing to a terminal session's input: what the terminal takes at
//! once is written on the caller's thread; the rest is queued, in order,
//! for the session task, holding the caller's own buffer (or, for borrowed
//! bytes, a few pieces of it at a time): docs/terminals.md, "Writing".

use std::io;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::host::callbacks;
use crate::host::forked;
use crate::host::runtime;
use crate::spec::error::{DshError, Result};
use crate::sys::lock;

use super::{closed, Terminal};

/// The bytes of a write, held (never copied) until the terminal took them:
/// a `Vec<u8>`, a `Box<[u8]>`, an `Arc<[u8]>`, a `&'static [u8]`, or a
/// face's handle on its caller's own buffer (a Python `bytes`, a Node
/// `Buffer`).
pub type WriteBuffer = Box<dyn AsRef<[u8]> + Send>;

/// The most a write of borrowed bytes ([`Terminal::write`],
/// [`Terminal::write_blocking`]) copies at a time: what the terminal does
/// not take at once is handed to the session in pieces of this size, at
/// most three of them held at once (one being written, one queued, one
/// being handed over).
pub const WRITE_PIECE: usize = 64 * 1024;

/// A queued `write`: the bytes the terminal did not take at once (`held`
/// from `at` on, then, for a write of borrowed bytes, the pieces its caller
/// still feeds through `more`), who waits for them, and its place in the
/// count of queued writes (released when the request is done or dropped).
pub(super) struct WriteRequest {
    pub(super) held: WriteBuffer,
    pub(super) at: usize,
    pub(super) more: Option<mpsc::Receiver<WriteBuffer>>,
    pub(super) reply: oneshot::Sender<Result<()>>,
    pub(super) _queued: Queued,
}

impl WriteRequest {
    /// What is left of the piece at hand.
    pub(super) fn rest(&self) -> &[u8] {
        &(*self.held).as_ref()[self.at..]
    }
}

/// One queued write in [`SessionInner::write_gate`].
pub(super) struct Queued(pub(super) Arc<Mutex<usize>>);

impl Drop for Queued {
    fn drop(&mut self) {
        *lock(&self.0) -= 1;
    }
}

/// The part of a [`Terminal::write_now`] the terminal could not take at once:
/// it is queued, in order, and written as the program reads.
#[derive(Debug)]
pub struct PendingWrite {
    rx: oneshot::Receiver<Result<()>>,
    /// The outcome, once `wait_timeout` has returned it.
    outcome: Option<Result<()>>,
}

pub(super) fn input_gone() -> DshError {
    closed("the terminal's program has exited: its input cannot be written")
}

impl PendingWrite {
    /// Completes once the terminal took the rest.
    pub async fn wait(self) -> Result<()> {
        match self.outcome {
            Some(outcome) => outcome,
            None => self.rx.await.map_err(|_| input_gone())?,
        }
    }

    /// [`PendingWrite::wait`] for threads outside an async runtime; refused
    /// where blocking is (inside a callback or an async runtime).
    pub fn wait_blocking(self) -> Result<()> {
        runtime::refuse_blocking()?;
        runtime::block_on(self.wait())?
    }

    /// Blocks until the terminal took the rest (`Ok(true)`, the write's
    /// outcome) or `timeout` passed (`Ok(false)`: the rest stays queued,
    /// and waiting again goes on). A host that must stay interruptible
    /// (Python's Ctrl-C) waits in slices. Refused where blocking is. Asked
    /// again after the outcome, it gives the same outcome at once.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<bool> {
        if let Some(outcome) = &self.outcome {
            return outcome.clone().map(|()| true);
        }
        runtime::refuse_blocking()?;
        let rx = &mut self.rx;
        // On this thread, with the core's timers: nothing here writes to a
        // pipe (see `runtime::block_on_here`).
        match runtime::handle().block_on(async move { tokio::time::timeout(timeout, rx).await }) {
            Err(_elapsed) => Ok(false),
            Ok(outcome) => {
                // Kept: a finished receiver must not be polled again.
                let outcome = outcome.map_err(|_| input_gone()).and_then(|r| r);
                self.outcome = Some(outcome.clone());
                outcome.map(|()| true)
            }
        }
    }

    /// Calls `on_done` on the callback thread once the terminal took the
    /// rest (or could not).
    pub fn then(self, on_done: impl FnOnce(Result<()>) + Send + 'static) {
        runtime::handle().spawn(async move {
            let r = self.wait().await;
            callbacks::dispatch(move || on_done(r));
        });
    }
}

/// The feeding side of a `write` of borrowed bytes: dropped with bytes
/// still unsent (the caller dropped its future), it hands them over as one
/// owned copy, behind the pieces already fed.
struct Feed<'a> {
    tx: Option<mpsc::Sender<WriteBuffer>>,
    unsent: &'a [u8],
}

impl Drop for Feed<'_> {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take().filter(|_| !self.unsent.is_empty()) {
            let rest: WriteBuffer = Box::new(self.unsent.to_vec());
            runtime::handle().spawn(async move {
                let _ = tx.send(rest).await;
            });
        }
    }
}

impl Terminal {
    /// Writes `bytes` to the terminal's input, as typed (no newline is
    /// added or translated). Completes once the terminal took all of them;
    /// a program that does not read makes it wait (the terminal's input
    /// queue is small). What the terminal does not take at once is copied
    /// in pieces of [`WRITE_PIECE`] bytes as it takes them (at most three
    /// pieces held at once), never whole. A future dropped before it fed
    /// every piece still writes the rest, in order (copied whole at that
    /// moment): a line is never left half typed for the next write to
    /// complete. To hand over a buffer instead, use
    /// [`Terminal::write_now`]. After the leader exited:
    /// [`DshError::TerminalClosed`].
    pub async fn write(&self, bytes: &[u8]) -> Result<()> {
        let Some((rest, feed, taken)) = self.write_borrowed(bytes)? else {
            return Ok(());
        };
        let mut feed = Feed {
            tx: Some(feed),
            unsent: &bytes[taken..],
        };
        while let (Some(tx), false) = (&feed.tx, feed.unsent.is_empty()) {
            let n = feed.unsent.len().min(WRITE_PIECE);
            // Cancel-safe: a send dropped before it completed sent nothing.
            if tx.send(Box::new(feed.unsent[..n].to_vec())).await.is_err() {
                feed.unsent = &[]; // the session ended: `rest` says how
                break;
            }
            feed.unsent = &feed.unsent[n..];
        }
        drop(feed);
        rest.wait().await
    }

    /// Writes what the terminal takes now, without waiting, and queues the
    /// rest (in order, behind any write still queued): `None` when all of
    /// `bytes` was taken, else the queued rest to wait for. `bytes` itself
    /// is held until the terminal took it, never copied. Never blocks.
    pub fn write_now(&self, bytes: impl AsRef<[u8]> + Send + 'static) -> Result<Option<PendingWrite>> {
        let (queued, taken) = self.write_at_once(bytes.as_ref())?;
        if taken == bytes.as_ref().len() {
            return Ok(None);
        }
        self.queue(queued, Box::new(bytes), taken, None).map(Some)
    }

    /// Writes what the terminal takes at once (nothing while writes are
    /// queued), on the caller's thread; returns how much it took and the
    /// gate, still held, for queueing the rest in order.
    fn write_at_once(&self, bytes: &[u8]) -> Result<(MutexGuard<'_, usize>, usize)> {
        forked::check_host(self.shared.host_pid)?;
        if self.has_exited() {
            return Err(input_gone());
        }
        let queued = lock(&self.shared.write_gate);
        let mut at = 0;
        if *queued == 0 {
            let control = lock(&self.shared.control);
            let Some(fd) = control.as_ref().map(AsRawFd::as_raw_fd) else {
                return Err(input_gone());
            };
            while at < bytes.len() {
                let rest = &bytes[at..];
                // SAFETY: `rest` is valid for reads of its length; `fd` (a
                // non-blocking copy of the master) stays open while
                // `control` is locked.
                let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
                if n >= 0 {
                    at += n as usize;
                    continue;
                }
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => break,
                    _ => return Err(closed(&format!("cannot write to the terminal: {e}"))),
                }
            }
        }
        Ok((queued, at))
    }

    /// Queues the rest of a write behind those already queued (the gate,
    /// held by the caller, keeps the callers' order).
    fn queue(
        &self,
        mut queued: MutexGuard<'_, usize>,
        held: WriteBuffer,
        at: usize,
        more: Option<mpsc::Receiver<WriteBuffer>>,
    ) -> Result<PendingWrite> {
        *queued += 1;
        let (reply, rx) = oneshot::channel();
        let request = WriteRequest {
            held,
            at,
            more,
            reply,
            _queued: Queued(self.shared.write_gate.clone()),
        };
        // Sent under the gate, so queued writes keep the callers' order.
        let sent = self.shared.writes.send(request);
        drop(queued);
        match sent {
            Ok(()) => Ok(PendingWrite { rx, outcome: None }),
            Err(unsent) => {
                drop(unsent); // releases its place in the gate
                Err(input_gone())
            }
        }
    }

    /// A write of borrowed bytes: what the terminal takes at once is
    /// written here; for the rest, a queued request whose pieces the
    /// caller feeds through the sender, from the returned offset on.
    #[allow(clippy::type_complexity)]
    fn write_borrowed(
        &self,
        bytes: &[u8],
    ) -> Result<Option<(PendingWrite, mpsc::Sender<WriteBuffer>, usize)>> {
        let (queued, taken) = self.write_at_once(bytes)?;
        if taken == bytes.len() {
            return Ok(None);
        }
        let (feed, pieces) = mpsc::channel(1);
        let rest = self.queue(queued, Box::new(&[][..]), 0, Some(pieces))?;
        Ok(Some((rest, feed, taken)))
    }

    /// [`Terminal::write_now`] for hosts with their own loop: `on_done`
    /// runs on the callback thread. `bytes` is held, never copied.
    pub fn write_with(
        &self,
        bytes: impl AsRef<[u8]> + Send + 'static,
        on_done: impl FnOnce(Result<()>) + Send + 'static,
    ) {
        match self.write_now(bytes) {
            Ok(Some(rest)) => rest.then(on_done),
            Ok(None) => callbacks::dispatch(move || on_done(Ok(()))),
            Err(e) => callbacks::dispatch(move || on_done(Err(e))),
        }
    }

    /// [`Terminal::write`] for threads outside an async runtime (what the
    /// terminal does not take at once is copied in pieces of
    /// [`WRITE_PIECE`] bytes as it takes them). Refused where blocking is
    /// (inside a callback or an async runtime) when the terminal does not
    /// take everything at once; then only what it took at once was
    /// written.
    pub fn write_blocking(&self, bytes: &[u8]) -> Result<()> {
        let Some((rest, feed, taken)) = self.write_borrowed(bytes)? else {
            return Ok(());
        };
        if let Err(e) = runtime::refuse_blocking() {
            drop((feed, rest));
            return Err(e);
        }
        for piece in bytes[taken..].chunks(WRITE_PIECE) {
            if feed.blocking_send(Box::new(piece.to_vec())).is_err() {
                break; // the session ended: `rest` says how
            }
        }
        drop(feed);
        rest.wait_blocking()
    }
}

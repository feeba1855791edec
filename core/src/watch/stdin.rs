//! The writable stdin of a process started with a stdin pipe
//! (docs/running.md, "Writing to stdin"): a bounded buffer between the
//! callers' writes and the pipe. Only the supervising task, on the core's
//! I/O threads (whose signal mask blocks SIGPIPE), ever writes to the pipe,
//! so a command that stops reading gives EPIPE there, never a SIGPIPE in a
//! host thread.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::{watch, Notify};

pub use crate::spec::error::StdinEnd;
use crate::spec::error::{DshError, Result};

/// The most bytes a process's stdin holds that the command has not taken
/// yet, beyond what the kernel's pipe buffer holds. A writer waits (or a
/// non-blocking write accepts less) once it is full.
pub const STDIN_BUFFER_BYTES: usize = 64 * 1024;

struct PipeState {
    buf: VecDeque<u8>,
    /// `close_stdin` was called: writes made from then on are refused.
    close_asked: bool,
    /// Writes made before that and not finished (queued, or waiting for
    /// room): the close waits for them, so each is delivered whole.
    writers: usize,
    /// No more bytes are taken, and nothing buffered will be written.
    ended: Option<StdinEnd>,
}

impl PipeState {
    /// The close is due (asked, and no earlier write left: none can begin
    /// after it): no more bytes are taken, and the pipe is closed once
    /// `buf` is written.
    fn closing(&self) -> bool {
        self.close_asked && self.writers == 0
    }
}

pub(crate) struct StdinPipe {
    state: Mutex<PipeState>,
    /// Wakes the supervising task: bytes or a close request arrived.
    work: Notify,
    /// Bumped whenever room is made or the stdin ends, for async writers.
    room: watch::Sender<u64>,
    /// The same event for blocking waiters.
    room_cv: Condvar,
    /// Ordered writers take turns (FIFO, cancel-safe): the bytes of one
    /// write are never interleaved with another's.
    turn: tokio::sync::Mutex<()>,
    /// Callback-style writes, in call order, and whether a task is
    /// writing them.
    queued: Mutex<(VecDeque<QueuedWrite>, bool)>,
}

// The async turn lock guards no data (`()`), and the state behind the std
// mutexes is consistent after every statement, so a panic elsewhere leaves
// nothing half-done: handles to a process stay unwind-safe, as before.
impl std::panic::RefUnwindSafe for StdinPipe {}
impl std::panic::UnwindSafe for StdinPipe {}

/// A write made through `write_stdin_with`, waiting for its turn.
pub(crate) type QueuedWrite = (Vec<u8>, OnWritten);

/// Called with a queued write's outcome.
pub(crate) type OnWritten = Box<dyn FnOnce(Result<()>) + Send>;

/// What [`StdinPipe::enqueue`] did with a write.
pub(crate) enum Enqueued {
    /// Taken whole at once, or refused: call back with the outcome.
    Taken(OnWritten, Result<()>),
    /// Queued; true when the task writing the queue must be started.
    Queued(bool),
}

/// What the supervising task is asked to do next.
pub(crate) enum PipeWork {
    /// Bytes were written to the pipe.
    Wrote,
    /// Everything was written and `close_stdin` was called: close the pipe.
    Close,
    /// The write failed (EPIPE: the reader is gone).
    Failed,
}

impl StdinPipe {
    pub(crate) fn new() -> Self {
        StdinPipe {
            state: Mutex::new(PipeState {
                buf: VecDeque::new(),
                close_asked: false,
                writers: 0,
                ended: None,
            }),
            work: Notify::new(),
            room: watch::channel(0).0,
            room_cv: Condvar::new(),
            turn: tokio::sync::Mutex::new(()),
            queued: Mutex::new((VecDeque::new(), false)),
        }
    }

    fn state(&self) -> MutexGuard<'_, PipeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn made_room(&self) {
        self.room.send_modify(|n| *n = n.wrapping_add(1));
        self.room_cv.notify_all();
    }

    /// Counts a write made now, which a later close waits for; refused
    /// once the stdin ended or its close was asked for.
    fn begin_write(&self, id: &str) -> Result<Writing<'_>> {
        let mut s = self.state();
        if let Some(end) = s.ended {
            return Err(closed(id, end));
        }
        if s.close_asked {
            return Err(closed(id, StdinEnd::Closed));
        }
        s.writers += 1;
        Ok(Writing(self))
    }

    /// A counted write is over (done, failed or dropped): the last one
    /// lets an asked-for close happen.
    fn end_write(&self) {
        let mut s = self.state();
        s.writers -= 1;
        if s.closing() {
            // The last earlier write is over: the close is due now.
            drop(s);
            self.work.notify_one();
            self.made_room();
        }
    }

    /// Takes what fits of `bytes`; 0 when full.
    fn push(&self, id: &str, bytes: &[u8]) -> Result<usize> {
        let mut s = self.state();
        if let Some(end) = s.ended {
            return Err(closed(id, end));
        }
        if s.closing() {
            return Err(closed(id, StdinEnd::Closed));
        }
        let n = bytes.len().min(STDIN_BUFFER_BYTES - s.buf.len());
        if n > 0 {
            let was_empty = s.buf.is_empty();
            s.buf.extend(&bytes[..n]);
            drop(s);
            if was_empty {
                self.work.notify_one();
            }
        }
        Ok(n)
    }

    /// Takes all of `bytes` if they fit now, else nothing (false).
    fn push_whole(&self, id: &str, bytes: &[u8]) -> Result<bool> {
        let fits = {
            let s = self.state();
            STDIN_BUFFER_BYTES - s.buf.len() >= bytes.len()
        };
        // Only the holder of the turn adds bytes, so the room seen above
        // can only have grown.
        if !fits {
            self.push(id, &[])?;
            return Ok(false);
        }
        self.push(id, bytes).map(|n| n == bytes.len())
    }

    /// Non-blocking write: takes what fits now, 0 when the buffer is full
    /// or an ordered write is waiting for its turn.
    pub(crate) fn try_write(&self, id: &str, bytes: &[u8]) -> Result<usize> {
        let _writing = self.begin_write(id)?;
        self.take_now(id, bytes)
    }

    /// One write made of several non-blocking takes (a host's blocking
    /// loop), counted as one from now until it is dropped: a close asked
    /// meanwhile waits for all of it.
    pub(crate) fn writer<'a>(&'a self, id: &'a str) -> Result<StdinWriter<'a>> {
        Ok(StdinWriter {
            _writing: self.begin_write(id)?,
            pipe: self,
            id,
        })
    }

    fn take_now(&self, id: &str, bytes: &[u8]) -> Result<usize> {
        let Ok(_turn) = self.turn.try_lock() else {
            // Still refuse a write to a stdin that has ended.
            self.push(id, &[])?;
            return Ok(0);
        };
        self.push(id, bytes)
    }

    /// Ordered write of all of `bytes`: waits its turn, then for room as
    /// the command reads; a close asked for meanwhile waits for it.
    /// Cancel-safe: dropping it keeps what was taken.
    pub(crate) async fn write_all(&self, id: &str, bytes: &[u8]) -> Result<()> {
        let _writing = self.begin_write(id)?;
        self.write_in_turn(id, bytes).await
    }

    /// A write [`StdinPipe::enqueue`] queued (and counted), in its turn.
    pub(crate) async fn write_queued(&self, id: &str, bytes: &[u8]) -> Result<()> {
        let _writing = Writing(self);
        self.write_in_turn(id, bytes).await
    }

    async fn write_in_turn(&self, id: &str, bytes: &[u8]) -> Result<()> {
        let _turn = self.turn.lock().await;
        let mut rx = self.room.subscribe();
        let mut rest = bytes;
        loop {
            let n = self.push(id, rest)?;
            rest = &rest[n..];
            if rest.is_empty() {
                return Ok(());
            }
            if rx.changed().await.is_err() {
                return Err(DshError::Internal("stdin room channel closed".into()));
            }
        }
    }

    /// Queues a write in call order. When no earlier queued write waits
    /// and the whole write fits, it is taken at once, so a write made
    /// before [`StdinPipe::close`] is delivered whatever the threads'
    /// timing. Never a part: the rest could be overtaken by another
    /// writer's turn, splitting the write. `Taken` hands the write back
    /// when it was taken (or refused); `Queued(true)` when the caller must
    /// start the task that writes the queue ([`StdinPipe::next_queued`]).
    pub(crate) fn enqueue(&self, id: &str, (bytes, on_done): QueuedWrite) -> Enqueued {
        let mut q = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        let writing = match self.begin_write(id) {
            Ok(w) => w,
            Err(e) => return Enqueued::Taken(on_done, Err(e)),
        };
        if q.0.is_empty() && !q.1 {
            if let Ok(_turn) = self.turn.try_lock() {
                match self.push_whole(id, &bytes) {
                    Ok(true) => return Enqueued::Taken(on_done, Ok(())),
                    Ok(false) => {}
                    Err(e) => return Enqueued::Taken(on_done, Err(e)),
                }
            }
        }
        // Counted until its turn is over (`write_queued`).
        std::mem::forget(writing);
        q.0.push_back((bytes, on_done));
        Enqueued::Queued(!std::mem::replace(&mut q.1, true))
    }

    /// The next queued write; `None` (and the task ends) when there is none.
    pub(crate) fn next_queued(&self) -> Option<QueuedWrite> {
        let mut q = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        let next = q.0.pop_front();
        if next.is_none() {
            q.1 = false;
        }
        next
    }

    /// Blocks until a write would take at least one byte or fail; false if
    /// `timeout` passed first. A write made now fails once a close was
    /// asked for. Refused where blocking is, unless `timeout` is zero.
    pub(crate) fn wait_writable(&self, timeout: Option<Duration>) -> Result<bool> {
        self.wait_until(timeout, |s| s.close_asked)
    }

    /// Blocks until there is room, the stdin ended, or `over` says so;
    /// false if `timeout` passed first. A zero `timeout` only looks, so it
    /// is the one wait allowed where blocking is refused.
    fn wait_until(&self, timeout: Option<Duration>, over: impl Fn(&PipeState) -> bool) -> Result<bool> {
        // The host is checked by whoever handed out the pipe (`stdin_pipe`).
        crate::host::runtime::may_block(timeout, None)?;
        let ready = |s: &mut PipeState| s.ended.is_some() || over(s) || s.buf.len() < STDIN_BUFFER_BYTES;
        let guard = self.state();
        Ok(match timeout {
            None => {
                let _g = self
                    .room_cv
                    .wait_while(guard, |s| !ready(s))
                    .unwrap_or_else(|e| e.into_inner());
                true
            }
            Some(t) => {
                let (mut g, _) = self
                    .room_cv
                    .wait_timeout_while(guard, t, |s| !ready(s))
                    .unwrap_or_else(|e| e.into_inner());
                ready(&mut g)
            }
        })
    }

    /// Asks for the pipe to be closed once what was written is delivered:
    /// after the writes made before this call (each whole), and before any
    /// made after it, which fail. True when this call did it.
    pub(crate) fn close(&self) -> bool {
        let mut s = self.state();
        if s.close_asked || s.ended.is_some() {
            return false;
        }
        s.close_asked = true;
        drop(s);
        // Now, or when the last earlier write is over (`end_write`).
        self.work.notify_one();
        self.made_room();
        true
    }

    /// No more bytes will be taken or written; what is buffered is dropped.
    pub(crate) fn end(&self, why: StdinEnd) {
        {
            let mut s = self.state();
            if s.ended.is_none() {
                s.ended = Some(why);
            }
            s.buf = VecDeque::new();
        }
        self.made_room();
    }

    /// Bytes taken and not yet written to the pipe.
    pub(crate) fn buffered(&self) -> usize {
        self.state().buf.len()
    }

    /// The supervising task's side: waits for work, then writes what the
    /// pipe takes, within one poll (so dropping it in a select loses
    /// nothing).
    pub(crate) async fn pump(&self, fd: &AsyncFd<OwnedFd>) -> PipeWork {
        loop {
            let idle = {
                let s = self.state();
                if s.buf.is_empty() && s.closing() {
                    return PipeWork::Close;
                }
                s.buf.is_empty()
            };
            if idle {
                self.work.notified().await;
                continue;
            }
            let mut guard = match fd.writable().await {
                Ok(g) => g,
                Err(_) => return PipeWork::Failed,
            };
            match guard.try_io(|fd| {
                let mut s = self.state();
                let (front, _) = s.buf.as_slices();
                // SAFETY: `front` is valid for reads of `front.len()` bytes.
                let n = unsafe { libc::write(fd.as_raw_fd(), front.as_ptr().cast(), front.len()) };
                if n < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                s.buf.drain(..n as usize);
                if s.buf.is_empty() {
                    // Give the memory back between bursts.
                    s.buf.shrink_to(0);
                }
                Ok(())
            }) {
                Ok(Ok(())) => {
                    self.made_room();
                    return PipeWork::Wrote;
                }
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(Err(_)) => return PipeWork::Failed,
                Err(_would_block) => continue,
            }
        }
    }
}

/// A write made of several non-blocking takes, counted as one until it is
/// dropped ([`Process::stdin_writer`](crate::Process::stdin_writer)).
pub struct StdinWriter<'a> {
    pipe: &'a StdinPipe,
    id: &'a str,
    _writing: Writing<'a>,
}

impl StdinWriter<'_> {
    /// Takes what fits now; 0 when the buffer is full.
    pub fn try_write(&self, bytes: &[u8]) -> Result<usize> {
        self.pipe.take_now(self.id, bytes)
    }

    /// Blocks until a take would take at least one byte or fail, or until
    /// `timeout` passes (`None`: no limit); whether it would. A close asked
    /// for meanwhile does not end the wait: it waits for this write.
    /// Refused where blocking is, unless `timeout` is zero.
    pub fn wait_writable(&self, timeout: Option<Duration>) -> Result<bool> {
        self.pipe.wait_until(timeout, PipeState::closing)
    }
}

/// One counted write (see [`StdinPipe::begin_write`]), over when dropped.
struct Writing<'a>(&'a StdinPipe);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.end_write();
    }
}

fn closed(id: &str, why: StdinEnd) -> DshError {
    DshError::StdinClosed {
        id: id.to_owned(),
        why,
    }
}

/// The error for a write to a process without a stdin pipe.
pub(crate) fn not_piped(id: &str) -> DshError {
    closed(id, StdinEnd::NotPiped)
}

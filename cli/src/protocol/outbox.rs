//! A connection's outbox: every message for its writer, counted until it
//! is written, so a client that stops reading cannot make the server hold
//! an unbounded queue. Past [`HOLD_BYTES`] waiting, the connection's
//! requests are not read until the writer has caught up to half of it (a
//! client's own requests are what its answers grow from). Notifications
//! keep coming while a client reads nothing: past [`OVERFLOW_BYTES`]
//! waiting with nothing written for [`STALL`], the connection is ended as
//! if the client had gone. A client that reads, however slowly, and a
//! single answer bigger than that (a run's result with big windows) are
//! never cut.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{self, error::SendError, UnboundedReceiver, UnboundedSender};
use tokio::sync::Notify;

use super::session::Out;
use super::stream_queue::uncount;

/// How many bytes may wait to be written before the connection's requests
/// are no longer read.
pub const HOLD_BYTES: usize = 8 << 20;

/// How many may wait, the client reading none of it for [`STALL`], before
/// the connection is ended.
pub const OVERFLOW_BYTES: usize = 256 << 20;

/// How long a client with [`OVERFLOW_BYTES`] waiting may read nothing.
pub const STALL: Duration = Duration::from_secs(60);

/// How often a connection looks for a stall.
const STALL_CHECK: Duration = Duration::from_secs(5);

/// The sending side, shared by the session and its callbacks.
#[derive(Clone)]
pub struct Outbox {
    tx: UnboundedSender<Out>,
    pending: Arc<Pending>,
}

/// What waits to be written, and the events the connection waits on.
pub struct Pending {
    bytes: AtomicUsize,
    drained: Notify,
    /// When the writer last wrote, or the outbox last became non-empty.
    progress: Mutex<Instant>,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            bytes: AtomicUsize::new(0),
            drained: Notify::new(),
            progress: Mutex::new(Instant::now()),
        }
    }
}

fn size(out: &Out) -> usize {
    match out {
        Out::Line(line) | Out::Streamed { line, .. } => line.len() + 1,
        Out::End => 0,
    }
}

impl Outbox {
    /// A new outbox and the receiver its writer drains.
    pub fn new() -> (Outbox, UnboundedReceiver<Out>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Outbox {
                tx,
                pending: Arc::default(),
            },
            rx,
        )
    }

    pub fn send(&self, out: Out) -> Result<(), SendError<Out>> {
        let n = size(&out);
        if self.pending.bytes.fetch_add(n, Ordering::SeqCst) == 0 {
            // A stall is counted from when something began to wait.
            self.pending.progressed();
        }
        self.tx.send(out).inspect_err(|_| {
            self.pending.bytes.fetch_sub(n, Ordering::SeqCst);
        })
    }

    /// Whether both send to the same connection.
    pub fn same_channel(&self, other: &Outbox) -> bool {
        self.tx.same_channel(&other.tx)
    }

    pub fn pending(&self) -> Arc<Pending> {
        self.pending.clone()
    }
}

impl Pending {
    fn progressed(&self) {
        *self.progress.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// The writer wrote `bytes` of what was sent.
    pub fn written(&self, bytes: usize) {
        self.progressed();
        if uncount(&self.bytes, bytes) <= HOLD_BYTES / 2 {
            self.drained.notify_waiters();
        }
    }

    /// Returns once the connection's requests may be read: at once unless
    /// [`HOLD_BYTES`] wait to be written, else when the writer has caught up
    /// to half of that.
    pub async fn room_for_requests(&self) {
        if self.bytes.load(Ordering::SeqCst) <= HOLD_BYTES {
            return;
        }
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.bytes.load(Ordering::SeqCst) <= HOLD_BYTES / 2 {
                return;
            }
            drained.await;
        }
    }

    /// Completes once more than [`OVERFLOW_BYTES`] wait to be written and
    /// nothing was written for [`STALL`]: the client reads nothing.
    pub async fn stalled(&self) {
        loop {
            tokio::time::sleep(STALL_CHECK).await;
            let idle = self
                .progress
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .elapsed();
            if self.bytes.load(Ordering::SeqCst) > OVERFLOW_BYTES && idle >= STALL {
                return;
            }
        }
    }
}

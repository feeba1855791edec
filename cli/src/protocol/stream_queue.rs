//! How far a streamed run may get ahead of its client. `run_output`
//! chunks handed to the connection and not yet written are counted here;
//! past [`AHEAD_BYTES`] the session's streamed runs are held back (the core
//! stops reading their output, so the commands block as on a slow
//! terminal) until the writer has caught up to half of it. The server
//! never holds more than [`DROP_BYTES`] of them: past that (only output
//! read after a command exited or while it is stopped, which is never
//! held) chunks are left out, and the offsets show it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dsh_core::OutputValve;

/// How many bytes of `run_output` may wait to be written before the
/// session's streamed runs are held back.
pub const AHEAD_BYTES: usize = 8 << 20;

/// Past this many, chunks are left out rather than kept.
pub const DROP_BYTES: usize = 4 * AHEAD_BYTES;

#[derive(Default)]
pub struct StreamQueue {
    unwritten: AtomicUsize,
    /// Shared by every streamed run of the session.
    pub valve: Arc<OutputValve>,
}

impl StreamQueue {
    /// Counts a chunk of `bytes` handed to the connection; false when it
    /// must be left out instead.
    pub fn queue(&self, bytes: usize) -> bool {
        let before = self.unwritten.fetch_add(bytes, Ordering::SeqCst);
        if before > DROP_BYTES {
            self.unwritten.fetch_sub(bytes, Ordering::SeqCst);
            return false;
        }
        if before + bytes > AHEAD_BYTES {
            self.valve.shut();
        }
        true
    }

    /// `bytes` were written (or will never be): the runs go on once the
    /// writer has caught up.
    pub fn written(&self, bytes: usize) {
        // Never below zero: `reset` may have come in between.
        if uncount(&self.unwritten, bytes) <= AHEAD_BYTES / 2 {
            self.valve.open();
        }
    }

    /// No connection: nothing waits to be written, and nobody is there to
    /// hold a command back for.
    pub fn reset(&self) {
        self.unwritten.store(0, Ordering::SeqCst);
        self.valve.open();
    }
}

/// Takes `bytes` off `counter`, never below zero; what is left.
pub fn uncount(counter: &AtomicUsize, bytes: usize) -> usize {
    let before = counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            Some(n.saturating_sub(bytes))
        })
        .unwrap_or(0);
    before.saturating_sub(bytes)
}

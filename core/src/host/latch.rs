//! The one wait primitive: a flag that is set once and waited for in every
//! way a face waits. A background process's settlement and a terminal
//! session's exit are each a `Latch`.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::host::callbacks;
use crate::sys::lock;

type Waiter = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Waiting {
    set: bool,
    /// The last id given (the first is 1).
    next_id: u64,
    /// `when_set` callbacks, until the latch is set.
    callbacks: Vec<(u64, Waiter)>,
}

/// Identifies a callback waiting on a latch ([`Process::when_settled`],
/// [`Terminal::when_exited`]), to withdraw it.
///
/// [`Process::when_settled`]: crate::Process::when_settled
/// [`Terminal::when_exited`]: crate::Terminal::when_exited
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WaiterId(pub(crate) u64);

/// Set once; waited for asynchronously ([`Latch::wait`]), by blocking
/// ([`Latch::wait_timeout`]) or by a callback on the callback thread
/// ([`Latch::when_set`]).
pub(crate) struct Latch {
    waiting: Mutex<Waiting>,
    /// Blocking waiters.
    cv: Condvar,
    /// Async waiters.
    tx: watch::Sender<bool>,
}

impl Default for Latch {
    fn default() -> Self {
        Latch {
            waiting: Mutex::default(),
            cv: Condvar::new(),
            tx: watch::channel(false).0,
        }
    }
}

impl Latch {
    pub(crate) fn is_set(&self) -> bool {
        lock(&self.waiting).set
    }

    /// Sets the latch; false (and nothing done) if it was set already. In
    /// this order: blocking waiters wake, `first` runs (what must be queued
    /// before the callbacks, such as a registry's listeners), every
    /// `when_set` callback is queued on the callback thread, async waiters
    /// wake.
    pub(crate) fn set(&self, first: impl FnOnce()) -> bool {
        let callbacks = {
            let mut w = lock(&self.waiting);
            if w.set {
                return false;
            }
            w.set = true;
            std::mem::take(&mut w.callbacks)
        };
        self.cv.notify_all();
        first();
        for (_, f) in callbacks {
            callbacks::dispatch(f);
        }
        self.tx.send_replace(true);
        true
    }

    /// Completes once the latch is set.
    pub(crate) async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives in `self`, which the caller keeps alive.
        let _ = rx.wait_for(|set| *set).await;
    }

    /// Blocks until the latch is set or `timeout` passed (`None`: no
    /// limit); whether it is set. The caller decides where blocking is
    /// allowed.
    pub(crate) fn wait_timeout(&self, timeout: Option<Duration>) -> bool {
        let guard = lock(&self.waiting);
        match timeout {
            None => {
                self.cv
                    .wait_while(guard, |w| !w.set)
                    .unwrap_or_else(|e| e.into_inner())
                    .set
            }
            Some(t) => {
                self.cv
                    .wait_timeout_while(guard, t, |w| !w.set)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
                    .set
            }
        }
    }

    /// Calls `f` on the callback thread once the latch is set (soon, if it
    /// is); the id withdraws it ([`Latch::withdraw`]).
    pub(crate) fn when_set(&self, f: impl FnOnce() + Send + 'static) -> u64 {
        let mut w = lock(&self.waiting);
        w.next_id += 1;
        let id = w.next_id;
        if w.set {
            drop(w);
            callbacks::dispatch(f);
        } else {
            w.callbacks.push((id, Box::new(f)));
        }
        id
    }

    /// Withdraws a `when_set` callback that has not been queued; false if it
    /// was (or was withdrawn already).
    pub(crate) fn withdraw(&self, id: u64) -> bool {
        let mut w = lock(&self.waiting);
        let before = w.callbacks.len();
        w.callbacks.retain(|(c, _)| *c != id);
        w.callbacks.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc};

    #[test]
    fn every_kind_of_waiter_hears_of_the_set_once_and_in_order() {
        let latch = Arc::new(Latch::default());
        assert!(!latch.is_set());
        assert!(!latch.wait_timeout(Some(Duration::from_millis(10))));
        let (tx, rx) = mpsc::channel();
        let first = tx.clone();
        let callback = tx.clone();
        latch.when_set(move || callback.send("callback").unwrap());
        let withdrawn = latch.when_set(|| panic!("withdrawn, never called"));
        assert!(latch.withdraw(withdrawn));
        assert!(!latch.withdraw(withdrawn));
        let blocked = {
            let latch = latch.clone();
            std::thread::spawn(move || latch.wait_timeout(None))
        };
        let sets = Arc::new(AtomicUsize::new(0));
        for _ in 0..2 {
            let first = first.clone();
            let sets = sets.clone();
            latch.set(move || {
                sets.fetch_add(1, Ordering::SeqCst);
                first.send("first").unwrap();
            });
        }
        assert_eq!(sets.load(Ordering::SeqCst), 1, "set once");
        assert!(blocked.join().unwrap());
        let order: Vec<_> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(order, ["first", "callback"]);
        // Set already: a new callback comes soon, a wait returns at once.
        latch.when_set(move || tx.send("late").unwrap());
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), "late");
        assert!(latch.wait_timeout(Some(Duration::ZERO)));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(latch.wait());
    }
}

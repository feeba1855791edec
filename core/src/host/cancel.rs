//! A caller's cancellation: fire from any thread, observed by a run.

use std::sync::Arc;

use tokio::sync::watch;

/// Cloning shares the token; `cancel` is idempotent.
#[derive(Debug, Clone)]
pub struct CancelToken {
    fired: Arc<watch::Sender<bool>>,
}

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelToken {
    /// A token that has not fired.
    pub fn new() -> Self {
        CancelToken {
            fired: Arc::new(watch::channel(false).0),
        }
    }

    /// Fires the token, from any thread; a run using it is stopped (SIGTERM,
    /// SIGKILL after the grace period) and reports `aborted`, a process
    /// started with it is killed. Idempotent.
    pub fn cancel(&self) {
        self.fired.send_replace(true);
    }

    /// True once `cancel` has been called on this token or a clone.
    pub fn is_cancelled(&self) -> bool {
        *self.fired.borrow()
    }

    /// Completes once `cancel` has been called (at once if it already was).
    pub async fn cancelled(&self) {
        let mut rx = self.fired.subscribe();
        // The sender lives in `self`, so this only ends by seeing `true`.
        let _ = rx.wait_for(|fired| *fired).await;
    }
}

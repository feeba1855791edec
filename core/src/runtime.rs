//! The core's own small runtime: two I/O threads for every executor and
//! every process, however many there are.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle, Runtime};

use crate::error::{DshError, Result};

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

fn block_sigpipe() {
    // A write to a stdin pipe whose reader has gone must come back as EPIPE,
    // not kill a host that never ignored SIGPIPE (a C program). SIGPIPE is
    // thread-directed, so blocking it on our threads is enough.
    // SAFETY: plain signal-mask manipulation of the calling thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

pub(crate) fn handle() -> &'static Handle {
    RUNTIME
        .get_or_init(|| {
            Builder::new_multi_thread()
                .worker_threads(2)
                .max_blocking_threads(1)
                .thread_name("dsh-io")
                .enable_io()
                .enable_time()
                .on_thread_start(block_sigpipe)
                .build()
                .expect("cannot start the dsh I/O runtime (threads or epoll unavailable)")
        })
        .handle()
}

thread_local! {
    /// A blocking caller's own reactor: the thread that waits is the thread
    /// that sees its command's events, with no hand-off between threads.
    /// Costs one epoll fd and one eventfd per calling thread, for its life.
    static LOCAL: std::cell::RefCell<Option<Runtime>> = const { std::cell::RefCell::new(None) };
}

/// Drives `fut` to completion on the calling thread with a reactor of its
/// own. Only for futures that never write to a pipe (the caller's SIGPIPE
/// disposition is the host's) and that spawn background work explicitly on
/// [`handle`]. Refused from inside a runtime, like [`block_on`].
pub(crate) fn block_on_here<F: Future>(fut: F) -> Result<F::Output> {
    if Handle::try_current().is_ok() {
        return Err(DshError::BlockingInAsync);
    }
    LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        if local.is_none() {
            let rt = Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .map_err(|e| DshError::Internal(format!("cannot create a reactor for this thread: {e}")))?;
            *local = Some(rt);
        }
        Ok(local.as_ref().expect("just set").block_on(fut))
    })
}

/// Runs `fut` on the core's threads and blocks the calling thread until it
/// is done; the calling thread's signal mask is left alone. Refused from
/// inside a runtime (a listener callback, a Node async context), where
/// blocking would stall every other command.
pub(crate) fn block_on<F>(fut: F) -> Result<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if Handle::try_current().is_ok() {
        return Err(DshError::BlockingInAsync);
    }
    let rt = handle();
    rt.block_on(rt.spawn(fut))
        .map_err(|e| DshError::Internal(format!("executor task failed: {e}")))
}

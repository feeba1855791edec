//! The core's own small runtime: two I/O threads for every executor and
//! every process, however many there are; rebuilt in a forked child.

use std::future::Future;

use tokio::runtime::{Builder, Handle, Runtime};

use crate::host::callbacks;
use crate::host::forked::{check_host, current_pid, PerProcess};
use crate::spec::error::{DshError, Result};

/// A runtime whose drop never blocks: only a runtime that lost a race to be
/// the process's one is ever dropped, possibly from inside another runtime.
struct IoRuntime(Option<Runtime>);

impl Drop for IoRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

static RUNTIME: PerProcess<IoRuntime> = PerProcess::new();

fn block_sigpipe() {
    // A write to a stdin pipe whose reader has gone must come back as EPIPE,
    // not kill a host that never ignored SIGPIPE (a C program). SIGPIPE is
    // thread-directed, so blocking it on our threads is enough.
    // SAFETY: plain signal-mask manipulation of the calling thread, with a
    // set initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

pub(crate) fn handle() -> &'static Handle {
    let rt = RUNTIME.get(|| {
        IoRuntime(Some(crate::sys::with_std_fds_held(|| {
            Builder::new_multi_thread()
                .worker_threads(2)
                .max_blocking_threads(1)
                .thread_name("dsh-io")
                .enable_io()
                .enable_time()
                .on_thread_start(block_sigpipe)
                .build()
                .expect("cannot start the dsh I/O runtime (threads or epoll unavailable)")
        })))
    });
    rt.0.as_ref().expect("only a dropped IoRuntime is empty").handle()
}

/// Refuses a call that would block where blocking stalls other work: inside
/// an async runtime (the core's I/O threads or a caller's), or inside a
/// host callback (a listener, a completion callback), which runs on the one
/// thread that delivers every callback. Faces that build a blocking call of
/// their own on the async API (to poll for Ctrl-C, say) call it first.
pub fn refuse_blocking() -> Result<()> {
    if callbacks::in_callback() || Handle::try_current().is_ok() {
        return Err(DshError::BlockingInAsync);
    }
    Ok(())
}

/// The rule of every wait with a timeout (`None`: no limit): a zero
/// `timeout` only looks, which is allowed anywhere (`Ok(false)`: do not
/// block); any other may block (`Ok(true)`), which is refused in a forked
/// child of the host `host_pid` (nothing there would ever wake it; `None`
/// where the caller checked that already) and where blocking is
/// ([`refuse_blocking`]).
pub(crate) fn may_block(timeout: Option<std::time::Duration>, host_pid: Option<libc::pid_t>) -> Result<bool> {
    if timeout == Some(std::time::Duration::ZERO) {
        return Ok(false);
    }
    if let Some(pid) = host_pid {
        check_host(pid)?;
    }
    refuse_blocking()?;
    Ok(true)
}

thread_local! {
    /// A blocking caller's own reactor: the thread that waits is the thread
    /// that sees its command's events, with no hand-off between threads.
    /// Costs one epoll fd and one eventfd per calling thread, for its life.
    /// Tagged with the pid that built it: a forked child must not use (or
    /// drop) the parent's epoll instance, which it shares.
    static LOCAL: std::cell::RefCell<Option<(libc::pid_t, Runtime)>> = const { std::cell::RefCell::new(None) };
}

/// Makes the calling thread's own reactor (for [`block_on_here`]) if it
/// has none yet. A blocking run calls it before anything starts: a reactor
/// the kernel refuses (no descriptor left for its epoll and eventfd) is a
/// spawn error with the errno ([`DshError::refused`]), and nothing ran.
/// Refused where blocking is (see [`refuse_blocking`]).
pub(crate) fn reactor_here() -> Result<()> {
    refuse_blocking()?;
    let pid = current_pid();
    LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        if local.as_ref().is_some_and(|(owner, _)| *owner != pid) {
            // The parent's reactor, inherited through fork: leak it.
            std::mem::forget(local.take());
        }
        if local.is_none() {
            let rt = crate::sys::with_std_fds_held(|| {
                Builder::new_current_thread().enable_io().enable_time().build()
            })
            .map_err(|e| DshError::refused("cannot create a reactor for this thread", &e))?;
            *local = Some((pid, rt));
        }
        Ok(())
    })
}

/// Drives `fut` to completion on the calling thread with a reactor of its
/// own (made by [`reactor_here`] if there is none yet). Only for futures
/// that never write to a pipe (the caller's SIGPIPE disposition is the
/// host's) and that spawn background work explicitly on [`handle`].
/// Refused where blocking is (see [`refuse_blocking`]).
pub(crate) fn block_on_here<F: Future>(fut: F) -> Result<F::Output> {
    reactor_here()?;
    LOCAL.with(|local| {
        Ok(local
            .borrow()
            .as_ref()
            .expect("made by reactor_here")
            .1
            .block_on(fut))
    })
}

/// Runs `fut` on the core's threads and blocks the calling thread until it
/// is done; the calling thread's signal mask is left alone. Refused where
/// blocking is (see [`refuse_blocking`]).
pub(crate) fn block_on<F>(fut: F) -> Result<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    refuse_blocking()?;
    handle().block_on(spawned(fut))
}

/// Spawns `fut` on the core's threads; the returned future gives its output
/// (a task that panicked is an internal error).
pub(crate) fn spawned<F>(fut: F) -> impl Future<Output = Result<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let task = handle().spawn(fut);
    async move {
        task.await
            .map_err(|e| DshError::Internal(format!("executor task failed: {e}")))
    }
}

thread_local! {
    /// Set while a [`HostLoop`](crate::HostLoop) polls a run: that thread's
    /// reactor reads the run's descriptors, but only the core's runtime
    /// keeps time for it (the host turns its reactor when a descriptor is
    /// ready, not when a deadline passes).
    static TIMEKEEPER: std::cell::RefCell<Option<Handle>> = const { std::cell::RefCell::new(None) };
}

/// Makes the core's runtime keep the time of the timers this thread makes,
/// until the guard is dropped.
pub(crate) fn timers_on_core() -> impl Drop {
    struct Restore(Option<Handle>);
    impl Drop for Restore {
        fn drop(&mut self) {
            TIMEKEEPER.with(|t| *t.borrow_mut() = self.0.take());
        }
    }
    Restore(TIMEKEEPER.with(|t| t.borrow_mut().replace(handle().clone())))
}

/// A timer on the runtime that keeps time for this thread: its own (or the
/// one it runs on), or the core's inside [`timers_on_core`]. Every timer of
/// a foreground run is made here.
pub(crate) fn timer<T>(make: impl FnOnce() -> T) -> T {
    TIMEKEEPER.with(|t| match t.borrow().as_ref() {
        Some(core) => {
            let _core = core.enter();
            make()
        }
        None => make(),
    })
}

//! Foreground runs and spawned programs driven by the host's own event
//! loop (Node's libuv).
//!
//! Such a host's thread cannot block while a command runs, and handing the
//! run to the core's threads costs two thread hand-offs per command: the
//! request to an I/O thread, and the result back to the host's loop. Here
//! the host's thread does what the core's I/O thread would: it asks the
//! supervisor for the command itself, and reads the command's events with
//! a reactor of its own whose descriptors the host's loop watches through
//! one descriptor, [`HostLoop::fd`]. The supervisor's report then wakes the
//! host's thread directly, as it wakes a blocking caller
//! (docs/host-death.md, "Cost on the spawn path").
//!
//! Timers (the timeout, the grace period, the limit checks) are kept by the
//! core's runtime: the host's loop only learns of descriptors. When one
//! fires, or the run is stopped (cancelled, killed, its executor disposed)
//! from any thread, the host's own included, a core thread polls the run at
//! once (see `RunWaker`), so what the stop does never waits for a busy
//! host thread.

use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::ThreadId;

use rustix::event::{eventfd, EventfdFlags};
use tokio::runtime::{Builder, Handle, Runtime};

use crate::executor::run::RunResult;
use crate::host::cancel::CancelToken;
use crate::host::forked::current_pid;
use crate::host::runtime;
use crate::spec::error::{DshError, Result};
use crate::sys::lock;

/// One host thread's reactor. Made and used on that thread only.
pub struct HostLoop {
    reactor: Arc<Runtime>,
    /// Readable when a watched descriptor has news: the host's loop
    /// watches it and then calls [`HostLoop::dispatch`]. Shared with the
    /// [`WritableWatch`]es of its descriptors, which may outlive it.
    ready: Arc<OwnedFd>,
    /// An eventfd in `ready`'s set: written, it makes [`HostLoop::fd`]
    /// readable for the loop's next turn (see [`HostLoop::poll_later`]).
    later: OwnedFd,
    /// A forked child must not use its parent's epoll instances.
    owner: libc::pid_t,
}

/// Work on a [`HostLoop`] (a foreground run, or a spawned program's
/// supervision, whose output is `()`): poll it with [`HostLoop::poll`]
/// until it is ready.
pub struct HostRun<T: Send + 'static = RunResult> {
    shared: Arc<RunShared<T>>,
    /// Wakes the run's host, or has a core thread poll it (see [`RunWaker`]).
    waker: Waker,
    /// Stops the command when the run is dropped before its end.
    on_drop: CancelToken,
    /// Whether it has been polled: its first poll registers its
    /// descriptors with the reactor.
    polled: bool,
    reactor: Arc<Runtime>,
    owner: libc::pid_t,
}

type RunFuture<T> = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

/// What the host's thread and the core's threads share of a run.
struct RunShared<T> {
    state: Mutex<RunState<T>>,
    /// The waker of the host's last poll: woken when the run has news for
    /// it (kept apart from `state`: a poll holding `state` may wake it).
    host: Mutex<Option<Waker>>,
    host_thread: ThreadId,
}

struct RunState<T> {
    /// None once it has ended (or was taken by a drop).
    run: Option<RunFuture<T>>,
    /// What it ended with, when a core thread's poll ended it.
    ended: Option<Result<T>>,
}

/// The waker the run's future is polled with. A wake in the host's turn
/// (its reactor handing out descriptor news) asks the host for a poll. A
/// wake from anywhere else (a timer kept by the core's runtime, a
/// cancellation, dispose, a kill, from any thread) is answered by a core
/// thread polling the run at once: a host thread that is busy then delays
/// no signal, grace period or limit (docs/hosts.md); the host's next poll
/// takes the result.
struct RunWaker<T>(Weak<RunShared<T>>);

impl<T: Send + 'static> Wake for RunWaker<T> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(shared) = self.0.upgrade() else { return };
        if IN_HOST_TURN.get() && std::thread::current().id() == shared.host_thread {
            shared.wake_host();
            return;
        }
        let waker = Waker::from(self.clone());
        runtime::handle().spawn(async move { shared.poll_here(&waker) });
    }
}

thread_local! {
    /// Set while this thread dispatches or polls for its [`HostLoop`]: a
    /// wake then is its reactor handing out news, answered by the host's
    /// next poll. A wake from the host's own code outside a turn (a kill,
    /// a terminate, an abort, made just before the host's thread goes
    /// busy) is answered by a core thread at once, as a timer's is.
    static IN_HOST_TURN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as in its host's turn while it lives.
struct HostTurn(bool);

impl HostTurn {
    fn enter() -> HostTurn {
        HostTurn(IN_HOST_TURN.replace(true))
    }
}

impl Drop for HostTurn {
    fn drop(&mut self) {
        IN_HOST_TURN.set(self.0);
    }
}

impl<T: Send + 'static> RunShared<T> {
    fn wake_host(&self) {
        if let Some(w) = lock(&self.host).as_ref() {
            w.wake_by_ref();
        }
    }

    /// A core thread's poll: its timers are the core runtime's own.
    fn poll_here(&self, waker: &Waker) {
        let mut state = lock(&self.state);
        let Some(run) = state.run.as_mut() else { return };
        if let Poll::Ready(outcome) = run.as_mut().poll(&mut Context::from_waker(waker)) {
            state.run = None;
            state.ended = Some(outcome);
            drop(state);
            self.wake_host();
        }
    }
}

impl HostLoop {
    /// A reactor for the calling thread (one per host thread is enough).
    pub fn new() -> Result<HostLoop> {
        let reactor = Builder::new_current_thread()
            .enable_io()
            .build()
            .map_err(|e| DshError::refused("cannot create a reactor for the host's loop", &e))?;
        // SAFETY: epoll_create1 takes only a flag.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(DshError::refused(
                "cannot create an epoll instance for the host's loop",
                &std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: a descriptor epoll_create1 just returned, owned by no one else.
        let ready = crate::sys::prefer_above_stdio(unsafe { OwnedFd::from_raw_fd(fd) });
        let later = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| DshError::refused("cannot create an eventfd for the host's loop", &e.into()))?;
        let later = crate::sys::prefer_above_stdio(later);
        // Level-triggered: readable until `dispatch` reads it.
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: later.as_raw_fd() as u64,
        };
        // SAFETY: both descriptors are open; `event` outlives the call.
        if unsafe {
            libc::epoll_ctl(
                ready.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                later.as_raw_fd(),
                &mut event,
            )
        } < 0
        {
            return Err(DshError::refused(
                "cannot watch the host loop's eventfd",
                &std::io::Error::last_os_error(),
            ));
        }
        Ok(HostLoop {
            reactor: Arc::new(reactor),
            ready: Arc::new(ready),
            later,
            owner: current_pid(),
        })
    }

    /// The descriptor the host's loop watches for readability.
    pub fn fd(&self) -> RawFd {
        self.ready.as_raw_fd()
    }

    /// Reads what made [`HostLoop::fd`] readable and wakes the runs it
    /// concerns; then poll them. Never blocks.
    pub fn dispatch(&self) -> Result<()> {
        self.check()?;
        let _turn = HostTurn::enter();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 32];
        let later = self.later.as_raw_fd() as u64;
        let mut asked_later = false;
        loop {
            // SAFETY: `events` has room for the 32 entries asked for.
            let n = unsafe { libc::epoll_wait(self.ready.as_raw_fd(), events.as_mut_ptr(), 32, 0) };
            asked_later |= events[..n.max(0) as usize].iter().any(|e| e.u64 == later);
            if n < 32 {
                break;
            }
        }
        if asked_later {
            // Level-triggered: read, or the host's loop would come at once again.
            let _ = rustix::io::read(&self.later, &mut [0u8; 8]);
        }
        // One turn of the reactor with no wait: yield_now lets it look for
        // events before it polls again.
        self.reactor.block_on(tokio::task::yield_now());
        Ok(())
    }

    /// Makes [`HostLoop::fd`] readable, so that the host's loop calls
    /// [`HostLoop::dispatch`] again in its next turn: for work that woke
    /// itself (output that comes as fast as it is read) and is left for
    /// then, after the loop's timers and other callbacks.
    pub fn poll_later(&self) {
        // A full counter (EAGAIN) is readable already.
        let _ = rustix::io::write(&self.later, &1u64.to_ne_bytes());
    }

    /// Polls `run` on this thread; `cx`'s waker is woken (from any thread)
    /// when it should be polled again other than after [`HostLoop::fd`]
    /// became readable: a timer fired, the caller cancelled, the executor
    /// is being disposed.
    pub fn poll<T: Send + 'static>(&self, run: &mut HostRun<T>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        if let Err(e) = self.check() {
            return Poll::Ready(Err(e));
        }
        let _turn = HostTurn::enter();
        {
            let mut host = lock(&run.shared.host);
            if !host.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *host = Some(cx.waker().clone());
            }
        }
        let mut state = lock(&run.shared.state);
        if let Some(outcome) = state.ended.take() {
            return Poll::Ready(outcome);
        }
        let Some(fut) = state.run.as_mut() else {
            return Poll::Ready(Err(DshError::Internal(
                "a run was polled after its result".into(),
            )));
        };
        let outcome = {
            let _reactor = self.reactor.enter();
            let _timers = runtime::timers_on_core();
            fut.as_mut().poll(&mut Context::from_waker(&run.waker))
        };
        if outcome.is_ready() {
            state.run = None;
        }
        drop(state);
        if outcome.is_pending() && !std::mem::replace(&mut run.polled, true) {
            // The first poll registered the run's descriptors with the
            // reactor; the host's descriptor has watched them since
            // `run_on_host_loop`, and news they had before now may already have been
            // read from it (a dispatch before this poll): a command that
            // ended that fast would never be heard of. One turn of the
            // reactor hands out what they hold; it wakes `cx`'s waker.
            self.reactor.block_on(tokio::task::yield_now());
        }
        outcome
    }

    /// Watches `fds` for readability (edge-triggered: an event is news
    /// once); see [`HostLoop::writable_watch`] for writability.
    pub(crate) fn watch(&self, fds: &[RawFd]) -> std::io::Result<()> {
        for &fd in fds {
            if let Err(e) = watch_fd(&self.ready, libc::EPOLL_CTL_ADD, fd, false) {
                // None half watched: a descriptor left in the set would wake
                // the host for work that runs on the core's threads.
                for &added in fds.iter().take_while(|&&f| f != fd) {
                    // SAFETY: both descriptors are open; a null event is
                    // allowed for EPOLL_CTL_DEL.
                    unsafe {
                        libc::epoll_ctl(
                            self.ready.as_raw_fd(),
                            libc::EPOLL_CTL_DEL,
                            added,
                            std::ptr::null_mut(),
                        )
                    };
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Says whether the host's loop should also wake when `fd` (watched by
    /// [`HostLoop::watch`]) becomes writable: only while a write to it
    /// waits for room, since a terminal is woken for writing after every
    /// write and read. Callable from any thread.
    pub(crate) fn writable_watch(&self, fd: RawFd) -> WritableWatch {
        WritableWatch {
            ready: self.ready.clone(),
            fd,
        }
    }

    fn check(&self) -> Result<()> {
        crate::host::forked::check_host(self.owner)
    }
}

/// Adds or removes writability from what a descriptor watched by a
/// [`HostLoop`] wakes it for (see [`HostLoop::writable_watch`]).
pub(crate) struct WritableWatch {
    ready: Arc<OwnedFd>,
    fd: RawFd,
}

impl WritableWatch {
    /// Wakes the host's loop when the descriptor becomes writable, or no
    /// longer. A descriptor already closed is no longer watched: nothing
    /// to do.
    pub(crate) fn wants(&self, writable: bool) {
        let _ = watch_fd(&self.ready, libc::EPOLL_CTL_MOD, self.fd, writable);
    }
}

/// Adds `fd` to the host's epoll set, or changes what it is watched for.
fn watch_fd(ready: &OwnedFd, op: libc::c_int, fd: RawFd, writable: bool) -> std::io::Result<()> {
    let mut events = libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET;
    if writable {
        events |= libc::EPOLLOUT;
    }
    let mut event = libc::epoll_event {
        events: events as u32,
        u64: fd as u64,
    };
    // SAFETY: `event` outlives the call; `ready` is open. A watched
    // descriptor leaves the set when it is closed (the call then fails).
    if unsafe { libc::epoll_ctl(ready.as_raw_fd(), op, fd, &mut event) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl<T: Send + 'static> HostRun<T> {
    /// `run` must stop its command when `on_drop` fires.
    pub(crate) fn new(
        host: &HostLoop,
        run: impl Future<Output = Result<T>> + Send + 'static,
        on_drop: CancelToken,
    ) -> HostRun<T> {
        let shared = Arc::new(RunShared {
            state: Mutex::new(RunState {
                run: Some(Box::pin(run)),
                ended: None,
            }),
            host: Mutex::new(None),
            host_thread: std::thread::current().id(),
        });
        HostRun {
            waker: Waker::from(Arc::new(RunWaker(Arc::downgrade(&shared)))),
            shared,
            on_drop,
            polled: false,
            reactor: host.reactor.clone(),
            owner: host.owner,
        }
    }
}

impl<T: Send + 'static> HostRun<T> {
    /// `run` on `host`'s loop, which watches `fds` for it, when `on_host`
    /// and the loop takes them; else on the core's threads (nothing has
    /// registered its descriptors yet: it has not been polled), the
    /// `HostRun` then only waiting for its outcome.
    pub(crate) fn watching(
        host: &HostLoop,
        on_host: bool,
        fds: &[RawFd],
        run: impl Future<Output = Result<T>> + Send + 'static,
        on_drop: CancelToken,
    ) -> HostRun<T> {
        if on_host && host.watch(fds).is_ok() {
            return HostRun::new(host, run, on_drop);
        }
        let joined = runtime::spawned(run);
        HostRun::new(host, async move { joined.await? }, on_drop)
    }

    /// Stops its command as a drop before its end does, without waiting:
    /// a host dropping many at once stops them all first, so their grace
    /// periods run side by side instead of one after another.
    pub fn stop(&self) {
        self.on_drop.cancel();
    }
}

impl<T: Send + 'static> Drop for HostRun<T> {
    /// Dropped before its end (the host's environment is going away): the
    /// command is stopped as a cancellation stops it, and waited for here,
    /// since only this thread's reactor reads its events.
    fn drop(&mut self) {
        let Some(run) = lock(&self.shared.state).run.take() else {
            return;
        };
        self.on_drop.cancel();
        if self.owner != current_pid() || Handle::try_current().is_ok() {
            // A forked child, or inside a runtime, where it cannot be waited
            // for: dispose's sweep finds what is left by its tag (with
            // SIGKILL only, if its first sweep came before this drop).
            return;
        }
        let _timers = runtime::timers_on_core();
        let _ = self.reactor.block_on(run);
    }
}

impl Drop for HostLoop {
    fn drop(&mut self) {
        if self.owner != current_pid() {
            // The parent's reactor, inherited through fork: leave it alone.
            std::mem::forget(self.reactor.clone());
        }
    }
}

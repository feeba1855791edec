//! Foreground runs, spawned programs and terminal sessions on the JS
//! thread's own event loop
//! (the core's `HostLoop`): the command is asked for on the JS thread, and
//! libuv wakes that thread when the supervisor reports, as the
//! supervisor's report wakes a blocking caller. Without this, each run
//! cost two hand-offs between threads (JS thread → core I/O thread → JS
//! thread), and each spawn's `done` three (through the core's callback
//! thread as well).
//!
//! libuv is node's, found at run time: under a runtime that has napi but
//! not libuv's symbols, every run takes the core's threads instead.

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::ThreadId;

use dsh_core::{HostLoop, HostRun};
use napi::bindgen_prelude::*;
use napi::{sys, Env};

use crate::convert::js_error;
use crate::executor::RunValue;
use crate::settle::{self, Channel, Settle};
use crate::spawn::SpawnDone;
use crate::terminal_readers::TerminalReaders;

/// The few libuv functions used, looked up in the running process.
pub(crate) struct Uv {
    pub handle_size: unsafe extern "C" fn(c_int) -> usize,
    pub poll_init: unsafe extern "C" fn(*mut sys::uv_loop_s, *mut c_void, c_int) -> c_int,
    pub poll_start: unsafe extern "C" fn(*mut c_void, c_int, PollCallback) -> c_int,
    pub poll_stop: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub close: unsafe extern "C" fn(*mut c_void, CloseCallback),
    pub unref: unsafe extern "C" fn(*mut c_void),
}

pub(crate) type PollCallback = unsafe extern "C" fn(*mut c_void, c_int, c_int);
pub(crate) type CloseCallback = unsafe extern "C" fn(*mut c_void);

pub(crate) const UV_POLL: c_int = 8;
pub(crate) const UV_READABLE: c_int = 1;

pub(crate) fn uv() -> Option<&'static Uv> {
    static UV: OnceLock<Option<Uv>> = OnceLock::new();
    UV.get_or_init(|| {
        // SAFETY: each name is libuv's function whose C signature the
        // field's type spells out (uv.h, stable since libuv 1.0).
        unsafe {
            Some(Uv {
                handle_size: function(c"uv_handle_size")?,
                poll_init: function(c"uv_poll_init")?,
                poll_start: function(c"uv_poll_start")?,
                poll_stop: function(c"uv_poll_stop")?,
                close: function(c"uv_close")?,
                unref: function(c"uv_unref")?,
            })
        }
    })
    .as_ref()
}

/// The function `name` in the running process, as an `F`.
///
/// # Safety
/// `F` must be a function pointer type with the C signature of `name`.
unsafe fn function<F: Copy>(name: &CStr) -> Option<F> {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: dlsym with RTLD_DEFAULT only reads the name.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    // SAFETY: a non-null symbol address, read as the pointer type the caller
    // vouches for (same size, checked above).
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// One JS thread's foreground runs and spawned programs.
struct Driver {
    env: sys::napi_env,
    host: HostLoop,
    /// libuv's poll handle on `host.fd()`; closed with the environment.
    handle: Cell<*mut c_void>,
    pending: RefCell<Vec<Pending>>,
    waker: Arc<TurnWaker>,
    /// What a turn started by libuv's callback runs in (see `on_readable`);
    /// `None` if it could not be made: such turns take the threadsafe
    /// function instead.
    scope: Option<CallbackScope>,
}

/// An async context and its resource object, for the callback scope a
/// libuv callback runs JS in (see [`CallbackScope::run`]). What runs there
/// (events emitted, ticks queued) sees the async context that was current
/// where the scope was made: the driver's turns that of the call that made
/// the driver; a pipe reader's that of the spawn it reads for.
pub(crate) struct CallbackScope {
    resource: sys::napi_ref,
    context: sys::napi_async_context,
}

/// Work not ended yet, and what its end settles.
struct Pending {
    work: Work,
    /// Set when it has news: a turn polls only the work that does.
    news: Arc<News>,
}

enum Work {
    /// A foreground run and its promise.
    Run(HostRun, Option<Settle>),
    /// A spawned program's supervision, and its `done` promises.
    Spawn(HostRun<()>, Arc<SpawnDone>),
    /// A terminal session, and its `nextOutput` readers.
    Terminal(HostRun<()>, Arc<TerminalReaders>),
}

/// What settles an ended piece of work's promises, after the turn.
type Ending = Box<dyn FnOnce(Env)>;

impl Work {
    fn stop(&self) {
        match self {
            Work::Run(run, _) => run.stop(),
            Work::Spawn(run, _) => run.stop(),
            Work::Terminal(run, _) => run.stop(),
        }
    }

    /// What a poll of it left for readers to be given, settled after the
    /// turn as endings are.
    fn delivered(&self) -> Option<Ending> {
        match self {
            Work::Terminal(_, readers) => readers.deliver(),
            _ => None,
        }
    }

    fn poll(&mut self, host: &HostLoop, cx: &mut Context<'_>) -> Poll<Ending> {
        match self {
            Work::Run(run, settle) => host.poll(run, cx).map(|outcome| {
                let settle = settle.take();
                Box::new(move |env: Env| {
                    if let Some(settle) = settle {
                        settle.resolve_here(env, RunValue::of(&env, outcome))
                    }
                }) as Ending
            }),
            Work::Spawn(run, done) => host.poll(run, cx).map(|outcome| {
                let done = done.clone();
                Box::new(move |env: Env| done.ended(env, outcome)) as Ending
            }),
            // The session's end has ended its output: `delivered` settles
            // the readers still waiting.
            Work::Terminal(run, _) => host.poll(run, cx).map(|_| Box::new(|_: Env| {}) as Ending),
        }
    }
}

/// A run's waker: marks the run and asks for a turn.
struct News {
    woken: AtomicBool,
    turn: Arc<TurnWaker>,
}

impl Wake for News {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.turn.wake_by_ref();
    }
}

/// Asks the JS thread for a turn: from libuv's callback when the host
/// loop's descriptor is readable, and from any thread when a run's timer
/// fires or its run is cancelled.
struct TurnWaker {
    requested: AtomicBool,
    /// A wake during a turn, on its own thread: the turn goes round again.
    again: AtomicBool,
    thread: ThreadId,
    channel: Arc<Channel>,
}

thread_local! {
    static DRIVER: Cell<Option<&'static Driver>> = const { Cell::new(None) };
    static IN_TURN: Cell<bool> = const { Cell::new(false) };
}

impl Wake for TurnWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if IN_TURN.with(Cell::get) && std::thread::current().id() == self.thread {
            self.again.store(true, Ordering::Release);
        } else if !self.requested.swap(true, Ordering::AcqRel) {
            settle::send(
                &self.channel,
                Box::new(|env| {
                    if let Some(env) = env {
                        turn(env)
                    }
                }),
            );
        }
    }
}

/// Runs `spec` on this JS thread's loop, or returns `None` when this
/// runtime has no libuv (the caller then takes the core's threads).
pub(crate) fn run<'e>(
    env: &'e Env,
    executor: &dsh_core::Executor,
    spec: &dsh_core::Spec,
    cancel: Option<&dsh_core::CancelToken>,
) -> Result<Option<Object<'e>>> {
    let Some(driver) = driver(env)? else {
        return Ok(None);
    };
    let (settle, promise) = settle::promise(env)?;
    match executor.run_on_host_loop(&driver.host, spec, cancel) {
        Ok(run) => driver.add(*env, Work::Run(run, Some(settle))),
        Err(e) => settle.resolve_here(*env, RunValue::of(env, Err(e))),
    }
    Ok(Some(promise))
}

/// Spawns `spec`'s program watched by this JS thread's loop, or returns
/// `None` when this runtime has no libuv (the caller then spawns it on the
/// core's threads). Its `done` promises come from the [`SpawnDone`].
pub(crate) fn spawn(
    env: &Env,
    executor: &dsh_core::Executor,
    spec: &dsh_core::SpawnSpec,
) -> Result<Option<(dsh_core::Spawned, Arc<SpawnDone>)>> {
    let Some(driver) = driver(env)? else {
        return Ok(None);
    };
    let (spawned, run) = executor
        .spawn_on_host_loop(&driver.host, spec)
        .map_err(|e| js_error(env, &e))?;
    let done = Arc::new(SpawnDone::new(spawned.process.clone()));
    driver.add(*env, Work::Spawn(run, done.clone()));
    Ok(Some((spawned, done)))
}

/// Spawns a terminal session whose task runs on this JS thread's loop from
/// the start (the spawn happens here, as node-pty's fork does), with its
/// readers; `None` when this runtime has no libuv or no loop can be made
/// for this thread (the caller then spawns it on the core's threads).
pub(crate) fn spawn_terminal(
    env: &Env,
    executor: &dsh_core::Executor,
    spec: &dsh_core::TerminalSpec,
) -> Option<dsh_core::Result<(dsh_core::Terminal, Arc<TerminalReaders>)>> {
    let Ok(Some(driver)) = driver(env) else {
        return None;
    };
    let (terminal, task) = match executor.spawn_terminal_task(spec) {
        Ok(spawned) => spawned,
        Err(e) => return Some(Err(e)),
    };
    let readers = TerminalReaders::new(terminal.clone());
    let news = driver.news();
    // Output a core thread read asks for a turn, which settles the readers.
    let wake = news.clone();
    terminal.set_output_news(Arc::new(move || wake.wake_by_ref()));
    let run = task.on_host_loop(&driver.host);
    driver.add_with(*env, Work::Terminal(run, readers.clone()), news);
    Some(Ok((terminal, readers)))
}

impl Driver {
    /// The waker of a piece of work about to be added: woken, so that it
    /// is polled at once.
    fn news(&self) -> Arc<News> {
        Arc::new(News {
            woken: AtomicBool::new(true),
            turn: self.waker.clone(),
        })
    }

    fn add(&self, env: Env, work: Work) {
        self.add_with(env, work, self.news())
    }

    fn add_with(&self, env: Env, work: Work, news: Arc<News>) {
        self.pending.borrow_mut().push(Pending { work, news });
        // Polled at once, here: it registers its descriptors and timers.
        turn(env);
    }
}

/// Rounds of polls one turn makes at most before it leaves the rest to the
/// next turn (see `turn`).
const MAX_ROUNDS: u32 = 4;

/// Polls the work of this thread that has news; what ended settles its
/// promises.
fn turn(env: Env) {
    let Some(driver) = DRIVER.with(Cell::get).filter(|d| d.env == env.raw()) else {
        return;
    };
    driver.waker.requested.store(false, Ordering::Release);
    IN_TURN.with(|t| t.set(true));
    let mut ended = Vec::new();
    let mut rounds = 0;
    loop {
        rounds += 1;
        // Wakes from the events dispatch hands out are answered by the polls
        // that follow; only those that come after them need another round.
        let _ = driver.host.dispatch();
        driver.waker.again.store(false, Ordering::Release);
        let mut pending = driver.pending.borrow_mut();
        let mut i = 0;
        while i < pending.len() {
            let work = &mut pending[i];
            if !work.news.woken.swap(false, Ordering::AcqRel) {
                i += 1;
                continue;
            }
            let waker = Waker::from(work.news.clone());
            let polled = work.work.poll(&driver.host, &mut Context::from_waker(&waker));
            ended.extend(work.work.delivered());
            match polled {
                Poll::Pending => i += 1,
                Poll::Ready(ending) => {
                    pending.swap_remove(i);
                    ended.push(ending);
                }
            }
        }
        drop(pending);
        if !driver.waker.again.load(Ordering::Acquire) {
            break;
        }
        if rounds == MAX_ROUNDS {
            // Work that keeps waking itself (output that comes as fast as it
            // is read) goes on in the loop's next turn, after its timers and
            // other callbacks: not by the channel, whose calls queued during
            // a call of its own run in the same turn.
            driver.host.poll_later();
            break;
        }
    }
    IN_TURN.with(|t| t.set(false));
    for ending in ended {
        ending(env);
    }
}

/// This JS thread's driver, made on first use; `None` without libuv.
fn driver(env: &Env) -> Result<Option<&'static Driver>> {
    if let Some(d) = DRIVER.with(Cell::get).filter(|d| d.env == env.raw()) {
        return Ok(Some(d));
    }
    let Some(uv) = uv() else { return Ok(None) };
    let channel = settle::channel(env)?;
    let host = HostLoop::new().map_err(|e| js_error(env, &e))?;
    let mut uv_loop = std::ptr::null_mut();
    // SAFETY: a live env on its JS thread.
    if unsafe { sys::napi_get_uv_event_loop(env.raw(), &mut uv_loop) } != sys::Status::napi_ok
        || uv_loop.is_null()
    {
        return Ok(None);
    }
    let handle = poll_memory(uv);
    // SAFETY: `handle` is fresh memory of the size libuv asked for, on the
    // loop of this thread; `host.fd()` stays open as long as the driver.
    // A handle that failed to initialise is not libuv's; one that failed to
    // start is closed, and its memory freed once libuv lets go of it.
    unsafe {
        if (uv.poll_init)(uv_loop, handle, host.fd()) != 0 {
            free_poll_memory(handle);
            return Ok(None);
        }
        if (uv.poll_start)(handle, UV_READABLE, on_readable) != 0 {
            (uv.close)(handle, freed);
            return Ok(None);
        }
    }
    // SAFETY: an initialised handle. Pending runs keep the loop alive
    // through their promises, not through this handle.
    unsafe { (uv.unref)(handle) };
    let scope = CallbackScope::new(env, c"dsh-native turn");
    let driver: &'static Driver = Box::leak(Box::new(Driver {
        env: env.raw(),
        host,
        handle: Cell::new(handle),
        pending: RefCell::new(Vec::new()),
        waker: Arc::new(TurnWaker {
            requested: AtomicBool::new(false),
            again: AtomicBool::new(false),
            thread: std::thread::current().id(),
            channel,
        }),
        scope,
    }));
    // SAFETY: the hook runs on this JS thread at its environment's teardown.
    unsafe { sys::napi_add_env_cleanup_hook(env.raw(), Some(torn_down), std::ptr::null_mut()) };
    DRIVER.with(|d| d.set(Some(driver)));
    Ok(Some(driver))
}

impl CallbackScope {
    /// A scope whose async context is the current one, named `name` (for
    /// async hooks); `None` when node refuses one.
    pub(crate) fn new(env: &Env, name: &CStr) -> Option<CallbackScope> {
        let raw = env.raw();
        let mut resource = std::ptr::null_mut();
        let mut name_value = std::ptr::null_mut();
        let mut reference = std::ptr::null_mut();
        let mut context = std::ptr::null_mut();
        // SAFETY: a live env on its JS thread, inside a call from JS (a
        // handle scope is open); the reference keeps the resource object
        // alive as long as the context that names it.
        unsafe {
            let ok = sys::napi_create_object(raw, &mut resource) == sys::Status::napi_ok
                && sys::napi_create_string_utf8(raw, name.as_ptr(), -1, &mut name_value)
                    == sys::Status::napi_ok
                && sys::napi_create_reference(raw, resource, 1, &mut reference) == sys::Status::napi_ok;
            if !ok {
                return None;
            }
            if sys::napi_async_init(raw, resource, name_value, &mut context) != sys::Status::napi_ok {
                sys::napi_delete_reference(raw, reference);
                return None;
            }
        }
        Some(CallbackScope {
            resource: reference,
            context,
        })
    }

    /// Runs `f` as node runs an addon's callback from libuv: in a callback
    /// scope of this async context, whose close runs the microtasks and
    /// ticks `f` queued. False, with nothing run, when the scopes cannot be
    /// opened.
    ///
    /// # Safety
    /// On `env`'s JS thread (the env this scope was made with), outside any
    /// JS frame (so this callback scope is the outermost one), while its
    /// environment lives.
    pub(crate) unsafe fn run(&self, env: sys::napi_env, f: impl FnOnce(Env)) -> bool {
        let mut handles = std::ptr::null_mut();
        let mut resource = std::ptr::null_mut();
        let mut callback = std::ptr::null_mut();
        // SAFETY: the caller's; each scope opened is closed, in reverse order.
        unsafe {
            if sys::napi_open_handle_scope(env, &mut handles) != sys::Status::napi_ok {
                return false;
            }
            let opened = sys::napi_get_reference_value(env, self.resource, &mut resource)
                == sys::Status::napi_ok
                && !resource.is_null()
                && sys::napi_open_callback_scope(env, resource, self.context, &mut callback)
                    == sys::Status::napi_ok;
            if opened {
                f(Env::from_raw(env));
                // What `f` left thrown is the host's uncaught exception, as
                // it is from the threadsafe function's call (a callback
                // scope would drop it, and every napi call after it would
                // fail).
                rethrow_uncaught(env);
                sys::napi_close_callback_scope(env, callback);
            }
            sys::napi_close_handle_scope(env, handles);
            opened
        }
    }

    /// Ends the async context.
    ///
    /// # Safety
    /// On the JS thread of the env it was made with, while that env lives
    /// (its cleanup hooks included); once.
    pub(crate) unsafe fn destroy(&self, env: sys::napi_env) {
        // SAFETY: the caller's.
        unsafe {
            sys::napi_async_destroy(env, self.context);
            sys::napi_delete_reference(env, self.resource);
        }
    }
}

/// libuv: the host loop's descriptor is readable. The turn runs here, in
/// a callback scope, as node runs an addon's callback from libuv: its
/// close runs the microtasks and ticks the turn's settlements queued, so
/// they follow in this same iteration of the loop. (Through the
/// threadsafe function, each report cost a second iteration: an eventfd
/// written, polled and read.) It goes through the threadsafe function
/// still while jobs the core's threads queued wait there, so as not to
/// settle ahead of them.
unsafe extern "C" fn on_readable(_handle: *mut c_void, _status: c_int, _events: c_int) {
    let Some(driver) = DRIVER.with(Cell::get) else {
        return;
    };
    // Behind settlements the core's threads queued already, the turn
    // queues too: promises settle in the order they were asked to.
    let here = !IN_TURN.with(Cell::get) && !settle::jobs_waiting(&driver.waker.channel);
    // SAFETY: libuv calls this on the driver's JS thread, outside any JS
    // frame, while the environment lives (the handle is closed at its
    // teardown).
    if !(here && unsafe { turn_in_callback_scope(driver) }) {
        driver.waker.wake_by_ref();
    }
}

/// Runs a turn in a callback scope of the driver's async context; false,
/// with nothing run, when the scopes cannot be opened.
///
/// # Safety
/// On the driver's JS thread, outside any JS frame (so this callback
/// scope is the outermost one), while its environment lives.
unsafe fn turn_in_callback_scope(driver: &Driver) -> bool {
    let Some(scope) = &driver.scope else {
        return false;
    };
    // SAFETY: the caller's.
    unsafe { scope.run(driver.env, turn) }
}

/// An exception left pending on `env` becomes the host's uncaught
/// exception (`process.on('uncaughtException')`, or the host's end), as
/// one thrown by a listener node calls from libuv would.
///
/// # Safety
/// On `env`'s JS thread, while its environment lives.
unsafe fn rethrow_uncaught(env: sys::napi_env) {
    let mut thrown = false;
    // SAFETY: the caller's.
    unsafe {
        if sys::napi_is_exception_pending(env, &mut thrown) == sys::Status::napi_ok && thrown {
            let mut error = std::ptr::null_mut();
            if sys::napi_get_and_clear_last_exception(env, &mut error) == sys::Status::napi_ok {
                sys::napi_fatal_exception(env, error);
            }
        }
    }
}

/// The environment is going away: runs and spawned programs still pending
/// are stopped (all at once, then each waited for, as a `HostRun` dropped
/// before its end waits), the poll handle closes, and the driver (its
/// reactor, its descriptors) is freed.
unsafe extern "C" fn torn_down(_arg: *mut c_void) {
    let Some(driver) = DRIVER.with(|d| d.take()) else {
        return;
    };
    let pending = std::mem::take(&mut *driver.pending.borrow_mut());
    // Every stop first (a core thread answers each at once), then each
    // drop waits for its own end: the grace periods run side by side.
    for p in &pending {
        p.work.stop();
    }
    drop(pending);
    if let Some(scope) = &driver.scope {
        // SAFETY: made in `driver` for this environment, which still lives
        // while its cleanup hooks run; only here.
        unsafe { scope.destroy(driver.env) };
    }
    let handle = driver.handle.replace(std::ptr::null_mut());
    if let (Some(uv), false) = (uv(), handle.is_null()) {
        // SAFETY: the handle started in `driver`; libuv frees nothing of
        // ours, and `freed` returns the memory once it is closed.
        unsafe {
            (uv.poll_stop)(handle);
            (uv.close)(handle, freed);
        }
    }
    // SAFETY: `driver` is the box `driver()` leaked for this environment,
    // and nothing names it any more: DRIVER no longer does, libuv has let
    // go of the handle on its descriptor (stopped and closed above, and
    // `on_readable` reads DRIVER), and no turn runs after teardown. Its
    // reactor and descriptors would otherwise outlive each worker.
    drop(unsafe { Box::from_raw(driver as *const Driver as *mut Driver) });
}

/// 8-byte words of memory a libuv poll handle takes (libuv's own size).
fn poll_words(uv: &Uv) -> usize {
    // SAFETY: uv_handle_size only reads its argument.
    unsafe { (uv.handle_size)(UV_POLL) }.div_ceil(8)
}

/// Memory for a libuv poll handle: given back by [`free_poll_memory`],
/// at once when it never became a handle, else by [`freed`] once libuv
/// has closed it.
pub(crate) fn poll_memory(uv: &Uv) -> *mut c_void {
    // 8-aligned (u64s), of libuv's size.
    Box::into_raw(vec![0u64; poll_words(uv)].into_boxed_slice()) as *mut c_void
}

/// Gives back what [`poll_memory`] made.
///
/// # Safety
/// `handle` came from `poll_memory`, is given back once, and libuv does
/// not use it (never initialised, or closed).
pub(crate) unsafe fn free_poll_memory(handle: *mut c_void) {
    let Some(uv) = uv() else { return };
    // SAFETY: the caller's; the length is computed as `poll_memory` did.
    drop(unsafe {
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            handle as *mut u64,
            poll_words(uv),
        ))
    });
}

/// Makes this JS thread's driver if it has none yet, so that work can run
/// on its loop; false in a runtime without libuv.
pub(crate) fn drive_on_this_loop(env: &Env) -> Result<bool> {
    Ok(driver(env)?.is_some())
}

/// libuv: a poll handle is closed; its memory is ours again.
pub(crate) unsafe extern "C" fn freed(handle: *mut c_void) {
    // SAFETY: libuv calls this once, after the close of a handle whose
    // memory `poll_memory` made; it no longer uses it.
    unsafe { free_poll_memory(handle) }
}

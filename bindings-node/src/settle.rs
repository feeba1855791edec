//! Promises settled from core threads through one threadsafe function per
//! JS thread.
//!
//! A napi-rs deferred creates a threadsafe function, an environment cleanup
//! hook and a libuv handle for every promise, and closes them again when it
//! settles: most of what a short `run` costs on the JS thread. Here each JS
//! thread (the main thread, or a worker's) creates one threadsafe function
//! on first use and keeps it for the life of its environment; a promise
//! costs one `napi_create_promise` and one queued call.
//!
//! The threadsafe function holds the event loop open only while a promise
//! it will settle is pending (`napi_ref`/`napi_unref` on the JS thread), as
//! the per-promise ones did.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi::{sys, Env};

/// Work for the JS thread; given `None` when its environment is going away
/// with the job still queued.
type Job = Box<dyn FnOnce(Option<Env>) + Send>;

/// A `napi_deferred` is only ever used on the JS thread that created it;
/// core threads carry it inside a [`Job`] without touching it.
struct RawDeferred(sys::napi_deferred);

// SAFETY: see `RawDeferred`: the pointer is dereferenced by napi only on the
// owning JS thread (in `settle_on_js_thread`).
unsafe impl Send for RawDeferred {}

/// The threadsafe function, as core threads see it: `None` once the
/// environment has finalized it, after which nothing may call it.
pub(crate) struct Channel {
    tsfn: Mutex<Option<RawTsfn>>,
    /// Jobs queued and not run yet: a turn libuv starts runs at once only
    /// behind none (`jobs_waiting`), so settlements keep the order in which
    /// they were asked for.
    queued: AtomicUsize,
}

struct RawTsfn(sys::napi_threadsafe_function);

// SAFETY: napi_call_threadsafe_function may be called from any thread; the
// mutex in `Channel` keeps every call before the finalizer clears it.
unsafe impl Send for RawTsfn {}

/// The JS thread's side: the channel, and how many promises it still owes
/// (while any are owed, the threadsafe function keeps the loop alive).
struct Hub {
    env: sys::napi_env,
    tsfn: sys::napi_threadsafe_function,
    channel: Arc<Channel>,
    owed: Cell<usize>,
}

thread_local! {
    static HUB: Cell<Option<&'static Hub>> = const { Cell::new(None) };
}

/// A pending promise; settle it with [`Settle::resolve`]. Dropped without
/// being settled (a core callback that never ran), it rejects the promise
/// rather than leave it, and the loop, waiting forever.
pub(crate) struct Settle {
    job: Option<(RawDeferred, Arc<Channel>)>,
}

/// A new promise on the calling JS thread, and its settler (which may be
/// moved to any thread).
pub(crate) fn promise<'e>(env: &'e Env) -> Result<(Settle, Object<'e>)> {
    let hub = hub(env)?;
    let mut deferred = ptr::null_mut();
    let mut promise = ptr::null_mut();
    // SAFETY: a live env on its own JS thread (napi-rs passed it to us).
    check(unsafe { sys::napi_create_promise(env.raw(), &mut deferred, &mut promise) })?;
    // SAFETY: `promise` was just created in this env.
    let promise = unsafe { Object::from_napi_value(env.raw(), promise) }?;
    // Owed from here on: nothing below can fail and leave the loop held.
    if hub.owed.get() == 0 {
        // SAFETY: the JS thread that owns `hub.tsfn` (a thread-local).
        check(unsafe { sys::napi_ref_threadsafe_function(hub.env, hub.tsfn) })?;
    }
    hub.owed.set(hub.owed.get() + 1);
    Ok((
        Settle {
            job: Some((RawDeferred(deferred), hub.channel.clone())),
        },
        promise,
    ))
}

impl Settle {
    /// Settles the promise on its JS thread with what `resolver` returns
    /// there (a rejection for `Err`). Callable from any thread; never blocks.
    pub(crate) fn resolve<T: ToNapiValue>(
        mut self,
        resolver: impl FnOnce(Env) -> Result<T> + Send + 'static,
    ) {
        if let Some((deferred, channel)) = self.job.take() {
            send(
                &channel,
                Box::new(move |env| {
                    if let Some(env) = env {
                        settle_here(env, deferred, resolver(env));
                    }
                }),
            );
        }
    }

    /// [`Settle::resolve`] from the promise's own JS thread: settled now.
    pub(crate) fn resolve_here<T: ToNapiValue>(mut self, env: Env, value: Result<T>) {
        if let Some((deferred, _)) = self.job.take() {
            settle_here(env, deferred, value);
        }
    }
}

impl Drop for Settle {
    fn drop(&mut self) {
        if let Some((deferred, channel)) = self.job.take() {
            send(
                &channel,
                Box::new(move |env| {
                    if let Some(env) = env {
                        let dropped: Result<()> = Err(Error::from_reason(
                            "dsh-native dropped a promise without settling it",
                        ));
                        settle_here(env, deferred, dropped);
                    }
                }),
            );
        }
    }
}

/// Whether jobs queued for the channel's JS thread have not run yet.
pub(crate) fn jobs_waiting(channel: &Channel) -> bool {
    channel.queued.load(Ordering::Acquire) > 0
}

/// Queues `job` for the channel's JS thread; never blocks. Dropped unrun
/// when that thread's environment is gone.
pub(crate) fn send(channel: &Channel, job: Job) {
    let job = Box::into_raw(Box::new(job));
    let tsfn = channel.tsfn.lock().unwrap_or_else(|e| e.into_inner());
    let queued = match tsfn.as_ref() {
        Some(t) => {
            // Counted before the call: the job may run before it returns.
            channel.queued.fetch_add(1, Ordering::AcqRel);
            // SAFETY: the lock keeps the finalizer from running until this
            // call has returned; the queue owns `job` once it accepts it.
            let status = unsafe {
                sys::napi_call_threadsafe_function(
                    t.0,
                    job.cast(),
                    sys::ThreadsafeFunctionCallMode::nonblocking,
                )
            };
            if status != sys::Status::napi_ok {
                channel.queued.fetch_sub(1, Ordering::AcqRel);
            }
            status == sys::Status::napi_ok
        }
        None => false,
    };
    drop(tsfn);
    if !queued {
        // The environment is gone (or going): there is no promise left to
        // settle.
        // SAFETY: not accepted by the queue, so still ours.
        drop(unsafe { Box::from_raw(job) });
    }
}

fn check(status: sys::napi_status) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::new(
            Status::from(status),
            "napi call failed while creating a promise",
        ))
    }
}

/// The channel to the calling JS thread, created on first use.
pub(crate) fn channel(env: &Env) -> Result<Arc<Channel>> {
    Ok(hub(env)?.channel.clone())
}

/// This JS thread's hub, created on first use.
fn hub(env: &Env) -> Result<&'static Hub> {
    if let Some(h) = HUB.with(Cell::get) {
        if h.env == env.raw() {
            return Ok(h);
        }
    }
    let channel = Arc::new(Channel {
        tsfn: Mutex::new(None),
        queued: AtomicUsize::new(0),
    });
    let mut name = ptr::null_mut();
    let mut tsfn = ptr::null_mut();
    // SAFETY: a live env on its JS thread. The finalize data is one strong
    // count of the channel, given back in `finalized`; the context is the
    // same channel, alive as long as that count.
    unsafe {
        check(sys::napi_create_string_utf8(
            env.raw(),
            c"dsh-native settle".as_ptr(),
            -1,
            &mut name,
        ))?;
        check(sys::napi_create_threadsafe_function(
            env.raw(),
            ptr::null_mut(),
            ptr::null_mut(),
            name,
            0,
            1,
            Arc::into_raw(channel.clone()) as *mut c_void,
            Some(finalized),
            Arc::as_ptr(&channel) as *mut c_void,
            Some(run_on_js_thread),
            &mut tsfn,
        ))?;
        check(sys::napi_unref_threadsafe_function(env.raw(), tsfn))?;
    }
    *channel.tsfn.lock().unwrap_or_else(|e| e.into_inner()) = Some(RawTsfn(tsfn));
    // One per environment for the life of its thread: a worker that ends
    // leaves a few bytes behind (its threadsafe function is finalized).
    let hub: &'static Hub = Box::leak(Box::new(Hub {
        env: env.raw(),
        tsfn,
        channel,
        owed: Cell::new(0),
    }));
    HUB.with(|h| h.set(Some(hub)));
    Ok(hub)
}

/// The environment is being torn down: no call may reach the threadsafe
/// function from now on.
unsafe extern "C" fn finalized(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the strong count given in `hub`.
    let channel = unsafe { Arc::from_raw(data as *const Channel) };
    *channel.tsfn.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// Called by node on the JS thread for each queued job; `env` is null when
/// the environment is going away with jobs still queued.
unsafe extern "C" fn run_on_js_thread(
    env: sys::napi_env,
    _js_cb: sys::napi_value,
    ctx: *mut c_void,
    data: *mut c_void,
) {
    // SAFETY: `ctx` is the channel `hub` made, kept alive by the strong
    // count the threadsafe function holds until it is finalized, after
    // which no job runs.
    if let Some(channel) = unsafe { (ctx as *const Channel).as_ref() } {
        channel.queued.fetch_sub(1, Ordering::AcqRel);
    }
    // SAFETY: every queued pointer is a `Job` boxed in `send`.
    let job = unsafe { Box::from_raw(data as *mut Job) };
    job((!env.is_null()).then(|| Env::from_raw(env)))
}

/// Settles `deferred` (created on this JS thread, settled once) with `value`.
fn settle_here<T: ToNapiValue>(env: Env, deferred: RawDeferred, value: Result<T>) {
    let raw = env.raw();
    if let Some(h) = HUB.with(Cell::get).filter(|h| h.env == raw) {
        h.owed.set(h.owed.get() - 1);
        if h.owed.get() == 0 {
            // SAFETY: on the JS thread that owns the threadsafe function.
            unsafe { sys::napi_unref_threadsafe_function(raw, h.tsfn) };
        }
    }
    // SAFETY: on the JS thread with its live env; `deferred` is its own.
    unsafe {
        match value.and_then(|v| T::to_napi_value(raw, v)) {
            Ok(value) => {
                sys::napi_resolve_deferred(raw, deferred.0, value);
            }
            Err(e) => match Error::to_napi_value(raw, e) {
                Ok(error) => {
                    sys::napi_reject_deferred(raw, deferred.0, error);
                }
                Err(_) => {
                    let mut error = ptr::null_mut();
                    let mut message = ptr::null_mut();
                    sys::napi_create_string_utf8(
                        raw,
                        c"dsh-native could not build an error".as_ptr(),
                        -1,
                        &mut message,
                    );
                    sys::napi_create_error(raw, ptr::null_mut(), message, &mut error);
                    sys::napi_reject_deferred(raw, deferred.0, error);
                }
            },
        }
    }
}

//! The executor, resolved specs, cancel tokens, and the calls that run
//! things: run, start, the registry, listeners, dispose.

use std::ffi::{c_char, c_void};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use dsh_core::{CancelToken, Executor, Process, Spec};

use crate::builders::{DshConfig, DshRequest};
use crate::guard::{
    free, handle, need_out, put, status, text, value, DshStatus, DshStr, FfiResult, OwnedStr,
};
use crate::results::{DshProcess, DshProcessList, DshRead, DshRunResult};

/// An executor. Thread-safe; freeing it without dsh_executor_dispose
/// disposes it in the background.
pub struct DshExecutor {
    inner: Executor,
}

impl DshExecutor {
    pub(crate) fn executor(&self) -> &Executor {
        &self.inner
    }
}

/// A fully resolved spec (docs/requests.md), made by dsh_executor_resolve.
pub struct DshSpec {
    pub(crate) spec: Spec,
    command: OwnedStr,
    workdir: OwnedStr,
}

/// A cancellation token for dsh_executor_run: fire it from any thread.
pub struct DshCancelToken {
    inner: CancelToken,
}

/// Called once per background process that settles, on the dsh callback
/// thread (one thread shared by every executor, never the caller's).
/// `process` is borrowed for the duration of the call: never free it nor
/// use it after the callback returns (use dsh_executor_get to keep a
/// handle). The callback must not unwind (C++ exception, longjmp) out of
/// itself and must not block for long; blocking dsh calls made from it fail
/// with DSH_WOULD_BLOCK.
pub type DshTaskDoneFn = Option<unsafe extern "C" fn(user_data: *mut c_void, process: *const DshProcess)>;

/// The caller's `user_data`: the caller promises it may be used from the
/// dsh callback thread (the # Safety of dsh_executor_on_task_done).
struct UserData(*mut c_void);
// SAFETY: this crate never dereferences the pointer: it only passes it back,
// unchanged, to the caller's own callback on the dsh callback thread, and
// the caller promised (dsh_executor_on_task_done's # Safety) that
// `user_data` may be used from that thread.
unsafe impl Send for UserData {}
// SAFETY: as for `Send`: sharing `&UserData` only lets threads copy the
// pointer value, and the pointee is touched by the caller's callback alone.
unsafe impl Sync for UserData {}

/// Creates an executor. `config` may be NULL for all defaults; it is only
/// read, and may be freed afterwards. A bad field is DSH_INVALID_ARGUMENT
/// naming it (e.g. "config.grace_ms must be no greater than 2147483647,
/// got …"; see docs/configuration.md).
///
/// # Safety
/// `config` is NULL or a live DshConfig from dsh_config_new that no thread
/// frees during this call. `out` is NULL or valid and aligned for writing one
/// `DshExecutor *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_new(config: *const DshConfig, out: *mut *mut DshExecutor) -> DshStatus {
    status(|| {
        need_out(out, "out")?;
        // SAFETY: the caller guarantees `config` is NULL or a live DshConfig
        // for the whole call (# Safety); `as_ref` maps NULL to None, and the
        // input is cloned out under its lock before the borrow ends.
        let input = match unsafe { config.as_ref() } {
            Some(c) => c.input.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            None => Default::default(),
        };
        let inner = Executor::new(input)?;
        // SAFETY: the caller guarantees `out` is NULL or writable for one
        // `DshExecutor *` (# Safety); `put` refuses NULL itself.
        unsafe { put(out, "out", DshExecutor { inner }) }
    })
}

/// Replaces the configuration for every command resolved or started from
/// now on; running commands keep the limits they started with. `config`
/// is read like dsh_executor_new's (NULL: all defaults); a field it leaves
/// unset goes back to its default, except spill_dir, which stays (naming a
/// different one is DSH_INVALID_ARGUMENT). A bad field is
/// DSH_INVALID_ARGUMENT naming it and changes nothing
/// (docs/configuration.md).
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call. `config` is NULL or a live DshConfig from
/// dsh_config_new that no thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_reconfigure(
    executor: *const DshExecutor,
    config: *const DshConfig,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `handle` refuses NULL.
        let e = unsafe { handle(executor, "executor") }?;
        // SAFETY: the caller guarantees `config` is NULL or a live DshConfig
        // for the whole call (# Safety); `as_ref` maps NULL to None, and the
        // input is cloned out under its lock before the borrow ends.
        let input = match unsafe { config.as_ref() } {
            Some(c) => c.input.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            None => Default::default(),
        };
        Ok(e.inner.reconfigure(input)?)
    })
}

/// Frees a DshExecutor; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
///
/// # Safety
/// `executor` is NULL or a DshExecutor from dsh_executor_new, not freed
/// before, and not in use by any other thread during or after this call.
/// Task-done callbacks may still run after this returns (disposal goes on in
/// the background): call dsh_executor_dispose first before releasing their
/// `user_data`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_free(executor: *mut DshExecutor) {
    // SAFETY: the caller guarantees `executor` is NULL or an unfreed
    // DshExecutor made by `put` in dsh_executor_new, with no other user
    // (# Safety): `free`'s contract exactly.
    unsafe { free(executor) }
}

/// Resolves a request into a spec: the only place defaults are applied.
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call. `request` is NULL or a live DshRequest from
/// dsh_request_new that no thread frees during this call. `out` is NULL or
/// valid and aligned for writing one `DshSpec *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_resolve(
    executor: *const DshExecutor,
    request: *const DshRequest,
    out: *mut *mut DshSpec,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `handle` refuses NULL.
        let e = unsafe { handle(executor, "executor") }?;
        // SAFETY: the caller guarantees `request` is NULL or a live
        // DshRequest for the whole call (# Safety); `handle` refuses NULL.
        let r = unsafe { handle(request, "request") }?;
        need_out(out, "out")?;
        let req = r.input.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let spec = e.inner.resolve(req)?;
        // SAFETY: the caller guarantees `out` is NULL or writable for one
        // `DshSpec *` (# Safety); `put` refuses NULL itself.
        unsafe {
            put(
                out,
                "out",
                DshSpec {
                    command: OwnedStr::new(&spec.command),
                    workdir: OwnedStr::new(spec.workdir.as_os_str().as_bytes()),
                    spec,
                },
            )
        }
    })
}

/// Frees a DshSpec; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
///
/// # Safety
/// `spec` is NULL or a DshSpec from dsh_executor_resolve, not freed before,
/// and not in use by any other thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spec_free(spec: *mut DshSpec) {
    // SAFETY: the caller guarantees `spec` is NULL or an unfreed DshSpec made
    // by `put` in dsh_executor_resolve, with no other user (# Safety):
    // `free`'s contract exactly.
    unsafe { free(spec) }
}

/// The resolved command.
///
/// # Safety
/// `spec` is NULL or a live DshSpec from dsh_executor_resolve that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spec_command(spec: *const DshSpec) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `spec` is NULL or a live DshSpec for
        // the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { spec.as_ref() }.map_or(DshStr::ABSENT, |s| s.command.view())
    })
}

/// The resolved, absolute workdir as the path's raw bytes, which need not
/// be UTF-8.
///
/// # Safety
/// `spec` is NULL or a live DshSpec from dsh_executor_resolve that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spec_workdir(spec: *const DshSpec) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `spec` is NULL or a live DshSpec for
        // the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { spec.as_ref() }.map_or(DshStr::ABSENT, |s| s.workdir.view())
    })
}

/// The effective timeout (0 for a NULL spec).
///
/// # Safety
/// `spec` is NULL or a live DshSpec from dsh_executor_resolve that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spec_timeout_ms(spec: *const DshSpec) -> u64 {
    value(0, || {
        // SAFETY: the caller guarantees `spec` is NULL or a live DshSpec for
        // the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { spec.as_ref() }.map_or(0, |s| s.spec.timeout_ms)
    })
}

/// The effective in-memory stdout cap (0 for a NULL spec).
///
/// # Safety
/// `spec` is NULL or a live DshSpec from dsh_executor_resolve that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spec_stdout_max_bytes(spec: *const DshSpec) -> u64 {
    value(0, || {
        // SAFETY: the caller guarantees `spec` is NULL or a live DshSpec for
        // the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { spec.as_ref() }.map_or(0, |s| s.spec.stdout_max_bytes)
    })
}

/// Runs a spec in the foreground and blocks until it settles. `cancel` may
/// be NULL. A nonzero exit, a timeout and a cancellation are results
/// (DSH_OK); errors mean nothing ran to completion: DSH_SPAWN_FAILED (see
/// dsh_last_errno), DSH_CANCELLED (token already fired), DSH_DISPOSED.
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call. `spec` is NULL or a live DshSpec from
/// dsh_executor_resolve that no thread frees during this call. `cancel` is
/// NULL or a live DshCancelToken from dsh_cancel_token_new that no thread
/// frees until this call returns (it may be fired meanwhile). `out` is NULL
/// or valid and aligned for writing one `DshRunResult *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_run(
    executor: *const DshExecutor,
    spec: *const DshSpec,
    cancel: *const DshCancelToken,
    out: *mut *mut DshRunResult,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `handle` refuses NULL.
        let e = unsafe { handle(executor, "executor") }?;
        // SAFETY: the caller guarantees `spec` is NULL or a live DshSpec for
        // the whole call (# Safety); `handle` refuses NULL.
        let s = unsafe { handle(spec, "spec") }?;
        need_out(out, "out")?;
        // SAFETY: the caller guarantees `cancel` is NULL or a live
        // DshCancelToken until this call returns (# Safety), which covers
        // the borrow held by `run_blocking`; `as_ref` maps NULL to None.
        let cancel = unsafe { cancel.as_ref() }.map(|c| &c.inner);
        let result = e.inner.run_blocking(&s.spec, cancel)?;
        // SAFETY: the caller guarantees `out` is NULL or writable for one
        // `DshRunResult *` (# Safety); `put` refuses NULL itself.
        unsafe { put(out, "out", DshRunResult::new(result)) }
    })
}

/// Starts a spec in the background and returns at once. A spawn failure is
/// not an error here: the process settles as killed and its first read
/// says "spawn failed: …".
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call. `spec` is NULL or a live DshSpec from
/// dsh_executor_resolve that no thread frees during this call. `out` is NULL
/// or valid and aligned for writing one `DshProcess *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_start(
    executor: *const DshExecutor,
    spec: *const DshSpec,
    out: *mut *mut DshProcess,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `handle` refuses NULL.
        let e = unsafe { handle(executor, "executor") }?;
        // SAFETY: the caller guarantees `spec` is NULL or a live DshSpec for
        // the whole call (# Safety); `handle` refuses NULL.
        let s = unsafe { handle(spec, "spec") }?;
        need_out(out, "out")?;
        let process = e.inner.start(&s.spec)?;
        // SAFETY: the caller guarantees `out` is NULL or writable for one
        // `DshProcess *` (# Safety); `put` refuses NULL itself.
        unsafe { put(out, "out", DshProcess::new(process)) }
    })
}

/// The process registered as `id`.
///
/// # Safety
/// `id` is NULL or a NUL-terminated string readable for the whole call.
unsafe fn lookup(e: &DshExecutor, id: *const c_char) -> FfiResult<Process> {
    // SAFETY: `id` is NULL or a readable NUL-terminated string, per this fn's
    // contract; the borrow ends inside this call (`get`, `to_owned`).
    let id = unsafe { text(id, "id") }?;
    Ok(e.inner
        .get(id)
        .ok_or_else(|| dsh_core::DshError::NotFound(id.to_owned()))?)
}

/// A new handle to the process registered as `id` ("bash-1", …);
/// DSH_NOT_FOUND for an unknown id.
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call. `id` is NULL or a NUL-terminated string
/// readable for the whole call. `out` is NULL or valid and aligned for
/// writing one `DshProcess *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_get(
    executor: *const DshExecutor,
    id: *const c_char,
    out: *mut *mut DshProcess,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `handle` refuses NULL.
        let e = unsafe { handle(executor, "executor") }?;
        need_out(out, "out")?;
        // SAFETY: the caller guarantees `id` is NULL or a NUL-terminated
        // string readable during the call (# Safety): `lookup`'s contract.
        let p = unsafe { lookup(e, id) }?;
        // SAFETY: the caller guarantees `out` is NULL or writable for one
        // `DshProcess *` (# Safety); `put` refuses NULL itself.
        unsafe { put(out, "out", DshProcess::new(p)) }
    })
}

/// Every process started, in start order.
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call. `out` is NULL or valid and aligned for
/// writing one `DshProcessList *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_list(
    executor: *const DshExecutor,
    out: *mut *mut DshProcessList,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `handle` refuses NULL.
        let e = unsafe { handle(executor, "executor") }?;
        need_out(out, "out")?;
        let list = e.inner.list().into_iter().map(DshProcess::new).collect();
        // SAFETY: the caller guarantees `out` is NULL or writable for one
        // `DshProcessList *` (# Safety); `put` refuses NULL itself.
        unsafe { put(out, "out", DshProcessList { items: list }) }
    })
}

/// Consuming read of process `id`; DSH_NOT_FOUND for an unknown id.
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call. `id` is NULL or a NUL-terminated string
/// readable for the whole call. `out` is NULL or valid and aligned for
/// writing one `DshRead *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_read_output(
    executor: *const DshExecutor,
    id: *const c_char,
    out: *mut *mut DshRead,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `handle` refuses NULL.
        let e = unsafe { handle(executor, "executor") }?;
        need_out(out, "out")?;
        // SAFETY: the caller guarantees `id` is NULL or a NUL-terminated
        // string readable during the call (# Safety): `lookup`'s contract.
        let read = unsafe { lookup(e, id) }?.read_output();
        // SAFETY: the caller guarantees `out` is NULL or writable for one
        // `DshRead *` (# Safety); `put` refuses NULL itself.
        unsafe { put(out, "out", DshRead::new(read)) }
    })
}

/// Forgets settled process `id`: removes it from the registry and deletes
/// its spill files and buffered output. DSH_STILL_RUNNING while it runs,
/// DSH_NOT_FOUND for an unknown id. Handles to it stay valid.
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call. `id` is NULL or a NUL-terminated string
/// readable for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_forget(executor: *const DshExecutor, id: *const c_char) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `handle` refuses NULL.
        let e = unsafe { handle(executor, "executor") }?;
        // SAFETY: the caller guarantees `id` is NULL or a NUL-terminated
        // string readable during the call (# Safety).
        let id = unsafe { text(id, "id") }?;
        Ok(e.inner.forget(id)?)
    })
}

/// Kills process `id`; `*began` (may be NULL) is true when it was running
/// and this call began its termination.
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call. `id` is NULL or a NUL-terminated string
/// readable for the whole call. `began` is NULL or valid and aligned for
/// writing one `bool`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_kill(
    executor: *const DshExecutor,
    id: *const c_char,
    began: *mut bool,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `handle` refuses NULL.
        let e = unsafe { handle(executor, "executor") }?;
        // SAFETY: the caller guarantees `id` is NULL or a NUL-terminated
        // string readable during the call (# Safety): `lookup`'s contract.
        let b = unsafe { lookup(e, id) }?.kill();
        if !began.is_null() {
            // SAFETY: `began` is non-null (checked above) and the caller
            // guarantees it is aligned and writable for one `bool` (# Safety).
            // `write` neither reads nor drops the old contents, which may be
            // uninitialised (a C `bool x;`): no `&mut` to them is made.
            unsafe { began.write(b) };
        }
        Ok(())
    })
}

/// Registers `callback` for every background process that settles from now
/// on; `*listener_id` (may be NULL) identifies it for
/// dsh_executor_off_task_done. `user_data` is passed back untouched, from
/// the dsh callback thread. No callback runs once dsh_executor_dispose has
/// returned; one that was already under way when disposal began still
/// finishes first (dispose waits for it).
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call. `callback` is NULL or a function that is
/// safe to call, from the dsh callback thread, with `user_data` and a
/// borrowed process, and that never unwinds out of itself. `user_data` must
/// stay valid for that use for as long as the callback may run: until
/// dsh_executor_dispose has returned. dsh_executor_off_task_done is not
/// enough: a delivery already under way on the callback thread may still call
/// it once after off returns; and after dsh_executor_free without dispose,
/// callbacks may still run while disposal finishes in the background.
/// `listener_id` is NULL or valid and aligned for writing one `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_on_task_done(
    executor: *const DshExecutor,
    callback: DshTaskDoneFn,
    user_data: *mut c_void,
    listener_id: *mut u64,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `handle` refuses NULL.
        let e = unsafe { handle(executor, "executor") }?;
        let Some(callback) = callback else {
            return Err(crate::guard::FfiError::Null("callback"));
        };
        let user_data = Arc::new(UserData(user_data));
        let id = e.inner.on_task_done(Arc::new(move |p: &Process| {
            let handle = DshProcess::new(p.clone());
            // SAFETY: the registering caller guaranteed (# Safety) that
            // `callback` may be called from this thread with `user_data`,
            // which stays valid while the listener can run, and does not
            // unwind. `&handle` is a live DshProcess that outlives the call;
            // the callback only borrows it (it must not free it).
            unsafe { callback(user_data.0, &handle) };
        }));
        if !listener_id.is_null() {
            // SAFETY: `listener_id` is non-null (checked above) and the caller
            // guarantees it is aligned and writable for one `u64` (# Safety).
            // `write` neither reads nor drops the old contents, which may be
            // uninitialised (a C `uint64_t x;`): no `&mut` to them is made.
            unsafe { listener_id.write(id.as_u64()) };
        }
        Ok(())
    })
}

/// Removes a listener; `*removed` (may be NULL) says whether it was there.
/// No new delivery calls it afterwards, but one already under way on the
/// callback thread may still call it once: free its `user_data` only after
/// dsh_executor_dispose has returned.
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call. `removed` is NULL or valid and aligned for
/// writing one `bool`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_off_task_done(
    executor: *const DshExecutor,
    listener_id: u64,
    removed: *mut bool,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `handle` refuses NULL.
        let e = unsafe { handle(executor, "executor") }?;
        let r = e.inner.off_task_done(dsh_core::ListenerId::from_u64(listener_id));
        if !removed.is_null() {
            // SAFETY: `removed` is non-null (checked above) and the caller
            // guarantees it is aligned and writable for one `bool` (# Safety).
            // `write` neither reads nor drops the old contents, which may be
            // uninitialised (a C `bool x;`): no `&mut` to them is made.
            unsafe { removed.write(r) };
        }
        Ok(())
    })
}

/// Kills every running process (SIGTERM, SIGKILL after grace), waits until
/// all have exited, removes spill files. Idempotent; afterwards run and
/// start fail with DSH_DISPOSED.
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_dispose(executor: *const DshExecutor) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `handle` refuses NULL.
        let e = unsafe { handle(executor, "executor") }?;
        Ok(e.inner.dispose_blocking()?)
    })
}

/// The executor's default sandbox mode ("read-only", …), or ABSENT.
/// The string is static.
///
/// # Safety
/// `executor` is NULL or a live DshExecutor from dsh_executor_new that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_sandbox_mode(executor: *const DshExecutor) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `executor` is NULL or a live
        // DshExecutor for the whole call (# Safety); `as_ref` maps NULL to
        // None.
        match unsafe { executor.as_ref() }.and_then(|e| e.inner.sandbox_mode()) {
            Some(mode) => crate::results::mode_str(mode),
            None => DshStr::ABSENT,
        }
    })
}

/// Creates a cancel token. Free with dsh_cancel_token_free.
///
/// # Safety
/// `out` is NULL or valid and aligned for writing one `DshCancelToken *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_cancel_token_new(out: *mut *mut DshCancelToken) -> DshStatus {
    // SAFETY: the caller guarantees `out` is NULL or writable for one
    // `DshCancelToken *` (# Safety); `put` refuses NULL itself.
    status(|| unsafe {
        put(
            out,
            "out",
            DshCancelToken {
                inner: CancelToken::new(),
            },
        )
    })
}

/// Fires the token (idempotent, any thread): a run using it is terminated
/// and reports `aborted`.
///
/// # Safety
/// `token` is NULL or a live DshCancelToken from dsh_cancel_token_new that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_cancel_token_cancel(token: *const DshCancelToken) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `token` is NULL or a live
        // DshCancelToken for the whole call (# Safety); `handle` refuses NULL.
        unsafe { handle(token, "token") }?.inner.cancel();
        Ok(())
    })
}

/// Frees a DshCancelToken; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
///
/// # Safety
/// `token` is NULL or a DshCancelToken from dsh_cancel_token_new, not freed
/// before, and not in use by any other thread (e.g. a running
/// dsh_executor_run) during or after this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_cancel_token_free(token: *mut DshCancelToken) {
    // SAFETY: the caller guarantees `token` is NULL or an unfreed
    // DshCancelToken made by `put` in dsh_cancel_token_new, with no other
    // user (# Safety): `free`'s contract exactly.
    unsafe { free(token) }
}

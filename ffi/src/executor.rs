//! The executor, resolved specs, cancel tokens, and the calls that run
//! things: run, start, the registry, listeners, dispose.

use std::ffi::{c_char, c_void};
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

/// A fully resolved spec (DESIGN §3), made by dsh_executor_resolve.
pub struct DshSpec {
    spec: Spec,
    command: OwnedStr,
    workdir: OwnedStr,
}

/// A cancellation token for dsh_executor_run: fire it from any thread.
pub struct DshCancelToken {
    inner: CancelToken,
}

/// Called once per background process that settles, on a dsh I/O thread.
/// `process` is borrowed for the duration of the call (use
/// dsh_executor_get to keep a handle). The callback must not block for
/// long; blocking dsh calls made from it fail with DSH_WOULD_BLOCK.
pub type DshTaskDoneFn = Option<unsafe extern "C" fn(user_data: *mut c_void, process: *const DshProcess)>;

/// The caller's `user_data`: the caller promises it may be used from the
/// dsh I/O threads (documented on dsh_executor_on_task_done).
struct UserData(*mut c_void);
// SAFETY: see above; we only ever hand the pointer back to the caller.
unsafe impl Send for UserData {}
unsafe impl Sync for UserData {}

/// Creates an executor. `config` may be NULL for all defaults; it is only
/// read, and may be freed afterwards. A bad field is DSH_INVALID_ARGUMENT
/// naming it (e.g. "invalid config.grace_ms: …").
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_new(config: *const DshConfig, out: *mut *mut DshExecutor) -> DshStatus {
    status(|| {
        need_out(out, "out")?;
        let input = match unsafe { config.as_ref() } {
            Some(c) => c.input.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            None => Default::default(),
        };
        let inner = Executor::new(input)?;
        unsafe { put(out, "out", DshExecutor { inner }) }
    })
}

/// Frees a DshExecutor; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_free(executor: *mut DshExecutor) {
    unsafe { free(executor) }
}

/// Resolves a request into a spec: the only place defaults are applied.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_resolve(
    executor: *const DshExecutor,
    request: *const DshRequest,
    out: *mut *mut DshSpec,
) -> DshStatus {
    status(|| {
        let e = unsafe { handle(executor, "executor") }?;
        let r = unsafe { handle(request, "request") }?;
        need_out(out, "out")?;
        let req = r.input.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let spec = e.inner.resolve(req)?;
        unsafe {
            put(
                out,
                "out",
                DshSpec {
                    command: OwnedStr::new(&spec.command),
                    workdir: OwnedStr::new(&spec.workdir),
                    spec,
                },
            )
        }
    })
}

/// Frees a DshSpec; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn dsh_spec_free(spec: *mut DshSpec) {
    unsafe { free(spec) }
}

#[no_mangle]
pub unsafe extern "C" fn dsh_spec_command(spec: *const DshSpec) -> DshStr {
    value(DshStr::ABSENT, || {
        unsafe { spec.as_ref() }.map_or(DshStr::ABSENT, |s| s.command.view())
    })
}

/// The resolved, absolute workdir.
#[no_mangle]
pub unsafe extern "C" fn dsh_spec_workdir(spec: *const DshSpec) -> DshStr {
    value(DshStr::ABSENT, || {
        unsafe { spec.as_ref() }.map_or(DshStr::ABSENT, |s| s.workdir.view())
    })
}

/// The effective timeout (0 for a NULL spec).
#[no_mangle]
pub unsafe extern "C" fn dsh_spec_timeout_ms(spec: *const DshSpec) -> u64 {
    value(0, || unsafe { spec.as_ref() }.map_or(0, |s| s.spec.timeout_ms))
}

#[no_mangle]
pub unsafe extern "C" fn dsh_spec_stdout_max_bytes(spec: *const DshSpec) -> u64 {
    value(0, || {
        unsafe { spec.as_ref() }.map_or(0, |s| s.spec.stdout_max_bytes)
    })
}

/// Runs a spec in the foreground and blocks until it settles. `cancel` may
/// be NULL. A nonzero exit, a timeout and a cancellation are results
/// (DSH_OK); errors mean nothing ran to completion: DSH_SPAWN_FAILED (see
/// dsh_last_errno), DSH_CANCELLED (token already fired), DSH_DISPOSED.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_run(
    executor: *const DshExecutor,
    spec: *const DshSpec,
    cancel: *const DshCancelToken,
    out: *mut *mut DshRunResult,
) -> DshStatus {
    status(|| {
        let e = unsafe { handle(executor, "executor") }?;
        let s = unsafe { handle(spec, "spec") }?;
        need_out(out, "out")?;
        let cancel = unsafe { cancel.as_ref() }.map(|c| &c.inner);
        let result = e.inner.run_blocking(&s.spec, cancel)?;
        unsafe { put(out, "out", DshRunResult::new(result)) }
    })
}

/// Starts a spec in the background and returns at once. A spawn failure is
/// not an error here: the process settles as killed and its first read
/// says "spawn failed: …".
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_start(
    executor: *const DshExecutor,
    spec: *const DshSpec,
    out: *mut *mut DshProcess,
) -> DshStatus {
    status(|| {
        let e = unsafe { handle(executor, "executor") }?;
        let s = unsafe { handle(spec, "spec") }?;
        need_out(out, "out")?;
        let process = e.inner.start(&s.spec)?;
        unsafe { put(out, "out", DshProcess::new(process)) }
    })
}

fn lookup(e: &DshExecutor, id: *const c_char) -> FfiResult<Process> {
    let id = unsafe { text(id, "id") }?;
    Ok(e.inner
        .get(id)
        .ok_or_else(|| dsh_core::DshError::NotFound(id.to_owned()))?)
}

/// A new handle to the process registered as `id` ("bash-1", …);
/// DSH_NOT_FOUND for an unknown id.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_get(
    executor: *const DshExecutor,
    id: *const c_char,
    out: *mut *mut DshProcess,
) -> DshStatus {
    status(|| {
        let e = unsafe { handle(executor, "executor") }?;
        need_out(out, "out")?;
        let p = lookup(e, id)?;
        unsafe { put(out, "out", DshProcess::new(p)) }
    })
}

/// Every process started, in start order.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_list(
    executor: *const DshExecutor,
    out: *mut *mut DshProcessList,
) -> DshStatus {
    status(|| {
        let e = unsafe { handle(executor, "executor") }?;
        need_out(out, "out")?;
        let list = e.inner.list().into_iter().map(DshProcess::new).collect();
        unsafe { put(out, "out", DshProcessList { items: list }) }
    })
}

/// Consuming read of process `id`; DSH_NOT_FOUND for an unknown id.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_read_output(
    executor: *const DshExecutor,
    id: *const c_char,
    out: *mut *mut DshRead,
) -> DshStatus {
    status(|| {
        let e = unsafe { handle(executor, "executor") }?;
        need_out(out, "out")?;
        let read = lookup(e, id)?.read_output();
        unsafe { put(out, "out", DshRead::new(read)) }
    })
}

/// Kills process `id`; `*began` (may be NULL) is true when it was running
/// and this call began its termination.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_kill(
    executor: *const DshExecutor,
    id: *const c_char,
    began: *mut bool,
) -> DshStatus {
    status(|| {
        let e = unsafe { handle(executor, "executor") }?;
        let b = lookup(e, id)?.kill();
        if !began.is_null() {
            // SAFETY: non-null, and writable per the contract; `write` does
            // not read the old, possibly uninitialised, contents.
            unsafe { began.write(b) };
        }
        Ok(())
    })
}

/// Registers `callback` for every background process that settles from now
/// on; `*listener_id` (may be NULL) identifies it for
/// dsh_executor_off_task_done. `user_data` is passed back untouched, from a
/// dsh I/O thread. No callback runs after dsh_executor_dispose begins.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_on_task_done(
    executor: *const DshExecutor,
    callback: DshTaskDoneFn,
    user_data: *mut c_void,
    listener_id: *mut u64,
) -> DshStatus {
    status(|| {
        let e = unsafe { handle(executor, "executor") }?;
        let Some(callback) = callback else {
            return Err(crate::guard::FfiError::Null("callback"));
        };
        let user_data = Arc::new(UserData(user_data));
        let id = e.inner.on_task_done(Arc::new(move |p: &Process| {
            let handle = DshProcess::new(p.clone());
            // SAFETY: the caller registered a valid function; `handle`
            // outlives the call.
            unsafe { callback(user_data.0, &handle) };
        }));
        if !listener_id.is_null() {
            // SAFETY: non-null, and writable per the contract; `write` does
            // not read the old, possibly uninitialised, contents.
            unsafe { listener_id.write(id.as_u64()) };
        }
        Ok(())
    })
}

/// Removes a listener; `*removed` (may be NULL) says whether it was there.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_off_task_done(
    executor: *const DshExecutor,
    listener_id: u64,
    removed: *mut bool,
) -> DshStatus {
    status(|| {
        let e = unsafe { handle(executor, "executor") }?;
        let r = e.inner.off_task_done(dsh_core::ListenerId::from_u64(listener_id));
        if !removed.is_null() {
            // SAFETY: non-null, and writable per the contract; `write` does
            // not read the old, possibly uninitialised, contents.
            unsafe { removed.write(r) };
        }
        Ok(())
    })
}

/// Kills every running process (SIGTERM, SIGKILL after grace), waits until
/// all have exited, removes spill files. Idempotent; afterwards run and
/// start fail with DSH_DISPOSED.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_dispose(executor: *const DshExecutor) -> DshStatus {
    status(|| {
        let e = unsafe { handle(executor, "executor") }?;
        Ok(e.inner.dispose_blocking()?)
    })
}

/// The executor's default sandbox mode ("read-only", …), or ABSENT.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_sandbox_mode(executor: *const DshExecutor) -> DshStr {
    value(DshStr::ABSENT, || {
        match unsafe { executor.as_ref() }.and_then(|e| e.inner.sandbox_mode()) {
            Some(mode) => crate::results::mode_str(mode),
            None => DshStr::ABSENT,
        }
    })
}

/// Creates a cancel token. Free with dsh_cancel_token_free.
#[no_mangle]
pub unsafe extern "C" fn dsh_cancel_token_new(out: *mut *mut DshCancelToken) -> DshStatus {
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
#[no_mangle]
pub unsafe extern "C" fn dsh_cancel_token_cancel(token: *const DshCancelToken) -> DshStatus {
    status(|| {
        unsafe { handle(token, "token") }?.inner.cancel();
        Ok(())
    })
}

/// Frees a DshCancelToken; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn dsh_cancel_token_free(token: *mut DshCancelToken) {
    unsafe { free(token) }
}

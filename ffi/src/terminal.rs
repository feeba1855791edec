//! Terminal sessions (docs/terminals.md): a request builder, the spawn, and
//! the session's handle.

use std::ffi::c_char;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use dsh_core::{Field, FieldName, Num, Scope, Terminal, TerminalProgram, TerminalRequest, TerminalSignal};

use crate::executor::DshExecutor;
use crate::guard::{
    bytes, free, handle, need_out, path, put, status, text, value, DshStatus, DshStr, FfiError, FfiResult,
    OwnedStr,
};

/// A terminal session request: the program (an argv or a command line for
/// bash) and optional cwd, environment, size and grace.
pub struct DshTerminalRequest {
    input: Mutex<TerminalRequest>,
}

/// A live terminal session. Thread-safe. Freeing the handle does not end
/// the session: dsh_terminal_terminate or dsh_executor_dispose does.
pub struct DshTerminal {
    inner: Terminal,
    signal: OnceLock<Option<OwnedStr>>,
}

/// One consuming read of a terminal's output.
pub struct DshTerminalRead {
    text: OwnedStr,
    ended: bool,
}

fn with(r: &DshTerminalRequest, f: impl FnOnce(&mut TerminalRequest)) -> FfiResult {
    f(&mut r.input.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(())
}

fn new_request(out: *mut *mut DshTerminalRequest, program: TerminalProgram) -> FfiResult {
    // SAFETY: every caller passes its own `out`, which its # Safety makes
    // NULL or writable for one pointer; `put` refuses NULL itself.
    unsafe {
        put(
            out,
            "out",
            DshTerminalRequest {
                input: Mutex::new(TerminalRequest {
                    program,
                    ..TerminalRequest::argv(["-"])
                }),
            },
        )
    }
}

/// A request for a session running `argv[0]` with its arguments (`argc`
/// strings, UTF-8; `argv[0]` is looked up on the PATH unless it contains a
/// `/`). Free with dsh_terminal_request_free.
///
/// # Safety
/// `argv` is NULL (only with `argc` 0) or points to `argc` pointers, each a
/// NUL-terminated string readable for the whole call. `out` is NULL or
/// valid and aligned for writing one `DshTerminalRequest *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_request_new_argv(
    argv: *const *const c_char,
    argc: usize,
    out: *mut *mut DshTerminalRequest,
) -> DshStatus {
    status(|| {
        let mut items = Vec::with_capacity(argc);
        if argc > 0 {
            if argv.is_null() {
                return Err(FfiError::Null("argv"));
            }
            for i in 0..argc {
                // SAFETY: `argv` is non-null and, per # Safety, points to
                // `argc` readable pointers; `i < argc`.
                let item = unsafe { *argv.add(i) };
                // SAFETY: per # Safety each item is NULL or a NUL-terminated
                // string readable during the call; it is copied at once.
                items.push(unsafe { text(item, "argv") }?.to_owned());
            }
        }
        new_request(out, TerminalProgram::Argv(items))
    })
}

/// A request for a session running `bash -c -- <command>`. Free with
/// dsh_terminal_request_free.
///
/// # Safety
/// `command` is NULL or a NUL-terminated UTF-8 string readable for the whole
/// call. `out` is NULL or valid and aligned for writing one
/// `DshTerminalRequest *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_request_new_command(
    command: *const c_char,
    out: *mut *mut DshTerminalRequest,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `command` is NULL or a NUL-terminated string
        // readable during the call; it is copied at once.
        let command = unsafe { text(command, "command") }?.to_owned();
        new_request(out, TerminalProgram::Command(command))
    })
}

/// Frees a DshTerminalRequest; NULL is a no-op.
///
/// # Safety
/// `request` is NULL or a DshTerminalRequest from dsh_terminal_request_new_*,
/// not freed before, and not in use by any other thread during or after
/// this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_request_free(request: *mut DshTerminalRequest) {
    // SAFETY: the caller guarantees `request` is NULL or an unfreed handle
    // from `put` with no other user (# Safety): `free`'s contract.
    unsafe { free(request) }
}

/// The working directory (bytes up to the NUL, UTF-8 or not); a relative one
/// is relative to the executor's cwd.
///
/// # Safety
/// `request` is NULL or a live DshTerminalRequest that no thread frees
/// during this call. `cwd` is NULL or a NUL-terminated string readable for
/// the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_request_set_cwd(
    request: *const DshTerminalRequest,
    cwd: *const c_char,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `request` is NULL or live for the call.
        let r = unsafe { handle(request, "request") }?;
        // SAFETY: per # Safety `cwd` is NULL or a readable NUL-terminated
        // string; `path` copies it.
        let cwd = unsafe { path(cwd, "cwd") }?;
        with(r, |i| i.cwd = Some(cwd))
    })
}

/// The initial window size (each from 1 to 65535; checked at spawn).
///
/// # Safety
/// `request` is NULL or a live DshTerminalRequest that no thread frees
/// during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_request_set_size(
    request: *const DshTerminalRequest,
    rows: u64,
    cols: u64,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `request` is NULL or live for the call.
        let r = unsafe { handle(request, "request") }?;
        with(r, |i| {
            i.rows = Some(Num(rows as f64));
            i.cols = Some(Num(cols as f64));
        })
    })
}

/// The SIGTERM-to-SIGKILL grace of dsh_terminal_terminate, in milliseconds.
///
/// # Safety
/// `request` is NULL or a live DshTerminalRequest that no thread frees
/// during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_request_set_grace_ms(
    request: *const DshTerminalRequest,
    grace_ms: u64,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `request` is NULL or live for the call.
        let r = unsafe { handle(request, "request") }?;
        with(r, |i| i.grace_ms = Some(Num(grace_ms as f64)))
    })
}

/// Adds an `env` entry (merged over the scrubbed host environment; TERM is
/// xterm-256color unless set here), or with `managed` a `dsh_env` entry
/// (key must start with DSH_).
///
/// # Safety
/// `request` is NULL or a live DshTerminalRequest that no thread frees
/// during this call. `key` and `value` are each NULL or a NUL-terminated
/// string readable for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_request_set_env(
    request: *const DshTerminalRequest,
    key: *const c_char,
    value: *const c_char,
    managed: bool,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `request` is NULL or live for the call.
        let r = unsafe { handle(request, "request") }?;
        // SAFETY: per # Safety both are NULL or readable NUL-terminated
        // strings; they are copied at once.
        let (k, v) = unsafe { (text(key, "key")?.to_owned(), text(value, "value")?.to_owned()) };
        with(r, |i| {
            let map = if managed { &mut i.dsh_env } else { &mut i.env };
            map.get_or_insert_with(Default::default).insert(k, v);
        })
    })
}

/// Starts a terminal session (docs/terminals.md): the program leads a new
/// session whose controlling terminal is a fresh pseudo-terminal. Blocks
/// until it runs. A bad field is DSH_INVALID_ARGUMENT naming it
/// ("request.rows must be …"); a program that cannot start is
/// DSH_SPAWN_FAILED with dsh_last_errno. Free the handle with
/// dsh_terminal_free.
///
/// # Safety
/// `executor` is NULL or a live DshExecutor and `request` NULL or a live
/// DshTerminalRequest, neither freed by any thread during this call. `out`
/// is NULL or valid and aligned for writing one `DshTerminal *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_spawn_terminal(
    executor: *const DshExecutor,
    request: *const DshTerminalRequest,
    out: *mut *mut DshTerminal,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety both are NULL or live for the call.
        let (e, r) = unsafe { (handle(executor, "executor")?, handle(request, "request")?) };
        need_out(out, "out")?;
        let input = r.input.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let spec = e.executor().resolve_terminal(input)?;
        let inner = e.executor().spawn_terminal(&spec)?;
        // SAFETY: per # Safety `out` is writable for one pointer (checked
        // non-null above).
        unsafe {
            put(
                out,
                "out",
                DshTerminal {
                    inner,
                    signal: OnceLock::new(),
                },
            )
        }
    })
}

/// Frees the handle; NULL is a no-op. The session goes on until
/// dsh_terminal_terminate (on another handle) or dsh_executor_dispose.
///
/// # Safety
/// `terminal` is NULL or a DshTerminal from dsh_executor_spawn_terminal, not
/// freed before, and not in use by any other thread during or after this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_free(terminal: *mut DshTerminal) {
    // SAFETY: the caller guarantees `terminal` is NULL or an unfreed handle
    // from `put` with no other user (# Safety): `free`'s contract.
    unsafe { free(terminal) }
}

/// The program's pid (the session's leader, and its group id); -1 for NULL.
///
/// # Safety
/// `terminal` is NULL or a live DshTerminal that no thread frees during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_pid(terminal: *const DshTerminal) -> i32 {
    value(-1, || {
        // SAFETY: per # Safety `terminal` is NULL or live for the call.
        unsafe { terminal.as_ref() }.map_or(-1, |t| t.inner.pid())
    })
}

/// Waits until there is output, it has ended, or `timeout_ms` passed
/// (negative: no limit; 0: never waits), and takes what there is: the text
/// since the previous read, never split inside a UTF-8 character. Free the
/// read with dsh_terminal_read_free. DSH_WOULD_BLOCK from a dsh callback
/// unless `timeout_ms` is 0.
///
/// # Safety
/// `terminal` is NULL or a live DshTerminal that no thread frees during this
/// call. `out` is NULL or valid and aligned for writing one
/// `DshTerminalRead *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_read(
    terminal: *const DshTerminal,
    timeout_ms: i64,
    out: *mut *mut DshTerminalRead,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `terminal` is NULL or live for the call.
        let t = unsafe { handle(terminal, "terminal") }?;
        need_out(out, "out")?;
        let limit = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        let read = t.inner.read_output_timeout(limit)?;
        let read = DshTerminalRead {
            text: OwnedStr::new(&read.text),
            ended: read.ended,
        };
        // SAFETY: per # Safety `out` is writable for one pointer.
        unsafe { put(out, "out", read) }
    })
}

/// The text of a read (possibly empty).
///
/// # Safety
/// `read` is NULL or a live DshTerminalRead that no thread frees during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_read_text(read: *const DshTerminalRead) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: per # Safety `read` is NULL or live for the call.
        unsafe { read.as_ref() }.map_or(DshStr::ABSENT, |r| r.text.view())
    })
}

/// True once the output has ended and everything was read.
///
/// # Safety
/// `read` is NULL or a live DshTerminalRead that no thread frees during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_read_ended(read: *const DshTerminalRead) -> bool {
    value(false, || {
        // SAFETY: per # Safety `read` is NULL or live for the call.
        unsafe { read.as_ref() }.is_some_and(|r| r.ended)
    })
}

/// Frees a DshTerminalRead; NULL is a no-op.
///
/// # Safety
/// `read` is NULL or a DshTerminalRead from dsh_terminal_read, not freed
/// before, and not in use by any other thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_read_free(read: *mut DshTerminalRead) {
    // SAFETY: the caller guarantees `read` is NULL or an unfreed handle from
    // `put` with no other user (# Safety): `free`'s contract.
    unsafe { free(read) }
}

/// Writes `len` bytes to the terminal's input, as typed, and returns once
/// the terminal took all of them (a program that does not read makes this
/// wait). DSH_TERMINAL_CLOSED once the program has exited.
///
/// # Safety
/// `terminal` is NULL or a live DshTerminal that no thread frees during this
/// call. `data` is NULL (only with `len` 0) or readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_write(
    terminal: *const DshTerminal,
    data: *const u8,
    len: usize,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `terminal` is NULL or live for the call.
        let t = unsafe { handle(terminal, "terminal") }?;
        // SAFETY: per # Safety `data` is readable for `len` bytes (or NULL
        // with 0); `bytes` checks NULL.
        let data = unsafe { bytes(data, len, "data") }?;
        Ok(t.inner.write_blocking(data)?)
    })
}

/// Changes the window size (each from 1 to 65535); the foreground group
/// gets SIGWINCH.
///
/// # Safety
/// `terminal` is NULL or a live DshTerminal that no thread frees during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_resize(
    terminal: *const DshTerminal,
    rows: u64,
    cols: u64,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `terminal` is NULL or live for the call.
        let t = unsafe { handle(terminal, "terminal") }?;
        Ok(t.inner.resize(Num(rows as f64), Num(cols as f64))?)
    })
}

/// The terminal's foreground process group: writes its id to `group` and
/// whether the kernel shows it waiting for input to `input_waiting`
/// (either may be NULL), and returns true; false when there is none (the
/// program has exited).
///
/// # Safety
/// `terminal` is NULL or a live DshTerminal that no thread frees during this
/// call. `group` and `input_waiting` are each NULL or valid and aligned for
/// writing one value.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_inspect_foreground(
    terminal: *const DshTerminal,
    group: *mut i32,
    input_waiting: *mut bool,
) -> bool {
    value(false, || {
        // SAFETY: per # Safety `terminal` is NULL or live for the call.
        let Some(fg) = unsafe { terminal.as_ref() }.and_then(|t| t.inner.inspect_foreground()) else {
            return false;
        };
        if !group.is_null() {
            // SAFETY: non-null and, per # Safety, writable for one i32.
            unsafe { group.write(fg.process_group_id) };
        }
        if !input_waiting.is_null() {
            // SAFETY: non-null and, per # Safety, writable for one bool.
            unsafe { input_waiting.write(fg.input_waiting) };
        }
        true
    })
}

/// Waits until the kernel shows the foreground group waiting for input,
/// `timeout_ms` passed (negative: no limit), or the program exited; writes
/// whether it is waiting to `waiting` (may be NULL). Right after a write it
/// is true only once the program took what was written and waits again
/// (docs/terminals.md). DSH_OK, or the error of a refused wait.
///
/// # Safety
/// `terminal` is NULL or a live DshTerminal that no thread frees during this
/// call. `waiting` is NULL or valid and aligned for writing one bool.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_wait_input_waiting(
    terminal: *const DshTerminal,
    timeout_ms: i64,
    waiting: *mut bool,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `terminal` is NULL or live for the call.
        let t = unsafe { handle(terminal, "terminal") }?;
        let limit = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        let w = t.inner.wait_input_waiting(limit)?;
        if !waiting.is_null() {
            // SAFETY: non-null and, per # Safety, writable for one bool.
            unsafe { waiting.write(w) };
        }
        Ok(())
    })
}

/// Sends `signal` ("SIGINT", "SIGTERM", "SIGKILL", "SIGTSTP" or "SIGHUP")
/// to the foreground process group and writes that group's id to `group`
/// (may be NULL). DSH_TERMINAL_CLOSED when there is none;
/// DSH_INVALID_ARGUMENT for SIGKILL while the terminal's own program is in
/// the foreground (it would end the session: dsh_terminal_terminate does).
///
/// # Safety
/// `terminal` is NULL or a live DshTerminal that no thread frees during this
/// call. `signal` is NULL or a NUL-terminated string readable for the whole
/// call. `group` is NULL or valid and aligned for writing one `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_signal_foreground(
    terminal: *const DshTerminal,
    signal: *const c_char,
    group: *mut i32,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `terminal` is NULL or live for the call.
        let t = unsafe { handle(terminal, "terminal") }?;
        // SAFETY: per # Safety `signal` is NULL or a readable NUL-terminated
        // string; it is only borrowed in this statement.
        let sig = TerminalSignal::parse(Field::new(Scope::Terminal, FieldName::Signal), unsafe {
            text(signal, "signal")
        }?)?;
        let g = t.inner.signal_foreground(sig)?;
        if !group.is_null() {
            // SAFETY: non-null and, per # Safety, writable for one i32.
            unsafe { group.write(g) };
        }
        Ok(())
    })
}

/// Ends every member of the session (SIGHUP and SIGTERM, SIGKILL after the
/// grace period) and returns once none is left; writes how many the last
/// scan still found alive to `survivors` (may be NULL; expected 0).
/// Idempotent. DSH_WOULD_BLOCK from a dsh callback.
///
/// # Safety
/// `terminal` is NULL or a live DshTerminal that no thread frees during this
/// call. `survivors` is NULL or valid and aligned for writing one
/// `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_terminate(
    terminal: *const DshTerminal,
    survivors: *mut u32,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `terminal` is NULL or live for the call.
        let t = unsafe { handle(terminal, "terminal") }?;
        let n = t.inner.terminate_blocking()?;
        if !survivors.is_null() {
            // SAFETY: non-null and, per # Safety, writable for one u32.
            unsafe { survivors.write(n) };
        }
        Ok(())
    })
}

/// Waits until the program exits: DSH_OK, or DSH_TIMED_OUT if it still runs
/// after `timeout_ms` (negative: no limit).
///
/// # Safety
/// `terminal` is NULL or a live DshTerminal that no thread frees during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_wait(terminal: *const DshTerminal, timeout_ms: i64) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `terminal` is NULL or live for the call.
        let t = unsafe { handle(terminal, "terminal") }?;
        let limit = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        if t.inner.wait_timeout(limit)? {
            Ok(())
        } else {
            Err(FfiError::TerminalRunning)
        }
    })
}

/// Once the program has exited by itself: writes its exit code to `code`
/// (may be NULL) and returns true; false while it runs or when a signal
/// ended it.
///
/// # Safety
/// `terminal` is NULL or a live DshTerminal that no thread frees during this
/// call. `code` is NULL or valid and aligned for writing one `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_exit_code(terminal: *const DshTerminal, code: *mut i32) -> bool {
    value(false, || {
        // SAFETY: per # Safety `terminal` is NULL or live for the call.
        let Some(c) = unsafe { terminal.as_ref() }.and_then(|t| t.inner.exit_code()) else {
            return false;
        };
        if !code.is_null() {
            // SAFETY: non-null and, per # Safety, writable for one i32.
            unsafe { code.write(c) };
        }
        true
    })
}

/// The signal that ended the program ("SIGHUP"); absent while it runs or
/// when it exited by itself. Borrowed from the handle.
///
/// # Safety
/// `terminal` is NULL or a live DshTerminal that no thread frees during this
/// call or while the string is used.
#[no_mangle]
pub unsafe extern "C" fn dsh_terminal_exit_signal(terminal: *const DshTerminal) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: per # Safety `terminal` is NULL or live for the call.
        let Some(t) = (unsafe { terminal.as_ref() }) else {
            return DshStr::ABSENT;
        };
        if !t.inner.has_exited() {
            return DshStr::ABSENT;
        }
        OwnedStr::view_opt(t.signal.get_or_init(|| t.inner.signal().map(OwnedStr::new)))
    })
}

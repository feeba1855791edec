//! Spawned programs (docs/spawn.md): a request builder, the spawn, and the
//! program's handle (raw pipe descriptors, offset reads, the whole tree).

use std::ffi::{c_char, c_int};
use std::os::fd::IntoRawFd;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use dsh_core::{OutputStream, Process, SpawnOutput, SpawnRequest, SpawnStdin};

use crate::executor::DshExecutor;
use crate::guard::{
    bytes, free, handle, need_out, path, put, status, text, value, DshStatus, DshStr, FfiError, FfiResult,
    OwnedStr,
};
use crate::results::{DSH_STDERR, DSH_STDOUT};

/// What a spawned program's stdin is. Setters take it as an `int`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DshSpawnStdin {
    /// `/dev/null` (the default).
    DSH_SPAWN_STDIN_NULL = 0,
    /// The bytes given, then end of file.
    DSH_SPAWN_STDIN_BYTES = 1,
    /// A pipe whose write end dsh_spawned_take_fd hands over.
    DSH_SPAWN_STDIN_PIPE = 2,
    /// The host's own stdin.
    DSH_SPAWN_STDIN_INHERIT = 3,
}

/// What happens to a spawned program's stdout or stderr. Setters take it as
/// an `int`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DshSpawnOutput {
    /// Kept in a window (and a spill file when asked), read by offset.
    DSH_SPAWN_OUTPUT_COLLECT = 0,
    /// A pipe whose read end dsh_spawned_take_fd hands over.
    DSH_SPAWN_OUTPUT_PIPE = 1,
    /// The host's own descriptor.
    DSH_SPAWN_OUTPUT_INHERIT = 2,
}

/// A spawn request: the program (an argv, never given to a shell) and
/// optional cwd, environment changes, stream dispositions and grace; what
/// is not set takes the executor's configuration.
pub struct DshSpawnRequest {
    input: Mutex<SpawnRequest>,
}

/// A spawned program. Thread-safe. Freeing the handle does not end the
/// program: dsh_spawned_terminate or dsh_executor_dispose does.
pub struct DshSpawned {
    pub(crate) process: Process,
    pid: i32,
    /// stdin, stdout, stderr: the raw ends not yet taken.
    fds: Mutex<[Option<std::os::fd::OwnedFd>; 3]>,
    signal: OnceLock<Option<OwnedStr>>,
}

/// One offset read of a collected stream.
pub struct DshOffsetRead {
    text: OwnedStr,
    next_offset: u64,
    lossy: bool,
    spill_path: Option<OwnedStr>,
}

fn with(r: &DshSpawnRequest, f: impl FnOnce(&mut SpawnRequest)) -> FfiResult {
    f(&mut r.input.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(())
}

/// DSH_STDOUT or DSH_STDERR, the streams' one pair of names.
fn stream_of(stream: c_int) -> FfiResult<OutputStream> {
    match stream {
        DSH_STDOUT => Ok(OutputStream::Stdout),
        DSH_STDERR => Ok(OutputStream::Stderr),
        other => Err(FfiError::NotEnum(
            "stream",
            "DSH_STDOUT or DSH_STDERR",
            other.into(),
        )),
    }
}

/// A request for `argv[0]` with its arguments (`argc` strings, UTF-8;
/// `argv[0]` is looked up on the program's PATH unless it contains a `/`).
/// Free with dsh_spawn_request_free.
///
/// # Safety
/// `argv` is NULL (only with `argc` 0) or points to `argc` pointers, each a
/// NUL-terminated string readable for the whole call. `out` is NULL or
/// valid and aligned for writing one `DshSpawnRequest *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawn_request_new(
    argv: *const *const c_char,
    argc: usize,
    out: *mut *mut DshSpawnRequest,
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
        let request = SpawnRequest {
            argv: items,
            ..SpawnRequest::default()
        };
        // SAFETY: per # Safety `out` is NULL or writable for one pointer;
        // `put` refuses NULL itself.
        unsafe {
            put(
                out,
                "out",
                DshSpawnRequest {
                    input: Mutex::new(request),
                },
            )
        }
    })
}

/// Frees a DshSpawnRequest; NULL is a no-op.
///
/// # Safety
/// `request` is NULL or a DshSpawnRequest from dsh_spawn_request_new, not
/// freed before, and not in use by any other thread during or after this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawn_request_free(request: *mut DshSpawnRequest) {
    // SAFETY: the caller guarantees `request` is NULL or an unfreed handle
    // from `put` with no other user (# Safety): `free`'s contract.
    unsafe { free(request) }
}

/// The working directory (bytes up to the NUL); a relative one is relative
/// to the executor's cwd.
///
/// # Safety
/// `request` is NULL or a live DshSpawnRequest that no thread frees during
/// this call. `cwd` is NULL or a NUL-terminated string readable for the
/// whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawn_request_set_cwd(
    request: *const DshSpawnRequest,
    cwd: *const c_char,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `request` is NULL or live for the call.
        let r = unsafe { handle(request, "request") }?;
        // SAFETY: per # Safety `cwd` is NULL or readable; copied at once.
        let cwd = unsafe { path(cwd, "cwd") }?;
        with(r, |i| i.cwd = Some(cwd))
    })
}

/// Changes one variable of the scrubbed host environment: sets `key` to
/// `value`, or with `value` NULL removes it.
///
/// # Safety
/// `request` is NULL or a live DshSpawnRequest that no thread frees during
/// this call. `key` is NULL or a NUL-terminated string, `value` NULL or a
/// NUL-terminated string, each readable for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawn_request_set_env(
    request: *const DshSpawnRequest,
    key: *const c_char,
    value: *const c_char,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `request` is NULL or live for the call.
        let r = unsafe { handle(request, "request") }?;
        // SAFETY: per # Safety `key` is NULL or readable; copied at once.
        let k = unsafe { text(key, "key") }?.to_owned();
        let v = if value.is_null() {
            None
        } else {
            // SAFETY: non-null and, per # Safety, readable; copied at once.
            Some(unsafe { text(value, "value") }?.to_owned())
        };
        with(r, |i| {
            i.env.insert(k, v);
        })
    })
}

/// The program's stdin: a DshSpawnStdin; `data` and `len` are read only for
/// DSH_SPAWN_STDIN_BYTES (any bytes, NULs included).
///
/// # Safety
/// `request` is NULL or a live DshSpawnRequest that no thread frees during
/// this call. With DSH_SPAWN_STDIN_BYTES, `data` is NULL (only with `len`
/// 0) or readable for `len` bytes for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawn_request_set_stdin(
    request: *const DshSpawnRequest,
    kind: c_int,
    data: *const u8,
    len: usize,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `request` is NULL or live for the call.
        let r = unsafe { handle(request, "request") }?;
        let stdin = match kind {
            0 => SpawnStdin::Null,
            // SAFETY: per # Safety `data` is readable for `len` bytes; copied.
            1 => SpawnStdin::Bytes(unsafe { bytes(data, len, "data") }?.to_vec()),
            2 => SpawnStdin::Pipe,
            3 => SpawnStdin::Inherit,
            other => return Err(FfiError::NotEnum("kind", "DshSpawnStdin", other.into())),
        };
        with(r, |i| i.stdin = Some(stdin))
    })
}

/// One output stream's disposition: a DshSpawnOutput. For
/// DSH_SPAWN_OUTPUT_COLLECT, `max_bytes` is the in-memory window and
/// `spill_max_bytes` the spill file's cap (negative: no spill file). Not
/// set: collected with the configured window and spill file.
///
/// # Safety
/// `request` is NULL or a live DshSpawnRequest that no thread frees during
/// this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawn_request_set_output(
    request: *const DshSpawnRequest,
    stream: c_int,
    kind: c_int,
    max_bytes: u64,
    spill_max_bytes: i64,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `request` is NULL or live for the call.
        let r = unsafe { handle(request, "request") }?;
        let which = stream_of(stream)?;
        let output = match kind {
            0 => SpawnOutput::Collect {
                max_bytes,
                spill_max_bytes: u64::try_from(spill_max_bytes).ok(),
            },
            1 => SpawnOutput::Pipe,
            2 => SpawnOutput::Inherit,
            other => return Err(FfiError::NotEnum("kind", "DshSpawnOutput", other.into())),
        };
        with(r, |i| match which {
            OutputStream::Stdout => i.stdout = Some(output),
            OutputStream::Stderr => i.stderr = Some(output),
        })
    })
}

/// The SIGTERM-to-SIGKILL grace of dsh_spawned_terminate, in milliseconds
/// (default: the executor's grace_ms).
///
/// # Safety
/// `request` is NULL or a live DshSpawnRequest that no thread frees during
/// this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawn_request_set_grace_ms(
    request: *const DshSpawnRequest,
    grace_ms: u64,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `request` is NULL or live for the call.
        let r = unsafe { handle(request, "request") }?;
        with(r, |i| i.grace_ms = Some(dsh_core::Num(grace_ms as f64)))
    })
}

/// A timeout in milliseconds (default: none): past it the program's tree
/// is stopped as by dsh_spawned_terminate, and dsh_spawned_timed_out says
/// so. At most the executor's max_timeout_ms (a larger value is clamped);
/// 0 is DSH_INVALID_ARGUMENT naming spawn.timeout_ms at the spawn.
///
/// # Safety
/// `request` is NULL or a live DshSpawnRequest that no thread frees during
/// this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawn_request_set_timeout_ms(
    request: *const DshSpawnRequest,
    timeout_ms: u64,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `request` is NULL or live for the call.
        let r = unsafe { handle(request, "request") }?;
        with(r, |i| i.timeout_ms = Some(dsh_core::Num(timeout_ms as f64)))
    })
}

/// Starts a program (docs/spawn.md) and returns once it has exec'd. A bad
/// field is DSH_INVALID_ARGUMENT naming it ("spawn.argv must …"); a program
/// that cannot start is DSH_SPAWN_FAILED with dsh_last_errno, and nothing
/// runs. Free the handle with dsh_spawned_free.
///
/// # Safety
/// `executor` is NULL or a live DshExecutor and `request` NULL or a live
/// DshSpawnRequest, neither freed by any thread during this call. `out` is
/// NULL or valid and aligned for writing one `DshSpawned *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_executor_spawn(
    executor: *const DshExecutor,
    request: *const DshSpawnRequest,
    out: *mut *mut DshSpawned,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety both are NULL or live for the call.
        let (e, r) = unsafe { (handle(executor, "executor")?, handle(request, "request")?) };
        need_out(out, "out")?;
        let input = r.input.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let spec = e.executor().resolve_spawn(input)?;
        let spawned = e.executor().spawn(&spec)?;
        let handle = DshSpawned {
            pid: spawned.exec_pid()?,
            fds: Mutex::new([spawned.stdin, spawned.stdout, spawned.stderr]),
            process: spawned.process,
            signal: OnceLock::new(),
        };
        // SAFETY: per # Safety `out` is writable for one pointer (checked
        // non-null above).
        unsafe { put(out, "out", handle) }
    })
}

/// Frees the handle (and any pipe end not taken); NULL is a no-op. The
/// program goes on until dsh_spawned_terminate or dsh_executor_dispose.
///
/// # Safety
/// `spawned` is NULL or a DshSpawned from dsh_executor_spawn, not freed
/// before, and not in use by any other thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawned_free(spawned: *mut DshSpawned) {
    // SAFETY: the caller guarantees `spawned` is NULL or an unfreed handle
    // from `put` with no other user (# Safety): `free`'s contract.
    unsafe { free(spawned) }
}

/// The program's pid (the root of its tree); -1 for NULL.
///
/// # Safety
/// `spawned` is NULL or a live DshSpawned that no thread frees during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawned_pid(spawned: *const DshSpawned) -> i32 {
    // SAFETY: per # Safety `spawned` is NULL or live for the call.
    value(-1, || unsafe { spawned.as_ref() }.map_or(-1, |s| s.pid))
}

/// Hands over the raw descriptor of stream `index` (0 stdin, 1 stdout, 2
/// stderr) for a DSH_*_PIPE disposition: blocking, close-on-exec, the
/// caller's to close. -1 when there is none or it was taken already.
///
/// # Safety
/// `spawned` is NULL or a live DshSpawned that no thread frees during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawned_take_fd(spawned: *const DshSpawned, index: c_int) -> c_int {
    value(-1, || {
        // SAFETY: per # Safety `spawned` is NULL or live for the call.
        let Some(s) = (unsafe { spawned.as_ref() }) else {
            return -1;
        };
        let mut fds = s.fds.lock().unwrap_or_else(|e| e.into_inner());
        usize::try_from(index)
            .ok()
            .and_then(|i| fds.get_mut(i))
            .and_then(Option::take)
            .map_or(-1, IntoRawFd::into_raw_fd)
    })
}

/// A non-consuming read of a collected stream (DSH_STDOUT or DSH_STDERR) from the
/// whole-stream byte offset `offset`. Free with dsh_offset_read_free.
///
/// # Safety
/// `spawned` is NULL or a live DshSpawned that no thread frees during this
/// call. `out` is NULL or valid and aligned for writing one
/// `DshOffsetRead *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawned_read_from(
    spawned: *const DshSpawned,
    stream: c_int,
    offset: u64,
    out: *mut *mut DshOffsetRead,
) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `spawned` is NULL or live for the call.
        let s = unsafe { handle(spawned, "spawned") }?;
        let which = stream_of(stream)?;
        need_out(out, "out")?;
        let r = s.process.read_from(which, offset);
        let read = DshOffsetRead {
            text: OwnedStr::new(r.text),
            next_offset: r.next_offset,
            lossy: r.lossy,
            spill_path: r.spill_path.map(OwnedStr::new),
        };
        // SAFETY: per # Safety `out` is writable for one pointer (checked
        // non-null above).
        unsafe { put(out, "out", read) }
    })
}

/// The text of an offset read (UTF-8; borrowed from the read).
///
/// # Safety
/// `read` is NULL or a live DshOffsetRead, not freed while the string is used.
#[no_mangle]
pub unsafe extern "C" fn dsh_offset_read_text(read: *const DshOffsetRead) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: per # Safety `read` is NULL or live.
        unsafe { read.as_ref() }.map_or(DshStr::ABSENT, |r| r.text.view())
    })
}

/// Where the next read starts (the whole-stream offset just after the text).
///
/// # Safety
/// `read` is NULL or a live DshOffsetRead.
#[no_mangle]
pub unsafe extern "C" fn dsh_offset_read_next_offset(read: *const DshOffsetRead) -> u64 {
    // SAFETY: per # Safety `read` is NULL or live.
    value(0, || unsafe { read.as_ref() }.map_or(0, |r| r.next_offset))
}

/// True when the offset had slid out of the window (the text is the whole
/// window; what came before is only in the spill file).
///
/// # Safety
/// `read` is NULL or a live DshOffsetRead.
#[no_mangle]
pub unsafe extern "C" fn dsh_offset_read_lossy(read: *const DshOffsetRead) -> bool {
    // SAFETY: per # Safety `read` is NULL or live.
    value(false, || unsafe { read.as_ref() }.is_some_and(|r| r.lossy))
}

/// The spill file holding the complete stream, once it outgrew its window;
/// absent otherwise. Borrowed from the read.
///
/// # Safety
/// `read` is NULL or a live DshOffsetRead, not freed while the string is used.
#[no_mangle]
pub unsafe extern "C" fn dsh_offset_read_spill_path(read: *const DshOffsetRead) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: per # Safety `read` is NULL or live.
        unsafe { read.as_ref() }.map_or(DshStr::ABSENT, |r| OwnedStr::view_opt(&r.spill_path))
    })
}

/// Frees a DshOffsetRead; NULL is a no-op.
///
/// # Safety
/// `read` is NULL or a DshOffsetRead from dsh_spawned_read_from, not freed
/// before, and not in use by any other thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_offset_read_free(read: *mut DshOffsetRead) {
    // SAFETY: the caller guarantees `read` is NULL or an unfreed handle from
    // `put` with no other user (# Safety): `free`'s contract.
    unsafe { free(read) }
}

/// Ends the program's whole tree: SIGTERM, SIGKILL after the grace to what
/// is left, even after the program itself exited. Only the first call acts.
/// DSH_FORKED_CHILD in a forked copy of the host, which does nothing to its
/// parent's programs.
///
/// # Safety
/// `spawned` is NULL or a live DshSpawned that no thread frees during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawned_terminate(spawned: *const DshSpawned) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `spawned` is NULL or live for the call.
        Ok(unsafe { handle(spawned, "spawned") }?.process.terminate()?)
    })
}

fn limit_of(timeout_ms: i64) -> Option<Duration> {
    u64::try_from(timeout_ms).ok().map(Duration::from_millis)
}

/// Waits until the program has settled (exited, its collected streams
/// closed): DSH_OK, or DSH_TIMED_OUT after `timeout_ms` (negative: no limit).
///
/// # Safety
/// `spawned` is NULL or a live DshSpawned that no thread frees during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawned_wait(spawned: *const DshSpawned, timeout_ms: i64) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `spawned` is NULL or live for the call.
        let s = unsafe { handle(spawned, "spawned") }?;
        match s.process.wait_timeout(limit_of(timeout_ms))? {
            true => Ok(()),
            false => Err(FfiError::WaitTimedOut),
        }
    })
}

/// Waits until the program's whole tree has ended (it settled and nothing
/// it started is left): DSH_OK, or DSH_TIMED_OUT after `timeout_ms`
/// (negative: no limit).
///
/// # Safety
/// `spawned` is NULL or a live DshSpawned that no thread frees during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawned_wait_tree(spawned: *const DshSpawned, timeout_ms: i64) -> DshStatus {
    status(|| {
        // SAFETY: per # Safety `spawned` is NULL or live for the call.
        let s = unsafe { handle(spawned, "spawned") }?;
        match s.process.wait_tree_timeout(limit_of(timeout_ms))? {
            true => Ok(()),
            false => Err(FfiError::WaitTimedOut),
        }
    })
}

/// Once the program has settled after exiting by itself: writes its exit
/// code to `code` (may be NULL) and returns true; false otherwise.
///
/// # Safety
/// `spawned` is NULL or a live DshSpawned that no thread frees during this
/// call. `code` is NULL or valid and aligned for writing one `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawned_exit_code(spawned: *const DshSpawned, code: *mut i32) -> bool {
    value(false, || {
        // SAFETY: per # Safety `spawned` is NULL or live for the call.
        let Some(c) = unsafe { spawned.as_ref() }.and_then(|s| s.process.exit_code()) else {
            return false;
        };
        if !code.is_null() {
            // SAFETY: non-null and, per # Safety, writable for one i32.
            unsafe { code.write(c) };
        }
        true
    })
}

/// True once the program was stopped at its timeout
/// (dsh_spawn_request_set_timeout_ms); false for NULL.
///
/// # Safety
/// `spawned` is NULL or a live DshSpawned that no thread frees during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawned_timed_out(spawned: *const DshSpawned) -> bool {
    value(false, || {
        // SAFETY: per # Safety `spawned` is NULL or live for the call.
        let spawned = unsafe { spawned.as_ref() };
        spawned.is_some_and(|s| s.process.timed_out())
    })
}

/// The signal that ended the program ("SIGTERM") once settled; absent
/// while it runs or when it exited by itself. Borrowed from the handle.
///
/// # Safety
/// `spawned` is NULL or a live DshSpawned that no thread frees during this
/// call or while the string is used.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawned_exit_signal(spawned: *const DshSpawned) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: per # Safety `spawned` is NULL or live for the call.
        let Some(s) = (unsafe { spawned.as_ref() }) else {
            return DshStr::ABSENT;
        };
        if !s.process.is_settled() {
            return DshStr::ABSENT;
        }
        OwnedStr::view_opt(s.signal.get_or_init(|| s.process.signal().map(OwnedStr::new)))
    })
}

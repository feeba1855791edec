//! The boundary itself: status codes, the thread-local last error, the panic
//! guard, and argument/string translation.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use dsh_core::DshError;

/// The result of every fallible call. `DSH_OK` is 0.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DshStatus {
    /// The call succeeded.
    DSH_OK = 0,
    /// A NULL pointer, bad UTF-8, or a config/request/spec field the core
    /// refused; the last error names the argument or field.
    DSH_INVALID_ARGUMENT = 1,
    /// The command could not be started (missing workdir, no bash, OS
    /// limits); dsh_last_errno() has the errno (ENOENT for a missing workdir).
    DSH_SPAWN_FAILED = 2,
    /// No background process has that id.
    DSH_NOT_FOUND = 3,
    /// The executor was disposed.
    DSH_DISPOSED = 4,
    /// The cancel token had already fired; nothing was started.
    DSH_CANCELLED = 5,
    /// dsh_process_wait: the process was still running when the wait ended.
    DSH_TIMED_OUT = 6,
    /// A confined sandbox mode was requested and cannot be enforced.
    DSH_SANDBOX_UNAVAILABLE = 7,
    /// A blocking call was made from a dsh callback thread.
    DSH_WOULD_BLOCK = 8,
    /// A bug in dsh-native was caught at the boundary.
    DSH_PANIC = 9,
    /// Any other internal failure.
    DSH_INTERNAL = 10,
    /// The executor or process belongs to the parent of this forked process;
    /// create a new executor in the child.
    DSH_FORKED_CHILD = 11,
    /// dsh_executor_forget: the process is still running.
    DSH_STILL_RUNNING = 12,
    /// dsh_process_write_stdin / dsh_process_close_stdin: the process's
    /// stdin takes no more bytes (no stdin pipe, closed, or the command
    /// exited or closed its end); the last error says which.
    DSH_STDIN_CLOSED = 13,
    /// dsh_process_write_stdin: the stdin buffer is full and nothing was
    /// taken; wait with dsh_process_wait_stdin_writable and write again.
    DSH_AGAIN = 14,
    /// A limit was asked for that this host cannot enforce; nothing ran.
    DSH_LIMIT_UNAVAILABLE = 15,
    /// A terminal session cannot take the call: its program has exited
    /// (write, signal, resize) or the session has ended.
    DSH_TERMINAL_CLOSED = 16,
}

/// A borrowed string handed out by the library: `len` bytes at `ptr`, plus a
/// NUL terminator for convenience (the text itself may contain NUL bytes).
/// `ptr` is NULL when the value is absent. Text is UTF-8, except a path
/// (dsh_spec_workdir), which is the raw bytes of the file name.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DshStr {
    /// The first byte, or NULL when the value is absent.
    pub ptr: *const c_char,
    /// The number of bytes, not counting the NUL terminator.
    pub len: usize,
}

impl DshStr {
    pub(crate) const ABSENT: DshStr = DshStr {
        ptr: std::ptr::null(),
        len: 0,
    };
}

/// Owned bytes with a trailing NUL, viewed as a `DshStr`.
#[derive(Debug, Clone)]
pub(crate) struct OwnedStr(Vec<u8>);

impl OwnedStr {
    pub(crate) fn new(s: impl AsRef<[u8]>) -> Self {
        let mut v = Vec::with_capacity(s.as_ref().len() + 1);
        v.extend_from_slice(s.as_ref());
        v.push(0);
        OwnedStr(v)
    }

    pub(crate) fn view(&self) -> DshStr {
        DshStr {
            ptr: self.0.as_ptr().cast(),
            len: self.0.len() - 1,
        }
    }

    pub(crate) fn view_opt(s: &Option<OwnedStr>) -> DshStr {
        s.as_ref().map_or(DshStr::ABSENT, OwnedStr::view)
    }
}

/// Why a call failed, before it becomes a status and a message.
pub(crate) enum FfiError {
    Core(DshError),
    Null(&'static str),
    Utf8(&'static str),
    /// An argument outside its enum (`limit` that is no DshLimit).
    NotEnum(&'static str, &'static str, i64),
    WaitTimedOut,
    StdinFull,
    StdinWaitTimedOut,
    TerminalRunning,
}

impl From<DshError> for FfiError {
    fn from(e: DshError) -> Self {
        FfiError::Core(e)
    }
}

pub(crate) type FfiResult<T = ()> = Result<T, FfiError>;

impl FfiError {
    /// The one mapping from core errors to C status codes.
    fn status(&self) -> DshStatus {
        use DshStatus::*;
        match self {
            FfiError::Null(_) | FfiError::Utf8(_) | FfiError::NotEnum(..) => DSH_INVALID_ARGUMENT,
            FfiError::WaitTimedOut | FfiError::StdinWaitTimedOut | FfiError::TerminalRunning => DSH_TIMED_OUT,
            FfiError::StdinFull => DSH_AGAIN,
            FfiError::Core(e) => match e {
                DshError::InvalidArgument { .. } => DSH_INVALID_ARGUMENT,
                DshError::Spawn { .. } => DSH_SPAWN_FAILED,
                DshError::AlreadyCancelled => DSH_CANCELLED,
                DshError::Disposed => DSH_DISPOSED,
                DshError::NotFound(_) => DSH_NOT_FOUND,
                DshError::BlockingInAsync => DSH_WOULD_BLOCK,
                DshError::SandboxUnavailable(_) => DSH_SANDBOX_UNAVAILABLE,
                DshError::Internal(_) => DSH_INTERNAL,
                DshError::ForkedChild { .. } => DSH_FORKED_CHILD,
                DshError::StillRunning(_) => DSH_STILL_RUNNING,
                DshError::StdinClosed { .. } => DSH_STDIN_CLOSED,
                DshError::LimitUnavailable { .. } => DSH_LIMIT_UNAVAILABLE,
                DshError::TerminalClosed(_) => DSH_TERMINAL_CLOSED,
            },
        }
    }

    fn message(&self) -> String {
        match self {
            FfiError::Core(e) => e.to_string(),
            FfiError::Null(arg) => format!("invalid argument: {arg} is NULL"),
            FfiError::Utf8(arg) => format!("invalid argument: {arg} is not valid UTF-8"),
            FfiError::NotEnum(arg, kind, v) => format!("invalid argument: {arg} is not a {kind}: {v}"),
            FfiError::WaitTimedOut => "the process was still running when the wait ended".into(),
            FfiError::StdinFull => {
                "the stdin buffer is full, nothing was taken: wait with dsh_process_wait_stdin_writable"
                    .into()
            }
            FfiError::StdinWaitTimedOut => "stdin was still full when the wait ended".into(),
            FfiError::TerminalRunning => {
                "the terminal's program was still running when the wait ended".into()
            }
        }
    }

    fn errno(&self) -> c_int {
        match self {
            FfiError::Core(DshError::Spawn { errno, .. }) => *errno,
            _ => 0,
        }
    }
}

struct LastError {
    message: CString,
    errno: c_int,
}

thread_local! {
    static LAST_ERROR: RefCell<LastError> = RefCell::new(LastError { message: CString::default(), errno: 0 });
}

fn set_last_error(message: String, errno: c_int) {
    let message = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // try_with: a host may call in from a thread-exit destructor after this
    // thread's storage is gone; losing the message beats aborting the host.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = LastError { message, errno });
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("internal panic in dsh-native: {what}")
}

/// Runs a fallible entry point: its status, its last error, and no unwind.
pub(crate) fn status(f: impl FnOnce() -> FfiResult) -> DshStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => DshStatus::DSH_OK,
        Ok(Err(e)) => {
            set_last_error(e.message(), e.errno());
            e.status()
        }
        Err(panic) => {
            set_last_error(panic_message(panic), 0);
            DshStatus::DSH_PANIC
        }
    }
}

/// Runs an infallible accessor; a panic yields `fallback`.
pub(crate) fn value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        set_last_error(panic_message(panic), 0);
        fallback
    })
}

/// A required handle argument.
///
/// # Safety
/// `p` is NULL or points to a live `T` created by this library (by `put`),
/// and that `T` is not freed while the returned reference is in use. The
/// lifetime `'a` is unbounded: callers keep the reference inside the call.
pub(crate) unsafe fn handle<'a, T>(p: *const T, name: &'static str) -> FfiResult<&'a T> {
    // SAFETY: by this fn's contract `p` is NULL or points to a live,
    // properly aligned `T` made by `Box::into_raw` in `put`, which nobody
    // frees while the reference is used; `as_ref` turns NULL into `None`.
    // Only shared references are ever made (every handle type is `Sync`).
    unsafe { p.as_ref() }.ok_or(FfiError::Null(name))
}

/// Writes a new handle to an out-pointer.
///
/// # Safety
/// `out` is NULL or valid and aligned for a write of one pointer. On success
/// the caller owns `*out` and frees it once with its `*_free`.
pub(crate) unsafe fn put<T>(out: *mut *mut T, name: &'static str, value: T) -> FfiResult {
    if out.is_null() {
        return Err(FfiError::Null(name));
    }
    // SAFETY: `out` is non-null (checked just above) and, by this fn's
    // contract, aligned and writable for one `*mut T`. The old value is a
    // raw pointer, so the assignment neither reads nor drops it.
    unsafe { *out = Box::into_raw(Box::new(value)) };
    Ok(())
}

/// Checks an out-pointer before any work is done, so a NULL one never
/// leaves a started process unowned.
pub(crate) fn need_out<T>(out: *mut T, name: &'static str) -> FfiResult {
    if out.is_null() {
        Err(FfiError::Null(name))
    } else {
        Ok(())
    }
}

/// A required NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays readable and
/// unmodified while the returned `&str` is in use (`'a` is unbounded: callers
/// copy it or drop it before they return).
pub(crate) unsafe fn text<'a>(p: *const c_char, name: &'static str) -> FfiResult<&'a str> {
    if p.is_null() {
        return Err(FfiError::Null(name));
    }
    // SAFETY: `p` is non-null (checked just above) and, by this fn's
    // contract, readable up to and including a NUL terminator and not
    // mutated while the borrow lives: exactly `CStr::from_ptr`'s needs.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| FfiError::Utf8(name))
}

/// A required NUL-terminated path argument: the bytes up to the NUL, UTF-8
/// or not (a file name on Linux is bytes).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays readable and
/// unmodified during the call (the bytes are copied).
pub(crate) unsafe fn path(p: *const c_char, name: &'static str) -> FfiResult<PathBuf> {
    if p.is_null() {
        return Err(FfiError::Null(name));
    }
    // SAFETY: `p` is non-null (checked just above) and, by this fn's
    // contract, readable up to and including a NUL terminator and not
    // mutated during the call; the bytes are copied before it returns.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    Ok(PathBuf::from(OsStr::from_bytes(bytes)))
}

/// A byte range argument; NULL is allowed only when `len` is 0.
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes (one allocation, so `len` is
/// at most `isize::MAX`), not mutated while the returned slice is in use
/// (`'a` is unbounded: callers copy it before they return).
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize, name: &'static str) -> FfiResult<&'a [u8]> {
    if p.is_null() {
        return if len == 0 {
            Ok(&[])
        } else {
            Err(FfiError::Null(name))
        };
    }
    // SAFETY: `p` is non-null (checked just above); `u8` needs no alignment;
    // by this fn's contract the `len` bytes at `p` are readable, lie in one
    // allocation and are not mutated while the slice lives.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Frees a handle made by `put`.
///
/// # Safety
/// `p` is NULL or a `T` handed out by `put` (never a borrowed pointer such as
/// a `dsh_process_list_get` element), not yet freed, and not in use by any
/// other thread; nothing borrowed from it is used afterwards.
pub(crate) unsafe fn free<T>(p: *mut T) {
    if !p.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `p` is non-null (checked above) and, by this fn's
            // contract, came from `Box::into_raw` of a `Box<T>` in `put`,
            // is freed only this once, and has no other user: so
            // `Box::from_raw` takes back sole ownership.
            drop(unsafe { Box::from_raw(p) })
        }));
    }
}

/// The message of the last failed call on this thread ("" if none). Valid
/// until the next failing call on the same thread.
#[no_mangle]
pub extern "C" fn dsh_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().message.as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// The errno behind the last DSH_SPAWN_FAILED on this thread, else 0.
#[no_mangle]
pub extern "C" fn dsh_last_errno() -> c_int {
    LAST_ERROR.try_with(|e| e.borrow().errno).unwrap_or(0)
}

/// The constant's name, e.g. "DSH_NOT_FOUND"; "DSH_UNKNOWN" for a value that
/// is not a DshStatus. Static; never freed.
#[no_mangle]
pub extern "C" fn dsh_status_name(status: c_int) -> *const c_char {
    use DshStatus::*;
    let all = [
        DSH_OK,
        DSH_INVALID_ARGUMENT,
        DSH_SPAWN_FAILED,
        DSH_NOT_FOUND,
        DSH_DISPOSED,
        DSH_CANCELLED,
        DSH_TIMED_OUT,
        DSH_SANDBOX_UNAVAILABLE,
        DSH_WOULD_BLOCK,
        DSH_PANIC,
        DSH_INTERNAL,
        DSH_FORKED_CHILD,
        DSH_STILL_RUNNING,
        DSH_STDIN_CLOSED,
        DSH_AGAIN,
        DSH_LIMIT_UNAVAILABLE,
        DSH_TERMINAL_CLOSED,
    ];
    let Some(&status) = all.iter().find(|s| **s as c_int == status) else {
        return c"DSH_UNKNOWN".as_ptr();
    };
    let name: &'static CStr = match status {
        DSH_OK => c"DSH_OK",
        DSH_INVALID_ARGUMENT => c"DSH_INVALID_ARGUMENT",
        DSH_SPAWN_FAILED => c"DSH_SPAWN_FAILED",
        DSH_NOT_FOUND => c"DSH_NOT_FOUND",
        DSH_DISPOSED => c"DSH_DISPOSED",
        DSH_CANCELLED => c"DSH_CANCELLED",
        DSH_TIMED_OUT => c"DSH_TIMED_OUT",
        DSH_SANDBOX_UNAVAILABLE => c"DSH_SANDBOX_UNAVAILABLE",
        DSH_WOULD_BLOCK => c"DSH_WOULD_BLOCK",
        DSH_PANIC => c"DSH_PANIC",
        DSH_INTERNAL => c"DSH_INTERNAL",
        DSH_FORKED_CHILD => c"DSH_FORKED_CHILD",
        DSH_STILL_RUNNING => c"DSH_STILL_RUNNING",
        DSH_STDIN_CLOSED => c"DSH_STDIN_CLOSED",
        DSH_AGAIN => c"DSH_AGAIN",
        DSH_LIMIT_UNAVAILABLE => c"DSH_LIMIT_UNAVAILABLE",
        DSH_TERMINAL_CLOSED => c"DSH_TERMINAL_CLOSED",
    };
    name.as_ptr()
}

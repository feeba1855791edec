//! A spawned program's raw output pipe read on the JS thread's own loop,
//! for `subprocess.mjs`'s `Readable`: a libuv poll handle on the pipe, and
//! each chunk handed to one JS function in the callback that read it.
//!
//! A `net.Socket` over the descriptor does the same job with a stream
//! handle and its JS machinery, which cost the host more CPU: a piped
//! spawn of `bash -c true` took ~410 µs of it with two sockets, ~370 µs
//! with these readers (a collected one ~295 µs). Nothing else about the
//! pipe changes: the caller's reads pace it (a full `Readable` stops the
//! polling until it is read, so the program blocks on a full pipe as with
//! a socket), it is read ahead from the start up to the stream's
//! `highWaterMark` (at least one chunk) as a socket is,
//! it is read to its end whether or not the program has exited, its
//! events run in the async context of the spawn, and destroying the
//! stream closes it.

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::{sys, Env};
use napi_derive::napi;

use crate::foreground::{self, uv, CallbackScope, UV_READABLE};

/// Bytes read at a time: a pipe's default capacity, as libuv reads.
const READ_BYTES: usize = 64 * 1024;

/// Reads per readiness, at most, before the loop gets a turn for other
/// work (libuv's stream reads stop at 32 reads).
const READS_PER_WAKE: usize = 32;

thread_local! {
    /// Where each read lands before it is copied into a `Buffer` of the
    /// bytes read (one per JS thread; a read never outlives its callback).
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; READ_BYTES]);
}

/// The raw read end of a program's stdout or stderr, read for a JS
/// `Readable` (see the module's doc). Made by `NativeSpawned.pipeReader`.
#[napi]
pub struct NativePipeReader {
    reader: Rc<Reader>,
}

struct Reader {
    env: sys::napi_env,
    /// The poll handle on `fd`; null once closed.
    handle: Cell<*mut c_void>,
    fd: RefCell<Option<OwnedFd>>,
    /// `onData(chunk)` → whether to read on; `onData(null, errno)` at the
    /// end (`errno` 0) or on a read error. A strong reference while open.
    on_data: Cell<sys::napi_ref>,
    polling: Cell<bool>,
    /// Where `onData` is called: the async context of the spawn that made
    /// the reader, as a socket's events are in their handle's. Ended at
    /// the close (`None` then).
    scope: RefCell<Option<CallbackScope>>,
    /// Why reading stopped when the stream could not be told (no scope to
    /// call it in, the poll refused): the stream's next read learns it.
    failed: Cell<c_int>,
}

impl NativePipeReader {
    /// A reader of `fd` on `env`'s loop, or `fd` back where one cannot be
    /// made (a runtime whose loop is not libuv's, or node refusing a
    /// reference, a scope or a hook): the caller then makes a `net.Socket`
    /// of it. Only a non-function `onData` is an error: the program runs
    /// by now, and its pipe must reach the caller either way.
    pub(crate) fn new(
        env: &Env,
        fd: OwnedFd,
        on_data: Unknown<'_>,
    ) -> Result<std::result::Result<Self, OwnedFd>> {
        if on_data.get_type()? != ValueType::Function {
            return Err(Error::new(Status::InvalidArg, "onData must be a function"));
        }
        let Some(uv) = uv() else { return Ok(Err(fd)) };
        if !foreground::drive_on_this_loop(env).unwrap_or(false) {
            return Ok(Err(fd));
        }
        let raw = env.raw();
        let mut uv_loop = std::ptr::null_mut();
        // SAFETY: a live env on its JS thread.
        if unsafe { sys::napi_get_uv_event_loop(raw, &mut uv_loop) } != sys::Status::napi_ok
            || uv_loop.is_null()
        {
            return Ok(Err(fd));
        }
        let Some(scope) = CallbackScope::new(env, c"dsh-native pipe") else {
            return Ok(Err(fd));
        };
        let mut reference = std::ptr::null_mut();
        // SAFETY: a live env; `on_data` is a value of it.
        if unsafe { sys::napi_create_reference(raw, on_data.raw(), 1, &mut reference) }
            != sys::Status::napi_ok
        {
            // SAFETY: made just above, on this thread, and never used.
            unsafe { scope.destroy(raw) };
            return Ok(Err(fd));
        }
        let handle = foreground::poll_memory(uv);
        // SAFETY: fresh memory of libuv's size for a poll handle, on this
        // thread's loop; `fd` is open and stays so until the handle is
        // closed (`close` closes the handle before the descriptor). It
        // also makes `fd` non-blocking (uv_poll_init's documented effect),
        // which `read_chunk` relies on: a handed pipe is blocking until
        // then.
        if unsafe { (uv.poll_init)(uv_loop, handle, fd.as_raw_fd()) } != 0 {
            // SAFETY: memory `poll_memory` made, never libuv's; the
            // reference and the scope made above, of this env.
            unsafe {
                foreground::free_poll_memory(handle);
                sys::napi_delete_reference(raw, reference);
                scope.destroy(raw);
            }
            return Ok(Err(fd));
        }
        let reader = Rc::new(Reader {
            env: raw,
            handle: Cell::new(handle),
            fd: RefCell::new(Some(fd)),
            on_data: Cell::new(reference),
            polling: Cell::new(false),
            scope: RefCell::new(Some(scope)),
            failed: Cell::new(0),
        });
        // SAFETY: `data` is the first field of every libuv handle (uv.h's
        // UV_HANDLE_FIELDS): the handle keeps a count of the reader until
        // its close callback (`closed`) gives it back.
        unsafe { *(handle as *mut *const Reader) = Rc::into_raw(reader.clone()) };
        // SAFETY: a live env; the argument is the reader, alive while the
        // hook is registered (the handle holds it until closed, and `close`
        // removes the hook first).
        let hooked = unsafe {
            sys::napi_add_env_cleanup_hook(raw, Some(torn_down), Rc::as_ptr(&reader) as *mut c_void)
        } == sys::Status::napi_ok;
        if !hooked {
            // Unhooked, a worker's teardown would find the handle open (and
            // node abort): the pipe goes to a socket instead. The close
            // leaves the descriptor alone once it is taken back.
            let fd = reader.fd.take();
            reader.close(false);
            return fd
                .map(Err)
                .ok_or_else(|| Error::from_reason("the pipe reader lost its descriptor"));
        }
        Ok(Ok(NativePipeReader { reader }))
    }
}

#[napi]
impl NativePipeReader {
    /// Reads on (the stream wants data): 0, or the errno that ended the
    /// reading without the stream being told (it is destroyed with it).
    /// Nothing once closed.
    #[napi]
    pub fn resume(&self) -> i32 {
        self.reader.resume();
        self.reader.failed.get()
    }

    /// Stops the reading and closes the pipe; idempotent.
    #[napi]
    pub fn close(&self) {
        self.reader.close(true);
    }
}

impl Reader {
    fn resume(&self) {
        let handle = self.handle.get();
        if handle.is_null() || self.polling.get() {
            return;
        }
        let Some(uv) = uv() else { return };
        // SAFETY: an open handle of this thread's loop.
        match unsafe { (uv.poll_start)(handle, UV_READABLE, on_readable) } {
            0 => self.polling.set(true),
            e => self.fail(-e),
        }
    }

    /// Reading ends with `errno` where the stream cannot be told now: the
    /// pipe is closed (its writer meets a closed pipe, instead of waiting
    /// on one nobody will read) and the stream's next read learns why.
    fn fail(&self, errno: c_int) {
        self.failed.set(errno);
        self.close(true);
    }

    fn pause(&self) {
        let handle = self.handle.get();
        if handle.is_null() || !self.polling.replace(false) {
            return;
        }
        if let Some(uv) = uv() {
            // SAFETY: an open handle of this thread's loop.
            unsafe { (uv.poll_stop)(handle) };
        }
    }

    /// Closes the handle, then the pipe, and lets go of `onData`;
    /// `unhook` unless called by the environment's cleanup hook.
    fn close(&self, unhook: bool) {
        let handle = self.handle.replace(std::ptr::null_mut());
        if handle.is_null() {
            return;
        }
        if let Some(uv) = uv() {
            // SAFETY: an open handle; libuv takes it off its epoll at once
            // (before the descriptor is closed below, so a reused number is
            // never touched) and calls `closed` later.
            unsafe {
                (uv.poll_stop)(handle);
                (uv.close)(handle, closed);
            }
        }
        self.polling.set(false);
        drop(self.fd.borrow_mut().take());
        let reference = self.on_data.replace(std::ptr::null_mut());
        let scope = self.scope.borrow_mut().take();
        // SAFETY: a live env on its JS thread (the cleanup hook runs while
        // it still lives); the reference, the scope (taken, so ended once;
        // while a callback runs in it, `on_readable` holds it and ends it)
        // and the hook are this reader's.
        unsafe {
            if !reference.is_null() {
                sys::napi_delete_reference(self.env, reference);
            }
            if let Some(scope) = scope {
                scope.destroy(self.env);
            }
            if unhook {
                sys::napi_remove_env_cleanup_hook(
                    self.env,
                    Some(torn_down),
                    self as *const Reader as *mut c_void,
                );
            }
        }
    }

    /// Reads what the pipe has, handing each chunk to `onData`, until it
    /// would block, `onData` asks for a pause, or the pipe ends; at its end
    /// (or a read error) the pipe is closed, then the stream told once.
    fn read_some(&self, env: sys::napi_env, status: c_int) {
        let over = if status < 0 {
            Some(-status)
        } else {
            self.read_chunks(env)
        };
        let Some(errno) = over else { return };
        let null = {
            let mut v = std::ptr::null_mut();
            // SAFETY: a live env on its JS thread.
            unsafe { sys::napi_get_null(env, &mut v) };
            v
        };
        let on_data = self.function(env);
        // Closed first, so nothing the stream does in return reads it again.
        self.close(true);
        if let Some(f) = on_data {
            call(env, f, null, Some(errno));
        }
    }

    /// `Some(errno)` once the pipe has ended (0) or failed; `None` when it
    /// would block, the stream is full, or more may wait (after
    /// READS_PER_WAKE reads the loop gets a turn for other work, and the
    /// level-triggered readiness brings the reader back).
    fn read_chunks(&self, env: sys::napi_env) -> Option<c_int> {
        for _ in 0..READS_PER_WAKE {
            // Closed by the stream during a call: nothing more to read.
            let fd = self.fd.borrow().as_ref().map(AsRawFd::as_raw_fd)?;
            match read_chunk(env, fd) {
                Read::Chunk(chunk) => match self.function(env).and_then(|f| call(env, f, chunk, None)) {
                    Some(true) => {}
                    Some(false) => {
                        self.pause();
                        return None;
                    }
                    // It threw (the host's uncaught exception, see
                    // `CallbackScope::run`), or was let go: the next readiness
                    // reads on.
                    None => return None,
                },
                Read::Interrupted => {}
                Read::End => return Some(0),
                Read::Failed(errno) => return Some(errno),
                // Bytes read and lost: the stream ends with an error,
                // never a silent hole.
                Read::NoBuffer => return Some(libc::ENOMEM),
                Read::WouldBlock => return None,
            }
        }
        None
    }

    fn function(&self, env: sys::napi_env) -> Option<sys::napi_value> {
        let reference = self.on_data.get();
        if reference.is_null() {
            return None;
        }
        let mut f = std::ptr::null_mut();
        // SAFETY: a live env; the reference is this reader's, still held.
        let ok = unsafe { sys::napi_get_reference_value(env, reference, &mut f) } == sys::Status::napi_ok;
        (ok && !f.is_null()).then_some(f)
    }
}

/// What one read of the pipe gave.
enum Read {
    Chunk(sys::napi_value),
    End,
    WouldBlock,
    Interrupted,
    Failed(c_int),
    /// Bytes were read but node refused a `Buffer` for them.
    NoBuffer,
}

fn read_chunk(env: sys::napi_env, fd: c_int) -> Read {
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        // SAFETY: `scratch` is READ_BYTES long and ours for the call.
        let n = unsafe { libc::read(fd, scratch.as_mut_ptr() as *mut c_void, scratch.len()) };
        if n > 0 {
            return buffer(env, &scratch[..n as usize]).map_or(Read::NoBuffer, Read::Chunk);
        }
        if n == 0 {
            return Read::End;
        }
        match std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
        {
            libc::EAGAIN => Read::WouldBlock,
            libc::EINTR => Read::Interrupted,
            errno => Read::Failed(errno),
        }
    })
}

/// `f(chunk)`, or `f(null, errno)` at the end: whether to read on; `None`
/// when it threw.
fn call(
    env: sys::napi_env,
    f: sys::napi_value,
    chunk: sys::napi_value,
    errno: Option<c_int>,
) -> Option<bool> {
    let mut args = [chunk, std::ptr::null_mut()];
    let mut argc = 1;
    let mut undefined = std::ptr::null_mut();
    let mut result = std::ptr::null_mut();
    let mut more = false;
    // SAFETY: a live env in the reader's callback scope; `f` and the
    // arguments are values of it.
    unsafe {
        if let Some(errno) = errno {
            sys::napi_create_int32(env, errno, &mut args[1]);
            argc = 2;
        }
        sys::napi_get_undefined(env, &mut undefined);
        if sys::napi_call_function(env, undefined, f, argc, args.as_ptr(), &mut result)
            != sys::Status::napi_ok
        {
            return None;
        }
        sys::napi_get_value_bool(env, result, &mut more);
    }
    Some(more)
}

/// A `Buffer` holding a copy of `bytes`; `None` if node refuses one.
fn buffer(env: sys::napi_env, bytes: &[u8]) -> Option<sys::napi_value> {
    let mut data = std::ptr::null_mut();
    let mut value = std::ptr::null_mut();
    // SAFETY: a live env; node copies `bytes` before returning.
    let ok = unsafe {
        sys::napi_create_buffer_copy(
            env,
            bytes.len(),
            bytes.as_ptr() as *const c_void,
            &mut data,
            &mut value,
        )
    } == sys::Status::napi_ok;
    ok.then_some(value)
}

/// libuv: the pipe is readable (or in error: `status` < 0).
unsafe extern "C" fn on_readable(handle: *mut c_void, status: c_int, _events: c_int) {
    // SAFETY: the reader's count the handle holds (see `new`) stays until
    // `closed`, which runs after this callback; another count is taken for
    // the call, as the read may close the handle.
    let reader = unsafe {
        let p = *(handle as *const *const Reader);
        Rc::increment_strong_count(p);
        Rc::from_raw(p)
    };
    let env = reader.env;
    // Out of the reader while `onData` runs in it: a close made meanwhile
    // leaves it to be ended here, after its callback scope is closed.
    let Some(scope) = reader.scope.borrow_mut().take() else {
        reader.fail(libc::EIO);
        return;
    };
    // SAFETY: libuv calls this on the reader's JS thread, outside any JS
    // frame, while the environment lives (the handle is closed at its
    // teardown); the scope was made with this env.
    let ran = unsafe { scope.run(env, |env| reader.read_some(env.raw(), status)) };
    if reader.handle.get().is_null() {
        // SAFETY: as above; the close found no scope to end.
        unsafe { scope.destroy(env) };
        return;
    }
    *reader.scope.borrow_mut() = Some(scope);
    if !ran {
        // No scope to call JS in (node is tearing the environment down):
        // stop rather than spin on a readiness nobody takes.
        reader.fail(libc::EIO);
    }
}

/// libuv: the handle is closed; the reader's count and the memory go.
unsafe extern "C" fn closed(handle: *mut c_void) {
    // SAFETY: the count `new` stored in the handle's data, given back
    // once, and the memory `poll_memory` made, which libuv no longer uses.
    unsafe {
        drop(Rc::from_raw(*(handle as *const *const Reader)));
        foreground::free_poll_memory(handle);
    }
}

/// The environment is going away with the pipe still open: closed now, as
/// a worker's loop must have no handle of ours left.
unsafe extern "C" fn torn_down(reader: *mut c_void) {
    // SAFETY: the reader the hook was added with, alive while it is (see
    // `new`).
    let reader = unsafe { &*(reader as *const Reader) };
    reader.close(false);
}

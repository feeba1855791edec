//! Native classes behind `index.js`: every promise is settled on the JS
//! thread, from a core thread through `settle` or by `foreground`'s turn;
//! nothing here blocks the JS thread.

use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::{sys, Env};
use napi_derive::napi;

use dsh_core::{DshError, ListenerId};

use crate::convert::{self, input_error, js_error, InputResult};
use crate::foreground;
use crate::settle;
use crate::terminal_readers::TerminalReaders;

/// A run's outcome, turned into JS values on the JS thread (`runResult`
/// in `index.js` makes the harness's object of them).
pub(crate) struct RunValue(dsh_core::RunResult);

impl RunValue {
    /// What a run's promise settles with: its result, or its error.
    pub(crate) fn of(env: &Env, outcome: dsh_core::Result<dsh_core::RunResult>) -> Result<RunValue> {
        outcome.map(RunValue).map_err(|e| js_error(env, &e))
    }
}

impl ToNapiValue for RunValue {
    unsafe fn to_napi_value(raw_env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        let env = Env::from_raw(raw_env);
        let values = convert::run_result_values(&env, &val.0)?;
        // SAFETY: `values` was just created in `raw_env`.
        unsafe { Array::to_napi_value(raw_env, values) }
    }
}

fn throw<T>(env: &Env, r: std::result::Result<T, DshError>) -> Result<T> {
    r.map_err(|e| js_error(env, &e))
}

fn throw_input<T>(env: &Env, r: InputResult<T>) -> Result<T> {
    r.map_err(|e| input_error(env, &e))
}

/// Fires a core cancel token from JS (an AbortSignal's 'abort').
#[napi]
#[derive(Default)]
pub struct NativeCancelToken {
    inner: dsh_core::CancelToken,
}

#[napi]
impl NativeCancelToken {
    #[napi(constructor)]
    pub fn new() -> Self {
        Self::default()
    }

    #[napi]
    pub fn cancel(&self) {
        self.inner.cancel();
    }
}

#[napi]
pub struct NativeProcess {
    inner: dsh_core::Process,
}

#[napi]
impl NativeProcess {
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.inner.id().to_owned()
    }

    #[napi(getter)]
    pub fn command(&self) -> String {
        self.inner.command().to_owned()
    }

    #[napi(getter)]
    pub fn owner(&self) -> Option<String> {
        self.inner.owner().map(str::to_owned)
    }

    #[napi(getter)]
    pub fn status(&self) -> &'static str {
        self.inner.status().as_str()
    }

    #[napi(getter)]
    pub fn exit_code(&self) -> Option<i32> {
        self.inner.exit_code()
    }

    #[napi(getter)]
    pub fn signal(&self) -> Option<String> {
        self.inner.signal()
    }

    #[napi(getter)]
    pub fn exit_status_unavailable(&self) -> bool {
        self.inner.exit_status_unavailable()
    }

    #[napi(getter)]
    pub fn survivors(&self) -> u32 {
        self.inner.survivors()
    }

    #[napi(getter)]
    pub fn settled(&self) -> bool {
        self.inner.is_settled()
    }

    /// The limit that ended it, once settled; else undefined.
    #[napi(getter)]
    pub fn limit(&self) -> Option<&'static str> {
        convert::limit_str(self.inner.limit())
    }

    /// How each of its limits was enforced, once settled; undefined
    /// without limits.
    #[napi]
    pub fn limits_enforcement<'e>(&self, env: &'e Env) -> Result<Option<Object<'e>>> {
        let e = self.inner.limits_enforcement();
        if e.is_empty() {
            return Ok(None);
        }
        convert::enforcement_object(env, &e).map(Some)
    }

    /// Sandbox facts once settled, else undefined.
    #[napi]
    pub fn sandbox<'e>(&self, env: &'e Env) -> Result<Option<Object<'e>>> {
        self.inner
            .sandbox()
            .map(|s| convert::sandbox_object(env, &s))
            .transpose()
    }

    #[napi]
    pub fn read_output<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        convert::read_object(env, &self.inner.read_output())
    }

    #[napi]
    pub fn kill(&self) -> bool {
        self.inner.kill()
    }

    /// A promise that resolves (with undefined) once the process settles.
    #[napi(getter)]
    pub fn has_stdin_pipe(&self) -> bool {
        self.inner.has_stdin_pipe()
    }

    /// Resolves once every byte was taken by the process's bounded stdin
    /// buffer; the event loop never waits.
    #[napi]
    pub fn write_stdin<'e>(&self, env: &'e Env, data: Buffer) -> Result<Object<'e>> {
        let (deferred, promise) = settle::promise(env)?;
        self.inner.write_stdin_with(data.to_vec(), move |outcome| {
            deferred.resolve(move |env| outcome.map_err(|e| js_error(&env, &e)))
        });
        Ok(promise)
    }

    #[napi]
    pub fn close_stdin(&self, env: &Env) -> Result<bool> {
        throw(env, self.inner.close_stdin())
    }

    #[napi]
    pub fn done<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let (deferred, promise) = settle::promise(env)?;
        self.inner
            .when_settled(move || deferred.resolve(|_| Ok(())))
            .map_err(|e| convert::js_error(env, &e))?;
        Ok(promise)
    }
}

/// A terminal's foreground, turned into a JS object on the JS thread.
struct ForegroundValue(dsh_core::Foreground);

impl ToNapiValue for ForegroundValue {
    unsafe fn to_napi_value(raw_env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        let env = Env::from_raw(raw_env);
        let mut o = Object::new(&env)?;
        o.set_named_property("processGroupId", val.0.process_group_id)?;
        o.set_named_property("inputWaiting", val.0.input_waiting)?;
        // SAFETY: `o` was just created in `raw_env`.
        unsafe { Object::to_napi_value(raw_env, o) }
    }
}

/// A terminal session (docs/terminals.md); `index.js` wraps it in the
/// published `SubprocessTerminalHandle` shape.
#[napi]
pub struct NativeTerminal {
    inner: dsh_core::Terminal,
    /// Its `nextOutput` readers, when its session runs on the JS thread's
    /// loop (foreground.rs); else they wait through a core thread.
    readers: Option<Arc<TerminalReaders>>,
}

fn terminal_field(name: dsh_core::FieldName) -> dsh_core::Field {
    dsh_core::Field::new(dsh_core::Scope::Terminal, name)
}

/// What a terminal write holds until the terminal took it: the caller's
/// Buffer itself, or a string's UTF-8 encoding.
enum WriteData {
    Text(String),
    Buffer(Buffer),
}

impl AsRef<[u8]> for WriteData {
    fn as_ref(&self) -> &[u8] {
        match self {
            WriteData::Text(t) => t.as_bytes(),
            WriteData::Buffer(b) => b.as_ref(),
        }
    }
}
#[napi]
impl NativeTerminal {
    #[napi(getter)]
    pub fn pid(&self) -> i32 {
        self.inner.pid()
    }

    #[napi(getter)]
    pub fn exited(&self) -> bool {
        self.inner.has_exited()
    }

    #[napi(getter)]
    pub fn exit_code(&self) -> Option<i32> {
        self.inner.exit_code()
    }

    #[napi(getter)]
    pub fn signal(&self) -> Option<String> {
        self.inner.signal()
    }

    #[napi(getter)]
    pub fn exit_status_unavailable(&self) -> bool {
        self.inner.exit_status_unavailable()
    }

    #[napi(getter)]
    pub fn survivors(&self) -> u32 {
        self.inner.survivors()
    }

    /// Consuming read: `{ text, ended }`.
    #[napi]
    pub fn read_output<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let read = self.inner.read_output();
        let mut o = Object::new(env)?;
        o.set_named_property("text", read.text)?;
        o.set_named_property("ended", read.ended)?;
        Ok(o)
    }

    /// Resolves with the next output (a string), or null once it has ended.
    #[napi]
    pub fn next_output<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        if let Some(readers) = &self.readers {
            return readers.next(env);
        }
        let (deferred, promise) = settle::promise(env)?;
        self.inner
            .next_output_io_callback(move |out| deferred.resolve(move |_| Ok(out)));
        Ok(promise)
    }

    /// Writes what the terminal takes now (a string is UTF-8): undefined
    /// when it took everything, else a promise that resolves once it took
    /// the rest (queued in order). A Buffer is held by reference until
    /// then, never copied; a string is encoded to UTF-8 once, and that is
    /// held instead.
    #[napi]
    pub fn write<'e>(&self, env: &'e Env, data: Unknown<'_>) -> Result<Option<Object<'e>>> {
        let bytes = match data.get_type()? {
            ValueType::String => {
                // SAFETY: the value was just checked to be a string.
                WriteData::Text(unsafe { data.cast::<String>() }?)
            }
            _ if data.is_buffer().unwrap_or(false) => {
                // A reference to the caller's Buffer (released on the JS
                // thread once the core drops it), not a copy.
                // SAFETY: the value was just checked to be a Buffer.
                WriteData::Buffer(unsafe { data.cast::<Buffer>() }?)
            }
            t => {
                let e = DshError::InvalidArgument {
                    field: terminal_field(dsh_core::FieldName::Data),
                    problem: format!("must be a string or a Buffer, got {}", convert::type_name(t)),
                };
                return Err(js_error(env, &e));
            }
        };
        let Some(rest) = throw(env, self.inner.write_now(bytes))? else {
            return Ok(None);
        };
        let (deferred, promise) = settle::promise(env)?;
        rest.then(move |r| deferred.resolve(move |env| r.map_err(|e| js_error(&env, &e))));
        Ok(Some(promise))
    }

    #[napi]
    pub fn resize(&self, env: &Env, rows: Unknown<'_>, cols: Unknown<'_>) -> Result<()> {
        let num = |v: Unknown<'_>, name| -> std::result::Result<dsh_core::Num, DshError> {
            match v.get_type() {
                // SAFETY: the value was just checked to be a number.
                Ok(ValueType::Number) => Ok(dsh_core::Num(unsafe { v.cast::<f64>() }.unwrap_or(f64::NAN))),
                Ok(t) => Err(DshError::InvalidArgument {
                    field: terminal_field(name),
                    problem: format!("must be a number, got {}", convert::type_name(t)),
                }),
                Err(e) => Err(DshError::Internal(e.reason)),
            }
        };
        let rows = throw(env, num(rows, dsh_core::FieldName::Rows))?;
        let cols = throw(env, num(cols, dsh_core::FieldName::Cols))?;
        throw(env, self.inner.resize(rows, cols))
    }

    /// Resolves with `{ processGroupId, inputWaiting }`, or undefined when
    /// there is no foreground group; `/proc` is read off the JS thread.
    #[napi]
    pub fn inspect_foreground<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let (deferred, promise) = settle::promise(env)?;
        self.inner
            .inspect_foreground_with(move |fg| deferred.resolve(move |_| Ok(fg.map(ForegroundValue))));
        Ok(promise)
    }

    /// Resolves with whether the foreground group waits for input, once it
    /// does, `timeout_ms` passed (undefined: no limit; milliseconds are
    /// rounded down), or the program exited; `/proc` is read off the JS
    /// thread.
    #[napi]
    pub fn wait_input_waiting<'e>(&self, env: &'e Env, timeout_ms: Option<f64>) -> Result<Object<'e>> {
        // index.js checked it: a non-negative finite number, or undefined.
        let limit = timeout_ms.map(|t| Duration::from_millis(t as u64));
        let (deferred, promise) = settle::promise(env)?;
        self.inner
            .wait_input_waiting_with(limit, move |w| deferred.resolve(move |_| Ok(w)));
        Ok(promise)
    }

    /// The id of the group signalled.
    #[napi]
    pub fn signal_foreground(&self, env: &Env, signal: Unknown<'_>) -> Result<i32> {
        let field = terminal_field(dsh_core::FieldName::Signal);
        let name = match signal.get_type()? {
            // SAFETY: the value was just checked to be a string.
            ValueType::String => unsafe { signal.cast::<String>() }?,
            t => {
                let e = DshError::InvalidArgument {
                    field,
                    problem: format!("must be a string, got {}", convert::type_name(t)),
                };
                return Err(js_error(env, &e));
            }
        };
        let sig = throw(env, dsh_core::TerminalSignal::parse(field, &name))?;
        throw(env, self.inner.signal_foreground(sig))
    }

    /// Resolves with the number of survivors once nothing of the session
    /// is left.
    #[napi]
    pub fn terminate<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let (deferred, promise) = settle::promise(env)?;
        self.inner
            .terminate_with(move |n| deferred.resolve(move |_| Ok(n)));
        Ok(promise)
    }

    /// Resolves (with undefined) once the program has exited.
    #[napi]
    pub fn done<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let (deferred, promise) = settle::promise(env)?;
        self.inner.when_exited(move || deferred.resolve(|_| Ok(())));
        Ok(promise)
    }
}

#[napi]
pub struct NativeExecutor {
    pub(crate) inner: dsh_core::Executor,
}

#[napi]
impl NativeExecutor {
    #[napi(constructor)]
    pub fn new(env: Env, config: Option<Unknown<'_>>) -> Result<Self> {
        let input = throw_input(&env, convert::config_input(config))?;
        let inner = throw(&env, dsh_core::Executor::new(input))?;
        Ok(NativeExecutor { inner })
    }

    /// New commands get `config`; running ones keep theirs. A bad field
    /// changes nothing.
    #[napi]
    pub fn reconfigure(&self, env: Env, config: Option<Unknown<'_>>) -> Result<()> {
        let input = throw_input(&env, convert::config_input(config))?;
        throw(&env, self.inner.reconfigure(input))
    }

    #[napi(getter)]
    pub fn sandbox_mode(&self) -> Option<&'static str> {
        self.inner.sandbox_mode().map(|m| m.as_str())
    }

    #[napi]
    pub fn resolve<'e>(&self, env: &'e Env, request: Unknown<'_>) -> Result<Object<'e>> {
        let req = throw_input(env, convert::request(request))?;
        let spec = throw(env, self.inner.resolve(req))?;
        convert::spec_object(env, &spec)
    }

    /// Runs off the JS thread; the promise settles from a core I/O thread
    /// (which only queues its settlement on the JS thread). The spec comes
    /// as `index.js` reads it: its values in `specKeys()` order, or the
    /// first key that is not one of them.
    #[napi]
    pub fn run<'e>(
        &self,
        env: &'e Env,
        values: Option<Vec<Unknown<'_>>>,
        unknown_key: Option<String>,
        cancel: Option<&NativeCancelToken>,
    ) -> Result<Object<'e>> {
        let spec = throw_input(env, convert::spec_values(values, unknown_key))?;
        let cancel = cancel.map(|c| &c.inner);
        if spec.runs_on_host_loop() {
            if let Some(promise) = foreground::run(env, &self.inner, &spec, cancel)? {
                return Ok(promise);
            }
        }
        let (deferred, promise) = settle::promise(env)?;
        self.inner.run_io_callback(&spec, cancel, move |outcome| {
            deferred.resolve(move |env| RunValue::of(&env, outcome))
        });
        Ok(promise)
    }

    /// Registers the process and returns at once; spawning happens on a
    /// core thread. A cancelled token refuses the start (ABORT_ERR); one
    /// cancelled later stops the process as `kill()` does.
    #[napi]
    pub fn start(
        &self,
        env: &Env,
        values: Option<Vec<Unknown<'_>>>,
        unknown_key: Option<String>,
        cancel: Option<&NativeCancelToken>,
    ) -> Result<NativeProcess> {
        let spec = throw_input(env, convert::spec_values(values, unknown_key))?;
        let inner = throw(env, self.inner.start_cancellable(&spec, cancel.map(|c| &c.inner)))?;
        Ok(NativeProcess { inner })
    }

    /// The by-id calls take `id` as any value and refuse one that is not
    /// a string with INVALID_ARGUMENT naming `id`.
    #[napi]
    pub fn get(&self, env: &Env, id: Unknown<'_>) -> Result<Option<NativeProcess>> {
        let id = throw_input(env, convert::id_arg(id))?;
        Ok(self.inner.get(&id).map(|inner| NativeProcess { inner }))
    }

    /// Forgets a settled process (registry entry, spill files, buffers);
    /// STILL_RUNNING while it runs, NOT_FOUND for an unknown id.
    #[napi]
    pub fn forget(&self, env: &Env, id: Unknown<'_>) -> Result<()> {
        let id = throw_input(env, convert::id_arg(id))?;
        throw(env, self.inner.forget(&id))
    }

    /// The owner token stored at start; NOT_FOUND for an unknown id.
    #[napi]
    pub fn owner_of(&self, env: &Env, id: Unknown<'_>) -> Result<Option<String>> {
        let id = throw_input(env, convert::id_arg(id))?;
        throw(env, self.inner.owner_of(&id))
    }

    #[napi]
    pub fn list(&self) -> Vec<NativeProcess> {
        self.inner
            .list()
            .into_iter()
            .map(|inner| NativeProcess { inner })
            .collect()
    }

    #[napi]
    pub fn read_output<'e>(&self, env: &'e Env, id: Unknown<'_>) -> Result<Object<'e>> {
        let id = throw_input(env, convert::id_arg(id))?;
        let read = throw(env, self.inner.read_output(&id))?;
        convert::read_object(env, &read)
    }

    #[napi]
    pub fn kill(&self, env: &Env, id: Unknown<'_>) -> Result<bool> {
        let id = throw_input(env, convert::id_arg(id))?;
        throw(env, self.inner.kill(&id))
    }

    /// Calls `callback(id)` on the JS thread for each process that settles.
    /// The threadsafe function is weak: it never keeps the process alive.
    #[napi]
    pub fn on_task_done(&self, callback: Function<String, ()>) -> Result<f64> {
        let tsfn = Arc::new(
            callback
                .build_threadsafe_function::<String>()
                .weak::<true>()
                .callee_handled::<false>()
                .build()?,
        );
        let id = self.inner.on_task_done(Arc::new(move |p: &dsh_core::Process| {
            tsfn.call(p.id().to_owned(), ThreadsafeFunctionCallMode::NonBlocking);
        }));
        Ok(id.as_u64() as f64)
    }

    #[napi]
    pub fn off_task_done(&self, id: f64) -> bool {
        self.inner.off_task_done(ListenerId::from_u64(id as u64))
    }

    /// Resolves a terminal request and starts the session: on this JS
    /// thread, read on its own loop from the start; off it, read by the
    /// core's threads, where this runtime has no libuv. The promise settles
    /// with the handle once it runs. A token already cancelled refuses it
    /// (ABORT_ERR).
    #[napi]
    pub fn spawn_terminal<'e>(
        &self,
        env: &'e Env,
        request: Unknown<'_>,
        cancel: Option<&NativeCancelToken>,
    ) -> Result<Object<'e>> {
        let req = throw_input(env, convert::terminal_request(request))?;
        let spec = throw(env, self.inner.resolve_terminal(req))?;
        if cancel.is_some_and(|c| c.inner.is_cancelled()) {
            return Err(js_error(env, &DshError::AlreadyCancelled));
        }
        let (deferred, promise) = settle::promise(env)?;
        if let Some(spawned) = foreground::spawn_terminal(env, &self.inner, &spec) {
            let terminal = spawned.map(|(inner, readers)| NativeTerminal {
                inner,
                readers: Some(readers),
            });
            deferred.resolve_here(*env, terminal.map_err(|e| js_error(env, &e)));
            return Ok(promise);
        }
        self.inner.spawn_terminal_with(&spec, move |outcome| {
            deferred.resolve(move |env| match outcome {
                Ok(inner) => Ok(NativeTerminal { inner, readers: None }),
                Err(e) => Err(js_error(&env, &e)),
            })
        });
        Ok(promise)
    }

    /// Kills everything and resolves once all of it has exited.
    #[napi]
    pub fn dispose<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let (deferred, promise) = settle::promise(env)?;
        self.inner.start_dispose(move || deferred.resolve(|_| Ok(())));
        Ok(promise)
    }
}

/// Validates a configuration the way `new NativeExecutor(config)` would,
/// without making an executor: the harness's settings layer calls it to
/// refuse a section where it is written.
#[napi]
pub fn check_config(env: Env, config: Option<Unknown<'_>>) -> Result<()> {
    let input = throw_input(&env, convert::config_input(config))?;
    throw(&env, dsh_core::Config::new(input).map(drop))
}

/// The keys of a spec, in the order `run` and `start` take their values.
#[napi]
pub fn spec_keys() -> Vec<&'static str> {
    convert::SPEC_KEYS.to_vec()
}

/// The names of a run result's flat list, in its order (see
/// `run_result_values`): `index.js` reads each value by its name's index.
#[napi]
pub fn run_result_slots() -> Vec<&'static str> {
    convert::RUN_RESULT_SLOTS.to_vec()
}

/// A consuming read's `delta` from its stdout and stderr parts (the core's
/// one rule), for the remote executor's reads by offset.
#[napi]
pub fn compose_delta(stdout: String, stderr: String) -> String {
    dsh_core::compose_delta(stdout, &stderr)
}

/// Why this host's confined commands run without their read-only mounts
/// (their facts say `metadata: false`); null where they run in them.
#[napi]
pub fn metadata_unavailable() -> Option<&'static str> {
    dsh_core::metadata_unavailable()
}

/// How this host would enforce each limit: limit name → mechanism
/// (`unsupported` for one a command cannot ask for here).
#[napi]
pub fn limits_support(env: &Env) -> Result<Object<'_>> {
    convert::enforcement_object(env, &dsh_core::limits_support())
}

//! Spawned programs (docs/spawn.md) for `subprocess.mjs`: the spec comes
//! already read into plain values (the seam's shapes are checked there),
//! the handle goes back with its output pipes read on the JS thread's loop
//! (pipe_reader.rs) and its stdin pipe's descriptor for a `net.Socket`.

use std::collections::BTreeMap;
use std::os::fd::{IntoRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;

use dsh_core::{DshError, Field, FieldName, OutputStream, Scope, SpawnOutput, SpawnSpec, SpawnStdin};

use crate::convert::js_error;
use crate::executor::NativeExecutor;
use crate::foreground;
use crate::lock;
use crate::pipe_reader::NativePipeReader;
use crate::settle::{self, Settle};

fn field(name: FieldName) -> Field {
    Field::new(Scope::Spawn, name)
}

fn invalid(field: Field, problem: impl Into<String>) -> DshError {
    DshError::InvalidArgument {
        field,
        problem: problem.into(),
    }
}

/// One output stream's disposition: `'pipe'`, `'inherit'`, or `'collect'`
/// with its window and spill cap (`None`: no spill file).
fn output(name: FieldName, mode: &str, max_bytes: f64, spill: Option<f64>) -> dsh_core::Result<SpawnOutput> {
    let bytes = |which: &str, n: f64| {
        if n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n <= dsh_core::MAX_SAFE_INTEGER as f64 {
            Ok(n as u64)
        } else {
            Err(invalid(
                field(name),
                format!("{which} must be a whole number of bytes, got {n}"),
            ))
        }
    };
    match mode {
        "pipe" => Ok(SpawnOutput::Pipe),
        "inherit" => Ok(SpawnOutput::Inherit),
        "collect" => Ok(SpawnOutput::Collect {
            max_bytes: bytes("maxBytes", max_bytes)?,
            spill_max_bytes: spill.map(|n| bytes("spill.maxBytes", n)).transpose()?,
        }),
        other => Err(invalid(field(name), format!("unknown disposition {other:?}"))),
    }
}

/// `graceMs`: any positive finite number of milliseconds; a fraction is
/// rounded up (the core takes whole ones).
fn grace(ms: f64) -> dsh_core::Result<u64> {
    if !ms.is_finite() || ms <= 0.0 {
        return Err(invalid(
            field(FieldName::GraceMs),
            format!("must be a positive finite number, got {ms}"),
        ));
    }
    Ok(ms.ceil().min(u64::MAX as f64) as u64)
}

/// An environment overlay from parallel lists; `null` removes a variable.
fn overlay(keys: Vec<String>, values: Vec<Option<String>>) -> BTreeMap<String, Option<String>> {
    keys.into_iter().zip(values).collect()
}

/// A settled program's exit facts, as `done()` resolves with them.
#[napi(object)]
pub struct SpawnOutcome {
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
}

#[napi]
impl NativeExecutor {
    /// Starts a program (docs/spawn.md). Watched by this JS thread's loop it
    /// returns once the request is made (`pid` waits for the exec when read
    /// before it; a program that cannot exec rejects `done()`); off it,
    /// once it has exec'd.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn spawn_program(
        &self,
        env: Env,
        argv: Vec<String>,
        cwd: String,
        env_keys: Vec<String>,
        env_values: Vec<Option<String>>,
        stdin: String,
        stdin_data: Option<Buffer>,
        stdout: String,
        stdout_max: f64,
        stdout_spill: Option<f64>,
        stderr: String,
        stderr_max: f64,
        stderr_spill: Option<f64>,
        grace_ms: f64,
    ) -> Result<NativeSpawned> {
        let spec = (|| {
            Ok::<_, DshError>(SpawnSpec {
                argv,
                cwd: cwd.into(),
                env: overlay(env_keys, env_values),
                stdin: match (stdin.as_str(), stdin_data) {
                    ("ignore", _) => SpawnStdin::Null,
                    ("pipe", _) => SpawnStdin::Pipe,
                    ("data", Some(data)) => SpawnStdin::Bytes(data.to_vec()),
                    (other, _) => {
                        return Err(invalid(
                            field(FieldName::Stdin),
                            format!("unknown disposition {other:?}"),
                        ))
                    }
                },
                stdout: output(FieldName::Stdout, &stdout, stdout_max, stdout_spill)?,
                stderr: output(FieldName::Stderr, &stderr, stderr_max, stderr_spill)?,
                grace_ms: grace(grace_ms)?,
                sandbox_policy: None,
                limits: dsh_core::Limits::default(),
                // The seam's spawn has no timeout.
                timeout_ms: None,
            })
        })()
        .map_err(|e| js_error(&env, &e))?;
        let (spawned, host_done) = match foreground::spawn(&env, &self.inner, &spec)? {
            Some((spawned, done)) => (spawned, Some(done)),
            None => (self.inner.spawn(&spec).map_err(|e| js_error(&env, &e))?, None),
        };
        Ok(NativeSpawned {
            fds: Mutex::new([spawned.stdin, spawned.stdout, spawned.stderr]),
            inner: spawned.process,
            host_done,
        })
    }

    /// Where a spawn of `command` would find it, with `env`'s changes.
    #[napi]
    pub fn resolve_executable(
        &self,
        env: Env,
        command: String,
        env_keys: Vec<String>,
        env_values: Vec<Option<String>>,
    ) -> Result<String> {
        let path = self
            .inner
            .resolve_executable(&command, &overlay(env_keys, env_values))
            .map_err(|e| js_error(&env, &e))?;
        Ok(path.to_string_lossy().into_owned())
    }
}

/// A spawned program; `subprocess.mjs` wraps it in the seam's
/// `SubprocessHandle`.
#[napi]
pub struct NativeSpawned {
    inner: dsh_core::Process,
    /// stdin, stdout, stderr: the raw ends not yet taken by JS.
    fds: Mutex<[Option<OwnedFd>; 3]>,
    /// Watched by this JS thread's loop: `done` is settled there.
    host_done: Option<Arc<SpawnDone>>,
}

/// The `done` promises of a program watched by its JS thread's loop
/// (`foreground::spawn`), settled there when its supervision ends: no
/// core thread is involved between the supervisor's report and `done`.
pub(crate) struct SpawnDone {
    process: dsh_core::Process,
    state: Mutex<DoneState>,
}

#[derive(Default)]
struct DoneState {
    /// Promises asked for before the end.
    waiting: Vec<Settle>,
    /// Why the supervision failed without settling the process.
    failed: Option<DshError>,
}

impl SpawnDone {
    pub(crate) fn new(process: dsh_core::Process) -> SpawnDone {
        SpawnDone {
            process,
            state: Mutex::default(),
        }
    }

    /// A `done` promise. Called on the JS thread, as `ended` is: a process
    /// not settled yet has not ended its supervision, which then settles
    /// this promise. Nor has one a core thread settled while promises asked
    /// before still wait for the JS thread's turn: this one waits behind
    /// them, so they settle in the order asked.
    fn promise<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let (settle, promise) = settle::promise(env)?;
        let mut state = lock(&self.state);
        if let Some(e) = &state.failed {
            settle.resolve_here(*env, Err::<SpawnOutcome, _>(js_error(env, e)));
        } else if self.process.is_settled() && state.waiting.is_empty() {
            drop(state);
            settle.resolve_here(*env, Ok(self.outcome()));
        } else {
            state.waiting.push(settle);
        }
        Ok(promise)
    }

    /// The supervision ended (on the JS thread, in a turn of its loop):
    /// the promises asked for meanwhile settle with the exit facts, or
    /// with its error when the program did not start (the spawn returned
    /// before its exec: it has no pid) or the supervision failed without
    /// settling the process.
    pub(crate) fn ended(&self, env: Env, outcome: dsh_core::Result<()>) {
        let mut state = lock(&self.state);
        if let Err(e) = outcome {
            // Settled already, the pid is known without waiting.
            if !self.process.is_settled() || self.process.pid().is_none() {
                state.failed = Some(e);
            }
        }
        for settle in std::mem::take(&mut state.waiting) {
            match &state.failed {
                Some(e) => settle.resolve_here(env, Err::<SpawnOutcome, _>(js_error(&env, e))),
                None => settle.resolve_here(env, Ok(self.outcome())),
            }
        }
    }

    fn outcome(&self) -> SpawnOutcome {
        SpawnOutcome::of(&self.process)
    }
}

impl SpawnOutcome {
    fn of(process: &dsh_core::Process) -> SpawnOutcome {
        SpawnOutcome {
            exit_code: process.exit_code(),
            signal: process.signal(),
        }
    }
}

fn stream(name: &str) -> Option<OutputStream> {
    match name {
        "stdout" => Some(OutputStream::Stdout),
        "stderr" => Some(OutputStream::Stderr),
        _ => None,
    }
}

#[napi]
impl NativeSpawned {
    /// The leader's pid, waiting for its exec when asked before it (a spawn
    /// watched by this thread's loop returns before); −1, as the seam has
    /// it, for a program that did not start.
    #[napi(getter)]
    pub fn pid(&self) -> i32 {
        self.inner.pid().unwrap_or(-1)
    }

    /// Hands the raw descriptor of stream `index` (0, 1, 2) to JS, which
    /// owns it from then on; null when there is none (or it was taken).
    #[napi]
    pub fn take_fd(&self, index: u32) -> Option<i32> {
        let mut fds = lock(&self.fds);
        fds.get_mut(index as usize)?.take().map(IntoRawFd::into_raw_fd)
    }

    /// Output stream `index`'s pipe (1, 2), read on this JS thread's loop
    /// with each chunk handed to `onData` (pipe_reader.rs); where the loop
    /// is not libuv's, its raw descriptor instead, for a `net.Socket`.
    /// Null when there is none (or it was taken).
    #[napi]
    pub fn pipe_reader(
        &self,
        env: &Env,
        index: u32,
        on_data: Unknown<'_>,
    ) -> Result<Option<Either<NativePipeReader, i32>>> {
        if index == 0 {
            return Err(Error::new(Status::InvalidArg, "stdin is not read"));
        }
        let Some(fd) = lock(&self.fds).get_mut(index as usize).and_then(Option::take) else {
            return Ok(None);
        };
        Ok(Some(match NativePipeReader::new(env, fd, on_data)? {
            Ok(reader) => Either::A(reader),
            Err(fd) => Either::B(fd.into_raw_fd()),
        }))
    }

    /// A non-consuming read of a collected stream from `offset`.
    #[napi]
    pub fn read_from<'e>(&self, env: &'e Env, name: String, offset: f64) -> Result<Object<'e>> {
        let which = stream(&name).ok_or_else(|| Error::from_reason(format!("no stream {name:?}")))?;
        // Saturating: `Infinity` (or any offset past the end) reads nothing;
        // a negative one reads from the start.
        let from = if offset > 0.0 { offset as u64 } else { 0 };
        let read = self.inner.read_from(which, from);
        let mut o = Object::new(env)?;
        o.set_named_property("text", read.text)?;
        o.set_named_property("nextOffset", read.next_offset as f64)?;
        o.set_named_property("lossy", read.lossy)?;
        if let Some(path) = read.spill_path {
            o.set_named_property("spillPath", path)?;
        }
        Ok(o)
    }

    /// Resolves with the exit facts once the program has settled (one
    /// crossing instead of a getter call per fact).
    #[napi]
    pub fn done<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        if let Some(done) = &self.host_done {
            return done.promise(env);
        }
        let (deferred, promise) = settle::promise(env)?;
        let process = self.inner.clone();
        self.inner
            .when_settled(move || deferred.resolve(move |_| Ok(SpawnOutcome::of(&process))))
            .map_err(|e| js_error(env, &e))?;
        Ok(promise)
    }

    #[napi(getter)]
    pub fn exit_code(&self) -> Option<i32> {
        self.inner.exit_code()
    }

    #[napi(getter)]
    pub fn signal(&self) -> Option<String> {
        self.inner.signal()
    }

    /// SIGTERM, SIGKILL after the grace, to the whole tree; idempotent.
    #[napi]
    pub fn terminate(&self, env: Env) -> Result<()> {
        self.inner.terminate().map_err(|e| js_error(&env, &e))
    }

    /// True once the whole tree has ended.
    #[napi(getter)]
    pub fn tree_gone(&self) -> bool {
        self.inner.tree_gone()
    }

    /// Resolves once the whole tree has ended; `cancel(id)` withdraws it.
    #[napi]
    pub fn when_tree_gone<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let (deferred, promise) = settle::promise(env)?;
        self.inner
            .when_tree_gone(move || deferred.resolve(|_| Ok(())))
            .map_err(|e| js_error(env, &e))?;
        Ok(promise)
    }
}

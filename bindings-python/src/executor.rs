//! Executor, Process and CancelToken for Python. Every call that can wait
//! releases the GIL; blocking waits wake up regularly to let Ctrl-C
//! (KeyboardInterrupt) through, aborting what they were waiting for.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyUnicodeEncodeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyString};

use dsh_core::{
    ConfigInput, Field, FieldName, LimitKind, LimitsInput, ListenerId, NameStyle, NetworkPolicy, OnExpiry,
    Request, SandboxMode, SandboxPolicyInput, Scope,
};

use crate::results::{py_repr, ProcessRead, RunResult, SandboxInfo, SandboxPolicy, Spec};
use crate::waiting::{deadline, wait_until, withdraw_on_cancel, SIGNAL_POLL};
use crate::{mapping_entries, number, required_str, to_pyerr, type_error, type_name, utf8};

/// `subprocess.PIPE`, which `resolve(stdin=...)` takes for a stdin pipe.
const SUBPROCESS_PIPE: i64 = -1;

/// A cancellation token: ``cancel()`` from any thread aborts a run using it.
///
/// Pass it to ``Executor.run(spec, token)`` or ``Executor.run_async(spec,
/// token)``. Once fired, the run's command gets SIGTERM (SIGKILL after
/// ``grace_ms``) and the result says ``aborted=True``. A token that has
/// already fired makes a new run raise ``AlreadyCancelledError``.
#[pyclass(frozen, module = "dsh_native")]
#[derive(Clone, Default)]
pub struct CancelToken {
    pub inner: dsh_core::CancelToken,
}

#[pymethods]
impl CancelToken {
    #[new]
    fn new() -> Self {
        CancelToken::default()
    }
    /// Fires the token (idempotent, from any thread).
    fn cancel(&self) {
        self.inner.cancel();
    }
    /// True once ``cancel()`` has been called.
    #[getter]
    fn cancelled(&self) -> bool {
        self.inner.is_cancelled()
    }
    fn __repr__(&self) -> String {
        format!(
            "CancelToken(cancelled={})",
            if self.inner.is_cancelled() {
                "True"
            } else {
                "False"
            }
        )
    }
}

/// Returned by ``Executor.on_task_done``: calling it removes the listener.
#[pyclass(frozen, module = "dsh_native")]
pub struct Unsubscribe {
    executor: dsh_core::Executor,
    id: ListenerId,
}

#[pymethods]
impl Unsubscribe {
    /// Removes the listener: True if it was registered, False on later
    /// calls. A delivery already under way may still call it once.
    fn __call__(&self) -> bool {
        self.executor.off_task_done(self.id)
    }
}

/// A background process, from ``Executor.start``, ``get``, ``list`` or a
/// task-done listener. Every handle to one process shares its status and
/// its read cursor; see docs/running.md.
#[pyclass(frozen, module = "dsh_native")]
pub struct Process {
    pub inner: dsh_core::Process,
}

#[pymethods]
impl Process {
    /// The registry id: ``'bash-1'``, ``'bash-2'``, …
    #[getter]
    fn id(&self) -> &str {
        self.inner.id()
    }
    /// The command as started.
    #[getter]
    fn command(&self) -> &str {
        self.inner.command()
    }
    /// The ``owner`` given to ``resolve``, or None (never interpreted).
    #[getter]
    fn owner(&self) -> Option<&str> {
        self.inner.owner()
    }
    /// ``'running'``, then ``'completed'`` or ``'killed'``. Live: ``'killed'``
    /// as soon as a stop is requested, before the process has exited.
    #[getter]
    fn status(&self) -> &'static str {
        self.inner.status().as_str()
    }
    /// The exit status once settled, if the shell exited by itself; else None.
    #[getter]
    fn exit_code(&self) -> Option<i32> {
        self.inner.exit_code()
    }
    /// The name of the signal that killed it (``'SIGTERM'``), once settled;
    /// else None.
    #[getter]
    fn signal(&self) -> Option<String> {
        self.inner.signal()
    }
    /// True once settled when nobody could say how it ended.
    #[getter]
    fn exit_status_unavailable(&self) -> bool {
        self.inner.exit_status_unavailable()
    }
    /// Once settled after ``kill()``, a cancellation or disposal: processes
    /// of its tree still alive when the stop finished (expected 0).
    #[getter]
    fn survivors(&self) -> u32 {
        self.inner.survivors()
    }

    /// Sandbox facts once settled, when the spec carried a policy; else None.
    #[getter]
    fn sandbox(&self) -> Option<SandboxInfo> {
        self.inner.sandbox().map(SandboxInfo::from)
    }

    /// Once settled: the limit that ended it (``'memory'``,
    /// ``'processes'``, ``'cpu'``, ``'file_size'``), as the kernel reported
    /// it; else None (docs/limits.md).
    #[getter]
    fn limit(&self) -> Option<&'static str> {
        self.inner.limit().map(LimitKind::as_str)
    }

    /// Once settled: the mechanism of each limit it ran with
    /// (``{'memory': 'cgroup-v1', 'cpu': 'rlimit'}``); empty without limits.
    #[getter]
    fn limits_enforcement(&self) -> BTreeMap<&'static str, &'static str> {
        crate::results::enforcement_map(&self.inner.limits_enforcement())
    }

    /// True once the process has settled; never goes back to False.
    #[getter]
    fn done(&self) -> bool {
        self.inner.is_settled()
    }
    /// Consuming read: what arrived since the previous read, through any
    /// handle; never the same bytes twice. Works after the process settled.
    fn read_output(&self) -> ProcessRead {
        self.inner.read_output().into()
    }
    /// Begins termination: SIGTERM to the whole tree, SIGKILL after
    /// ``grace_ms``. True when it was running and this call began it.
    fn kill(&self) -> bool {
        self.inner.kill()
    }
    /// True when it was started with ``stdin=PIPE``.
    #[getter]
    fn has_stdin_pipe(&self) -> bool {
        self.inner.has_stdin_pipe()
    }
    /// Writes all of ``data`` (``str`` or ``bytes``) to the command's stdin
    /// (started with ``stdin=PIPE``), blocking with the GIL released while
    /// its bounded buffer is full: the command's reading paces the writer,
    /// nothing piles up in memory. Returns once every byte was taken (not
    /// once the command has read them). Raises StdinClosedError (a
    /// BrokenPipeError) without a stdin pipe, after ``close_stdin()``, and
    /// once the command exited or closed its stdin. Ctrl-C interrupts the
    /// wait; bytes already taken stay taken.
    fn write_stdin(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        // `bytes` are immutable and kept alive by `data`: written from where
        // they are, never copied whole (a str is encoded once).
        let encoded;
        let bytes = match data.cast::<PyBytes>() {
            Ok(b) => b.as_bytes(),
            Err(_) => {
                encoded = stdin_bytes(data)?;
                &encoded[..]
            }
        };
        dsh_core::refuse_blocking().map_err(|e| to_pyerr(py, e))?;
        // One write however many takes: a close_stdin from another thread
        // meanwhile waits for all of it.
        let writer = self.inner.stdin_writer().map_err(|e| to_pyerr(py, e))?;
        let mut rest = bytes;
        loop {
            let n = writer.try_write(rest).map_err(|e| to_pyerr(py, e))?;
            rest = &rest[n..];
            if rest.is_empty() {
                return Ok(());
            }
            if n == 0 {
                py.detach(|| writer.wait_writable(Some(SIGNAL_POLL)))
                    .map_err(|e| to_pyerr(py, e))?;
                py.check_signals()?;
            }
        }
    }
    /// An asyncio future that completes (with None) once every byte of
    /// ``data`` was taken by the command's stdin, without blocking the
    /// event loop: while the bounded buffer is full it waits for the command
    /// to read (back-pressure). Writes made this way are written whole, in
    /// call order. Fails with StdinClosedError as ``write_stdin``.
    /// Cancelling the future does not withdraw the write.
    fn write_stdin_async<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let bytes = stdin_bytes(data)?;
        let asyncio = py.import("asyncio")?;
        let event_loop = asyncio.call_method0("get_running_loop")?;
        let future = event_loop.call_method0("create_future")?;
        let resolve = py.import("dsh_native._helpers")?.getattr("resolve_future")?;
        let (lp, fut, resolve) = (event_loop.unbind(), future.clone().unbind(), resolve.unbind());
        self.inner.write_stdin_with(bytes, move |outcome| {
            Python::try_attach(|py| {
                let error = match outcome {
                    Ok(()) => py.None(),
                    Err(e) => to_pyerr(py, e).into_value(py).into_any(),
                };
                // A closed loop cannot be told; nothing is waiting on it then.
                let _ = lp.call_method1(py, "call_soon_threadsafe", (resolve, fut, py.None(), error));
            });
        });
        Ok(future)
    }
    /// Closes the command's stdin once the bytes already written are
    /// delivered, so it reads EOF. True when this call closed it, False
    /// when it was already closed or the command exited. Raises
    /// StdinClosedError when it was not started with ``stdin=PIPE``.
    fn close_stdin(&self, py: Python<'_>) -> PyResult<bool> {
        self.inner.close_stdin().map_err(|e| to_pyerr(py, e))
    }
    /// Blocks until the process settles, with the GIL released; raises
    /// TimeoutError if it is still running after ``timeout`` seconds (None:
    /// no limit). Ctrl-C interrupts the wait (not the process).
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let settled = wait_until(py, deadline(timeout)?, |slice| {
            Ok(self.inner.wait_timeout(Some(slice))?.then_some(()))
        })?;
        settled.ok_or_else(|| {
            pyo3::exceptions::PyTimeoutError::new_err(format!("{} is still running", self.inner.id()))
        })
    }
    /// An asyncio future that completes (with None) when the process
    /// settles. Cancelling it (``asyncio.wait_for`` timing out) withdraws
    /// the callback behind it.
    fn wait_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let asyncio = py.import("asyncio")?;
        let event_loop = asyncio.call_method0("get_running_loop")?;
        let future = event_loop.call_method0("create_future")?;
        let resolve = py.import("dsh_native._helpers")?.getattr("resolve_future")?;
        let (lp, fut, resolve) = (event_loop.unbind(), future.clone().unbind(), resolve.unbind());
        let waiter = self
            .inner
            .when_settled(move || {
                Python::try_attach(|py| {
                    let none = py.None();
                    // A closed loop cannot be told; nothing is waiting on it then.
                    let _ = lp.call_method1(
                        py,
                        "call_soon_threadsafe",
                        (resolve, fut, none.clone_ref(py), none),
                    );
                });
            })
            .map_err(|e| to_pyerr(py, e))?;
        let process = self.inner.clone();
        withdraw_on_cancel(py, &future, move || {
            process.cancel_when_settled(waiter);
        })?;
        Ok(future)
    }
    fn __repr__(&self) -> String {
        format!(
            "Process(id={}, status={}, exit_code={}, signal={})",
            py_repr(self.inner.id()),
            py_repr(self.inner.status().as_str()),
            self.inner.exit_code().map_or("None".into(), |c| c.to_string()),
            self.inner.signal().map_or("None".into(), |s| py_repr(&s))
        )
    }
}

/// ``argv``: a list (any sequence but a str) of str.
fn argv_list(py: Python<'_>, a: &Bound<'_, PyAny>, field: Field) -> PyResult<Vec<String>> {
    if a.is_instance_of::<PyString>() {
        return Err(type_error(py, field, "must be a list of str, got a str"));
    }
    let items: Vec<Bound<'_, PyAny>> = a
        .extract()
        .map_err(|_| type_error(py, field, &format!("must be a list of str, got {}", type_name(a))))?;
    let mut argv = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Some(arg) = utf8(item, field, &format!("item {i} "))? else {
            let problem = format!("must be a list of str, item {i} is {}", type_name(item));
            return Err(type_error(py, field, &problem));
        };
        argv.push(arg);
    }
    Ok(argv)
}

/// The bytes of a ``write_stdin`` argument: ``str`` (UTF-8) or ``bytes``.
fn stdin_bytes(data: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if data.is_instance_of::<PyString>() {
        return Ok(data.extract::<String>()?.into_bytes());
    }
    data.cast::<PyBytes>()
        .map(|b| b.as_bytes().to_vec())
        .map_err(|_| PyTypeError::new_err("data must be str or bytes"))
}

/// `env`, `dsh_env`: a dict (or any Mapping) of str to str, each key and
/// value text UTF-8 can encode; a bad entry is named by its key.
fn string_map(value: Option<&Bound<'_, PyAny>>, field: Field) -> PyResult<Option<BTreeMap<String, String>>> {
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let py = v.py();
    const SHAPE: &str = "must be a dict of str to str";
    let entries = mapping_entries(v)?
        .ok_or_else(|| type_error(py, field, &format!("{SHAPE}, got {}", type_name(v))))?;
    let repr = |o: &Bound<'_, PyAny>| o.repr().map(|r| r.to_string()).unwrap_or_default();
    let mut map = BTreeMap::new();
    for (k, val) in entries {
        let Some(key) = utf8(&k, field, &format!("key {} ", repr(&k)))? else {
            let problem = format!("{SHAPE}, got key {} of type {}", repr(&k), type_name(&k));
            return Err(type_error(py, field, &problem));
        };
        let Some(text) = utf8(&val, field, &format!("value of {} ", repr(&k)))? else {
            let problem = format!("{SHAPE}, got {} for {}", type_name(&val), repr(&k));
            return Err(type_error(py, field, &problem));
        };
        map.insert(key, text);
    }
    Ok(Some(map))
}

fn sandbox_mode(py: Python<'_>, field: Field, value: &Bound<'_, PyAny>) -> PyResult<SandboxMode> {
    let s = required_str(value, field, "mode ")?;
    SandboxMode::parse(field, &s).map_err(|e| to_pyerr(py, e))
}

fn policy_input(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<SandboxPolicyInput>> {
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let py = v.py();
    let field = Field::new(Scope::Request, FieldName::SandboxPolicy);
    if let Ok(p) = v.cast::<SandboxPolicy>() {
        let p = p.get();
        return Ok(Some(SandboxPolicyInput {
            mode: SandboxMode::parse(field, &p.mode).map_err(|e| to_pyerr(py, e))?,
            workspace_root: Some(p.workspace_root.clone()),
            session_id: None,
            network: Some(NetworkPolicy::parse(field, &p.network).map_err(|e| to_pyerr(py, e))?),
        }));
    }
    let entries = mapping_entries(v)?
        .ok_or_else(|| type_error(py, field, "must be a SandboxPolicy or a dict with 'mode'"))?;
    const KEYS: [&str; 4] = ["mode", "workspace_root", "session_id", "network"];
    let mut known: [Option<Bound<'_, PyAny>>; 4] = Default::default();
    for (key, value) in entries {
        let name: String = key.extract().unwrap_or_else(|_| key.to_string());
        // A misspelt key (`netwrok`) must not leave the policy's default
        // in place unnoticed: refused, naming it, as `limits` are.
        let Some(slot) = KEYS.iter().position(|k| *k == name) else {
            let expected = format!("{} or {}", KEYS[..3].join(", "), KEYS[3]);
            return Err(type_error(
                py,
                field,
                &format!("has an unknown key {name:?} (expected {expected})"),
            ));
        };
        known[slot] = Some(value);
    }
    let [mode, root, session_id, network] = known;
    let mode = mode.ok_or_else(|| type_error(py, field, "has no 'mode'"))?;
    let root = optional_path(root.as_ref(), field, "workspace_root ")?;
    let session_id = match session_id {
        Some(s) if !s.is_none() => Some(required_str(&s, field, "session_id ")?),
        _ => None,
    };
    let network = match network {
        Some(n) if !n.is_none() => {
            let n = required_str(&n, field, "network ")?;
            Some(NetworkPolicy::parse(field, &n).map_err(|e| to_pyerr(py, e))?)
        }
        _ => None,
    };
    Ok(Some(SandboxPolicyInput {
        mode: sandbox_mode(py, field, &mode)?,
        workspace_root: root,
        session_id,
        network,
    }))
}

/// A path as `subprocess` takes `cwd`: `str` (encoded with the filesystem
/// encoding and surrogateescape, so the `str` that `os.fsdecode` made of
/// any bytes gives those bytes back), `bytes`, or an `os.PathLike` of
/// either — exactly what `os.fsencode` accepts. `what` prefixes the problem
/// when the path is one part of `field`.
fn optional_path(value: Option<&Bound<'_, PyAny>>, field: Field, what: &str) -> PyResult<Option<PathBuf>> {
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let py = v.py();
    static FSENCODE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let encoded = FSENCODE.import(py, "os", "fsencode")?.call1((v,)).map_err(|e| {
        if e.is_instance_of::<PyTypeError>(py) {
            let got = type_name(v);
            type_error(
                py,
                field,
                &format!("{what}must be str, bytes or os.PathLike, got {got}"),
            )
        } else if e.is_instance_of::<PyUnicodeEncodeError>(py) {
            type_error(
                py,
                field,
                &format!("{what}cannot be encoded with the filesystem encoding: {e}"),
            )
        } else {
            e
        }
    })?;
    let bytes = encoded
        .cast::<PyBytes>()
        .map_err(|_| type_error(py, field, &format!("{what}did not encode to bytes")))?;
    Ok(Some(PathBuf::from(OsStr::from_bytes(bytes.as_bytes()))))
}

fn optional_str(value: Option<&Bound<'_, PyAny>>, field: Field) -> PyResult<Option<String>> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(None),
        Some(v) => {
            // os.PathLike objects are welcome where a path is expected.
            let v = if v.hasattr("__fspath__")? {
                v.call_method0("__fspath__")?
            } else {
                v.clone()
            };
            required_str(&v, field, "").map(Some)
        }
    }
}

/// The constructor's (and ``reconfigure``'s) keywords, in their order:
/// cwd, timeout_ms, max_timeout_ms, max_output_bytes, max_spill_bytes,
/// grace_ms, spill_dir, retain_settled, sandbox_mode, limits.
fn config_input(py: Python<'_>, kw: [Option<&Bound<'_, PyAny>>; 10]) -> PyResult<ConfigInput> {
    let [cwd, timeout_ms, max_timeout_ms, max_output_bytes, max_spill_bytes, grace_ms, spill_dir, retain_settled, sandbox_mode, limits] =
        kw;
    let f = |name| Field::new(Scope::Config, name);
    Ok(ConfigInput {
        cwd: optional_str(cwd, f(FieldName::Cwd))?,
        timeout_ms: number(timeout_ms, Scope::Config, FieldName::TimeoutMs)?,
        max_timeout_ms: number(max_timeout_ms, Scope::Config, FieldName::MaxTimeoutMs)?,
        max_output_bytes: number(max_output_bytes, Scope::Config, FieldName::MaxOutputBytes)?,
        max_spill_bytes: number(max_spill_bytes, Scope::Config, FieldName::MaxSpillBytes)?,
        grace_ms: number(grace_ms, Scope::Config, FieldName::GraceMs)?,
        spill_dir: optional_str(spill_dir, f(FieldName::SpillDir))?,
        retain_settled: number(retain_settled, Scope::Config, FieldName::RetainSettled)?,
        sandbox_mode: match sandbox_mode.filter(|m| !m.is_none()) {
            Some(m) => Some(crate::executor::sandbox_mode(py, f(FieldName::SandboxMode), m)?),
            None => None,
        },
        limits: limits_input(limits, Scope::Config)?,
    })
}

/// ``limits``: a dict of ``memory_bytes``, ``processes``, ``cpu_seconds``,
/// ``file_size_bytes``, ``open_files`` (any of them); an unknown key is
/// refused, naming it.
fn limits_input(value: Option<&Bound<'_, PyAny>>, scope: Scope) -> PyResult<Option<LimitsInput>> {
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let py = v.py();
    let field = Field::new(scope, FieldName::Limits);
    let dict = v
        .cast::<PyDict>()
        .map_err(|_| type_error(py, field, "must be a dict"))?;
    let mut out = LimitsInput::default();
    for (key, val) in dict.iter() {
        let key: String = key.extract().unwrap_or_default();
        let kind = LimitKind::ALL
            .into_iter()
            .find(|k| k.field().name(NameStyle::Snake) == format!("limits.{key}"))
            .ok_or_else(|| {
                type_error(
                    py,
                    field,
                    &format!(
                        "has an unknown key {key:?} (expected memory_bytes, processes, cpu_seconds, file_size_bytes or open_files)"
                    ),
                )
            })?;
        out.set(kind, number(Some(&val), scope, kind.field())?);
    }
    Ok(Some(out))
}

/// A bash executor (what ``dsh_native.Executor`` wraps).
///
/// Keywords, all optional (docs/configuration.md): ``cwd`` (default: the
/// process cwd), ``timeout_ms`` (ms, 120000), ``max_timeout_ms`` (ms,
/// 600000), ``max_output_bytes`` (bytes per stream, 64000),
/// ``max_spill_bytes`` (bytes per spill file, 64 MiB), ``grace_ms`` (ms,
/// 3000), ``spill_dir`` (default: the temp dir), ``retain_settled`` (count,
/// 1000), ``sandbox_mode`` (``'read-only'``, ``'workspace-write'``,
/// ``'danger-full-access'``; default None).
#[pyclass(frozen, subclass, module = "dsh_native")]
pub struct Executor {
    inner: dsh_core::Executor,
}

#[pymethods]
impl Executor {
    #[new]
    #[pyo3(signature = (*, cwd=None, timeout_ms=None, max_timeout_ms=None, max_output_bytes=None, max_spill_bytes=None, grace_ms=None, spill_dir=None, retain_settled=None, sandbox_mode=None, limits=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        cwd: Option<&Bound<'_, PyAny>>,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        max_timeout_ms: Option<&Bound<'_, PyAny>>,
        max_output_bytes: Option<&Bound<'_, PyAny>>,
        max_spill_bytes: Option<&Bound<'_, PyAny>>,
        grace_ms: Option<&Bound<'_, PyAny>>,
        spill_dir: Option<&Bound<'_, PyAny>>,
        retain_settled: Option<&Bound<'_, PyAny>>,
        sandbox_mode: Option<&Bound<'_, PyAny>>,
        limits: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let input = config_input(
            py,
            [
                cwd,
                timeout_ms,
                max_timeout_ms,
                max_output_bytes,
                max_spill_bytes,
                grace_ms,
                spill_dir,
                retain_settled,
                sandbox_mode,
                limits,
            ],
        )?;
        let inner = dsh_core::Executor::new(input).map_err(|e| to_pyerr(py, e))?;
        Ok(Executor { inner })
    }

    /// Replaces the configuration for every command resolved or started from
    /// now on; running commands keep the limits they started with. Takes the
    /// constructor's keywords; one left out goes back to its default, except
    /// ``spill_dir``, which stays (naming a different one is an error). A bad
    /// value raises ``InvalidArgumentError`` and changes nothing
    /// (docs/configuration.md).
    #[pyo3(signature = (*, cwd=None, timeout_ms=None, max_timeout_ms=None, max_output_bytes=None, max_spill_bytes=None, grace_ms=None, spill_dir=None, retain_settled=None, sandbox_mode=None, limits=None))]
    #[allow(clippy::too_many_arguments)]
    fn reconfigure(
        &self,
        py: Python<'_>,
        cwd: Option<&Bound<'_, PyAny>>,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        max_timeout_ms: Option<&Bound<'_, PyAny>>,
        max_output_bytes: Option<&Bound<'_, PyAny>>,
        max_spill_bytes: Option<&Bound<'_, PyAny>>,
        grace_ms: Option<&Bound<'_, PyAny>>,
        spill_dir: Option<&Bound<'_, PyAny>>,
        retain_settled: Option<&Bound<'_, PyAny>>,
        sandbox_mode: Option<&Bound<'_, PyAny>>,
        limits: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let input = config_input(
            py,
            [
                cwd,
                timeout_ms,
                max_timeout_ms,
                max_output_bytes,
                max_spill_bytes,
                grace_ms,
                spill_dir,
                retain_settled,
                sandbox_mode,
                limits,
            ],
        )?;
        self.inner.reconfigure(input).map_err(|e| to_pyerr(py, e))
    }

    /// The default sandbox mode, or None when the executor does not confine.
    #[getter]
    fn sandbox_mode(&self) -> Option<&'static str> {
        self.inner.sandbox_mode().map(SandboxMode::as_str)
    }

    /// True once ``close()`` has begun.
    #[getter]
    fn disposed(&self) -> bool {
        self.inner.is_disposed()
    }

    /// Request → spec: the only place defaults are applied
    /// (docs/requests.md). Returns a ``Spec`` for ``run`` or ``start``.
    ///
    /// - ``command``: run as ``bash -c -- command``.
    /// - ``workdir``: ``str``, ``bytes`` or ``os.PathLike``; relative to the
    ///   executor's ``cwd`` (default: ``cwd``, else the process cwd).
    /// - ``timeout_ms``: milliseconds, any positive number; a fraction is
    ///   rounded up, a value above ``max_timeout_ms`` clamped to it (default:
    ///   the executor's ``timeout_ms``). Foreground runs only.
    /// - ``stdout_max_bytes``: the in-memory stdout window in bytes, a
    ///   positive whole number up to 2**53-1, which may raise stdout above
    ///   ``max_output_bytes`` (the default; stderr keeps it). Foreground
    ///   runs only.
    /// - ``stdin``: ``str`` or ``bytes`` written to stdin, then closed
    ///   (default: ``/dev/null``); or ``PIPE`` (``subprocess.PIPE``): a
    ///   pipe that stays open for ``Process.write_stdin`` (``start``, or
    ///   ``run`` with ``on_expiry='background'``).
    /// - ``on_expiry``: ``'kill'`` (the default) or ``'background'``: a run
    ///   that reaches its timeout is handed over to the registry instead
    ///   of killed (``RunResult.background_id``).
    /// - ``env``: variables merged over the scrubbed host environment.
    /// - ``dsh_env``: managed ``DSH_*`` variables, merged last.
    /// - ``owner``: an opaque token kept with a background process.
    /// - ``sandbox_policy``: a dict with ``mode``, optional
    ///   ``workspace_root`` (default: the workdir) and ``session_id``, or a
    ///   ``SandboxPolicy`` (default: the executor's ``sandbox_mode``); its
    ///   ``network`` is ``'allow'`` (the default), ``'deny'`` or
    ///   ``'loopback'`` (docs/sandbox.md).
    /// - ``limits``: a dict of ``memory_bytes``, ``processes``,
    ///   ``cpu_seconds``, ``file_size_bytes``, ``open_files``, each clamped
    ///   to the executor's (docs/limits.md).
    ///
    /// Raises InvalidArgumentError (a ValueError) naming the field.
    #[pyo3(signature = (command, *, workdir=None, timeout_ms=None, stdout_max_bytes=None, stdin=None, env=None, dsh_env=None, owner=None, sandbox_policy=None, on_expiry=None, limits=None))]
    #[allow(clippy::too_many_arguments)]
    fn resolve(
        &self,
        py: Python<'_>,
        command: &Bound<'_, PyAny>,
        workdir: Option<&Bound<'_, PyAny>>,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        stdout_max_bytes: Option<&Bound<'_, PyAny>>,
        stdin: Option<&Bound<'_, PyAny>>,
        env: Option<&Bound<'_, PyAny>>,
        dsh_env: Option<&Bound<'_, PyAny>>,
        owner: Option<&Bound<'_, PyAny>>,
        sandbox_policy: Option<&Bound<'_, PyAny>>,
        on_expiry: Option<&Bound<'_, PyAny>>,
        limits: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Spec> {
        let f = |name| Field::new(Scope::Request, name);
        let command = required_str(command, f(FieldName::Command), "")?;
        let pipe = stdin.is_some_and(|s| {
            !s.is_instance_of::<pyo3::types::PyBool>()
                && s.extract::<i64>().is_ok_and(|v| v == SUBPROCESS_PIPE)
        });
        let stdin = match stdin.filter(|s| !s.is_none() && !pipe) {
            None => None,
            Some(s) if s.is_instance_of::<PyString>() => {
                utf8(s, f(FieldName::Stdin), "")?.map(String::into_bytes)
            }
            Some(s) => Some(
                s.cast::<PyBytes>()
                    .map_err(|_| type_error(py, f(FieldName::Stdin), "must be str, bytes or PIPE"))?
                    .as_bytes()
                    .to_vec(),
            ),
        };
        let request = Request {
            command,
            workdir: optional_path(workdir, f(FieldName::Workdir), "")?,
            timeout_ms: number(timeout_ms, Scope::Request, FieldName::TimeoutMs)?,
            stdout_max_bytes: number(stdout_max_bytes, Scope::Request, FieldName::StdoutMaxBytes)?,
            stdin,
            stdin_pipe: pipe,
            on_expiry: match on_expiry.filter(|v| !v.is_none()) {
                None => None,
                Some(v) => {
                    let field = f(FieldName::OnExpiry);
                    let name = utf8(v, field, "")?
                        .ok_or_else(|| type_error(py, field, "must be 'kill' or 'background'"))?;
                    Some(OnExpiry::parse(field, &name).map_err(|e| to_pyerr(py, e))?)
                }
            },
            env: string_map(env, f(FieldName::Env))?,
            dsh_env: string_map(dsh_env, f(FieldName::DshEnv))?,
            owner: optional_str(owner, f(FieldName::Owner))?,
            sandbox_policy: policy_input(sandbox_policy)?,
            limits: limits_input(limits, Scope::Request)?,
        };
        let inner = self.inner.resolve(request).map_err(|e| to_pyerr(py, e))?;
        Ok(Spec { inner })
    }

    /// Runs a spec in the foreground with the GIL released and returns its
    /// RunResult; a nonzero exit, a timeout and an abort are results.
    /// ``cancel``: a CancelToken that aborts the run. Ctrl-C
    /// (KeyboardInterrupt) aborts the command, waits until it is gone, and
    /// re-raises. Raises SpawnError (an OSError) when the command cannot be
    /// started, and refuses to block inside a callback
    /// (BlockingCallError).
    #[pyo3(signature = (spec, cancel=None))]
    fn run(&self, py: Python<'_>, spec: &Spec, cancel: Option<&CancelToken>) -> PyResult<RunResult> {
        // Waits on this thread without the GIL, taking it back every
        // SIGNAL_POLL to look for Ctrl-C: the run is then stopped as a
        // cancellation, waited for, and the interrupt raised.
        // The run is asked for with the GIL held: the core reads the
        // environment then, and other Python threads rewrite it only with
        // the GIL (os.environ).
        let run = self
            .inner
            .ask_blocking(&spec.inner, cancel.map(|c| &c.inner))
            .map_err(|e| to_pyerr(py, e))?;
        let mut interrupt: Option<PyErr> = None;
        let outcome = py.detach(|| {
            run.wait_checked(SIGNAL_POLL, || {
                interrupt.is_some()
                    || Python::attach(|py| match py.check_signals() {
                        Ok(()) => false,
                        Err(e) => {
                            interrupt = Some(e);
                            true
                        }
                    })
            })
        });
        if let Some(interrupt) = interrupt {
            return Err(interrupt);
        }
        let result = outcome.map_err(|e| to_pyerr(py, e))?;
        RunResult::new(py, result)
    }

    /// Starts a run and calls `callback(result, error)` from a core thread
    /// when it ends; the building block of `run_async`.
    fn _run_with_callback(&self, spec: &Spec, cancel: &CancelToken, callback: Py<PyAny>) {
        self.inner
            .run_callback(&spec.inner, Some(&cancel.inner), move |outcome| {
                Python::try_attach(|py| {
                    let args = match outcome {
                        Ok(r) => match RunResult::new(py, r) {
                            Ok(r) => (
                                r.into_pyobject(py)
                                    .map(|o| o.into_any().unbind())
                                    .unwrap_or_else(|_| py.None()),
                                py.None(),
                            ),
                            Err(e) => (py.None(), e.into_value(py).into_any()),
                        },
                        Err(e) => (py.None(), to_pyerr(py, e).into_value(py).into_any()),
                    };
                    if let Err(e) = callback.call1(py, args) {
                        e.write_unraisable(py, Some(callback.bind(py)));
                    }
                });
            });
    }

    /// Starts a spec in the background and returns its Process at once.
    /// A command that cannot be started is not an error here: the process
    /// settles as ``'killed'`` with ``spawn failed: …`` on its stderr.
    fn start(&self, py: Python<'_>, spec: &Spec) -> PyResult<Process> {
        let inner = self.inner.start(&spec.inner).map_err(|e| to_pyerr(py, e))?;
        Ok(Process { inner })
    }

    /// The process registered as ``id`` (``'bash-1'``), or None.
    fn get(&self, id: &str) -> Option<Process> {
        self.inner.get(id).map(|inner| Process { inner })
    }

    /// The ``owner`` stored at start (or None); NotFoundError for an
    /// unknown id.
    fn owner_of(&self, py: Python<'_>, id: &str) -> PyResult<Option<String>> {
        self.inner.owner_of(id).map_err(|e| to_pyerr(py, e))
    }

    /// Every registered background process, in start order.
    fn list(&self) -> Vec<Process> {
        self.inner
            .list()
            .into_iter()
            .map(|inner| Process { inner })
            .collect()
    }

    /// ``Process.read_output`` of the process registered as ``id``;
    /// NotFoundError for an unknown id.
    fn read_output(&self, py: Python<'_>, id: &str) -> PyResult<ProcessRead> {
        self.inner
            .read_output(id)
            .map(Into::into)
            .map_err(|e| to_pyerr(py, e))
    }

    /// ``Process.kill`` of the process registered as ``id``; NotFoundError
    /// for an unknown id.
    fn kill(&self, py: Python<'_>, id: &str) -> PyResult<bool> {
        self.inner.kill(id).map_err(|e| to_pyerr(py, e))
    }

    /// Forgets a settled process: removes it from the registry and deletes
    /// its spill files and buffered output. StillRunningError while it
    /// runs, NotFoundError for an unknown id.
    fn forget(&self, py: Python<'_>, id: &str) -> PyResult<()> {
        self.inner.forget(id).map_err(|e| to_pyerr(py, e))
    }

    /// Calls `callback(process)` once for each background process that
    /// settles, from a core thread. An exception it raises is reported
    /// through `sys.unraisablehook` and starves no other listener. Returns a
    /// callable that unsubscribes. A callback that refers to this executor
    /// keeps it alive until `close()` (which drops every callback).
    fn on_task_done(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<Unsubscribe> {
        if !callback.bind(py).is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "on_task_done: callback must be callable, got {}",
                callback.bind(py).get_type().name()?
            )));
        }
        let cb = Arc::new(callback);
        let id = self.inner.on_task_done(Arc::new(move |p: &dsh_core::Process| {
            Python::try_attach(|py| {
                let process = Process { inner: p.clone() };
                if let Err(e) = cb.call1(py, (process,)) {
                    e.write_unraisable(py, Some(cb.bind(py)));
                }
            });
        }));
        Ok(Unsubscribe {
            executor: self.inner.clone(),
            id,
        })
    }

    /// Starts a program (docs/spawn.md): ``argv`` is never given to a
    /// shell. ``stdin`` is ``DEVNULL`` (None, the default), ``PIPE``,
    /// ``INHERIT``, or ``bytes``/``str`` written then closed; ``stdout`` and
    /// ``stderr`` are a ``Collect`` (None, the default, is ``Collect()``:
    /// the configured window and spill file), ``PIPE`` (a binary file
    /// object on the handle) or ``INHERIT``. ``env`` maps names to a value,
    /// or to None to remove an inherited variable. ``cwd``, ``grace_ms``,
    /// ``sandbox_policy`` and ``limits`` default as for a command.
    /// ``timeout_ms`` (default None: no timeout) stops the tree as
    /// ``terminate()`` does once it passes; ``timed_out`` then says so.
    ///
    /// Returns once the program has exec'd. Raises InvalidArgumentError
    /// naming a bad field, SpawnError when the program cannot start.
    #[pyo3(signature = (argv, *, cwd=None, env=None, stdin=None, stdout=None, stderr=None, grace_ms=None, sandbox_policy=None, limits=None, timeout_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn spawn(
        &self,
        py: Python<'_>,
        argv: &Bound<'_, PyAny>,
        cwd: Option<&Bound<'_, PyAny>>,
        env: Option<&Bound<'_, PyAny>>,
        stdin: Option<&Bound<'_, PyAny>>,
        stdout: Option<&Bound<'_, PyAny>>,
        stderr: Option<&Bound<'_, PyAny>>,
        grace_ms: Option<&Bound<'_, PyAny>>,
        sandbox_policy: Option<&Bound<'_, PyAny>>,
        limits: Option<&Bound<'_, PyAny>>,
        timeout_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::spawned::Spawned> {
        let f = |name| Field::new(Scope::Spawn, name);
        let argv = argv_list(py, argv, f(FieldName::Argv))?;
        crate::spawned::spawn(
            py,
            &self.inner,
            argv,
            optional_path(cwd, f(FieldName::Cwd), "")?,
            crate::spawned::overlay(env)?,
            stdin,
            stdout,
            stderr,
            number(grace_ms, Scope::Spawn, FieldName::GraceMs)?,
            policy_input(sandbox_policy)?,
            limits_input(limits, Scope::Spawn)?,
            number(timeout_ms, Scope::Spawn, FieldName::TimeoutMs)?,
        )
    }

    /// Starts a terminal session (docs/terminals.md) and returns its
    /// Terminal once the program runs: ``argv`` (a list: the program and its
    /// arguments) or ``command`` (a line for ``bash -c``), exactly one.
    ///
    /// - ``cwd``: the working directory (default: the executor's ``cwd``;
    ///   a relative one is relative to it).
    /// - ``env`` / ``dsh_env``: as for commands; ``TERM`` is
    ///   ``xterm-256color`` unless given.
    /// - ``rows`` / ``cols``: the initial size (default 24 × 80).
    /// - ``grace_ms``: SIGTERM-to-SIGKILL grace of ``terminate()`` (default:
    ///   the executor's).
    /// - ``sandbox_policy``: as for ``resolve``.
    ///
    /// Raises InvalidArgumentError naming a bad field, SpawnError when the
    /// program cannot start.
    #[pyo3(signature = (argv=None, *, command=None, cwd=None, env=None, dsh_env=None, rows=None, cols=None, grace_ms=None, sandbox_policy=None))]
    #[allow(clippy::too_many_arguments)]
    fn spawn_terminal(
        &self,
        py: Python<'_>,
        argv: Option<&Bound<'_, PyAny>>,
        command: Option<&Bound<'_, PyAny>>,
        cwd: Option<&Bound<'_, PyAny>>,
        env: Option<&Bound<'_, PyAny>>,
        dsh_env: Option<&Bound<'_, PyAny>>,
        rows: Option<&Bound<'_, PyAny>>,
        cols: Option<&Bound<'_, PyAny>>,
        grace_ms: Option<&Bound<'_, PyAny>>,
        sandbox_policy: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::terminal::Terminal> {
        let f = |name| Field::new(Scope::Request, name);
        let argv = argv.filter(|a| !a.is_none());
        let command = command.filter(|c| !c.is_none());
        let program = match (argv, command) {
            (Some(a), None) => {
                let argv = argv_list(py, a, f(FieldName::Argv))?;
                dsh_core::TerminalProgram::Argv(argv)
            }
            (None, Some(c)) => {
                dsh_core::TerminalProgram::Command(required_str(c, f(FieldName::Command), "")?)
            }
            (Some(_), Some(_)) => {
                return Err(type_error(
                    py,
                    f(FieldName::Argv),
                    "and command cannot both be given",
                ))
            }
            (None, None) => {
                return Err(type_error(
                    py,
                    f(FieldName::Argv),
                    "is required (or command, a line for bash)",
                ))
            }
        };
        let request = dsh_core::TerminalRequest {
            program,
            cwd: optional_path(cwd, f(FieldName::Cwd), "")?,
            env: string_map(env, f(FieldName::Env))?,
            dsh_env: string_map(dsh_env, f(FieldName::DshEnv))?,
            rows: number(rows, Scope::Request, FieldName::Rows)?,
            cols: number(cols, Scope::Request, FieldName::Cols)?,
            grace_ms: number(grace_ms, Scope::Request, FieldName::GraceMs)?,
            sandbox_policy: policy_input(sandbox_policy)?,
        };
        let spec = self
            .inner
            .resolve_terminal(request)
            .map_err(|e| to_pyerr(py, e))?;
        // Waiting below for the callback thread would deadlock on it.
        dsh_core::refuse_blocking().map_err(|e| to_pyerr(py, e))?;
        // The environment is taken here, on the calling thread, with the GIL.
        let (tx, rx) = mpsc::channel();
        self.inner.spawn_terminal_with(&spec, move |r| {
            let _ = tx.send(r);
        });
        let inner = py
            .detach(move || rx.recv())
            .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("the spawn was lost"))?
            .map_err(|e| to_pyerr(py, e))?;
        Ok(crate::terminal::Terminal::new(inner))
    }

    /// Disposes the executor: kills every running process and everything
    /// its commands left behind (SIGTERM, SIGKILL after ``grace_ms``),
    /// waits for all of them, drops every listener and removes the spill
    /// files. Idempotent; afterwards ``run`` and ``start`` raise
    /// DisposedError.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.dispose_blocking())
            .map_err(|e| to_pyerr(py, e))
    }

    fn __repr__(&self) -> String {
        let c = self.inner.config();
        format!(
            "Executor(timeout_ms={}, max_timeout_ms={}, max_output_bytes={}, grace_ms={}, disposed={})",
            c.timeout_ms,
            c.max_timeout_ms,
            c.max_output_bytes,
            c.grace_ms,
            if self.inner.is_disposed() { "True" } else { "False" }
        )
    }
}

//! Spawned programs (docs/spawn.md) for Python: `Executor.spawn(argv, ...)`
//! with `subprocess`-like stdio, and the `Spawned` handle. Translation
//! only: the request is resolved by the core.

use std::collections::BTreeMap;
use std::os::fd::{IntoRawFd, OwnedFd};

use pyo3::exceptions::PyTimeoutError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyString};

use dsh_core::{Field, FieldName, OutputStream, Scope, SpawnOutput, SpawnStdin};

use crate::results::py_repr;
use crate::waiting::{deadline, wait_until};
use crate::{to_pyerr, type_error, type_name, utf8};

/// ``subprocess.PIPE`` and ``subprocess.DEVNULL``, the values a caller
/// passes, and ``dsh_native.INHERIT`` (the host's own descriptor).
const PIPE: i64 = -1;
const DEVNULL: i64 = -3;
pub(crate) const INHERIT: i64 = -4;

fn field(name: FieldName) -> Field {
    Field::new(Scope::Spawn, name)
}

/// A collected stream (docs/spawn.md): the last ``max_bytes`` bytes in
/// memory, read by offset with :meth:`Spawned.read_from`; with
/// ``spill_max_bytes``, the complete stream in a spill file up to that
/// size. ``Collect()`` (the default of ``spawn``) takes both from the
/// executor's configuration (``max_output_bytes``, ``max_spill_bytes``).
#[pyclass(frozen, module = "dsh_native")]
#[derive(Clone)]
pub struct Collect {
    max_bytes: Option<u64>,
    spill_max_bytes: Option<u64>,
}

#[pymethods]
impl Collect {
    #[new]
    #[pyo3(signature = (max_bytes=None, spill_max_bytes=None))]
    fn new(
        max_bytes: Option<&Bound<'_, PyAny>>,
        spill_max_bytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let max_bytes = collect_size(max_bytes, "max_bytes")?;
        let spill_max_bytes = collect_size(spill_max_bytes, "spill_max_bytes")?;
        if max_bytes.is_none() && spill_max_bytes.is_some() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "spill_max_bytes needs max_bytes (Collect() alone takes both from the configuration)",
            ));
        }
        Ok(Collect {
            max_bytes,
            spill_max_bytes,
        })
    }
    /// The in-memory window in bytes; None: the configured one.
    #[getter]
    fn max_bytes(&self) -> Option<u64> {
        self.max_bytes
    }
    /// The spill file's cap in bytes; None: no spill file (or, with
    /// ``max_bytes`` None too, the configured one).
    #[getter]
    fn spill_max_bytes(&self) -> Option<u64> {
        self.spill_max_bytes
    }
    fn __repr__(&self) -> String {
        let show = |v: Option<u64>| v.map_or("None".into(), |n| n.to_string());
        format!(
            "Collect(max_bytes={}, spill_max_bytes={})",
            show(self.max_bytes),
            show(self.spill_max_bytes)
        )
    }
}

/// A size given to :class:`Collect`: None, or an ``int`` of bytes (or
/// anything ``operator.index`` takes, such as numpy's integers; never a
/// ``bool``) that fits the core's sizes, whose range is checked with the
/// spec. Refused naming the parameter: the class is made before the
/// stream it is for is known, so there is no spec field to name yet.
fn collect_size(value: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<Option<u64>> {
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if v.is_instance_of::<PyBool>() || !v.hasattr("__index__")? {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "Collect: {name} must be an int (bytes) or None, got {}",
            type_name(v)
        )));
    }
    v.extract::<u64>().map(Some).map_err(|_| {
        let got = v.repr().map(|r| r.to_string()).unwrap_or_default();
        let problem = if v.lt(0).unwrap_or(false) {
            "must be 0 or more"
        } else {
            "must be at most 2**64-1"
        };
        pyo3::exceptions::PyValueError::new_err(format!("Collect: {name} {problem}, got {got}"))
    })
}

/// ``stdin``: ``DEVNULL`` (also None, the default), ``PIPE``, ``INHERIT``
/// (the host's own stdin), or ``bytes``/``str`` written then closed.
pub(crate) fn stdin_of(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<SpawnStdin>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let py = value.py();
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(Some(SpawnStdin::Bytes(b.as_bytes().to_vec())));
    }
    if value.is_instance_of::<PyString>() {
        let text = utf8(value, field(FieldName::Stdin), "")?.unwrap_or_default();
        return Ok(Some(SpawnStdin::Bytes(text.into_bytes())));
    }
    match value.extract::<i64>() {
        Ok(PIPE) => Ok(Some(SpawnStdin::Pipe)),
        Ok(DEVNULL) => Ok(Some(SpawnStdin::Null)),
        Ok(INHERIT) => Ok(Some(SpawnStdin::Inherit)),
        _ => Err(type_error(
            py,
            field(FieldName::Stdin),
            &format!(
                "must be DEVNULL, PIPE, INHERIT, bytes or str, got {}",
                type_name(value)
            ),
        )),
    }
}

/// ``stdout`` / ``stderr``: a :class:`Collect` (None, the default, is
/// ``Collect()``), ``PIPE``, or ``INHERIT`` (the host's own descriptor).
/// ``Ok(None)``: the configured collection.
pub(crate) fn output_of(value: Option<&Bound<'_, PyAny>>, name: FieldName) -> PyResult<Option<SpawnOutput>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let py = value.py();
    if let Ok(c) = value.cast::<Collect>() {
        let c = c.get();
        return Ok(c.max_bytes.map(|max_bytes| SpawnOutput::Collect {
            max_bytes,
            spill_max_bytes: c.spill_max_bytes,
        }));
    }
    match value.extract::<i64>() {
        Ok(PIPE) => Ok(Some(SpawnOutput::Pipe)),
        Ok(INHERIT) => Ok(Some(SpawnOutput::Inherit)),
        _ => Err(type_error(
            py,
            field(name),
            &format!("must be a Collect, PIPE or INHERIT, got {}", type_name(value)),
        )),
    }
}

/// ``env``: a dict (or any Mapping) of str to str, or to None to remove an
/// inherited variable.
pub(crate) fn overlay(value: Option<&Bound<'_, PyAny>>) -> PyResult<BTreeMap<String, Option<String>>> {
    let mut out = BTreeMap::new();
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(out);
    };
    let py = v.py();
    let f = field(FieldName::Env);
    let entries = crate::mapping_entries(v)?
        .ok_or_else(|| type_error(py, f, &format!("must be a dict, got {}", type_name(v))))?;
    for (key, value) in entries {
        let Some(k) = utf8(&key, f, "a key ")? else {
            return Err(type_error(
                py,
                f,
                &format!("keys must be str, got {}", type_name(&key)),
            ));
        };
        let v = if value.is_none() {
            None
        } else {
            match utf8(&value, f, &format!("the value of {k:?} "))? {
                Some(s) => Some(s),
                None => {
                    let problem = format!(
                        "the value of {k:?} must be str or None, got {}",
                        type_name(&value)
                    );
                    return Err(type_error(py, f, &problem));
                }
            }
        };
        out.insert(k, v);
    }
    Ok(out)
}

/// A file object over a raw pipe end, as ``subprocess.Popen`` gives them.
fn file_object(py: Python<'_>, fd: Option<OwnedFd>, mode: &str) -> PyResult<Option<Py<PyAny>>> {
    let Some(fd) = fd else { return Ok(None) };
    let io = py.import("io")?;
    // The file object owns the descriptor from here on (closefd).
    let raw = fd.into_raw_fd();
    Ok(Some(io.call_method1("open", (raw, mode))?.unbind()))
}

/// A program started with :meth:`Executor.spawn` (docs/spawn.md): its pid,
/// its piped streams as file objects, offset reads of its collected
/// streams, and its whole tree.
#[pyclass(frozen, module = "dsh_native")]
pub struct Spawned {
    inner: dsh_core::Process,
    pid: i32,
    stdin: Option<Py<PyAny>>,
    stdout: Option<Py<PyAny>>,
    stderr: Option<Py<PyAny>>,
}

impl Spawned {
    pub(crate) fn new(py: Python<'_>, s: dsh_core::Spawned) -> PyResult<Spawned> {
        Ok(Spawned {
            pid: s.exec_pid().map_err(|e| to_pyerr(py, e))?,
            stdin: file_object(py, s.stdin, "wb")?,
            stdout: file_object(py, s.stdout, "rb")?,
            stderr: file_object(py, s.stderr, "rb")?,
            inner: s.process,
        })
    }
}

/// One offset read of a collected stream (docs/spawn.md).
#[pyclass(frozen, module = "dsh_native", get_all)]
pub struct OffsetRead {
    /// The stream from the offset read (the whole window when ``lossy``),
    /// never ending inside a character while the stream is open.
    text: String,
    /// Where the next read starts.
    next_offset: u64,
    /// The offset had slid out of the window: ``text`` is the whole window.
    lossy: bool,
    /// The file holding the complete stream, once it outgrew its window.
    spill_path: Option<String>,
    /// Why a stream that outgrew its window has no spill file.
    spill_error: Option<String>,
}

#[pymethods]
impl OffsetRead {
    fn __repr__(&self) -> String {
        format!(
            "OffsetRead(text={}, next_offset={}, lossy={})",
            py_repr(&self.text),
            self.next_offset,
            if self.lossy { "True" } else { "False" }
        )
    }
}

#[pymethods]
impl Spawned {
    /// The program's pid, the root of its tree.
    #[getter]
    fn pid(&self) -> i32 {
        self.pid
    }
    /// Its stdin (a binary file object) when spawned with ``stdin=PIPE``.
    #[getter]
    fn stdin(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.stdin.as_ref().map(|f| f.clone_ref(py))
    }
    /// Its stdout (a binary file object) when spawned with ``stdout=PIPE``.
    #[getter]
    fn stdout(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.stdout.as_ref().map(|f| f.clone_ref(py))
    }
    /// Its stderr (a binary file object) when spawned with ``stderr=PIPE``.
    #[getter]
    fn stderr(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.stderr.as_ref().map(|f| f.clone_ref(py))
    }
    /// The exit status once settled, if it exited by itself; else None.
    #[getter]
    fn exit_code(&self) -> Option<i32> {
        self.inner.exit_code()
    }
    /// True once it was stopped at its ``timeout_ms``.
    #[getter]
    fn timed_out(&self) -> bool {
        self.inner.timed_out()
    }
    /// The name of the signal that ended it (``'SIGTERM'``) once settled.
    #[getter]
    fn signal(&self) -> Option<String> {
        self.inner.signal()
    }
    /// Once settled: the limit that ended it (``'memory'``,
    /// ``'processes'``, ``'cpu'``, ``'file_size'``); else None
    /// (docs/limits.md).
    #[getter]
    fn limit(&self) -> Option<&'static str> {
        self.inner.limit().map(dsh_core::LimitKind::as_str)
    }
    /// Once settled: the mechanism of each limit it ran with; empty
    /// without limits.
    #[getter]
    fn limits_enforcement(&self) -> BTreeMap<&'static str, &'static str> {
        crate::results::enforcement_map(&self.inner.limits_enforcement())
    }
    /// True once the program has exited and its collected streams closed.
    #[getter]
    fn settled(&self) -> bool {
        self.inner.is_settled()
    }
    /// True once its whole tree has ended (the program and everything it
    /// started, in whatever session).
    #[getter]
    fn tree_gone(&self) -> bool {
        self.inner.tree_gone()
    }
    /// A non-consuming read of a collected stream (``'stdout'`` or
    /// ``'stderr'``) from the whole-stream byte offset ``offset``.
    #[pyo3(signature = (stream, offset=0))]
    fn read_from(&self, py: Python<'_>, stream: &str, offset: u64) -> PyResult<OffsetRead> {
        let which = match stream {
            "stdout" => OutputStream::Stdout,
            "stderr" => OutputStream::Stderr,
            other => {
                return Err(type_error(
                    py,
                    field(FieldName::Stdout),
                    &format!("stream must be 'stdout' or 'stderr', got {other:?}"),
                ))
            }
        };
        let r = self.inner.read_from(which, offset);
        Ok(OffsetRead {
            text: r.text,
            next_offset: r.next_offset,
            lossy: r.lossy,
            spill_path: r.spill_path,
            spill_error: r.spill_error,
        })
    }
    /// SIGTERM to the whole tree, SIGKILL after the grace to what is left,
    /// even after the program itself exited. Only the first call acts.
    fn terminate(&self, py: Python<'_>) -> PyResult<()> {
        self.inner.terminate().map_err(|e| to_pyerr(py, e))
    }
    /// Blocks (GIL released) until the program has settled; TimeoutError
    /// after ``timeout`` seconds (None: no limit). Ctrl-C interrupts the wait.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let settled = wait_until(py, deadline(timeout)?, |slice| {
            Ok(self.inner.wait_timeout(Some(slice))?.then_some(()))
        })?;
        settled.ok_or_else(|| PyTimeoutError::new_err(format!("pid {} is still running", self.pid)))
    }
    /// Blocks until the whole tree has ended (see ``tree_gone``);
    /// TimeoutError after ``timeout`` seconds.
    #[pyo3(signature = (timeout=None))]
    fn wait_tree(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let gone = wait_until(py, deadline(timeout)?, |slice| {
            Ok(self.inner.wait_tree_timeout(Some(slice))?.then_some(()))
        })?;
        gone.ok_or_else(|| PyTimeoutError::new_err(format!("the tree of pid {} is still running", self.pid)))
    }
    fn __repr__(&self) -> String {
        format!(
            "Spawned(pid={}, exit_code={}, signal={})",
            self.pid,
            self.inner.exit_code().map_or("None".into(), |c| c.to_string()),
            self.inner.signal().map_or("None".into(), |s| py_repr(&s))
        )
    }
}

/// `Executor.spawn`'s request, resolved by the core, then started.
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn(
    py: Python<'_>,
    exec: &dsh_core::Executor,
    argv: Vec<String>,
    cwd: Option<std::path::PathBuf>,
    env: BTreeMap<String, Option<String>>,
    stdin: Option<&Bound<'_, PyAny>>,
    stdout: Option<&Bound<'_, PyAny>>,
    stderr: Option<&Bound<'_, PyAny>>,
    grace_ms: Option<dsh_core::Num>,
    sandbox_policy: Option<dsh_core::SandboxPolicyInput>,
    limits: Option<dsh_core::LimitsInput>,
    timeout_ms: Option<dsh_core::Num>,
) -> PyResult<Spawned> {
    let request = dsh_core::SpawnRequest {
        argv,
        cwd,
        env,
        stdin: stdin_of(stdin)?,
        stdout: output_of(stdout, FieldName::Stdout)?,
        stderr: output_of(stderr, FieldName::Stderr)?,
        grace_ms,
        sandbox_policy,
        limits,
        timeout_ms,
    };
    let spec = exec.resolve_spawn(request).map_err(|e| to_pyerr(py, e))?;
    // The environment is read on this thread, inside the call (the GIL
    // held keeps os.environ still); the spawn waits only for the exec.
    let spawned = exec.spawn(&spec).map_err(|e| to_pyerr(py, e))?;
    Spawned::new(py, spawned)
}

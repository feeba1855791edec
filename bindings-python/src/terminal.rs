//! Terminal sessions for Python (docs/terminals.md): blocking calls release
//! the GIL and wake up regularly for Ctrl-C; the async ones settle asyncio
//! futures from a core thread; the output is an async iterator.

use pyo3::exceptions::PyTimeoutError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyString};

use dsh_core::{Field, FieldName, Scope, TerminalSignal};

use crate::waiting::{deadline, wait_until, withdraw_on_cancel};
use crate::{number, required_str, to_pyerr, type_error, utf8};

fn field(name: FieldName) -> Field {
    Field::new(Scope::Terminal, name)
}

/// Settles one asyncio future from any thread, on its loop.
struct Settle {
    event_loop: Py<PyAny>,
    future: Py<PyAny>,
    resolve: Py<PyAny>,
}

impl Settle {
    fn call(&self, result: Option<Py<PyAny>>, error: Option<PyErr>) {
        Python::try_attach(|py| {
            let result = result.unwrap_or_else(|| py.None());
            let error = error.map_or_else(|| py.None(), |e| e.into_value(py).into_any());
            let args = (
                self.resolve.clone_ref(py),
                self.future.clone_ref(py),
                result,
                error,
            );
            // A closed loop cannot be told; nothing is waiting on it then.
            let _ = self.event_loop.call_method1(py, "call_soon_threadsafe", args);
        });
    }
}

/// A future on the running loop, and what settles it.
fn future_pair(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Settle)> {
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let future = event_loop.call_method0("create_future")?;
    let resolve = py.import("dsh_native._helpers")?.getattr("resolve_future")?;
    let settle = Settle {
        event_loop: event_loop.unbind(),
        future: future.clone().unbind(),
        resolve: resolve.unbind(),
    };
    Ok((future, settle))
}

/// The foreground process group of a terminal.
#[pyclass(frozen, module = "dsh_native")]
pub struct Foreground {
    /// The group the terminal driver publishes as its foreground.
    #[pyo3(get)]
    process_group_id: i32,
    /// True only when the kernel shows that group blocked reading the
    /// terminal (docs/terminals.md).
    #[pyo3(get)]
    input_waiting: bool,
}

#[pymethods]
impl Foreground {
    fn __repr__(&self) -> String {
        format!(
            "Foreground(process_group_id={}, input_waiting={})",
            self.process_group_id,
            if self.input_waiting { "True" } else { "False" }
        )
    }
}

/// A terminal session (``Executor.spawn_terminal``): a program leading a
/// new session whose controlling terminal is a pseudo-terminal.
///
/// Output: ``read_output()`` (what is there), ``read(timeout)`` (waits for
/// some), or ``async for chunk in terminal`` (until the output ends); all
/// take from the same unread output, never the same text twice, never
/// split inside a UTF-8 character. Unread output is bounded by
/// ``max_output_bytes``: beyond it the program waits for a reader.
#[pyclass(frozen, module = "dsh_native")]
pub struct Terminal {
    pub(crate) inner: dsh_core::Terminal,
    /// Wakes the async readers (`dsh_native._helpers.Readiness`), made by
    /// the first one.
    readiness: PyOnceLock<Py<PyAny>>,
}

impl Terminal {
    pub(crate) fn new(inner: dsh_core::Terminal) -> Self {
        Terminal {
            inner,
            readiness: PyOnceLock::new(),
        }
    }
}

/// The bytes of a write, held (never copied) until the terminal took them:
/// the caller's `bytes` object itself, or a `str`'s UTF-8 encoding (made
/// once: a `str` is not stored as UTF-8).
struct Held {
    _owner: Py<PyBytes>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: `ptr` and `len` describe the contents of `_owner`, a bytes object:
// immutable, and alive as long as the object, which `_owner` keeps alive.
// Reading them needs no GIL, and a `Py` dropped without the GIL only queues
// its decref for the next time a thread holds it.
unsafe impl Send for Held {}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: valid, immutable and alive while `self` is (see `Send`).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

fn held_bytes(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Held> {
    let bytes = if let Ok(text) = data.cast::<PyString>() {
        match text.encode_utf8() {
            Ok(b) => b,
            // A lone surrogate: the error naming the field and where.
            Err(e) => return Err(utf8(data, field(FieldName::Data), "").err().unwrap_or(e)),
        }
    } else {
        data.cast::<PyBytes>()
            .map_err(|_| type_error(py, field(FieldName::Data), "must be str or bytes"))?
            .clone()
    };
    let slice = bytes.as_bytes();
    Ok(Held {
        ptr: slice.as_ptr(),
        len: slice.len(),
        _owner: bytes.unbind(),
    })
}

#[pymethods]
impl Terminal {
    /// The program's pid: the leader of the session, and its group id.
    #[getter]
    fn pid(&self) -> i32 {
        self.inner.pid()
    }

    /// True once the program has exited.
    #[getter]
    fn exited(&self) -> bool {
        self.inner.has_exited()
    }

    /// The program's exit code; None while it runs or when a signal ended it.
    #[getter]
    fn exit_code(&self) -> Option<i32> {
        self.inner.exit_code()
    }

    /// The signal that ended the program (``'SIGHUP'``), if one did.
    #[getter]
    fn signal(&self) -> Option<String> {
        self.inner.signal()
    }

    /// True when the program ended but nobody could say how.
    #[getter]
    fn exit_status_unavailable(&self) -> bool {
        self.inner.exit_status_unavailable()
    }

    /// After ``terminate()`` or close: members of the session still alive
    /// when the stop finished (expected: 0).
    #[getter]
    fn survivors(&self) -> u32 {
        self.inner.survivors()
    }

    /// Consuming read: the output since the previous read ('' if none).
    fn read_output(&self) -> String {
        self.inner.read_output().text
    }

    /// True once the output has ended and everything was read.
    #[getter]
    fn output_ended(&self) -> bool {
        self.inner.output_ended()
    }

    /// Waits (GIL released) until there is output, it has ended, or
    /// ``timeout`` seconds passed (None: no limit), and takes what there is
    /// ('' at the end or on timeout).
    #[pyo3(signature = (timeout=None))]
    fn read(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<String> {
        let read = wait_until(py, deadline(timeout)?, |slice| {
            let read = self.inner.read_output_timeout(Some(slice))?;
            Ok((!read.text.is_empty() || read.ended).then_some(read.text))
        })?;
        // Nothing before the deadline: ''.
        Ok(read.unwrap_or_default())
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next chunk of output; StopAsyncIteration once it has ended. A
    /// coroutine that takes the output itself when it runs again after a
    /// wake-up: a read given up while it waited (`asyncio.wait_for`, a
    /// cancelled task) has taken nothing (`dsh_native._helpers.next_chunk`).
    fn __anext__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let helpers = py.import("dsh_native._helpers")?;
        let readiness = slf
            .get()
            .readiness
            .get_or_try_init(py, || helpers.getattr("Readiness")?.call0().map(Bound::unbind))?;
        helpers.getattr("next_chunk")?.call1((slf, readiness))
    }

    /// Calls ``on_ready()`` on the callback thread once there is output to
    /// read or the output has ended; takes nothing (for ``Readiness``).
    fn _when_output_ready(&self, py: Python<'_>, on_ready: Py<PyAny>) -> PyResult<()> {
        self.inner
            .when_output_ready(move || {
                Python::try_attach(|py| {
                    if let Err(e) = on_ready.call0(py) {
                        e.write_unraisable(py, Some(on_ready.bind(py)));
                    }
                });
            })
            .map_err(|e| to_pyerr(py, e))
    }

    /// Writes ``data`` (str as UTF-8, or bytes) to the terminal's input as
    /// typed, and returns once the terminal took all of it (GIL released,
    /// waking up regularly for Ctrl-C). A bytes object is held until then,
    /// never copied (a str's UTF-8 encoding is made once and held instead).
    /// Interrupted (KeyboardInterrupt), the rest stays queued and is still
    /// written, in order, as the program reads. TerminalClosedError once
    /// the program has exited.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let held = held_bytes(py, data)?;
        let pending = py
            .detach(|| self.inner.write_now(held))
            .map_err(|e| to_pyerr(py, e))?;
        if let Some(mut rest) = pending {
            wait_until(py, None, |slice| Ok(rest.wait_timeout(slice)?.then_some(())))?;
        }
        Ok(())
    }

    /// ``write`` as an awaitable that never blocks the event loop.
    fn write_async<'py>(&self, py: Python<'py>, data: &Bound<'_, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let held = held_bytes(py, data)?;
        let (future, settle) = future_pair(py)?;
        match self.inner.write_now(held) {
            // Taken at once: settled here, on the loop's own thread.
            Ok(None) => {
                future.call_method1("set_result", (py.None(),))?;
            }
            Ok(Some(rest)) => rest.then(move |r| {
                Python::try_attach(|py| settle.call(None, r.err().map(|e| to_pyerr(py, e))));
            }),
            Err(e) => {
                future.call_method1("set_exception", (to_pyerr(py, e).into_value(py),))?;
            }
        }
        Ok(future)
    }

    /// Changes the window size (rows and columns, 1 to 65535); the
    /// foreground group gets SIGWINCH.
    fn resize(&self, py: Python<'_>, rows: &Bound<'_, PyAny>, cols: &Bound<'_, PyAny>) -> PyResult<()> {
        let need = |v: &Bound<'_, PyAny>, name| -> PyResult<dsh_core::Num> {
            number(Some(v), Scope::Terminal, name)?
                .ok_or_else(|| type_error(py, field(name), "must be a number, got None"))
        };
        let (rows, cols) = (need(rows, FieldName::Rows)?, need(cols, FieldName::Cols)?);
        self.inner.resize(rows, cols).map_err(|e| to_pyerr(py, e))
    }

    /// The foreground process group and whether the kernel shows it waiting
    /// for input; None once the program has exited.
    fn inspect_foreground(&self, py: Python<'_>) -> Option<Foreground> {
        py.detach(|| self.inner.inspect_foreground())
            .map(|fg| Foreground {
                process_group_id: fg.process_group_id,
                input_waiting: fg.input_waiting,
            })
    }

    /// Blocks until the kernel shows the foreground group waiting for
    /// input, ``timeout`` seconds passed (None: no limit), or the program
    /// exited; returns whether it is waiting. Right after a write it is
    /// True only once the program took what was written and waits again.
    #[pyo3(signature = (timeout=None))]
    fn wait_input_waiting(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let waiting = wait_until(py, deadline(timeout)?, |slice| {
            if self.inner.wait_input_waiting(Some(slice))? {
                Ok(Some(true))
            } else {
                Ok(self.inner.has_exited().then_some(false))
            }
        })?;
        Ok(waiting.unwrap_or(false))
    }

    /// Sends ``signal`` (``'SIGINT'``, ``'SIGTERM'``, ``'SIGKILL'``,
    /// ``'SIGTSTP'`` or ``'SIGHUP'``) to the foreground process group and
    /// returns that group's id. TerminalClosedError when there is none;
    /// InvalidArgumentError for SIGKILL while the terminal's own program is
    /// in the foreground (it would end the session: ``terminate()`` does).
    fn signal_foreground(&self, py: Python<'_>, signal: &Bound<'_, PyAny>) -> PyResult<i32> {
        let f = field(FieldName::Signal);
        let name = required_str(signal, f, "")?;
        let sig = TerminalSignal::parse(f, &name).map_err(|e| to_pyerr(py, e))?;
        self.inner.signal_foreground(sig).map_err(|e| to_pyerr(py, e))
    }

    /// Ends every member of the session (SIGHUP and SIGTERM, SIGKILL after
    /// the grace period) and returns once none is left, with the number of
    /// survivors (expected: 0). Idempotent.
    fn terminate(&self, py: Python<'_>) -> PyResult<u32> {
        py.detach(|| self.inner.terminate_blocking())
            .map_err(|e| to_pyerr(py, e))
    }

    /// ``terminate`` as an awaitable that never blocks the event loop.
    fn terminate_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (future, settle) = future_pair(py)?;
        self.inner.terminate_with(move |n| {
            Python::try_attach(|py| match n.into_pyobject(py) {
                Ok(n) => settle.call(Some(n.into_any().unbind()), None),
                Err(e) => settle.call(None, Some(e.into())),
            });
        });
        Ok(future)
    }

    /// Blocks until the program exits; TimeoutError after ``timeout``
    /// seconds (None: no limit).
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let exited = wait_until(py, deadline(timeout)?, |slice| {
            Ok(self.inner.wait_timeout(Some(slice))?.then_some(()))
        })?;
        exited
            .ok_or_else(|| PyTimeoutError::new_err(format!("terminal {} is still running", self.inner.pid())))
    }

    /// An asyncio future that completes (with None) when the program exits.
    fn wait_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (future, settle) = future_pair(py)?;
        let waiter = self.inner.when_exited(move || settle.call(None, None));
        let terminal = self.inner.clone();
        withdraw_on_cancel(py, &future, move || {
            terminal.cancel_when_exited(waiter);
        })?;
        Ok(future)
    }

    fn __repr__(&self) -> String {
        format!(
            "Terminal(pid={}, exited={}, exit_code={}, signal={})",
            self.inner.pid(),
            if self.inner.has_exited() { "True" } else { "False" },
            self.inner.exit_code().map_or("None".into(), |c| c.to_string()),
            self.inner.signal().map_or("None".into(), |s| format!("'{s}'"))
        )
    }
}

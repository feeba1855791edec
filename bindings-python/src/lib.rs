//! The Python face of dsh-native. It only translates: Python values into
//! core inputs, core results into typed objects, core errors into the
//! exception classes of `dsh_native._errors` (one mapping, `to_pyerr`).

mod executor;
mod results;
mod spawned;
mod terminal;
mod waiting;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyBool;

use dsh_core::{DshError, Field, FieldName, NameStyle, Num, Scope};

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn error_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let module = ERRORS.get_or_try_init(py, || py.import("dsh_native._errors").map(Bound::unbind))?;
    module.bind(py).getattr(name)
}

/// The one mapping from core errors to Python exceptions.
pub(crate) fn to_pyerr(py: Python<'_>, e: DshError) -> PyErr {
    let message = e.message(NameStyle::Snake);
    let built = (|| -> PyResult<PyErr> {
        let exc = match &e {
            DshError::InvalidArgument { field, .. } => {
                let exc = error_class(py, "InvalidArgumentError")?.call1((message.clone(),))?;
                exc.setattr("field", field.path(NameStyle::Snake))?;
                exc
            }
            DshError::Spawn { errno, .. } => {
                error_class(py, "SpawnError")?.call1((*errno, message.clone()))?
            }
            DshError::NotFound(id) => {
                let exc = error_class(py, "NotFoundError")?.call1((message.clone(),))?;
                exc.setattr("id", id)?;
                exc
            }
            DshError::Disposed => error_class(py, "DisposedError")?.call1((message.clone(),))?,
            DshError::AlreadyCancelled => {
                error_class(py, "AlreadyCancelledError")?.call1((message.clone(),))?
            }
            DshError::SandboxUnavailable(_) => {
                error_class(py, "SandboxUnavailableError")?.call1((message.clone(),))?
            }
            DshError::BlockingInAsync => error_class(py, "BlockingCallError")?.call1((message.clone(),))?,
            DshError::Internal(_) => error_class(py, "InternalError")?.call1((message.clone(),))?,
            DshError::StillRunning(id) => {
                let exc = error_class(py, "StillRunningError")?.call1((message.clone(),))?;
                exc.setattr("id", id)?;
                exc
            }
            DshError::ForkedChild { .. } => error_class(py, "ForkedChildError")?.call1((message.clone(),))?,
            DshError::LimitUnavailable { limit, .. } => {
                let exc = error_class(py, "LimitUnavailableError")?.call1((message.clone(),))?;
                exc.setattr("limit", limit.as_str())?;
                exc
            }
            DshError::StdinClosed { id, why } => {
                let exc = error_class(py, "StdinClosedError")?.call1((libc_epipe(), message.clone()))?;
                exc.setattr("id", id)?;
                exc.setattr("reason", why.as_str())?;
                exc
            }
            DshError::TerminalClosed(_) => {
                error_class(py, "TerminalClosedError")?.call1((message.clone(),))?
            }
        };
        Ok(PyErr::from_value(exc))
    })();
    built.unwrap_or_else(|err| err)
}

/// EPIPE, the errno of a write to a pipe nobody reads (Linux: 32).
fn libc_epipe() -> i32 {
    32
}

/// An `InvalidArgumentError` for a value Python handed over with the wrong
/// type (the core never sees it).
pub(crate) fn type_error(py: Python<'_>, field: Field, problem: &str) -> PyErr {
    let e = DshError::InvalidArgument {
        field,
        problem: problem.to_owned(),
    };
    to_pyerr(py, e)
}

/// The name of a value's type (`int`, `list`), for "got …".
pub(crate) fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type().name().map(|n| n.to_string()).unwrap_or_default()
}

/// The entries of a dict or of any other `collections.abc.Mapping`, as the
/// stubs promise (`os.environ`, a `MappingProxyType`, a `ChainMap`); None
/// for anything else (each caller says what it expected).
pub(crate) type Entries<'py> = Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>;

pub(crate) fn mapping_entries<'py>(v: &Bound<'py, PyAny>) -> PyResult<Option<Entries<'py>>> {
    if let Ok(dict) = v.cast::<pyo3::types::PyDict>() {
        return Ok(Some(dict.iter().collect()));
    }
    let Ok(mapping) = v.cast::<pyo3::types::PyMapping>() else {
        return Ok(None);
    };
    let mut entries = Vec::new();
    for item in mapping.items()?.iter() {
        entries.push(item.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>()?);
    }
    Ok(Some(entries))
}

/// A Python `str` as UTF-8 text: `Ok(None)` when `v` is not a `str` (each
/// caller says what it expected), and an InvalidArgumentError naming
/// `field` when UTF-8 cannot encode it: a lone surrogate, such as
/// `os.fsdecode` makes of bytes that are not UTF-8, which no `String` the
/// core takes can hold. `what` prefixes the problem when the text is one
/// part of `field` (`value of 'A' `, `item 1 `).
pub(crate) fn utf8(v: &Bound<'_, PyAny>, field: Field, what: &str) -> PyResult<Option<String>> {
    let Ok(s) = v.cast::<pyo3::types::PyString>() else {
        return Ok(None);
    };
    match s.to_cow() {
        Ok(text) => Ok(Some(text.into_owned())),
        Err(e) => {
            let py = v.py();
            // The UnicodeEncodeError says where; the message shows it as
            // Python writes it ('\ud800').
            let at = e
                .value(py)
                .getattr("start")
                .and_then(|i| i.extract::<usize>())
                .ok()
                .and_then(|i| {
                    let ch = s.get_item(i).and_then(|c| c.repr()).ok()?;
                    Some(format!(": {ch} at index {i}"))
                })
                .unwrap_or_default();
            Err(type_error(
                py,
                field,
                &format!("{what}is not encodable as UTF-8 (a lone surrogate{at})"),
            ))
        }
    }
}

/// A value that must be a `str`: its UTF-8 text, else an
/// InvalidArgumentError naming `field` (`{what}must be a str, got int`).
pub(crate) fn required_str(v: &Bound<'_, PyAny>, field: Field, what: &str) -> PyResult<String> {
    utf8(v, field, what)?.ok_or_else(|| {
        type_error(
            v.py(),
            field,
            &format!("{what}must be a str, got {}", type_name(v)),
        )
    })
}

/// A Python number as the core's `Num`; the core checks its range.
pub(crate) fn number(
    value: Option<&Bound<'_, PyAny>>,
    scope: Scope,
    name: FieldName,
) -> PyResult<Option<Num>> {
    let Some(v) = value else { return Ok(None) };
    if v.is_none() {
        return Ok(None);
    }
    let field = Field::new(scope, name);
    if v.is_instance_of::<PyBool>() {
        return Err(type_error(v.py(), field, "must be a number, got a bool"));
    }
    match v.extract::<f64>() {
        Ok(f) => Ok(Some(Num(f))),
        Err(_) => Err(type_error(
            v.py(),
            field,
            &format!(
                "must be a number, got {}",
                v.repr().map(|r| r.to_string()).unwrap_or_default()
            ),
        )),
    }
}

/// How this host would enforce each limit: ``{'memory': 'cgroup-v1',
/// 'processes': 'cgroup-v1', 'cpu': 'rlimit', 'file_size': 'rlimit',
/// 'open_files': 'rlimit'}``, with ``'unsupported'`` for a limit a command
/// cannot ask for here (it raises LimitUnavailableError).
#[pyfunction]
fn limits_support() -> std::collections::BTreeMap<&'static str, &'static str> {
    results::enforcement_map(&dsh_core::limits_support())
}

/// Why this host's confined commands run without their read-only mounts
/// (their facts say ``metadata`` False; docs/sandbox.md); None where they
/// run in them.
#[pyfunction]
fn metadata_unavailable() -> Option<&'static str> {
    dsh_core::metadata_unavailable()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(limits_support, m)?)?;
    m.add_function(wrap_pyfunction!(metadata_unavailable, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<executor::Executor>()?;
    m.add_class::<executor::Process>()?;
    m.add_class::<executor::CancelToken>()?;
    m.add_class::<executor::Unsubscribe>()?;
    m.add_class::<terminal::Terminal>()?;
    m.add_class::<terminal::Foreground>()?;
    m.add_class::<results::Spec>()?;
    m.add_class::<results::RunResult>()?;
    m.add_class::<results::CollectedOutput>()?;
    m.add_class::<results::ProcessRead>()?;
    m.add_class::<results::SandboxPolicy>()?;
    m.add_class::<results::SandboxInfo>()?;
    m.add_class::<spawned::Spawned>()?;
    m.add_class::<spawned::Collect>()?;
    m.add_class::<spawned::OffsetRead>()?;
    m.add("INHERIT", spawned::INHERIT)?;
    Ok(())
}

//! Typed, immutable result objects with readable reprs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

/// A string as Python's `repr()` writes it (single quotes unless the text
/// holds one and no double quote).
pub(crate) fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// A path as Python code sees one: a `str` decoded with the filesystem
/// encoding and surrogateescape (`os.fsdecode`), so bytes that are not
/// UTF-8 survive and `os.fsencode` gives them back.
pub(crate) fn path_str<'py>(py: Python<'py>, p: &Path) -> Bound<'py, PyString> {
    p.as_os_str()
        .into_pyobject(py)
        .unwrap_or_else(|never| match never {})
}

/// `repr()` of that `str`.
fn path_repr(py: Python<'_>, p: &Path) -> String {
    path_str(py, p).repr().map(|r| r.to_string()).unwrap_or_default()
}

fn repr_str(s: &Option<String>) -> String {
    match s {
        Some(s) => py_repr(s),
        None => "None".into(),
    }
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// A spec's sandbox policy: the mode and the root ``workspace-write`` opens.
/// It can be passed back to ``resolve`` as ``sandbox_policy``.
#[pyclass(frozen, module = "dsh_native")]
#[derive(Clone)]
pub struct SandboxPolicy {
    /// ``'read-only'``, ``'workspace-write'`` or ``'danger-full-access'``.
    #[pyo3(get)]
    pub mode: String,
    pub workspace_root: PathBuf,
    /// ``'allow'``, ``'deny'`` or ``'loopback'`` (docs/sandbox.md).
    #[pyo3(get)]
    pub network: String,
}

#[pymethods]
impl SandboxPolicy {
    /// The absolute root ``workspace-write`` opens: a ``str`` as
    /// ``os.fsdecode`` makes it (``os.fsencode`` gives back the bytes).
    #[getter]
    fn workspace_root<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        path_str(py, &self.workspace_root)
    }
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "SandboxPolicy(mode={}, workspace_root={}, network={})",
            py_repr(&self.mode),
            path_repr(py, &self.workspace_root),
            py_repr(&self.network)
        )
    }
}

/// A fully resolved spec, made by ``Executor.resolve``: every field explicit
/// (docs/requests.md). Immutable.
#[pyclass(frozen, module = "dsh_native")]
pub struct Spec {
    pub inner: dsh_core::Spec,
}

#[pymethods]
impl Spec {
    /// The command, run as ``bash -c -- command``.
    #[getter]
    fn command(&self) -> &str {
        &self.inner.command
    }
    /// The absolute workdir: a ``str`` as ``os.fsdecode`` makes it; passing
    /// it back gives the same bytes.
    #[getter]
    fn workdir<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        path_str(py, &self.inner.workdir)
    }
    /// The effective timeout of a foreground run, in milliseconds.
    #[getter]
    fn timeout_ms(&self) -> u64 {
        self.inner.timeout_ms
    }
    /// The in-memory stdout window of a foreground run, in bytes.
    #[getter]
    fn stdout_max_bytes(&self) -> u64 {
        self.inner.stdout_max_bytes
    }
    /// The bytes written to stdin, or None (stdin is ``/dev/null``).
    #[getter]
    fn stdin<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.inner.stdin.as_deref().map(|b| PyBytes::new(py, b))
    }
    /// True when the command gets a stdin pipe (``stdin=PIPE``).
    #[getter]
    fn stdin_pipe(&self) -> bool {
        self.inner.stdin_pipe
    }
    /// What a foreground run does at its timeout: ``'kill'`` or
    /// ``'background'``.
    #[getter]
    fn on_expiry(&self) -> &'static str {
        self.inner.on_expiry.as_str()
    }
    /// Variables merged over the scrubbed host environment, or None.
    #[getter]
    fn env(&self) -> Option<BTreeMap<String, String>> {
        self.inner.env.clone()
    }
    /// Managed ``DSH_*`` variables, merged last, or None.
    #[getter]
    fn dsh_env(&self) -> Option<BTreeMap<String, String>> {
        self.inner.dsh_env.clone()
    }
    /// The opaque owner token kept with a background process, or None.
    #[getter]
    fn owner(&self) -> Option<&str> {
        self.inner.owner.as_deref()
    }
    /// The sandbox policy the command runs under, or None (unconfined).
    #[getter]
    fn sandbox_policy(&self) -> Option<SandboxPolicy> {
        self.inner.sandbox_policy.as_ref().map(|p| SandboxPolicy {
            mode: p.mode.as_str().to_owned(),
            workspace_root: p.workspace_root.clone(),
            network: p.network.as_str().to_owned(),
        })
    }
    /// The limits the command runs with, by name (``memory_bytes``,
    /// ``processes``, ``cpu_seconds``, ``file_size_bytes``,
    /// ``open_files``): only those that are set.
    #[getter]
    fn limits(&self) -> BTreeMap<&'static str, u64> {
        self.inner
            .limits
            .entries()
            .map(|(k, v)| {
                (
                    k.field()
                        .name(dsh_core::NameStyle::Snake)
                        .trim_start_matches("limits."),
                    v,
                )
            })
            .collect()
    }
    fn __repr__(&self, py: Python<'_>) -> String {
        let s = &self.inner;
        format!(
            "Spec(command={}, workdir={}, timeout_ms={}, stdout_max_bytes={}, owner={})",
            py_repr(&s.command),
            path_repr(py, &s.workdir),
            s.timeout_ms,
            s.stdout_max_bytes,
            repr_str(&s.owner)
        )
    }
}

/// One stream of a foreground run: its text (the tail, when it outgrew its
/// window) and where the complete stream is.
#[pyclass(frozen, module = "dsh_native")]
pub struct CollectedOutput {
    /// The collected text: the tail of the stream when truncated. Never
    /// splits a UTF-8 character; invalid bytes show as U+FFFD.
    #[pyo3(get)]
    pub text: String,
    /// True when bytes were dropped from the start of the stream.
    #[pyo3(get)]
    pub truncated: bool,
    /// A file holding the complete stream, when truncated and available;
    /// deleted when the executor is closed.
    #[pyo3(get)]
    pub spill_path: Option<String>,
    /// Why a truncated stream has no spill file (past max_spill_bytes, or
    /// the file could not be made or written), else None.
    #[pyo3(get)]
    pub spill_error: Option<String>,
}

impl From<dsh_core::CollectedOutput> for CollectedOutput {
    fn from(o: dsh_core::CollectedOutput) -> Self {
        CollectedOutput {
            text: o.text,
            truncated: o.truncated,
            spill_path: o.spill_path,
            spill_error: o.spill_error,
        }
    }
}

#[pymethods]
impl CollectedOutput {
    fn __repr__(&self) -> String {
        let text = if self.text.len() > 60 {
            let mut cut = 60;
            while !self.text.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}…", py_repr(&self.text[..cut]))
        } else {
            py_repr(&self.text)
        };
        format!(
            "CollectedOutput(text={text}, truncated={}, spill_path={})",
            py_bool(self.truncated),
            repr_str(&self.spill_path)
        )
    }
}

/// Sandbox facts of a run or a settled process (docs/sandbox.md).
#[pyclass(frozen, module = "dsh_native")]
#[derive(Clone)]
pub struct SandboxInfo {
    /// The mode the command ran under.
    #[pyo3(get)]
    pub mode: String,
    /// A conservative guess that the sandbox denied a file operation: a
    /// failed exit whose stderr shows a permission error.
    #[pyo3(get)]
    pub denied: bool,
    /// ``'full'`` (Landlock ABI 3+), ``'partial'`` (older ABIs), or None for
    /// ``'danger-full-access'``.
    #[pyo3(get)]
    pub enforcement: Option<String>,
    /// Metadata changes (``chmod``, ``chown``, timestamps, extended
    /// attributes) were refused too outside the writable places: the
    /// command ran in read-only mounts of its own (docs/sandbox.md,
    /// "Metadata"). Never for ``'danger-full-access'``.
    #[pyo3(get)]
    pub metadata: bool,
    /// Background processes only: True when confinement could not be
    /// applied and the command never ran; else None.
    #[pyo3(get)]
    pub runner_failed: Option<bool>,
    /// The network policy: ``'allow'``, ``'deny'`` or ``'loopback'``.
    #[pyo3(get)]
    pub network: String,
    /// How completely the kernel enforced it: ``'full'``, ``'partial'``, or
    /// None for ``'allow'``.
    #[pyo3(get)]
    pub network_enforcement: Option<String>,
}

impl From<dsh_core::SandboxInfo> for SandboxInfo {
    fn from(i: dsh_core::SandboxInfo) -> Self {
        SandboxInfo {
            mode: i.mode.as_str().to_owned(),
            denied: i.denied,
            enforcement: i.enforcement.map(|e| e.as_str().to_owned()),
            metadata: i.metadata,
            runner_failed: i.runner_failed,
            network: i.network.as_str().to_owned(),
            network_enforcement: i.network_enforcement.map(|e| e.as_str().to_owned()),
        }
    }
}

#[pymethods]
impl SandboxInfo {
    fn __repr__(&self) -> String {
        format!(
            "SandboxInfo(mode={}, denied={}, enforcement={}, metadata={}, runner_failed={})",
            py_repr(&self.mode),
            py_bool(self.denied),
            repr_str(&self.enforcement),
            py_bool(self.metadata),
            self.runner_failed.map_or("None", py_bool)
        )
    }
}

/// The outcome of a foreground run (docs/running.md). A nonzero exit, a
/// timeout and an abort are all results.
#[pyclass(frozen, module = "dsh_native")]
pub struct RunResult {
    /// The exit status, when the shell exited by itself; else None.
    #[pyo3(get)]
    pub exit_code: Option<i32>,
    /// The name of the signal that killed the shell (``'SIGTERM'``); else
    /// None.
    #[pyo3(get)]
    pub signal: Option<String>,
    /// The command ran and ended, but nobody could say how (the executor's
    /// supervisor, its parent, was itself killed): ``exit_code`` and
    /// ``signal`` are both None.
    #[pyo3(get)]
    pub exit_status_unavailable: bool,
    /// The executor's timeout fired first.
    #[pyo3(get)]
    pub timed_out: bool,
    /// The caller's cancellation (a CancelToken, Ctrl-C, task
    /// cancellation) or the executor's close fired first.
    #[pyo3(get)]
    pub aborted: bool,
    /// The effective timeout of this run, in milliseconds.
    #[pyo3(get)]
    pub timeout_ms: u64,
    /// The command's stdout.
    #[pyo3(get)]
    pub stdout: Py<CollectedOutput>,
    /// The command's stderr.
    #[pyo3(get)]
    pub stderr: Py<CollectedOutput>,
    /// Sandbox facts, when the spec carried a policy; else None.
    #[pyo3(get)]
    pub sandbox: Option<SandboxInfo>,
    /// After a timeout or an abort: processes of the command's tree still
    /// alive when the stop finished (expected 0; warn otherwise).
    #[pyo3(get)]
    pub survivors: u32,
    /// Set when the timeout was reached with ``on_expiry='background'``:
    /// the command still runs, registered under this id (``get(id)``), and
    /// its reads continue right after this result's output; else None.
    #[pyo3(get)]
    pub background_id: Option<String>,
    /// The limit that ended the command (``'memory'``, ``'processes'``,
    /// ``'cpu'``, ``'file_size'``), as the kernel reported it; else None
    /// (docs/limits.md). Never together with ``timed_out`` or ``aborted``.
    #[pyo3(get)]
    pub limit: Option<&'static str>,
    /// The mechanism of each limit the command ran with
    /// (``{'memory': 'cgroup-v1', 'cpu': 'rlimit'}``); empty without limits.
    #[pyo3(get)]
    pub limits_enforcement: BTreeMap<&'static str, &'static str>,
}

/// A limits enforcement as a dict: limit name → mechanism name.
pub(crate) fn enforcement_map(e: &dsh_core::LimitsEnforcement) -> BTreeMap<&'static str, &'static str> {
    e.entries().map(|(k, m)| (k.as_str(), m.as_str())).collect()
}

impl RunResult {
    pub fn new(py: Python<'_>, r: dsh_core::RunResult) -> PyResult<Self> {
        Ok(RunResult {
            exit_code: r.exit_code,
            signal: r.signal,
            exit_status_unavailable: r.exit_status_unavailable,
            timed_out: r.timed_out,
            aborted: r.aborted,
            timeout_ms: r.timeout_ms,
            stdout: Py::new(py, CollectedOutput::from(r.stdout))?,
            stderr: Py::new(py, CollectedOutput::from(r.stderr))?,
            sandbox: r.sandbox.map(SandboxInfo::from),
            survivors: r.survivors,
            background_id: r.background_id,
            limit: r.limit.map(dsh_core::LimitKind::as_str),
            limits_enforcement: enforcement_map(&r.limits_enforcement),
        })
    }
}

#[pymethods]
impl RunResult {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "RunResult(exit_code={}, signal={}, timed_out={}, aborted={}, timeout_ms={}, stdout={}, stderr={})",
            self.exit_code.map_or("None".into(), |c| c.to_string()),
            repr_str(&self.signal),
            py_bool(self.timed_out),
            py_bool(self.aborted),
            self.timeout_ms,
            self.stdout.borrow(py).__repr__(),
            self.stderr.borrow(py).__repr__(),
        )
    }
}

/// What one ``read_output`` call returns.
#[pyclass(frozen, module = "dsh_native")]
pub struct ProcessRead {
    /// Output since the previous read: the new stdout text, then, if there
    /// is new stderr text, a ``[stderr]`` line and that text.
    #[pyo3(get)]
    pub delta: String,
    /// True when unread bytes slid out of the in-memory window before this
    /// read (the spill file has them).
    #[pyo3(get)]
    pub lossy: bool,
    /// The file holding the complete stdout, once it outgrew its window.
    #[pyo3(get)]
    pub stdout_spill_path: Option<String>,
    /// The file holding the complete stderr, once it outgrew its window.
    #[pyo3(get)]
    pub stderr_spill_path: Option<String>,
    /// Why stdout has no spill file although it outgrew its window.
    #[pyo3(get)]
    pub stdout_spill_error: Option<String>,
    /// Why stderr has no spill file although it outgrew its window.
    #[pyo3(get)]
    pub stderr_spill_error: Option<String>,
}

impl From<dsh_core::ProcessRead> for ProcessRead {
    fn from(r: dsh_core::ProcessRead) -> Self {
        ProcessRead {
            delta: r.delta,
            lossy: r.lossy,
            stdout_spill_path: r.stdout_spill_path,
            stderr_spill_path: r.stderr_spill_path,
            stdout_spill_error: r.stdout_spill_error,
            stderr_spill_error: r.stderr_spill_error,
        }
    }
}

#[pymethods]
impl ProcessRead {
    fn __repr__(&self) -> String {
        format!(
            "ProcessRead(delta={}, lossy={}, stdout_spill_path={}, stderr_spill_path={})",
            py_repr(&self.delta),
            py_bool(self.lossy),
            repr_str(&self.stdout_spill_path),
            repr_str(&self.stderr_spill_path)
        )
    }
}

//! The one error type of the core. Each face maps it exactly once (status
//! codes in C, exception classes in Python, `Error` objects in Node).

use std::fmt;

/// Which object a bad field belongs to; part of the field path in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `config.*`: the executor's configuration.
    Config,
    /// `request.*`: what a caller asked `resolve` for.
    Request,
    /// `spec.*`: a spec given to `run` or `start`.
    Spec,
    /// `terminal.*`: an argument of a terminal session's call (`resize`,
    /// `signal_foreground`).
    Terminal,
    /// `spawn.*`: a spawn spec (an argv program with per-stream stdio).
    Spawn,
}

/// Every field a caller can get wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldName {
    /// `cwd` (config).
    Cwd,
    /// `timeout_ms` / `timeoutMs` (config, request, spec).
    TimeoutMs,
    /// `max_timeout_ms` / `maxTimeoutMs` (config).
    MaxTimeoutMs,
    /// `max_output_bytes` / `maxOutputBytes` (config).
    MaxOutputBytes,
    /// `max_spill_bytes` / `maxSpillBytes` (config).
    MaxSpillBytes,
    /// `grace_ms` / `graceMs` (config).
    GraceMs,
    /// `spill_dir` / `spillDir` (config).
    SpillDir,
    /// `retain_settled` / `retainSettled` (config).
    RetainSettled,
    /// `sandbox_mode` / `sandboxMode` (config).
    SandboxMode,
    /// `command` (request, spec).
    Command,
    /// `workdir` (request, spec).
    Workdir,
    /// `stdout_max_bytes` / `stdoutMaxBytes` (request, spec).
    StdoutMaxBytes,
    /// `stdin` (request, spec).
    Stdin,
    /// `env` (request, spec).
    Env,
    /// `dsh_env` / `dshEnv` (request, spec).
    DshEnv,
    /// `owner` (request, spec).
    Owner,
    /// `sandbox_policy` / `sandboxPolicy` (request, spec).
    SandboxPolicy,
    /// `on_expiry` / `onExpiry` (request, spec).
    OnExpiry,
    /// `limits` as a whole (config, request): its shape.
    Limits,
    /// `limits.memory_bytes` / `limits.memoryBytes` (config, request, spec).
    LimitsMemoryBytes,
    /// `limits.processes` (config, request, spec).
    LimitsProcesses,
    /// `limits.cpu_seconds` / `limits.cpuSeconds` (config, request, spec).
    LimitsCpuSeconds,
    /// `limits.file_size_bytes` / `limits.fileSizeBytes` (config, request, spec).
    LimitsFileSizeBytes,
    /// `limits.open_files` / `limits.openFiles` (config, request, spec).
    LimitsOpenFiles,
    /// `argv` (terminal request, spec).
    Argv,
    /// `rows` (terminal request, spec, resize).
    Rows,
    /// `cols` (terminal request, spec, resize).
    Cols,
    /// `signal` (a terminal's `signal_foreground`).
    Signal,
    /// `data` (a terminal's `write`).
    Data,
    /// `stdout` (a spawn spec's disposition of it).
    Stdout,
    /// `stderr` (a spawn spec's disposition of it).
    Stderr,
    /// `id`: the id a caller chose for a background process (`start_as`,
    /// `run_as`).
    Id,
}

/// How a face spells field names: Rust, C and Python use snake_case, Node
/// uses the harness's camelCase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameStyle {
    /// `timeout_ms`: Rust, C and Python.
    Snake,
    /// `timeoutMs`: Node.
    Camel,
}

impl FieldName {
    /// The field's name as `style` spells it.
    pub fn name(self, style: NameStyle) -> &'static str {
        use FieldName::*;
        let (snake, camel) = match self {
            Cwd => ("cwd", "cwd"),
            TimeoutMs => ("timeout_ms", "timeoutMs"),
            MaxTimeoutMs => ("max_timeout_ms", "maxTimeoutMs"),
            MaxOutputBytes => ("max_output_bytes", "maxOutputBytes"),
            MaxSpillBytes => ("max_spill_bytes", "maxSpillBytes"),
            GraceMs => ("grace_ms", "graceMs"),
            SpillDir => ("spill_dir", "spillDir"),
            RetainSettled => ("retain_settled", "retainSettled"),
            SandboxMode => ("sandbox_mode", "sandboxMode"),
            Command => ("command", "command"),
            Workdir => ("workdir", "workdir"),
            StdoutMaxBytes => ("stdout_max_bytes", "stdoutMaxBytes"),
            Stdin => ("stdin", "stdin"),
            Env => ("env", "env"),
            DshEnv => ("dsh_env", "dshEnv"),
            Owner => ("owner", "owner"),
            SandboxPolicy => ("sandbox_policy", "sandboxPolicy"),
            OnExpiry => ("on_expiry", "onExpiry"),
            Limits => ("limits", "limits"),
            LimitsMemoryBytes => ("limits.memory_bytes", "limits.memoryBytes"),
            LimitsProcesses => ("limits.processes", "limits.processes"),
            LimitsCpuSeconds => ("limits.cpu_seconds", "limits.cpuSeconds"),
            LimitsFileSizeBytes => ("limits.file_size_bytes", "limits.fileSizeBytes"),
            LimitsOpenFiles => ("limits.open_files", "limits.openFiles"),
            Argv => ("argv", "argv"),
            Rows => ("rows", "rows"),
            Cols => ("cols", "cols"),
            Signal => ("signal", "signal"),
            Data => ("data", "data"),
            Stdout => ("stdout", "stdout"),
            Stderr => ("stderr", "stderr"),
            Id => ("id", "id"),
        };
        match style {
            NameStyle::Snake => snake,
            NameStyle::Camel => camel,
        }
    }
}

/// A field path such as `request.timeout_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The object the field belongs to.
    pub scope: Scope,
    /// The field itself.
    pub name: FieldName,
}

impl Field {
    /// The field `name` of `scope`.
    pub const fn new(scope: Scope, name: FieldName) -> Self {
        Field { scope, name }
    }

    /// `scope.name`, spelt for a face: `request.timeout_ms`,
    /// `request.timeoutMs`.
    pub fn path(self, style: NameStyle) -> String {
        format!("{}.{}", self.scope, self.name.name(style))
    }
}

/// Why a command could not be started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnFailure {
    /// The working directory is missing or not a directory.
    Workdir,
    /// No `bash` on the command's PATH.
    NoShell,
    /// A terminal session's program (`argv[0]`) is not on its PATH.
    NoProgram,
    /// Anything else the kernel refused (EAGAIN, EMFILE, ENOMEM, ...).
    Os,
    /// The executor's supervisor could not be started (see
    /// `docs/host-death.md`): no command of this executor can run.
    Supervisor,
}

/// Everything that can go wrong, in one enum: each face maps it once
/// (docs/faces.md has the table). A command that started and ended, however
/// it ended, is a result, never one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DshError {
    /// A config, request or spec field is unusable; nothing was run.
    #[error("{} {problem}", field.path(NameStyle::Snake))]
    InvalidArgument {
        /// The field that was refused.
        field: Field,
        /// What is wrong with it, in words (`must be a whole number, got 1.5`).
        problem: String,
    },

    /// The command could not be started; `errno` is the OS error.
    #[error("spawn failed: {message}")]
    Spawn {
        /// What kind of failure it was.
        kind: SpawnFailure,
        /// The OS error number (`ENOENT` for a missing workdir or bash).
        errno: i32,
        /// The whole explanation, naming the workdir when that is the cause.
        message: String,
    },

    /// The caller's cancellation had already fired; nothing was run.
    #[error("cancelled before the command started")]
    AlreadyCancelled,

    /// The executor was disposed; nothing was run.
    #[error("executor is disposed")]
    Disposed,

    /// No background process has this id.
    #[error("no background process with id {0:?}")]
    NotFound(String),

    /// The background process is still running (it cannot be forgotten).
    #[error("background process {0:?} is still running: kill it and wait for it first")]
    StillRunning(String),

    /// A blocking call was made from inside an async runtime or a listener,
    /// where it would stall every other command.
    #[error("blocking call made from inside an async runtime or a listener callback; use the async API")]
    BlockingInAsync,

    /// The executor or process was created by the parent of this forked
    /// process; its commands are supervised there. Create a new executor in
    /// the child.
    #[error(
        "this belongs to process {owner_pid}, and this is its forked child {pid}: create a new Executor here"
    )]
    ForkedChild {
        /// The process that made the executor or process.
        owner_pid: i32,
        /// This process, a forked child of `owner_pid`.
        pid: i32,
    },

    /// A bug in dsh-native (a task panicked); the message says where.
    #[error("internal error: {0}")]
    Internal(String),

    /// A terminal session cannot take this call any more: its program has
    /// exited (input, signals, resize), or the session has ended. The
    /// message says which.
    #[error("{0}")]
    TerminalClosed(String),

    /// A confined sandbox mode was asked for and cannot be enforced here;
    /// nothing was run (fail closed).
    #[error("sandbox unavailable: {0}")]
    SandboxUnavailable(String),

    /// A write to a process's stdin that cannot be taken: it has no stdin
    /// pipe, it was closed, or the command exited or closed its end.
    #[error("cannot write to the stdin of {id}: {why}")]
    StdinClosed {
        /// The process's registry id.
        id: String,
        /// Why its stdin takes no more bytes.
        why: StdinEnd,
    },

    /// A limit was asked for (by the request or the configuration) that
    /// this host cannot enforce; nothing was run (fail closed).
    #[error("limit unavailable: {message}")]
    LimitUnavailable {
        /// The limit that cannot be enforced.
        limit: LimitKind,
        /// Why, naming the limit's field.
        message: String,
    },
}

impl DshError {
    pub(crate) fn invalid(field: Field, problem: impl Into<String>) -> Self {
        DshError::InvalidArgument {
            field,
            problem: problem.into(),
        }
    }

    /// The message with field names spelt for a face (`request.timeoutMs` in
    /// Node); identical to `Display` for [`NameStyle::Snake`].
    pub fn message(&self, style: NameStyle) -> String {
        match self {
            DshError::InvalidArgument { field, problem } => {
                format!("{} {problem}", field.path(style))
            }
            other => other.to_string(),
        }
    }

    /// The symbolic code of the faces that carry a name to switch on (Node's
    /// `error.code`, the protocol's `error.data.code`): `INVALID_ARGUMENT`,
    /// an errno name (`ENOENT`) for a spawn failure, `ABORT_ERR`, `DISPOSED`,
    /// `NOT_FOUND`, `STILL_RUNNING`, `WOULD_BLOCK`, `FORKED_CHILD`,
    /// `SANDBOX_UNAVAILABLE`, `LIMIT_UNAVAILABLE`, `STDIN_CLOSED`,
    /// `TERMINAL_CLOSED`, `INTERNAL`.
    pub fn code(&self) -> String {
        let name = match self {
            DshError::InvalidArgument { .. } => "INVALID_ARGUMENT",
            DshError::Spawn { errno, .. } => return errno_name(*errno),
            DshError::AlreadyCancelled => "ABORT_ERR",
            DshError::Disposed => "DISPOSED",
            DshError::NotFound(_) => "NOT_FOUND",
            DshError::SandboxUnavailable(_) => "SANDBOX_UNAVAILABLE",
            DshError::BlockingInAsync => "WOULD_BLOCK",
            DshError::Internal(_) => "INTERNAL",
            DshError::ForkedChild { .. } => "FORKED_CHILD",
            DshError::StillRunning(_) => "STILL_RUNNING",
            DshError::StdinClosed { .. } => "STDIN_CLOSED",
            DshError::LimitUnavailable { .. } => "LIMIT_UNAVAILABLE",
            DshError::TerminalClosed(_) => "TERMINAL_CLOSED",
        };
        name.to_owned()
    }

    /// The kernel refused something a run needs before its command can
    /// start, such as the calling thread's reactor (no descriptor left:
    /// `EMFILE`, `ENFILE`; no memory): a spawn error with that errno,
    /// `kind` [`SpawnFailure::Os`], as for any resource refused at a spawn;
    /// nothing ran. An error without an errno is internal.
    pub(crate) fn refused(what: &str, e: &std::io::Error) -> DshError {
        match e.raw_os_error() {
            Some(errno) => DshError::Spawn {
                kind: SpawnFailure::Os,
                errno,
                message: format!("{}: {what}: {e}", errno_name(errno)),
            },
            None => DshError::Internal(format!("{what}: {e}")),
        }
    }

    /// The OS error name (`ENOENT`, ...) of a spawn failure.
    pub fn errno_name(&self) -> Option<String> {
        match self {
            DshError::Spawn { errno, .. } => Some(errno_name(*errno)),
            _ => None,
        }
    }
}

/// The symbolic name of an errno value (`ENOENT`), as Node and Python users
/// know it.
pub fn errno_name(errno: i32) -> String {
    // nix's Errno derives Debug as the symbolic constant name.
    format!("{:?}", nix::errno::Errno::from_raw(errno))
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::Config => "config",
            Scope::Request => "request",
            Scope::Spec => "spec",
            Scope::Terminal => "terminal",
            Scope::Spawn => "spawn",
        })
    }
}

/// The result of every fallible core call.
pub type Result<T, E = DshError> = std::result::Result<T, E>;

/// Why a process's stdin takes no more bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StdinEnd {
    /// The process was not started with a stdin pipe.
    NotPiped,
    /// `close_stdin` was called.
    Closed,
    /// The command has exited (or never started).
    Exited,
    /// The command closed its end of the pipe (a write gave EPIPE).
    Broken,
}

impl StdinEnd {
    /// `"not-piped"`, `"closed"`, `"exited"` or `"broken"`: the reason's
    /// name on the faces' errors.
    pub fn as_str(self) -> &'static str {
        match self {
            StdinEnd::NotPiped => "not-piped",
            StdinEnd::Closed => "closed",
            StdinEnd::Exited => "exited",
            StdinEnd::Broken => "broken",
        }
    }
}

impl fmt::Display for StdinEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StdinEnd::NotPiped => "it was not started with a stdin pipe",
            StdinEnd::Closed => "its stdin was closed by close_stdin",
            StdinEnd::Exited => "it has exited",
            StdinEnd::Broken => "the command closed its stdin",
        })
    }
}

/// One kind of limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimitKind {
    /// `memory`: bytes of memory the command's whole tree may use.
    Memory,
    /// `processes`: processes and threads the command's tree may have at once.
    Processes,
    /// `cpu`: CPU seconds each process of the command may use.
    Cpu,
    /// `file_size`: the largest file any process of the command may write.
    FileSize,
    /// `open_files`: descriptors each process of the command may hold.
    OpenFiles,
}

impl LimitKind {
    /// Every kind, in the order faces list them.
    pub const ALL: [LimitKind; 5] = [
        LimitKind::Memory,
        LimitKind::Processes,
        LimitKind::Cpu,
        LimitKind::FileSize,
        LimitKind::OpenFiles,
    ];

    /// `memory`, `processes`, `cpu`, `file_size`, `open_files`: the value
    /// of a result's `limit`.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Memory => "memory",
            LimitKind::Processes => "processes",
            LimitKind::Cpu => "cpu",
            LimitKind::FileSize => "file_size",
            LimitKind::OpenFiles => "open_files",
        }
    }

    /// The field of [`Limits`] that sets it.
    pub fn field(self) -> FieldName {
        match self {
            LimitKind::Memory => FieldName::LimitsMemoryBytes,
            LimitKind::Processes => FieldName::LimitsProcesses,
            LimitKind::Cpu => FieldName::LimitsCpuSeconds,
            LimitKind::FileSize => FieldName::LimitsFileSizeBytes,
            LimitKind::OpenFiles => FieldName::LimitsOpenFiles,
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

//! A terminal session's request and spec (docs/terminals.md): resolved
//! once, checked the same way when built by hand; and the signals a caller
//! may send to the terminal's foreground.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::spec::config::{whole_number, Config, Num, MAX_GRACE_MS};
use crate::spec::error::{DshError, Field, FieldName, Result, Scope};
use crate::spec::request::{
    absolute_without_nul, check_command, check_env, resolve_policy, resolve_workdir, SandboxPolicyInput,
};
use crate::spec::sandbox::SandboxPolicy;

/// Rows of a terminal whose request gives none.
pub const DEFAULT_ROWS: u16 = 24;
/// Columns of a terminal whose request gives none.
pub const DEFAULT_COLS: u16 = 80;

/// What a terminal session runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalProgram {
    /// A program and its arguments, run as they are (`argv[0]` is looked up
    /// on the session's PATH unless it contains a `/`).
    Argv(Vec<String>),
    /// A command line, run as `bash -c -- <command>`.
    Command(String),
}

/// What a caller asks [`Executor::spawn_terminal`](crate::Executor) for;
/// [`resolve_terminal`] turns it into a [`TerminalSpec`].
#[derive(Debug, Clone, PartialEq)]
pub struct TerminalRequest {
    /// The program, or a command line for bash.
    pub program: TerminalProgram,
    /// The working directory, as a command's `workdir`: a relative one is
    /// relative to the configured `cwd` (named `cwd` here, as terminal
    /// programs call it).
    pub cwd: Option<PathBuf>,
    /// Variables merged over the scrubbed host environment, as for commands
    /// (docs/environment.md); `TERM` is `xterm-256color` unless given here.
    pub env: Option<BTreeMap<String, String>>,
    /// Managed `DSH_*` variables, merged after `env`.
    pub dsh_env: Option<BTreeMap<String, String>>,
    /// Initial rows, a whole number from 1 to 65535 (default 24).
    pub rows: Option<Num>,
    /// Initial columns, a whole number from 1 to 65535 (default 80).
    pub cols: Option<Num>,
    /// SIGTERM-to-SIGKILL grace of `terminate()`, in milliseconds (default:
    /// the executor's `grace_ms`).
    pub grace_ms: Option<Num>,
    /// This session's sandbox policy; `None`: the configured `sandbox_mode`.
    pub sandbox_policy: Option<SandboxPolicyInput>,
}

impl TerminalRequest {
    /// A session running `bash -c -- <command>`, everything else absent.
    pub fn command(command: impl Into<String>) -> Self {
        Self::of(TerminalProgram::Command(command.into()))
    }

    /// A session running `argv`, everything else absent.
    pub fn argv<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Self {
        Self::of(TerminalProgram::Argv(argv.into_iter().map(Into::into).collect()))
    }

    fn of(program: TerminalProgram) -> Self {
        TerminalRequest {
            program,
            cwd: None,
            env: None,
            dsh_env: None,
            rows: None,
            cols: None,
            grace_ms: None,
            sandbox_policy: None,
        }
    }
}

/// A resolved terminal request: every field explicit.
#[derive(Debug, Clone, PartialEq)]
pub struct TerminalSpec {
    /// The program, or a command line for bash.
    pub program: TerminalProgram,
    /// The working directory: absolute, without NUL bytes.
    pub cwd: PathBuf,
    /// Variables merged over the scrubbed host environment.
    pub env: Option<BTreeMap<String, String>>,
    /// Managed `DSH_*` variables, merged after `env`.
    pub dsh_env: Option<BTreeMap<String, String>>,
    /// Initial rows.
    pub rows: u16,
    /// Initial columns.
    pub cols: u16,
    /// SIGTERM-to-SIGKILL grace of `terminate()`, in milliseconds.
    pub grace_ms: u64,
    /// `None` runs unconfined.
    pub sandbox_policy: Option<SandboxPolicy>,
}

fn field(name: FieldName) -> Field {
    Field::new(Scope::Request, name)
}

/// A terminal dimension: a whole number from 1 to 65535.
pub fn dimension(field: Field, value: Num) -> Result<u16> {
    whole_number(field, value, u16::MAX as u64).map(|v| v as u16)
}

fn check_program(f: impl Fn(FieldName) -> Field, program: &TerminalProgram) -> Result<()> {
    match program {
        TerminalProgram::Command(c) => check_command(f(FieldName::Command), c),
        TerminalProgram::Argv(argv) => check_argv(f(FieldName::Argv), argv),
    }
}

/// A program and its arguments as `execve` takes them: a non-empty
/// program name, no NUL byte anywhere.
pub(crate) fn check_argv(field: Field, argv: &[String]) -> Result<()> {
    match argv.first() {
        None => Err(DshError::invalid(field, "must name a program, got an empty list")),
        Some(p) if p.is_empty() => Err(DshError::invalid(field, "must name a program, got \"\"")),
        _ => match argv.iter().position(|a| a.contains('\0')) {
            Some(i) => Err(DshError::invalid(field, format!("item {i} contains a NUL byte"))),
            None => Ok(()),
        },
    }
}

/// Request → spec for a terminal session: defaults applied, every field
/// checked (docs/terminals.md).
pub fn resolve_terminal(config: &Config, request: TerminalRequest) -> Result<TerminalSpec> {
    let cwd = resolve_workdir(config, field(FieldName::Cwd), request.cwd.as_deref())?;
    let rows = match request.rows {
        Some(n) => dimension(field(FieldName::Rows), n)?,
        None => DEFAULT_ROWS,
    };
    let cols = match request.cols {
        Some(n) => dimension(field(FieldName::Cols), n)?,
        None => DEFAULT_COLS,
    };
    let grace_ms = match request.grace_ms {
        Some(n) => whole_number(field(FieldName::GraceMs), n, MAX_GRACE_MS)?,
        None => config.grace_ms,
    };
    let sandbox_policy = resolve_policy(
        config,
        field(FieldName::SandboxPolicy),
        request.sandbox_policy,
        &cwd,
    )?;
    let spec = TerminalSpec {
        program: request.program,
        cwd,
        env: request.env,
        dsh_env: request.dsh_env,
        rows,
        cols,
        grace_ms,
        sandbox_policy,
    };
    // The one validation of what was not resolved above, as a hand-built
    // spec gets it: what `resolve_terminal` returns passes `check`.
    spec.validate(Scope::Request)?;
    Ok(spec)
}

impl TerminalSpec {
    /// The invariants [`resolve_terminal`] guarantees, for specs built by
    /// hand.
    pub fn check(&self) -> Result<()> {
        self.validate(Scope::Spec)
    }

    /// Every rule of a terminal spec, with errors naming `scope`'s fields.
    fn validate(&self, scope: Scope) -> Result<()> {
        let f = |name| Field::new(scope, name);
        check_program(f, &self.program)?;
        if !absolute_without_nul(&self.cwd) {
            return Err(DshError::invalid(
                f(FieldName::Cwd),
                format!("must be an absolute path without NUL bytes, got {:?}", self.cwd),
            ));
        }
        if let Some(env) = &self.env {
            check_env(f(FieldName::Env), env, false)?;
        }
        if let Some(env) = &self.dsh_env {
            check_env(f(FieldName::DshEnv), env, true)?;
        }
        for (name, v) in [(FieldName::Rows, self.rows), (FieldName::Cols, self.cols)] {
            dimension(f(name), Num(v as f64))?;
        }
        whole_number(f(FieldName::GraceMs), Num(self.grace_ms as f64), MAX_GRACE_MS)?;
        if let Some(p) = &self.sandbox_policy {
            if !absolute_without_nul(&p.workspace_root) {
                return Err(DshError::invalid(
                    f(FieldName::SandboxPolicy),
                    "workspace_root must be an absolute path without NUL bytes",
                ));
            }
        }
        Ok(())
    }
}

/// The signals [`Terminal::signal_foreground`] delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TerminalSignal {
    /// `SIGINT`, what Ctrl-C sends.
    Int,
    /// `SIGTERM`.
    Term,
    /// `SIGKILL`.
    Kill,
    /// `SIGTSTP`, what Ctrl-Z sends.
    Tstp,
    /// `SIGHUP`.
    Hup,
}

impl TerminalSignal {
    /// Every signal, in the order above.
    pub const ALL: [TerminalSignal; 5] = [
        TerminalSignal::Int,
        TerminalSignal::Term,
        TerminalSignal::Kill,
        TerminalSignal::Tstp,
        TerminalSignal::Hup,
    ];

    /// `"SIGINT"`, …
    pub fn name(self) -> &'static str {
        match self {
            TerminalSignal::Int => "SIGINT",
            TerminalSignal::Term => "SIGTERM",
            TerminalSignal::Kill => "SIGKILL",
            TerminalSignal::Tstp => "SIGTSTP",
            TerminalSignal::Hup => "SIGHUP",
        }
    }

    /// The signal named `name` (`"SIGINT"`); anything else is an error
    /// naming `field` and the accepted names.
    pub fn parse(field: Field, name: &str) -> Result<TerminalSignal> {
        Self::ALL.into_iter().find(|s| s.name() == name).ok_or_else(|| {
            DshError::invalid(
                field,
                format!("must be one of SIGINT, SIGTERM, SIGKILL, SIGTSTP, SIGHUP, got {name:?}"),
            )
        })
    }

    pub(crate) fn number(self) -> libc::c_int {
        match self {
            TerminalSignal::Int => libc::SIGINT,
            TerminalSignal::Term => libc::SIGTERM,
            TerminalSignal::Kill => libc::SIGKILL,
            TerminalSignal::Tstp => libc::SIGTSTP,
            TerminalSignal::Hup => libc::SIGHUP,
        }
    }
}

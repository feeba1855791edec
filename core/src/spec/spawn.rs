//! A spawn spec (docs/spawn.md): a program and its arguments, never given
//! to a shell, with a disposition for each standard stream. It is the
//! shape of the harness's `ctx.subprocess` seam, which applies no
//! defaults: every field is given, and [`SpawnSpec::check`] is its one
//! validation.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::spec::config::{timeout_request_ms, whole_number, Config, Num, MAX_GRACE_MS, MAX_SAFE_INTEGER};
use crate::spec::error::{DshError, Field, FieldName, Result, Scope};
use crate::spec::limits::{Limits, LimitsInput};
use crate::spec::request::{absolute_without_nul, resolve_policy, resolve_workdir, SandboxPolicyInput};
use crate::spec::sandbox::SandboxPolicy;
use crate::spec::terminal::check_argv;

/// What the program's stdin is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpawnStdin {
    /// `/dev/null`.
    Null,
    /// These bytes, then end of file.
    Bytes(Vec<u8>),
    /// A pipe whose write end is handed to the caller
    /// ([`Spawned::stdin`](crate::Spawned)), raw: nothing is buffered here.
    Pipe,
    /// The host's own stdin, shared with the program.
    Inherit,
}

/// What happens to the program's stdout or stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnOutput {
    /// Kept: the last `max_bytes` in memory (never starting inside a UTF-8
    /// character), read by offset with
    /// [`Process::read_from`](crate::Process::read_from). With
    /// `spill_max_bytes`, the complete stream also goes to a spill file
    /// once it outgrows the window, until it passes that many bytes (then
    /// the file is deleted); without, only the window is kept.
    Collect {
        /// In-memory window in bytes.
        max_bytes: u64,
        /// Whole-stream cap of the spill file; `None`: no spill file.
        spill_max_bytes: Option<u64>,
    },
    /// A pipe whose read end is handed to the caller
    /// ([`Spawned::stdout`](crate::Spawned)), raw.
    Pipe,
    /// The host's own descriptor (1 or 2), shared with the program.
    Inherit,
}

/// A program to spawn, fully specified: nothing here is defaulted.
#[derive(Debug, Clone, PartialEq)]
pub struct SpawnSpec {
    /// The program and its arguments. `argv[0]` is looked up on the
    /// program's PATH (its environment's, after `env`) unless it contains a
    /// `/`; it is never given to a shell.
    pub argv: Vec<String>,
    /// The working directory: absolute, without NUL bytes.
    pub cwd: PathBuf,
    /// Changes to the scrubbed host environment (docs/environment.md, the
    /// same scrub as commands get, without the variables a command is
    /// forced to have): `Some` sets a variable (a credential-shaped or
    /// `DSH_*` name given here is the caller's choice and kept), `None`
    /// removes an inherited one.
    pub env: BTreeMap<String, Option<String>>,
    /// The program's stdin.
    pub stdin: SpawnStdin,
    /// Its stdout.
    pub stdout: SpawnOutput,
    /// Its stderr.
    pub stderr: SpawnOutput,
    /// Milliseconds, from 1 to [`MAX_GRACE_MS`]: the SIGTERM-to-SIGKILL grace
    /// of [`Process::terminate`](crate::Process::terminate), and how long
    /// after the program's exit its collected streams are still read while
    /// something it left behind holds them open.
    pub grace_ms: u64,
    /// `None`: not confined.
    pub sandbox_policy: Option<SandboxPolicy>,
    /// The limits the program's tree gets ([`Limits::default`]: none).
    pub limits: Limits,
    /// Milliseconds, at most the executor's `max_timeout_ms`; `None`: no
    /// timeout (a spawned program runs until it exits or is terminated).
    /// At the timeout its tree is stopped as a command's is (SIGTERM,
    /// SIGKILL after the grace) and [`Process::timed_out`](crate::Process::timed_out)
    /// says so.
    pub timeout_ms: Option<u64>,
}

/// What a caller of a face with defaults (Python, C) asks
/// [`resolve_spawn`] for; what it leaves out takes the executor's
/// configuration. (The harness's seam gives a whole [`SpawnSpec`] instead.)
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpawnRequest {
    /// The program and its arguments (as [`SpawnSpec::argv`]).
    pub argv: Vec<String>,
    /// `None`: the configured `cwd`, else the process cwd; a relative one is
    /// joined to that.
    pub cwd: Option<PathBuf>,
    /// Changes to the scrubbed host environment (as [`SpawnSpec::env`]).
    pub env: BTreeMap<String, Option<String>>,
    /// `None`: [`SpawnStdin::Null`].
    pub stdin: Option<SpawnStdin>,
    /// `None`: collected with the configured `max_output_bytes` window and
    /// `max_spill_bytes` spill file.
    pub stdout: Option<SpawnOutput>,
    /// `None`: as `stdout`'s default.
    pub stderr: Option<SpawnOutput>,
    /// Milliseconds; `None`: the configured `grace_ms`.
    pub grace_ms: Option<Num>,
    /// `None`: the configured `sandbox_mode` (as for a command).
    pub sandbox_policy: Option<SandboxPolicyInput>,
    /// Each clamped to the configured one, as for a command.
    pub limits: Option<LimitsInput>,
    /// Milliseconds, clamped to the configured `max_timeout_ms`; `None`: no
    /// timeout (unlike a command, a spawn has none by default).
    pub timeout_ms: Option<Num>,
}

/// Request → spec for a spawn: the executor's configuration fills what the
/// request leaves out, then the spec is checked as a hand-built one is.
pub fn resolve_spawn(config: &Config, request: SpawnRequest) -> Result<SpawnSpec> {
    let f = |name| Field::new(Scope::Spawn, name);
    let cwd = resolve_workdir(config, f(FieldName::Cwd), request.cwd.as_deref())?;
    let collected = SpawnOutput::Collect {
        max_bytes: config.max_output_bytes,
        spill_max_bytes: Some(config.max_spill_bytes),
    };
    let grace_ms = match request.grace_ms {
        Some(n) => whole_number(f(FieldName::GraceMs), n, MAX_GRACE_MS)?,
        None => config.grace_ms,
    };
    let sandbox_policy = resolve_policy(config, f(FieldName::SandboxPolicy), request.sandbox_policy, &cwd)?;
    let limits = match &request.limits {
        Some(l) => l.validate(Scope::Spawn)?.clamped_by(&config.limits),
        None => config.limits,
    };
    let timeout_ms = match request.timeout_ms {
        Some(t) => Some(timeout_request_ms(f(FieldName::TimeoutMs), t)?.min(config.max_timeout_ms)),
        None => None,
    };
    let spec = SpawnSpec {
        argv: request.argv,
        cwd,
        env: request.env,
        stdin: request.stdin.unwrap_or(SpawnStdin::Null),
        stdout: request.stdout.unwrap_or(collected),
        stderr: request.stderr.unwrap_or(collected),
        grace_ms,
        sandbox_policy,
        limits,
        timeout_ms,
    };
    spec.check(config)?;
    Ok(spec)
}

impl SpawnSpec {
    /// The rules of a spawn spec; an error names the field (`spawn.argv`).
    /// Limits beyond the executor's configured ones are refused, as a
    /// request's would be clamped: a spawn cannot raise them.
    pub fn check(&self, config: &Config) -> Result<()> {
        let f = |name| Field::new(Scope::Spawn, name);
        check_argv(f(FieldName::Argv), &self.argv)?;
        if !absolute_without_nul(&self.cwd) {
            return Err(DshError::invalid(
                f(FieldName::Cwd),
                format!("must be an absolute path without NUL bytes, got {:?}", self.cwd),
            ));
        }
        check_overlay(f(FieldName::Env), &self.env)?;
        for (name, output) in [(FieldName::Stdout, self.stdout), (FieldName::Stderr, self.stderr)] {
            if let SpawnOutput::Collect {
                max_bytes,
                spill_max_bytes,
            } = output
            {
                // 0 is a window that keeps nothing (a spill may keep all).
                for n in std::iter::once(max_bytes).chain(spill_max_bytes) {
                    if n > MAX_SAFE_INTEGER {
                        return Err(DshError::invalid(
                            f(name),
                            format!("caps must be at most {MAX_SAFE_INTEGER} bytes, got {n}"),
                        ));
                    }
                }
            }
        }
        if self.grace_ms == 0 {
            return Err(DshError::invalid(
                f(FieldName::GraceMs),
                "must be at least 1, got 0",
            ));
        }
        whole_number(f(FieldName::GraceMs), Num(self.grace_ms as f64), MAX_GRACE_MS)?;
        if let Some(t) = self.timeout_ms {
            whole_number(f(FieldName::TimeoutMs), Num(t as f64), config.max_timeout_ms)?;
        }
        if let Some(p) = &self.sandbox_policy {
            if !absolute_without_nul(&p.workspace_root) {
                return Err(DshError::invalid(
                    f(FieldName::SandboxPolicy),
                    "workspace_root must be an absolute path without NUL bytes",
                ));
            }
        }
        self.limits.check_within(&config.limits, Scope::Spawn)
    }
}

/// An environment overlay's keys and values: what `execve` can take.
fn check_overlay(field: Field, env: &BTreeMap<String, Option<String>>) -> Result<()> {
    for (key, value) in env {
        if key.is_empty() {
            return Err(DshError::invalid(field, "has an empty key"));
        }
        if key.contains('=') || key.contains('\0') {
            return Err(DshError::invalid(
                field,
                format!("key {key:?} contains '=' or a NUL byte"),
            ));
        }
        if value.as_ref().is_some_and(|v| v.contains('\0')) {
            return Err(DshError::invalid(
                field,
                format!("value of {key:?} contains a NUL byte"),
            ));
        }
    }
    Ok(())
}

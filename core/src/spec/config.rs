//! Executor configuration (docs/configuration.md), validated once at
//! construction.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::spec::error::{DshError, Field, FieldName, Result, Scope};
use crate::spec::limits::{Limits, LimitsInput};
pub use crate::spec::number::{whole_number, Num, MAX_SAFE_INTEGER};
use crate::spec::sandbox::SandboxMode;

/// `grace_ms` feeds timers that some hosts keep in 32 signed bits.
pub const MAX_GRACE_MS: u64 = (1 << 31) - 1;

/// A request's timeout as a model writes it: any positive finite number of
/// milliseconds, a fraction rounded up to the next whole millisecond (a
/// timer cannot fire between milliseconds, and rounding down could make
/// 0.5 ms a zero timeout). Values past `MAX_SAFE_INTEGER` are clamped by
/// the caller's cap like any other long timeout.
pub fn timeout_request_ms(field: Field, value: Num) -> Result<u64> {
    let v = value.0;
    if !v.is_finite() || v <= 0.0 {
        return Err(DshError::invalid(
            field,
            format!("must be a positive finite number, got {v}"),
        ));
    }
    Ok(v.ceil().min(MAX_SAFE_INTEGER as f64) as u64)
}

/// A path field: not empty, no NUL byte (any other bytes, UTF-8 or not);
/// made absolute against the process cwd so the resolved value never
/// depends on when it is read.
pub(crate) fn path_field(field: Field, value: &Path) -> Result<PathBuf> {
    let bytes = value.as_os_str().as_bytes();
    if bytes.is_empty() {
        return Err(DshError::invalid(field, "must not be empty"));
    }
    if bytes.contains(&0) {
        return Err(DshError::invalid(field, "contains a NUL byte"));
    }
    std::path::absolute(value).map_err(|e| DshError::invalid(field, format!("cannot be made absolute: {e}")))
}

/// A given `spill_dir` must be a directory, made now (0700) if missing: a
/// bad one found only at the first truncated result would silently lose
/// the complete output.
fn usable_spill_dir(field: Field, dir: PathBuf) -> Result<PathBuf> {
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => Ok(dir),
        Ok(_) => Err(DshError::invalid(
            field,
            format!("is not a directory: {}", dir.display()),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => crate::sys::create_private_dirs(&dir)
            .map(|()| dir.clone())
            .map_err(|e| DshError::invalid(field, format!("cannot be created: {}: {e}", dir.display()))),
        Err(e) => Err(DshError::invalid(
            field,
            format!("cannot be used: {}: {e}", dir.display()),
        )),
    }
}

/// What a caller may set; every field is optional and defaulted by
/// [`Config::new`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigInput {
    /// Default workdir, and the base of a relative one (default: the process
    /// cwd, read at each resolve). Made absolute at construction.
    pub cwd: Option<String>,
    /// Foreground timeout of a request that gives none, in milliseconds
    /// (default [`DEFAULT_TIMEOUT_MS`], or `max_timeout_ms` if smaller).
    pub timeout_ms: Option<Num>,
    /// Cap a request's timeout is clamped to, in milliseconds (default
    /// [`DEFAULT_MAX_TIMEOUT_MS`]).
    pub max_timeout_ms: Option<Num>,
    /// In-memory window of each stream, in bytes, and the cap of a request's
    /// `stdout_max_bytes` (default [`DEFAULT_MAX_OUTPUT_BYTES`]).
    pub max_output_bytes: Option<Num>,
    /// Largest spill file of one stream, in bytes (default
    /// [`DEFAULT_MAX_SPILL_BYTES`]).
    pub max_spill_bytes: Option<Num>,
    /// Wait between SIGTERM and SIGKILL, and how long output is collected
    /// after the shell exits, in milliseconds (default [`DEFAULT_GRACE_MS`],
    /// at most [`MAX_GRACE_MS`]).
    pub grace_ms: Option<Num>,
    /// Where the private spill directory is made (default: the temp dir).
    /// Created (0700) if missing; fixed for the executor's life.
    pub spill_dir: Option<String>,
    /// Settled background processes kept registered (default 1000).
    pub retain_settled: Option<Num>,
    /// The sandbox policy a request without one gets (default: none).
    pub sandbox_mode: Option<SandboxMode>,
    /// Limits every command gets, and the most a request may ask for
    /// (docs/limits.md; default: none).
    pub limits: Option<LimitsInput>,
}

/// How many settled background processes the registry keeps by default.
pub const DEFAULT_RETAIN_SETTLED: u64 = 1_000;

/// Default `timeout_ms`: two minutes.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// Default `max_timeout_ms`: ten minutes.
pub const DEFAULT_MAX_TIMEOUT_MS: u64 = 600_000;
/// Default `max_output_bytes`: 64 000 bytes per stream.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 64_000;
/// Default `max_spill_bytes`: 64 MiB per stream.
pub const DEFAULT_MAX_SPILL_BYTES: u64 = 64 * 1024 * 1024;
/// Default `grace_ms`: three seconds.
pub const DEFAULT_GRACE_MS: u64 = 3_000;

/// A validated configuration. `cwd: None` means "the process cwd, read at
/// resolve time"; `spill_dir` is the directory under which the executor's
/// private 0700 spill directory is created on first use.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Absolute; `None`: the process cwd, read at each resolve.
    pub cwd: Option<PathBuf>,
    /// Milliseconds; never above `max_timeout_ms`.
    pub timeout_ms: u64,
    /// Milliseconds.
    pub max_timeout_ms: u64,
    /// Bytes per stream.
    pub max_output_bytes: u64,
    /// Bytes per spill file.
    pub max_spill_bytes: u64,
    /// Milliseconds, at most [`MAX_GRACE_MS`].
    pub grace_ms: u64,
    /// Absolute; an existing directory.
    pub spill_dir: PathBuf,
    /// Settled background processes kept in the registry; past it the
    /// oldest settled one is forgotten (its spill files deleted).
    pub retain_settled: u64,
    /// The default sandbox mode; `None`: unconfined unless a request asks.
    pub sandbox_mode: Option<SandboxMode>,
    /// Each command's limits when its request sets none, and the cap of a
    /// request's own (a request may tighten a limit, never loosen it).
    pub limits: Limits,
}

impl Config {
    /// Applies the defaults and checks every field (docs/configuration.md):
    /// the first bad one is [`DshError::InvalidArgument`] naming it. A
    /// missing `spill_dir` is created here.
    pub fn new(input: ConfigInput) -> Result<Config> {
        let f = |name| Field::new(Scope::Config, name);
        let number = |name, value: Option<Num>, default: u64, max: u64| match value {
            Some(v) => whole_number(f(name), v, max),
            None => Ok(default),
        };
        let max_timeout_ms = number(
            FieldName::MaxTimeoutMs,
            input.max_timeout_ms,
            DEFAULT_MAX_TIMEOUT_MS,
            MAX_SAFE_INTEGER,
        )?;
        let timeout_ms = number(
            FieldName::TimeoutMs,
            input.timeout_ms,
            DEFAULT_TIMEOUT_MS.min(max_timeout_ms),
            MAX_SAFE_INTEGER,
        )?;
        if timeout_ms > max_timeout_ms {
            return Err(DshError::invalid(
                f(FieldName::TimeoutMs),
                format!("{timeout_ms} exceeds max_timeout_ms ({max_timeout_ms})"),
            ));
        }
        let config = Config {
            cwd: input
                .cwd
                .as_deref()
                .map(|c| path_field(f(FieldName::Cwd), Path::new(c)))
                .transpose()?,
            timeout_ms,
            max_timeout_ms,
            max_output_bytes: number(
                FieldName::MaxOutputBytes,
                input.max_output_bytes,
                DEFAULT_MAX_OUTPUT_BYTES,
                MAX_SAFE_INTEGER,
            )?,
            max_spill_bytes: number(
                FieldName::MaxSpillBytes,
                input.max_spill_bytes,
                DEFAULT_MAX_SPILL_BYTES,
                MAX_SAFE_INTEGER,
            )?,
            grace_ms: number(FieldName::GraceMs, input.grace_ms, DEFAULT_GRACE_MS, MAX_GRACE_MS)?,
            spill_dir: match input.spill_dir.as_deref() {
                Some(dir) => usable_spill_dir(
                    f(FieldName::SpillDir),
                    path_field(f(FieldName::SpillDir), Path::new(dir))?,
                )?,
                None => std::env::temp_dir(),
            },
            retain_settled: number(
                FieldName::RetainSettled,
                input.retain_settled,
                DEFAULT_RETAIN_SETTLED,
                MAX_SAFE_INTEGER,
            )?,
            sandbox_mode: input.sandbox_mode,
            limits: match &input.limits {
                Some(l) => l.validate(Scope::Config)?,
                None => Limits::default(),
            },
        };
        Ok(config)
    }
}

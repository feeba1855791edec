//! Request → spec: the one place where defaults are applied
//! (docs/requests.md).

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::spec::config::{path_field, timeout_request_ms, whole_number, Config, Num, MAX_SAFE_INTEGER};
use crate::spec::error::{DshError, Field, FieldName, Result, Scope};
use crate::spec::limits::{Limits, LimitsInput};
use crate::spec::sandbox::{NetworkPolicy, SandboxMode, SandboxPolicy};

/// The prefix every managed (`dsh_env`) key carries.
pub const DSH_ENV_PREFIX: &str = "DSH_";

/// A per-call policy as a caller gives it; `workspace_root` defaults to the
/// resolved workdir. A path is bytes: it need not be UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicyInput {
    /// The mode to confine the command with.
    pub mode: SandboxMode,
    /// The root `workspace-write` opens; `None`: the resolved workdir. A
    /// relative one is made absolute against the process cwd.
    pub workspace_root: Option<PathBuf>,
    /// The calling session's identity, carried to the spec untouched.
    pub session_id: Option<String>,
    /// What the command may do on the network; `None`: `allow`.
    pub network: Option<NetworkPolicy>,
}

/// What a foreground run does when its timeout is reached
/// (docs/running.md, "When the timeout is reached").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum OnExpiry {
    /// Stop the command (SIGTERM, SIGKILL after the grace period): the
    /// default.
    #[default]
    Kill,
    /// Leave it running and hand it over to the registry as a background
    /// process; the run's result says so and names it.
    Background,
}

impl OnExpiry {
    /// `"kill"` or `"background"`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExpiry::Kill => "kill",
            OnExpiry::Background => "background",
        }
    }

    /// The value named `name` (`"kill"`, `"background"`); anything else is
    /// an `InvalidArgument` on `field`.
    pub fn parse(field: Field, name: &str) -> Result<OnExpiry> {
        match name {
            "kill" => Ok(OnExpiry::Kill),
            "background" => Ok(OnExpiry::Background),
            _ => Err(DshError::invalid(
                field,
                format!("unknown value {name:?} (expected kill or background)"),
            )),
        }
    }
}

/// What a caller (a model, a plugin) asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    /// Run as `bash -c -- <command>`; no NUL byte.
    pub command: String,
    /// Bytes, like any path: a directory whose name is not UTF-8 is fine.
    /// Relative: joined to the configured `cwd` (else the process cwd).
    pub workdir: Option<PathBuf>,
    /// Milliseconds, any positive finite number: a fraction is rounded up,
    /// a value above `max_timeout_ms` clamped to it.
    pub timeout_ms: Option<Num>,
    /// In-memory stdout window in bytes, a positive whole number; clamped
    /// to `max_output_bytes`.
    pub stdout_max_bytes: Option<Num>,
    /// Written to the command's stdin, which is then closed; `None`: stdin
    /// is `/dev/null` (unless `stdin_pipe`).
    pub stdin: Option<Vec<u8>>,
    /// Give the command a stdin pipe that stays open for
    /// [`Process::write_stdin`](crate::Process::write_stdin) until
    /// [`Process::close_stdin`](crate::Process::close_stdin). Not together
    /// with `stdin` bytes.
    pub stdin_pipe: bool,
    /// What a foreground run does at its timeout; `None`: kill.
    pub on_expiry: Option<OnExpiry>,
    /// Variables merged over the scrubbed host environment
    /// (docs/environment.md).
    pub env: Option<BTreeMap<String, String>>,
    /// Managed `DSH_*` variables, merged after `env`.
    pub dsh_env: Option<BTreeMap<String, String>>,
    /// An opaque token stored on a background process.
    pub owner: Option<String>,
    /// This call's sandbox policy; `None`: the configured `sandbox_mode`.
    pub sandbox_policy: Option<SandboxPolicyInput>,
    /// This call's limits, each clamped to the configured one; a limit not
    /// given is the configured one (docs/limits.md).
    pub limits: Option<LimitsInput>,
}

impl Request {
    /// A request for `command` with every other field absent.
    pub fn new(command: impl Into<String>) -> Self {
        Request {
            command: command.into(),
            ..Request::default()
        }
    }
}

/// The fully resolved thing that runs. Every field is explicit: `run` and
/// `start` read it and never re-default. A spec built by hand (a face that
/// receives one back from its caller) is checked by [`Spec::check`] with the
/// same rules as `resolve`.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Run as `bash -c -- <command>`; no NUL byte.
    pub command: String,
    /// Absolute, without NUL bytes; not necessarily UTF-8.
    pub workdir: PathBuf,
    /// Effective: already clamped to `max_timeout_ms`.
    pub timeout_ms: u64,
    /// In-memory stdout window of a foreground run, in bytes; at most
    /// `max_output_bytes`.
    pub stdout_max_bytes: u64,
    /// Written to stdin, then closed; `None`: `/dev/null` (unless
    /// `stdin_pipe`).
    pub stdin: Option<Vec<u8>>,
    /// A stdin pipe that stays open for writes; never with `stdin` bytes.
    /// `start` takes it; `run` only with `on_expiry` background.
    pub stdin_pipe: bool,
    /// What a foreground run does at its timeout.
    pub on_expiry: OnExpiry,
    /// Variables merged over the scrubbed host environment.
    pub env: Option<BTreeMap<String, String>>,
    /// Managed `DSH_*` variables, merged after `env`.
    pub dsh_env: Option<BTreeMap<String, String>>,
    /// Required-but-nullable: stored on background processes, never read.
    pub owner: Option<String>,
    /// Required-but-nullable: `None` runs unconfined.
    pub sandbox_policy: Option<SandboxPolicy>,
    /// Effective: already clamped to the configured limits.
    pub limits: Limits,
}

/// Resolves a request against a configuration (docs/requests.md).
pub fn resolve(config: &Config, request: Request) -> Result<Spec> {
    let f = |name| Field::new(Scope::Request, name);
    let workdir = resolve_workdir(config, f(FieldName::Workdir), request.workdir.as_deref())?;
    let timeout_ms = match request.timeout_ms {
        Some(t) => timeout_request_ms(f(FieldName::TimeoutMs), t)?.min(config.max_timeout_ms),
        None => config.timeout_ms,
    };
    let stdout_max_bytes = match request.stdout_max_bytes {
        // Not clamped to `max_output_bytes`: the seam lets a trusted
        // foreground caller that parses complete stdout raise its budget
        // (stderr keeps `max_output_bytes`).
        Some(n) => whole_number(f(FieldName::StdoutMaxBytes), n, MAX_SAFE_INTEGER)?,
        None => config.max_output_bytes,
    };
    let sandbox_policy = resolve_policy(
        config,
        f(FieldName::SandboxPolicy),
        request.sandbox_policy,
        &workdir,
    )?;
    let limits = match &request.limits {
        Some(l) => l.validate(Scope::Request)?.clamped_by(&config.limits),
        None => config.limits,
    };
    let spec = Spec {
        command: request.command,
        workdir,
        timeout_ms,
        stdout_max_bytes,
        stdin: request.stdin,
        stdin_pipe: request.stdin_pipe,
        on_expiry: request.on_expiry.unwrap_or_default(),
        env: request.env,
        dsh_env: request.dsh_env,
        owner: request.owner,
        sandbox_policy,
        limits,
    };
    // The one validation of what was not resolved above (the command, the
    // environments, stdin): the same as a hand-built spec gets, so what
    // `resolve` returns passes `Spec::check` by construction.
    spec.validate(config, Scope::Request)?;
    Ok(spec)
}

/// A request's workdir: relative to the configured `cwd` (else the process
/// cwd); absent, that base itself.
pub(crate) fn resolve_workdir(config: &Config, field: Field, workdir: Option<&Path>) -> Result<PathBuf> {
    let base = match &config.cwd {
        Some(cwd) => cwd.clone(),
        None => std::env::current_dir().map_err(|e| {
            DshError::invalid(
                field,
                format!("no workdir given and the process cwd is unreadable: {e}"),
            )
        })?,
    };
    Ok(match workdir {
        Some(w) => {
            let p = path_field(field, w)?;
            // path_field made a relative path absolute against the process cwd;
            // a relative workdir means relative to the configured base.
            if w.is_relative() {
                base.join(w)
            } else {
                p
            }
        }
        None => base,
    })
}

/// A request's sandbox policy; absent, the configured `sandbox_mode` over
/// the workdir.
pub(crate) fn resolve_policy(
    config: &Config,
    field: Field,
    policy: Option<SandboxPolicyInput>,
    workdir: &Path,
) -> Result<Option<SandboxPolicy>> {
    Ok(match policy {
        Some(p) => Some(SandboxPolicy {
            mode: p.mode,
            workspace_root: match p.workspace_root.as_deref() {
                Some(root) => path_field(field, root)?,
                None => workdir.to_path_buf(),
            },
            session_id: p.session_id,
            network: p.network.unwrap_or_default(),
        }),
        None => config.sandbox_mode.map(|mode| SandboxPolicy {
            mode,
            workspace_root: workdir.to_path_buf(),
            session_id: None,
            network: NetworkPolicy::Allow,
        }),
    })
}

impl Spec {
    /// Whether [`Executor::run_on_host_loop`](crate::Executor::run_on_host_loop) can run it on
    /// the host's loop: not when bytes are written to its stdin (a write
    /// that may raise SIGPIPE happens only on the core's threads), nor when
    /// it may be handed over to the registry at its timeout.
    pub fn runs_on_host_loop(&self) -> bool {
        self.stdin.is_none() && !self.stdin_pipe && self.on_expiry == OnExpiry::Kill
    }

    /// The invariants `resolve` guarantees, for specs that did not come from
    /// it. Nothing is defaulted or clamped here.
    pub fn check(&self, config: &Config) -> Result<()> {
        self.validate(config, Scope::Spec)
    }

    /// Every rule of a spec, with errors naming `scope`'s fields (`resolve`
    /// runs it on what it resolved, as `request.*`).
    fn validate(&self, config: &Config, scope: Scope) -> Result<()> {
        let f = |name| Field::new(scope, name);
        check_command(f(FieldName::Command), &self.command)?;
        if !absolute_without_nul(&self.workdir) {
            return Err(DshError::invalid(
                f(FieldName::Workdir),
                format!(
                    "must be an absolute path without NUL bytes, got {:?}",
                    self.workdir
                ),
            ));
        }
        whole_number(
            f(FieldName::TimeoutMs),
            Num(self.timeout_ms as f64),
            config.max_timeout_ms,
        )?;
        whole_number(
            f(FieldName::StdoutMaxBytes),
            Num(self.stdout_max_bytes as f64),
            MAX_SAFE_INTEGER,
        )?;
        check_stdin(f(FieldName::Stdin), self.stdin.is_some(), self.stdin_pipe)?;
        if let Some(env) = &self.env {
            check_env(f(FieldName::Env), env, false)?;
        }
        if let Some(env) = &self.dsh_env {
            check_env(f(FieldName::DshEnv), env, true)?;
        }
        if let Some(p) = &self.sandbox_policy {
            if !absolute_without_nul(&p.workspace_root) {
                return Err(DshError::invalid(
                    f(FieldName::SandboxPolicy),
                    "workspace_root must be an absolute path without NUL bytes",
                ));
            }
        }
        self.limits.check_within(&config.limits, scope)?;
        Ok(())
    }
}

fn check_stdin(field: Field, bytes: bool, pipe: bool) -> Result<()> {
    if bytes && pipe {
        return Err(DshError::invalid(field, "is either bytes or a pipe, not both"));
    }
    Ok(())
}

pub(crate) fn check_command(field: Field, command: &str) -> Result<()> {
    if command.contains('\0') {
        return Err(DshError::invalid(field, "contains a NUL byte"));
    }
    Ok(())
}

/// What a spec's paths must be: the kernel takes them as NUL-terminated
/// bytes, and nothing may depend on the cwd at run time.
pub(crate) fn absolute_without_nul(p: &Path) -> bool {
    p.is_absolute() && !p.as_os_str().as_bytes().contains(&0)
}

pub(crate) fn check_env(field: Field, env: &BTreeMap<String, String>, managed: bool) -> Result<()> {
    for (key, value) in env {
        if key.is_empty() {
            return Err(DshError::invalid(field, "has an empty key"));
        }
        if key.contains('=') {
            return Err(DshError::invalid(field, format!("key {key:?} contains '='")));
        }
        if key.contains('\0') {
            return Err(DshError::invalid(
                field,
                format!("key {key:?} contains a NUL byte"),
            ));
        }
        if value.contains('\0') {
            return Err(DshError::invalid(
                field,
                format!("value of {key:?} contains a NUL byte"),
            ));
        }
        if managed && !key.starts_with(DSH_ENV_PREFIX) {
            return Err(DshError::invalid(
                field,
                format!("key {key:?} does not start with {DSH_ENV_PREFIX}"),
            ));
        }
    }
    Ok(())
}

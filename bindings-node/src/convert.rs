//! JS ⇄ core translation: request/spec/config objects in, plain result
//! objects out (absent optional fields are omitted, not undefined), and the
//! one mapping from core errors to JS `Error`s.

use std::collections::{BTreeMap, HashMap};

use napi::bindgen_prelude::*;
use napi::{Env, Status};
use napi_derive::napi;

use dsh_core::{
    whole_number, DshError, Field, FieldName, NameStyle, Num, SandboxMode, SandboxPolicyInput, Scope,
    MAX_SAFE_INTEGER,
};

/// The `code` a JS caller switches on, and the message, for a core error.
pub(crate) fn error_parts(e: &DshError) -> (String, String) {
    let code = match e {
        DshError::InvalidArgument { .. } => "INVALID_ARGUMENT".to_owned(),
        DshError::Spawn { .. } => e.errno_name().unwrap_or_else(|| "SPAWN_FAILED".into()),
        DshError::AlreadyCancelled => "ABORT_ERR".to_owned(),
        DshError::Disposed => "DISPOSED".to_owned(),
        DshError::NotFound(_) => "NOT_FOUND".to_owned(),
        DshError::SandboxUnavailable(_) => "SANDBOX_UNAVAILABLE".to_owned(),
        DshError::BlockingInAsync => "WOULD_BLOCK".to_owned(),
        DshError::Internal(_) => "INTERNAL".to_owned(),
        DshError::ForkedChild { .. } => "FORKED_CHILD".to_owned(),
        DshError::StillRunning(_) => "STILL_RUNNING".to_owned(),
    };
    (code, e.message(NameStyle::Camel))
}

/// A JS `Error` with `code` (and `errno`/`syscall`-free: the message names
/// the path), thrown or used as a rejection verbatim.
pub(crate) fn js_error(env: &Env, e: &DshError) -> Error {
    let (code, message) = error_parts(e);
    let built = (|| -> Result<Error> {
        let mut obj = env.create_error(Error::new(Status::GenericFailure, message.clone()))?;
        obj.set_named_property("code", code.as_str())?;
        if let DshError::InvalidArgument { field, .. } = e {
            obj.set_named_property("field", field.path(NameStyle::Camel))?;
        }
        if let DshError::Spawn { errno, .. } = e {
            obj.set_named_property("errno", -errno)?;
        }
        Ok(Error::from(obj.into_unknown(env)?))
    })();
    built.unwrap_or_else(|err| err)
}

/// Any JS value where a number belongs: a wrong type is reported by the
/// core's error (naming `request.timeoutMs`), not by napi's conversion.
pub enum JsNumber {
    Number(f64),
    Other(ValueType),
}

impl TypeName for JsNumber {
    fn type_name() -> &'static str {
        "number"
    }
    fn value_type() -> ValueType {
        ValueType::Number
    }
}

impl ValidateNapiValue for JsNumber {}

impl FromNapiValue for JsNumber {
    unsafe fn from_napi_value(env: napi::sys::napi_env, value: napi::sys::napi_value) -> Result<Self> {
        // SAFETY: napi hands us a live value of this env.
        let t = type_of!(env, value)?;
        if t == ValueType::Number {
            // SAFETY: `value` is a live value of `env` (this trait's contract,
            // upheld by napi's generated callers) and was just checked to be
            // a number, which is what f64's conversion requires.
            Ok(JsNumber::Number(unsafe { f64::from_napi_value(env, value) }?))
        } else {
            Ok(JsNumber::Other(t))
        }
    }
}

impl JsNumber {
    fn num(self, field: Field) -> std::result::Result<Num, DshError> {
        match self {
            JsNumber::Number(n) => Ok(Num(n)),
            JsNumber::Other(t) => Err(DshError::InvalidArgument {
                field,
                problem: format!("must be a number, got {}", format!("{t:?}").to_lowercase()),
            }),
        }
    }
}

fn opt_num(v: Option<JsNumber>, field: Field) -> std::result::Result<Option<Num>, DshError> {
    v.map(|n| n.num(field)).transpose()
}

/// A spec's number: present, and within the core's rule.
fn number(field: Field, v: JsNumber, max: u64) -> std::result::Result<u64, DshError> {
    whole_number(field, v.num(field)?, max)
}

#[napi(object, object_to_js = false)]
pub struct SandboxPolicyJs {
    pub mode: String,
    pub workspace_root: Option<String>,
}

#[napi(object, object_to_js = false)]
pub struct ConfigJs {
    pub cwd: Option<String>,
    pub timeout_ms: Option<JsNumber>,
    pub max_timeout_ms: Option<JsNumber>,
    pub max_output_bytes: Option<JsNumber>,
    pub max_spill_bytes: Option<JsNumber>,
    pub retain_settled: Option<JsNumber>,
    pub grace_ms: Option<JsNumber>,
    pub spill_dir: Option<String>,
    pub sandbox_mode: Option<String>,
}

#[napi(object, object_to_js = false)]
pub struct RequestJs {
    pub command: String,
    pub workdir: Option<String>,
    pub timeout_ms: Option<JsNumber>,
    pub stdout_max_bytes: Option<JsNumber>,
    pub stdin: Option<Either<String, Buffer>>,
    pub env: Option<HashMap<String, Option<String>>>,
    pub dsh_env: Option<HashMap<String, Option<String>>>,
    pub owner: Option<String>,
    pub sandbox_policy: Option<SandboxPolicyJs>,
}

/// A spec as JS holds it (the harness may hand back a spec it built or
/// extended, e.g. with `signal`; extra keys are ignored).
#[napi(object, object_to_js = false)]
pub struct SpecJs {
    pub command: String,
    pub workdir: String,
    pub timeout_ms: JsNumber,
    pub stdout_max_bytes: JsNumber,
    pub stdin: Option<Either<String, Buffer>>,
    pub env: Option<HashMap<String, Option<String>>>,
    pub dsh_env: Option<HashMap<String, Option<String>>>,
    pub owner: Option<String>,
    pub sandbox_policy: Option<SandboxPolicyJs>,
}

/// A JS record as a map; a key whose value is undefined is absent.
fn sorted(m: Option<HashMap<String, Option<String>>>) -> Option<BTreeMap<String, String>> {
    m.map(|m| m.into_iter().filter_map(|(k, v)| Some((k, v?))).collect())
}

fn bytes(stdin: Option<Either<String, Buffer>>) -> Option<Vec<u8>> {
    stdin.map(|s| match s {
        Either::A(s) => s.into_bytes(),
        Either::B(b) => b.to_vec(),
    })
}

fn mode(field: Field, s: &str) -> std::result::Result<SandboxMode, DshError> {
    SandboxMode::parse(field, s)
}

pub(crate) fn config_input(c: Option<ConfigJs>) -> std::result::Result<dsh_core::ConfigInput, DshError> {
    let Some(c) = c else { return Ok(Default::default()) };
    let f = |name| Field::new(Scope::Config, name);
    Ok(dsh_core::ConfigInput {
        cwd: c.cwd,
        timeout_ms: opt_num(c.timeout_ms, f(FieldName::TimeoutMs))?,
        max_timeout_ms: opt_num(c.max_timeout_ms, f(FieldName::MaxTimeoutMs))?,
        max_output_bytes: opt_num(c.max_output_bytes, f(FieldName::MaxOutputBytes))?,
        max_spill_bytes: opt_num(c.max_spill_bytes, f(FieldName::MaxSpillBytes))?,
        retain_settled: opt_num(c.retain_settled, f(FieldName::RetainSettled))?,
        grace_ms: opt_num(c.grace_ms, f(FieldName::GraceMs))?,
        spill_dir: c.spill_dir,
        sandbox_mode: c
            .sandbox_mode
            .map(|m| mode(Field::new(Scope::Config, FieldName::SandboxMode), &m))
            .transpose()?,
    })
}

pub(crate) fn request(r: RequestJs) -> std::result::Result<dsh_core::Request, DshError> {
    let f = |name| Field::new(Scope::Request, name);
    let policy_field = f(FieldName::SandboxPolicy);
    Ok(dsh_core::Request {
        command: r.command,
        workdir: r.workdir,
        timeout_ms: opt_num(r.timeout_ms, f(FieldName::TimeoutMs))?,
        stdout_max_bytes: opt_num(r.stdout_max_bytes, f(FieldName::StdoutMaxBytes))?,
        stdin: bytes(r.stdin),
        env: sorted(r.env),
        dsh_env: sorted(r.dsh_env),
        owner: r.owner,
        sandbox_policy: r
            .sandbox_policy
            .map(|p| {
                Ok::<_, DshError>(SandboxPolicyInput {
                    mode: mode(policy_field, &p.mode)?,
                    workspace_root: p.workspace_root,
                })
            })
            .transpose()?,
    })
}

pub(crate) fn spec(s: SpecJs) -> std::result::Result<dsh_core::Spec, DshError> {
    let f = |name| Field::new(Scope::Spec, name);
    Ok(dsh_core::Spec {
        command: s.command,
        workdir: s.workdir,
        timeout_ms: number(f(FieldName::TimeoutMs), s.timeout_ms, MAX_SAFE_INTEGER)?,
        stdout_max_bytes: number(f(FieldName::StdoutMaxBytes), s.stdout_max_bytes, MAX_SAFE_INTEGER)?,
        stdin: bytes(s.stdin),
        env: sorted(s.env),
        dsh_env: sorted(s.dsh_env),
        owner: s.owner,
        sandbox_policy: s
            .sandbox_policy
            .map(|p| {
                Ok::<_, DshError>(dsh_core::SandboxPolicy {
                    mode: mode(f(FieldName::SandboxPolicy), &p.mode)?,
                    workspace_root: p.workspace_root.unwrap_or_default(),
                })
            })
            .transpose()?,
    })
}

/// Sets `key` only when there is a value: the harness's shapes omit absent
/// optional fields rather than setting them to `undefined`.
fn set_some<V: ToNapiValue>(obj: &mut Object, key: &str, v: Option<V>) -> Result<()> {
    match v {
        Some(v) => obj.set_named_property(key, v),
        None => Ok(()),
    }
}

fn map_object<'e>(env: &'e Env, m: &BTreeMap<String, String>) -> Result<Object<'e>> {
    let mut o = Object::new(env)?;
    for (k, v) in m {
        o.set_named_property(k, v.as_str())?;
    }
    Ok(o)
}

pub(crate) fn spec_object<'e>(env: &'e Env, s: &dsh_core::Spec) -> Result<Object<'e>> {
    let mut o = Object::new(env)?;
    o.set_named_property("command", s.command.as_str())?;
    o.set_named_property("workdir", s.workdir.as_str())?;
    o.set_named_property("timeoutMs", s.timeout_ms as f64)?;
    o.set_named_property("stdoutMaxBytes", s.stdout_max_bytes as f64)?;
    if let Some(stdin) = &s.stdin {
        // The harness's stdin is a string; bytes that are not UTF-8 stay bytes.
        match std::str::from_utf8(stdin) {
            Ok(text) => o.set_named_property("stdin", text)?,
            Err(_) => o.set_named_property("stdin", Buffer::from(stdin.clone()))?,
        }
    }
    if let Some(env_map) = &s.env {
        o.set_named_property("env", map_object(env, env_map)?)?;
    }
    if let Some(m) = &s.dsh_env {
        o.set_named_property("dshEnv", map_object(env, m)?)?;
    }
    // Required-but-nullable: always present, possibly undefined.
    match s.owner.as_deref() {
        Some(owner) => o.set_named_property("owner", owner)?,
        None => o.set_named_property("owner", ())?,
    }
    match &s.sandbox_policy {
        Some(p) => {
            let mut po = Object::new(env)?;
            po.set_named_property("mode", p.mode.as_str())?;
            po.set_named_property("workspaceRoot", p.workspace_root.as_str())?;
            o.set_named_property("sandboxPolicy", po)?;
        }
        None => o.set_named_property("sandboxPolicy", ())?,
    }
    Ok(o)
}

fn collected<'e>(env: &'e Env, c: &dsh_core::CollectedOutput) -> Result<Object<'e>> {
    let mut o = Object::new(env)?;
    o.set_named_property("text", c.text.as_str())?;
    o.set_named_property("truncated", c.truncated)?;
    set_some(&mut o, "spillPath", c.spill_path.as_deref())?;
    set_some(&mut o, "spillError", c.spill_error.as_deref())?;
    Ok(o)
}

pub(crate) fn sandbox_object<'e>(env: &'e Env, s: &dsh_core::SandboxInfo) -> Result<Object<'e>> {
    let mut o = Object::new(env)?;
    o.set_named_property("mode", s.mode.as_str())?;
    o.set_named_property("denied", s.denied)?;
    set_some(&mut o, "enforcement", s.enforcement.map(|e| e.as_str()))?;
    set_some(&mut o, "runnerFailed", s.runner_failed)?;
    Ok(o)
}

pub(crate) fn run_result<'e>(env: &'e Env, r: &dsh_core::RunResult) -> Result<Object<'e>> {
    let mut o = Object::new(env)?;
    o.set_named_property("exitCode", r.exit_code)?;
    o.set_named_property("signal", r.signal.as_deref())?;
    if r.exit_status_unavailable {
        o.set_named_property("exitStatusUnavailable", true)?;
    }
    o.set_named_property("timedOut", r.timed_out)?;
    o.set_named_property("aborted", r.aborted)?;
    o.set_named_property("timeoutMs", r.timeout_ms as f64)?;
    o.set_named_property("stdout", collected(env, &r.stdout)?)?;
    o.set_named_property("stderr", collected(env, &r.stderr)?)?;
    if let Some(s) = &r.sandbox {
        o.set_named_property("sandbox", sandbox_object(env, s)?)?;
    }
    Ok(o)
}

pub(crate) fn read_object<'e>(env: &'e Env, r: &dsh_core::ProcessRead) -> Result<Object<'e>> {
    let mut o = Object::new(env)?;
    o.set_named_property("delta", r.delta.as_str())?;
    o.set_named_property("lossy", r.lossy)?;
    set_some(&mut o, "stdoutSpillPath", r.stdout_spill_path.as_deref())?;
    set_some(&mut o, "stderrSpillPath", r.stderr_spill_path.as_deref())?;
    set_some(&mut o, "stdoutSpillError", r.stdout_spill_error.as_deref())?;
    set_some(&mut o, "stderrSpillError", r.stderr_spill_error.as_deref())?;
    Ok(o)
}

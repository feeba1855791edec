//! JS ⇄ core translation: request/spec/config objects in, plain result
//! objects out (absent optional fields are omitted, not undefined), and the
//! one mapping from core errors to JS `Error`s.

use std::collections::BTreeMap;

use napi::bindgen_prelude::*;
use napi::{Env, Status};

use dsh_core::{
    whole_number, DshError, Field, FieldName, LimitKind, LimitsEnforcement, LimitsInput, NameStyle,
    NetworkPolicy, Num, OnExpiry, SandboxMode, SandboxPolicyInput, Scope, MAX_SAFE_INTEGER,
};

/// The `code` a JS caller switches on, and the message, for a core error.
pub(crate) fn error_parts(e: &DshError) -> (String, String) {
    let code = e.code();
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
        if let DshError::StdinClosed { id, why } = e {
            obj.set_named_property("id", id.as_str())?;
            obj.set_named_property("reason", why.as_str())?;
        }
        if let DshError::LimitUnavailable { limit, .. } = e {
            obj.set_named_property("limit", limit_name(*limit))?;
        }
        Ok(Error::from(obj.into_unknown(env)?))
    })();
    built.unwrap_or_else(|err| err)
}

/// What went wrong with a JS input: either the core's verdict on a value,
/// or a shape problem only JS can have (an unknown key, a wrong type, a
/// missing required field). Both become one `INVALID_ARGUMENT` error.
pub(crate) enum InputError {
    Core(DshError),
    Shape { path: String, problem: String },
}

impl From<DshError> for InputError {
    fn from(e: DshError) -> Self {
        InputError::Core(e)
    }
}

pub(crate) type InputResult<T> = std::result::Result<T, InputError>;

fn shape<T>(path: impl Into<String>, problem: impl Into<String>) -> InputResult<T> {
    Err(InputError::Shape {
        path: path.into(),
        problem: problem.into(),
    })
}

pub(crate) fn input_error(env: &Env, e: &InputError) -> Error {
    match e {
        InputError::Core(e) => js_error(env, e),
        InputError::Shape { path, problem } => {
            let built = (|| -> Result<Error> {
                let mut obj =
                    env.create_error(Error::new(Status::InvalidArg, format!("{path} {problem}")))?;
                obj.set_named_property("code", "INVALID_ARGUMENT")?;
                obj.set_named_property("field", path.as_str())?;
                Ok(Error::from(obj.into_unknown(env)?))
            })();
            built.unwrap_or_else(|err| err)
        }
    }
}

/// What a JS value is, in `typeof`'s words (`null` for null), for "got …".
pub(crate) fn type_name(t: ValueType) -> &'static str {
    match t {
        ValueType::Undefined => "undefined",
        ValueType::Null => "null",
        ValueType::Boolean => "boolean",
        ValueType::Number => "number",
        ValueType::String => "string",
        ValueType::Symbol => "symbol",
        ValueType::Object => "object",
        ValueType::Function => "function",
        ValueType::External => "external",
        ValueType::BigInt => "bigint",
        _ => "unknown",
    }
}

/// One JS object read field by field. Every key must be one the shape
/// knows: a misspelt `timeout_ms` or `work_dir` is an error, never ignored.
struct Fields<'e> {
    src: Source<'e>,
    scope: &'static str,
}

/// Where a shape's fields are read from.
enum Source<'e> {
    Object(Object<'e>),
    /// A spec's values, read by `index.js` in [`SPEC_KEYS`] order (reading
    /// them there is several times cheaper than key by key through napi).
    SpecValues(Vec<Unknown<'e>>),
}

fn unknown_field<T>(scope: &str, key: &str, known: &[&str]) -> InputResult<T> {
    shape(
        format!("{scope}.{key}"),
        format!("is not a known field (expected one of: {})", known.join(", ")),
    )
}

/// The `id` argument of the by-id calls (`get`, `kill`, `readOutput`,
/// `ownerOf`, `forget`): a string, else INVALID_ARGUMENT naming `id` and
/// what it got (never napi's own conversion error).
pub(crate) fn id_arg(id: Unknown<'_>) -> InputResult<String> {
    match id.get_type().map_err(napi_failure("id"))? {
        // SAFETY: the value was just checked to be a string.
        ValueType::String => unsafe { id.cast::<String>() }.map_err(napi_failure("id")),
        t => shape("id", format!("must be a string, got {}", type_name(t))),
    }
}

/// An object read by its own keys (a request, a spec, a config, `limits`,
/// `sandboxPolicy`, `env`, …) must be a plain one: `{ … }` or
/// `Object.create(null)`. A Map, a Set, an array or a class instance holds
/// its content elsewhere, or is not the record the seam takes, and would be
/// read as something it is not (a Map as no env at all), so it is refused,
/// saying what it is. `what` is the expected shape (`object`).
fn plain_object<'e>(v: Unknown<'e>, t: ValueType, path: &str, what: &str) -> InputResult<Object<'e>> {
    if t != ValueType::Object {
        return shape(path, format!("must be an {what}, got {}", type_name(t)));
    }
    let fail = |e: Error| InputError::Shape {
        path: path.to_owned(),
        problem: format!("could not be read: {}", e.reason),
    };
    // SAFETY: the value was just checked to be an object.
    let obj = unsafe { v.cast::<Object<'e>>() }.map_err(fail)?;
    if v.is_array().map_err(fail)? {
        return shape(path, format!("must be a plain {what}, got array"));
    }
    // Plain: no prototype, or one that has none itself (`Object.prototype`,
    // of this realm or another).
    let proto = obj.get_prototype().map_err(fail)?;
    if proto.get_type().map_err(fail)? == ValueType::Null {
        return Ok(obj);
    }
    // SAFETY: a prototype that is not null is an object.
    let proto = unsafe { proto.cast::<Object<'e>>() }.map_err(fail)?;
    let above = proto.get_prototype().map_err(fail)?;
    if above.get_type().map_err(fail)? == ValueType::Null {
        return Ok(obj);
    }
    shape(
        path,
        format!("must be a plain {what}, got {}", constructor_name(&proto)),
    )
}

/// The name of the class whose prototype `proto` is (`Map`, a class's
/// own), or `object` when it has none to read.
fn constructor_name(proto: &Object<'_>) -> String {
    proto
        .get_named_property::<Unknown<'_>>("constructor")
        .ok()
        .filter(|c| matches!(c.get_type(), Ok(ValueType::Function)))
        // SAFETY: the value was just checked to be a function (an object).
        .and_then(|c| unsafe { c.cast::<Object<'_>>() }.ok())
        .and_then(|c| c.get_named_property::<Unknown<'_>>("name").ok())
        .filter(|n| matches!(n.get_type(), Ok(ValueType::String)))
        // SAFETY: the value was just checked to be a string.
        .and_then(|n| unsafe { n.cast::<String>() }.ok())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "object".to_owned())
}

impl<'e> Fields<'e> {
    fn new(value: Unknown<'e>, scope: &'static str, known: &[&str]) -> InputResult<Self> {
        let t = value.get_type().map_err(napi_failure(scope))?;
        let obj = plain_object(value, t, scope, "object")?;
        for key in Object::keys(&obj).map_err(napi_failure(scope))? {
            if !known.contains(&key.as_str()) {
                return unknown_field(scope, &key, known);
            }
        }
        Ok(Fields {
            src: Source::Object(obj),
            scope,
        })
    }

    fn path(&self, key: &str) -> String {
        format!("{}.{key}", self.scope)
    }

    /// The value at `key`; absent and `undefined` are the same.
    fn get(&self, key: &str) -> InputResult<Option<(Unknown<'e>, ValueType)>> {
        let v: Option<Unknown<'e>> = match &self.src {
            Source::Object(obj) => obj.get(key).map_err(napi_failure(self.scope))?,
            Source::SpecValues(values) => SPEC_KEYS
                .iter()
                .position(|k| *k == key)
                .and_then(|i| values.get(i).copied()),
        };
        match v {
            None => Ok(None),
            Some(v) => match v.get_type().map_err(napi_failure(self.scope))? {
                ValueType::Undefined => Ok(None),
                t => Ok(Some((v, t))),
            },
        }
    }

    fn string(&self, key: &str) -> InputResult<Option<String>> {
        match self.get(key)? {
            None => Ok(None),
            Some((v, ValueType::String)) => {
                // SAFETY: the value was just checked to be a string.
                Ok(Some(
                    unsafe { v.cast::<String>() }.map_err(napi_failure(self.scope))?,
                ))
            }
            Some((_, t)) => shape(self.path(key), format!("must be a string, got {}", type_name(t))),
        }
    }

    fn required_string(&self, key: &str, hint: &str) -> InputResult<String> {
        match self.string(key)? {
            Some(s) => Ok(s),
            None => shape(self.path(key), format!("is required{hint}")),
        }
    }

    fn number(&self, key: &str, field: Field) -> InputResult<Option<Num>> {
        match self.get(key)? {
            None => Ok(None),
            Some((v, ValueType::Number)) => {
                // SAFETY: the value was just checked to be a number.
                let n = unsafe { v.cast::<f64>() }.map_err(napi_failure(self.scope))?;
                Ok(Some(Num(n)))
            }
            Some((_, t)) => Err(InputError::Core(DshError::InvalidArgument {
                field,
                problem: format!("must be a number, got {}", type_name(t)),
            })),
        }
    }

    /// A record of strings (`env`, `dshEnv`); an `undefined` value is an
    /// absent key.
    fn record(&self, key: &str) -> InputResult<Option<BTreeMap<String, String>>> {
        let Some((v, t)) = self.get(key)? else {
            return Ok(None);
        };
        let path = self.path(key);
        let obj = plain_object(v, t, &path, "object of strings")?;
        let keys = Object::keys(&obj).map_err(napi_failure(self.scope))?;
        let inner = Fields {
            src: Source::Object(obj),
            scope: self.scope,
        };
        let mut out = BTreeMap::new();
        for k in keys {
            match inner.get(&k)? {
                None => {}
                Some((v, ValueType::String)) => {
                    // SAFETY: the value was just checked to be a string.
                    let s = unsafe { v.cast::<String>() }.map_err(napi_failure(self.scope))?;
                    out.insert(k, s);
                }
                Some((_, t)) => {
                    return shape(
                        format!("{path}.{k}"),
                        format!("must be a string, got {}", type_name(t)),
                    )
                }
            }
        }
        Ok(Some(out))
    }

    /// `stdin`: a string, or a Buffer for bytes that are not text, or
    /// `{ pipe: true }` for a pipe that stays open for `writeStdin`.
    /// Returns the bytes and whether it is the pipe.
    fn stdin(&self) -> InputResult<(Option<Vec<u8>>, bool)> {
        let Some((v, t)) = self.get("stdin")? else {
            return Ok((None, false));
        };
        if t == ValueType::String {
            return Ok((self.string("stdin")?.map(String::into_bytes), false));
        }
        if v.is_buffer().unwrap_or(false) {
            // SAFETY: the value was just checked to be a Buffer.
            let b = unsafe { v.cast::<BufferSlice>() }.map_err(napi_failure(self.scope))?;
            return Ok((Some(b.to_vec()), false));
        }
        if t == ValueType::Object {
            let path = self.path("stdin");
            let pipe = Fields::new(
                v,
                if self.scope == "request" {
                    "request.stdin"
                } else {
                    "spec.stdin"
                },
                &["pipe"],
            )?;
            return match pipe.get("pipe")? {
                Some((p, ValueType::Boolean)) if p.coerce_to_bool().map_err(napi_failure(self.scope))? => {
                    Ok((None, true))
                }
                _ => shape(path, "as an object must be { pipe: true }".to_owned()),
            };
        }
        shape(
            self.path("stdin"),
            format!(
                "must be a string, a Buffer or {{ pipe: true }}, got {}",
                type_name(t)
            ),
        )
    }

    /// `onExpiry`: `'kill'` or `'background'`.
    fn on_expiry(&self, f: Field) -> InputResult<Option<OnExpiry>> {
        match self.string("onExpiry")? {
            None => Ok(None),
            Some(name) => Ok(Some(OnExpiry::parse(f, &name)?)),
        }
    }

    /// A list of strings (`argv`).
    fn strings(&self, key: &str) -> InputResult<Option<Vec<String>>> {
        let Some((v, t)) = self.get(key)? else {
            return Ok(None);
        };
        let path = self.path(key);
        if !v.is_array().unwrap_or(false) {
            return shape(path, format!("must be an array of strings, got {}", type_name(t)));
        }
        // SAFETY: the value was just checked to be an array (an object).
        let arr = unsafe { v.cast::<Object<'e>>() }.map_err(napi_failure(self.scope))?;
        let len: u32 = arr
            .get_named_property("length")
            .map_err(napi_failure(self.scope))?;
        let mut out = Vec::with_capacity(len as usize);
        for i in 0..len {
            let item: Unknown<'e> = arr.get_element(i).map_err(napi_failure(self.scope))?;
            match item.get_type().map_err(napi_failure(self.scope))? {
                ValueType::String => {
                    // SAFETY: the value was just checked to be a string.
                    let s = unsafe { item.cast::<String>() }.map_err(napi_failure(self.scope))?;
                    out.push(s)
                }
                t => {
                    return shape(
                        format!("{path}[{i}]"),
                        format!("must be a string, got {}", type_name(t)),
                    )
                }
            }
        }
        Ok(Some(out))
    }

    fn policy(&self, f: Field) -> InputResult<Option<SandboxPolicyInput>> {
        let Some((v, _)) = self.get("sandboxPolicy")? else {
            return Ok(None);
        };
        let scope = if self.scope == "request" {
            "request.sandboxPolicy"
        } else {
            "spec.sandboxPolicy"
        };
        let p = Fields::new(v, scope, &["mode", "workspaceRoot", "sessionId", "network"])?;
        let mode = p.required_string("mode", "")?;
        Ok(Some(SandboxPolicyInput {
            mode: SandboxMode::parse(f, &mode)?,
            workspace_root: p.string("workspaceRoot")?.map(Into::into),
            session_id: p.string("sessionId")?,
            network: p
                .string("network")?
                .map(|n| NetworkPolicy::parse(f, &n))
                .transpose()?,
        }))
    }

    /// `limits`: an object of `memoryBytes`, `processes`, `cpuSeconds`,
    /// `fileSizeBytes`, `openFiles` (each optional, nothing else).
    fn limits(&self, scope: Scope) -> InputResult<Option<LimitsInput>> {
        let Some((v, _)) = self.get("limits")? else {
            return Ok(None);
        };
        let path = match scope {
            Scope::Config => "config.limits",
            Scope::Request => "request.limits",
            Scope::Spec => "spec.limits",
            Scope::Terminal => "terminal.limits",
            Scope::Spawn => "spawn.limits",
        };
        let keys: Vec<&str> = LimitKind::ALL.iter().map(|k| limit_key(*k)).collect();
        let l = Fields::new(v, path, &keys)?;
        let mut out = LimitsInput::default();
        for kind in LimitKind::ALL {
            out.set(kind, l.number(limit_key(kind), Field::new(scope, kind.field()))?);
        }
        Ok(Some(out))
    }
}

/// The camelCase key of a limit in `limits`.
fn limit_key(kind: LimitKind) -> &'static str {
    kind.field().name(NameStyle::Camel).trim_start_matches("limits.")
}

/// The name of a limit as results carry it, the same token in every face:
/// `memory`, `processes`, `cpu`, `file_size`, `open_files`.
fn limit_name(kind: LimitKind) -> &'static str {
    kind.as_str()
}

/// `limitsEnforcement`: limit name → mechanism.
pub(crate) fn enforcement_object<'e>(env: &'e Env, e: &LimitsEnforcement) -> Result<Object<'e>> {
    let mut o = Object::new(env)?;
    for (kind, m) in e.entries() {
        o.set_named_property(limit_name(kind), m.as_str())?;
    }
    Ok(o)
}

/// The ending's limit name, for a process.
pub(crate) fn limit_str(kind: Option<LimitKind>) -> Option<&'static str> {
    kind.map(limit_name)
}

impl Fields<'_> {}

/// A napi call that failed while reading an input (a throwing getter, a
/// proxy): reported against the object being read.
fn napi_failure(scope: &'static str) -> impl Fn(Error) -> InputError {
    move |e| InputError::Shape {
        path: scope.to_owned(),
        problem: format!("could not be read: {}", e.reason),
    }
}

/// A terminal request: the published `SubprocessTerminalSpawnSpec`'s keys
/// (`argv`, `cwd`, `env`, `rows`, `cols`, `graceMs`, `signal`) and ours
/// (`command`, `dshEnv`, `sandboxPolicy`). `signal` is read by the JS layer.
const TERMINAL_KEYS: &[&str] = &[
    "argv",
    "command",
    "cwd",
    "env",
    "dshEnv",
    "rows",
    "cols",
    "graceMs",
    "signal",
    "sandboxPolicy",
];

pub(crate) fn terminal_request(r: Unknown<'_>) -> InputResult<dsh_core::TerminalRequest> {
    let r = Fields::new(r, "request", TERMINAL_KEYS)?;
    let f = |name| Field::new(Scope::Request, name);
    let program = match (r.strings("argv")?, r.string("command")?) {
        (Some(argv), None) => dsh_core::TerminalProgram::Argv(argv),
        (None, Some(command)) => dsh_core::TerminalProgram::Command(command),
        (Some(_), Some(_)) => return shape("request", "must give argv or command, not both"),
        (None, None) => return shape("request.argv", "is required (or command, a line for bash)"),
    };
    Ok(dsh_core::TerminalRequest {
        program,
        cwd: r.string("cwd")?.map(Into::into),
        env: r.record("env")?,
        dsh_env: r.record("dshEnv")?,
        rows: r.number("rows", f(FieldName::Rows))?,
        cols: r.number("cols", f(FieldName::Cols))?,
        grace_ms: r.number("graceMs", f(FieldName::GraceMs))?,
        sandbox_policy: r.policy(f(FieldName::SandboxPolicy))?,
    })
}

const CONFIG_KEYS: &[&str] = &[
    "cwd",
    "timeoutMs",
    "maxTimeoutMs",
    "maxOutputBytes",
    "maxSpillBytes",
    "retainSettled",
    "graceMs",
    "spillDir",
    "sandboxMode",
    "limits",
];

/// The request and the spec share their keys; `signal` is read by the JS
/// layer (it is an AbortSignal, not data).
pub(crate) const SPEC_KEYS: &[&str] = &[
    "command",
    "workdir",
    "timeoutMs",
    "stdoutMaxBytes",
    "signal",
    "stdin",
    "env",
    "dshEnv",
    "owner",
    "sandboxPolicy",
    "onExpiry",
    "limits",
];

pub(crate) fn config_input(c: Option<Unknown<'_>>) -> InputResult<dsh_core::ConfigInput> {
    let Some(c) = c.filter(|c| !matches!(c.get_type(), Ok(ValueType::Undefined | ValueType::Null))) else {
        return Ok(Default::default());
    };
    let c = Fields::new(c, "config", CONFIG_KEYS)?;
    let f = |name| Field::new(Scope::Config, name);
    Ok(dsh_core::ConfigInput {
        cwd: c.string("cwd")?,
        timeout_ms: c.number("timeoutMs", f(FieldName::TimeoutMs))?,
        max_timeout_ms: c.number("maxTimeoutMs", f(FieldName::MaxTimeoutMs))?,
        max_output_bytes: c.number("maxOutputBytes", f(FieldName::MaxOutputBytes))?,
        max_spill_bytes: c.number("maxSpillBytes", f(FieldName::MaxSpillBytes))?,
        retain_settled: c.number("retainSettled", f(FieldName::RetainSettled))?,
        grace_ms: c.number("graceMs", f(FieldName::GraceMs))?,
        spill_dir: c.string("spillDir")?,
        sandbox_mode: c
            .string("sandboxMode")?
            .map(|m| SandboxMode::parse(f(FieldName::SandboxMode), &m))
            .transpose()?,
        limits: c.limits(Scope::Config)?,
    })
}

pub(crate) fn request(r: Unknown<'_>) -> InputResult<dsh_core::Request> {
    let r = Fields::new(r, "request", SPEC_KEYS)?;
    let f = |name| Field::new(Scope::Request, name);
    let (stdin, stdin_pipe) = r.stdin()?;
    Ok(dsh_core::Request {
        command: r.required_string("command", "")?,
        workdir: r.string("workdir")?.map(Into::into),
        timeout_ms: r.number("timeoutMs", f(FieldName::TimeoutMs))?,
        stdout_max_bytes: r.number("stdoutMaxBytes", f(FieldName::StdoutMaxBytes))?,
        stdin,
        stdin_pipe,
        on_expiry: r.on_expiry(f(FieldName::OnExpiry))?,
        env: r.record("env")?,
        dsh_env: r.record("dshEnv")?,
        owner: r.string("owner")?,
        sandbox_policy: r.policy(f(FieldName::SandboxPolicy))?,
        limits: r.limits(Scope::Request)?,
    })
}

/// A spec as JS holds it (built by `resolve()`, ours or the harness's, and
/// possibly extended with `signal`), read by `index.js`: its values in
/// [`SPEC_KEYS`] order, or the first of its keys that is not one of them.
pub(crate) fn spec_values(
    values: Option<Vec<Unknown<'_>>>,
    unknown: Option<String>,
) -> InputResult<dsh_core::Spec> {
    match (values, unknown) {
        (_, Some(key)) => unknown_field("spec", &key, SPEC_KEYS),
        (Some(values), None) if values.len() == SPEC_KEYS.len() => spec_from(Fields {
            src: Source::SpecValues(values),
            scope: "spec",
        }),
        _ => shape("spec", "was passed to the addon in a shape it does not know (index.js and the addon are from different builds)".to_owned()),
    }
}

fn spec_from(s: Fields<'_>) -> InputResult<dsh_core::Spec> {
    let f = |name| Field::new(Scope::Spec, name);
    const UNRESOLVED: &str = " (a spec comes from resolve(); pass the request through it first)";
    let required_number = |key, name| -> InputResult<u64> {
        match s.number(key, f(name))? {
            Some(n) => Ok(whole_number(f(name), n, MAX_SAFE_INTEGER)?),
            None => shape(s.path(key), format!("is required{UNRESOLVED}")),
        }
    };
    let (stdin, stdin_pipe) = s.stdin()?;
    Ok(dsh_core::Spec {
        command: s.required_string("command", UNRESOLVED)?,
        workdir: s.required_string("workdir", UNRESOLVED)?.into(),
        timeout_ms: required_number("timeoutMs", FieldName::TimeoutMs)?,
        stdout_max_bytes: required_number("stdoutMaxBytes", FieldName::StdoutMaxBytes)?,
        stdin,
        stdin_pipe,
        // Absent is the default: a spec from the harness's own resolve has
        // no such key.
        on_expiry: s.on_expiry(f(FieldName::OnExpiry))?.unwrap_or_default(),
        env: s.record("env")?,
        dsh_env: s.record("dshEnv")?,
        owner: s.string("owner")?,
        sandbox_policy: s
            .policy(f(FieldName::SandboxPolicy))?
            .map(|p| {
                Ok::<_, InputError>(dsh_core::SandboxPolicy {
                    mode: p.mode,
                    workspace_root: match p.workspace_root {
                        Some(root) => root,
                        None => {
                            return shape(
                                "spec.sandboxPolicy.workspaceRoot",
                                format!("is required{UNRESOLVED}"),
                            )
                        }
                    },
                    session_id: p.session_id,
                    network: p.network.unwrap_or_default(),
                })
            })
            .transpose()?,
        limits: match s.limits(Scope::Spec)? {
            Some(l) => l.validate(Scope::Spec)?,
            None => Default::default(),
        },
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

/// A path as a JS string. The core's paths are bytes; one that is not UTF-8
/// (a process cwd named so) cannot be a JS string without changing which
/// directory it names, so it is refused, naming the field, rather than
/// handed out lossily.
fn js_path<'p>(env: &Env, field: FieldName, p: &'p std::path::Path) -> Result<&'p str> {
    p.to_str().ok_or_else(|| {
        let e = DshError::InvalidArgument {
            field: Field::new(Scope::Request, field),
            problem: format!(
                "is not valid UTF-8, which a JS string cannot carry: {}",
                p.display()
            ),
        };
        js_error(env, &e)
    })
}

pub(crate) fn spec_object<'e>(env: &'e Env, s: &dsh_core::Spec) -> Result<Object<'e>> {
    let mut o = Object::new(env)?;
    o.set_named_property("command", s.command.as_str())?;
    o.set_named_property("workdir", js_path(env, FieldName::Workdir, &s.workdir)?)?;
    o.set_named_property("timeoutMs", s.timeout_ms as f64)?;
    o.set_named_property("stdoutMaxBytes", s.stdout_max_bytes as f64)?;
    if let Some(stdin) = &s.stdin {
        // The harness's stdin is a string; bytes that are not UTF-8 stay bytes.
        match std::str::from_utf8(stdin) {
            Ok(text) => o.set_named_property("stdin", text)?,
            Err(_) => o.set_named_property("stdin", Buffer::from(stdin.clone()))?,
        }
    }
    if s.stdin_pipe {
        let mut pipe = Object::new(env)?;
        pipe.set_named_property("pipe", true)?;
        o.set_named_property("stdin", pipe)?;
    }
    // Only when it is not the default, so that a spec for a request without
    // it is the harness's spec exactly.
    if s.on_expiry != OnExpiry::Kill {
        o.set_named_property("onExpiry", s.on_expiry.as_str())?;
    }
    if let Some(env_map) = &s.env {
        o.set_named_property("env", map_object(env, env_map)?)?;
    }
    if let Some(m) = &s.dsh_env {
        o.set_named_property("dshEnv", map_object(env, m)?)?;
    }
    // Optional: an absent owner adds no key (the harness's spec has none).
    set_some(&mut o, "owner", s.owner.as_deref())?;
    // Required-but-nullable: always present, possibly undefined.
    match &s.sandbox_policy {
        Some(p) => {
            let mut po = Object::new(env)?;
            po.set_named_property("mode", p.mode.as_str())?;
            po.set_named_property(
                "workspaceRoot",
                js_path(env, FieldName::SandboxPolicy, &p.workspace_root)?,
            )?;
            set_some(&mut po, "sessionId", p.session_id.as_deref())?;
            // `allow`, the default, adds no key: the harness's shape.
            if p.network != NetworkPolicy::Allow {
                po.set_named_property("network", p.network.as_str())?;
            }
            o.set_named_property("sandboxPolicy", po)?;
        }
        None => o.set_named_property("sandboxPolicy", ())?,
    }
    if !s.limits.is_empty() {
        let mut lo = Object::new(env)?;
        for (kind, v) in s.limits.entries() {
            lo.set_named_property(limit_key(kind), v as f64)?;
        }
        o.set_named_property("limits", lo)?;
    }
    Ok(o)
}

pub(crate) fn sandbox_object<'e>(env: &'e Env, s: &dsh_core::SandboxInfo) -> Result<Object<'e>> {
    let mut o = Object::new(env)?;
    o.set_named_property("mode", s.mode.as_str())?;
    o.set_named_property("denied", s.denied)?;
    set_some(&mut o, "enforcement", s.enforcement.map(|e| e.as_str()))?;
    o.set_named_property("metadata", s.metadata)?;
    set_some(&mut o, "runnerFailed", s.runner_failed)?;
    if s.network != NetworkPolicy::Allow {
        o.set_named_property("network", s.network.as_str())?;
    }
    set_some(
        &mut o,
        "networkEnforcement",
        s.network_enforcement.map(|e| e.as_str()),
    )?;
    Ok(o)
}

/// The layout of a run result's flat list, defined once: `index.js` reads
/// each value at the index of its name in `runResultSlots()`, so the two
/// sides cannot drift (a name it does not find fails at load).
macro_rules! run_result_slots {
    ($($slot:ident = $name:literal,)*) => {
        #[derive(Clone, Copy)]
        enum Slot { $($slot,)* }
        pub(crate) const RUN_RESULT_SLOTS: &[&str] = &[$($name,)*];
    };
}
run_result_slots! {
    ExitCode = "exitCode",
    Signal = "signal",
    ExitStatusUnavailable = "exitStatusUnavailable",
    TimedOut = "timedOut",
    Aborted = "aborted",
    TimeoutMs = "timeoutMs",
    StdoutText = "stdout.text",
    StdoutTruncated = "stdout.truncated",
    StdoutSpillPath = "stdout.spillPath",
    StdoutSpillError = "stdout.spillError",
    StderrText = "stderr.text",
    StderrTruncated = "stderr.truncated",
    StderrSpillPath = "stderr.spillPath",
    StderrSpillError = "stderr.spillError",
    Sandbox = "sandbox",
    Survivors = "survivors",
    BackgroundId = "backgroundId",
    Limit = "limit",
    LimitsEnforcement = "limitsEnforcement",
}

/// A run's result as the flat list `runResult` in `index.js` turns into
/// the harness's object (one napi call per value instead of a property
/// set, and no key strings):
/// `[exitCode, signal, exitStatusUnavailable, timedOut, aborted, timeoutMs,
///   stdout.text, stdout.truncated, stdout.spillPath, stdout.spillError,
///   stderr.text, stderr.truncated, stderr.spillPath, stderr.spillError,
///   sandbox, survivors, backgroundId, limit, limitsEnforcement]`,
/// with `null` for what is absent.
pub(crate) fn run_result_values<'e>(env: &'e Env, r: &dsh_core::RunResult) -> Result<Array<'e>> {
    let mut a = env.create_array(RUN_RESULT_SLOTS.len() as u32)?;
    a.set(Slot::ExitCode as u32, r.exit_code)?;
    a.set(Slot::Signal as u32, r.signal.as_deref())?;
    a.set(Slot::ExitStatusUnavailable as u32, r.exit_status_unavailable)?;
    a.set(Slot::TimedOut as u32, r.timed_out)?;
    a.set(Slot::Aborted as u32, r.aborted)?;
    a.set(Slot::TimeoutMs as u32, r.timeout_ms as f64)?;
    let streams = [
        (
            &r.stdout,
            [
                Slot::StdoutText,
                Slot::StdoutTruncated,
                Slot::StdoutSpillPath,
                Slot::StdoutSpillError,
            ],
        ),
        (
            &r.stderr,
            [
                Slot::StderrText,
                Slot::StderrTruncated,
                Slot::StderrSpillPath,
                Slot::StderrSpillError,
            ],
        ),
    ];
    for (c, [text, truncated, spill_path, spill_error]) in streams {
        a.set(text as u32, c.text.as_str())?;
        a.set(truncated as u32, c.truncated)?;
        a.set(spill_path as u32, c.spill_path.as_deref())?;
        a.set(spill_error as u32, c.spill_error.as_deref())?;
    }
    a.set(
        Slot::Sandbox as u32,
        r.sandbox.as_ref().map(|s| sandbox_object(env, s)).transpose()?,
    )?;
    a.set(Slot::Survivors as u32, r.survivors)?;
    a.set(Slot::BackgroundId as u32, r.background_id.as_deref())?;
    a.set(Slot::Limit as u32, limit_str(r.limit))?;
    a.set(
        Slot::LimitsEnforcement as u32,
        (!r.limits_enforcement.is_empty())
            .then(|| enforcement_object(env, &r.limits_enforcement))
            .transpose()?,
    )?;
    Ok(a)
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

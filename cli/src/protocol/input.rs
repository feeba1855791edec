//! Parameters in: JSON objects read into the core's inputs. Every key must
//! be one the shape knows (a misspelt `work_dir` is an error naming
//! `request.work_dir`, never ignored), a wrong type names the field, and
//! the values themselves are judged by the core (`resolve`, `Spec::check`),
//! so each rule stays in one place.

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine as _;
use dsh_core::{
    whole_number, ConfigInput, DshError, Field, FieldName, LimitKind, Limits, LimitsInput, NameStyle,
    NetworkPolicy, Num, OnExpiry, Request, SandboxMode, SandboxPolicy, SandboxPolicyInput, Scope, Spec,
    MAX_SAFE_INTEGER,
};
use serde_json::{json, Map, Value};

use super::frame::{type_of, RpcError, EXECUTOR_ERROR, INVALID_PARAMS};

/// Why a call failed: a parameter of the wrong shape (an unknown key, a
/// wrong type), or the core's own error.
#[derive(Debug)]
pub enum Fault {
    Shape { field: String, problem: String },
    Core(DshError),
    Rpc(RpcError),
}

impl From<DshError> for Fault {
    fn from(e: DshError) -> Self {
        Fault::Core(e)
    }
}

pub type Outcome<T> = Result<T, Fault>;

fn shape<T>(field: impl Into<String>, problem: impl Into<String>) -> Outcome<T> {
    Err(Fault::Shape {
        field: field.into(),
        problem: problem.into(),
    })
}

impl Fault {
    /// The one mapping of an error to a JSON-RPC error object: `data.code`
    /// is the core's code (`INVALID_ARGUMENT`, `NOT_FOUND`, `ENOENT`, …),
    /// with `field`, `errno`, `reason`, `id` and `limit` where they apply.
    pub fn to_rpc(&self) -> RpcError {
        match self {
            Fault::Rpc(e) => e.clone(),
            Fault::Shape { field, problem } => RpcError {
                code: INVALID_PARAMS,
                message: format!("{field} {problem}"),
                data: Some(json!({ "code": "INVALID_ARGUMENT", "field": field })),
            },
            Fault::Core(e) => {
                let mut data = json!({ "code": e.code() });
                let code = match e {
                    DshError::InvalidArgument { field, .. } => {
                        data["field"] = json!(field.path(NameStyle::Snake));
                        INVALID_PARAMS
                    }
                    DshError::Spawn { errno, .. } => {
                        data["errno"] = json!(errno);
                        EXECUTOR_ERROR
                    }
                    DshError::StdinClosed { id, why } => {
                        data["id"] = json!(id);
                        data["reason"] = json!(why.as_str());
                        EXECUTOR_ERROR
                    }
                    DshError::NotFound(id) | DshError::StillRunning(id) => {
                        data["id"] = json!(id);
                        EXECUTOR_ERROR
                    }
                    DshError::LimitUnavailable { limit, .. } => {
                        data["limit"] = json!(limit.as_str());
                        EXECUTOR_ERROR
                    }
                    _ => EXECUTOR_ERROR,
                };
                RpcError {
                    code,
                    message: e.message(NameStyle::Snake),
                    data: Some(data),
                }
            }
        }
    }
}

/// One JSON object read by its keys, with `scope` as the path of its fields
/// in errors (`request`, `spec.limits`).
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    scope: String,
}

impl<'a> Fields<'a> {
    pub fn new(value: &'a Value, scope: &str, known: &[&str]) -> Outcome<Fields<'a>> {
        let Value::Object(map) = value else {
            return shape(scope, format!("must be an object, got {}", type_of(value)));
        };
        Self::of(map, scope, known)
    }

    pub fn of(map: &'a Map<String, Value>, scope: &str, known: &[&str]) -> Outcome<Fields<'a>> {
        let fields = Fields {
            map,
            scope: scope.to_owned(),
        };
        if let Some(key) = map.keys().find(|k| !known.contains(&k.as_str())) {
            let expected = match known {
                [] => "it takes no parameters".to_owned(),
                _ => format!("expected one of: {}", known.join(", ")),
            };
            return shape(fields.path(key), format!("is not a known field ({expected})"));
        }
        Ok(fields)
    }

    pub fn path(&self, key: &str) -> String {
        if self.scope.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.scope)
        }
    }

    /// The value at `key`; absent and `null` are the same.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub fn required(&self, key: &str) -> Outcome<&'a Value> {
        match self.get(key) {
            Some(v) => Ok(v),
            None => shape(self.path(key), "is required"),
        }
    }

    /// A required key whose value may be `null` (a spec's `owner`).
    pub fn present(&self, key: &str) -> Outcome<Option<&'a Value>> {
        match self.map.get(key) {
            Some(v) => Ok(Some(v).filter(|v| !v.is_null())),
            None => shape(self.path(key), "is required (null for none)"),
        }
    }

    pub fn string(&self, key: &str) -> Outcome<Option<String>> {
        self.get(key).map(|v| self.as_string(key, v)).transpose()
    }

    pub fn required_string(&self, key: &str) -> Outcome<String> {
        self.as_string(key, self.required(key)?)
    }

    fn as_string(&self, key: &str, v: &Value) -> Outcome<String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            other => shape(
                self.path(key),
                format!("must be a string, got {}", type_of(other)),
            ),
        }
    }

    pub fn bool(&self, key: &str) -> Outcome<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => shape(
                self.path(key),
                format!("must be a boolean, got {}", type_of(other)),
            ),
        }
    }

    /// A number for the core to judge (`field` names it in the core's
    /// error); any other type is refused here, naming the same field.
    pub fn number(&self, key: &str, field: Field) -> Outcome<Option<Num>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(Some(Num(n.as_f64().unwrap_or(f64::NAN)))),
            Some(other) => Err(Fault::Core(DshError::InvalidArgument {
                field,
                problem: format!("must be a number, got {}", type_of(other)),
            })),
        }
    }

    /// A whole number a spec carries (already resolved): the core's one
    /// numeric rule.
    pub fn whole(&self, key: &str, field: Field) -> Outcome<u64> {
        let n = self.number(key, field)?;
        match n {
            Some(n) => Ok(whole_number(field, n, MAX_SAFE_INTEGER)?),
            None => shape(self.path(key), "is required"),
        }
    }

    /// Bytes as base64 text.
    pub fn base64(&self, key: &str) -> Outcome<Option<Vec<u8>>> {
        let Some(text) = self.string(key)? else {
            return Ok(None);
        };
        decode_base64(&self.path(key), &text).map(Some)
    }

    /// An object of strings (`env`, `dsh_env`).
    pub fn strings(&self, key: &str) -> Outcome<Option<BTreeMap<String, String>>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let path = self.path(key);
        let Value::Object(map) = v else {
            return shape(path, format!("must be an object of strings, got {}", type_of(v)));
        };
        let mut out = BTreeMap::new();
        for (k, v) in map {
            match v {
                Value::String(s) => {
                    out.insert(k.clone(), s.clone());
                }
                other => {
                    return shape(
                        format!("{path}.{k}"),
                        format!("must be a string, got {}", type_of(other)),
                    )
                }
            }
        }
        Ok(Some(out))
    }
}

pub fn decode_base64(path: &str, text: &str) -> Outcome<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .or_else(|e| shape(path, format!("must be base64 (RFC 4648, padded): {e}")))
}

pub fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

const CONFIG_KEYS: &[&str] = &[
    "cwd",
    "timeout_ms",
    "max_timeout_ms",
    "max_output_bytes",
    "max_spill_bytes",
    "grace_ms",
    "spill_dir",
    "retain_settled",
    "sandbox_mode",
    "limits",
];

/// A configuration (docs/configuration.md); absent fields take their
/// defaults in the core.
pub fn config(v: Option<&Value>) -> Outcome<ConfigInput> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(ConfigInput::default());
    };
    let c = Fields::new(v, "config", CONFIG_KEYS)?;
    let f = |name| Field::new(Scope::Config, name);
    Ok(ConfigInput {
        cwd: c.string("cwd")?,
        timeout_ms: c.number("timeout_ms", f(FieldName::TimeoutMs))?,
        max_timeout_ms: c.number("max_timeout_ms", f(FieldName::MaxTimeoutMs))?,
        max_output_bytes: c.number("max_output_bytes", f(FieldName::MaxOutputBytes))?,
        max_spill_bytes: c.number("max_spill_bytes", f(FieldName::MaxSpillBytes))?,
        grace_ms: c.number("grace_ms", f(FieldName::GraceMs))?,
        spill_dir: c.string("spill_dir")?,
        retain_settled: c.number("retain_settled", f(FieldName::RetainSettled))?,
        sandbox_mode: c
            .string("sandbox_mode")?
            .map(|m| SandboxMode::parse(f(FieldName::SandboxMode), &m))
            .transpose()?,
        limits: limits_input(&c, Scope::Config)?,
    })
}

const REQUEST_KEYS: &[&str] = &[
    "command",
    "workdir",
    "timeout_ms",
    "stdout_max_bytes",
    "stdin",
    "stdin_base64",
    "stdin_pipe",
    "on_expiry",
    "env",
    "dsh_env",
    "owner",
    "sandbox_policy",
    "limits",
];

/// A request (docs/requests.md). `stdin` is text, `stdin_base64` bytes;
/// at most one of them, and neither with `stdin_pipe`.
pub fn request(v: &Value) -> Outcome<Request> {
    let r = Fields::new(v, "request", REQUEST_KEYS)?;
    let f = |name| Field::new(Scope::Request, name);
    let stdin = match (r.string("stdin")?, r.base64("stdin_base64")?) {
        (Some(_), Some(_)) => return shape("request.stdin_base64", "cannot be given with request.stdin"),
        (text, bytes) => text.map(String::into_bytes).or(bytes),
    };
    Ok(Request {
        command: r.required_string("command")?,
        workdir: r.string("workdir")?.map(PathBuf::from),
        timeout_ms: r.number("timeout_ms", f(FieldName::TimeoutMs))?,
        stdout_max_bytes: r.number("stdout_max_bytes", f(FieldName::StdoutMaxBytes))?,
        stdin,
        stdin_pipe: r.bool("stdin_pipe")?.unwrap_or(false),
        on_expiry: r
            .string("on_expiry")?
            .map(|s| OnExpiry::parse(f(FieldName::OnExpiry), &s))
            .transpose()?,
        env: r.strings("env")?,
        dsh_env: r.strings("dsh_env")?,
        owner: r.string("owner")?,
        sandbox_policy: policy_input(&r, Scope::Request)?,
        limits: limits_input(&r, Scope::Request)?,
    })
}

pub const SPEC_KEYS: &[&str] = &[
    "command",
    "workdir",
    "timeout_ms",
    "stdout_max_bytes",
    "stdin_base64",
    "stdin_pipe",
    "on_expiry",
    "env",
    "dsh_env",
    "owner",
    "sandbox_policy",
    "limits",
];

/// A spec as `resolve` returned it: every key present (`null` where it has
/// no value), checked by the core's `Spec::check` when it is run.
pub fn spec(v: &Value) -> Outcome<Spec> {
    let s = Fields::new(v, "spec", SPEC_KEYS)?;
    let f = |name| Field::new(Scope::Spec, name);
    for key in SPEC_KEYS {
        s.present(key)?;
    }
    let policy = match s.get("sandbox_policy") {
        None => None,
        Some(p) => {
            let p = Fields::new(
                p,
                "spec.sandbox_policy",
                &["mode", "workspace_root", "session_id", "network"],
            )?;
            let field = f(FieldName::SandboxPolicy);
            Some(SandboxPolicy {
                mode: SandboxMode::parse(field, &p.required_string("mode")?)?,
                workspace_root: PathBuf::from(p.required_string("workspace_root")?),
                session_id: p.string("session_id")?,
                network: NetworkPolicy::parse(field, &p.required_string("network")?)?,
            })
        }
    };
    let limits = match limits_input(&s, Scope::Spec)? {
        Some(l) => l.validate(Scope::Spec)?,
        None => Limits::default(),
    };
    Ok(Spec {
        command: s.required_string("command")?,
        workdir: PathBuf::from(s.required_string("workdir")?),
        timeout_ms: s.whole("timeout_ms", f(FieldName::TimeoutMs))?,
        stdout_max_bytes: s.whole("stdout_max_bytes", f(FieldName::StdoutMaxBytes))?,
        stdin: s.base64("stdin_base64")?,
        stdin_pipe: s.bool("stdin_pipe")?.unwrap_or(false),
        on_expiry: OnExpiry::parse(f(FieldName::OnExpiry), &s.required_string("on_expiry")?)?,
        env: s.strings("env")?,
        dsh_env: s.strings("dsh_env")?,
        owner: s.string("owner")?,
        sandbox_policy: policy,
        limits,
    })
}

/// `sandbox_policy` of a request: `mode`, and optionally `workspace_root`,
/// `session_id`, `network`.
pub fn policy_input(r: &Fields<'_>, scope: Scope) -> Outcome<Option<SandboxPolicyInput>> {
    let Some(v) = r.get("sandbox_policy") else {
        return Ok(None);
    };
    let field = Field::new(scope, FieldName::SandboxPolicy);
    let p = Fields::new(
        v,
        &r.path("sandbox_policy"),
        &["mode", "workspace_root", "session_id", "network"],
    )?;
    Ok(Some(SandboxPolicyInput {
        mode: SandboxMode::parse(field, &p.required_string("mode")?)?,
        workspace_root: p.string("workspace_root")?.map(PathBuf::from),
        session_id: p.string("session_id")?,
        network: p
            .string("network")?
            .map(|n| NetworkPolicy::parse(field, &n))
            .transpose()?,
    }))
}

/// The key of a limit in `limits`: `memory_bytes`, `processes`, …
pub fn limit_key(kind: LimitKind) -> &'static str {
    kind.field().name(NameStyle::Snake).trim_start_matches("limits.")
}

fn limits_input(r: &Fields<'_>, scope: Scope) -> Outcome<Option<LimitsInput>> {
    let Some(v) = r.get("limits") else {
        return Ok(None);
    };
    let keys: Vec<&str> = LimitKind::ALL.iter().map(|k| limit_key(*k)).collect();
    let l = Fields::new(v, &r.path("limits"), &keys)?;
    let mut out = LimitsInput::default();
    for kind in LimitKind::ALL {
        out.set(kind, l.number(limit_key(kind), Field::new(scope, kind.field()))?);
    }
    Ok(Some(out))
}

/// The bytes of a write: `data` (text) or `data_base64` (bytes), one of them.
pub fn data(p: &Fields<'_>) -> Outcome<Vec<u8>> {
    match (p.string("data")?, p.base64("data_base64")?) {
        (Some(text), None) => Ok(text.into_bytes()),
        (None, Some(bytes)) => Ok(bytes),
        (Some(_), Some(_)) => shape("data_base64", "cannot be given with data"),
        (None, None) => shape("data", "is required (text), or data_base64 (bytes)"),
    }
}

/// The `id` of a by-id call.
pub fn id(params: &Fields<'_>) -> Outcome<String> {
    params.required_string("id")
}

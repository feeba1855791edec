//! Results out: the core's values as the JSON documents of
//! docs/protocol.md. Structs are destructured without `..`, so a field the
//! core adds is a compile error here rather than silently missing.

use std::path::Path;

use dsh_core::{
    limits_support, metadata_unavailable, Config, Limits, LimitsEnforcement, OffsetRead, OutputOffsets,
    Process, ProcessRead, RunResult, Spec,
};
use serde_json::{json, Map, Value};

use super::input::{encode_base64, limit_key, Fault, Outcome};
use crate::json::{sandbox_json, EnforcementJson};

/// A path as protocol text. The protocol carries paths as UTF-8: one that
/// is not (a directory named in another encoding) is refused by name.
pub fn path_text(field: &str, path: &Path) -> Outcome<String> {
    match path.to_str() {
        Some(s) => Ok(s.to_owned()),
        None => Err(Fault::Shape {
            field: field.to_owned(),
            problem: format!("is not UTF-8 ({path:?}); the protocol carries paths as text"),
        }),
    }
}

fn limits_json(limits: &Limits) -> Value {
    let mut m = Map::new();
    for (kind, v) in limits.entries() {
        m.insert(limit_key(kind).to_owned(), json!(v));
    }
    Value::Object(m)
}

fn enforcement_json(e: &LimitsEnforcement) -> Value {
    serde_json::to_value(EnforcementJson(*e)).unwrap_or(Value::Null)
}

pub fn spec_json(spec: &Spec) -> Outcome<Value> {
    let Spec {
        command,
        workdir,
        timeout_ms,
        stdout_max_bytes,
        stdin,
        stdin_pipe,
        on_expiry,
        env,
        dsh_env,
        owner,
        sandbox_policy,
        limits,
    } = spec;
    let policy = match sandbox_policy {
        None => Value::Null,
        Some(p) => json!({
            "mode": p.mode.as_str(),
            "workspace_root": path_text("spec.sandbox_policy.workspace_root", &p.workspace_root)?,
            "session_id": p.session_id,
            "network": p.network.as_str(),
        }),
    };
    Ok(json!({
        "command": command,
        "workdir": path_text("spec.workdir", workdir)?,
        "timeout_ms": timeout_ms,
        "stdout_max_bytes": stdout_max_bytes,
        "stdin_base64": stdin.as_deref().map(encode_base64),
        "stdin_pipe": stdin_pipe,
        "on_expiry": on_expiry.as_str(),
        "env": env,
        "dsh_env": dsh_env,
        "owner": owner,
        "sandbox_policy": policy,
        "limits": limits_json(limits),
    }))
}

pub fn run_result_json(r: &RunResult) -> Value {
    // The shape `dsh-cli --json` and `dsh run --json` print, one place.
    serde_json::to_value(crate::json::run_result_json(r)).unwrap_or(Value::Null)
}

/// A background process as it is now: every fact, live.
pub fn process_json(p: &Process) -> Value {
    json!({
        "id": p.id(),
        "command": p.command(),
        "owner": p.owner(),
        "status": p.status().as_str(),
        "settled": p.is_settled(),
        "exit_code": p.exit_code(),
        "signal": p.signal(),
        "exit_status_unavailable": p.exit_status_unavailable(),
        "survivors": p.survivors(),
        "sandbox": p.sandbox().as_ref().map(sandbox_json),
        "limit": p.limit().map(|l| l.as_str()),
        "limits_enforcement": enforcement_json(&p.limits_enforcement()),
        "has_stdin_pipe": p.has_stdin_pipe(),
        "output": offsets_json(&p.output_offsets()),
    })
}

fn offsets_json(o: &OutputOffsets) -> Value {
    let OutputOffsets {
        stdout_read,
        stderr_read,
        stdout_end,
        stderr_end,
    } = o;
    json!({
        "stdout_read": stdout_read,
        "stderr_read": stderr_read,
        "stdout_end": stdout_end,
        "stderr_end": stderr_end,
    })
}

pub fn offset_read_json(r: &OffsetRead) -> Value {
    let OffsetRead {
        text,
        next_offset,
        lossy,
        spill_path,
        spill_error,
    } = r;
    json!({
        "text": text,
        "next_offset": next_offset,
        "lossy": lossy,
        "spill_path": spill_path,
        "spill_error": spill_error,
    })
}

pub fn read_json(r: &ProcessRead) -> Value {
    let ProcessRead {
        delta,
        lossy,
        stdout_spill_path,
        stderr_spill_path,
        stdout_spill_error,
        stderr_spill_error,
    } = r;
    json!({
        "delta": delta,
        "lossy": lossy,
        "stdout_spill_path": stdout_spill_path,
        "stderr_spill_path": stderr_spill_path,
        "stdout_spill_error": stdout_spill_error,
        "stderr_spill_error": stderr_spill_error,
    })
}

/// The configuration in force, every field explicit (the client resolves
/// nothing itself: this is for display and for checks).
pub fn config_json(c: &Config) -> Outcome<Value> {
    let Config {
        cwd,
        timeout_ms,
        max_timeout_ms,
        max_output_bytes,
        max_spill_bytes,
        grace_ms,
        spill_dir,
        retain_settled,
        sandbox_mode,
        limits,
    } = c;
    Ok(json!({
        "cwd": cwd.as_deref().map(|p| path_text("config.cwd", p)).transpose()?,
        "timeout_ms": timeout_ms,
        "max_timeout_ms": max_timeout_ms,
        "max_output_bytes": max_output_bytes,
        "max_spill_bytes": max_spill_bytes,
        "grace_ms": grace_ms,
        "spill_dir": path_text("config.spill_dir", spill_dir)?,
        "retain_settled": retain_settled,
        "sandbox_mode": sandbox_mode.map(|m| m.as_str()),
        "limits": limits_json(limits),
    }))
}

/// What this host can do: each limit's mechanism, and whether confined
/// commands get read-only mounts.
pub fn host_facts() -> Value {
    let support = limits_support();
    let mut limits = Map::new();
    for (kind, m) in support.entries() {
        limits.insert(kind.as_str().to_owned(), json!(m.as_str()));
    }
    json!({
        "limits_support": limits,
        "metadata_unavailable": metadata_unavailable(),
    })
}

/// A stream's name on the wire, as `read_from` takes it.
pub fn stream_name(stream: dsh_core::OutputStream) -> &'static str {
    match stream {
        dsh_core::OutputStream::Stdout => "stdout",
        dsh_core::OutputStream::Stderr => "stderr",
    }
}

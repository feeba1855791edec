//! The JSON shapes `dsh-cli --json`, `dsh run --json` and the protocol
//! (`dsh serve`) share. Fields
//! serialize in the order written, and `None` as `null`.

use dsh_core::{CollectedOutput, Enforcement, LimitsEnforcement, RunResult, SandboxInfo};
use serde::{Serialize, Serializer};

/// A command's sandbox facts.
#[derive(Serialize)]
pub struct SandboxJson {
    mode: &'static str,
    denied: bool,
    enforcement: Option<&'static str>,
    metadata: bool,
    runner_failed: Option<bool>,
    network: &'static str,
    network_enforcement: Option<&'static str>,
}

/// Only the limits that were set, in the core's order: `{"memory":"cgroup-v1"}`.
pub struct EnforcementJson(pub LimitsEnforcement);

impl Serialize for EnforcementJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.entries().map(|(kind, m)| (kind.as_str(), m.as_str())))
    }
}

/// Destructured without `..`, so a fact the core adds is a compile error
/// here rather than silently missing from the JSON.
pub fn sandbox_json(s: &SandboxInfo) -> SandboxJson {
    let SandboxInfo {
        mode,
        denied,
        enforcement,
        metadata,
        runner_failed,
        network,
        network_enforcement,
    } = s;
    SandboxJson {
        mode: mode.as_str(),
        denied: *denied,
        enforcement: enforcement.map(Enforcement::as_str),
        metadata: *metadata,
        runner_failed: *runner_failed,
        network: network.as_str(),
        network_enforcement: network_enforcement.map(Enforcement::as_str),
    }
}

/// Destructured without `..`, so a field the core adds is a compile error
/// here rather than silently missing from the JSON.
pub fn run_result_json(r: &RunResult) -> ResultJson<'_> {
    let RunResult {
        exit_code,
        signal,
        exit_status_unavailable,
        timed_out,
        aborted,
        timeout_ms,
        stdout,
        stderr,
        sandbox,
        survivors,
        background_id,
        limit,
        limits_enforcement,
    } = r;
    let json = ResultJson {
        exit_code: *exit_code,
        signal: signal.as_deref(),
        exit_status_unavailable: *exit_status_unavailable,
        timed_out: *timed_out,
        aborted: *aborted,
        timeout_ms: *timeout_ms,
        stdout: output_json(stdout),
        stderr: output_json(stderr),
        sandbox: sandbox.as_ref().map(sandbox_json),
        survivors: *survivors,
        background_id: background_id.as_deref(),
        limit: limit.map(|l| l.as_str()),
        limits_enforcement: EnforcementJson(*limits_enforcement),
    };
    json
}

/// The `--json` object. Fields serialize in the order written, and `None`
/// as `null`; strings are escaped as RFC 8259 requires and otherwise kept
/// as UTF-8 (the core's text is already valid UTF-8).
#[derive(Serialize)]
pub struct ResultJson<'a> {
    exit_code: Option<i32>,
    signal: Option<&'a str>,
    exit_status_unavailable: bool,
    timed_out: bool,
    aborted: bool,
    timeout_ms: u64,
    stdout: OutputJson<'a>,
    stderr: OutputJson<'a>,
    sandbox: Option<SandboxJson>,
    survivors: u32,
    background_id: Option<&'a str>,
    limit: Option<&'static str>,
    limits_enforcement: EnforcementJson,
}

#[derive(Serialize)]
pub struct OutputJson<'a> {
    text: &'a str,
    truncated: bool,
    spill_path: Option<&'a str>,
    spill_error: Option<&'a str>,
}

fn output_json(o: &CollectedOutput) -> OutputJson<'_> {
    let CollectedOutput {
        text,
        truncated,
        spill_path,
        spill_error,
    } = o;
    OutputJson {
        text,
        truncated: *truncated,
        spill_path: spill_path.as_deref(),
        spill_error: spill_error.as_deref(),
    }
}

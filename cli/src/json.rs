//! The JSON shapes `dsh-cli --json` and `dsh run --json` share. Fields
//! serialize in the order written, and `None` as `null`.

use dsh_core::{Enforcement, LimitsEnforcement, SandboxInfo};
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

//! The sandbox vocabulary of the seeds (`SandboxMode`, `BashSandboxInfo`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::spec::error::{DshError, Field};

/// What a confined command may change on the filesystem (docs/sandbox.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SandboxMode {
    /// `read-only`: no file may be written, created or removed.
    ReadOnly,
    /// `workspace-write`: only under the workspace root, `/tmp` and the
    /// temp dir.
    WorkspaceWrite,
    /// `danger-full-access`: not confined.
    DangerFullAccess,
}

impl SandboxMode {
    /// The three modes.
    pub const ALL: [SandboxMode; 3] = [
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::DangerFullAccess,
    ];

    /// The mode's name: `read-only`, `workspace-write`,
    /// `danger-full-access`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
        }
    }

    /// Parses a mode name, naming `field` in the error.
    pub fn parse(field: Field, s: &str) -> Result<Self, DshError> {
        s.parse().map_err(|_| {
            DshError::invalid(
                field,
                format!(
                    "unknown sandbox mode {s:?} (expected read-only, workspace-write or danger-full-access)"
                ),
            )
        })
    }
}

impl FromStr for SandboxMode {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        SandboxMode::ALL.into_iter().find(|m| m.as_str() == s).ok_or(())
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a command may do on the network (docs/sandbox.md, "Network").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NetworkPolicy {
    /// `allow`: not restricted (the default).
    #[default]
    Allow,
    /// `deny`: no socket but Unix-domain ones; no TCP bind or connect; no
    /// `io_uring`.
    Deny,
    /// `loopback`: Unix sockets and 127.0.0.0/8 and ::1 only (cgroup BPF
    /// programs: needs root and cgroup v2, else fails closed).
    Loopback,
}

impl NetworkPolicy {
    /// The three policies.
    pub const ALL: [NetworkPolicy; 3] = [NetworkPolicy::Allow, NetworkPolicy::Deny, NetworkPolicy::Loopback];

    /// `allow`, `deny` or `loopback`.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkPolicy::Allow => "allow",
            NetworkPolicy::Deny => "deny",
            NetworkPolicy::Loopback => "loopback",
        }
    }

    /// Parses a policy name, naming `field` in the error.
    pub fn parse(field: Field, s: &str) -> Result<Self, DshError> {
        NetworkPolicy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                DshError::invalid(
                    field,
                    format!("unknown network policy {s:?} (expected allow, deny or loopback)"),
                )
            })
    }
}

impl fmt::Display for NetworkPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A per-call policy: the mode and the root that `workspace-write` opens
/// (absolute, without NUL bytes; not necessarily UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// The mode to confine the command with.
    pub mode: SandboxMode,
    /// The root `workspace-write` opens.
    pub workspace_root: PathBuf,
    /// The calling session's identity (the harness keys per-session sandbox
    /// state off it); carried, never interpreted here.
    pub session_id: Option<String>,
    /// What the command may do on the network (default `allow`).
    pub network: NetworkPolicy,
}

/// How completely the kernel enforced a mode's file effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// Landlock ABI 3 or later: every file effect the mode promises.
    Full,
    /// Landlock ABI 1 or 2: cross-directory links and renames (ABI 1) and
    /// truncation are not governed.
    Partial,
}

impl Enforcement {
    /// `"full"` or `"partial"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Full => "full",
            Enforcement::Partial => "partial",
        }
    }
}

/// Sandbox facts stamped on a result or a settled process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxInfo {
    /// The mode the command ran under.
    pub mode: SandboxMode,
    /// A conservative guess that the sandbox denied a file operation: a
    /// failed exit whose stderr shows a permission error.
    pub denied: bool,
    /// Absent exactly when `mode` is `danger-full-access`.
    pub enforcement: Option<Enforcement>,
    /// Metadata changes (`chmod`, `chown`, timestamps, extended
    /// attributes) were refused too outside the writable places: the
    /// command ran in read-only mounts of its own (docs/sandbox.md,
    /// "Metadata"). Never for `danger-full-access`.
    pub metadata: bool,
    /// Only on settled background processes: confinement could not be
    /// applied and the command never ran.
    pub runner_failed: Option<bool>,
    /// The network policy the command ran under.
    pub network: NetworkPolicy,
    /// How completely the kernel enforced it: absent exactly when the
    /// policy is `allow`.
    pub network_enforcement: Option<Enforcement>,
}

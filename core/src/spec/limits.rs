//! The governor's vocabulary (docs/limits.md): per-command resource limits,
//! the mechanism that enforces each one, and the limit that ended a
//! command.

use std::fmt;

use crate::spec::error::{DshError, Field, Result, Scope};
use crate::spec::number::{whole_number, Num, MAX_SAFE_INTEGER};

pub use crate::spec::error::LimitKind;

/// How the kernel enforces one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// A cgroup (v1 hierarchy) of the command's own, entered before exec.
    CgroupV1,
    /// A resource limit (`setrlimit`) set in the command's process before
    /// exec, inherited by every process it starts.
    Rlimit,
    /// This host cannot enforce the limit (a request for it fails closed).
    Unsupported,
}

impl Mechanism {
    /// `cgroup-v1`, `rlimit` or `unsupported`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::CgroupV1 => "cgroup-v1",
            Mechanism::Rlimit => "rlimit",
            Mechanism::Unsupported => "unsupported",
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Limits as numbers: every field optional, `None` meaning "no limit".
/// A value is a positive whole number (bytes, a count, or CPU seconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Bytes of memory (resident and swap, page cache included) the whole
    /// tree may use; past it the kernel's OOM killer acts and the command
    /// ends with `limit: memory`.
    pub memory_bytes: Option<u64>,
    /// Processes and threads alive at once in the whole tree; a fork past
    /// it fails and the command ends with `limit: processes`.
    pub processes: Option<u64>,
    /// CPU seconds per process (SIGXCPU at the limit, SIGKILL a second
    /// later).
    pub cpu_seconds: Option<u64>,
    /// Largest file a process may write, in bytes (SIGXFSZ past it).
    pub file_size_bytes: Option<u64>,
    /// Descriptors a process may hold (open(2) fails with EMFILE past it).
    pub open_files: Option<u64>,
}

impl Limits {
    /// The value set for `kind`.
    pub fn get(&self, kind: LimitKind) -> Option<u64> {
        match kind {
            LimitKind::Memory => self.memory_bytes,
            LimitKind::Processes => self.processes,
            LimitKind::Cpu => self.cpu_seconds,
            LimitKind::FileSize => self.file_size_bytes,
            LimitKind::OpenFiles => self.open_files,
        }
    }

    fn slot(&mut self, kind: LimitKind) -> &mut Option<u64> {
        match kind {
            LimitKind::Memory => &mut self.memory_bytes,
            LimitKind::Processes => &mut self.processes,
            LimitKind::Cpu => &mut self.cpu_seconds,
            LimitKind::FileSize => &mut self.file_size_bytes,
            LimitKind::OpenFiles => &mut self.open_files,
        }
    }

    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        LimitKind::ALL.iter().any(|k| self.get(*k).is_some())
    }

    /// The kinds that are set, in [`LimitKind::ALL`] order.
    pub fn set(&self) -> impl Iterator<Item = (LimitKind, u64)> + '_ {
        LimitKind::ALL
            .into_iter()
            .filter_map(|k| self.get(k).map(|v| (k, v)))
    }

    /// `self` tightened by `cap`: each limit is the smaller of the two, and
    /// a limit the cap sets is kept when `self` has none.
    pub(crate) fn clamped_by(&self, cap: &Limits) -> Limits {
        let mut out = Limits::default();
        for kind in LimitKind::ALL {
            *out.slot(kind) = match (self.get(kind), cap.get(kind)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        out
    }

    /// Checks every set value against the numeric rule, naming the field.
    pub(crate) fn check(&self, scope: Scope) -> Result<()> {
        for (kind, v) in self.set() {
            whole_number(Field::new(scope, kind.field()), Num(v as f64), MAX_SAFE_INTEGER)?;
        }
        Ok(())
    }
}

/// Limits as a caller gives them: raw numbers, validated by
/// [`LimitsInput::validate`] with the rule of every numeric field.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LimitsInput {
    /// See [`Limits::memory_bytes`].
    pub memory_bytes: Option<Num>,
    /// See [`Limits::processes`].
    pub processes: Option<Num>,
    /// See [`Limits::cpu_seconds`].
    pub cpu_seconds: Option<Num>,
    /// See [`Limits::file_size_bytes`].
    pub file_size_bytes: Option<Num>,
    /// See [`Limits::open_files`].
    pub open_files: Option<Num>,
}

impl LimitsInput {
    /// The raw value given for `kind`.
    pub fn get(&self, kind: LimitKind) -> Option<Num> {
        match kind {
            LimitKind::Memory => self.memory_bytes,
            LimitKind::Processes => self.processes,
            LimitKind::Cpu => self.cpu_seconds,
            LimitKind::FileSize => self.file_size_bytes,
            LimitKind::OpenFiles => self.open_files,
        }
    }

    /// Sets the raw value for `kind`.
    pub fn set(&mut self, kind: LimitKind, value: Option<Num>) {
        match kind {
            LimitKind::Memory => self.memory_bytes = value,
            LimitKind::Processes => self.processes = value,
            LimitKind::Cpu => self.cpu_seconds = value,
            LimitKind::FileSize => self.file_size_bytes = value,
            LimitKind::OpenFiles => self.open_files = value,
        }
    }

    /// Positive whole numbers (at most 2^53−1), else an error naming the
    /// field (`request.limits.memory_bytes must be a whole number, got 1.5`).
    pub fn validate(&self, scope: Scope) -> Result<Limits> {
        let mut out = Limits::default();
        for kind in LimitKind::ALL {
            if let Some(v) = self.get(kind) {
                *out.slot(kind) = Some(whole_number(
                    Field::new(scope, kind.field()),
                    v,
                    MAX_SAFE_INTEGER,
                )?);
            }
        }
        Ok(out)
    }
}

/// The mechanism of each limit a command ran with (`None`: not set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LimitsEnforcement {
    /// For `memory_bytes`.
    pub memory: Option<Mechanism>,
    /// For `processes`.
    pub processes: Option<Mechanism>,
    /// For `cpu_seconds`.
    pub cpu: Option<Mechanism>,
    /// For `file_size_bytes`.
    pub file_size: Option<Mechanism>,
    /// For `open_files`.
    pub open_files: Option<Mechanism>,
}

impl LimitsEnforcement {
    /// The mechanism of `kind`.
    pub fn get(&self, kind: LimitKind) -> Option<Mechanism> {
        match kind {
            LimitKind::Memory => self.memory,
            LimitKind::Processes => self.processes,
            LimitKind::Cpu => self.cpu,
            LimitKind::FileSize => self.file_size,
            LimitKind::OpenFiles => self.open_files,
        }
    }

    pub(crate) fn set(&mut self, kind: LimitKind, m: Mechanism) {
        let slot = match kind {
            LimitKind::Memory => &mut self.memory,
            LimitKind::Processes => &mut self.processes,
            LimitKind::Cpu => &mut self.cpu,
            LimitKind::FileSize => &mut self.file_size,
            LimitKind::OpenFiles => &mut self.open_files,
        };
        *slot = Some(m);
    }

    /// Whether no limit was set.
    pub fn is_empty(&self) -> bool {
        LimitKind::ALL.iter().all(|k| self.get(*k).is_none())
    }

    /// The kinds that were set, with their mechanism.
    pub fn entries(&self) -> impl Iterator<Item = (LimitKind, Mechanism)> + '_ {
        LimitKind::ALL
            .into_iter()
            .filter_map(|k| self.get(k).map(|m| (k, m)))
    }
}

/// The error for a limit this host cannot enforce (fail closed).
pub(crate) fn unavailable(kind: LimitKind, why: impl fmt::Display) -> DshError {
    DshError::LimitUnavailable {
        limit: kind,
        message: format!(
            "the {kind} limit (limits.{}) cannot be enforced here: {why}",
            kind.field()
                .name(crate::NameStyle::Snake)
                .trim_start_matches("limits.")
        ),
    }
}

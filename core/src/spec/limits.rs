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
    /// A cgroup (v2, the unified hierarchy) of the command's own, entered
    /// before exec.
    CgroupV2,
    /// A resource limit (`setrlimit`) set in the command's process before
    /// exec, inherited by every process it starts.
    Rlimit,
    /// This host cannot enforce the limit (a request for it fails closed).
    Unsupported,
}

impl Mechanism {
    /// `cgroup-v1`, `cgroup-v2`, `rlimit` or `unsupported`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::CgroupV1 => "cgroup-v1",
            Mechanism::CgroupV2 => "cgroup-v2",
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

/// One optional value per limit, `None` meaning "not set". Three
/// instances: [`Limits`] (the numbers), [`LimitsInput`] (the numbers as a
/// caller gives them) and [`LimitsEnforcement`] (the mechanism of each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PerLimit<T> {
    /// Bytes of memory (resident and swap, page cache included) the whole
    /// tree may use; past it the kernel's OOM killer acts and the command
    /// ends with `limit: memory`.
    pub memory_bytes: Option<T>,
    /// Processes and threads alive at once in the whole tree; a fork past
    /// it fails and the command ends with `limit: processes`.
    pub processes: Option<T>,
    /// CPU seconds per process (SIGXCPU at the limit, SIGKILL a second
    /// later).
    pub cpu_seconds: Option<T>,
    /// Largest file a process may write, in bytes (SIGXFSZ past it).
    pub file_size_bytes: Option<T>,
    /// Descriptors a process may hold (open(2) fails with EMFILE past it).
    pub open_files: Option<T>,
}

/// Limits as numbers: a value is a positive whole number (bytes, a count,
/// or CPU seconds); `None` is no limit.
pub type Limits = PerLimit<u64>;

/// Limits as a caller gives them: raw numbers, validated by
/// [`LimitsInput::validate`] with the rule of every numeric field.
pub type LimitsInput = PerLimit<Num>;

/// The mechanism of each limit a command ran with (`None`: not set).
pub type LimitsEnforcement = PerLimit<Mechanism>;

// Not derived: the derive would ask `T: Default`, and "not set" needs none.
impl<T> Default for PerLimit<T> {
    fn default() -> Self {
        PerLimit {
            memory_bytes: None,
            processes: None,
            cpu_seconds: None,
            file_size_bytes: None,
            open_files: None,
        }
    }
}

impl<T: Copy> PerLimit<T> {
    /// The value for `kind`.
    pub fn get(&self, kind: LimitKind) -> Option<T> {
        match kind {
            LimitKind::Memory => self.memory_bytes,
            LimitKind::Processes => self.processes,
            LimitKind::Cpu => self.cpu_seconds,
            LimitKind::FileSize => self.file_size_bytes,
            LimitKind::OpenFiles => self.open_files,
        }
    }

    /// Sets the value for `kind`.
    pub fn set(&mut self, kind: LimitKind, value: Option<T>) {
        let slot = match kind {
            LimitKind::Memory => &mut self.memory_bytes,
            LimitKind::Processes => &mut self.processes,
            LimitKind::Cpu => &mut self.cpu_seconds,
            LimitKind::FileSize => &mut self.file_size_bytes,
            LimitKind::OpenFiles => &mut self.open_files,
        };
        *slot = value;
    }

    /// Whether no value is set.
    pub fn is_empty(&self) -> bool {
        self.entries().next().is_none()
    }

    /// The kinds that are set, with their values, in [`LimitKind::ALL`]
    /// order.
    pub fn entries(&self) -> impl Iterator<Item = (LimitKind, T)> + '_ {
        LimitKind::ALL
            .into_iter()
            .filter_map(|k| self.get(k).map(|v| (k, v)))
    }
}

impl Limits {
    /// `self` tightened by `cap`: each limit is the smaller of the two, and
    /// a limit the cap sets is kept when `self` has none.
    pub(crate) fn clamped_by(&self, cap: &Limits) -> Limits {
        let mut out = Limits::default();
        for kind in LimitKind::ALL {
            let value = match (self.get(kind), cap.get(kind)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            out.set(kind, value);
        }
        out
    }

    /// Checks every set value against the numeric rule, and against `cap`
    /// (the executor's configured limits, which a spec may only tighten),
    /// naming the field.
    pub(crate) fn check_within(&self, cap: &Limits, scope: Scope) -> Result<()> {
        for (kind, v) in self.entries() {
            whole_number(Field::new(scope, kind.field()), Num(v as f64), MAX_SAFE_INTEGER)?;
        }
        for kind in LimitKind::ALL {
            if let Some(cap) = cap.get(kind) {
                let problem = match self.get(kind) {
                    Some(v) if v > cap => format!("must be no greater than {cap}, got {v}"),
                    None => format!("must be set: the executor limits it to {cap}"),
                    _ => continue,
                };
                return Err(DshError::invalid(Field::new(scope, kind.field()), problem));
            }
        }
        Ok(())
    }
}

impl LimitsInput {
    /// Positive whole numbers (at most 2^53−1), else an error naming the
    /// field (`request.limits.memory_bytes must be a whole number, got 1.5`).
    pub fn validate(&self, scope: Scope) -> Result<Limits> {
        let mut out = Limits::default();
        for kind in LimitKind::ALL {
            if let Some(v) = self.get(kind) {
                let n = whole_number(Field::new(scope, kind.field()), v, MAX_SAFE_INTEGER)?;
                out.set(kind, Some(n));
            }
        }
        Ok(out)
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

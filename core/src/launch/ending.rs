//! How a launched command ended: the status its supervisor reports, and
//! how that reads on a result (a run's, a background process's, a
//! terminal session's).

use crate::spec::limits::{LimitKind, LimitsEnforcement};

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitStatus {
    Code(i32),
    Signal(i32),
    /// Nobody could say: the supervisor that was the command's parent was
    /// itself killed.
    Unavailable,
}

pub(crate) fn signal_name(sig: i32) -> String {
    match nix::sys::signal::Signal::try_from(sig) {
        Ok(s) => s.as_str().to_owned(),
        Err(_) => format!("SIG{sig}"),
    }
}

/// How an ending reads on a result: exit code, signal name, or neither.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ExitFields {
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub unavailable: bool,
    pub limit: Option<LimitKind>,
    pub limits_enforcement: LimitsEnforcement,
    /// Stopped at its timeout (a spawned program's; a command's run result
    /// says it in its own field).
    pub timed_out: bool,
}

impl From<ExitStatus> for ExitFields {
    fn from(status: ExitStatus) -> Self {
        match status {
            ExitStatus::Code(c) => ExitFields {
                exit_code: Some(c),
                ..Default::default()
            },
            ExitStatus::Signal(s) => ExitFields {
                signal: Some(signal_name(s)),
                ..Default::default()
            },
            ExitStatus::Unavailable => ExitFields {
                unavailable: true,
                ..Default::default()
            },
        }
    }
}

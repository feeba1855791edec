//! Which limit ended a command (docs/limits.md, "What ended the command"):
//! the group's counters first, else the leader's death signal for a
//! per-process limit that was set, backed by the leader's own CPU time.

use crate::confine::governor::CommandGroup;
use crate::spec::limits::{LimitKind, Limits};

/// The own CPU time (user and system, every thread, not its children's)
/// of the process `pid`, read from `/proc/<pid>/stat`; the caller makes sure
/// the pid is still the command's leader (an unreaped zombie).
pub(crate) fn own_cpu_time(pid: libc::pid_t) -> Option<std::time::Duration> {
    let stat = crate::sys::proc::read(&format!("{pid}/stat")).ok()?;
    let mut fields = crate::sys::stat_fields(&stat);
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&h| h > 0)?;
    Some(std::time::Duration::from_nanos(
        (utime + stime).saturating_mul(1_000_000_000 / hz),
    ))
}

/// Which limit ended a command that was not stopped by the executor: the
/// group's counters, else the leader's death signal for a per-process
/// limit that was set. The leader's own CPU time (`leader_cpu`) backs a
/// CPU-limit signal: a SIGXCPU counts only when it had used at least half
/// the limit, a SIGKILL only when it had used the limit (so it had had its
/// SIGXCPU and survived it: the kernel's SIGKILL at the hard limit). The
/// margins are the kernel's: the limit is checked against tick-sampled CPU
/// time, which runs ahead of the time `/proc` reports by a few percent on a
/// busy machine. A SIGXCPU sent by `kill` early on is not a limit.
pub(crate) fn cause(
    limits: &Limits,
    group: Option<&CommandGroup>,
    signal: Option<i32>,
    leader_cpu: Option<std::time::Duration>,
) -> Option<LimitKind> {
    if let Some(kind) = group.and_then(CommandGroup::reached) {
        return Some(kind);
    }
    let used = |share: std::time::Duration| leader_cpu.is_some_and(|t| t >= share);
    match (signal, limits.cpu_seconds) {
        (Some(libc::SIGXCPU), Some(s)) if used(std::time::Duration::from_secs(s) / 2) => {
            return Some(LimitKind::Cpu)
        }
        (Some(libc::SIGKILL), Some(s)) if used(std::time::Duration::from_secs(s)) => {
            return Some(LimitKind::Cpu)
        }
        _ => {}
    }
    match signal {
        Some(libc::SIGXFSZ) if limits.file_size_bytes.is_some() => Some(LimitKind::FileSize),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_a_cause_only_for_a_limit_that_was_set() {
        let none = Limits::default();
        let secs = |s: u64| Some(std::time::Duration::from_secs(s));
        assert_eq!(cause(&none, None, Some(libc::SIGXCPU), secs(5)), None);
        let set = Limits {
            cpu_seconds: Some(1),
            file_size_bytes: Some(1),
            ..Limits::default()
        };
        let ms = |m: u64| Some(std::time::Duration::from_millis(m));
        // (the leader's signal, its CPU time, the cause, why)
        let cases = [
            (
                Some(libc::SIGXCPU),
                ms(1000),
                Some(LimitKind::Cpu),
                "SIGXCPU at the limit",
            ),
            (
                Some(libc::SIGXCPU),
                ms(400),
                None,
                "a SIGXCPU before the CPU time reached the limit was sent by someone",
            ),
            (Some(libc::SIGXCPU), None, None, "no CPU time known"),
            (
                Some(libc::SIGKILL),
                ms(1000),
                Some(LimitKind::Cpu),
                "the SIGKILL a second after SIGXCPU",
            ),
            (Some(libc::SIGKILL), ms(900), None, "a SIGKILL before the limit"),
            (Some(libc::SIGXFSZ), None, Some(LimitKind::FileSize), "SIGXFSZ"),
            (
                Some(libc::SIGKILL),
                None,
                None,
                "a SIGKILL with no CPU time known",
            ),
            (None, secs(9), None, "an exit, not a signal"),
        ];
        for (signal, cpu, expected, why) in cases {
            assert_eq!(cause(&set, None, signal, cpu), expected, "{why}");
        }
    }
}

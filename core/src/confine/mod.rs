//! Sandbox policy at run time: whether a policy can be enforced, the spawn
//! that enforces it, and the facts a result reports. Confined modes fail
//! closed: nothing runs unconfined by accident.

pub(crate) mod cause;
pub(crate) mod cgroupfs;
pub(crate) mod governor;
pub(crate) mod landlock;
pub(crate) mod netfilter;
pub(crate) mod unified;

use std::sync::{Arc, OnceLock};

use crate::spec::error::{DshError, Result};
use crate::spec::sandbox::{Enforcement, NetworkPolicy, SandboxInfo, SandboxMode, SandboxPolicy};

/// The policy when it confines files (`read-only`, `workspace-write`).
pub(crate) fn confined(policy: Option<&SandboxPolicy>) -> Option<&SandboxPolicy> {
    policy.filter(|p| p.mode != SandboxMode::DangerFullAccess)
}

fn network(policy: Option<&SandboxPolicy>) -> NetworkPolicy {
    policy.map(|p| p.network).unwrap_or_default()
}

/// Fail closed: a confined mode on a kernel without Landlock, a network
/// policy the kernel cannot enforce, is an error.
pub(crate) fn check(policy: Option<&SandboxPolicy>) -> Result<()> {
    if let Some(p) = confined(policy) {
        landlock::abi()
            .map_err(|why| DshError::SandboxUnavailable(format!("{} needs Landlock: {why}", p.mode)))?;
    }
    match network(policy) {
        NetworkPolicy::Allow => Ok(()),
        NetworkPolicy::Loopback => filter(NetworkPolicy::Loopback)
            .map_err(|why| DshError::SandboxUnavailable(format!("network loopback needs seccomp: {why}")))
            .and_then(|_| {
                crate::confine::netfilter::available().map_err(|why| {
                    DshError::SandboxUnavailable(format!("network loopback cannot be enforced here: {why}"))
                })
            }),
        NetworkPolicy::Deny => filter(NetworkPolicy::Deny)
            .map(|_| ())
            .map_err(|why| DshError::SandboxUnavailable(format!("network deny needs seccomp: {why}"))),
    }
}

/// The Landlock ruleset a command of `policy` restricts itself with before
/// it execs: the policy's file and network rules, and (ABI 6+) for every
/// command, confined or not, the scope that keeps its signals inside its
/// own tree (docs/host-death.md). `None`: nothing to restrict here. An
/// error means confinement cannot be applied, and nothing may run.
pub(crate) fn ruleset(policy: Option<&SandboxPolicy>) -> Result<Option<Arc<landlock::Ruleset>>> {
    let files = confined(policy);
    let deny_tcp =
        network(policy) == NetworkPolicy::Deny && landlock::abi().is_ok_and(|v| v >= landlock::NET_ABI);
    landlock::ruleset(files, deny_tcp).map_err(|failure| {
        let mode = policy.map_or(SandboxMode::DangerFullAccess, |p| p.mode);
        match &failure.refused {
            Some(e) => DshError::refused(&format!("{mode}: {}", failure.why), e),
            None => DshError::SandboxUnavailable(format!("{mode}: {}", failure.why)),
        }
    })
}

/// The compiled seccomp filter of a network policy (BPF instructions as
/// bytes), built once: `socket(2)` and `socketpair(2)` of any family but
/// `AF_UNIX` (`deny`), or but `AF_UNIX`, `AF_INET` and `AF_INET6`
/// (`loopback`, whose addresses the cgroup programs of `netfilter` check),
/// and every `io_uring` call (its operations run in the kernel, where no
/// filter sees them) fail with EACCES; a system call of another ABI (32-bit
/// x86, x32) too, as their numbers would slip past the rules.
fn filter(policy: NetworkPolicy) -> std::result::Result<&'static [u8], String> {
    static DENY: OnceLock<std::result::Result<Vec<u8>, String>> = OnceLock::new();
    static LOOPBACK: OnceLock<std::result::Result<Vec<u8>, String>> = OnceLock::new();
    let (cell, families): (_, &[libc::c_int]) = match policy {
        NetworkPolicy::Loopback => (&LOOPBACK, &[libc::AF_UNIX, libc::AF_INET, libc::AF_INET6]),
        _ => (&DENY, &[libc::AF_UNIX]),
    };
    cell.get_or_init(|| {
        seccomp_available()?;
        compile_filter(families)
    })
    .as_deref()
    .map_err(Clone::clone)
}

fn seccomp_available() -> std::result::Result<(), String> {
    const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
    let action: u32 = libc::SECCOMP_RET_ERRNO;
    // SAFETY: the call only reads the u32 it is given.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &action as *const u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(format!(
            "this kernel has no seccomp filters: {}",
            std::io::Error::last_os_error()
        ))
    }
}

fn compile_filter(families: &[libc::c_int]) -> std::result::Result<Vec<u8>, String> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    let arch = if cfg!(target_arch = "x86_64") {
        TargetArch::x86_64
    } else if cfg!(target_arch = "aarch64") {
        TargetArch::aarch64
    } else if cfg!(target_arch = "riscv64") {
        TargetArch::riscv64
    } else {
        return Err("no seccomp filter is built for this architecture".to_owned());
    };
    let bad = |e: seccompiler::BackendError| format!("cannot build the seccomp filter: {e}");
    // One rule whose conditions all hold (they are ANDed): the family is
    // none of the allowed ones.
    let other_family = || -> std::result::Result<Vec<SeccompRule>, String> {
        let conditions = families
            .iter()
            .map(|f| SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, *f as u64))
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad)?;
        Ok(vec![SeccompRule::new(conditions).map_err(bad)?])
    };
    let rules = [
        (libc::SYS_socket, other_family()?),
        (libc::SYS_socketpair, other_family()?),
        (libc::SYS_io_uring_setup, Vec::new()),
        (libc::SYS_io_uring_enter, Vec::new()),
        (libc::SYS_io_uring_register, Vec::new()),
    ]
    .into_iter()
    .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(bad)?;
    let mut program: BpfProgram = filter.try_into().map_err(bad)?;
    // seccompiler checks the architecture (a 32-bit x86 call kills the
    // process) but not x32 numbers on x86_64 (bit 30 set), which would
    // match no rule: refuse those right after the architecture check.
    if cfg!(target_arch = "x86_64") {
        const X32_SYSCALL_BIT: u32 = 0x4000_0000;
        let stmt = |code: u16, k: u32| seccompiler::sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        };
        let prelude = [
            stmt((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 0),
            seccompiler::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
                jt: 0,
                jf: 1,
                k: X32_SYSCALL_BIT,
            },
            stmt(
                (libc::BPF_RET | libc::BPF_K) as u16,
                libc::SECCOMP_RET_ERRNO | libc::EACCES as u32,
            ),
        ];
        program.splice(3..3, prelude);
    }
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for i in &program {
        bytes.extend_from_slice(&i.code.to_ne_bytes());
        bytes.push(i.jt);
        bytes.push(i.jf);
        bytes.extend_from_slice(&i.k.to_ne_bytes());
    }
    Ok(bytes)
}

/// The seccomp filter a command of `policy` installs before it execs.
pub(crate) fn network_filter(policy: Option<&SandboxPolicy>) -> Result<Option<Vec<u8>>> {
    match network(policy) {
        NetworkPolicy::Allow => Ok(None),
        p => filter(p)
            .map(|b| Some(b.to_vec()))
            .map_err(|why| DshError::SandboxUnavailable(format!("network {p} needs seccomp: {why}"))),
    }
}

/// How completely a network policy is enforced: `deny` is `full` with
/// Landlock's network rules (ABI 4+) on top of the filter (a TCP socket
/// received from elsewhere over a Unix socket still cannot bind or
/// connect), `partial` with the filter alone; `loopback` runs only with
/// all of its mechanisms, so it is `full`.
fn network_enforcement(policy: NetworkPolicy) -> Option<Enforcement> {
    match policy {
        NetworkPolicy::Allow => None,
        NetworkPolicy::Loopback => Some(Enforcement::Full),
        NetworkPolicy::Deny => Some(if landlock::abi().is_ok_and(|v| v >= landlock::NET_ABI) {
            Enforcement::Full
        } else {
            Enforcement::Partial
        }),
    }
}

/// The error for a command whose network filter failed in its own process.
pub(crate) fn network_failed(policy: Option<&SandboxPolicy>, errno: i32) -> DshError {
    DshError::SandboxUnavailable(format!(
        "network {}: cannot install the seccomp filter: {}",
        network(policy),
        std::io::Error::from_raw_os_error(errno)
    ))
}

/// The error for a command whose restriction failed in its own process.
pub(crate) fn restrict_failed(policy: Option<&SandboxPolicy>, errno: i32) -> DshError {
    let mode = confined(policy).map_or("sandbox".to_owned(), |p| p.mode.to_string());
    DshError::SandboxUnavailable(format!(
        "{mode}: cannot apply the Landlock ruleset: {}",
        std::io::Error::from_raw_os_error(errno)
    ))
}

/// The conservative denial classification: a failed exit (not a signal)
/// whose collected stderr carries a filesystem-permission signature, in any
/// case: C tools write "Permission denied", Node and Go "permission denied".
fn looks_denied(exit_code: Option<i32>, stderr: &str) -> bool {
    let stderr = stderr.to_ascii_lowercase();
    matches!(exit_code, Some(c) if c != 0)
        && [
            "permission denied",
            "read-only file system",
            "operation not permitted",
        ]
        .iter()
        .any(|sig| stderr.contains(sig))
}

/// The facts one policy reports; the enforcement level is the kernel's,
/// and absent for an unconfined mode; `metadata`: whether the command ran
/// in its read-only mounts (the launch knows).
fn info(policy: &SandboxPolicy, metadata: bool, denied: bool, runner_failed: Option<bool>) -> SandboxInfo {
    SandboxInfo {
        mode: policy.mode,
        denied,
        enforcement: confined(Some(policy)).and_then(|_| landlock::enforcement()),
        metadata: metadata && confined(Some(policy)).is_some(),
        runner_failed,
        network: policy.network,
        network_enforcement: network_enforcement(policy.network),
    }
}

/// Facts for a command that ran under `policy` (in its read-only mounts
/// when `metadata`).
pub(crate) fn facts(
    policy: Option<&SandboxPolicy>,
    metadata: bool,
    exit_code: Option<i32>,
    stderr: &str,
) -> Option<SandboxInfo> {
    let policy = policy?;
    let restricted = confined(Some(policy)).is_some() || policy.network != NetworkPolicy::Allow;
    let denied = restricted && looks_denied(exit_code, stderr);
    Some(info(policy, metadata, denied, None))
}

/// Facts for a background command whose confinement failed: it never ran.
pub(crate) fn runner_failed_facts(
    policy: Option<&SandboxPolicy>,
    runner_failed: bool,
) -> Option<SandboxInfo> {
    Some(info(policy?, false, false, runner_failed.then_some(true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The x32 prelude is spliced in at index 3, which is right only while
    /// seccompiler's program opens with its architecture check (load the
    /// arch, jump over the kill if it is ours, kill): this fails when a new
    /// seccompiler lays its program out otherwise.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_x32_prelude_sits_right_after_seccompilers_architecture_check() {
        const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
        let bytes = compile_filter(&[libc::AF_UNIX]).unwrap();
        let at = |i: usize| {
            let b = &bytes[i * 8..i * 8 + 8];
            (
                u16::from_ne_bytes([b[0], b[1]]),
                b[2],
                b[3],
                u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
            )
        };
        let (ld, abs, w) = (libc::BPF_LD as u16, libc::BPF_ABS as u16, libc::BPF_W as u16);
        let ret = (libc::BPF_RET | libc::BPF_K) as u16;
        let jeq = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
        let jge = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
        // seccompiler's: load seccomp_data.arch (offset 4), skip the kill on ours.
        assert_eq!(at(0), (ld | w | abs, 0, 0, 4));
        assert_eq!(at(1), (jeq, 1, 0, AUDIT_ARCH_X86_64));
        assert_eq!(at(2), (ret, 0, 0, libc::SECCOMP_RET_KILL_PROCESS));
        // Ours: load seccomp_data.nr, refuse x32 numbers.
        assert_eq!(at(3), (ld | w | abs, 0, 0, 0));
        assert_eq!(at(4), (jge, 0, 1, 0x4000_0000));
        assert_eq!(at(5), (ret, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EACCES as u32));
        // Then seccompiler's rules, which start by loading the number again.
        assert_eq!(at(6).0, ld | w | abs);
    }

    fn policy(mode: SandboxMode) -> SandboxPolicy {
        SandboxPolicy {
            mode,
            workspace_root: "/srv/ws".into(),
            session_id: None,
            network: NetworkPolicy::Allow,
        }
    }

    #[test]
    fn a_denial_is_a_failed_exit_with_a_permission_signature_on_stderr() {
        for stderr in [
            "cp: cannot create regular file '/etc/out': Permission denied\n",
            "bash: line 1: /usr/x: Read-only file system\n",
            "touch: setting times of 'x': Operation not permitted\n",
            "noise\nmore noise\nmkdir: cannot create directory 'd': Permission denied\ntrailer\n",
            "Error: EACCES: permission denied, open '/etc/x'\n",
            "open /etc/x: read-only file system\n",
            "PermissionError: [Errno 1] Operation not permitted: 'x'\n",
        ] {
            for code in [1, 2, 126, 255] {
                assert!(looks_denied(Some(code), stderr), "exit {code}: {stderr:?}");
            }
        }
    }

    #[test]
    fn never_a_denial_without_a_failed_exit_or_without_the_signature() {
        let signature = "sh: /etc/x: Permission denied\n";
        assert!(!looks_denied(Some(0), signature), "a clean exit is never denied");
        assert!(
            !looks_denied(None, signature),
            "a signal death (or an unknown status) is not an exit"
        );
        for stderr in [
            "",
            "cat: /nope: No such file or directory\n",
            "make: *** [all] Error 2\n",
            "Permission\ndenied\n",
        ] {
            assert!(!looks_denied(Some(1), stderr), "{stderr:?}");
        }
    }

    #[test]
    fn facts_only_for_a_policy_and_denied_only_when_confined() {
        let denied_stderr = "echo: write error: Permission denied\n";
        assert_eq!(
            facts(None, true, Some(1), denied_stderr),
            None,
            "no policy, no facts"
        );

        let full = facts(
            Some(&policy(SandboxMode::DangerFullAccess)),
            true,
            Some(1),
            denied_stderr,
        )
        .unwrap();
        assert_eq!(
            (
                full.mode,
                full.denied,
                full.enforcement,
                full.runner_failed,
                full.metadata
            ),
            (SandboxMode::DangerFullAccess, false, None, None, false),
            "an unconfined command is never classified as denied and reports no enforcement and no metadata"
        );

        for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
            let p = policy(mode);
            let info = facts(Some(&p), true, Some(1), denied_stderr).unwrap();
            assert!(info.metadata, "a confined command in its read-only mounts");
            assert!(!facts(Some(&p), false, Some(1), denied_stderr).unwrap().metadata);
            assert_eq!((info.mode, info.denied, info.runner_failed), (mode, true, None));
            assert_eq!(info.enforcement, landlock::enforcement(), "the kernel's level");
            assert!(!facts(Some(&p), true, Some(0), denied_stderr).unwrap().denied);
            assert!(!facts(Some(&p), true, None, denied_stderr).unwrap().denied);
            assert!(!facts(Some(&p), true, Some(1), "failed\n").unwrap().denied);
        }
    }

    #[test]
    fn runner_failed_facts_say_the_command_never_ran() {
        assert_eq!(runner_failed_facts(None, true), None);
        let p = policy(SandboxMode::WorkspaceWrite);
        let failed = runner_failed_facts(Some(&p), true).unwrap();
        assert_eq!(
            (failed.mode, failed.denied, failed.runner_failed),
            (SandboxMode::WorkspaceWrite, false, Some(true))
        );
        // A spawn failure that was not the sandbox's (a missing workdir).
        let other = runner_failed_facts(Some(&p), false).unwrap();
        assert_eq!((other.denied, other.runner_failed), (false, None));
    }
}

//! Limits and the network policy (docs/limits.md, docs/sandbox.md): the
//! setters of the config and the request, and the facts of a result or a
//! settled process.

use std::ffi::{c_char, c_int, CStr};

use dsh_core::{Field, FieldName, LimitKind, Mechanism, NetworkPolicy, Num, Scope};

use crate::builders::{DshConfig, DshRequest};
use crate::executor::DshSpec;
use crate::guard::{handle, status, text, value, DshStatus, FfiError};
use crate::results::{DshProcess, DshRunResult};
use crate::spawn::DshSpawned;

/// A limit (docs/limits.md). Setters take it as an `int`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DshLimit {
    /// No limit: what dsh_run_result_limit says when none ended the command.
    DSH_LIMIT_NONE = 0,
    /// Bytes of memory the command's whole tree may use.
    DSH_LIMIT_MEMORY = 1,
    /// Processes and threads the command's tree may have at once.
    DSH_LIMIT_PROCESSES = 2,
    /// CPU seconds per process.
    DSH_LIMIT_CPU = 3,
    /// The largest file a process may write, in bytes.
    DSH_LIMIT_FILE_SIZE = 4,
    /// Descriptors a process may hold.
    DSH_LIMIT_OPEN_FILES = 5,
}

/// How the kernel enforces one limit.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DshLimitMechanism {
    /// The limit was not set.
    DSH_MECHANISM_NONE = 0,
    /// A cgroup (v1 hierarchy) of the command's own.
    DSH_MECHANISM_CGROUP_V1 = 1,
    /// A resource limit (setrlimit) set before exec.
    DSH_MECHANISM_RLIMIT = 2,
    /// This host cannot enforce it (a request for it fails closed).
    DSH_MECHANISM_UNSUPPORTED = 3,
    /// A cgroup (v2, the unified hierarchy) of the command's own.
    DSH_MECHANISM_CGROUP_V2 = 4,
}

/// A network policy (docs/sandbox.md, "Network").
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DshNetwork {
    /// "allow": not restricted.
    DSH_NETWORK_ALLOW = 0,
    /// "deny": Unix-domain sockets only.
    DSH_NETWORK_DENY = 1,
    /// "loopback": 127.0.0.0/8 and ::1 only (needs root and cgroup v2).
    DSH_NETWORK_LOOPBACK = 2,
}

pub(crate) fn network(p: NetworkPolicy) -> DshNetwork {
    match p {
        NetworkPolicy::Allow => DshNetwork::DSH_NETWORK_ALLOW,
        NetworkPolicy::Deny => DshNetwork::DSH_NETWORK_DENY,
        NetworkPolicy::Loopback => DshNetwork::DSH_NETWORK_LOOPBACK,
    }
}

fn kind_of(limit: c_int) -> Option<LimitKind> {
    match limit {
        1 => Some(LimitKind::Memory),
        2 => Some(LimitKind::Processes),
        3 => Some(LimitKind::Cpu),
        4 => Some(LimitKind::FileSize),
        5 => Some(LimitKind::OpenFiles),
        _ => None,
    }
}

fn limit_of(kind: Option<LimitKind>) -> DshLimit {
    match kind {
        None => DshLimit::DSH_LIMIT_NONE,
        Some(LimitKind::Memory) => DshLimit::DSH_LIMIT_MEMORY,
        Some(LimitKind::Processes) => DshLimit::DSH_LIMIT_PROCESSES,
        Some(LimitKind::Cpu) => DshLimit::DSH_LIMIT_CPU,
        Some(LimitKind::FileSize) => DshLimit::DSH_LIMIT_FILE_SIZE,
        Some(LimitKind::OpenFiles) => DshLimit::DSH_LIMIT_OPEN_FILES,
    }
}

/// How `limit` was enforced for a settled process; none while it runs.
fn enforcement(process: Option<&dsh_core::Process>, limit: c_int) -> DshLimitMechanism {
    mechanism(
        process
            .zip(kind_of(limit))
            .and_then(|(p, k)| p.limits_enforcement().get(k)),
    )
}

fn mechanism(m: Option<Mechanism>) -> DshLimitMechanism {
    match m {
        None => DshLimitMechanism::DSH_MECHANISM_NONE,
        Some(Mechanism::CgroupV1) => DshLimitMechanism::DSH_MECHANISM_CGROUP_V1,
        Some(Mechanism::CgroupV2) => DshLimitMechanism::DSH_MECHANISM_CGROUP_V2,
        Some(Mechanism::Rlimit) => DshLimitMechanism::DSH_MECHANISM_RLIMIT,
        Some(Mechanism::Unsupported) => DshLimitMechanism::DSH_MECHANISM_UNSUPPORTED,
    }
}

fn bad_limit(limit: c_int) -> FfiError {
    FfiError::NotEnum("limit", "DshLimit", limit.into())
}

/// The limit's name: "memory", "processes", "cpu", "file_size",
/// "open_files"; NULL for DSH_LIMIT_NONE or an unknown value. Static.
#[no_mangle]
pub extern "C" fn dsh_limit_name(limit: c_int) -> *const c_char {
    match kind_of(limit) {
        Some(k) => match k {
            LimitKind::Memory => c"memory".as_ptr(),
            LimitKind::Processes => c"processes".as_ptr(),
            LimitKind::Cpu => c"cpu".as_ptr(),
            LimitKind::FileSize => c"file_size".as_ptr(),
            LimitKind::OpenFiles => c"open_files".as_ptr(),
        },
        None => std::ptr::null(),
    }
}

/// The mechanism's name: "none" (DSH_MECHANISM_NONE: no such limit was
/// set), "cgroup-v1", "cgroup-v2", "rlimit", "unsupported"; NULL only for a
/// value that is not a DshLimitMechanism. Static.
#[no_mangle]
pub extern "C" fn dsh_mechanism_name(mechanism: c_int) -> *const c_char {
    let s: Option<&'static CStr> = match mechanism {
        0 => Some(c"none"),
        1 => Some(c"cgroup-v1"),
        2 => Some(c"rlimit"),
        3 => Some(c"unsupported"),
        4 => Some(c"cgroup-v2"),
        _ => None,
    };
    s.map_or(std::ptr::null(), CStr::as_ptr)
}

/// How this host would enforce `limit` (a DshLimit): its mechanism, or
/// DSH_MECHANISM_UNSUPPORTED (a command asking for it fails with
/// DSH_LIMIT_UNAVAILABLE); DSH_MECHANISM_NONE for an unknown value.
#[no_mangle]
pub extern "C" fn dsh_limits_support(limit: c_int) -> DshLimitMechanism {
    value(DshLimitMechanism::DSH_MECHANISM_NONE, || {
        mechanism(kind_of(limit).and_then(|k| dsh_core::limits_support().get(k)))
    })
}

/// Why this host's confined commands run without their read-only mounts
/// (their facts say `metadata` false; docs/sandbox.md), as a NUL-terminated
/// string that lives as long as the process; NULL where they run in them.
#[no_mangle]
pub extern "C" fn dsh_metadata_unavailable() -> *const c_char {
    static WHY: std::sync::OnceLock<Option<std::ffi::CString>> = std::sync::OnceLock::new();
    value(std::ptr::null(), || {
        WHY.get_or_init(|| {
            dsh_core::metadata_unavailable()
                .map(|why| std::ffi::CString::new(why.replace('\0', " ")).unwrap_or_default())
        })
        .as_deref()
        .map_or(std::ptr::null(), CStr::as_ptr)
    })
}

/// Sets a limit every command gets, which is also the most a request may
/// ask for (`limit`: a DshLimit; `value`: bytes, a count or CPU seconds).
/// Checked when the executor is created.
///
/// # Safety
/// `config` is NULL or a live DshConfig from dsh_config_new that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_config_set_limit(
    config: *const DshConfig,
    limit: c_int,
    value: u64,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `config` is NULL or a live DshConfig
        // for the whole call (# Safety); `handle` refuses NULL.
        let c = unsafe { handle(config, "config") }?;
        let kind = kind_of(limit).ok_or_else(|| bad_limit(limit))?;
        let mut input = c.input.lock().unwrap_or_else(|e| e.into_inner());
        input
            .limits
            .get_or_insert_with(Default::default)
            .set(kind, Some(Num::from(value)));
        Ok(())
    })
}

/// Sets a limit for this call (`limit`: a DshLimit), clamped by resolve to
/// the configured one.
///
/// # Safety
/// `request` is NULL or a live DshRequest from dsh_request_new that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_set_limit(
    request: *const DshRequest,
    limit: c_int,
    value: u64,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `request` is NULL or a live
        // DshRequest for the whole call (# Safety); `handle` refuses NULL.
        let r = unsafe { handle(request, "request") }?;
        let kind = kind_of(limit).ok_or_else(|| bad_limit(limit))?;
        let mut input = r.input.lock().unwrap_or_else(|e| e.into_inner());
        input
            .limits
            .get_or_insert_with(Default::default)
            .set(kind, Some(Num::from(value)));
        Ok(())
    })
}

/// The network policy of the request's sandbox policy: "allow", "deny" or
/// "loopback". Call dsh_request_set_sandbox_policy first.
///
/// # Safety
/// `request` is NULL or a live DshRequest from dsh_request_new that no
/// thread frees during this call. `network` is NULL or a NUL-terminated
/// string readable for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_set_sandbox_network(
    request: *const DshRequest,
    network: *const c_char,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `request` is NULL or a live
        // DshRequest for the whole call (# Safety); `handle` refuses NULL.
        let r = unsafe { handle(request, "request") }?;
        let field = Field::new(Scope::Request, FieldName::SandboxPolicy);
        // SAFETY: the caller guarantees `network` is NULL or a
        // NUL-terminated string readable during the call (# Safety);
        // `parse` only borrows it within this statement.
        let policy = NetworkPolicy::parse(field, unsafe { text(network, "network") }?)?;
        let mut input = r.input.lock().unwrap_or_else(|e| e.into_inner());
        match input.sandbox_policy.as_mut() {
            Some(p) => {
                p.network = Some(policy);
                Ok(())
            }
            None => Err(FfiError::Core(dsh_core::DshError::InvalidArgument {
                field,
                problem: "must be set (dsh_request_set_sandbox_policy) before its network".into(),
            })),
        }
    })
}

/// True when the spec sets `limit` (a DshLimit); its value goes to `*out`
/// (may be NULL).
///
/// # Safety
/// `spec` is NULL or a live DshSpec that no thread frees during this call.
/// `out` is NULL or valid and aligned for writing one `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn dsh_spec_limit(spec: *const DshSpec, limit: c_int, out: *mut u64) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `spec` is NULL or a live DshSpec for
        // the whole call (# Safety); `as_ref` maps NULL to None.
        let Some(s) = (unsafe { spec.as_ref() }) else {
            return false;
        };
        let Some(v) = kind_of(limit).and_then(|k| s.spec.limits.get(k)) else {
            return false;
        };
        if !out.is_null() {
            // SAFETY: `out` is non-null and, per # Safety, aligned and
            // writable for one u64; `write` does not read the old contents.
            unsafe { out.write(v) };
        }
        true
    })
}

/// The limit that ended the command, as the kernel reported it;
/// DSH_LIMIT_NONE when none did.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_limit(result: *const DshRunResult) -> DshLimit {
    value(DshLimit::DSH_LIMIT_NONE, || {
        // SAFETY: the caller guarantees `result` is NULL or a live
        // DshRunResult for the whole call (# Safety).
        limit_of(unsafe { result.as_ref() }.and_then(|r| r.result.limit))
    })
}

/// How `limit` (a DshLimit) was enforced for this command;
/// DSH_MECHANISM_NONE when it was not set.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_limit_enforcement(
    result: *const DshRunResult,
    limit: c_int,
) -> DshLimitMechanism {
    value(DshLimitMechanism::DSH_MECHANISM_NONE, || {
        // SAFETY: the caller guarantees `result` is NULL or a live
        // DshRunResult for the whole call (# Safety).
        let r = unsafe { result.as_ref() };
        mechanism(
            r.zip(kind_of(limit))
                .and_then(|(r, k)| r.result.limits_enforcement.get(k)),
        )
    })
}

/// Once settled: the limit that ended it (see dsh_run_result_limit);
/// DSH_LIMIT_NONE while running and when none did.
///
/// # Safety
/// `process` is NULL or a live DshProcess (as for dsh_process_status); no
/// thread frees it during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_limit(process: *const DshProcess) -> DshLimit {
    value(DshLimit::DSH_LIMIT_NONE, || {
        // SAFETY: the caller guarantees `process` is NULL or a live
        // DshProcess for the whole call (# Safety).
        limit_of(unsafe { process.as_ref() }.and_then(|p| p.process.limit()))
    })
}

/// Once settled: how `limit` (a DshLimit) was enforced for it;
/// DSH_MECHANISM_NONE while running and when it was not set.
///
/// # Safety
/// `process` is NULL or a live DshProcess (as for dsh_process_status); no
/// thread frees it during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_limit_enforcement(
    process: *const DshProcess,
    limit: c_int,
) -> DshLimitMechanism {
    value(DshLimitMechanism::DSH_MECHANISM_NONE, || {
        // SAFETY: the caller guarantees `process` is NULL or a live
        // DshProcess for the whole call (# Safety).
        enforcement(unsafe { process.as_ref() }.map(|p| &p.process), limit)
    })
}

/// Once settled: the limit that ended the spawned program (see
/// dsh_run_result_limit); DSH_LIMIT_NONE while running and when none did.
///
/// # Safety
/// `spawned` is NULL or a live DshSpawned; no thread frees it during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawned_limit(spawned: *const DshSpawned) -> DshLimit {
    value(DshLimit::DSH_LIMIT_NONE, || {
        // SAFETY: the caller guarantees `spawned` is NULL or a live
        // DshSpawned for the whole call (# Safety).
        limit_of(unsafe { spawned.as_ref() }.and_then(|s| s.process.limit()))
    })
}

/// Once settled: how `limit` (a DshLimit) was enforced for the spawned
/// program; DSH_MECHANISM_NONE while running and when it was not set.
///
/// # Safety
/// `spawned` is NULL or a live DshSpawned; no thread frees it during this
/// call.
#[no_mangle]
pub unsafe extern "C" fn dsh_spawned_limit_enforcement(
    spawned: *const DshSpawned,
    limit: c_int,
) -> DshLimitMechanism {
    value(DshLimitMechanism::DSH_MECHANISM_NONE, || {
        // SAFETY: the caller guarantees `spawned` is NULL or a live
        // DshSpawned for the whole call (# Safety).
        enforcement(unsafe { spawned.as_ref() }.map(|s| &s.process), limit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C names are the core's names, for every mechanism.
    #[test]
    fn every_mechanism_has_the_core_name_in_c() {
        for m in [
            Mechanism::CgroupV1,
            Mechanism::CgroupV2,
            Mechanism::Rlimit,
            Mechanism::Unsupported,
        ] {
            // SAFETY: a non-NULL result is a static C string.
            let name = unsafe { CStr::from_ptr(dsh_mechanism_name(mechanism(Some(m)) as c_int)) };
            assert_eq!(name.to_str().unwrap(), m.as_str());
        }
        // SAFETY: as above.
        let none =
            unsafe { CStr::from_ptr(dsh_mechanism_name(DshLimitMechanism::DSH_MECHANISM_NONE as c_int)) };
        assert_eq!(none.to_str().unwrap(), "none");
        assert!(dsh_mechanism_name(5).is_null());
    }
}

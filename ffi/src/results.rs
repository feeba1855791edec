//! Read-only views: run results, process handles, reads, process lists and
//! sandbox facts. Every string is owned by its handle and valid until the
//! handle is freed.

use std::ffi::{c_int, CStr};
use std::sync::OnceLock;
use std::time::Duration;

use dsh_core::{Enforcement, Process, ProcessRead, RunResult, SandboxInfo, SandboxMode, Status};

use crate::guard::{
    bytes, free, handle, need_out, put, status, value, DshStatus, DshStr, FfiError, OwnedStr,
};

/// Which stream an accessor reads: the command's stdout.
pub const DSH_STDOUT: c_int = 1;
/// Which stream an accessor reads: the command's stderr.
pub const DSH_STDERR: c_int = 2;

/// Where a background process stands (docs/running.md).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DshProcessStatus {
    /// Not settled, and no stop requested.
    DSH_RUNNING = 0,
    /// Settled: exited by itself, with no stop requested.
    DSH_COMPLETED = 1,
    /// A stop was requested (at once, before it has exited), or it died
    /// from a signal, or it never started.
    DSH_KILLED = 2,
}

/// A sandbox mode (docs/sandbox.md).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DshSandboxMode {
    /// "read-only": no file may be written, created or removed.
    DSH_SANDBOX_READ_ONLY = 1,
    /// "workspace-write": only under the workspace root, /tmp and the temp
    /// dir.
    DSH_SANDBOX_WORKSPACE_WRITE = 2,
    /// "danger-full-access": not confined.
    DSH_SANDBOX_DANGER_FULL_ACCESS = 3,
}

/// How completely the kernel enforced a mode's file effects.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DshEnforcement {
    /// Nothing is confined (danger-full-access).
    DSH_ENFORCEMENT_NONE = 0,
    /// Landlock ABI 3 or later: every file effect the mode promises.
    DSH_ENFORCEMENT_FULL = 1,
    /// Landlock ABI 1 or 2: cross-directory links and renames, or
    /// truncation, are not governed.
    DSH_ENFORCEMENT_PARTIAL = 2,
}

/// Sandbox facts of a run result or a settled process.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DshSandboxInfo {
    /// The mode the command ran under.
    pub mode: DshSandboxMode,
    /// The failure looks like the sandbox denying a file operation.
    pub denied: bool,
    /// How completely the kernel enforced the mode.
    pub enforcement: DshEnforcement,
    /// Background only: confinement could not be applied; nothing ran.
    pub runner_failed: bool,
    /// The network policy the command ran under.
    pub network: crate::governor::DshNetwork,
    /// How completely the kernel enforced it: DSH_ENFORCEMENT_NONE exactly
    /// when the policy is "allow".
    pub network_enforcement: DshEnforcement,
    /// Metadata changes (chmod, chown, timestamps, extended attributes)
    /// were refused too outside the writable places: the command ran in
    /// read-only mounts of its own (docs/sandbox.md, "Metadata"). Never
    /// for "danger-full-access".
    pub metadata: bool,
}

pub(crate) fn mode_str(mode: SandboxMode) -> DshStr {
    let s: &'static CStr = match mode {
        SandboxMode::ReadOnly => c"read-only",
        SandboxMode::WorkspaceWrite => c"workspace-write",
        SandboxMode::DangerFullAccess => c"danger-full-access",
    };
    DshStr {
        ptr: s.as_ptr(),
        len: s.count_bytes(),
    }
}

fn sandbox_info(info: &SandboxInfo) -> DshSandboxInfo {
    DshSandboxInfo {
        mode: match info.mode {
            SandboxMode::ReadOnly => DshSandboxMode::DSH_SANDBOX_READ_ONLY,
            SandboxMode::WorkspaceWrite => DshSandboxMode::DSH_SANDBOX_WORKSPACE_WRITE,
            SandboxMode::DangerFullAccess => DshSandboxMode::DSH_SANDBOX_DANGER_FULL_ACCESS,
        },
        denied: info.denied,
        enforcement: match info.enforcement {
            None => DshEnforcement::DSH_ENFORCEMENT_NONE,
            Some(Enforcement::Full) => DshEnforcement::DSH_ENFORCEMENT_FULL,
            Some(Enforcement::Partial) => DshEnforcement::DSH_ENFORCEMENT_PARTIAL,
        },
        runner_failed: info.runner_failed.unwrap_or(false),
        network: crate::governor::network(info.network),
        network_enforcement: match info.network_enforcement {
            None => DshEnforcement::DSH_ENFORCEMENT_NONE,
            Some(Enforcement::Full) => DshEnforcement::DSH_ENFORCEMENT_FULL,
            Some(Enforcement::Partial) => DshEnforcement::DSH_ENFORCEMENT_PARTIAL,
        },
        metadata: info.metadata,
    }
}

/// Writes `info` to `*out` when both are present; true when `info` is.
///
/// # Safety
/// `out` is NULL or valid and aligned for writing one `DshSandboxInfo`.
unsafe fn write_sandbox(info: Option<&SandboxInfo>, out: *mut DshSandboxInfo) -> bool {
    let Some(info) = info else {
        return false;
    };
    if !out.is_null() {
        // SAFETY: `out` is non-null (checked above) and, per this fn's
        // contract, aligned and writable for one DshSandboxInfo. `write`
        // neither reads nor drops the old contents, which may be
        // uninitialised or zeroed (mode 0 is no DshSandboxMode): no
        // `&mut DshSandboxInfo` to them is made.
        unsafe { out.write(sandbox_info(info)) };
    }
    true
}

/// Writes `code` to `*out` when both are present; true when `code` is.
///
/// # Safety
/// `out` is NULL or valid and aligned for writing one `i32`.
unsafe fn write_code(code: Option<i32>, out: *mut i32) -> bool {
    if let (Some(c), false) = (code, out.is_null()) {
        // SAFETY: `out` is non-null (checked above) and, per this fn's
        // contract, aligned and writable for one `i32`. `write` does not
        // read the old contents, which may be uninitialised: no `&mut i32`
        // to them is made.
        unsafe { out.write(c) };
    }
    code.is_some()
}

/// The outcome of one foreground run.
pub struct DshRunResult {
    pub(crate) result: RunResult,
    text: [OwnedStr; 2],
    spill: [Option<OwnedStr>; 2],
    spill_error: [Option<OwnedStr>; 2],
    signal: Option<OwnedStr>,
    background_id: Option<OwnedStr>,
}

impl DshRunResult {
    pub(crate) fn new(result: RunResult) -> Self {
        DshRunResult {
            text: [
                OwnedStr::new(&result.stdout.text),
                OwnedStr::new(&result.stderr.text),
            ],
            spill: [
                result.stdout.spill_path.as_ref().map(OwnedStr::new),
                result.stderr.spill_path.as_ref().map(OwnedStr::new),
            ],
            spill_error: [
                result.stdout.spill_error.as_ref().map(OwnedStr::new),
                result.stderr.spill_error.as_ref().map(OwnedStr::new),
            ],
            signal: result.signal.as_ref().map(OwnedStr::new),
            background_id: result.background_id.as_ref().map(OwnedStr::new),
            result,
        }
    }

    fn stream(&self, stream: c_int) -> Option<usize> {
        match stream {
            DSH_STDOUT => Some(0),
            DSH_STDERR => Some(1),
            _ => None,
        }
    }
}

/// Frees a DshRunResult; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
///
/// # Safety
/// `result` is NULL or a DshRunResult from dsh_executor_run, not freed
/// before, and not in use by any other thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_free(result: *mut DshRunResult) {
    // SAFETY: the caller guarantees `result` is NULL or an unfreed DshRunResult
    // handed out by `put`, with no other user
    // (# Safety): `free`'s contract exactly.
    unsafe { free(result) }
}

/// True when the command exited normally; the code goes to `*code` (may be
/// NULL). False when it died from a signal.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call. `code` is NULL or valid and aligned for
/// writing one `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_exit_code(result: *const DshRunResult, code: *mut i32) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }.is_some_and(|r| {
            // SAFETY: the caller guarantees `code` is NULL or writable for
            // one `int32_t` (# Safety): `write_code`'s contract.
            unsafe { write_code(r.result.exit_code, code) }
        })
    })
}

/// True when the command ran and ended but nobody could say how (the
/// executor's supervisor, its parent, was itself killed): no exit code and
/// no signal then.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_exit_status_unavailable(result: *const DshRunResult) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }.is_some_and(|r| r.result.exit_status_unavailable)
    })
}

/// After a timeout, a cancellation or disposal: how many processes of the
/// command's tree were still alive when the stop finished (after the final
/// SIGKILL sweep). Expected 0; anything else is worth a warning. 0 for a
/// command that ended by itself.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_survivors(result: *const DshRunResult) -> u32 {
    value(0, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }.map_or(0, |r| r.result.survivors)
    })
}

/// The terminating signal's name ("SIGTERM"), or ABSENT.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_signal(result: *const DshRunResult) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }.map_or(DshStr::ABSENT, |r| OwnedStr::view_opt(&r.signal))
    })
}

/// The registry id ("bash-3") the run was handed over to when its timeout
/// was reached with on_expiry "background" (the command still runs: use
/// dsh_executor_get); ABSENT otherwise.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_background_id(result: *const DshRunResult) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }.map_or(DshStr::ABSENT, |r| OwnedStr::view_opt(&r.background_id))
    })
}

/// The executor's own timeout fired first.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_timed_out(result: *const DshRunResult) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }.is_some_and(|r| r.result.timed_out)
    })
}

/// The caller's cancellation (or disposal) fired first.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_aborted(result: *const DshRunResult) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }.is_some_and(|r| r.result.aborted)
    })
}

/// The effective timeout of the run.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_timeout_ms(result: *const DshRunResult) -> u64 {
    value(0, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }.map_or(0, |r| r.result.timeout_ms)
    })
}

/// The collected text of DSH_STDOUT or DSH_STDERR: the tail when truncated.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_text(result: *const DshRunResult, stream: c_int) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }
            .and_then(|r| r.stream(stream).map(|i| r.text[i].view()))
            .unwrap_or(DshStr::ABSENT)
    })
}

/// True when bytes of the stream were dropped from its text.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_truncated(result: *const DshRunResult, stream: c_int) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }.is_some_and(|r| match r.stream(stream) {
            Some(0) => r.result.stdout.truncated,
            Some(_) => r.result.stderr.truncated,
            None => false,
        })
    })
}

/// A file holding the complete stream, or ABSENT.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_spill_path(result: *const DshRunResult, stream: c_int) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }
            .and_then(|r| r.stream(stream).map(|i| OwnedStr::view_opt(&r.spill[i])))
            .unwrap_or(DshStr::ABSENT)
    })
}

/// Why DSH_STDOUT or DSH_STDERR has no spill file although it was
/// truncated (past max_spill_bytes, or the file could not be made or
/// written), or ABSENT.
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_spill_error(result: *const DshRunResult, stream: c_int) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }
            .and_then(|r| r.stream(stream).map(|i| OwnedStr::view_opt(&r.spill_error[i])))
            .unwrap_or(DshStr::ABSENT)
    })
}

/// True when the run carries sandbox facts; they go to `*out` (may be NULL).
///
/// # Safety
/// `result` is NULL or a live DshRunResult from dsh_executor_run that no
/// thread frees during this call. `out` is NULL or valid and aligned for
/// writing one DshSandboxInfo.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_sandbox(
    result: *const DshRunResult,
    out: *mut DshSandboxInfo,
) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `result` is NULL or a live DshRunResult
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { result.as_ref() }.is_some_and(|r| {
            // SAFETY: the caller guarantees `out` is NULL or writable for one
            // DshSandboxInfo (# Safety): `write_sandbox`'s contract.
            unsafe { write_sandbox(r.result.sandbox.as_ref(), out) }
        })
    })
}

/// A handle to a background process. Several handles may name the same
/// process; each is freed on its own.
pub struct DshProcess {
    pub(crate) process: Process,
    id: OwnedStr,
    command: OwnedStr,
    owner: Option<OwnedStr>,
    /// Filled once the process has settled; its signal never changes after.
    signal: OnceLock<Option<OwnedStr>>,
}

impl DshProcess {
    pub(crate) fn new(process: Process) -> Self {
        DshProcess {
            id: OwnedStr::new(process.id()),
            command: OwnedStr::new(process.command()),
            owner: process.owner().map(OwnedStr::new),
            signal: OnceLock::new(),
            process,
        }
    }
}

/// Frees a DshProcess; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
///
/// # Safety
/// `process` is NULL or a DshProcess from dsh_executor_start or
/// dsh_executor_get, not freed before, and not in use by any other thread
/// during or after this call. Never pass a borrowed process: one from
/// dsh_process_list_get or the one lent to a task-done callback.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_free(process: *mut DshProcess) {
    // SAFETY: the caller guarantees `process` is NULL or an unfreed DshProcess
    // handed out by `put` (never one borrowed from a list or lent to a
    // callback), with no other user
    // (# Safety): `free`'s contract exactly.
    unsafe { free(process) }
}

/// The registry id, "bash-1", "bash-2", …
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_id(process: *const DshProcess) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { process.as_ref() }.map_or(DshStr::ABSENT, |p| p.id.view())
    })
}

/// The command as started.
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_command(process: *const DshProcess) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { process.as_ref() }.map_or(DshStr::ABSENT, |p| p.command.view())
    })
}

/// The owner token given at start, or ABSENT.
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_owner(process: *const DshProcess) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { process.as_ref() }.map_or(DshStr::ABSENT, |p| OwnedStr::view_opt(&p.owner))
    })
}

/// Live status; DSH_KILLED at once after a kill. (DSH_KILLED for NULL.)
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_status(process: *const DshProcess) -> DshProcessStatus {
    value(DshProcessStatus::DSH_KILLED, || {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        match unsafe { process.as_ref() } {
            Some(p) => match p.process.status() {
                Status::Running => DshProcessStatus::DSH_RUNNING,
                Status::Completed => DshProcessStatus::DSH_COMPLETED,
                Status::Killed => DshProcessStatus::DSH_KILLED,
            },
            None => DshProcessStatus::DSH_KILLED,
        }
    })
}

/// True once the process has settled (its completion has fired).
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_is_settled(process: *const DshProcess) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { process.as_ref() }.is_some_and(|p| p.process.is_settled())
    })
}

/// True when the process exited normally; the code goes to `*code`.
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call. `code` is NULL or valid and
/// aligned for writing one `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_exit_code(process: *const DshProcess, code: *mut i32) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { process.as_ref() }.is_some_and(|p| {
            // SAFETY: the caller guarantees `code` is NULL or writable for
            // one `int32_t` (# Safety): `write_code`'s contract.
            unsafe { write_code(p.process.exit_code(), code) }
        })
    })
}

/// True once settled when nobody could say how it ended (see
/// dsh_run_result_exit_status_unavailable).
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_exit_status_unavailable(process: *const DshProcess) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { process.as_ref() }.is_some_and(|p| p.process.exit_status_unavailable())
    })
}

/// Once settled after kill(), a cancellation or disposal: how many processes
/// of its tree were still alive when the stop finished (see
/// dsh_run_result_survivors). 0 while running and when it ended by itself.
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_survivors(process: *const DshProcess) -> u32 {
    value(0, || {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { process.as_ref() }.map_or(0, |p| p.process.survivors())
    })
}

/// The terminating signal's name once settled, else ABSENT.
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_signal(process: *const DshProcess) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        let Some(p) = (unsafe { process.as_ref() }) else {
            return DshStr::ABSENT;
        };
        if !p.process.is_settled() {
            return DshStr::ABSENT;
        }
        OwnedStr::view_opt(p.signal.get_or_init(|| p.process.signal().map(OwnedStr::new)))
    })
}

/// True when the settled process carries sandbox facts (to `*out`).
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call. `out` is NULL or valid and
/// aligned for writing one DshSandboxInfo.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_sandbox(process: *const DshProcess, out: *mut DshSandboxInfo) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { process.as_ref() }.is_some_and(|p| {
            // SAFETY: the caller guarantees `out` is NULL or writable for one
            // DshSandboxInfo (# Safety): `write_sandbox`'s contract.
            unsafe { write_sandbox(p.process.sandbox().as_ref(), out) }
        })
    })
}

/// Consuming read: what arrived since the previous read of this process
/// (through any handle), never the same bytes twice.
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call. `out` is NULL or valid and
/// aligned for writing one `DshRead *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_read_output(
    process: *const DshProcess,
    out: *mut *mut DshRead,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `handle` refuses NULL.
        let p = unsafe { handle(process, "process") }?;
        need_out(out, "out")?;
        // SAFETY: the caller guarantees `out` is NULL or writable for one
        // `DshRead *` (# Safety); `put` refuses NULL itself.
        unsafe { put(out, "out", DshRead::new(p.process.read_output())) }
    })
}

/// Begins termination (SIGTERM to the tree, SIGKILL after grace). True when
/// the process was running and this call began it; false otherwise.
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_kill(process: *const DshProcess) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { process.as_ref() }.is_some_and(|p| p.process.kill())
    })
}

/// Waits until the process settles: DSH_OK, or DSH_TIMED_OUT if it is still
/// running after `timeout_ms` (negative: wait without limit).
///
/// # Safety
/// `process` is NULL or a live DshProcess: owned (from dsh_executor_start or
/// dsh_executor_get, not yet freed), borrowed from a DshProcessList not yet
/// freed (dsh_process_list_get), or lent to a task-done callback that has not
/// returned; no thread frees it during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_wait(process: *const DshProcess, timeout_ms: i64) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `handle` refuses NULL.
        let p = unsafe { handle(process, "process") }?;
        let limit = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        if p.process.wait_timeout(limit)? {
            Ok(())
        } else {
            Err(FfiError::WaitTimedOut)
        }
    })
}

/// Non-blocking write to the stdin of a process started with a stdin pipe
/// (dsh_request_set_stdin_pipe): takes what fits in its bounded buffer now
/// and stores the count in `*written` (0 < `*written` <= `len`: DSH_OK).
/// Nothing taken: DSH_AGAIN (the buffer is full, or a write from another
/// face is waiting for its turn); wait with dsh_process_wait_stdin_writable,
/// then write the rest. DSH_STDIN_CLOSED when the process has no stdin
/// pipe, after dsh_process_close_stdin, or once the command exited or closed
/// its stdin. Never blocks and never raises SIGPIPE: the pipe is written
/// by the library's own threads. `len` 0 only checks that stdin is open.
///
/// # Safety
/// `process` is NULL or a live DshProcess (as for dsh_process_kill). `data`
/// is NULL (then `len` must be 0) or valid for reads of `len` bytes for the
/// whole call. `written` is NULL or valid and aligned for writing one
/// `size_t`.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_write_stdin(
    process: *const DshProcess,
    data: *const u8,
    len: usize,
    written: *mut usize,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `handle` refuses NULL.
        let p = unsafe { handle(process, "process") }?;
        need_out(written, "written")?;
        // SAFETY: the caller guarantees `data` is NULL or readable for `len`
        // bytes during the call (# Safety); the bytes are copied at once.
        let data = unsafe { bytes(data, len, "data") }?;
        let n = p.process.try_write_stdin(data)?;
        // SAFETY: `written` is non-null (need_out) and, per # Safety, aligned
        // and writable for one size_t.
        unsafe { *written = n };
        if n == 0 && len > 0 {
            return Err(FfiError::StdinFull);
        }
        Ok(())
    })
}

/// Waits until a write to the process's stdin would take at least one byte
/// (or fail, its stdin having ended): DSH_OK, or DSH_TIMED_OUT if it is
/// still full after `timeout_ms` (negative: no limit; 0: only look).
/// DSH_STDIN_CLOSED when the process has no stdin pipe; DSH_WOULD_BLOCK on
/// the dsh callback thread (unless `timeout_ms` is 0).
///
/// # Safety
/// `process` is NULL or a live DshProcess (as for dsh_process_kill).
#[no_mangle]
pub unsafe extern "C" fn dsh_process_wait_stdin_writable(
    process: *const DshProcess,
    timeout_ms: i64,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `handle` refuses NULL.
        let p = unsafe { handle(process, "process") }?;
        let limit = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        if p.process.wait_stdin_writable(limit)? {
            Ok(())
        } else {
            Err(FfiError::StdinWaitTimedOut)
        }
    })
}

/// Closes the process's stdin once the bytes already written are
/// delivered, so the command reads EOF; later writes are
/// DSH_STDIN_CLOSED. `*closed` (when `closed` is not NULL) is true when
/// this call closed it, false when it was already closed or the command
/// has exited. DSH_STDIN_CLOSED when the process has no stdin pipe.
///
/// # Safety
/// `process` is NULL or a live DshProcess (as for dsh_process_kill).
/// `closed` is NULL or valid and aligned for writing one `bool`.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_close_stdin(process: *const DshProcess, closed: *mut bool) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `process` is NULL or a live DshProcess
        // for the whole call (# Safety); `handle` refuses NULL.
        let p = unsafe { handle(process, "process") }?;
        let did = p.process.close_stdin()?;
        if !closed.is_null() {
            // SAFETY: `closed` is non-null (checked) and, per # Safety,
            // aligned and writable for one bool.
            unsafe { *closed = did };
        }
        Ok(())
    })
}

/// One consuming read.
pub struct DshRead {
    read: ProcessRead,
    delta: OwnedStr,
    spill: [Option<OwnedStr>; 2],
    spill_error: [Option<OwnedStr>; 2],
}

impl DshRead {
    pub(crate) fn new(read: ProcessRead) -> Self {
        DshRead {
            delta: OwnedStr::new(&read.delta),
            spill: [
                read.stdout_spill_path.as_ref().map(OwnedStr::new),
                read.stderr_spill_path.as_ref().map(OwnedStr::new),
            ],
            spill_error: [
                read.stdout_spill_error.as_ref().map(OwnedStr::new),
                read.stderr_spill_error.as_ref().map(OwnedStr::new),
            ],
            read,
        }
    }
}

/// Frees a DshRead; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
///
/// # Safety
/// `read` is NULL or a DshRead from dsh_executor_read_output or
/// dsh_process_read_output, not freed before, and not in use by any other
/// thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_read_free(read: *mut DshRead) {
    // SAFETY: the caller guarantees `read` is NULL or an unfreed DshRead
    // handed out by `put`, with no other user
    // (# Safety): `free`'s contract exactly.
    unsafe { free(read) }
}

/// Output since the previous read: stdout, then "[stderr]\n" and stderr.
///
/// # Safety
/// `read` is NULL or a live DshRead from dsh_executor_read_output or
/// dsh_process_read_output that no thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_read_delta(read: *const DshRead) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `read` is NULL or a live DshRead for
        // the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { read.as_ref() }.map_or(DshStr::ABSENT, |r| r.delta.view())
    })
}

/// Unread bytes slid out of the in-memory window before this read.
///
/// # Safety
/// `read` is NULL or a live DshRead from dsh_executor_read_output or
/// dsh_process_read_output that no thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_read_lossy(read: *const DshRead) -> bool {
    value(false, || {
        // SAFETY: the caller guarantees `read` is NULL or a live DshRead for
        // the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { read.as_ref() }.is_some_and(|r| r.read.lossy)
    })
}

/// The spill file of DSH_STDOUT or DSH_STDERR, or ABSENT.
///
/// # Safety
/// `read` is NULL or a live DshRead from dsh_executor_read_output or
/// dsh_process_read_output that no thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_read_spill_path(read: *const DshRead, stream: c_int) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `read` is NULL or a live DshRead for
        // the whole call (# Safety); `as_ref` maps NULL to None.
        let Some(r) = (unsafe { read.as_ref() }) else {
            return DshStr::ABSENT;
        };
        match stream {
            DSH_STDOUT => OwnedStr::view_opt(&r.spill[0]),
            DSH_STDERR => OwnedStr::view_opt(&r.spill[1]),
            _ => DshStr::ABSENT,
        }
    })
}

/// Why DSH_STDOUT or DSH_STDERR has no spill file although it outgrew its
/// window, or ABSENT.
///
/// # Safety
/// `read` is NULL or a live DshRead from dsh_executor_read_output or
/// dsh_process_read_output that no thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_read_spill_error(read: *const DshRead, stream: c_int) -> DshStr {
    value(DshStr::ABSENT, || {
        // SAFETY: the caller guarantees `read` is NULL or a live DshRead for
        // the whole call (# Safety); `as_ref` maps NULL to None.
        let Some(r) = (unsafe { read.as_ref() }) else {
            return DshStr::ABSENT;
        };
        match stream {
            DSH_STDOUT => OwnedStr::view_opt(&r.spill_error[0]),
            DSH_STDERR => OwnedStr::view_opt(&r.spill_error[1]),
            _ => DshStr::ABSENT,
        }
    })
}

/// A snapshot of the registry, in start order.
pub struct DshProcessList {
    pub(crate) items: Vec<DshProcess>,
}

/// Frees a DshProcessList; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
///
/// # Safety
/// `list` is NULL or a DshProcessList from dsh_executor_list, not freed
/// before, and not in use by any other thread during or after this call.
/// Processes borrowed from it with dsh_process_list_get are invalid
/// afterwards.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_list_free(list: *mut DshProcessList) {
    // SAFETY: the caller guarantees `list` is NULL or an unfreed DshProcessList
    // handed out by `put`, with no other user
    // (# Safety): `free`'s contract exactly.
    unsafe { free(list) }
}

/// The number of processes in the list (0 for NULL).
///
/// # Safety
/// `list` is NULL or a live DshProcessList from dsh_executor_list that no
/// thread frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_list_len(list: *const DshProcessList) -> usize {
    value(0, || {
        // SAFETY: the caller guarantees `list` is NULL or a live DshProcessList
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { list.as_ref() }.map_or(0, |l| l.items.len())
    })
}

/// The i-th process, borrowed from the list (valid until the list is
/// freed); NULL when out of range.
///
/// # Safety
/// `list` is NULL or a live DshProcessList from dsh_executor_list that no
/// thread frees during this call. The result is borrowed: never pass it to
/// dsh_process_free.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_list_get(
    list: *const DshProcessList,
    index: usize,
) -> *const DshProcess {
    value(std::ptr::null(), || {
        // SAFETY: the caller guarantees `list` is NULL or a live DshProcessList
        // for the whole call (# Safety); `as_ref` maps NULL to None.
        unsafe { list.as_ref() }
            .and_then(|l| l.items.get(index))
            .map_or(std::ptr::null(), |p| p as *const DshProcess)
    })
}

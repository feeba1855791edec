//! Read-only views: run results, process handles, reads, process lists and
//! sandbox facts. Every string is owned by its handle and valid until the
//! handle is freed.

use std::ffi::{c_int, CStr};
use std::sync::OnceLock;
use std::time::Duration;

use dsh_core::{Enforcement, Process, ProcessRead, RunResult, SandboxInfo, SandboxMode, Status};

use crate::guard::{free, handle, need_out, put, status, value, DshStatus, DshStr, FfiError, OwnedStr};

/// Which stream an accessor reads.
pub const DSH_STDOUT: c_int = 1;
pub const DSH_STDERR: c_int = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DshProcessStatus {
    DSH_RUNNING = 0,
    DSH_COMPLETED = 1,
    DSH_KILLED = 2,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DshSandboxMode {
    DSH_SANDBOX_READ_ONLY = 1,
    DSH_SANDBOX_WORKSPACE_WRITE = 2,
    DSH_SANDBOX_DANGER_FULL_ACCESS = 3,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DshEnforcement {
    /// Nothing is confined (danger-full-access).
    DSH_ENFORCEMENT_NONE = 0,
    DSH_ENFORCEMENT_FULL = 1,
    DSH_ENFORCEMENT_PARTIAL = 2,
}

/// Sandbox facts of a run result or a settled process.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DshSandboxInfo {
    pub mode: DshSandboxMode,
    /// The failure looks like the sandbox denying a file operation.
    pub denied: bool,
    pub enforcement: DshEnforcement,
    /// Background only: confinement could not be applied; nothing ran.
    pub runner_failed: bool,
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
    }
}

fn write_sandbox(info: Option<&SandboxInfo>, out: *mut DshSandboxInfo) -> bool {
    let Some(info) = info else {
        return false;
    };
    if !out.is_null() {
        // SAFETY: non-null, and writable per the accessor's contract. `write`
        // neither reads nor drops the old contents, which may be
        // uninitialised or zeroed (mode 0 is no DshSandboxMode).
        unsafe { out.write(sandbox_info(info)) };
    }
    true
}

fn write_code(code: Option<i32>, out: *mut i32) -> bool {
    if let (Some(c), false) = (code, out.is_null()) {
        // SAFETY: non-null, and writable per the accessor's contract; `write`
        // does not read the old, possibly uninitialised, contents.
        unsafe { out.write(c) };
    }
    code.is_some()
}

/// The outcome of one foreground run.
pub struct DshRunResult {
    result: RunResult,
    text: [OwnedStr; 2],
    spill: [Option<OwnedStr>; 2],
    signal: Option<OwnedStr>,
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
            signal: result.signal.as_ref().map(OwnedStr::new),
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
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_free(result: *mut DshRunResult) {
    unsafe { free(result) }
}

/// True when the command exited normally; the code goes to `*code` (may be
/// NULL). False when it died from a signal.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_exit_code(result: *const DshRunResult, code: *mut i32) -> bool {
    value(false, || {
        unsafe { result.as_ref() }.is_some_and(|r| write_code(r.result.exit_code, code))
    })
}

/// True when the command ran and ended but its exit status was taken by
/// someone else (a host that ignores SIGCHLD or reaps with `waitpid(-1)`,
/// on a kernel older than 6.15): no exit code and no signal then.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_exit_status_unavailable(result: *const DshRunResult) -> bool {
    value(false, || {
        unsafe { result.as_ref() }.is_some_and(|r| r.result.exit_status_unavailable)
    })
}

/// The terminating signal's name ("SIGTERM"), or ABSENT.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_signal(result: *const DshRunResult) -> DshStr {
    value(DshStr::ABSENT, || {
        unsafe { result.as_ref() }.map_or(DshStr::ABSENT, |r| OwnedStr::view_opt(&r.signal))
    })
}

/// The executor's own timeout fired first.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_timed_out(result: *const DshRunResult) -> bool {
    value(false, || {
        unsafe { result.as_ref() }.is_some_and(|r| r.result.timed_out)
    })
}

/// The caller's cancellation (or disposal) fired first.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_aborted(result: *const DshRunResult) -> bool {
    value(false, || {
        unsafe { result.as_ref() }.is_some_and(|r| r.result.aborted)
    })
}

/// The effective timeout of the run.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_timeout_ms(result: *const DshRunResult) -> u64 {
    value(0, || {
        unsafe { result.as_ref() }.map_or(0, |r| r.result.timeout_ms)
    })
}

/// The collected text of DSH_STDOUT or DSH_STDERR: the tail when truncated.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_text(result: *const DshRunResult, stream: c_int) -> DshStr {
    value(DshStr::ABSENT, || {
        unsafe { result.as_ref() }
            .and_then(|r| r.stream(stream).map(|i| r.text[i].view()))
            .unwrap_or(DshStr::ABSENT)
    })
}

/// True when bytes of the stream were dropped from its text.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_truncated(result: *const DshRunResult, stream: c_int) -> bool {
    value(false, || {
        unsafe { result.as_ref() }.is_some_and(|r| match r.stream(stream) {
            Some(0) => r.result.stdout.truncated,
            Some(_) => r.result.stderr.truncated,
            None => false,
        })
    })
}

/// A file holding the complete stream, or ABSENT.
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_spill_path(result: *const DshRunResult, stream: c_int) -> DshStr {
    value(DshStr::ABSENT, || {
        unsafe { result.as_ref() }
            .and_then(|r| r.stream(stream).map(|i| OwnedStr::view_opt(&r.spill[i])))
            .unwrap_or(DshStr::ABSENT)
    })
}

/// True when the run carries sandbox facts; they go to `*out` (may be NULL).
#[no_mangle]
pub unsafe extern "C" fn dsh_run_result_sandbox(
    result: *const DshRunResult,
    out: *mut DshSandboxInfo,
) -> bool {
    value(false, || {
        unsafe { result.as_ref() }.is_some_and(|r| write_sandbox(r.result.sandbox.as_ref(), out))
    })
}

/// A handle to a background process. Several handles may name the same
/// process; each is freed on its own.
pub struct DshProcess {
    process: Process,
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
#[no_mangle]
pub unsafe extern "C" fn dsh_process_free(process: *mut DshProcess) {
    unsafe { free(process) }
}

/// The registry id, "bash-1", "bash-2", …
#[no_mangle]
pub unsafe extern "C" fn dsh_process_id(process: *const DshProcess) -> DshStr {
    value(DshStr::ABSENT, || {
        unsafe { process.as_ref() }.map_or(DshStr::ABSENT, |p| p.id.view())
    })
}

#[no_mangle]
pub unsafe extern "C" fn dsh_process_command(process: *const DshProcess) -> DshStr {
    value(DshStr::ABSENT, || {
        unsafe { process.as_ref() }.map_or(DshStr::ABSENT, |p| p.command.view())
    })
}

/// The owner token given at start, or ABSENT.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_owner(process: *const DshProcess) -> DshStr {
    value(DshStr::ABSENT, || {
        unsafe { process.as_ref() }.map_or(DshStr::ABSENT, |p| OwnedStr::view_opt(&p.owner))
    })
}

/// Live status; DSH_KILLED at once after a kill. (DSH_KILLED for NULL.)
#[no_mangle]
pub unsafe extern "C" fn dsh_process_status(process: *const DshProcess) -> DshProcessStatus {
    value(DshProcessStatus::DSH_KILLED, || {
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
#[no_mangle]
pub unsafe extern "C" fn dsh_process_is_settled(process: *const DshProcess) -> bool {
    value(false, || {
        unsafe { process.as_ref() }.is_some_and(|p| p.process.is_settled())
    })
}

/// True when the process exited normally; the code goes to `*code`.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_exit_code(process: *const DshProcess, code: *mut i32) -> bool {
    value(false, || {
        unsafe { process.as_ref() }.is_some_and(|p| write_code(p.process.exit_code(), code))
    })
}

/// True once settled when the exit status was taken by someone else (see
/// dsh_run_result_exit_status_unavailable).
#[no_mangle]
pub unsafe extern "C" fn dsh_process_exit_status_unavailable(process: *const DshProcess) -> bool {
    value(false, || {
        unsafe { process.as_ref() }.is_some_and(|p| p.process.exit_status_unavailable())
    })
}

/// The terminating signal's name once settled, else ABSENT.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_signal(process: *const DshProcess) -> DshStr {
    value(DshStr::ABSENT, || {
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
#[no_mangle]
pub unsafe extern "C" fn dsh_process_sandbox(process: *const DshProcess, out: *mut DshSandboxInfo) -> bool {
    value(false, || {
        unsafe { process.as_ref() }.is_some_and(|p| write_sandbox(p.process.sandbox().as_ref(), out))
    })
}

/// Consuming read: what arrived since the previous read of this process
/// (through any handle), never the same bytes twice.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_read_output(
    process: *const DshProcess,
    out: *mut *mut DshRead,
) -> DshStatus {
    status(|| {
        let p = unsafe { handle(process, "process") }?;
        need_out(out, "out")?;
        unsafe { put(out, "out", DshRead::new(p.process.read_output())) }
    })
}

/// Begins termination (SIGTERM to the tree, SIGKILL after grace). True when
/// the process was running and this call began it; false otherwise.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_kill(process: *const DshProcess) -> bool {
    value(false, || {
        unsafe { process.as_ref() }.is_some_and(|p| p.process.kill())
    })
}

/// Waits until the process settles: DSH_OK, or DSH_TIMED_OUT if it is still
/// running after `timeout_ms` (negative: wait without limit).
#[no_mangle]
pub unsafe extern "C" fn dsh_process_wait(process: *const DshProcess, timeout_ms: i64) -> DshStatus {
    status(|| {
        let p = unsafe { handle(process, "process") }?;
        let limit = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        if p.process.wait_timeout(limit)? {
            Ok(())
        } else {
            Err(FfiError::WaitTimedOut)
        }
    })
}

/// One consuming read.
pub struct DshRead {
    read: ProcessRead,
    delta: OwnedStr,
    spill: [Option<OwnedStr>; 2],
}

impl DshRead {
    pub(crate) fn new(read: ProcessRead) -> Self {
        DshRead {
            delta: OwnedStr::new(&read.delta),
            spill: [
                read.stdout_spill_path.as_ref().map(OwnedStr::new),
                read.stderr_spill_path.as_ref().map(OwnedStr::new),
            ],
            read,
        }
    }
}

/// Frees a DshRead; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn dsh_read_free(read: *mut DshRead) {
    unsafe { free(read) }
}

/// Output since the previous read: stdout, then "[stderr]\n" and stderr.
#[no_mangle]
pub unsafe extern "C" fn dsh_read_delta(read: *const DshRead) -> DshStr {
    value(DshStr::ABSENT, || {
        unsafe { read.as_ref() }.map_or(DshStr::ABSENT, |r| r.delta.view())
    })
}

/// Unread bytes slid out of the in-memory window before this read.
#[no_mangle]
pub unsafe extern "C" fn dsh_read_lossy(read: *const DshRead) -> bool {
    value(false, || unsafe { read.as_ref() }.is_some_and(|r| r.read.lossy))
}

/// The spill file of DSH_STDOUT or DSH_STDERR, or ABSENT.
#[no_mangle]
pub unsafe extern "C" fn dsh_read_spill_path(read: *const DshRead, stream: c_int) -> DshStr {
    value(DshStr::ABSENT, || {
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

/// A snapshot of the registry, in start order.
pub struct DshProcessList {
    pub(crate) items: Vec<DshProcess>,
}

/// Frees a DshProcessList; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_list_free(list: *mut DshProcessList) {
    unsafe { free(list) }
}

#[no_mangle]
pub unsafe extern "C" fn dsh_process_list_len(list: *const DshProcessList) -> usize {
    value(0, || unsafe { list.as_ref() }.map_or(0, |l| l.items.len()))
}

/// The i-th process, borrowed from the list (valid until the list is
/// freed); NULL when out of range.
#[no_mangle]
pub unsafe extern "C" fn dsh_process_list_get(
    list: *const DshProcessList,
    index: usize,
) -> *const DshProcess {
    value(std::ptr::null(), || {
        unsafe { list.as_ref() }
            .and_then(|l| l.items.get(index))
            .map_or(std::ptr::null(), |p| p as *const DshProcess)
    })
}

//! Config and request builders. Each is a mutex-guarded core input, so a
//! builder may be touched from any thread.

use std::ffi::c_char;
use std::sync::Mutex;

use dsh_core::{
    ConfigInput, Field, FieldName, Num, OnExpiry, Request, SandboxMode, SandboxPolicyInput, Scope,
};

use crate::guard::{bytes, free, handle, path, put, status, text, DshStatus, FfiError, FfiResult};

/// Executor configuration (docs/configuration.md). Unset fields take their
/// defaults when the executor is created; validation happens there too.
pub struct DshConfig {
    pub(crate) input: Mutex<ConfigInput>,
}

/// A request (docs/requests.md): what a caller asks for, before resolve.
pub struct DshRequest {
    pub(crate) input: Mutex<Request>,
}

fn with<T>(m: &Mutex<T>, f: impl FnOnce(&mut T)) -> FfiResult {
    f(&mut m.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(())
}

/// Creates an empty configuration. Free with dsh_config_free.
///
/// # Safety
/// `out` is NULL or valid and aligned for writing one `DshConfig *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_config_new(out: *mut *mut DshConfig) -> DshStatus {
    // SAFETY: the caller guarantees `out` is NULL or writable for one pointer
    // (# Safety); `put` refuses NULL itself.
    status(|| unsafe {
        put(
            out,
            "out",
            DshConfig {
                input: Mutex::new(ConfigInput::default()),
            },
        )
    })
}

/// Frees a DshConfig; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
///
/// # Safety
/// `config` is NULL or a DshConfig from dsh_config_new, not freed before, and
/// not in use by any other thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_config_free(config: *mut DshConfig) {
    // SAFETY: the caller guarantees `config` is NULL or an unfreed DshConfig
    // made by `put` in dsh_config_new, with no other user (# Safety): `free`'s
    // contract exactly.
    unsafe { free(config) }
}

/// The body of the numeric config setters.
///
/// # Safety
/// `config` is NULL or a live DshConfig that no thread frees during the call.
unsafe fn set_number(config: *const DshConfig, set: impl FnOnce(&mut ConfigInput)) -> DshStatus {
    status(|| {
        // SAFETY: `config` is NULL or a live DshConfig kept alive for this
        // call, per this fn's contract; `handle` refuses NULL.
        let c = unsafe { handle(config, "config") }?;
        with(&c.input, set)
    })
}

/// Default foreground timeout (default 120000). Checked when the executor is created.
///
/// # Safety
/// `config` is NULL or a live DshConfig from dsh_config_new that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_config_set_timeout_ms(config: *const DshConfig, value: u64) -> DshStatus {
    // SAFETY: the caller guarantees `config` is NULL or a live DshConfig for
    // the whole call (# Safety), which is all `set_number` needs.
    unsafe { set_number(config, |i| i.timeout_ms = Some(Num::from(value))) }
}

/// Cap for per-call timeouts (default 600000). Checked when the executor is created.
///
/// # Safety
/// `config` is NULL or a live DshConfig from dsh_config_new that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_config_set_max_timeout_ms(config: *const DshConfig, value: u64) -> DshStatus {
    // SAFETY: the caller guarantees `config` is NULL or a live DshConfig for
    // the whole call (# Safety), which is all `set_number` needs.
    unsafe { set_number(config, |i| i.max_timeout_ms = Some(Num::from(value))) }
}

/// In-memory cap per stream (default 64000). Checked when the executor is created.
///
/// # Safety
/// `config` is NULL or a live DshConfig from dsh_config_new that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_config_set_max_output_bytes(config: *const DshConfig, value: u64) -> DshStatus {
    // SAFETY: the caller guarantees `config` is NULL or a live DshConfig for
    // the whole call (# Safety), which is all `set_number` needs.
    unsafe { set_number(config, |i| i.max_output_bytes = Some(Num::from(value))) }
}

/// How many settled background processes the registry keeps (default
/// 1000); past it the oldest settled one is forgotten and its spill files
/// deleted. Checked when the executor is created.
///
/// # Safety
/// `config` is NULL or a live DshConfig from dsh_config_new that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_config_set_retain_settled(config: *const DshConfig, value: u64) -> DshStatus {
    // SAFETY: the caller guarantees `config` is NULL or a live DshConfig
    // (# Safety): `set_number`'s contract.
    unsafe { set_number(config, |i| i.retain_settled = Some(Num::from(value))) }
}

/// Cap of one spill file (default 64 MiB). Checked when the executor is created.
///
/// # Safety
/// `config` is NULL or a live DshConfig from dsh_config_new that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_config_set_max_spill_bytes(config: *const DshConfig, value: u64) -> DshStatus {
    // SAFETY: the caller guarantees `config` is NULL or a live DshConfig for
    // the whole call (# Safety), which is all `set_number` needs.
    unsafe { set_number(config, |i| i.max_spill_bytes = Some(Num::from(value))) }
}

/// SIGTERM→SIGKILL grace and pipe-drain bound (default 3000, at most 2^31−1). Checked when the executor is created.
///
/// # Safety
/// `config` is NULL or a live DshConfig from dsh_config_new that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_config_set_grace_ms(config: *const DshConfig, value: u64) -> DshStatus {
    // SAFETY: the caller guarantees `config` is NULL or a live DshConfig for
    // the whole call (# Safety), which is all `set_number` needs.
    unsafe { set_number(config, |i| i.grace_ms = Some(Num::from(value))) }
}

/// Default workdir (default: the process cwd, read at resolve time).
///
/// # Safety
/// `config` is NULL or a live DshConfig from dsh_config_new that no thread
/// frees during this call. `cwd` is NULL or a NUL-terminated string readable
/// for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_config_set_cwd(config: *const DshConfig, cwd: *const c_char) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `config` is NULL or a live DshConfig
        // for the whole call (# Safety); `handle` refuses NULL.
        let c = unsafe { handle(config, "config") }?;
        // SAFETY: the caller guarantees `cwd` is NULL or a NUL-terminated
        // string readable during the call (# Safety); it is copied at once.
        let cwd = unsafe { text(cwd, "cwd") }?.to_owned();
        with(&c.input, |i| i.cwd = Some(cwd))
    })
}

/// Where the private spill directory is created (default: the temp dir).
///
/// # Safety
/// `config` is NULL or a live DshConfig from dsh_config_new that no thread
/// frees during this call. `dir` is NULL or a NUL-terminated string readable
/// for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_config_set_spill_dir(config: *const DshConfig, dir: *const c_char) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `config` is NULL or a live DshConfig
        // for the whole call (# Safety); `handle` refuses NULL.
        let c = unsafe { handle(config, "config") }?;
        // SAFETY: the caller guarantees `dir` is NULL or a NUL-terminated
        // string readable during the call (# Safety); it is copied at once.
        let dir = unsafe { text(dir, "spill_dir") }?.to_owned();
        with(&c.input, |i| i.spill_dir = Some(dir))
    })
}

/// Default sandbox mode: "read-only", "workspace-write" or
/// "danger-full-access"; NULL for none.
///
/// # Safety
/// `config` is NULL or a live DshConfig from dsh_config_new that no thread
/// frees during this call. `mode` is NULL or a NUL-terminated string readable
/// for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_config_set_sandbox_mode(
    config: *const DshConfig,
    mode: *const c_char,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `config` is NULL or a live DshConfig
        // for the whole call (# Safety); `handle` refuses NULL.
        let c = unsafe { handle(config, "config") }?;
        let mode = match mode.is_null() {
            true => None,
            false => Some(SandboxMode::parse(
                Field::new(Scope::Config, FieldName::SandboxMode),
                // SAFETY: the caller guarantees `mode` is NULL or a
                // NUL-terminated string readable during the call (# Safety);
                // `parse` only borrows it within this statement.
                unsafe { text(mode, "sandbox_mode") }?,
            )?),
        };
        with(&c.input, |i| i.sandbox_mode = mode)
    })
}

/// Creates a request for `command` (`command_len` bytes of UTF-8; a NUL
/// inside is refused by resolve). Free with dsh_request_free.
///
/// # Safety
/// `command` is NULL (then `command_len` must be 0, else the call fails with
/// DSH_INVALID_ARGUMENT) or valid for reads of `command_len` bytes for the
/// whole call; it need not be NUL-terminated. `out` is NULL or valid and
/// aligned for writing one `DshRequest *`.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_new(
    command: *const c_char,
    command_len: usize,
    out: *mut *mut DshRequest,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `command` is NULL or readable for
        // `command_len` bytes during the call (# Safety); `c_char` and `u8`
        // have the same layout; the bytes are copied by `Request::new` below.
        let raw = unsafe { bytes(command.cast(), command_len, "command") }?;
        let command = std::str::from_utf8(raw).map_err(|_| FfiError::Utf8("command"))?;
        // SAFETY: the caller guarantees `out` is NULL or writable for one
        // pointer (# Safety); `put` refuses NULL itself.
        unsafe {
            put(
                out,
                "out",
                DshRequest {
                    input: Mutex::new(Request::new(command)),
                },
            )
        }
    })
}

/// Frees a DshRequest; NULL is a no-op. Strings and handles borrowed from
/// it are invalid afterwards.
///
/// # Safety
/// `request` is NULL or a DshRequest from dsh_request_new, not freed before,
/// and not in use by any other thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_free(request: *mut DshRequest) {
    // SAFETY: the caller guarantees `request` is NULL or an unfreed
    // DshRequest made by `put` in dsh_request_new, with no other user
    // (# Safety): `free`'s contract exactly.
    unsafe { free(request) }
}

/// Working directory; a relative one is taken relative to the config cwd.
/// `workdir` is the path's bytes up to the NUL terminator, which need not be
/// UTF-8 (a directory name on Linux is bytes).
///
/// # Safety
/// `request` is NULL or a live DshRequest from dsh_request_new that no thread
/// frees during this call. `workdir` is NULL or a NUL-terminated byte string
/// readable for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_set_workdir(
    request: *const DshRequest,
    workdir: *const c_char,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `request` is NULL or a live DshRequest
        // for the whole call (# Safety); `handle` refuses NULL.
        let r = unsafe { handle(request, "request") }?;
        // SAFETY: the caller guarantees `workdir` is NULL or a NUL-terminated
        // byte string readable during the call (# Safety); `path` copies it.
        let workdir = unsafe { path(workdir, "workdir") }?;
        with(&r.input, |i| i.workdir = Some(workdir))
    })
}

/// Timeout for this call; clamped to max_timeout_ms by resolve.
///
/// # Safety
/// `request` is NULL or a live DshRequest from dsh_request_new that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_set_timeout_ms(
    request: *const DshRequest,
    timeout_ms: u64,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `request` is NULL or a live DshRequest
        // for the whole call (# Safety); `handle` refuses NULL.
        let r = unsafe { handle(request, "request") }?;
        with(&r.input, |i| i.timeout_ms = Some(Num::from(timeout_ms)))
    })
}

/// In-memory stdout cap for this call (default: max_output_bytes).
///
/// # Safety
/// `request` is NULL or a live DshRequest from dsh_request_new that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_set_stdout_max_bytes(request: *const DshRequest, max: u64) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `request` is NULL or a live DshRequest
        // for the whole call (# Safety); `handle` refuses NULL.
        let r = unsafe { handle(request, "request") }?;
        with(&r.input, |i| i.stdout_max_bytes = Some(Num::from(max)))
    })
}

/// Bytes written to the command's stdin, then EOF (default: /dev/null).
///
/// # Safety
/// `request` is NULL or a live DshRequest from dsh_request_new that no thread
/// frees during this call. `data` is NULL (then `len` must be 0, else the
/// call fails with DSH_INVALID_ARGUMENT) or valid for reads of `len` bytes
/// for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_set_stdin(
    request: *const DshRequest,
    data: *const u8,
    len: usize,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `request` is NULL or a live DshRequest
        // for the whole call (# Safety); `handle` refuses NULL.
        let r = unsafe { handle(request, "request") }?;
        // SAFETY: the caller guarantees `data` is NULL or readable for `len`
        // bytes during the call (# Safety); `to_vec` copies them at once.
        let data = unsafe { bytes(data, len, "stdin") }?.to_vec();
        with(&r.input, |i| i.stdin = Some(data))
    })
}

/// Gives the command a stdin pipe that stays open for
/// dsh_process_write_stdin until dsh_process_close_stdin (instead of
/// /dev/null or bytes set with dsh_request_set_stdin: not both). For
/// dsh_executor_start, or dsh_executor_run with on_expiry "background".
///
/// # Safety
/// `request` is NULL or a live DshRequest from dsh_request_new that no thread
/// frees during this call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_set_stdin_pipe(request: *const DshRequest) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `request` is NULL or a live DshRequest
        // for the whole call (# Safety); `handle` refuses NULL.
        let r = unsafe { handle(request, "request") }?;
        with(&r.input, |i| i.stdin_pipe = true)
    })
}

/// What a foreground run does at its timeout: "kill" (the default) or
/// "background" (hand it over to the registry; see
/// dsh_run_result_background_id).
///
/// # Safety
/// `request` is NULL or a live DshRequest from dsh_request_new that no thread
/// frees during this call. `on_expiry` is NULL or a NUL-terminated string
/// readable for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_set_on_expiry(
    request: *const DshRequest,
    on_expiry: *const c_char,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `request` is NULL or a live DshRequest
        // for the whole call (# Safety); `handle` refuses NULL.
        let r = unsafe { handle(request, "request") }?;
        // SAFETY: the caller guarantees `on_expiry` is NULL or a
        // NUL-terminated string readable during the call (# Safety); it is
        // only borrowed within this call.
        let name = unsafe { text(on_expiry, "on_expiry") }?;
        let value = OnExpiry::parse(Field::new(Scope::Request, FieldName::OnExpiry), name)?;
        with(&r.input, |i| i.on_expiry = Some(value))
    })
}

type EnvMap = Option<std::collections::BTreeMap<String, String>>;

/// Adds `key=value` to the map `pick` selects (`env` or `dsh_env`).
///
/// # Safety
/// `request` is NULL or a live DshRequest that no thread frees during the
/// call; `key` and `value` are each NULL or a NUL-terminated string readable
/// for the whole call.
unsafe fn add_env_entry(
    request: *const DshRequest,
    key: *const c_char,
    value: *const c_char,
    pick: fn(&mut Request) -> &mut EnvMap,
) -> DshStatus {
    status(|| {
        // SAFETY: `request` is NULL or a live DshRequest for this call, per
        // this fn's contract; `handle` refuses NULL.
        let r = unsafe { handle(request, "request") }?;
        // SAFETY: `key` and `value` are NULL or NUL-terminated strings
        // readable during the call, per this fn's contract; both borrows are
        // copied by `to_owned` below before the call returns.
        let (k, v) = unsafe { (text(key, "key")?, text(value, "value")?) };
        with(&r.input, |i| {
            pick(i)
                .get_or_insert_with(Default::default)
                .insert(k.to_owned(), v.to_owned());
        })
    })
}

/// Adds an `env` entry (merged after the credential scrub).
///
/// # Safety
/// `request` is NULL or a live DshRequest from dsh_request_new that no thread
/// frees during this call. `key` and `value` are each NULL or a
/// NUL-terminated string readable for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_set_env(
    request: *const DshRequest,
    key: *const c_char,
    value: *const c_char,
) -> DshStatus {
    // SAFETY: the caller guarantees `request`, `key` and `value` meet
    // `add_env_entry`'s contract (this fn's # Safety is the same).
    unsafe { add_env_entry(request, key, value, |r| &mut r.env) }
}

/// Adds a managed `dsh_env` entry (key must start with DSH_; merged last).
///
/// # Safety
/// `request` is NULL or a live DshRequest from dsh_request_new that no thread
/// frees during this call. `key` and `value` are each NULL or a
/// NUL-terminated string readable for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_set_dsh_env(
    request: *const DshRequest,
    key: *const c_char,
    value: *const c_char,
) -> DshStatus {
    // SAFETY: the caller guarantees `request`, `key` and `value` meet
    // `add_env_entry`'s contract (this fn's # Safety is the same).
    unsafe { add_env_entry(request, key, value, |r| &mut r.dsh_env) }
}

/// The opaque owner token stored on a background process.
///
/// # Safety
/// `request` is NULL or a live DshRequest from dsh_request_new that no thread
/// frees during this call. `owner` is NULL or a NUL-terminated string
/// readable for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_set_owner(
    request: *const DshRequest,
    owner: *const c_char,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `request` is NULL or a live DshRequest
        // for the whole call (# Safety); `handle` refuses NULL.
        let r = unsafe { handle(request, "request") }?;
        // SAFETY: the caller guarantees `owner` is NULL or a NUL-terminated
        // string readable during the call (# Safety); it is copied at once.
        let owner = unsafe { text(owner, "owner") }?.to_owned();
        with(&r.input, |i| i.owner = Some(owner))
    })
}

/// A per-call sandbox policy; `workspace_root` NULL means the workdir.
/// `mode` is UTF-8 text; `workspace_root` is a path's bytes up to the NUL
/// terminator, which need not be UTF-8.
///
/// # Safety
/// `request` is NULL or a live DshRequest from dsh_request_new that no thread
/// frees during this call. `mode` and `workspace_root` are each NULL or a
/// NUL-terminated string readable for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dsh_request_set_sandbox_policy(
    request: *const DshRequest,
    mode: *const c_char,
    workspace_root: *const c_char,
) -> DshStatus {
    status(|| {
        // SAFETY: the caller guarantees `request` is NULL or a live DshRequest
        // for the whole call (# Safety); `handle` refuses NULL.
        let r = unsafe { handle(request, "request") }?;
        // SAFETY: the caller guarantees `mode` is NULL or a NUL-terminated
        // string readable during the call (# Safety); `parse` only borrows it
        // within this statement.
        let mode = SandboxMode::parse(Field::new(Scope::Request, FieldName::SandboxPolicy), unsafe {
            text(mode, "mode")
        }?)?;
        let workspace_root = match workspace_root.is_null() {
            true => None,
            // SAFETY: `workspace_root` is non-null here and, per # Safety, a
            // NUL-terminated byte string readable during the call; `path`
            // copies it.
            false => Some(unsafe { path(workspace_root, "workspace_root") }?),
        };
        with(&r.input, |i| {
            i.sandbox_policy = Some(SandboxPolicyInput {
                mode,
                workspace_root,
                session_id: None,
                network: None,
            })
        })
    })
}

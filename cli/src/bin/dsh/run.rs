//! `dsh run`: one command as a spawned program (docs/spawn.md) whose
//! stdout and stderr are dsh's own descriptors, so its output reaches the
//! caller live and exactly as written, with nothing buffered on the way;
//! `--json` collects it instead. The executor is disposed before dsh exits:
//! that is what guarantees nothing the command started outlives it.

use std::fs::File;
use std::io;
use std::time::Duration;

use dsh_cli::interrupt::Interrupt;
use dsh_cli::json::{sandbox_json, EnforcementJson, SandboxJson};
use dsh_cli::status::{emit, emit_json, interrupted_status, signal_status, EXIT_CLI_ERROR, EXIT_TIMEOUT};
use dsh_core::{
    ConfigInput, DshError, Executor, FieldName, Num, OutputStream, Process, SandboxPolicyInput, SpawnOutput,
    SpawnRequest, SpawnStdin, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_TIMEOUT_MS,
};
use serde::Serialize;

use crate::args::{RunRequest, StdinFrom};

/// How often the wait looks for a pending interrupt.
const TICK: Duration = Duration::from_millis(20);

pub fn run(request: RunRequest, interrupt: &Interrupt) -> Result<u8, String> {
    // Whoever types --timeout is the operator: the cap that guards against
    // a model asking for hours does not apply.
    let config = ConfigInput {
        max_timeout_ms: request
            .timeout_ms
            .filter(|t| *t > DEFAULT_MAX_TIMEOUT_MS)
            .map(|t| Num(t as f64)),
        ..ConfigInput::default()
    };
    let exec = Executor::new(config).map_err(|e| e.to_string())?;
    let outcome = run_on(&exec, request, interrupt);
    let disposed = exec.dispose_blocking().map_err(|e| e.to_string());
    let code = outcome?;
    disposed?;
    Ok(code)
}

/// What `--stdin-file` names, made sure of before the command starts: a
/// file that cannot be read fails dsh (125) instead of running the command
/// on an empty input.
enum StdinFile {
    Opened(std::path::PathBuf, File),
    /// Opened by the feeder once the command runs: opening a FIFO waits
    /// for its writer, and dsh must stay interruptible meanwhile. Its
    /// permission is checked now.
    Fifo(std::path::PathBuf),
}

fn open_stdin_file(path: &std::path::Path) -> Result<StdinFile, String> {
    use std::os::unix::fs::FileTypeExt;
    let refused = |e: io::Error| format!("--stdin-file: cannot open {}: {e}", path.display());
    let kind = std::fs::metadata(path).map_err(refused)?.file_type();
    if kind.is_dir() {
        return Err(format!("--stdin-file: {} is a directory", path.display()));
    }
    if kind.is_fifo() {
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
            .map_err(|_| format!("--stdin-file: {} contains a NUL byte", path.display()))?;
        // SAFETY: `c` is a NUL-terminated path; faccessat only reads it.
        if unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::R_OK, libc::AT_EACCESS) } != 0 {
            return Err(refused(io::Error::last_os_error()));
        }
        return Ok(StdinFile::Fifo(path.to_path_buf()));
    }
    let file = File::open(path).map_err(refused)?;
    Ok(StdinFile::Opened(path.to_path_buf(), file))
}

fn run_on(exec: &Executor, request: RunRequest, interrupt: &Interrupt) -> Result<u8, String> {
    let stdin_file = match &request.stdin {
        StdinFrom::File(path) => Some(open_stdin_file(path)?),
        _ => None,
    };
    let json = request.json;
    let spec = exec.resolve_spawn(spawn_request(request)).map_err(flag_error)?;
    if interrupt.token().is_cancelled() {
        return Ok(interrupted_status(interrupt));
    }
    let spawned = exec.spawn(&spec).map_err(|e| match e {
        DshError::Spawn { message, .. } => format!("cannot start the command: {message}"),
        other => flag_error(other),
    })?;
    if let (Some(input), Some(pipe)) = (stdin_file, spawned.stdin) {
        // The file is fed as the command reads it; it ends the input. A
        // reader that stops reading is the command's business (EPIPE).
        std::thread::Builder::new()
            .name("dsh-stdin-file".into())
            .spawn(move || {
                let (path, opened) = match input {
                    StdinFile::Opened(path, file) => (path, Ok(file)),
                    StdinFile::Fifo(path) => {
                        let opened = File::open(&path);
                        (path, opened)
                    }
                };
                let fed = opened.and_then(|mut file| io::copy(&mut file, &mut File::from(pipe)));
                if let Err(e) = fed.map(drop) {
                    if e.kind() != io::ErrorKind::BrokenPipe {
                        eprintln!("dsh: --stdin-file {}: {e}", path.display());
                    }
                }
            })
            .map_err(|e| format!("cannot feed --stdin-file: {e}"))?;
    }
    let process = spawned.process;
    let caller = Caller::watch();
    let mut stop: Option<Stopped> = None;
    while !process.wait_timeout(Some(TICK)).map_err(|e| e.to_string())? {
        if stop.is_some() {
            continue;
        }
        if interrupt.token().is_cancelled() {
            stop = Some(Stopped::Interrupted);
        } else if caller.gone() {
            stop = Some(Stopped::CallerGone);
        }
        if stop.is_some() {
            // The CLI never forks: only a forked copy of a host is refused.
            let _ = process.terminate();
        }
    }
    let stopped = stop.is_some();
    let code = match stop {
        Some(Stopped::CallerGone) => EXIT_CALLER_GONE,
        _ => status(&process, stopped, interrupt),
    };
    if json {
        let facts = facts_json(&process, stopped);
        emit_json(io::stdout().lock(), &facts)?;
    } else {
        let mut notes = notes(&process, stop == Some(Stopped::Interrupted), interrupt);
        if stop == Some(Stopped::CallerGone) {
            notes.insert(
                0,
                "its caller went away (every reader of its output is gone)".into(),
            );
        }
        if !notes.is_empty() {
            emit(io::stderr(), format!("dsh: {}\n", notes.join("; ")).as_bytes())?;
        }
    }
    Ok(code)
}

/// Why dsh stopped the command itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    /// SIGINT, SIGTERM or SIGHUP to dsh.
    Interrupted,
    /// Every reader of its output went away (a dropped SSH connection).
    CallerGone,
}

/// The status when the caller went away: as for a hangup (128 + SIGHUP).
const EXIT_CALLER_GONE: u8 = 129;

/// dsh's own stdout and stderr when both are pipes or sockets, two of
/// them (as a remote caller's are: `ssh host dsh run …`): once both have
/// lost their reader (a dropped connection closes both) nobody is left to
/// see the command, which is then stopped, as a hangup stops a terminal's.
/// One reader gone alone (`| head`, `2>&1 | head`: one pipe), or a
/// terminal or file on either, never counts.
struct Caller(Vec<libc::c_int>);

impl Caller {
    fn watch() -> Caller {
        // The pipe or socket on `fd`: (device, inode).
        let streamed = |fd: libc::c_int| {
            // SAFETY: a zeroed stat is a valid value of the plain C struct.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: fstat fills the struct it is given; a closed fd fails.
            let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
            let kind = st.st_mode & libc::S_IFMT;
            (ok && (kind == libc::S_IFIFO || kind == libc::S_IFSOCK)).then_some((st.st_dev, st.st_ino))
        };
        match (streamed(1), streamed(2)) {
            // One pipe on both (`2>&1 | head`) is one reader: not enough.
            (Some(out), Some(err)) if out != err => Caller(vec![1, 2]),
            _ => Caller(Vec::new()),
        }
    }

    fn gone(&self) -> bool {
        if self.0.is_empty() {
            return false;
        }
        let mut fds: Vec<libc::pollfd> = self
            .0
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: 0,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a valid array of its length; timeout 0 does not block.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        n > 0
            && fds
                .iter()
                .all(|p| p.revents & (libc::POLLERR | libc::POLLHUP) != 0)
    }
}

/// The spawn the options ask for: `bash -c` with the command line.
fn spawn_request(r: RunRequest) -> SpawnRequest {
    let output = if r.json {
        SpawnOutput::Collect {
            max_bytes: r.max_output.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES),
            // The executor's spill directory goes with it at exit.
            spill_max_bytes: None,
        }
    } else {
        SpawnOutput::Inherit
    };
    let sandbox_policy = match (r.sandbox, r.network) {
        (None, None) => None,
        (mode, network) => Some(SandboxPolicyInput {
            mode: mode.unwrap_or(dsh_core::SandboxMode::DangerFullAccess),
            workspace_root: r.workspace,
            session_id: None,
            network,
        }),
    };
    SpawnRequest {
        argv: bash_argv(&r.words),
        cwd: r.workdir,
        env: r.env,
        stdin: Some(match r.stdin {
            StdinFrom::Inherited => SpawnStdin::Inherit,
            StdinFrom::File(_) => SpawnStdin::Pipe,
            StdinFrom::Nothing => SpawnStdin::Null,
        }),
        stdout: Some(output),
        stderr: Some(output),
        grace_ms: r.grace_ms.map(|g| Num(g as f64)),
        sandbox_policy,
        limits: Some(r.limits),
        timeout_ms: r.timeout_ms.map(|t| Num(t as f64)),
    }
}

/// `bash -c`'s arguments: one word is a bash command line; several are a
/// program and its arguments, given to bash as its positional parameters
/// and run as `"$@"`, so each reaches the program exactly as it is (no
/// quoting, no length limit of one argument, and a first word such as
/// `x=1` or `time` is a program's name, as `env` would take it).
pub fn bash_argv(words: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = vec!["bash".into(), "-c".into(), "--".into()];
    match words {
        [line] => argv.push(line.clone()),
        many => {
            argv.push(r#""$@""#.into());
            argv.push("dsh".into()); // $0
            argv.extend(many.iter().cloned());
        }
    }
    argv
}

/// A refused request, named by the option that set the field.
fn flag_error(e: DshError) -> String {
    let DshError::InvalidArgument { field, problem } = &e else {
        return e.to_string();
    };
    let flag = match field.name {
        FieldName::TimeoutMs => "--timeout",
        FieldName::GraceMs => "--grace",
        FieldName::Cwd => "--workdir",
        FieldName::Env => "--env/--unset",
        FieldName::SandboxPolicy => "--sandbox/--workspace/--network",
        FieldName::LimitsMemoryBytes => "--memory",
        FieldName::LimitsProcesses => "--processes",
        FieldName::LimitsCpuSeconds => "--cpu-seconds",
        FieldName::LimitsFileSizeBytes => "--file-size",
        FieldName::LimitsOpenFiles => "--open-files",
        FieldName::Stdout | FieldName::Stderr => "--max-output",
        FieldName::Argv => "the command",
        _ => return e.to_string(),
    };
    format!("{flag}: {problem}")
}

/// The exit status, in order of precedence: an interrupt, a timeout, a
/// signal (128+N), the exit code.
fn status(p: &Process, stopped: bool, interrupt: &Interrupt) -> u8 {
    if stopped {
        return interrupted_status(interrupt);
    }
    if p.timed_out() {
        return EXIT_TIMEOUT;
    }
    if let Some(name) = p.signal() {
        return signal_status(&name);
    }
    p.exit_code()
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(EXIT_CLI_ERROR)
}

/// One line on stderr, only when there is something to say.
fn notes(p: &Process, stopped: bool, interrupt: &Interrupt) -> Vec<String> {
    let mut notes = Vec::new();
    if stopped {
        let name = interrupt
            .signal()
            .and_then(|s| nix::sys::signal::Signal::try_from(s).ok())
            .map_or("an interrupt", |s| s.as_str());
        notes.push(format!("stopped by {name}"));
    } else if p.timed_out() {
        notes.push("timed out".into());
    }
    if let Some(sig) = p.signal() {
        notes.push(format!("killed by {sig}"));
    }
    if p.exit_status_unavailable() {
        notes.push("its exit status is unavailable".into());
    }
    if let Some(limit) = p.limit() {
        notes.push(format!("it reached its {} limit", limit.as_str()));
    }
    if let Some(s) = p.sandbox() {
        if s.denied {
            notes.push(format!("the {} sandbox denied a file operation", s.mode));
        }
    }
    if p.survivors() > 0 {
        notes.push(format!("{} of its processes could not be ended", p.survivors()));
    }
    notes
}

/// The `--json` object: every fact of the run.
#[derive(Serialize)]
struct FactsJson {
    exit_code: Option<i32>,
    signal: Option<String>,
    exit_status_unavailable: bool,
    timed_out: bool,
    interrupted: bool,
    stdout: StreamJson,
    stderr: StreamJson,
    sandbox: Option<SandboxJson>,
    survivors: u32,
    limit: Option<&'static str>,
    limits_enforcement: EnforcementJson,
}

#[derive(Serialize)]
struct StreamJson {
    text: String,
    /// The stream was longer than `--max-output`: `text` is its end.
    truncated: bool,
}

fn facts_json(p: &Process, stopped: bool) -> FactsJson {
    let stream = |s| {
        let read = p.read_from(s, 0);
        StreamJson {
            text: read.text,
            truncated: read.lossy,
        }
    };
    FactsJson {
        exit_code: p.exit_code(),
        signal: p.signal(),
        exit_status_unavailable: p.exit_status_unavailable(),
        timed_out: p.timed_out(),
        interrupted: stopped,
        stdout: stream(OutputStream::Stdout),
        stderr: stream(OutputStream::Stderr),
        sandbox: p.sandbox().as_ref().map(sandbox_json),
        survivors: p.survivors(),
        limit: p.limit().map(|l| l.as_str()),
        limits_enforcement: EnforcementJson(p.limits_enforcement()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_word_is_a_command_line_and_several_are_positional_parameters() {
        let w = |ws: &[&str]| bash_argv(&ws.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(w(&["echo a | wc -c"]), ["bash", "-c", "--", "echo a | wc -c"]);
        assert_eq!(
            w(&["x=1", "it's", ""]),
            ["bash", "-c", "--", "\"$@\"", "dsh", "x=1", "it's", ""]
        );
    }
}

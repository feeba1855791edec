#![allow(dead_code)]
//! Helpers shared by the integration tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsh_core::{ConfigInput, Executor, Num, Request, RunResult, Spec};

pub fn executor() -> Executor {
    Executor::new(ConfigInput::default()).unwrap()
}

pub fn executor_with(f: impl FnOnce(&mut ConfigInput)) -> Executor {
    let mut c = ConfigInput::default();
    f(&mut c);
    Executor::new(c).unwrap()
}

pub fn n(v: impl Into<Num>) -> Option<Num> {
    Some(v.into())
}

pub fn spec(exec: &Executor, command: &str) -> Spec {
    exec.resolve(Request::new(command)).unwrap()
}

pub fn run(exec: &Executor, command: &str) -> RunResult {
    exec.run_blocking(&spec(exec, command), None).unwrap()
}

pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Polls `cond` until true or `limit` passes; for facts that have no event
/// to wait on (another process's death).
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// Runs the test `name` again in a host process of its own (this test
/// binary, `--exact name`), for a part that measures or changes the whole
/// process (its CPU time, its descriptor limit): true in that host, where
/// the caller goes on with the test's body; in the first process it waits
/// (at most 120 s, then kills it), asserts the host passed, and returns
/// false.
#[allow(dead_code)] // not every test file needs a host of its own
pub fn in_own_host(name: &str) -> bool {
    const VAR: &str = "DSH_TEST_OWN_HOST";
    if std::env::var(VAR).is_ok_and(|v| v == name) {
        return true;
    }
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(VAR, name)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let done = std::thread::spawn(move || child.wait_with_output().unwrap());
    let ended = eventually(Duration::from_secs(120), || done.is_finished());
    if !ended {
        // SAFETY: kill(2) takes integers; the child host is ours.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let output = done.join().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(ended, "the host of {name} hung: {err}");
    assert!(
        output.status.success(),
        "{name} in its own host: {:?}: {err}",
        output.status
    );
    false
}

/// True while `pid` names a live (non-zombie) process.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start().chars().next();
            !matches!(state, Some('Z') | Some('X'))
        }
        Err(_) => false,
    }
}

/// A fresh directory under the temp dir, removed with its contents when
/// dropped (at the end of the test, or while a failing one unwinds), so a
/// test run leaves nothing behind. Derefs to the path.
pub struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl TempDir {
    /// `root/name-PID`, emptied if a previous run left it behind.
    pub fn new_in(root: &Path, name: &str) -> TempDir {
        let dir = root.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

pub fn temp_dir(name: &str) -> TempDir {
    TempDir::new_in(&std::env::temp_dir(), &format!("dsh-test-{name}"))
}

/// Starts `exec`'s dispose once a witness of its first sweep runs: a
/// daemon left by an ended command (so only the executor's sweep signals
/// it), started now (a later pid than what the test started before, so
/// signalled after it). Returns once the sweep has signalled the witness,
/// with what tells when the dispose completes.
pub fn dispose_past_its_sweep(exec: &Executor, dir: &Path) -> std::sync::mpsc::Receiver<()> {
    let (swept, up) = (dir.join("swept"), dir.join("swept.up"));
    let witness = format!(
        "setsid sh -c 'trap \"echo > {s}; exit 0\" TERM; touch {u}; \
         while :; do sleep 0.01; done' </dev/null >/dev/null 2>&1 &",
        s = swept.display(),
        u = up.display()
    );
    assert_eq!(run(exec, &witness).exit_code, Some(0));
    assert!(
        eventually(Duration::from_secs(20), || up.exists()),
        "the witness started"
    );
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    exec.start_dispose(move || done_tx.send(()).unwrap());
    assert!(
        eventually(Duration::from_secs(20), || swept.exists()),
        "the dispose's sweep never reached the witness"
    );
    done_rx
}

/// Why this kernel cannot confine a command, or `None` when it can. Asked
/// of the kernel directly, not through dsh, so that a dsh bug that breaks
/// confinement fails the sandbox tests instead of skipping them.
pub fn landlock_missing() -> Option<String> {
    (landlock_abi() < 1).then(|| format!("no Landlock on this kernel ({})", std::io::Error::last_os_error()))
}

/// The kernel's Landlock ABI version (below 1: none), asked of the kernel.
pub fn landlock_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: a NULL attribute with size 0 and the VERSION flag only asks
    // for the ABI version; the kernel reads and writes no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    }
}

/// True (after saying so) when the calling test must be skipped because
/// the kernel has no Landlock (see [`skip`]); the test is still listed as
/// `ok`.
///
/// `DSH_TEST_FAKE_NO_LANDLOCK=1` skips as a kernel without Landlock would,
/// to exercise this path on one that has it.
pub fn skip_without_landlock() -> bool {
    let why = if std::env::var_os("DSH_TEST_FAKE_NO_LANDLOCK").is_some_and(|v| v == "1") {
        Some("Landlock faked away (DSH_TEST_FAKE_NO_LANDLOCK=1)".to_owned())
    } else {
        landlock_missing()
    };
    let Some(why) = why else {
        return false;
    };
    skip(why);
    true
}

/// Says that the calling test (or the part of it named in `why`) cannot
/// run here, and why: `SKIPPED <test>: <why>` straight to stderr (libtest
/// hides what a passing test prints, `std::io::stderr()` included), where
/// `scripts/test` counts and lists every such line after the Rust tests.
/// The test then returns; libtest still lists it as `ok`.
#[allow(dead_code)] // not every test file skips
pub fn skip(why: impl std::fmt::Display) {
    let current = std::thread::current();
    let test = current.name().unwrap_or("a test");
    let line = format!("SKIPPED {test}: {why}\n");
    // libtest captures `std::io::stderr()` too: write to descriptor 2.
    // SAFETY: `line` is valid for reads of its length; fd 2 is the test
    // process's stderr (a short write only shortens the notice).
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// Resident set size of this process, in bytes.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Children of this process, as (pid, state).
pub fn children() -> Vec<(i32, char)> {
    children_of(std::process::id() as i32)
}

/// Children of `parent`, as (pid, state).
pub fn children_of(parent: i32) -> Vec<(i32, char)> {
    let parent = parent.to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 2..];
            let mut f = rest.split_whitespace();
            let state = f.next()?.chars().next()?;
            (f.next()? == parent).then_some((pid, state))
        })
        .collect()
}

/// The process name (`comm`) of `pid`.
pub fn name_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Lifts the soft descriptor limit to the hard one (a host running
/// thousands of commands needs it; the executor never changes it itself).
pub fn raise_fd_limit() {
    // SAFETY: `lim` is a zero-initialised rlimit (a plain C struct) that
    // getrlimit fills and setrlimit only reads.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}

/// Starts both reactors before a baseline is taken: the core's shared one
/// (background work) and the calling thread's own (blocking runs).
pub fn warm_up(exec: &Executor) {
    run(exec, "true");
    assert!(exec
        .start(&spec(exec, "true"))
        .unwrap()
        .wait_timeout(Some(Duration::from_secs(30)))
        .unwrap());
}

/// True when no process, not even a zombie, holds `pid`: what a caller
/// that settled a run may rely on (`kill(pid, 0)` fails with ESRCH).
pub fn pid_is_free(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks for existence.
    let r = unsafe { libc::kill(pid, 0) };
    r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// The first line of `text` as a pid (a command that starts with `echo $$`).
pub fn first_pid(text: &str) -> i32 {
    text.lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text:?}"))
}

/// Drives a run future from a plain thread.
#[allow(dead_code)] // not every test file drives futures
pub fn runtime_block(f: dsh_core::RunFuture) -> dsh_core::Result<dsh_core::RunResult> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#![allow(dead_code)]
//! Helpers shared by the integration tests.

use std::collections::BTreeMap;
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

pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("dsh-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

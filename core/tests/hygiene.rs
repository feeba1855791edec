//! The host stays the host's: no SIGCHLD handler, no reaping of children we
//! did not start, no thread per process.
mod common;
use common::*;

use std::time::Duration;

use dsh_core::*;

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn the_hosts_own_children_and_sigchld_are_left_alone() {
    // SAFETY: a NULL new action only queries; `old` is a zeroed sigaction
    // (a plain C struct) for the kernel to fill.
    let sigchld_before = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGCHLD, std::ptr::null(), &mut old);
        old.sa_sigaction
    };
    let mut own = std::process::Command::new("true").spawn().unwrap();
    let pid = own.id() as i32;
    // Let it become a zombie before the executor does anything.
    assert!(eventually(Duration::from_secs(10), || !alive(pid)));
    let exec = executor();
    for _ in 0..20 {
        run(&exec, "true");
    }
    let p = exec.start(&spec(&exec, "true")).unwrap();
    assert!(p.wait_timeout(Some(Duration::from_secs(30))).unwrap());
    exec.dispose_blocking().unwrap();
    // If the executor had reaped with waitpid(-1), this would fail (ECHILD).
    let status = own.wait().expect("our child was reaped by someone else");
    assert!(status.success());
    // SAFETY: as for `sigchld_before`.
    let sigchld_after = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGCHLD, std::ptr::null(), &mut old);
        old.sa_sigaction
    };
    assert_eq!(sigchld_before, sigchld_after, "SIGCHLD disposition changed");
}

#[test]
fn many_background_processes_do_not_cost_a_thread_each() {
    let exec = executor();
    warm_up(&exec);
    let before = thread_count();
    let procs: Vec<Process> = (0..200)
        .map(|_| exec.start(&spec(&exec, "exec sleep 30")).unwrap())
        .collect();
    assert_eq!(exec.list().len(), 201, "the warm-up process and these 200");
    let during = thread_count();
    assert!(
        during <= before + 1,
        "threads grew from {before} to {during} for 200 processes"
    );
    exec.dispose_blocking().unwrap();
    assert!(procs.iter().all(|p| p.status() == Status::Killed));
}

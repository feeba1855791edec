//! 1 000 background processes at once: all tracked, read and reaped, on a
//! constant number of threads; the memory each idle one costs is reported.
mod common;
use common::*;

use std::time::Duration;

use dsh_core::*;

#[test]
fn a_thousand_background_processes_at_once() {
    raise_fd_limit();
    let exec = executor();
    warm_up(&exec);
    let (threads_before, rss_before, fds_before) = (thread_count(), rss_bytes(), open_fds());
    let procs: Vec<Process> = (0..1_000)
        .map(|_| exec.start(&spec(&exec, "echo $$; exec sleep 60")).unwrap())
        .collect();
    let mut pids = vec![0i32; procs.len()];
    assert!(
        eventually(Duration::from_secs(60), || {
            for (p, pid) in procs.iter().zip(pids.iter_mut()) {
                if *pid == 0 {
                    *pid = p.read_output().delta.trim().parse().unwrap_or(0);
                }
            }
            pids.iter().all(|&p| p != 0)
        }),
        "not every process reported in"
    );
    assert!(procs.iter().all(|p| p.status() == Status::Running));
    let (threads, rss, fds) = (thread_count(), rss_bytes(), open_fds());
    let per_process = rss.saturating_sub(rss_before) / 1_000;
    println!(
        "idle background process: {per_process} bytes of host memory each; threads {threads_before} → {threads}; \
         descriptors {fds_before} → {fds}"
    );
    assert!(
        threads <= threads_before + 1,
        "threads grew from {threads_before} to {threads}"
    );
    // docs/guarantees.md: under 32 KiB each. Measured here: about 7 KB
    // with an empty environment, 11–14 KB with a shell's or cargo's (the
    // starts capture the host environment faster than they are spawned).
    assert!(per_process < 32 * 1024, "{per_process} bytes per idle process");
    // docs/guarantees.md (Not promised): three descriptors per running command (its
    // stdout and stderr pipes and its pidfd), so a thousand need ~3 000.
    assert!(
        fds.saturating_sub(fds_before) <= 3 * 1_000,
        "descriptors grew from {fds_before} to {fds} for 1 000 commands"
    );
    exec.dispose_blocking().unwrap();
    assert!(procs
        .iter()
        .all(|p| p.is_settled() && p.status() == Status::Killed));
    assert!(pids.iter().all(|&pid| !alive(pid)));
    assert!(
        eventually(Duration::from_secs(10), || children().is_empty()),
        "unreaped: {:?}",
        children()
    );
}

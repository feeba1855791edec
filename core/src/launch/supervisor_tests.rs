//! The host's side of the supervisor's protocol, against the real
//! supervisor (see `supervisor.rs`).

use super::*;
use crate::launch::ending::ExitStatus;
use std::time::{Duration, Instant};

/// Waits up to `ms` for `fd` to be readable.
fn readable(fd: &OwnedFd, ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
}

fn next(fd: &OwnedFd, reader: &mut ReportReader) -> Report {
    loop {
        match reader.read(fd.as_raw_fd()) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                assert!(readable(fd, 30_000), "no report within 30 s");
            }
            other => return other.expect("report pipe readable"),
        }
    }
}

/// The next report, which must be EXITED: the leader's status, whether the
/// supervisor reaped it at its exit, and whether its tree was over then.
fn next_exit(fd: &OwnedFd, reader: &mut ReportReader) -> (ExitStatus, bool, bool) {
    match next(fd, reader) {
        Report::Exited {
            status,
            reaped,
            tree_empty,
        } => (status, reaped, tree_empty),
        _ => panic!("EXITED next"),
    }
}

/// Starts `argv` (an absolute path first) with its SPAWNED deferred.
fn start(sup: &Supervisor, argv: &[&CStr]) -> Launched {
    start_with(sup, argv, With::default())
}

/// What a test's start has besides its program.
#[derive(Default)]
struct With {
    mounts: Option<ReadOnlyMounts>,
    born_in: Option<RawFd>,
    stdin: Option<RawFd>,
    pid_pipe: Option<RawFd>,
}

fn start_with(sup: &Supervisor, argv: &[&CStr], with: With) -> Launched {
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
    let fds = ChildFds {
        stdin: with.stdin,
        stdout: null.as_raw_fd(),
        stderr: null.as_raw_fd(),
        ruleset: None,
        ruleset_scope_only: false,
        cgroups: Vec::new(),
        born_in: with.born_in,
        rlimits: None,
        seccomp: None,
        mounts: with.mounts,
        terminal: false,
    };
    let envp = Envp::empty();
    let program = Program {
        path: argv[0],
        argv,
        envp: &envp,
        workdir: c"/",
    };
    sup.start_deferred(&fds, &program, with.pid_pipe).unwrap()
}

#[test]
fn a_short_command_reports_its_pid_with_its_exit() {
    let sup = super::start().unwrap();
    let started = Instant::now();
    let d = start(&sup, &[c"/bin/true"]);
    let mut reader = ReportReader::default();
    let Report::Spawned(pid) = next(&d.report, &mut reader) else {
        panic!("SPAWNED first");
    };
    assert!(pid > 0);
    // Sent before the 5 ms are up, the pid can only have come with the
    // exit report (in the same write); a loaded machine may run `true`
    // longer, and the pid then comes alone at 5 ms.
    assert!(
        readable(&d.report, 0) || started.elapsed() >= Duration::from_millis(5),
        "the pid came alone before the exit and before 5 ms"
    );
    let (status, reaped, _) = next_exit(&d.report, &mut reader);
    assert_eq!(status, ExitStatus::Code(0));
    assert!(started.elapsed() < Duration::from_secs(30));
    d.releaser.release(Some(pid).filter(|_| !reaped), d.report);
}

/// Kills what is left in the group of the unreaped leader `pid`.
fn kill_group(pid: libc::pid_t) {
    // SAFETY: killpg takes integers; the leader is unreaped, so its group
    // id is still its own.
    unsafe { libc::killpg(pid, libc::SIGKILL) };
}

fn alive(pid: libc::pid_t) -> bool {
    // SAFETY: kill(2) with signal 0 only checks.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Whether a leader kept for its release (`!reaped`) may have had its pid
/// told alone, at the 5 ms, and its exit come before the report pipe was
/// looked at: both then read as one write.
fn told_alone_maybe(reaped: bool, started: Instant) -> bool {
    !reaped && started.elapsed() >= Duration::from_millis(5)
}

/// A leader that exits with a code, leaving nothing, before its pid was told.
#[test]
fn a_leader_that_leaves_nothing_is_reaped_before_its_exit_is_reported() {
    let sup = super::start().unwrap();
    reaped_at_its_exit(&sup, false);
}

/// Runs `/bin/true` until its pid comes with its exit, and checks that it
/// was reaped before that report (and, `with_pid_pipe`, that the pid pipe
/// nobody read still tells the pid). A loaded machine may run it past the
/// 5 ms after which its pid is told alone (it is then kept for its
/// release): tried until once the pid came with the exit.
fn reaped_at_its_exit(sup: &Supervisor, with_pid_pipe: bool) {
    for _ in 0..50 {
        let pid_pipe = with_pid_pipe.then(|| pipe(0).unwrap());
        let started = Instant::now();
        let with = With {
            pid_pipe: pid_pipe.as_ref().map(|(_, theirs)| theirs.as_raw_fd()),
            ..With::default()
        };
        let d = start_with(sup, &[c"/bin/true"], with);
        // Ours gone, the supervisor's copy is the only writer.
        let pid_pipe = pid_pipe.map(|(mine, _theirs)| mine);
        let mut reader = ReportReader::default();
        let Report::Spawned(pid) = next(&d.report, &mut reader) else {
            panic!("SPAWNED first");
        };
        let with_exit = readable(&d.report, 0);
        let (status, reaped, tree_empty) = next_exit(&d.report, &mut reader);
        assert_eq!(status, ExitStatus::Code(0));
        assert!(tree_empty, "it left nothing, but its tree was not said over");
        if !with_exit || told_alone_maybe(reaped, started) {
            assert!(!reaped, "reaped although its pid had been told");
            d.releaser.release(Some(pid), d.report);
            continue;
        }
        assert!(reaped, "a leader that left nothing was kept for a release");
        assert!(!alive(pid), "reported reaped, but {pid} is still there");
        // Closed right after the reap: nothing more comes, nothing is released.
        assert!(matches!(next(&d.report, &mut reader), Report::Ended));
        if let Some(mine) = pid_pipe {
            assert_eq!(read_pid_pipe(mine), pid, "the pid pipe tells the pid reaped");
        }
        return;
    }
    panic!("in 50 runs of /bin/true, its pid never came with its exit");
}

#[test]
fn a_leader_that_leaves_a_process_behind_is_kept_unreaped_until_released() {
    let sup = super::start().unwrap();
    leave_a_process_behind(&sup);
}

#[test]
fn the_supervisor_looks_at_its_children_afresh_at_each_exit() {
    let sup = super::start().unwrap();
    leave_a_process_behind(&sup);
    // The killed `sleep` is the supervisor's child until it reaps it, a
    // moment later; with it gone, a command that leaves nothing is reaped
    // at its exit again.
    let children = format!("/proc/{0}/task/{0}/children", sup.pid());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&children).unwrap().trim().is_empty() {
        assert!(Instant::now() < deadline, "the killed `sleep` was never reaped");
        std::thread::sleep(Duration::from_millis(5));
    }
    reaped_at_its_exit(&sup, false);
}

/// A leader that exits leaving `sleep` in its group is held until released.
fn leave_a_process_behind(sup: &Supervisor) {
    let argv = [c"/bin/sh", c"-c", c"sleep 30 & exit 3"];
    held_until_released(
        sup,
        &argv,
        ExitStatus::Code(3),
        false,
        "its `sleep` still runs in its group",
    );
}

#[test]
fn a_leader_whose_pid_was_told_is_kept_unreaped_until_released() {
    let sup = super::start().unwrap();
    // Longer than the 5 ms after which the pid is told alone.
    let argv = [c"/bin/sleep", c"0.1"];
    // Held, though nothing of its tree is left.
    held_until_released(
        &sup,
        &argv,
        ExitStatus::Code(0),
        true,
        "the host may hold its pid",
    );
}

/// The pid a supervisor wrote on a pid pipe, and the end of file after it.
fn read_pid_pipe(pipe: OwnedFd) -> libc::pid_t {
    let pid = read_pid_pipe_first(&pipe);
    let mut more = Vec::new();
    io::Read::read_to_end(&mut std::fs::File::from(pipe), &mut more).unwrap();
    assert!(more.is_empty(), "four bytes, then the end of file");
    pid
}

/// A spawned program's leader (its pid on a pid pipe too) that nobody asked
/// for the pid of is reaped at its exit like a command's; the pid pipe
/// still tells the pid afterwards.
#[test]
fn a_leader_whose_pid_pipe_was_not_read_is_reaped_at_its_exit_and_the_pipe_still_tells_it() {
    let sup = super::start().unwrap();
    reaped_at_its_exit(&sup, true);
}

/// A leader whose pid the host read from the pid pipe while it ran is held
/// until released, even when it exits before its pid is due on the report
/// pipe (the host may signal the pid it read).
#[test]
fn a_leader_whose_pid_was_read_from_its_pid_pipe_is_kept_unreaped_until_released() {
    let sup = super::start().unwrap();
    for _ in 0..50 {
        let (mine, theirs) = pipe(0).unwrap();
        let (stdin, go) = pipe(0).unwrap();
        let started = Instant::now();
        // Exits as soon as a line comes on its stdin.
        let d = start_with(
            &sup,
            &[c"/bin/sh", c"-c", c"read line"],
            With {
                stdin: Some(stdin.as_raw_fd()),
                pid_pipe: Some(theirs.as_raw_fd()),
                ..With::default()
            },
        );
        drop((theirs, stdin));
        let read = read_pid_pipe_first(&mine);
        io::Write::write_all(&mut std::fs::File::from(go), b"go\n").unwrap();
        let mut reader = ReportReader::default();
        let Report::Spawned(pid) = next(&d.report, &mut reader) else {
            panic!("SPAWNED first");
        };
        assert_eq!(read, pid);
        let with_exit = readable(&d.report, 0);
        let (status, reaped, tree_empty) = next_exit(&d.report, &mut reader);
        // Held, and still known to have left nothing.
        assert!(tree_empty, "it left nothing, but its tree was not said over");
        // Within the 5 ms, the pid can only have come with the exit.
        let in_time = started.elapsed() < Duration::from_millis(5);
        assert_eq!(status, ExitStatus::Code(0));
        assert!(!reaped, "reaped at its exit, but the host had read its pid");
        assert!(alive(pid), "the leader must stay a zombie until released");
        d.releaser.release(Some(pid), d.report.try_clone().unwrap());
        assert!(matches!(next(&d.report, &mut reader), Report::Ended));
        assert!(!alive(pid));
        // Only the pid read is why it was held when it came with the exit
        // (within the 5 ms); a slower run says nothing: again.
        if with_exit && in_time {
            return;
        }
    }
    panic!("in 50 runs, the pid never came with the exit");
}

/// The four bytes of the pid, read as the host does, leaving the pipe open.
fn read_pid_pipe_first(pipe: &OwnedFd) -> libc::pid_t {
    let mut bytes = [0u8; 4];
    io::Read::read_exact(&mut &std::fs::File::from(pipe.try_clone().unwrap()), &mut bytes)
        .expect("the pid on the pid pipe");
    libc::pid_t::from_ne_bytes(bytes)
}

/// Starts `argv`, expects its exit with `status`, its tree said over at the
/// exit or not (`tree_empty`), and its leader held as an unreaped zombie
/// (`because`), kills what is left in its group, releases it, and checks
/// that the supervisor reaps it then.
fn held_until_released(
    sup: &Supervisor,
    argv: &[&CStr],
    status: ExitStatus,
    tree_empty: bool,
    because: &str,
) {
    let d = start(sup, argv);
    let mut reader = ReportReader::default();
    let Report::Spawned(pid) = next(&d.report, &mut reader) else {
        panic!("SPAWNED first");
    };
    let (got, reaped, empty) = next_exit(&d.report, &mut reader);
    assert_eq!(got, status);
    assert_eq!(empty, tree_empty, "whether its tree was over at its exit");
    assert!(!reaped, "reaped at its exit, but {because}");
    assert!(alive(pid), "the leader must stay a zombie until released");
    kill_group(pid);
    d.releaser.release(Some(pid), d.report.try_clone().unwrap());
    assert!(matches!(next(&d.report, &mut reader), Report::Ended));
    assert!(!alive(pid));
}

#[test]
fn a_long_command_reports_its_pid_after_a_few_milliseconds_not_at_once() {
    let sup = super::start().unwrap();
    let d = start(&sup, &[c"/bin/sleep", c"30"]);
    // Absent, whatever the load: a pid sent at once is the bug.
    assert!(!readable(&d.report, 2), "SPAWNED was not deferred");
    let mut reader = ReportReader::default();
    let Report::Spawned(pid) = next(&d.report, &mut reader) else {
        panic!("SPAWNED first");
    };
    assert!(
        !readable(&d.report, 0),
        "the pid came with the exit, not while the command runs"
    );
    // SAFETY: kill(2) of the leader, unreaped until released below.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(matches!(
        next(&d.report, &mut reader),
        Report::Exited {
            status: ExitStatus::Signal(libc::SIGKILL),
            reaped: false,
            tree_empty: true,
        }
    ));
    d.releaser.release(Some(pid), d.report);
}

#[test]
fn a_start_that_fails_is_reported_at_once() {
    let sup = super::start().unwrap();
    let d = start(&sup, &[c"/nonexistent/program"]);
    let mut reader = ReportReader::default();
    assert!(matches!(
        next(&d.report, &mut reader),
        Report::Failed(SpawnError::Failed {
            step: Step::Exec,
            errno: libc::ENOENT,
            ..
        })
    ));
    assert!(matches!(next(&d.report, &mut reader), Report::Ended));
}

/// The probe said the mounts can be made, so a command whose own fail is
/// not started (nothing runs unconfined by accident), and the failure
/// names the part: here a writable directory that is gone.
#[test]
fn a_command_whose_read_only_mounts_fail_does_not_start() {
    if let Some(why) = crate::launch::mounts::metadata_unavailable() {
        // Straight to fd 2, past libtest's capture: scripts/test counts it.
        let line = format!("SKIPPED a_command_whose_read_only_mounts_fail_does_not_start: {why}\n");
        // SAFETY: `line` is valid for reads of its length.
        unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
        return;
    }
    let sup = super::start().unwrap();
    let user = crate::launch::mounts::read_only_mounts(Some(&crate::spec::sandbox::SandboxPolicy {
        mode: crate::spec::sandbox::SandboxMode::ReadOnly,
        workspace_root: "/".into(),
        session_id: None,
        network: crate::spec::sandbox::NetworkPolicy::Allow,
    }))
    .expect("read-only gets the mounts")
    .user;
    let mounts = ReadOnlyMounts {
        user,
        writable: vec![c"/nonexistent/dsh-writable".into()],
    };
    let d = start_with(
        &sup,
        &[c"/bin/true"],
        With {
            mounts: Some(mounts),
            ..With::default()
        },
    );
    let mut reader = ReportReader::default();
    match next(&d.report, &mut reader) {
        Report::Failed(SpawnError::Failed {
            step: Step::Mounts,
            errno: libc::ENOENT,
            detail: MOUNTS_KEEP,
        }) => {}
        other => panic!("expected the mounts to fail at the writable directory, got {other:?}"),
    }
    assert!(matches!(next(&d.report, &mut reader), Report::Ended));
}

/// A command born in its cgroup v2 group is born there or not at all: a
/// directory that is no cgroup fails the start as that group's, and
/// nothing runs.
#[test]
fn a_command_that_cannot_be_born_in_its_group_does_not_start() {
    let sup = super::start().unwrap();
    let not_a_group = std::fs::File::open("/").unwrap();
    let d = start_with(
        &sup,
        &[c"/bin/true"],
        With {
            born_in: Some(not_a_group.as_raw_fd()),
            ..With::default()
        },
    );
    let mut reader = ReportReader::default();
    match next(&d.report, &mut reader) {
        Report::Failed(SpawnError::Failed {
            step: Step::Limits,
            detail: LIMIT_GROUP,
            errno,
        }) => assert_ne!(errno, 0),
        other => panic!("expected the group to fail the start, got {other:?}"),
    }
    assert!(matches!(next(&d.report, &mut reader), Report::Ended));
}

/// The supervisor's CPU time so far, in clock ticks (utime + stime).
fn cpu_ticks(pid: libc::pid_t) -> u64 {
    let stat = crate::sys::proc::read(&format!("{pid}/stat")).unwrap();
    // From the state on, utime and stime are the 12th and 13th (stat's
    // 14th and 15th fields).
    let fields: Vec<&str> = crate::sys::stat_fields(&stat).collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn a_release_pipe_closed_before_the_control_socket_does_not_make_the_supervisor_spin() {
    // At the host's exit its descriptors close one by one: the release
    // pipe's end may go before the control socket. The supervisor must
    // sleep meanwhile, not poll a pipe at its end of file.
    let sup = super::start().unwrap();
    let d = start(&sup, &[c"/bin/true"]);
    let mut reader = ReportReader::default();
    let Report::Spawned(pid) = next(&d.report, &mut reader) else {
        panic!("SPAWNED first");
    };
    assert!(matches!(next(&d.report, &mut reader), Report::Exited { .. }));
    d.releaser.release(Some(pid), d.report);
    // The host's end of the release pipe closes (dup2 closes the pipe's
    // end atomically; the descriptor, /dev/null now, stays the pipe's
    // owner's to close).
    let null = std::fs::File::open("/dev/null").unwrap();
    // SAFETY: both descriptors are open; the target is owned by `sup` and
    // stays open (as /dev/null) until `sup` drops it.
    assert!(unsafe { libc::dup2(null.as_raw_fd(), sup.releases.write.as_raw_fd()) } >= 0);
    let before = cpu_ticks(sup.pid());
    std::thread::sleep(Duration::from_millis(500));
    let used = cpu_ticks(sup.pid()) - before;
    assert!(
        used < 10,
        "the supervisor used {used} ticks of CPU in 500 ms doing nothing"
    );
    // And it still starts commands, reaped once their report pipe closes.
    let d = start(&sup, &[c"/bin/true"]);
    let mut reader = ReportReader::default();
    assert!(matches!(next(&d.report, &mut reader), Report::Spawned(_)));
    assert!(matches!(
        next(&d.report, &mut reader),
        Report::Exited {
            status: ExitStatus::Code(0),
            ..
        }
    ));
    d.releaser.release(None, d.report);
}

/// A host in a PID namespace of its own whose `/proc` is still the
/// parent's (`unshare --pid --fork` without `--mount-proc`, some
/// containers): the supervisor's own pid names another process there, so
/// it must not take that one's children for its own. Runs the test above
/// in such a namespace; skipped, saying so, where `unshare` is refused.
#[test]
fn a_supervisor_that_sees_another_pid_namespaces_proc_still_holds_a_leader_with_a_process_behind() {
    let inner =
        "launch::supervisor::tests::a_leader_that_leaves_a_process_behind_is_kept_unreaped_until_released";
    let out = std::process::Command::new("timeout")
        .args(["120", "unshare", "--pid", "--fork", "--kill-child"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", inner, "--test-threads=1"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("timeout(1) runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !stdout.contains("running 1 test") {
        eprintln!(
            "SKIPPED a_supervisor_that_sees_another_pid_namespaces_proc...: no PID namespace here ({})",
            stderr.trim()
        );
        return;
    }
    assert!(stdout.contains("1 passed"), "{stdout}\n{stderr}");
}

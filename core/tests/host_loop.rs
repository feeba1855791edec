//! Foreground runs on a host's own event loop (`HostLoop`): this test is
//! the host, a `poll(2)` loop on the host loop's descriptor and on a pipe
//! its waker writes to, as Node's libuv is.
mod common;
use common::*;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use dsh_core::*;

/// A waker that writes to a pipe the loop watches, from any thread.
struct PipeWaker {
    write: OwnedFd,
    wakes: AtomicUsize,
}

impl Wake for PipeWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::Relaxed);
        // SAFETY: one byte from a live buffer to an open pipe.
        unsafe { libc::write(self.write.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
    }
}

struct Host {
    host: HostLoop,
    read: OwnedFd,
    waker: Arc<PipeWaker>,
}

impl Host {
    fn new() -> Host {
        let mut fds = [0; 2];
        assert_eq!(
            // SAFETY: room for the two descriptors pipe2 writes.
            unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) },
            0
        );
        // SAFETY: fresh descriptors, owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Host {
            host: HostLoop::new().unwrap(),
            read,
            waker: Arc::new(PipeWaker {
                write,
                wakes: AtomicUsize::new(0),
            }),
        }
    }

    /// Drives `run` the way a host's loop does: poll it, then sleep until
    /// the host loop's descriptor or the waker's pipe says to poll again.
    /// Returns the result and how many times the loop slept.
    fn drive<T: Send + 'static>(&self, mut run: HostRun<T>, limit: Duration) -> (Result<T>, usize) {
        let mut sleeps = 0;
        let ended = self.drive_until(&mut run, limit, || {
            sleeps += 1;
            false
        });
        (ended.expect("driven until it ended"), sleeps)
    }

    /// Sleeps until the host loop's descriptor or the waker's pipe says to
    /// poll again; fails when nothing did before `deadline` (one more
    /// dispatch would hide a lost wakeup).
    fn sleep_until_woken(&self, deadline: Instant, limit: Duration) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "not done within {limit:?}");
        let mut fds = [
            libc::pollfd {
                fd: self.host.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.read.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfd entries.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, left.as_millis().max(1) as i32) };
        assert!(ready != 0, "not done within {limit:?}: nothing woke the host");
        let mut buf = [0u8; 64];
        // SAFETY: reads into a live buffer from our non-blocking pipe.
        while unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), 64) } > 0 {}
    }

    /// Polls `run` the way a host's loop does until `done()` (asked after
    /// each poll) says so, sleeping between polls until the host loop's
    /// descriptor or the waker's pipe says to poll again: nothing is found
    /// by polling busily. `None` when `done` said so first, else the
    /// result the run ended with.
    fn drive_until<T: Send + 'static>(
        &self,
        run: &mut HostRun<T>,
        limit: Duration,
        mut done: impl FnMut() -> bool,
    ) -> Option<Result<T>> {
        let waker = Waker::from(self.waker.clone());
        let mut cx = Context::from_waker(&waker);
        let deadline = Instant::now() + limit;
        loop {
            self.host.dispatch().unwrap();
            if let Poll::Ready(r) = self.host.poll(run, &mut cx) {
                return Some(r);
            }
            if done() {
                return None;
            }
            self.sleep_until_woken(deadline, limit);
        }
    }
}

#[test]
fn a_run_on_the_hosts_loop_gives_the_result_a_blocking_run_gives() {
    let exec = executor();
    let host = Host::new();
    let s = spec(&exec, "echo out; echo err >&2; exit 7");
    assert!(s.runs_on_host_loop());
    let (r, _) = host.drive(
        exec.run_on_host_loop(&host.host, &s, None).unwrap(),
        Duration::from_secs(30),
    );
    let r = r.unwrap();
    assert_eq!(r.exit_code, Some(7));
    assert_eq!(
        (r.stdout.text.as_str(), r.stderr.text.as_str()),
        ("out\n", "err\n")
    );
    assert!(!r.timed_out && !r.aborted);
}

#[test]
fn the_timeout_fires_though_nothing_is_readable() {
    // Only the core's runtime keeps time for a host-loop run: its firing
    // must wake the host (the descriptor stays quiet while `sleep` runs).
    let exec = executor_with(|c| c.grace_ms = n(300));
    let host = Host::new();
    let mut req = Request::new("sleep 30");
    req.timeout_ms = n(300);
    let s = exec.resolve(req).unwrap();
    let started = Instant::now();
    let (r, _) = host.drive(
        exec.run_on_host_loop(&host.host, &s, None).unwrap(),
        Duration::from_secs(20),
    );
    let r = r.unwrap();
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.signal.as_deref(), Some("SIGTERM"));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        host.waker.wakes.load(Ordering::Relaxed) > 0,
        "the timer woke the host"
    );
}

#[test]
fn a_cancellation_from_another_thread_wakes_the_host_and_stops_the_run() {
    let exec = executor();
    let host = Host::new();
    let token = CancelToken::new();
    let run = exec
        .run_on_host_loop(&host.host, &spec(&exec, "sleep 30"), Some(&token))
        .unwrap();
    let canceller = {
        let token = token.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            token.cancel();
        })
    };
    let (r, _) = host.drive(run, Duration::from_secs(20));
    canceller.join().unwrap();
    let r = r.unwrap();
    assert!(r.aborted && !r.timed_out, "{r:?}");
}

#[test]
fn runs_that_cannot_run_on_the_hosts_loop_are_refused_and_say_so() {
    let exec = executor();
    let host = Host::new();
    let mut req = Request::new("cat");
    req.stdin = Some(b"x".to_vec());
    let s = exec.resolve(req).unwrap();
    assert!(!s.runs_on_host_loop());
    assert!(exec.run_on_host_loop(&host.host, &s, None).is_err());
    let mut req = Request::new("true");
    req.on_expiry = Some(OnExpiry::Background);
    assert!(!exec.resolve(req).unwrap().runs_on_host_loop());
}

#[test]
fn a_run_dropped_before_its_end_leaves_nothing_running() {
    let exec = executor_with(|c| c.grace_ms = n(300));
    let host = Host::new();
    let marker = format!("hostloop-drop-{}", std::process::id());
    let mut run = exec
        .run_on_host_loop(
            &host.host,
            &spec(&exec, &format!("sleep 30; echo {marker}")),
            None,
        )
        .unwrap();
    polled_until_started(&host, &mut run, &marker);
    drop(run);
    assert_eq!(pgrep(&marker), 0, "the command ended with its run");
}

#[test]
fn many_runs_share_one_host_loop() {
    let exec = executor();
    let host = Host::new();
    let waker = Waker::from(host.waker.clone());
    let mut cx = Context::from_waker(&waker);
    let mut runs: Vec<(usize, HostRun)> = (0..8)
        .map(|i| {
            (
                i,
                exec.run_on_host_loop(&host.host, &spec(&exec, &format!("sleep 0.{i}; echo {i}")), None)
                    .unwrap(),
            )
        })
        .collect();
    let mut done = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !runs.is_empty() {
        assert!(Instant::now() < deadline, "runs still pending: {}", runs.len());
        host.host.dispatch().unwrap();
        runs.retain_mut(|(i, run)| match host.host.poll(run, &mut cx) {
            Poll::Ready(r) => {
                done.push((*i, r.unwrap().stdout.text));
                false
            }
            Poll::Pending => true,
        });
        let mut fds = [libc::pollfd {
            fd: host.host.fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one valid pollfd entry.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, 100) };
    }
    done.sort();
    let want: Vec<(usize, String)> = (0..8).map(|i| (i, format!("{i}\n"))).collect();
    assert_eq!(done, want);
}

#[test]
fn a_run_whose_command_ended_before_its_first_poll_still_ends() {
    // The host loop's descriptor watches the command's descriptors from
    // `run_on_host_loop`; the reactor that reads them registers them at the first
    // poll. A command that has already reported by then: the host drains
    // its descriptor (dispatch) before that poll, and the poll must not
    // leave the events it registered unheard.
    let exec = executor();
    let host = Host::new();
    let s = spec(&exec, "echo done");
    let run = exec.run_on_host_loop(&host.host, &s, None).unwrap();
    // Long enough for `echo` to have ended and its report to be readable.
    std::thread::sleep(Duration::from_millis(300));
    let (r, _) = host.drive(run, Duration::from_secs(10));
    let r = r.unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.stdout.text, "done\n");
}

#[test]
fn a_thousand_short_runs_in_a_row_each_end() {
    let exec = executor();
    let host = Host::new();
    for i in 0..1000 {
        let command = ["true", "echo x", "echo e >&2"][i % 3];
        let run = exec
            .run_on_host_loop(&host.host, &spec(&exec, command), None)
            .unwrap();
        let (r, _) = host.drive(run, Duration::from_secs(10));
        assert_eq!(r.unwrap().exit_code, Some(0), "run {i}: {command}");
    }
}

/// Polls `run` once (it registers its descriptors and timers), then waits
/// until its command, which has `marker` in its command line, runs.
fn polled_until_started(host: &Host, run: &mut HostRun, marker: &str) {
    let waker = Waker::from(host.waker.clone());
    assert!(host.host.poll(run, &mut Context::from_waker(&waker)).is_pending());
    assert!(
        eventually(Duration::from_secs(10), || pgrep(marker) > 0),
        "the command started"
    );
}

/// How many processes have `marker` in their command line.
fn pgrep(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .count()
}

#[test]
fn the_timeout_stops_the_command_while_the_host_thread_is_busy() {
    // The host polls once, then does not look at its loop for seconds: the
    // command must still end at its timeout (a core thread polls the run
    // when the timer fires), and the host's next poll has the result.
    let exec = executor_with(|c| c.grace_ms = n(300));
    let host = Host::new();
    let marker = format!("hostloop-busy-{}", std::process::id());
    let mut req = Request::new(format!("trap '' TERM; sleep 30; echo {marker}"));
    req.timeout_ms = n(300);
    let mut run = exec
        .run_on_host_loop(&host.host, &exec.resolve(req).unwrap(), None)
        .unwrap();
    polled_until_started(&host, &mut run, &marker);
    // Busy: no dispatch, no poll. Timeout 300 ms, then SIGKILL 300 ms later.
    assert!(
        eventually(Duration::from_secs(5), || pgrep(&marker) == 0),
        "the command outlived its timeout and grace while the host was busy"
    );
    let (r, _) = host.drive(run, Duration::from_secs(10));
    let r = r.unwrap();
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.signal.as_deref(), Some("SIGKILL"), "it ignored SIGTERM: {r:?}");
}

#[test]
fn a_run_on_the_hosts_loop_has_reaped_its_leader_when_it_settles() {
    let exec = executor_with(|c| c.grace_ms = n(300));
    let host = Host::new();
    for round in 0..5 {
        let (r, _) = host.drive(
            exec.run_on_host_loop(&host.host, &spec(&exec, "echo $$"), None)
                .unwrap(),
            Duration::from_secs(30),
        );
        let r = r.unwrap();
        assert!(
            pid_is_free(first_pid(&r.stdout.text)),
            "round {round}: exit left its leader"
        );

        let mut req = Request::new("echo $$; exec sleep 30");
        req.timeout_ms = n(200);
        let s = exec.resolve(req).unwrap();
        let (r, _) = host.drive(
            exec.run_on_host_loop(&host.host, &s, None).unwrap(),
            Duration::from_secs(30),
        );
        let r = r.unwrap();
        assert!(r.timed_out, "{r:?}");
        assert!(
            pid_is_free(first_pid(&r.stdout.text)),
            "round {round}: a timeout left its leader"
        );

        let token = CancelToken::new();
        let run = exec
            .run_on_host_loop(&host.host, &spec(&exec, "echo $$; exec sleep 30"), Some(&token))
            .unwrap();
        let canceller = {
            let token = token.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                token.cancel();
            })
        };
        let (r, _) = host.drive(run, Duration::from_secs(30));
        canceller.join().unwrap();
        let r = r.unwrap();
        assert!(r.aborted, "{r:?}");
        assert!(
            pid_is_free(first_pid(&r.stdout.text)),
            "round {round}: an abort left its leader"
        );
    }
}

#[test]
fn the_timeouts_sigterm_reaches_the_command_while_the_host_thread_is_busy() {
    // The SIGTERM of a stop waits for the leader's pid, which comes on the
    // report pipe: a busy host that never dispatches must not hold it back
    // until the SIGKILL (a TERM trap would never run).
    let exec = executor_with(|c| c.grace_ms = n(2_000));
    let host = Host::new();
    let marker = format!("hostloop-term-{}", std::process::id());
    let mut req = Request::new(format!(
        "trap 'echo got-term; exit 7' TERM; sleep 30 & wait; echo {marker}"
    ));
    req.timeout_ms = n(300);
    let mut run = exec
        .run_on_host_loop(&host.host, &exec.resolve(req).unwrap(), None)
        .unwrap();
    polled_until_started(&host, &mut run, &marker);
    // Busy for longer than the timeout: the trap ends the command.
    assert!(
        eventually(Duration::from_secs(1) + Duration::from_millis(800), || pgrep(
            &marker
        ) == 0),
        "the timeout's SIGTERM did not reach the command while the host was busy"
    );
    let (r, _) = host.drive(run, Duration::from_secs(10));
    let r = r.unwrap();
    assert!(r.timed_out, "{r:?}");
    assert_eq!(
        (r.exit_code, r.stdout.text.as_str()),
        (Some(7), "got-term\n"),
        "{r:?}"
    );
}

// Spawned programs (docs/spawn.md) on the host's loop: the same supervision
// as on the core's threads, read by the host's thread.

fn spawn_of(exec: &Executor, script: &str, grace_ms: u32) -> SpawnSpec {
    exec.resolve_spawn(SpawnRequest {
        argv: vec!["bash".into(), "-c".into(), script.into()],
        grace_ms: n(grace_ms),
        ..Default::default()
    })
    .unwrap()
}

fn dead_or_zombie(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn a_spawn_on_the_hosts_loop_settles_with_its_exit_and_output() {
    let exec = executor();
    let host = Host::new();
    let (spawned, run) = exec
        .spawn_on_host_loop(
            &host.host,
            &spawn_of(&exec, "echo out; echo err >&2; exit 3", 500),
        )
        .unwrap();
    assert!(!spawned.process.is_settled() || spawned.process.exit_code() == Some(3));
    let (r, sleeps) = host.drive(run, Duration::from_secs(30));
    r.unwrap();
    assert!(sleeps > 0, "the host slept until the supervisor reported");
    let p = &spawned.process;
    assert!(p.is_settled(), "settled once its supervision is ready");
    assert_eq!(p.exit_code(), Some(3));
    assert_eq!(p.read_from(OutputStream::Stdout, 0).text, "out\n");
    assert_eq!(p.read_from(OutputStream::Stderr, 0).text, "err\n");
}

#[test]
fn a_spawn_on_the_hosts_loop_learns_its_pid_when_asked_before_or_after_the_exec() {
    let exec = executor();
    let host = Host::new();
    // Asked at once (before the exec, most likely: the spawn does not wait
    // for it), and asked only after the end (written at the exec, kept).
    for ask_first in [true, false] {
        let (spawned, run) = exec
            .spawn_on_host_loop(&host.host, &spawn_of(&exec, "echo $$", 500))
            .unwrap();
        let early = ask_first.then(|| spawned.process.pid());
        let (r, _) = host.drive(run, Duration::from_secs(30));
        r.unwrap();
        let echoed: i32 = spawned
            .process
            .read_from(OutputStream::Stdout, 0)
            .text
            .trim()
            .parse()
            .unwrap();
        assert_eq!(spawned.process.pid(), Some(echoed), "asked first: {ask_first}");
        if let Some(early) = early {
            assert_eq!(early, Some(echoed));
        }
        assert_eq!(spawned.process.exit_code(), Some(0));
    }
}

#[test]
fn a_program_the_kernel_refuses_after_a_host_loop_spawn_ends_its_run_with_the_spawn_error() {
    // Found and executable, so the host's own checks pass; execve says
    // ENOEXEC, which only the supervisor learns, after the spawn returned.
    let dir = temp_dir("enoexec");
    let program = dir.as_ref().join("not-a-program");
    std::fs::write(&program, b"\x00\x01\x02 neither ELF nor a script\n").unwrap();
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let exec = executor();
    let mut spec = exec
        .resolve_spawn(SpawnRequest {
            argv: vec![program.to_string_lossy().into_owned()],
            grace_ms: n(500),
            ..Default::default()
        })
        .unwrap();
    spec.stdout = SpawnOutput::Pipe;
    let waited = exec
        .spawn(&spec)
        .expect_err("the spawn that waits for the exec fails");
    let host = Host::new();
    let (spawned, run) = exec.spawn_on_host_loop(&host.host, &spec).unwrap();
    let (r, _) = host.drive(run, Duration::from_secs(30));
    let e = r.expect_err("its run ends with the start's error");
    assert!(
        matches!(
            e,
            DshError::Spawn {
                errno: libc::ENOEXEC,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        waited.to_string(),
        "the error the waiting spawn gives"
    );
    assert_eq!(spawned.process.pid(), None, "no pid: it did not start");
    assert!(spawned.process.is_settled());
    assert_eq!(spawned.process.exit_code(), None);
    // Nothing collected: the error is the run's, not a line on its stderr
    // (as the seam's provider has it).
    assert_eq!(spawned.process.read_from(OutputStream::Stderr, 0).text, "");
    // Its raw pipe is over: nothing holds the other end.
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut std::fs::File::from(spawned.stdout.unwrap()), &mut rest).unwrap();
    assert!(rest.is_empty());
}

#[test]
fn a_spawn_that_writes_stdin_bytes_is_watched_by_the_cores_threads() {
    let exec = executor();
    let host = Host::new();
    let mut spec = spawn_of(&exec, "cat", 500);
    spec.stdin = SpawnStdin::Bytes(b"fed\n".to_vec());
    let (spawned, run) = exec.spawn_on_host_loop(&host.host, &spec).unwrap();
    // Settles without the host's loop (the bytes go out from a core thread).
    assert!(spawned
        .process
        .wait_timeout(Some(Duration::from_secs(30)))
        .unwrap());
    let (r, _) = host.drive(run, Duration::from_secs(30));
    r.unwrap();
    assert_eq!(spawned.process.read_from(OutputStream::Stdout, 0).text, "fed\n");
}

#[test]
fn terminate_escalates_on_time_though_the_host_does_not_poll() {
    // The grace is kept by the core's runtime: its SIGKILL must not wait
    // for a host thread that is busy elsewhere.
    let exec = executor();
    let host = Host::new();
    let (spawned, mut run) = exec
        .spawn_on_host_loop(
            &host.host,
            &spawn_of(&exec, "trap '' TERM; echo ready; exec sleep 30", 300),
        )
        .unwrap();
    let waker = Waker::from(host.waker.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(
        eventually(Duration::from_secs(20), || {
            host.host.dispatch().unwrap();
            assert!(host.host.poll(&mut run, &mut cx).is_pending());
            spawned.process.read_from(OutputStream::Stdout, 0).text == "ready\n"
        }),
        "the program started"
    );
    spawned.process.terminate().unwrap();
    // The host is busy: no dispatch, no poll.
    assert!(
        eventually(Duration::from_secs(10), || dead_or_zombie(
            spawned.process.pid().unwrap()
        )),
        "the program outlived its grace while the host did not poll"
    );
    let (r, _) = host.drive(run, Duration::from_secs(30));
    r.unwrap();
    assert_eq!(spawned.process.signal().as_deref(), Some("SIGKILL"));
}

#[test]
fn a_spawn_whose_host_run_is_dropped_unfinished_is_ended_with_its_tree() {
    let exec = executor();
    let host = Host::new();
    let (spawned, mut run) = exec
        .spawn_on_host_loop(&host.host, &spawn_of(&exec, "sleep 30 & echo $!; wait", 300))
        .unwrap();
    let waker = Waker::from(host.waker.clone());
    let mut cx = Context::from_waker(&waker);
    let mut child = 0;
    assert!(eventually(Duration::from_secs(20), || {
        host.host.dispatch().unwrap();
        assert!(host.host.poll(&mut run, &mut cx).is_pending());
        let text = spawned.process.read_from(OutputStream::Stdout, 0).text;
        child = if text.is_empty() { 0 } else { first_pid(&text) };
        child > 0
    }));
    // The host's environment goes away with the program running.
    drop(run);
    assert!(spawned.process.is_settled(), "the drop waited for the end");
    assert_eq!(spawned.process.signal().as_deref(), Some("SIGTERM"));
    assert!(
        eventually(Duration::from_secs(10), || !alive(child)),
        "the tree was ended"
    );
}

/// A terminal session whose task is the test's to start.
fn terminal_task(exec: &Executor, request: TerminalRequest) -> (Terminal, TerminalTask) {
    exec.spawn_terminal_task(&exec.resolve_terminal(request).unwrap())
        .unwrap()
}

/// Records on which threads the terminal's output news came, and wakes the
/// host's loop with each, as Node's driver does.
fn news_on(term: &Terminal, host: &Host) -> Arc<std::sync::Mutex<Vec<std::thread::ThreadId>>> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (record, waker) = (seen.clone(), host.waker.clone());
    term.set_output_news(Arc::new(move || {
        record.lock().unwrap().push(std::thread::current().id());
        waker.wake_by_ref();
    }));
    seen
}

#[test]
fn a_terminal_on_the_hosts_loop_is_read_on_the_hosts_thread() {
    let exec = executor();
    let host = Host::new();
    let (term, task) = terminal_task(
        &exec,
        TerminalRequest::command("stty raw -echo; echo ready; exec cat"),
    );
    let news = news_on(&term, &host);
    let mut run = task.on_host_loop(&host.host);
    let mut seen = String::new();
    let take = |seen: &mut String| seen.push_str(&term.read_output().text);
    assert!(host
        .drive_until(&mut run, Duration::from_secs(20), || {
            take(&mut seen);
            seen.contains("ready")
        })
        .is_none());
    // Keystrokes come back, each one read on this thread as it wakes.
    for i in 0..50 {
        let key = format!("k{i}.");
        term.write_now(key.clone()).unwrap();
        assert!(host
            .drive_until(&mut run, Duration::from_secs(20), || {
                take(&mut seen);
                seen.contains(&key)
            })
            .is_none());
    }
    let here = std::thread::current().id();
    let news = news.lock().unwrap().clone();
    assert!(news.len() >= 50, "output news came {} times", news.len());
    assert!(
        news.iter().all(|t| *t == here),
        "output was read off the host's thread"
    );
    exec.dispose_blocking().unwrap();
    let (r, _) = host.drive(run, Duration::from_secs(20));
    r.unwrap();
    assert!(term.read_output_timeout(Some(Duration::ZERO)).unwrap().ended || term.output_ended());
}

#[test]
fn output_a_core_thread_reads_for_a_full_terminal_is_announced_in_order() {
    // A small output buffer: the session stops reading while it is full,
    // and the reader's room is answered by a core thread's poll, which
    // reads the rest; its news must reach the host, or the host waits
    // forever.
    let exec = executor_with(|c| c.max_output_bytes = Some(Num(4096.0)));
    let host = Host::new();
    // The program then waits: nothing but the news can wake the host for
    // the last of its output.
    let (term, task) = terminal_task(
        &exec,
        TerminalRequest::command("seq 1 20000; echo end; exec sleep 60"),
    );
    let news = news_on(&term, &host);
    let mut run = task.on_host_loop(&host.host);
    let mut text = String::new();
    let ended = host.drive_until(&mut run, Duration::from_secs(20), || {
        text.push_str(&term.read_output().text);
        text.contains("end")
    });
    assert!(ended.is_none(), "the session ended early");
    let text = text.replace("end", "");
    let numbers: Vec<&str> = text.split_whitespace().collect();
    let expected: Vec<String> = (1..=20000).map(|i| i.to_string()).collect();
    assert_eq!(numbers, expected.iter().map(String::as_str).collect::<Vec<_>>());
    let here = std::thread::current().id();
    assert!(
        news.lock().unwrap().iter().any(|t| *t != here),
        "no output was read by a core thread: the test did not fill the buffer"
    );
    exec.dispose_blocking().unwrap();
    let (r, _) = host.drive(run, Duration::from_secs(20));
    r.unwrap();
}

#[test]
fn a_terminal_whose_host_run_is_dropped_unfinished_is_ended() {
    let exec = executor();
    let host = Host::new();
    let (term, task) = terminal_task(&exec, TerminalRequest::command("sleep 30 & echo $!; wait"));
    let mut run = task.on_host_loop(&host.host);
    let mut text = String::new();
    assert!(host
        .drive_until(&mut run, Duration::from_secs(20), || {
            text.push_str(&term.read_output().text);
            text.contains('\n')
        })
        .is_none());
    let child = first_pid(&text);
    // The host's environment goes away with the session running.
    drop(run);
    assert!(term.has_exited(), "the drop waited for the end");
    assert!(
        eventually(Duration::from_secs(10), || !alive(child)),
        "the session's tree was ended"
    );
}

#[test]
fn terminate_ends_a_terminal_on_the_hosts_loop_though_the_host_does_not_poll() {
    // The grace and the SIGKILL are kept by the core's runtime.
    let exec = executor();
    let host = Host::new();
    let mut request = TerminalRequest::command("trap '' HUP TERM; echo ready; exec sleep 30");
    request.grace_ms = Some(Num(300.0));
    let (term, task) = terminal_task(&exec, request);
    let mut run = task.on_host_loop(&host.host);
    let mut text = String::new();
    assert!(host
        .drive_until(&mut run, Duration::from_secs(20), || {
            text.push_str(&term.read_output().text);
            text.contains("ready")
        })
        .is_none());
    let pid = term.pid();
    let (tx, rx) = std::sync::mpsc::channel();
    term.terminate_with(move |n| tx.send(n).unwrap());
    // The host is busy: no dispatch, no poll.
    assert!(
        eventually(Duration::from_secs(10), || dead_or_zombie(pid)),
        "the session outlived its grace while the host did not poll"
    );
    let (r, _) = host.drive(run, Duration::from_secs(30));
    r.unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 0);
    assert_eq!(term.signal().as_deref(), Some("SIGKILL"));
}

#[test]
fn a_terminal_stopped_while_the_host_is_busy_past_the_give_up_keeps_its_exit_and_last_output() {
    // The host's thread goes busy for longer than the grace plus the
    // give-up bound: the exit report and the TERM trap's output wait
    // unread for the host's loop, and the core thread that answers the
    // stop must read them itself, not give up on the leader.
    let exec = executor();
    let host = Host::new();
    let mut request = TerminalRequest::command(
        "trap 'echo bye; exit 3' HUP TERM; echo ready; while :; do sleep 0.05; done",
    );
    request.grace_ms = Some(Num(300.0));
    let (term, task) = terminal_task(&exec, request);
    let mut run = task.on_host_loop(&host.host);
    let mut text = String::new();
    assert!(host
        .drive_until(&mut run, Duration::from_secs(20), || {
            text.push_str(&term.read_output().text);
            text.contains("ready")
        })
        .is_none());
    let (tx, rx) = std::sync::mpsc::channel();
    term.terminate_with(move |n| tx.send(n).unwrap());
    // Busy: no dispatch, no poll, for longer than grace + KILL_GIVE_UP.
    std::thread::sleep(Duration::from_millis(300) + KILL_GIVE_UP + Duration::from_secs(1));
    let (r, _) = host.drive(run, Duration::from_secs(30));
    r.unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 0);
    loop {
        let read = term.read_output();
        text.push_str(&read.text);
        if read.ended {
            break;
        }
    }
    assert!(!term.exit_status_unavailable(), "the exit was given up on");
    assert_eq!(term.exit_code(), Some(3));
    assert!(text.contains("bye"), "the trap's output was lost: {text:?}");
}

#[test]
fn a_write_to_a_terminal_on_the_hosts_loop_goes_on_while_the_program_reads_silently() {
    // The program prints nothing while it reads: only the terminal's room
    // for more input can wake the host to write the rest.
    let exec = executor();
    let host = Host::new();
    let (term, task) = terminal_task(
        &exec,
        TerminalRequest::command("stty raw -echo; echo ready; head -c 200000 >/dev/null; echo took-all"),
    );
    let mut run = task.on_host_loop(&host.host);
    let mut text = String::new();
    assert!(host
        .drive_until(&mut run, Duration::from_secs(20), || {
            text.push_str(&term.read_output().text);
            text.contains("ready")
        })
        .is_none());
    let pending = term.write_now(vec![b'x'; 200_000]).unwrap();
    assert!(
        pending.is_some(),
        "the terminal took it all at once: the test wrote too little"
    );
    // It says so and exits by itself: the session may end in the very poll
    // that reads its last words.
    let ended = host.drive_until(&mut run, Duration::from_secs(20), || {
        text.push_str(&term.read_output().text);
        text.contains("took-all")
    });
    match ended {
        Some(r) => r.unwrap(),
        None => host.drive(run, Duration::from_secs(20)).0.unwrap(),
    }
    text.push_str(&term.read_output().text);
    assert!(text.contains("took-all"), "{text:?}");
    assert_eq!(term.exit_code(), Some(0));
}

#[test]
fn a_dispose_before_the_hosts_first_poll_sends_one_sigterm() {
    // The dispose's sweep leaves a command's group to its supervision from
    // the launch on, not only once the host first polls it: else the
    // command gets the sweep's SIGTERM and then its own stop's.
    let exec = executor();
    let host = Host::new();
    let dir = temp_dir("host-loop-one-term");
    let (terms, ready) = (dir.join("terms"), dir.join("ready"));
    let script = format!(
        "trap 'echo T >> {t}' TERM; touch {r}; while :; do sleep 0.01; done",
        t = terms.display(),
        r = ready.display()
    );
    let (spawned, run) = exec
        .spawn_on_host_loop(&host.host, &spawn_of(&exec, &script, 3000))
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || ready.exists()),
        "the program started"
    );
    let disposed = dispose_past_its_sweep(&exec, &dir);
    // Nothing has polled the run: nothing may have signalled the program
    // yet (two SIGTERMs close together can merge into one trap).
    assert!(
        !eventually(Duration::from_millis(300), || terms.exists()),
        "the sweep signalled the program before its supervision ran"
    );
    let (r, _) = host.drive(run, Duration::from_secs(30));
    r.unwrap();
    disposed
        .recv_timeout(Duration::from_secs(30))
        .expect("dispose completes");
    assert_eq!(spawned.process.signal().as_deref(), Some("SIGKILL"));
    let got = std::fs::read_to_string(&terms).unwrap_or_default();
    assert_eq!(got, "T\n", "SIGTERMs the program got (one line each)");
}

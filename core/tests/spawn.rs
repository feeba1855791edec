//! Spawned programs (docs/spawn.md): argv never given to a shell, a
//! disposition per stream, offset reads, and a tree that outlives its
//! leader until terminate() or dispose ends it.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use common::{alive, eventually, executor, first_pid, temp_dir};
use dsh_core::{
    DshError, Executor, Limits, OutputStream, Process, SpawnFailure, SpawnOutput, SpawnSpec, SpawnStdin,
};

const LONG: Duration = Duration::from_secs(20);

fn collect(max_bytes: u64, spill: Option<u64>) -> SpawnOutput {
    SpawnOutput::Collect {
        max_bytes,
        spill_max_bytes: spill,
    }
}

fn spawn_spec(argv: &[&str]) -> SpawnSpec {
    SpawnSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: std::env::current_dir().unwrap(),
        env: BTreeMap::new(),
        stdin: SpawnStdin::Null,
        stdout: collect(1 << 20, Some(1 << 30)),
        stderr: collect(1 << 20, Some(1 << 30)),
        grace_ms: 500,
        sandbox_policy: None,
        limits: Limits::default(),
        timeout_ms: None,
    }
}

fn sh(script: &str) -> SpawnSpec {
    spawn_spec(&["bash", "-c", script])
}

fn settle(p: &Process) {
    assert!(p.wait_timeout(Some(LONG)).unwrap(), "the program did not settle");
}

fn stdout_of(p: &Process) -> String {
    p.read_from(OutputStream::Stdout, 0).text
}

#[test]
fn argv_is_never_given_to_a_shell() {
    let exec = executor();
    let s = exec
        .spawn(&spawn_spec(&["printf", "%s|", "$HOME", "a; echo b", "*"]))
        .unwrap();
    settle(&s.process);
    assert_eq!(stdout_of(&s.process), "$HOME|a; echo b|*|");
    assert_eq!(s.process.exit_code(), Some(0));
    assert_eq!(s.process.pid(), Some(s.exec_pid().unwrap()));
    assert!(s.exec_pid().unwrap() > 0);
}

#[test]
fn exit_facts_are_the_programs_own() {
    let exec = executor();
    let s = exec.spawn(&sh("exit 7")).unwrap();
    settle(&s.process);
    assert_eq!((s.process.exit_code(), s.process.signal()), (Some(7), None));
    let s = exec.spawn(&sh("kill -TERM $$")).unwrap();
    settle(&s.process);
    assert_eq!(s.process.exit_code(), None);
    assert_eq!(s.process.signal().as_deref(), Some("SIGTERM"));
}

#[test]
fn a_program_that_cannot_start_is_an_error_and_nothing_runs() {
    let exec = executor();
    match exec.spawn(&spawn_spec(&["no-such-program-dsh"])) {
        Err(DshError::Spawn { kind, errno, message }) => {
            assert_eq!((kind, errno), (SpawnFailure::NoProgram, libc::ENOENT));
            assert!(message.contains("no-such-program-dsh"), "{message}");
        }
        other => panic!("expected a spawn error, got {other:?}"),
    }
    let mut spec = spawn_spec(&["true"]);
    spec.cwd = PathBuf::from("/no/such/dir/dsh");
    match exec.spawn(&spec) {
        Err(DshError::Spawn { kind, .. }) => assert_eq!(kind, SpawnFailure::Workdir),
        other => panic!("expected a workdir error, got {other:?}"),
    }
    // Not executable: the exec itself fails.
    let dir = temp_dir("spawn-noexec");
    let file = dir.join("script");
    std::fs::write(&file, "#!/bin/sh\necho hi\n").unwrap();
    match exec.spawn(&spawn_spec(&[file.to_str().unwrap()])) {
        Err(DshError::Spawn { errno, .. }) => assert_eq!(errno, libc::EACCES),
        other => panic!("expected EACCES, got {other:?}"),
    }
}

#[test]
fn bad_specs_name_the_field() {
    let exec = executor();
    let field_of = |spec: &SpawnSpec| match exec.spawn(spec) {
        Err(DshError::InvalidArgument { field, .. }) => field.path(dsh_core::NameStyle::Camel),
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    assert_eq!(field_of(&spawn_spec(&[])), "spawn.argv");
    assert_eq!(field_of(&spawn_spec(&[""])), "spawn.argv");
    assert_eq!(field_of(&spawn_spec(&["echo", "a\0b"])), "spawn.argv");
    let mut spec = spawn_spec(&["true"]);
    spec.cwd = PathBuf::from("relative");
    assert_eq!(field_of(&spec), "spawn.cwd");
    let mut spec = spawn_spec(&["true"]);
    spec.grace_ms = 0;
    assert_eq!(field_of(&spec), "spawn.graceMs");
    let mut spec = spawn_spec(&["true"]);
    spec.env.insert("A=B".into(), Some("x".into()));
    assert_eq!(field_of(&spec), "spawn.env");
    let mut spec = spawn_spec(&["true"]);
    spec.stdout = collect(1 << 60, None);
    assert_eq!(field_of(&spec), "spawn.stdout");
}

#[test]
fn the_environment_is_the_scrubbed_host_with_the_specs_changes() {
    let exec = executor();
    // Set before any thread of this test binary reads the environment.
    std::env::set_var("DSH_SPAWN_TEST_TOKEN", "secret");
    std::env::set_var("SPAWN_TEST_PLAIN", "plain");
    std::env::set_var("SPAWN_TEST_REMOVED", "x");
    let mut spec = spawn_spec(&["env"]);
    spec.env.insert("SPAWN_TEST_REMOVED".into(), None);
    spec.env.insert("MY_API_KEY".into(), Some("given".into()));
    let s = exec.spawn(&spec).unwrap();
    settle(&s.process);
    let out = stdout_of(&s.process);
    let vars: BTreeMap<&str, &str> = out.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(vars.get("SPAWN_TEST_PLAIN"), Some(&"plain"));
    assert_eq!(
        vars.get("MY_API_KEY"),
        Some(&"given"),
        "a variable the spec gives is kept"
    );
    assert!(
        !vars.contains_key("SPAWN_TEST_REMOVED"),
        "None removes an inherited variable"
    );
    assert!(
        !vars.contains_key("DSH_SPAWN_TEST_TOKEN"),
        "the host's credentials are scrubbed"
    );
    // Nothing is forced on a program (a command gets NO_COLOR, PAGER, ...).
    if std::env::var_os("NO_COLOR").is_none() {
        assert!(!vars.contains_key("NO_COLOR"));
    }
}

#[test]
fn offset_reads_do_not_consume_and_report_what_slid_out() {
    let exec = executor();
    let mut spec = sh("for i in $(seq 1 2000); do echo line-$i; done");
    spec.stdout = collect(1000, Some(1 << 20));
    let s = exec.spawn(&spec).unwrap();
    settle(&s.process);
    let first = s.process.read_from(OutputStream::Stdout, 0);
    let again = s.process.read_from(OutputStream::Stdout, 0);
    assert_eq!(first, again, "a read consumes nothing");
    assert!(first.lossy);
    assert!(first.text.ends_with("line-2000\n"));
    assert!(first.text.len() <= 1000);
    let total: usize = (1..=2000).map(|i| format!("line-{i}\n").len()).sum();
    assert_eq!(first.next_offset, total as u64);
    let spill = std::fs::read_to_string(first.spill_path.expect("a spill file")).unwrap();
    assert_eq!(spill.len(), total);
    assert!(spill.starts_with("line-1\nline-2\n"));
    // From inside the window: exactly the rest, not lossy.
    let tail = s.process.read_from(OutputStream::Stdout, total as u64 - 10);
    assert_eq!((tail.text.as_str(), tail.lossy), ("line-2000\n", false));
    let end = s.process.read_from(OutputStream::Stdout, total as u64);
    assert_eq!((end.text.as_str(), end.next_offset), ("", total as u64));
}

#[test]
fn without_a_spill_only_the_window_is_kept_and_a_passed_cap_deletes_the_file() {
    let exec = executor();
    let mut spec = sh("head -c 5000 /dev/zero | tr '\\0' a; head -c 5000 /dev/zero | tr '\\0' b >&2");
    spec.stdout = collect(100, None);
    spec.stderr = collect(100, Some(1000));
    let s = exec.spawn(&spec).unwrap();
    settle(&s.process);
    let out = s.process.read_from(OutputStream::Stdout, 0);
    assert_eq!(
        (out.text.len(), out.lossy, out.spill_path.clone()),
        (100, true, None)
    );
    assert_eq!(out.spill_error, None, "no spill was asked for: no error either");
    let err = s.process.read_from(OutputStream::Stderr, 0);
    assert_eq!(err.spill_path, None);
    assert!(err.spill_error.unwrap().contains("1000"));
    assert_eq!(err.text, "b".repeat(100));
}

#[test]
fn a_read_while_the_stream_is_open_never_ends_inside_a_character() {
    let exec = executor();
    let dir = temp_dir("spawn-utf8");
    let go = dir.join("go");
    // "é" is C3 A9: the first byte now, the second after the test says go.
    let script = format!(
        "printf 'a\\303'; while [ ! -e {} ]; do sleep 0.01; done; printf '\\251b'",
        go.display()
    );
    let s = exec.spawn(&sh(&script)).unwrap();
    assert!(eventually(LONG, || s
        .process
        .read_from(OutputStream::Stdout, 0)
        .next_offset
        >= 1));
    std::thread::sleep(Duration::from_millis(100));
    let early = s.process.read_from(OutputStream::Stdout, 0);
    assert_eq!((early.text.as_str(), early.next_offset), ("a", 1));
    std::fs::write(&go, "").unwrap();
    settle(&s.process);
    let late = s.process.read_from(OutputStream::Stdout, early.next_offset);
    assert_eq!((late.text.as_str(), late.next_offset), ("éb", 4));
}

/// An offset inside a character (a reader's own arithmetic, or the start
/// of a window that slid) reads from the next whole character, never a
/// replacement character for the half it would split.
#[test]
fn a_read_from_inside_a_character_starts_at_the_next_one() {
    let exec = executor();
    let s = exec
        .spawn(&sh("printf 'h\\303\\251llo \\360\\237\\230\\200!'"))
        .unwrap();
    settle(&s.process);
    // h=0, é=1..3, llo=3..6, space=6, 😀=7..11, !=11
    for (from, text, next) in [
        (0, "héllo 😀!", 12),
        (2, "llo 😀!", 12),
        (8, "!", 12),
        (10, "!", 12),
    ] {
        let r = s.process.read_from(OutputStream::Stdout, from);
        assert_eq!((r.text.as_str(), r.next_offset), (text, next), "from {from}");
    }
    // A window that slid to mid-character: reading from before it starts
    // at its first whole character.
    let mut spec = sh("printf 'ab\\303\\251cd'");
    spec.stdout = collect(3, None); // keeps the last 3 bytes: "\\251cd"
    let s = exec.spawn(&spec).unwrap();
    settle(&s.process);
    let r = s.process.read_from(OutputStream::Stdout, 0);
    assert!(r.lossy);
    assert!(!r.text.contains('\u{fffd}'), "{:?}", r.text);
    assert_eq!((r.text.as_str(), r.next_offset), ("cd", 6));
    // Bytes that are not UTF-8 at all (Latin-1 °, ±) are not the rest of
    // a character: a read from them decodes them as one from 0 does.
    let s = exec.spawn(&sh("printf '25\\260C \\261\\2611\\260'")).unwrap();
    settle(&s.process);
    let whole = s.process.read_from(OutputStream::Stdout, 0).text;
    assert_eq!(whole, "25\u{fffd}C \u{fffd}\u{fffd}1\u{fffd}");
    for from in [2, 5, 6, 8] {
        let r = s.process.read_from(OutputStream::Stdout, from);
        assert!(
            whole.ends_with(&r.text) && r.text.starts_with('\u{fffd}'),
            "from {from}: {:?}",
            r.text
        );
    }
}

#[test]
fn piped_streams_are_handed_over_raw() {
    let exec = executor();
    let mut spec = spawn_spec(&["cat"]);
    spec.stdin = SpawnStdin::Pipe;
    spec.stdout = SpawnOutput::Pipe;
    spec.stderr = SpawnOutput::Pipe;
    let s = exec.spawn(&spec).unwrap();
    let mut stdin = std::fs::File::from(s.stdin.expect("a stdin pipe"));
    let mut stdout = std::fs::File::from(s.stdout.expect("a stdout pipe"));
    let stderr = std::fs::File::from(s.stderr.expect("a stderr pipe"));
    let bytes: Vec<u8> = (0..=255u8).cycle().take(3 << 20).collect();
    let writer = {
        let bytes = bytes.clone();
        std::thread::spawn(move || {
            stdin.write_all(&bytes).unwrap();
        })
    };
    let mut got = Vec::new();
    stdout.read_to_end(&mut got).unwrap();
    writer.join().unwrap();
    assert!(got == bytes, "3 MiB of binary through raw pipes, byte for byte");
    settle(&s.process);
    assert_eq!(s.process.exit_code(), Some(0));
    assert_eq!(
        s.process.read_from(OutputStream::Stdout, 0).text,
        "",
        "a piped stream is not kept"
    );
    drop(stderr);
}

#[test]
fn stdin_bytes_are_written_then_closed() {
    let exec = executor();
    let mut spec = spawn_spec(&["wc", "-c"]);
    spec.stdin = SpawnStdin::Bytes(vec![b'x'; 200_000]);
    let s = exec.spawn(&spec).unwrap();
    settle(&s.process);
    assert_eq!(stdout_of(&s.process).trim(), "200000");
}

/// A program that leaves a grandchild in a session of its own behind.
fn leaves_a_setsid_grandchild(exec: &Executor) -> (Process, i32) {
    let s = exec
        .spawn(&sh("setsid sleep 300 >/dev/null 2>&1 & echo $!; exit 0"))
        .unwrap();
    settle(&s.process);
    let text = stdout_of(&s.process);
    let child = first_pid(&text);
    // `$!` is the setsid process, which execs sleep in place.
    assert!(eventually(LONG, || alive(child)));
    (s.process, child)
}

#[test]
fn the_leaders_exit_does_not_end_the_tree_and_the_wait_sees_the_whole_tree() {
    let exec = executor();
    let (process, grandchild) = leaves_a_setsid_grandchild(&exec);
    assert_eq!(process.exit_code(), Some(0));
    std::thread::sleep(Duration::from_millis(200));
    assert!(alive(grandchild), "the leader's exit ended its tree");
    assert!(
        !process.tree_gone(),
        "the tree is reported gone while a member lives"
    );
    // SAFETY: kill(2) takes integers; the grandchild was seen alive just above.
    unsafe { libc::kill(grandchild, libc::SIGKILL) };
    assert!(eventually(LONG, || process.tree_gone()));
}

/// Nothing left behind (the supervisor saw no member of the tree at the
/// leader's exit): the tree is known over when the program settles, with
/// no wait for a census, whether it exited or was killed.
#[test]
fn a_tree_with_nothing_left_is_known_over_when_the_program_settles() {
    let exec = executor();
    for argv in [&["true"][..], &["sh", "-c", "exit 3"]] {
        let s = exec.spawn(&spawn_spec(argv)).unwrap();
        settle(&s.process);
        assert!(
            s.process.tree_gone(),
            "{argv:?}: not known over at its settlement"
        );
    }
    let s = exec.spawn(&spawn_spec(&["sleep", "300"])).unwrap();
    s.process.terminate().unwrap();
    settle(&s.process);
    assert_eq!(s.process.signal().as_deref(), Some("SIGTERM"));
    assert!(
        s.process.tree_gone(),
        "a terminated sleep: not known over at its settlement"
    );
}

/// The tree's end comes after the program's settlement, never before:
/// whoever waited for the tree finds the exit facts there. A large
/// collected stderr makes the settlement's own work long (tried a few
/// times: the order must hold every time).
#[test]
fn a_wait_for_the_tree_finds_the_program_settled() {
    let exec = executor();
    for _ in 0..5 {
        let mut spec = sh("head -c 8000000 /dev/zero >&2");
        spec.stderr = collect(16 << 20, None);
        let s = exec.spawn(&spec).unwrap();
        assert!(s.process.wait_tree_timeout(Some(LONG)).unwrap());
        assert_eq!(
            s.process.exit_code(),
            Some(0),
            "the tree ended before the program settled"
        );
    }
}

/// CPU time of this test process so far (every thread, the executor's
/// included).
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct it is given; zeroed is a valid start.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
    let tv =
        |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Waiting for trees whose leftovers run on costs next to nothing: the
/// wait is for their members' ends, not a scan of every process again and
/// again (it was a /proc scan per tree every 15 ms: about a core for 20).
#[test]
fn waiting_for_trees_that_run_on_does_not_burn_the_cpu() {
    // Measured in a host of its own: this process's CPU time counts the
    // other tests' threads too.
    if !common::in_own_host("waiting_for_trees_that_run_on_does_not_burn_the_cpu") {
        return;
    }
    let exec = executor();
    let trees: Vec<(Process, i32)> = (0..20).map(|_| leaves_a_setsid_grandchild(&exec)).collect();
    let waits: Vec<_> = trees
        .iter()
        .map(|(p, _)| p.when_tree_gone(|| {}).unwrap())
        .collect();
    assert!(trees.iter().all(|(p, _)| !p.tree_gone()));
    std::thread::sleep(Duration::from_millis(300)); // the watchers' first census
    let (cpu, wall) = (cpu_time(), std::time::Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_time() - cpu;
    assert!(
        used < wall.elapsed() / 10,
        "waiting for 20 trees used {used:?} of CPU in {:?}",
        wall.elapsed()
    );
    // And the waits still see each tree end.
    for (p, grandchild) in &trees {
        // SAFETY: kill(2) takes integers; the grandchild was seen alive.
        unsafe { libc::kill(*grandchild, libc::SIGKILL) };
        assert!(
            p.wait_tree_timeout(Some(LONG)).unwrap(),
            "the end of a tree was not seen"
        );
    }
    drop(waits);
}

/// A host out of descriptors cannot look at its trees: the wait for a
/// tree's end must then go on waiting, never report a live tree gone.
#[test]
fn a_tree_is_not_gone_because_descriptors_ran_out() {
    if !common::in_own_host("a_tree_is_not_gone_because_descriptors_ran_out") {
        return;
    }
    let exec = executor();
    let (process, grandchild) = leaves_a_setsid_grandchild(&exec);
    assert!(!process.tree_gone());
    // No descriptor to spare from here on.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
    let saved = limit;
    // The limit is on descriptor numbers: below the lowest free one, none.
    // SAFETY: F_GETFD only reads a descriptor's flags.
    let lowest_free = (0..)
        .find(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1)
        .unwrap();
    limit.rlim_cur = lowest_free as libc::rlim_t;
    // SAFETY: setrlimit reads the struct; lowering the soft limit is allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    let gone_while_starved = process.wait_tree_timeout(Some(Duration::from_secs(3))).unwrap();
    // SAFETY: as above, back to what it was.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &saved) }, 0);
    assert!(alive(grandchild));
    assert!(
        !gone_while_starved,
        "a live tree was reported gone for want of descriptors"
    );
    // SAFETY: kill(2) takes integers; the grandchild was seen alive.
    unsafe { libc::kill(grandchild, libc::SIGKILL) };
    assert!(
        process.wait_tree_timeout(Some(LONG)).unwrap(),
        "its end was not seen"
    );
}

#[test]
fn terminate_after_the_leaders_exit_ends_what_it_left_behind() {
    let exec = executor();
    let (process, grandchild) = leaves_a_setsid_grandchild(&exec);
    process.terminate().unwrap();
    assert!(
        eventually(LONG, || !alive(grandchild)),
        "terminate left a setsid member running"
    );
    assert!(eventually(LONG, || process.tree_gone()));
    process.terminate().unwrap(); // idempotent, nothing left to do
}

/// A terminate that comes as the leader exits (after its exit, before the
/// handle settled) still reaches what it left behind.
#[test]
fn terminate_racing_the_leaders_exit_still_ends_the_tree() {
    let exec = executor();
    for round in 0..60 {
        let mut spec = sh("sleep 300 </dev/null >/dev/null 2>&1 & echo $!; exit 0");
        spec.stdout = SpawnOutput::Pipe;
        spec.stderr = SpawnOutput::Pipe;
        spec.grace_ms = 200;
        let s = exec.spawn(&spec).unwrap();
        let leader = s.exec_pid().unwrap();
        let mut line = String::new();
        std::fs::File::from(s.stdout.unwrap())
            .read_to_string(&mut line)
            .unwrap();
        let child = first_pid(&line);
        // The leader is a zombie (exited, unreaped): the window in which
        // the handle has not settled yet.
        assert!(eventually(LONG, || !alive(leader)));
        s.process.terminate().unwrap();
        let gone = s.process.wait_tree_timeout(Some(LONG)).unwrap();
        if !gone {
            // SAFETY: kill(2) takes integers; clean up before failing.
            unsafe { libc::kill(child, libc::SIGKILL) };
        }
        assert!(
            gone,
            "round {round}: terminate at the leader's exit left its child running"
        );
        assert_eq!(
            s.process.exit_code(),
            Some(0),
            "round {round}: the leader's own exit"
        );
    }
}

/// `kill()` then `terminate()`: the second finds the stop under way and
/// adds nothing (a TERM trap runs once).
#[test]
fn terminate_after_kill_sends_no_second_sigterm() {
    let exec = executor();
    let mut spec = sh("trap 'echo T' TERM; echo R; while :; do :; done");
    spec.grace_ms = 300;
    let s = exec.spawn(&spec).unwrap();
    assert!(eventually(LONG, || stdout_of(&s.process).contains('R')));
    assert!(s.process.kill());
    s.process.terminate().unwrap();
    settle(&s.process);
    assert_eq!(
        stdout_of(&s.process).matches('T').count(),
        1,
        "{:?}",
        stdout_of(&s.process)
    );
}

#[test]
fn terminate_escalates_to_sigkill_after_the_grace() {
    let exec = executor();
    let mut spec = sh("trap 'echo term' TERM; echo ready; while :; do sleep 0.05; done");
    spec.grace_ms = 300;
    let s = exec.spawn(&spec).unwrap();
    assert!(eventually(LONG, || stdout_of(&s.process).contains("ready")));
    let t = std::time::Instant::now();
    s.process.terminate().unwrap();
    settle(&s.process);
    assert!(stdout_of(&s.process).contains("term"), "the TERM trap ran");
    assert_eq!(s.process.signal().as_deref(), Some("SIGKILL"));
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert!(s.process.tree_gone() || eventually(LONG, || s.process.tree_gone()));
}

/// A spawn with a timeout is stopped as a command is at its own: SIGTERM
/// (its trap runs), SIGKILL after the grace, and the handle says it timed
/// out; one that ends in time says it did not.
#[test]
fn a_spawn_timeout_stops_the_tree_and_says_so() {
    let exec = executor();
    let mut spec = sh("trap 'echo term; exit 143' TERM; echo ready; while :; do sleep 0.05; done");
    spec.timeout_ms = Some(300);
    spec.grace_ms = 2000;
    let s = exec.spawn(&spec).unwrap();
    settle(&s.process);
    assert!(stdout_of(&s.process).contains("term"), "the TERM trap ran");
    assert_eq!(s.process.exit_code(), Some(143));
    assert!(s.process.timed_out());
    let mut quick = sh("exit 3");
    quick.timeout_ms = Some(20_000);
    let s = exec.spawn(&quick).unwrap();
    settle(&s.process);
    assert_eq!((s.process.exit_code(), s.process.timed_out()), (Some(3), false));
    // Checked as a command's: not above the executor's max_timeout_ms.
    let mut long = sh("true");
    long.timeout_ms = Some(u64::MAX);
    match exec.spawn(&long) {
        Err(DshError::InvalidArgument { field, .. }) => {
            assert_eq!(field.path(dsh_core::NameStyle::Snake), "spawn.timeout_ms")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn dispose_ends_every_spawned_tree() {
    let exec = executor();
    let (process, grandchild) = leaves_a_setsid_grandchild(&exec);
    let running = exec.spawn(&spawn_spec(&["sleep", "300"])).unwrap();
    exec.dispose_blocking().unwrap();
    assert!(running.process.is_settled());
    assert!(!alive(running.exec_pid().unwrap()) || eventually(LONG, || !alive(running.exec_pid().unwrap())));
    assert!(eventually(LONG, || !alive(grandchild)));
    assert!(eventually(LONG, || process.tree_gone()));
    assert!(matches!(
        exec.spawn(&spawn_spec(&["true"])),
        Err(DshError::Disposed)
    ));
}

/// What a program left in a session of its own (re-parented to the
/// supervisor, so it looks like a command's leader) gets dispose's SIGTERM
/// and its grace, not only the SIGKILL after it.
#[test]
fn dispose_gives_a_setsid_leftover_its_sigterm() {
    let exec = executor();
    let dir = temp_dir("spawn-dispose-term");
    let log = dir.join("log");
    let script = format!(
        "setsid bash -c 'trap \"echo TERM >>{log}; exit 0\" TERM; echo $$ >>{log}; while :; do sleep 0.05; done' \
         </dev/null >/dev/null 2>&1 & exit 0",
        log = log.display()
    );
    let s = exec.spawn(&sh(&script)).unwrap();
    settle(&s.process);
    assert!(eventually(LONG, || std::fs::read_to_string(&log)
        .is_ok_and(|t| t.ends_with('\n'))));
    let leftover = first_pid(&std::fs::read_to_string(&log).unwrap());
    assert!(alive(leftover));
    exec.dispose_blocking().unwrap();
    assert!(eventually(LONG, || !alive(leftover)));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("TERM"),
        "the leftover died without its SIGTERM: {text:?}"
    );
}

#[test]
fn a_spawned_program_is_not_in_the_registry() {
    let exec = executor();
    let s = exec.spawn(&spawn_spec(&["true"])).unwrap();
    settle(&s.process);
    assert!(exec.list().is_empty());
}

#[test]
fn resolve_executable_finds_the_first_path_hit_as_named() {
    use std::os::unix::fs::PermissionsExt;
    let exec = executor();
    let dir = temp_dir("spawn-resolve");
    let (first, second) = (dir.join("first"), dir.join("second"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    let real = second.join("tool");
    std::fs::write(&real, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&real, first.join("tool")).unwrap();
    // Not executable: skipped, as execvp would.
    std::fs::write(first.join("plain"), "").unwrap();
    std::fs::write(second.join("plain"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(second.join("plain"), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Entries as a user may write them: with `..`, and relative to the cwd.
    let relative_first = format!(
        "{}/../{}",
        first.display(),
        first.file_name().unwrap().to_str().unwrap()
    );
    let path = format!("{relative_first}:{}/./", second.display());
    let env: BTreeMap<String, Option<String>> = [("PATH".to_string(), Some(path))].into();
    assert_eq!(
        exec.resolve_executable("tool", &env).unwrap(),
        first.join("tool"),
        "the symlink, not its target"
    );
    assert_eq!(
        exec.resolve_executable("plain", &env).unwrap(),
        second.join("plain")
    );
    assert_eq!(
        exec.resolve_executable(real.to_str().unwrap(), &BTreeMap::new())
            .unwrap(),
        real
    );
    match exec.resolve_executable("./tool", &env) {
        Err(DshError::InvalidArgument { field, .. }) => {
            assert_eq!(field.path(dsh_core::NameStyle::Camel), "spawn.command")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    for (missing, says) in [
        ("nowhere-dsh", "was not found on PATH"),
        (first.join("plain").to_str().unwrap(), "is not an executable file"),
    ] {
        match exec.resolve_executable(missing, &env) {
            Err(DshError::Spawn { kind, message, .. }) => {
                assert_eq!(kind, SpawnFailure::NoProgram);
                assert!(message.contains(says), "{message}");
            }
            other => panic!("expected NoProgram for {missing}, got {other:?}"),
        }
    }
    assert!(matches!(
        exec.resolve_executable("", &env),
        Err(DshError::InvalidArgument { problem, .. }) if problem.contains("must name a program")
    ));
}

/// A spawn looks its program up as execvp does in the program's own
/// workdir: a relative PATH entry (an empty one is `.`) is relative to the
/// spawn's cwd, and a name found only without the execute right is EACCES.
#[test]
fn a_spawn_finds_its_program_as_execvp_would_in_its_workdir() {
    use std::os::unix::fs::PermissionsExt;
    let exec = executor();
    let dir = temp_dir("spawn-lookup");
    std::fs::create_dir_all(dir.join("relbin")).unwrap();
    let script = |path: PathBuf, text: &str, mode: u32| {
        std::fs::write(&path, format!("#!/bin/sh\necho {text}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    script(dir.join("relbin").join("in-relbin"), "relbin", 0o755);
    script(dir.join("in-cwd"), "cwd", 0o755);
    script(dir.join("relbin").join("unrunnable"), "never", 0o644);
    let with_path = |name: &str| {
        let mut spec = spawn_spec(&[name]);
        spec.cwd = dir.to_path_buf();
        spec.env
            .insert("PATH".into(), Some(":relbin:/usr/bin:/bin".into()));
        spec
    };
    for (name, says) in [("in-relbin", "relbin\n"), ("in-cwd", "cwd\n")] {
        let s = exec
            .spawn(&with_path(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        settle(&s.process);
        assert_eq!(stdout_of(&s.process), says, "{name}");
    }
    match exec.spawn(&with_path("unrunnable")) {
        Err(DshError::Spawn { kind, errno, message }) => {
            assert_eq!(
                (kind, errno),
                (SpawnFailure::NoProgram, libc::EACCES),
                "{message}"
            );
            assert!(
                message.starts_with("EACCES") && message.contains("unrunnable"),
                "{message}"
            );
        }
        other => panic!("expected EACCES, got {other:?}"),
    }
    match exec.spawn(&with_path("nowhere-dsh")) {
        Err(DshError::Spawn { errno, .. }) => assert_eq!(errno, libc::ENOENT),
        other => panic!("expected ENOENT, got {other:?}"),
    }
}

/// A PATH entry with `..` after a symlink is resolved by the kernel, as
/// execvp leaves it: `link/../bin` is the `bin` beside the link's target.
#[test]
fn a_path_entry_through_a_symlink_is_resolved_as_the_kernel_does() {
    use std::os::unix::fs::PermissionsExt;
    let exec = executor();
    let dir = temp_dir("spawn-lookup-physical");
    for (sub, says) in [("bin", "lexical"), ("real/bin", "physical")] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        let tool = dir.join(sub).join("tool");
        std::fs::write(&tool, format!("#!/bin/sh\necho {says}\n")).unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::create_dir_all(dir.join("real/sub")).unwrap();
    std::os::unix::fs::symlink(dir.join("real/sub"), dir.join("link")).unwrap();
    let mut spec = spawn_spec(&["tool"]);
    spec.env
        .insert("PATH".into(), Some(format!("{}/link/../bin", dir.display())));
    let s = exec.spawn(&spec).unwrap();
    settle(&s.process);
    let sh = std::process::Command::new("/bin/sh")
        .args(["-c", "tool"])
        .env("PATH", format!("{}/link/../bin", dir.display()))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&sh.stdout), "physical\n", "what sh runs");
    assert_eq!(
        stdout_of(&s.process),
        "physical\n",
        "the spawn ran another program than sh would"
    );
}

#[test]
fn a_spawn_request_takes_what_it_leaves_out_from_the_configuration() {
    let dir = temp_dir("spawn-resolve-request");
    let exec = common::executor_with(|c| {
        c.cwd = Some(dir.to_str().unwrap().to_owned());
        c.grace_ms = common::n(1234);
        c.max_output_bytes = common::n(777);
    });
    let spec = exec
        .resolve_spawn(dsh_core::SpawnRequest {
            argv: vec!["true".into()],
            cwd: Some("sub".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(spec.cwd, dir.join("sub"));
    assert_eq!(spec.grace_ms, 1234);
    assert_eq!(spec.stdin, SpawnStdin::Null);
    let collected = collect(777, Some(dsh_core::DEFAULT_MAX_SPILL_BYTES));
    assert_eq!((spec.stdout, spec.stderr), (collected, collected));
    assert_eq!(spec.timeout_ms, None, "a spawn has no timeout unless asked");
    let timed = |t| {
        exec.resolve_spawn(dsh_core::SpawnRequest {
            argv: vec!["true".into()],
            timeout_ms: common::n(t),
            ..Default::default()
        })
    };
    assert_eq!(timed(1500.5).unwrap().timeout_ms, Some(1501));
    let max = dsh_core::DEFAULT_MAX_TIMEOUT_MS;
    assert_eq!(
        timed(1e12).unwrap().timeout_ms,
        Some(max),
        "clamped, as a command's"
    );
    assert!(matches!(timed(0.0), Err(DshError::InvalidArgument { .. })));
    match exec.resolve_spawn(dsh_core::SpawnRequest {
        argv: vec!["true".into()],
        grace_ms: common::n(1.5),
        ..Default::default()
    }) {
        Err(DshError::InvalidArgument { field, .. }) => {
            assert_eq!(field.path(dsh_core::NameStyle::Snake), "spawn.grace_ms")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert!(matches!(
        exec.resolve_spawn(dsh_core::SpawnRequest::default()),
        Err(DshError::InvalidArgument { .. })
    ));
}

/// A census that reads a process while it is in execve sees no
/// environment (no tag): the tree must not be taken for gone then.
#[test]
fn a_tree_whose_member_is_exec_ing_is_not_gone() {
    let exec = executor();
    let mut gone = 0;
    for _ in 0..40 {
        // The leader exits while its child execs, again and again.
        let s = exec
            .spawn(&sh(
                "(exec sh -c 'exec sh -c \"exec sh -c \\\"exec sleep 300\\\"\"') >/dev/null 2>&1 & exit 0",
            ))
            .unwrap();
        if s.process
            .wait_tree_timeout(Some(Duration::from_millis(300)))
            .unwrap()
        {
            gone += 1;
        }
        s.process.terminate().unwrap();
        assert!(s.process.wait_tree_timeout(Some(LONG)).unwrap());
    }
    assert_eq!(gone, 0, "{gone} of 40 live trees were taken for gone");
}

//! Background processes (docs/running.md).
mod common;
use common::*;

use std::time::Duration;

use dsh_core::*;

fn start(exec: &Executor, command: &str) -> Process {
    exec.start(&spec(exec, command)).unwrap()
}

fn settled(p: &Process) {
    assert!(
        p.wait_timeout(Some(Duration::from_secs(30))).unwrap(),
        "{} did not settle",
        p.id()
    );
}

/// Reads until `needle` shows up in the accumulated deltas.
fn read_until(p: &Process, needle: &str) -> String {
    let mut seen = String::new();
    assert!(
        eventually(Duration::from_secs(20), || {
            seen.push_str(&p.read_output().delta);
            seen.contains(needle)
        }),
        "never saw {needle:?}; got {seen:?}"
    );
    seen
}

#[test]
fn completed_with_exit_code_even_when_nonzero() {
    let exec = executor();
    let p = start(&exec, "exit 3");
    settled(&p);
    assert_eq!(p.status(), Status::Completed);
    assert_eq!((p.exit_code(), p.signal()), (Some(3), None));
    assert!(p.is_settled());
}

#[test]
fn a_self_signal_is_killed() {
    let exec = executor();
    let p = start(&exec, "kill -USR1 $$");
    settled(&p);
    assert_eq!(p.status(), Status::Killed);
    assert_eq!((p.exit_code(), p.signal().as_deref()), (None, Some("SIGUSR1")));
}

#[test]
fn kill_is_true_once_then_false_and_status_is_killed_at_once() {
    let exec = executor_with(|c| c.grace_ms = n(300));
    let p = start(&exec, "echo up; exec sleep 30");
    read_until(&p, "up");
    assert_eq!(p.status(), Status::Running);
    assert!(
        !p.wait_timeout(Some(Duration::from_millis(50))).unwrap(),
        "still running"
    );
    assert!(p.kill());
    assert_eq!(p.status(), Status::Killed, "killed at once");
    assert!(!p.kill(), "a second kill is harmless and false");
    settled(&p);
    assert_eq!(p.signal().as_deref(), Some("SIGTERM"));
    assert_eq!(p.exit_code(), None);
    assert_eq!(p.status(), Status::Killed);
    assert!(!p.kill(), "false after the end");
    let done = start(&exec, "true");
    settled(&done);
    assert!(!done.kill());
    assert_eq!(done.status(), Status::Completed);
}

#[test]
fn a_cancelled_token_refuses_the_start_and_a_later_one_kills() {
    let exec = executor_with(|c| c.grace_ms = n(300));
    let dir = temp_dir("bg-cancel-before");
    let marker = dir.join("ran");
    let fired = CancelToken::new();
    fired.cancel();
    let s = spec(&exec, &format!("touch {}", marker.display()));
    assert_eq!(
        exec.start_cancellable(&s, Some(&fired)).unwrap_err(),
        DshError::AlreadyCancelled
    );
    assert!(exec.list().is_empty(), "nothing registered");
    // Nothing was started, so nothing can create the marker later.
    run(&exec, "true");
    assert!(!marker.exists(), "the command ran");

    let token = CancelToken::new();
    let p = exec
        .start_cancellable(&spec(&exec, "echo up; exec sleep 30"), Some(&token))
        .unwrap();
    read_until(&p, "up");
    token.cancel();
    settled(&p);
    assert_eq!(p.status(), Status::Killed);
    assert_eq!(p.signal().as_deref(), Some("SIGTERM"));
    assert!(!p.kill(), "already stopped");
}

#[test]
fn kill_escalates_to_sigkill_for_a_term_trapping_process() {
    let exec = executor_with(|c| c.grace_ms = n(300));
    let p = start(
        &exec,
        "trap 'echo got-term' TERM; echo armed; while :; do sleep 0.05; done",
    );
    read_until(&p, "armed");
    assert!(p.kill());
    settled(&p);
    assert_eq!(p.signal().as_deref(), Some("SIGKILL"));
    assert!(p.read_output().delta.contains("got-term"));
}

#[test]
fn a_kill_right_after_the_start_sends_one_sigterm() {
    // A stop that comes before the supervisor has said the leader's pid
    // (it says it 5 ms after the start): the command gets its SIGTERM once,
    // as from the harness's own executor, not once by its tag and again by
    // its group when the pid comes (a TERM trap would run twice).
    let exec = executor_with(|c| c.grace_ms = n(300));
    for round in 0..20 {
        let p = start(
            &exec,
            "trap 'echo got-term' TERM; echo armed; while :; do sleep 0.05; done",
        );
        // Spinning, not sleeping: the stop must come within those 5 ms.
        let mut seen = String::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !seen.contains("armed") {
            assert!(std::time::Instant::now() < deadline, "never armed: {seen:?}");
            seen.push_str(&p.read_output().delta);
        }
        assert!(p.kill());
        settled(&p);
        seen.push_str(&p.read_output().delta);
        assert_eq!(seen.matches("got-term").count(), 1, "round {round}: {seen:?}");
    }
}

#[test]
fn reads_are_consuming_and_mark_stderr() {
    let exec = executor();
    let p = start(&exec, "echo one; echo err >&2");
    settled(&p);
    let r = p.read_output();
    assert_eq!(r.delta, "one\n[stderr]\nerr\n");
    assert!(!r.lossy);
    assert_eq!((r.stdout_spill_path, r.stderr_spill_path), (None, None));
    assert_eq!(p.read_output().delta, "", "never the same bytes twice");

    let p = start(&exec, "printf abc; printf def >&2");
    settled(&p);
    assert_eq!(
        p.read_output().delta,
        "abc\n[stderr]\ndef",
        "newline added when stdout lacks one"
    );
    let p = start(&exec, "printf abc");
    settled(&p);
    assert_eq!(
        p.read_output().delta,
        "abc",
        "no stderr section when stderr is empty"
    );
    let p = start(&exec, "echo err >&2");
    settled(&p);
    assert_eq!(
        p.read_output().delta,
        "[stderr]\nerr\n",
        "no newline before the section when stdout is empty"
    );
}

#[test]
fn incremental_reads_while_running_and_after_exit() {
    let exec = executor();
    let dir = temp_dir("incremental");
    let go = dir.join("go");
    let p = start(
        &exec,
        &format!(
            "echo first; while [ ! -e {} ]; do sleep 0.01; done; echo second",
            go.display()
        ),
    );
    let first = read_until(&p, "first");
    assert_eq!(first, "first\n");
    assert_eq!(p.read_output().delta, "", "nothing new yet");
    std::fs::write(&go, "").unwrap();
    settled(&p);
    assert_eq!(p.read_output().delta, "second\n", "only what arrived since");
    assert_eq!(p.read_output().delta, "");
}

#[test]
fn lossy_when_unread_bytes_slide_out_and_spill_paths_point_at_everything() {
    let exec = executor_with(|c| c.max_output_bytes = n(100));
    let p = start(&exec, "seq 1 1000; seq 1 1000 >&2");
    settled(&p);
    let r = p.read_output();
    assert!(r.lossy);
    let full: String = (1..=1000).map(|i| format!("{i}\n")).collect();
    let tail = &full[full.len() - 100..];
    assert_eq!(r.delta, format!("{tail}[stderr]\n{tail}"));
    for path in [
        r.stdout_spill_path.as_ref().unwrap(),
        r.stderr_spill_path.as_ref().unwrap(),
    ] {
        assert_eq!(std::fs::read_to_string(path).unwrap(), full);
    }
    let again = p.read_output();
    assert!(!again.lossy && again.delta.is_empty());
    assert_eq!(
        again.stdout_spill_path, r.stdout_spill_path,
        "spill paths keep being reported"
    );
}

#[test]
fn spawn_failure_settles_killed_and_is_delivered_once() {
    let exec = executor();
    let mut req = Request::new("echo never");
    req.workdir = Some("/nonexistent/dsh-bg".into());
    let p = exec.start(&exec.resolve(req).unwrap()).unwrap();
    settled(&p);
    assert_eq!(p.status(), Status::Killed);
    assert_eq!((p.exit_code(), p.signal()), (None, None));
    let first = p.read_output().delta;
    assert!(
        first.contains("spawn failed: ENOENT") && first.contains("/nonexistent/dsh-bg"),
        "{first}"
    );
    assert!(!first.contains("never"));
    assert_eq!(first.matches("spawn failed").count(), 1, "said once: {first}");
    assert!(first.starts_with("[stderr]\nspawn failed: ENOENT"), "{first}");
    assert_eq!(p.read_output().delta, "", "delivered once");
    assert!(!p.kill());
}

#[test]
fn async_wait_never_fails() {
    let exec = executor();
    let p = start(&exec, "exit 7");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), p.wait())
            .await
            .unwrap();
        p.wait().await; // settled: completes at once, again
    });
    assert_eq!(p.exit_code(), Some(7));
}

#[test]
fn stdin_reaches_a_background_process() {
    let exec = executor();
    let mut req = Request::new("tr a-z A-Z");
    req.stdin = Some(b"shout".to_vec());
    let p = exec.start(&exec.resolve(req).unwrap()).unwrap();
    settled(&p);
    assert_eq!(p.read_output().delta, "SHOUT");
}

#[test]
fn callback_style_hooks_for_hosts_with_their_own_loop() {
    use std::sync::mpsc;
    let exec = executor_with(|c| c.grace_ms = n(300));
    let (tx, rx) = mpsc::channel();
    exec.run_callback(&spec(&exec, "echo via-callback; exit 9"), None, move |r| {
        tx.send(r).unwrap()
    });
    let r = rx.recv_timeout(Duration::from_secs(30)).unwrap().unwrap();
    assert_eq!((r.exit_code, r.stdout.text.as_str()), (Some(9), "via-callback\n"));

    let (tx, rx) = mpsc::channel();
    let mut bad = spec(&exec, "true");
    bad.workdir = "/nonexistent/cb".into();
    exec.run_callback(&bad, None, move |r| tx.send(r).unwrap());
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(30)).unwrap(),
        Err(DshError::Spawn { .. })
    ));

    let p = start(&exec, "exit 2");
    let (tx, rx) = mpsc::channel();
    p.when_settled(move || tx.send(()).unwrap()).unwrap();
    rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(p.exit_code(), Some(2), "settled before the callback ran");
    let (tx, rx) = mpsc::channel();
    p.when_settled(move || tx.send(()).unwrap()).unwrap();
    rx.recv_timeout(Duration::from_secs(30))
        .expect("an already settled process calls back too");

    let running = start(&exec, "exec sleep 30");
    let (tx, rx) = mpsc::channel();
    exec.start_dispose(move || tx.send(()).unwrap());
    rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(running.is_settled() && exec.is_disposed());
}

/// A settled background process has reaped its leader: when `wait` returns
/// (and when a listener hears of it, and when dispose returns) the pid is
/// free, whether it exited, was killed or was disposed of.
#[test]
fn a_settled_process_has_reaped_its_leader() {
    let exec = executor_with(|c| c.grace_ms = n(300));
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    // What a listener saw: the process and whether its leader was reaped.
    let heard = Arc::new(Mutex::new(Vec::new()));
    // The pids of the processes whose output the test read itself.
    let known: Arc<Mutex<HashMap<String, i32>>> = Arc::default();
    {
        let (heard, known) = (heard.clone(), known.clone());
        exec.on_task_done(Arc::new(move |p: &Process| {
            let delta = p.read_output().delta;
            let pid = match known.lock().unwrap().get(p.id()) {
                Some(&pid) => pid,
                None => first_pid(&delta),
            };
            heard.lock().unwrap().push((p.id().to_string(), pid_is_free(pid)));
        }));
    }
    for round in 0..5 {
        let p = start(&exec, "echo $$");
        settled(&p);
        let exited = p.id().to_string();

        let p = start(&exec, "echo $$; trap '' TERM; sleep 30");
        let pid = first_pid(&read_until(&p, "\n"));
        known.lock().unwrap().insert(p.id().to_string(), pid);
        assert!(p.kill());
        settled(&p);
        assert!(pid_is_free(pid), "round {round}: kill left its leader");
        // The listener of the killed one may run just after `wait` returns.
        assert!(eventually(Duration::from_secs(10), || heard
            .lock()
            .unwrap()
            .len()
            == 2 * (round + 1)));
        let heard = heard.lock().unwrap();
        for (id, free) in heard.iter() {
            assert!(
                free,
                "round {round}: {id} ({exited}) was heard of with its leader unreaped"
            );
        }
    }
    let p = start(&exec, "echo $$; exec sleep 30");
    let pid = first_pid(&read_until(&p, "\n"));
    exec.dispose_blocking().unwrap();
    assert!(pid_is_free(pid), "dispose returned with a leader unreaped");
}

/// A spill directory removed while a background process spills (a temp
/// cleaner, say): reads never name a spill path that does not exist, and
/// say why there is none (`spill_error`), as a foreground result does.
#[test]
fn a_spill_directory_removed_while_spilling_is_a_spill_error_not_a_dangling_path() {
    let base = temp_dir("spill-removed-bg");
    let exec = executor_with(|c| {
        c.max_output_bytes = n(100);
        c.spill_dir = Some(base.to_str().unwrap().to_owned());
    });
    let gate = base.join("gate");
    let p = start(
        &exec,
        &format!(
            "seq 1 1000; while [ ! -e {g} ]; do sleep 0.01; done; seq 1 1000",
            g = gate.display()
        ),
    );
    // The spill has begun (it is named); then its directory goes.
    assert!(eventually(Duration::from_secs(20), || p
        .read_output()
        .stdout_spill_path
        .is_some()));
    let dir = exec.spill_dir().expect("the spill made the private directory");
    std::fs::remove_dir_all(&dir).unwrap();
    let check = |when: &str| {
        let r = p.read_output();
        match &r.stdout_spill_path {
            Some(path) => assert!(
                std::path::Path::new(path).exists(),
                "{when}: names {path}, which does not exist (spill_error {:?})",
                r.stdout_spill_error
            ),
            None => assert!(
                r.stdout_spill_error.is_some(),
                "{when}: no path and no spill_error"
            ),
        }
        r
    };
    let r = check("while running");
    assert!(r.stdout_spill_path.is_none(), "the removed file is not named");
    std::fs::write(&gate, b"").unwrap();
    settled(&p);
    let r = check("settled");
    assert!(
        r.stdout_spill_error.as_deref().unwrap_or("").contains("removed"),
        "{:?}",
        r.stdout_spill_error
    );
    exec.dispose_blocking().unwrap();
}

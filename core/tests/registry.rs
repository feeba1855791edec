//! The executor as a registry, listeners and dispose (docs/registry.md).
mod common;
use common::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_core::*;

fn start_owned(exec: &Executor, command: &str, owner: Option<&str>) -> Process {
    let mut req = Request::new(command);
    req.owner = owner.map(str::to_owned);
    exec.start(&exec.resolve(req).unwrap()).unwrap()
}

#[test]
fn ids_owners_list_and_lookups() {
    let exec = executor();
    let a = start_owned(&exec, "exit 0", Some("session-a"));
    let b = start_owned(&exec, "exit 1", None);
    let c = start_owned(&exec, "echo hi", Some("session-c"));
    assert_eq!((a.id(), b.id(), c.id()), ("bash-1", "bash-2", "bash-3"));
    assert_eq!(
        executor().start(&spec(&exec, "true")).unwrap().id(),
        "bash-1",
        "ids are per executor"
    );
    let ids: Vec<String> = exec.list().iter().map(|p| p.id().to_owned()).collect();
    assert_eq!(ids, ["bash-1", "bash-2", "bash-3"]);
    assert_eq!(exec.owner_of("bash-1").unwrap().as_deref(), Some("session-a"));
    assert_eq!(exec.owner_of("bash-2").unwrap(), None);
    assert_eq!(a.owner(), Some("session-a"));
    assert_eq!(exec.get("bash-3").unwrap().command(), "echo hi");
    assert!(exec.get("bash-99").is_none());
    for p in exec.list() {
        assert!(p.wait_timeout(Some(Duration::from_secs(30))).unwrap());
    }
    assert_eq!(exec.read_output("bash-3").unwrap().delta, "hi\n");
    assert!(!exec.kill("bash-3").unwrap());
    let unknown = DshError::NotFound("bash-99".into());
    assert_eq!(exec.read_output("bash-99").unwrap_err(), unknown);
    assert_eq!(exec.kill("bash-99").unwrap_err(), unknown);
    assert_eq!(exec.owner_of("bash-99").unwrap_err(), unknown);
    assert!(unknown.to_string().contains("bash-99"));
}

#[test]
fn every_listener_hears_each_completion_once_and_a_panicking_one_is_contained() {
    let exec = executor();
    exec.on_task_done(Arc::new(|_p: &Process| panic!("listener bug")));
    let (heard_a_tx, heard_a) = std::sync::mpsc::channel::<String>();
    let (heard_b_tx, heard_b) = std::sync::mpsc::channel::<String>();
    {
        let heard_a_tx = Mutex::new(heard_a_tx);
        exec.on_task_done(Arc::new(move |p: &Process| {
            assert!(p.is_settled(), "listeners see a settled process");
            heard_a_tx.lock().unwrap().send(p.id().to_owned()).unwrap();
        }));
    }
    let removed = {
        let heard_b_tx = Mutex::new(heard_b_tx);
        exec.on_task_done(Arc::new(move |p: &Process| {
            heard_b_tx.lock().unwrap().send(p.id().to_owned()).unwrap();
        }))
    };
    for i in 0..5 {
        exec.start(&spec(&exec, &format!("exit {i}"))).unwrap();
    }
    let hear = |rx: &std::sync::mpsc::Receiver<String>, n: usize| -> Vec<String> {
        let mut ids: Vec<String> = (0..n)
            .map(|_| rx.recv_timeout(Duration::from_secs(30)).expect("a delivery"))
            .collect();
        ids.sort();
        ids
    };
    let all = ["bash-1", "bash-2", "bash-3", "bash-4", "bash-5"];
    assert_eq!(hear(&heard_a, 5), all);
    assert_eq!(hear(&heard_b, 5), all);
    assert!(exec.off_task_done(removed));
    assert!(!exec.off_task_done(removed));
    exec.start(&spec(&exec, "true")).unwrap();
    assert_eq!(hear(&heard_a, 1), ["bash-6"]);
    // Deliveries are in order on one thread: by the time bash-6 reached the
    // remaining listener, the removed one would have heard it too.
    exec.dispose_blocking().unwrap();
    assert!(
        heard_b.try_recv().is_err(),
        "unsubscribed, and no second delivery of anything"
    );
    assert!(heard_a.try_recv().is_err(), "each completion heard once");
}

#[test]
fn a_removed_listener_is_not_called_for_completions_still_queued() {
    // docs/registry.md: removing a listener stops new deliveries; only one
    // already under way may still call it once. A slow listener holds the
    // callback thread while twenty completions queue up behind it.
    let exec = executor();
    let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
    let (release_tx, release) = std::sync::mpsc::channel::<()>();
    let (entered_tx, release) = (Mutex::new(entered_tx), Mutex::new(release));
    let first = std::sync::atomic::AtomicBool::new(true);
    exec.on_task_done(Arc::new(move |_p: &Process| {
        if first.swap(false, Ordering::SeqCst) {
            entered_tx.lock().unwrap().send(()).unwrap();
            let _ = release.lock().unwrap().recv_timeout(Duration::from_secs(30));
        }
    }));
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = {
        let calls = calls.clone();
        exec.on_task_done(Arc::new(move |_p: &Process| {
            calls.fetch_add(1, Ordering::SeqCst);
        }))
    };
    let started: Vec<Process> = (0..20)
        .map(|_| exec.start(&spec(&exec, "true")).unwrap())
        .collect();
    for p in &started {
        assert!(p.wait_timeout(Some(Duration::from_secs(30))).unwrap());
    }
    entered
        .recv_timeout(Duration::from_secs(30))
        .expect("the slow listener runs");
    assert!(exec.off_task_done(counted));
    let at_removal = calls.load(Ordering::SeqCst);
    release_tx.send(()).unwrap();
    exec.dispose_blocking().unwrap();
    let late = calls.load(Ordering::SeqCst) - at_removal;
    assert!(
        late <= 1,
        "{late} calls after off_task_done returned (at most one already under way)"
    );
}

#[test]
fn dispose_kills_and_awaits_everything_and_is_idempotent() {
    let exec = executor_with(|c| {
        c.grace_ms = n(300);
        c.max_output_bytes = n(10);
    });
    let heard = Arc::new(AtomicUsize::new(0));
    {
        let heard = heard.clone();
        exec.on_task_done(Arc::new(move |_p: &Process| {
            heard.fetch_add(1, Ordering::SeqCst);
        }));
    }
    let plain = exec.start(&spec(&exec, "echo $$; exec sleep 30")).unwrap();
    let trapper = exec
        .start(&spec(
            &exec,
            "trap '' TERM; echo $$; seq 1 100; while :; do sleep 0.05; done",
        ))
        .unwrap();
    let mut pids = Vec::new();
    for p in [&plain, &trapper] {
        let mut out = String::new();
        assert!(eventually(Duration::from_secs(20), || {
            out.push_str(&p.read_output().delta);
            out.contains('\n')
        }));
        pids.push(out.lines().next().unwrap().trim().parse::<i32>().unwrap());
    }
    assert!(
        eventually(Duration::from_secs(20), || exec.spill_dir().is_some()),
        "seq spilled"
    );
    let spill_dir = exec.spill_dir().unwrap();
    exec.dispose_blocking().unwrap();
    for p in [&plain, &trapper] {
        assert!(p.is_settled(), "dispose awaited {}", p.id());
        assert_eq!(p.status(), Status::Killed);
    }
    assert_eq!(trapper.signal().as_deref(), Some("SIGKILL"));
    for pid in pids {
        assert!(!alive(pid), "{pid} survived dispose");
    }
    assert_eq!(
        heard.load(Ordering::SeqCst),
        0,
        "no listener is called after disposal"
    );
    assert!(!spill_dir.exists(), "spill files are removed at dispose");
    exec.dispose_blocking().unwrap();
    assert!(exec.is_disposed());
    assert_eq!(exec.start(&spec(&exec, "true")).unwrap_err(), DshError::Disposed);
    assert_eq!(
        exec.run_blocking(&spec(&exec, "true"), None).unwrap_err(),
        DshError::Disposed
    );
    assert!(!exec.kill("bash-1").unwrap(), "the registry still answers");
}

/// A dispose that comes in the first milliseconds of a command, before
/// its leader's pid is known, still gives it one SIGTERM: the sweep leaves
/// its group to its own supervision loop, which signals it once the pid
/// comes (a TERM trap must not run twice).
#[test]
fn a_dispose_right_after_start_sends_one_sigterm() {
    let mut doubles = Vec::new();
    for round in 0..40 {
        // The trap does not end bash: the grace does (kept short).
        let exec = executor_with(|c| c.grace_ms = n(200));
        let p = start_owned(&exec, "trap 'echo T' TERM; echo R; while :; do :; done", None);
        // Until bash has set its trap; in the first ms of the command.
        let started = Instant::now();
        while !p.read_output().delta.contains('R') && started.elapsed() < Duration::from_secs(10) {
            std::hint::spin_loop();
        }
        std::thread::sleep(Duration::from_micros(250 * (round % 8)));
        exec.dispose_blocking().unwrap();
        let traps = p.read_output().delta.matches('T').count();
        if traps > 1 {
            doubles.push((round, traps));
        }
    }
    assert!(
        doubles.is_empty(),
        "a TERM trap ran more than once (round, runs): {doubles:?}"
    );
}

#[test]
fn concurrent_dispose_calls_all_wait_for_the_end() {
    let exec = executor_with(|c| c.grace_ms = n(300));
    let p = exec
        .start(&spec(&exec, "trap '' TERM; while :; do sleep 0.05; done"))
        .unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let exec = exec.clone();
            let p = p.clone();
            std::thread::spawn(move || {
                exec.dispose_blocking().unwrap();
                assert!(
                    p.is_settled(),
                    "a second dispose returned before the first finished"
                );
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn inside_a_listener_the_process_is_settled_and_other_blocking_calls_are_refused() {
    let exec = executor();
    let other = exec.start(&spec(&exec, "sleep 60")).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let exec2 = exec.clone();
        let other = other.clone();
        let tx = Mutex::new(tx);
        exec.on_task_done(Arc::new(move |p: &Process| {
            if p.id() == other.id() {
                return;
            }
            let started = Instant::now();
            let observed = (
                p.is_settled(),
                p.status(),
                p.wait_timeout(None),
                p.wait_timeout(Some(Duration::from_secs(60))),
                exec2
                    .run_blocking(&exec2.resolve(Request::new("true")).unwrap(), None)
                    .map(|_| ()),
                other.wait_timeout(Some(Duration::from_secs(60))),
                other.wait_timeout(None),
                exec2.dispose_blocking(),
                started.elapsed(),
            );
            tx.lock().unwrap().send(observed).unwrap();
        }));
    }
    let p = exec.start(&spec(&exec, "exit 4")).unwrap();
    let (settled, status, wait_none, wait_long, run, other_wait, other_wait_none, dispose, took) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the listener ran");
    assert!(settled, "done is true inside the listener");
    assert_eq!(status, Status::Completed);
    assert_eq!(
        wait_none,
        Ok(true),
        "waiting for the settled process returns at once"
    );
    assert_eq!(wait_long, Ok(true));
    assert_eq!(run, Err(DshError::BlockingInAsync));
    assert_eq!(other_wait, Err(DshError::BlockingInAsync));
    assert_eq!(other_wait_none, Err(DshError::BlockingInAsync));
    assert_eq!(dispose, Err(DshError::BlockingInAsync));
    assert!(
        took < Duration::from_secs(10),
        "every refusal was immediate ({took:?})"
    );
    assert_eq!(p.exit_code(), Some(4));
    // The listener holds the executor: dispose breaks that cycle.
    exec.dispose_blocking().unwrap();
    assert_eq!(other.status(), Status::Killed);
}

#[test]
fn listeners_that_block_never_freeze_commands_of_any_executor() {
    let exec = executor();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<String>();
    {
        let entered_tx = Mutex::new(entered_tx);
        exec.on_task_done(Arc::new(move |p: &Process| {
            entered_tx.lock().unwrap().send(p.id().to_owned()).unwrap();
            // Blocks until the test lets it go: a host callback stuck on a lock.
            let _ = release_rx.lock().unwrap().recv_timeout(Duration::from_secs(120));
        }));
    }
    let a = exec.start(&spec(&exec, "true")).unwrap();
    let b = exec.start(&spec(&exec, "true")).unwrap();
    entered_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a listener is running");
    assert!(a.wait_timeout(Some(Duration::from_secs(30))).unwrap());
    assert!(b.wait_timeout(Some(Duration::from_secs(30))).unwrap());
    // While the listener is stuck, commands on this and another executor
    // run, time out and settle as usual.
    let other = executor();
    let r = other
        .run_blocking(&spec(&other, "echo still-alive"), None)
        .unwrap();
    assert_eq!(r.stdout.text, "still-alive\n");
    let mut req = Request::new("sleep 30");
    req.timeout_ms = n(200);
    let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
    assert!(r.timed_out);
    let c = other.start(&spec(&other, "echo bg")).unwrap();
    assert!(c.wait_timeout(Some(Duration::from_secs(30))).unwrap());
    assert_eq!(c.read_output().delta, "bg\n");
    release_tx.send(()).unwrap();
    entered_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the second delivery follows");
    release_tx.send(()).unwrap();
    exec.dispose_blocking().unwrap();
    other.dispose_blocking().unwrap();
}

#[test]
fn settled_processes_are_retained_up_to_the_cap_and_can_be_forgotten() {
    let exec = executor_with(|c| {
        c.retain_settled = n(3);
        c.max_output_bytes = n(10);
    });
    let running = exec.start(&spec(&exec, "sleep 60")).unwrap();
    assert_eq!(
        exec.forget(running.id()),
        Err(DshError::StillRunning(running.id().to_owned()))
    );
    assert_eq!(exec.forget("bash-99"), Err(DshError::NotFound("bash-99".into())));
    let mut spills = Vec::new();
    for _ in 0..6 {
        let p = exec.start(&spec(&exec, "seq 1 100")).unwrap();
        assert!(p.wait_timeout(Some(Duration::from_secs(30))).unwrap());
        spills.push(p.read_output().stdout_spill_path.expect("spilled"));
    }
    // Six settled, three retained (the newest), plus the running one.
    let ids: Vec<String> = exec.list().iter().map(|p| p.id().to_owned()).collect();
    assert_eq!(ids, ["bash-1", "bash-5", "bash-6", "bash-7"]);
    for (i, path) in spills.iter().enumerate() {
        assert_eq!(
            std::path::Path::new(path).exists(),
            i >= 3,
            "spill file of bash-{}",
            i + 2
        );
    }
    exec.forget("bash-7").unwrap();
    assert!(exec.get("bash-7").is_none());
    assert!(!std::path::Path::new(&spills[5]).exists());
    assert_eq!(exec.forget("bash-7"), Err(DshError::NotFound("bash-7".into())));
    exec.dispose_blocking().unwrap();
}

#[test]
fn a_completion_seen_by_a_waiter_is_delivered_even_if_the_waiter_disposes_at_once() {
    // The waiter wakes on the settle and disposes in the same breath; the
    // listener's delivery must already be counted, not dropped in the gap.
    for round in 0..300 {
        let exec = executor();
        let heard = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let h = heard.clone();
        exec.on_task_done(std::sync::Arc::new(move |_p: &Process| {
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
        let p = exec.start(&spec(&exec, "true")).unwrap();
        assert!(p.wait_timeout(Some(std::time::Duration::from_secs(30))).unwrap());
        exec.dispose_blocking().unwrap();
        assert_eq!(
            heard.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "round {round}"
        );
    }
}

#[test]
fn ids_a_caller_chooses_are_held_and_skipped_by_the_numbering() {
    let exec = executor();
    let mine = exec.start_as(&spec(&exec, "sleep 30"), None, "bash-2").unwrap();
    assert_eq!(mine.id(), "bash-2");
    // The numbering goes round an id a caller holds.
    let a = exec.start(&spec(&exec, "true")).unwrap();
    let b = exec.start(&spec(&exec, "true")).unwrap();
    assert_eq!((a.id(), b.id()), ("bash-1", "bash-3"));
    // Taken, empty: refused naming the field, and nothing runs.
    for id in ["bash-2", "bash-3", ""] {
        let err = exec.start_as(&spec(&exec, "true"), None, id).unwrap_err();
        assert!(
            matches!(&err, DshError::InvalidArgument { field, .. } if field.path(NameStyle::Snake) == "spec.id"),
            "{id:?}: {err}"
        );
    }
    assert_eq!(exec.list().len(), 3);

    // A run's hand-over id is held from the call: nothing else takes it,
    // and the expired run registers under it.
    let mut req = Request::new("echo before; sleep 30");
    req.timeout_ms = Some(Num(300.0));
    req.on_expiry = Some(OnExpiry::Background);
    let background = exec.resolve(req).unwrap();
    let run = exec.run_as(&background, None, "job-7");
    let err = exec.start_as(&spec(&exec, "true"), None, "job-7").unwrap_err();
    assert!(err.to_string().contains("taken"), "{err}");
    let result = runtime_block(run).unwrap();
    assert_eq!(result.background_id.as_deref(), Some("job-7"));
    assert!(exec.get("job-7").unwrap().kill());

    // A run that ends in time frees its id.
    let quick = exec.run_as(&spec(&exec, "true"), None, "job-8");
    runtime_block(quick).unwrap();
    assert_eq!(
        exec.start_as(&spec(&exec, "true"), None, "job-8").unwrap().id(),
        "job-8"
    );
    mine.kill();
    exec.dispose_blocking().unwrap();
}

#[test]
fn a_refused_spill_dir_change_makes_no_directory() {
    let exec = executor();
    let elsewhere = std::env::temp_dir().join(format!("dsh-never-made-{}/spill", std::process::id()));
    let err = exec
        .reconfigure(ConfigInput {
            spill_dir: Some(elsewhere.to_str().unwrap().to_owned()),
            ..ConfigInput::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("cannot change"), "{err}");
    assert!(
        !elsewhere.parent().unwrap().exists(),
        "a refused reconfigure made {}",
        elsewhere.display()
    );
    // The same directory, spelt as given at construction, is no change.
    let here = executor_with(|c| c.spill_dir = Some(std::env::temp_dir().to_str().unwrap().to_owned()));
    here.reconfigure(ConfigInput {
        spill_dir: Some(std::env::temp_dir().to_str().unwrap().to_owned()),
        ..ConfigInput::default()
    })
    .unwrap();
}

//! §7: the executor as a registry, listeners and dispose.
mod common;
use common::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
        assert!(p.wait_timeout(Some(Duration::from_secs(30))));
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
    let heard_a = Arc::new(Mutex::new(Vec::new()));
    let heard_b = Arc::new(AtomicUsize::new(0));
    {
        let heard_a = heard_a.clone();
        exec.on_task_done(Arc::new(move |p: &Process| {
            assert_ne!(p.status(), Status::Running, "listeners see the settled status");
            heard_a.lock().unwrap().push(p.id().to_owned());
        }));
    }
    let removed = {
        let heard_b = heard_b.clone();
        exec.on_task_done(Arc::new(move |_p: &Process| {
            heard_b.fetch_add(1, Ordering::SeqCst);
        }))
    };
    let procs: Vec<Process> = (0..5)
        .map(|i| exec.start(&spec(&exec, &format!("exit {i}"))).unwrap())
        .collect();
    for p in &procs {
        assert!(p.wait_timeout(Some(Duration::from_secs(30))));
    }
    let mut heard = heard_a.lock().unwrap().clone();
    heard.sort();
    assert_eq!(heard, ["bash-1", "bash-2", "bash-3", "bash-4", "bash-5"]);
    assert_eq!(heard_b.load(Ordering::SeqCst), 5);
    assert!(exec.off_task_done(removed));
    assert!(!exec.off_task_done(removed));
    let p = exec.start(&spec(&exec, "true")).unwrap();
    assert!(p.wait_timeout(Some(Duration::from_secs(30))));
    assert_eq!(heard_b.load(Ordering::SeqCst), 5, "unsubscribed");
    assert_eq!(heard_a.lock().unwrap().len(), 6);
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
    let spill_dir = exec.spill_dir().expect("seq spilled");
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
fn blocking_calls_from_a_listener_are_refused_not_deadlocked() {
    let exec = executor();
    let seen = Arc::new(Mutex::new(None));
    {
        let exec2 = exec.clone();
        let seen = seen.clone();
        exec.on_task_done(Arc::new(move |_p: &Process| {
            let r = exec2.run_blocking(&exec2.resolve(Request::new("true")).unwrap(), None);
            *seen.lock().unwrap() = Some(r.map(|_| ()));
        }));
    }
    let p = exec.start(&spec(&exec, "true")).unwrap();
    assert!(p.wait_timeout(Some(Duration::from_secs(30))));
    assert_eq!(seen.lock().unwrap().clone(), Some(Err(DshError::BlockingInAsync)));
    // The listener holds the executor: dispose breaks that cycle.
    exec.dispose_blocking().unwrap();
}

//! 10 000 mixed runs and starts — timeouts, kills, cancellations, spawn
//! failures, spills kept and dropped — leave the host as it was: the same
//! descriptors, no zombie or live command (the executor's supervisor holds
//! none), and no spill file that no result reports. Its own binary: these
//! are process-wide facts.
mod common;
use common::*;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_core::*;

#[test]
fn ten_thousand_mixed_operations_leave_nothing_behind() {
    raise_fd_limit();
    let exec = executor_with(|c| {
        // Keep every settled process: the test accounts for each one.
        c.retain_settled = n(1_000_000);
        c.grace_ms = n(100);
        c.max_output_bytes = n(200);
        c.max_spill_bytes = n(50_000);
    });
    // Both reactors exist from here on: the core's shared one and this
    // thread's own (the workers' own reactors go with their threads).
    run(&exec, "true");
    assert!(exec
        .start(&spec(&exec, "true"))
        .unwrap()
        .wait_timeout(Some(Duration::from_secs(30)))
        .unwrap());
    let fds_before = open_fds();
    let reported: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let exec = exec.clone();
            let reported = reported.clone();
            std::thread::spawn(move || {
                let fired = CancelToken::new();
                fired.cancel();
                for i in 0..2_500 {
                    let mut req = Request::new("true");
                    match i % 10 {
                        1 => req.command = "seq 1 300".into(),
                        2 => {
                            req.command = "sleep 5".into();
                            req.timeout_ms = n(20);
                        }
                        3 | 6 => req.workdir = Some("/nonexistent/stress".into()),
                        4 => req.command = format!("echo {w}-{i}"),
                        5 => req.command = "exec sleep 5".into(),
                        7 => req.command = "seq 1 20000".into(),
                        8 => {
                            req.command = "cat".into();
                            req.stdin = Some(vec![b'x'; 1000]);
                        }
                        _ => {}
                    }
                    let s = exec.resolve(req).unwrap();
                    match i % 10 {
                        4..=6 => {
                            let p = exec.start(&s).unwrap();
                            if i % 10 == 5 {
                                p.kill();
                            }
                            assert!(p.wait_timeout(Some(Duration::from_secs(60))).unwrap());
                            let read = p.read_output();
                            if let Some(path) = read.stdout_spill_path {
                                reported.lock().unwrap().insert(path);
                            }
                        }
                        9 => assert_eq!(
                            exec.run_blocking(&s, Some(&fired)).unwrap_err(),
                            DshError::AlreadyCancelled
                        ),
                        _ => match exec.run_blocking(&s, None) {
                            Ok(r) => {
                                for path in [r.stdout.spill_path, r.stderr.spill_path].into_iter().flatten() {
                                    reported.lock().unwrap().insert(path);
                                }
                            }
                            Err(e) => assert!(matches!(e, DshError::Spawn { .. }), "{e}"),
                        },
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(
        exec.list().len(),
        1 + 4 * 750,
        "the warm-up process and the workers' starts"
    );
    assert!(
        eventually(Duration::from_secs(10), || open_fds() == fds_before),
        "descriptors: {fds_before} before, {} after",
        open_fds()
    );
    // The host's one child is the executor's supervisor, and it holds no
    // command any more: every leader released and reaped, no orphan left.
    let only_the_idle_supervisor = || match children().as_slice() {
        [(pid, _)] => name_of(*pid) == "dsh-supervisor" && children_of(*pid).is_empty(),
        _ => false,
    };
    assert!(
        eventually(Duration::from_secs(10), only_the_idle_supervisor),
        "children left: {:?}",
        children()
            .into_iter()
            .map(|(pid, state)| (pid, state, name_of(pid), children_of(pid)))
            .collect::<Vec<_>>()
    );
    let on_disk: BTreeSet<String> = std::fs::read_dir(exec.spill_dir().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.path().to_str().unwrap().to_owned())
        .collect();
    let reported = reported.lock().unwrap().clone();
    // `seq 1 300` and the 1000-byte `cat` pass the 200-byte cap and stay
    // within max_spill_bytes; `seq 1 20000` passes max_spill_bytes.
    assert_eq!(
        reported.len(),
        4 * (250 + 250),
        "each spilling run reported its file"
    );
    assert_eq!(
        on_disk, reported,
        "every spill file on disk is one a result reports, and vice versa"
    );
    exec.dispose_blocking().unwrap();
    assert!(!exec.spill_dir().map(|d| d.exists()).unwrap_or(false));
    assert!(
        children().is_empty(),
        "dispose ended the supervisor: {:?}",
        children()
    );
    // Its control socket, pidfd (and the releases' copy of it) and release
    // pipe (both ends) were open since the warm-up.
    assert!(eventually(Duration::from_secs(10), || open_fds() == fds_before - 5));
}

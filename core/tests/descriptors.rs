//! No descriptor is left behind in the host. Its own binary: descriptor
//! counts are process-wide, so no other test may run beside it.
mod common;
use common::*;

use std::time::Duration;

use dsh_core::*;

#[test]
fn no_descriptor_is_left_behind() {
    fn open_fds() -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().count()
    }
    let exec = executor_with(|c| {
        c.grace_ms = n(200);
        c.max_output_bytes = n(100);
    });
    run(&exec, "true");
    // Both reactors exist from here on: the core's shared one (started by
    // `start`) and this thread's own (started by a blocking run).
    assert!(exec
        .start(&spec(&exec, "true"))
        .unwrap()
        .wait_timeout(Some(Duration::from_secs(30)))
        .unwrap());
    let before = open_fds();
    for i in 0..30 {
        let mut req = Request::new("seq 1 500; echo err >&2");
        req.stdin = Some(b"x".to_vec());
        if i % 3 == 0 {
            req.timeout_ms = n(50);
            req.command = "sleep 5".into();
        }
        if i % 5 == 0 {
            req.workdir = Some("/nonexistent".into());
        }
        let s = exec.resolve(req).unwrap();
        let _ = exec.run_blocking(&s, None);
        let p = exec.start(&s).unwrap();
        if i % 2 == 0 || i % 3 == 0 {
            p.kill();
        }
        assert!(p.wait_timeout(Some(Duration::from_secs(30))).unwrap());
    }
    // Scheduled SIGKILL sweeps read /proc for a moment after a process
    // settles: a leak is a descriptor that stays.
    assert!(
        eventually(Duration::from_secs(10), || open_fds() == before),
        "descriptors leaked: {} → {}",
        before,
        open_fds()
    );
    // Stdin pipes and hand-overs: 1000 piped processes ended every way
    // (closed, exited with writes pending, closed by the command, killed
    // with a write waiting), and runs handed over then killed.
    for i in 0..1000 {
        let mut req = Request::new(match i % 4 {
            0 => "cat >/dev/null",
            1 => "exit 0",
            2 => "exec 0<&-; sleep 5",
            _ => "sleep 5",
        });
        req.stdin_pipe = true;
        let p = exec.start(&exec.resolve(req).unwrap()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        p.write_stdin_with(vec![b'x'; 200_000], move |r| tx.send(r).unwrap());
        match i % 4 {
            0 => {
                rx.recv_timeout(Duration::from_secs(30)).unwrap().unwrap();
                assert!(p.close_stdin().unwrap());
            }
            1 => assert!(rx.recv_timeout(Duration::from_secs(30)).unwrap().is_err()),
            2 => {
                assert!(rx.recv_timeout(Duration::from_secs(30)).unwrap().is_err());
                p.kill();
            }
            _ => {
                p.kill();
                assert!(rx.recv_timeout(Duration::from_secs(30)).unwrap().is_err());
            }
        }
        assert!(p.wait_timeout(Some(Duration::from_secs(30))).unwrap());
        if i % 100 == 0 {
            let mut req = Request::new("echo up; sleep 5");
            req.stdin_pipe = true;
            req.timeout_ms = n(20);
            req.on_expiry = Some(OnExpiry::Background);
            let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
            let h = exec.get(r.background_id.as_deref().unwrap()).unwrap();
            h.kill();
            assert!(h.wait_timeout(Some(Duration::from_secs(30))).unwrap());
        }
    }
    assert!(
        eventually(Duration::from_secs(10), || open_fds() == before),
        "descriptors leaked by stdin pipes: {} → {}",
        before,
        open_fds()
    );
    exec.dispose_blocking().unwrap();
    // Dispose also ends the executor's supervisor, whose control socket,
    // pidfd (and the copy the releases keep, to continue a supervisor that
    // a command stopped) and release pipe (both ends) the host held since
    // the first command.
    assert!(
        eventually(Duration::from_secs(10), || open_fds() == before - 5),
        "after dispose: {} → {}",
        before,
        open_fds()
    );
}

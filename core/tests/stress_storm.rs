//! A kill storm: a thousand background processes stopped at once settle in
//! a few sweeps, and an unrelated command is not held up meanwhile.
mod common;
use common::*;

use std::time::{Duration, Instant};

use dsh_core::*;

#[test]
fn a_thousand_kills_at_once_settle_together_and_others_keep_running() {
    let exec = executor_with(|c| c.grace_ms = n(2_000));
    let procs: Vec<Process> = (0..1000)
        .map(|_| exec.start(&spec(&exec, "sleep 300")).unwrap())
        .collect();
    // Every one has started (its output pipe is open) before the storm.
    let other = executor();
    assert_eq!(run(&other, "echo ready").stdout.text, "ready\n");
    let storm = Instant::now();
    for p in &procs {
        assert!(p.kill());
    }
    // Unrelated work during the storm: its latency is not the storm's.
    let during = Instant::now();
    let r = run(&other, "echo during");
    let unrelated = during.elapsed();
    assert_eq!(r.stdout.text, "during\n");
    for p in &procs {
        assert!(
            p.wait_timeout(Some(Duration::from_secs(120))).unwrap(),
            "{} settled",
            p.id()
        );
        assert_eq!(p.status(), Status::Killed);
    }
    let settled = storm.elapsed();
    eprintln!("1000 kills settled in {settled:?}; an unrelated run took {unrelated:?}");
    // Generous bounds (the quadratic sweep took 22-28 s for both).
    assert!(
        unrelated < Duration::from_secs(10),
        "unrelated run held up for {unrelated:?}"
    );
    assert!(settled < Duration::from_secs(60), "storm took {settled:?}");
    exec.dispose_blocking().unwrap();
    other.dispose_blocking().unwrap();
}

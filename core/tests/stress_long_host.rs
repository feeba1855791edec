//! A day in the life of a long-lived host, compressed: thousands of
//! background starts, reads and polls. Memory stays flat and the spill
//! directory stays bounded by the retention policy.
mod common;
use common::*;

use std::time::Duration;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn thousands_of_starts_reads_and_polls_keep_memory_flat_and_spills_bounded() {
    let exec = executor_with(|c| {
        c.max_output_bytes = n(1_000);
        c.retain_settled = n(50);
    });
    let round = |count: usize| {
        let procs: Vec<_> = (0..count)
            .map(|i| {
                exec.start(&spec(&exec, &format!("seq 1 {}", 500 + i % 7)))
                    .unwrap()
            })
            .collect();
        for p in &procs {
            // Polls that time out, as a harness checking on a task does.
            for _ in 0..20 {
                if p.wait_timeout(Some(Duration::ZERO)).unwrap() {
                    break;
                }
                let _ = p.read_output();
            }
            assert!(p.wait_timeout(Some(Duration::from_secs(60))).unwrap());
            let _ = p.read_output();
        }
    };
    round(1_000); // warm up: allocator pools, thread caches
    let before = rss_kib();
    for _ in 0..4 {
        round(1_000);
    }
    let after = rss_kib();
    let spill_files = std::fs::read_dir(exec.spill_dir().unwrap()).unwrap().count();
    eprintln!("RSS {before} KiB -> {after} KiB after 4000 more starts; {spill_files} spill files");
    assert!(exec.list().len() <= 50, "retention keeps the registry bounded");
    assert!(
        spill_files <= 2 * 50,
        "{spill_files} spill files for 50 retained processes"
    );
    // Each settled process used to hold up to 2 × 1 KB of window plus its
    // registry entry forever: 4000 of them would be > 30 MiB.
    assert!(
        after < before + 8 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    exec.dispose_blocking().unwrap();
}

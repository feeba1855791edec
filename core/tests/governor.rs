//! The governor (docs/limits.md): per-command limits enforced before the
//! first instruction and inherited by every descendant, the limit that
//! ended a command reported as a kernel fact, and fail-closed when a limit
//! cannot be enforced.
mod common;
use common::*;

use dsh_core::*;

fn limited(exec: &Executor, command: &str, limits: LimitsInput) -> RunResult {
    let mut req = Request::new(command);
    req.limits = Some(limits);
    req.timeout_ms = n(60_000);
    exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap()
}

#[test]
fn smoke() {
    let exec = executor();
    let r = limited(
        &exec,
        "echo hi; cat /proc/self/cgroup; ulimit -n; ulimit -t; ulimit -f",
        LimitsInput {
            memory_bytes: n(256 << 20),
            processes: n(50),
            cpu_seconds: n(5),
            file_size_bytes: n(1 << 20),
            open_files: n(77),
        },
    );
    println!("{r:#?}");
}

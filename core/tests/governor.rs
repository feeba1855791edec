//! The governor (docs/limits.md): per-command limits enforced before the
//! first instruction and inherited by every descendant, the limit that
//! ended a command reported as a kernel fact, and fail-closed when a limit
//! cannot be enforced. Risky commands (a fork bomb, a memory hog, a spin)
//! run under a run timeout, so a limit that failed ends as a timeout, not a
//! hung suite; the fork bomb first checks that its group is limited.
mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use dsh_core::*;

fn limits() -> LimitsInput {
    LimitsInput::default()
}

fn request(command: &str, limits: LimitsInput) -> Request {
    let mut req = Request::new(command);
    req.limits = Some(limits);
    req.timeout_ms = n(60_000);
    req
}

fn limited(exec: &Executor, command: &str, limits: LimitsInput) -> RunResult {
    exec.run_blocking(&exec.resolve(request(command, limits)).unwrap(), None)
        .unwrap()
}

fn supported(kind: LimitKind) -> bool {
    let m = limits_support().get(kind).unwrap();
    if m == Mechanism::Unsupported {
        // The VM stage (scripts/vm-test) is where cgroup v2 is proven:
        // there a missing mechanism is a failure, not a skip.
        assert!(
            std::env::var_os("DSH_VM_TEST").is_none(),
            "the VM must enforce the {kind} limit"
        );
        common::skip(format!("this host cannot enforce the {kind} limit"));
        return false;
    }
    true
}

/// Whether this host puts the `kind` limit in a cgroup v2 group.
fn on_v2(kind: LimitKind) -> bool {
    limits_support().get(kind) == Some(Mechanism::CgroupV2)
}

/// Where the cgroup v2 hierarchy is mounted.
fn v2_mount() -> Option<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .ok()?
        .lines()
        .find(|l| l.contains(" - cgroup2 "))
        .and_then(|l| l.split(' ').nth(4).map(PathBuf::from))
}

fn has(program: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        common::skip(format!("{program} is not installed"));
    }
    found
}

/// Every group directory a supervisor of this process made (dsh.<pid>.<n>).
fn groups_of(supervisor: i32) -> Vec<PathBuf> {
    let prefix = format!("dsh.{supervisor}.");
    let mut found = Vec::new();
    let mut look_in = |dir: &Path| {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) && !found.contains(&e.path()) {
                    found.push(e.path());
                }
            }
        }
    };
    let v2 = on_v2(LimitKind::Memory) || on_v2(LimitKind::Processes);
    for line in std::fs::read_to_string("/proc/self/cgroup").unwrap().lines() {
        if let (true, Some(path), Some(mount)) = (v2, line.strip_prefix("0::"), v2_mount()) {
            // The host's group, or its parent once the host moved into a
            // leaf of its own (docs/limits.md).
            let own = mount.join(path.trim_start_matches('/'));
            look_in(&own);
            if let Some(parent) = own.parent().filter(|p| p.starts_with(&mount)) {
                look_in(parent);
            }
            continue;
        }
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        for c in ["memory", "pids"] {
            if controllers.split(',').any(|x| x == c) {
                look_in(
                    &Path::new("/sys/fs/cgroup")
                        .join(c)
                        .join(path.trim_start_matches('/')),
                );
            }
        }
    }
    found
}

/// The lines of a `/proc/self/cgroup` in `text` that name a limit's
/// hierarchy: v1 `pids` and `memory`, and the v2 line where limits are on v2.
fn cgroup_lines(text: &str) -> Vec<&str> {
    let v2 = on_v2(LimitKind::Memory) || on_v2(LimitKind::Processes);
    text.lines()
        .filter(|l| l.contains(":pids:") || l.contains(":memory:") || (v2 && l.starts_with("0::")))
        .collect()
}

// ---- resolve: defaults, clamps, named errors ---------------------------

#[test]
fn limits_come_from_config_and_a_request_may_only_tighten_them() {
    let exec = executor_with(|c| {
        c.limits = Some(LimitsInput {
            memory_bytes: n(1 << 30),
            processes: n(100),
            ..limits()
        })
    });
    let spec = exec.resolve(Request::new("true")).unwrap();
    assert_eq!(
        spec.limits,
        Limits {
            memory_bytes: Some(1 << 30),
            processes: Some(100),
            ..Limits::default()
        }
    );
    let spec = exec
        .resolve(request(
            "true",
            LimitsInput {
                memory_bytes: n(4u64 << 30),
                processes: n(10),
                open_files: n(64),
                ..limits()
            },
        ))
        .unwrap();
    assert_eq!(
        spec.limits,
        Limits {
            memory_bytes: Some(1 << 30),
            processes: Some(10),
            open_files: Some(64),
            ..Limits::default()
        },
        "clamped to the config's, tightened where asked, the config's kept where not given"
    );
    // A spec that loosens or drops a configured limit is refused.
    let mut loose = spec.clone();
    loose.limits.processes = Some(1000);
    let e = exec.run_blocking(&loose, None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "spec.limits.processes must be no greater than 100, got 1000"
    );
    loose.limits.processes = None;
    let e = exec.run_blocking(&loose, None).unwrap_err();
    assert!(
        e.to_string().starts_with("spec.limits.processes must be set"),
        "{e}"
    );
}

#[test]
fn a_bad_limit_is_an_error_naming_its_field() {
    let exec = executor();
    for (kind, value, problem) in [
        (LimitKind::Memory, 1.5, "must be a whole number, got 1.5"),
        (
            LimitKind::Processes,
            0.0,
            "must be a positive finite number, got 0",
        ),
        (LimitKind::Cpu, -1.0, "must be a positive finite number, got -1"),
        (
            LimitKind::FileSize,
            f64::NAN,
            "must be a positive finite number, got NaN",
        ),
        (
            LimitKind::OpenFiles,
            1e17,
            "must be no greater than 9007199254740991, got 100000000000000000",
        ),
    ] {
        let mut l = limits();
        l.set(kind, Some(Num(value)));
        let e = exec.resolve(request("true", l)).unwrap_err();
        let field = kind.field().name(NameStyle::Snake);
        assert_eq!(e.to_string(), format!("request.{field} {problem}"));
        assert!(matches!(e, DshError::InvalidArgument { .. }));
        let e = Executor::new(ConfigInput {
            limits: Some(l),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.to_string(), format!("config.{field} {problem}"));
    }
    assert_eq!(
        LimitKind::Memory.field().name(NameStyle::Camel),
        "limits.memoryBytes"
    );
}

// ---- the facts -----------------------------------------------------------

#[test]
fn no_limit_no_cause_and_enforcement_names_each_mechanism() {
    let exec = executor();
    let r = run(&exec, "true");
    assert_eq!((r.limit, r.limits_enforcement.is_empty()), (None, true));
    if !supported(LimitKind::Memory) || !supported(LimitKind::Processes) {
        return;
    }
    let r = limited(
        &exec,
        "echo $(ulimit -t) $(ulimit -f) $(ulimit -n); cat /proc/self/cgroup",
        LimitsInput {
            memory_bytes: n(256 << 20),
            processes: n(64),
            cpu_seconds: n(30),
            file_size_bytes: n(1 << 20),
            open_files: n(77),
        },
    );
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr.text);
    assert_eq!(r.limit, None, "a command that ended by itself within its limits");
    // ulimit -f counts 1024-byte blocks.
    assert_eq!(r.stdout.text.lines().next(), Some("30 1024 77"));
    let groups = cgroup_lines(&r.stdout.text);
    // v1: a group in each hierarchy; v2: one group for both.
    let expected = if on_v2(LimitKind::Memory) && on_v2(LimitKind::Processes) {
        1
    } else {
        2
    };
    assert_eq!(groups.len(), expected, "{}", r.stdout.text);
    assert!(groups.iter().all(|l| l.contains("/dsh.")), "{groups:?}");
    let e = r.limits_enforcement;
    assert_eq!(
        [
            e.memory_bytes,
            e.processes,
            e.cpu_seconds,
            e.file_size_bytes,
            e.open_files
        ],
        [
            limits_support().memory_bytes,
            limits_support().processes,
            Some(Mechanism::Rlimit),
            Some(Mechanism::Rlimit),
            Some(Mechanism::Rlimit)
        ]
    );
    // Only what was set is reported.
    let r = limited(
        &exec,
        "true",
        LimitsInput {
            cpu_seconds: n(5),
            ..limits()
        },
    );
    assert_eq!(
        r.limits_enforcement.entries().collect::<Vec<_>>(),
        [(LimitKind::Cpu, Mechanism::Rlimit)]
    );
}

#[test]
fn a_fork_bomb_under_a_process_limit_ends_with_processes_and_the_host_stays_responsive() {
    if !supported(LimitKind::Processes) {
        return;
    }
    let exec = executor();
    // The bomb goes off only inside a group whose pids.max is 32: if the
    // limit were not applied, it does not start (and the test fails).
    let bomb = r#"
        g=$(sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup); f=/sys/fs/cgroup/pids$g/pids.max
        [ -n "$g" ] || { g=$(sed -n 's/^0:://p' /proc/self/cgroup); f=/sys/fs/cgroup$g/pids.max; }
        [ "$(cat "$f")" = 32 ] || { echo "not limited: $f" >&2; exit 9; }
        b() { b | b & }; b; wait
    "#;
    let started = Instant::now();
    let other = std::thread::spawn(|| {
        // Meanwhile another executor keeps working.
        let e = executor();
        let mut times = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            assert_eq!(run(&e, "echo alive").stdout.text, "alive\n");
            times.push(t.elapsed());
        }
        times
    });
    let r = limited(
        &exec,
        bomb,
        LimitsInput {
            processes: n(32),
            ..limits()
        },
    );
    let others = other.join().unwrap();
    assert_eq!(r.limit, Some(LimitKind::Processes), "{r:?}");
    assert!(!r.timed_out && !r.aborted);
    assert_eq!(r.survivors, 0);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "ended by the limit, not by the timeout"
    );
    assert!(
        others.iter().all(|t| *t < Duration::from_secs(10)),
        "the host stayed responsive: {others:?}"
    );
    let sup = exec.supervisor_pid().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || groups_of(sup).is_empty()),
        "{:?}",
        groups_of(sup)
    );
}

#[test]
fn allocating_past_the_memory_limit_ends_with_memory() {
    if !supported(LimitKind::Memory) || !has("python3") {
        return;
    }
    let exec = executor();
    // The hog is a child of the shell (not the leader): the OOM killer ends
    // it, the governor reads the kernel's count and ends the rest.
    let r = limited(
        &exec,
        "python3 -c 'x = bytearray(b\"\\x01\") * (512 << 20); print(len(x))'; sleep 30",
        LimitsInput {
            memory_bytes: n(64 << 20),
            ..limits()
        },
    );
    assert_eq!(r.limit, Some(LimitKind::Memory), "{r:?}");
    assert!(!r.timed_out && !r.aborted);
    assert_eq!(r.stdout.text, "", "the allocation never completed");
    // Within the limit, the same allocation works.
    let r = limited(
        &exec,
        "python3 -c 'x = bytearray(b\"\\x01\") * (16 << 20); print(len(x))'",
        LimitsInput {
            memory_bytes: n(256 << 20),
            ..limits()
        },
    );
    assert_eq!(
        (r.exit_code, r.limit, r.stdout.text.as_str()),
        (Some(0), None, "16777216\n")
    );
}

/// A reached memory limit ends the whole tree before the shell can go on
/// (docs/limits.md): the allocating child is held, not killed alone, and
/// the governor ends every member. A caller cannot mistake the ending for
/// success. Foreground and background, several rounds (the shell racing
/// the governor is what failed: exit 0, `shell-continues`).
#[test]
fn a_reached_memory_limit_ends_the_tree_before_the_shell_goes_on() {
    if !supported(LimitKind::Memory) || !has("python3") {
        return;
    }
    let exec = executor();
    let command = "python3 -c 'x = bytearray(500 << 20)'; echo shell-continues";
    let memory = || LimitsInput {
        memory_bytes: n(100 << 20),
        ..limits()
    };
    for round in 0..4 {
        let r = limited(&exec, command, memory());
        assert_eq!(r.limit, Some(LimitKind::Memory), "round {round}: {r:?}");
        assert_eq!(r.stdout.text, "", "round {round}: the shell went on: {r:?}");
        assert_eq!(
            (r.exit_code, r.signal.as_deref()),
            (None, Some("SIGKILL")),
            "round {round}: {r:?}"
        );
        let p = exec
            .start(&exec.resolve(request(command, memory())).unwrap())
            .unwrap();
        assert!(p.wait_timeout(Some(Duration::from_secs(60))).unwrap());
        assert_eq!(p.limit(), Some(LimitKind::Memory), "round {round}: {p:?}");
        assert_eq!(p.exit_code(), None, "round {round}: {p:?}");
        assert!(
            !p.read_output().delta.contains("shell-continues"),
            "round {round}: {p:?}"
        );
    }
}

#[test]
fn writing_past_the_file_size_limit_ends_with_file_size() {
    let dir = TempDir::new_in(&std::env::temp_dir(), "dsh-governor-fsize");
    let exec = executor();
    let fsize = || LimitsInput {
        file_size_bytes: n(1 << 20),
        ..limits()
    };
    // The writer is the command's process: the kernel's SIGXFSZ ends it,
    // and that is the fact.
    let r = limited(&exec, &format!("exec yes > {}/big.file", dir.display()), fsize());
    assert_eq!(r.limit, Some(LimitKind::FileSize), "{r:?}");
    assert_eq!(r.signal.as_deref(), Some("SIGXFSZ"));
    assert_eq!(std::fs::metadata(dir.join("big.file")).unwrap().len(), 1 << 20);
    // The writer is a child of the shell: the limit holds just the same,
    // but the kernel tells only the shell, which exits 128+25 — an exit
    // code any command could choose, so not reported as the cause.
    std::fs::remove_file(dir.join("big.file")).unwrap();
    let r = limited(
        &exec,
        &format!("yes > {}/big.file; echo after", dir.display()),
        fsize(),
    );
    assert_eq!(
        (r.exit_code, r.limit, r.stdout.text.as_str()),
        (Some(0), None, "after\n")
    );
    assert!(
        r.stderr.text.contains("File size limit exceeded"),
        "{}",
        r.stderr.text
    );
    assert_eq!(std::fs::metadata(dir.join("big.file")).unwrap().len(), 1 << 20);
}

#[test]
fn a_cpu_spin_past_the_cpu_limit_ends_with_cpu() {
    let exec = executor();
    let r = limited(
        &exec,
        "while :; do :; done",
        LimitsInput {
            cpu_seconds: n(1),
            ..limits()
        },
    );
    assert_eq!(r.limit, Some(LimitKind::Cpu), "{r:?}");
    assert_eq!(r.signal.as_deref(), Some("SIGXCPU"));
    assert!(!r.timed_out);
}

#[test]
fn a_cpu_signal_sent_by_kill_is_not_the_cpu_limit() {
    // The command's own SIGXCPU, long before its CPU time reached the
    // limit: the kernel did not stop it, so no limit is reported.
    let exec = executor();
    let r = limited(
        &exec,
        "kill -XCPU $$",
        LimitsInput {
            cpu_seconds: n(30),
            ..limits()
        },
    );
    assert_eq!(r.signal.as_deref(), Some("SIGXCPU"));
    assert_eq!(r.limit, None, "{r:?}");
}

#[test]
fn a_process_that_ignores_sigxcpu_is_ended_by_the_cpu_limit_and_says_so() {
    // Past the soft limit the kernel sends SIGXCPU, which this spin ignores;
    // at the hard limit (one second later) it sends SIGKILL: still the
    // cpu limit, and the result must say so.
    let exec = executor();
    let r = limited(
        &exec,
        "trap '' XCPU; while :; do :; done",
        LimitsInput {
            cpu_seconds: n(1),
            ..limits()
        },
    );
    assert_eq!(r.signal.as_deref(), Some("SIGKILL"), "{r:?}");
    assert_eq!(r.limit, Some(LimitKind::Cpu), "{r:?}");
    assert!(!r.timed_out);
}

#[test]
fn open_files_are_refused_past_the_limit_and_never_reported_as_a_cause() {
    if !has("python3") {
        return;
    }
    let exec = executor();
    let r = limited(
        &exec,
        "python3 -c '
import os
fds = []
try:
    while True: fds.append(os.open(\"/dev/null\", os.O_RDONLY))
except OSError as e: print(e.errno == 24, len(fds) < 40)
'",
        LimitsInput {
            open_files: n(40),
            ..limits()
        },
    );
    assert_eq!(r.stdout.text, "True True\n", "{}", r.stderr.text);
    assert_eq!((r.exit_code, r.limit), (Some(0), None));
    assert_eq!(r.limits_enforcement.open_files, Some(Mechanism::Rlimit));
}

#[test]
fn a_timeout_is_not_a_limit() {
    let exec = executor();
    let mut req = request(
        "sleep 30",
        LimitsInput {
            cpu_seconds: n(10),
            processes: n(50),
            ..limits()
        },
    );
    req.timeout_ms = n(200);
    let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
    assert_eq!((r.timed_out, r.limit), (true, None));
}

// ---- inherited by every descendant ---------------------------------------

#[test]
fn descendants_that_setsid_or_double_fork_stay_limited() {
    if !supported(LimitKind::Processes) || !supported(LimitKind::Memory) {
        return;
    }
    let dir = TempDir::new_in(&std::env::temp_dir(), "dsh-governor-desc");
    let exec = executor();
    std::fs::write(
        dir.join("probe"),
        "echo $(ulimit -t) $(ulimit -f) $(ulimit -n); grep -E ':(pids|memory):|^0::/.*dsh\\.' /proc/self/cgroup\n",
    )
    .unwrap();
    // The probe's lines: the rlimits, then the group of each hierarchy
    // (v1: memory and pids; v2: one for both).
    let (memory_v2, pids_v2) = (on_v2(LimitKind::Memory), on_v2(LimitKind::Processes));
    let lines = 1 + usize::from(!memory_v2) + usize::from(!pids_v2) + usize::from(memory_v2 || pids_v2);
    let r = limited(
        &exec,
        &format!(
            "bash {d}/probe > {d}/leader; setsid bash {d}/probe > {d}/setsid; ( ( bash {d}/probe > {d}/double & ) & ); \
             sleep 0.3",
            d = dir.display()
        ),
        LimitsInput {
            memory_bytes: n(256 << 20),
            processes: n(64),
            cpu_seconds: n(30),
            file_size_bytes: n(1 << 20),
            open_files: n(77),
        },
    );
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr.text);
    let leader = std::fs::read_to_string(dir.join("leader")).unwrap();
    assert!(
        leader.starts_with("30 1024 77\n") && leader.contains("/dsh."),
        "{leader}"
    );
    for name in ["setsid", "double"] {
        assert!(
            eventually(Duration::from_secs(5), || std::fs::read_to_string(dir.join(name))
                .is_ok_and(|s| s.lines().count() == lines)),
            "{name}"
        );
        assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), leader, "{name}");
    }
}

// ---- fail closed ------------------------------------------------------------

#[test]
fn a_limit_the_kernel_refuses_fails_closed_and_nothing_runs() {
    let dir = TempDir::new_in(&std::env::temp_dir(), "dsh-governor-closed");
    let marker = dir.join("ran");
    let exec = executor();
    // Past fs.nr_open: no process may have that many descriptors, root
    // included, so the command's own setrlimit fails.
    let spec = exec
        .resolve(request(
            &format!("touch {}", marker.display()),
            LimitsInput {
                open_files: n(1u64 << 40),
                ..limits()
            },
        ))
        .unwrap();
    let e = exec.run_blocking(&spec, None).unwrap_err();
    match &e {
        DshError::LimitUnavailable { limit, message } => {
            assert_eq!(*limit, LimitKind::OpenFiles);
            assert!(message.contains("limits.open_files"), "{message}");
        }
        other => panic!("expected LimitUnavailable, got {other:?}"),
    }
    // In the background: settled as killed, never ran.
    let p = exec.start(&spec).unwrap();
    assert!(p.wait_timeout(Some(Duration::from_secs(30))).unwrap());
    assert_eq!(p.status(), Status::Killed);
    assert!(
        p.read_output().delta.contains("limit unavailable"),
        "spawn failure is reported"
    );
    assert!(!marker.exists(), "nothing ran");
    assert_eq!(
        exec.supervisor_pid().map(groups_of).unwrap_or_default(),
        Vec::<PathBuf>::new()
    );
}

// ---- nothing left behind -----------------------------------------------------

#[test]
fn groups_are_removed_after_the_command_and_background_jobs_keep_theirs_until_dispose() {
    if !supported(LimitKind::Processes) {
        return;
    }
    let exec = executor();
    let r = limited(
        &exec,
        "true",
        LimitsInput {
            processes: n(10),
            memory_bytes: n(64 << 20),
            ..limits()
        },
    );
    assert_eq!(r.exit_code, Some(0));
    let sup = exec.supervisor_pid().unwrap();
    assert!(groups_of(sup).is_empty(), "{:?}", groups_of(sup));
    // A job left running on purpose keeps its group (and its limit) ...
    let r = limited(
        &exec,
        "sleep 300 >/dev/null 2>&1 & echo $!",
        LimitsInput {
            processes: n(10),
            ..limits()
        },
    );
    let job: i32 = r.stdout.text.trim().parse().unwrap();
    assert!(alive(job));
    let groups = groups_of(sup);
    assert_eq!(groups.len(), 1, "{groups:?}");
    let procs = std::fs::read_to_string(groups[0].join("cgroup.procs")).unwrap();
    assert!(procs.lines().any(|l| l == job.to_string()), "{procs}");
    // ... until dispose ends it and the supervisor removes the group.
    exec.dispose_blocking().unwrap();
    assert!(!alive(job));
    assert!(
        eventually(Duration::from_secs(5), || groups_of(sup).is_empty()),
        "{:?}",
        groups_of(sup)
    );
}

/// The host is SIGKILLed with a limited background command running: its
/// supervisor ends the tree and removes the groups.
#[test]
fn a_killed_host_leaves_no_group_behind() {
    if std::env::var_os("DSH_GOVERNOR_HOST").is_some() {
        // The host: start, report the supervisor and the job, then hang.
        let exec = executor();
        let p = exec
            .start(
                &exec
                    .resolve(request(
                        "sleep 300 & echo $!; wait",
                        LimitsInput {
                            processes: n(10),
                            ..limits()
                        },
                    ))
                    .unwrap(),
            )
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut out = String::new();
        while !out.contains('\n') && Instant::now() < deadline {
            out.push_str(&p.read_output().delta);
            std::thread::sleep(Duration::from_millis(10));
        }
        println!("READY {} {}", exec.supervisor_pid().unwrap(), out.trim());
        std::thread::sleep(Duration::from_secs(120));
        return;
    }
    if !supported(LimitKind::Processes) {
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_killed_host_leaves_no_group_behind",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DSH_GOVERNOR_HOST", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let start = Instant::now();
    while !line.contains("READY ") {
        line.clear();
        if std::io::BufRead::read_line(&mut reader, &mut line).unwrap() == 0
            || start.elapsed() > Duration::from_secs(60)
        {
            child.kill().unwrap();
            panic!("the host never got ready");
        }
    }
    let mut words = line.split("READY ").nth(1).unwrap().split_whitespace();
    let sup: i32 = words.next().unwrap().parse().unwrap();
    let job: i32 = words.next().unwrap().parse().unwrap();
    assert_eq!(groups_of(sup).len(), 1);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || !alive(job)),
        "the job ended with the host"
    );
    assert!(
        eventually(Duration::from_secs(5), || groups_of(sup).is_empty()),
        "{:?}",
        groups_of(sup)
    );
}

/// Runs `req` on another thread and SIGKILLs the executor's supervisor
/// `after` into the run, from outside: where Landlock cannot scope signals
/// (before Linux 6.12) a command can do the same to its `$PPID`, and any
/// process of the same user can. Returns the run's outcome.
fn run_killing_the_supervisor(
    exec: &Executor,
    req: Request,
    after: Duration,
) -> dsh_core::Result<dsh_core::RunResult> {
    let sup = exec
        .supervisor_pid()
        .expect("a warmed-up executor has a supervisor");
    let spec = exec.resolve(req).unwrap();
    let runner = exec.clone();
    let run = std::thread::spawn(move || runner.run_blocking(&spec, None));
    std::thread::sleep(after);
    // SAFETY: kill(2) of this process's own child, the supervisor.
    unsafe { libc::kill(sup, libc::SIGKILL) };
    run.join().unwrap()
}

/// The supervisor is SIGKILLed while a command is being started; whatever
/// the run then reports, the dead supervisor cannot remove the groups, and
/// `dispose()` must: nothing of the executor's is left behind. (The
/// loopback group makes the start slow enough for the kill to land before
/// the supervisor's answer.)
#[test]
fn no_group_is_left_after_dispose_when_a_command_killed_its_supervisor() {
    if !supported(LimitKind::Processes) {
        return;
    }
    let loopback = loopback_here();
    for i in 0..8 {
        let exec = executor();
        warm_up(&exec);
        let sup = exec.supervisor_pid().unwrap();
        let mut req = request(
            "sleep 300 >/dev/null 2>&1 & exec sleep 301",
            LimitsInput {
                processes: n(20),
                memory_bytes: n(256 << 20),
                ..limits()
            },
        );
        if loopback {
            req.sandbox_policy = Some(SandboxPolicyInput {
                mode: SandboxMode::DangerFullAccess,
                workspace_root: None,
                session_id: None,
                network: Some(NetworkPolicy::Loopback),
            });
        }
        // A kill that lands before the start (a new supervisor then runs it)
        // leaves a plain run: its timeout ends it.
        req.timeout_ms = n(3_000);
        // A result (exit status unavailable) or a spawn error: both happen.
        let _ = run_killing_the_supervisor(&exec, req, Duration::from_micros(500 * i));
        exec.dispose_blocking().unwrap();
        let left = groups_of(sup);
        for dir in &left {
            let _ = std::fs::remove_dir(dir);
            // Its loopback group too (best effort: a failing run cleans up).
            for v2 in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"] {
                let _ = std::fs::remove_dir(Path::new(v2).join(dir.file_name().unwrap()));
            }
        }
        assert!(left.is_empty(), "round {i}: {left:?}");
    }
}

#[test]
fn a_reached_limit_ends_even_a_process_that_left_the_tree() {
    if !supported(LimitKind::Processes) {
        return;
    }
    let dir = TempDir::new_in(&std::env::temp_dir(), "dsh-governor-escape");
    let pidfile = dir.join("escapee");
    let exec = executor();
    // The escapee drops the tag (env -i), leaves the session (setsid) and
    // is orphaned (its subshell exits): no sweep can attribute it, but the
    // kernel still counts it in the command's group.
    let r = limited(
        &exec,
        &format!(
            "( env -i setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {p} ); \
             for i in $(seq 40); do sleep 30 & done; wait",
            p = pidfile.display()
        ),
        LimitsInput {
            processes: n(10),
            ..limits()
        },
    );
    assert_eq!(r.limit, Some(LimitKind::Processes), "{r:?}");
    let escapee: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || !alive(escapee)),
        "the escapee was ended"
    );
    let sup = exec.supervisor_pid().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || groups_of(sup).is_empty()),
        "{:?}",
        groups_of(sup)
    );
}

#[test]
fn a_group_kept_by_a_background_job_is_removed_once_the_job_has_ended() {
    if !supported(LimitKind::Processes) {
        return;
    }
    let exec = executor();
    let r = limited(
        &exec,
        "sleep 0.5 >/dev/null 2>&1 & echo $!",
        LimitsInput {
            processes: n(10),
            ..limits()
        },
    );
    let job: i32 = r.stdout.text.trim().parse().unwrap();
    let sup = exec.supervisor_pid().unwrap();
    assert_eq!(groups_of(sup).len(), 1, "kept while the job runs");
    assert!(eventually(Duration::from_secs(10), || !alive(job)));
    // The next limited command's cleanup removes it, long before dispose.
    limited(
        &exec,
        "true",
        LimitsInput {
            processes: n(10),
            ..limits()
        },
    );
    assert!(groups_of(sup).is_empty(), "{:?}", groups_of(sup));
}

#[test]
fn limits_and_the_network_filter_travel_with_a_program_too_large_to_go_inline() {
    let exec = executor();
    let mut req = request(
        "echo ${#BIG} $(ulimit -n) $(ulimit -t)",
        LimitsInput {
            open_files: n(55),
            cpu_seconds: n(9),
            ..limits()
        },
    );
    // Past the 32 KiB a request carries inline: the program, with the
    // limits and the filter before it, goes on the command's socket.
    req.env = Some(map(&[("BIG", &"x".repeat(64 * 1024))]));
    req.sandbox_policy = Some(SandboxPolicyInput {
        mode: SandboxMode::DangerFullAccess,
        workspace_root: None,
        session_id: None,
        network: Some(NetworkPolicy::Deny),
    });
    let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
    assert_eq!(r.stdout.text, "65536 55 9\n", "{}", r.stderr.text);
    let r = exec
        .run_blocking(
            &{
                let mut req = request("exec 3<>/dev/tcp/127.0.0.1/9", limits());
                req.env = Some(map(&[("BIG", &"x".repeat(64 * 1024))]));
                req.sandbox_policy = Some(SandboxPolicyInput {
                    mode: SandboxMode::DangerFullAccess,
                    workspace_root: None,
                    session_id: None,
                    network: Some(NetworkPolicy::Deny),
                });
                exec.resolve(req).unwrap()
            },
            None,
        )
        .unwrap();
    assert!(r.stderr.text.contains("Permission denied"), "{}", r.stderr.text);
}

/// Whether `network: loopback` can run here (root and a writable cgroup v2).
fn loopback_here() -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    root && std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains(" - cgroup2 ") && l.split(' ').nth(5).is_some_and(|o| o.starts_with("rw")))
}

/// Live processes whose command line is exactly `sleep <arg>`.
fn sleeps(arg: &str) -> Vec<i32> {
    let want = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want.as_bytes()))
        .filter(|pid| alive(*pid))
        .collect()
}

#[test]
fn a_supervisor_killed_while_starting_leaves_nothing_running() {
    // The supervisor can die between starting the command and reporting
    // its pid (killed from outside, see `run_killing_the_supervisor`). Whether the run then says "the
    // supervisor ended while starting" or gives a result, nothing of the
    // command may keep running once it returns. Limits (and loopback, where
    // available) make the start slower, so the race is met more often.
    let groups = supported(LimitKind::Processes) && supported(LimitKind::Memory);
    for round in 0..12 {
        let exec = executor();
        warm_up(&exec);
        let (a, b) = (
            format!("{}", 40_000 + round * 2),
            format!("{}", 40_001 + round * 2),
        );
        let command = format!("sleep {a} >/dev/null 2>&1 & exec sleep {b}");
        let mut req = if groups {
            request(
                &command,
                LimitsInput {
                    processes: n(20),
                    memory_bytes: n(256 << 20),
                    ..limits()
                },
            )
        } else {
            Request::new(command)
        };
        if groups && loopback_here() {
            req.sandbox_policy = Some(SandboxPolicyInput {
                mode: SandboxMode::DangerFullAccess,
                workspace_root: None,
                session_id: None,
                network: Some(NetworkPolicy::Loopback),
            });
        }
        req.timeout_ms = n(3_000);
        let outcome = run_killing_the_supervisor(&exec, req, Duration::from_micros(300 * round));
        assert!(
            eventually(Duration::from_secs(10), || sleeps(&a).is_empty()
                && sleeps(&b).is_empty()),
            "round {round}: {:?} / {:?} still run after {outcome:?}",
            sleeps(&a),
            sleeps(&b)
        );
        exec.dispose_blocking().unwrap();
    }
}

//! `dsh-bench latency ITER HOST_MB` | `dsh-bench confined ITER` | `dsh-bench throughput BYTES`
//! | `dsh-bench supervisor ITER` | `dsh-bench host-death ROUNDS COMMANDS` | `dsh-bench terminal-spawn ITER`
//! Prints one JSON line per measurement (see bench/report.py).

use std::time::Instant;

use dsh_core::{ConfigInput, Executor, Num, Request, SandboxMode, SandboxPolicyInput, TerminalRequest};

fn report(bench: &str, host_mb: u64, samples: Vec<f64>, extra: &str) {
    report_as(bench, "dsh (Rust)", host_mb, samples, extra)
}

fn report_as(bench: &str, implementation: &str, host_mb: u64, mut samples: Vec<f64>, extra: &str) {
    samples.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{{\"bench\":\"{bench}\",\"impl\":\"{implementation}\",\"host_mb\":{host_mb},\"median_us\":{:.3},\"min_us\":{:.3},\"max_us\":{:.3},\"n\":{}{extra}}}",
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
        samples.len()
    );
}

/// `mb` MiB of touched memory, so the host's page tables are that large.
fn ballast(mb: u64) -> Vec<u8> {
    let mut v = vec![0u8; (mb as usize) << 20];
    for i in (0..v.len()).step_by(4096) {
        v[i] = 1;
    }
    v
}

/// How many floor spawns, then as many dsh runs, make one block of the
/// interleaved measurement; the first of each block is left out, as it
/// pays for what the other kind left behind (dsh's executor finishes a
/// run's bookkeeping after it returned).
const BLOCK: usize = 10;

/// Microseconds per `op` and per floor spawn of `bash -c true` (posix_spawn
/// and waitpid from this process), interleaved in blocks of [`BLOCK`],
/// after five warm-up rounds: both meet the machine as it is at that
/// moment, so their ratio does not drift with it. Returns (floor, op).
fn time_interleaved(
    iter: usize,
    mut op: impl FnMut() -> Result<(), dsh_core::DshError>,
) -> Result<(Vec<f64>, Vec<f64>), dsh_core::DshError> {
    for _ in 0..5 {
        floor_once();
        op()?;
    }
    let (mut floor, mut dsh) = (Vec::with_capacity(iter), Vec::with_capacity(iter));
    while dsh.len() < iter {
        for i in 0..BLOCK {
            let t = Instant::now();
            floor_once();
            if i > 0 {
                floor.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        for i in 0..BLOCK {
            let t = Instant::now();
            op()?;
            if i > 0 {
                dsh.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    floor.truncate(iter);
    dsh.truncate(iter);
    Ok((floor, dsh))
}

/// The floor's spawn: `bash -c true` by posix_spawn, waited for.
fn floor_once() {
    extern "C" {
        static environ: *const *mut libc::c_char;
    }
    let argv = [
        c"bash".as_ptr(),
        c"-c".as_ptr(),
        c"true".as_ptr(),
        std::ptr::null(),
    ];
    let mut pid = 0;
    // SAFETY: argv is NULL-terminated and outlives the call; environ is
    // the process's environment, which nothing here changes meanwhile.
    let spawned = unsafe {
        libc::posix_spawn(
            &mut pid,
            c"/bin/bash".as_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            argv.as_ptr() as *const *mut libc::c_char,
            environ,
        )
    };
    assert_eq!(spawned, 0, "posix_spawn of /bin/bash failed");
    // SAFETY: pid is our child; a null status pointer is allowed.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
}

/// Microseconds per `run_blocking(spec)`, after five warm-up runs.
fn time_runs(exec: &Executor, spec: &dsh_core::Spec, iter: usize) -> Result<Vec<f64>, dsh_core::DshError> {
    for _ in 0..5 {
        exec.run_blocking(spec, None)?;
    }
    (0..iter)
        .map(|_| {
            let t = Instant::now();
            exec.run_blocking(spec, None)?;
            Ok(t.elapsed().as_secs_f64() * 1e6)
        })
        .collect()
}

fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    sorted[sorted.len() / 2]
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .map(str::to_owned)
        })
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("latency") => {
            let iter: usize = args[2].parse()?;
            let mb: u64 = args[3].parse()?;
            let _ballast = ballast(mb);
            let exec = Executor::new(ConfigInput::default())?;
            let spec = exec.resolve(Request::new("true"))?;
            let (floor, dsh) = time_interleaved(iter, || exec.run_blocking(&spec, None).map(drop))?;
            let paired = format!(",\"paired_floor_us\":{:.3}", median(&floor));
            report("run_true", mb, dsh, &paired);
            exec.dispose_blocking()?;
        }
        Some("spawn") => {
            // A spawned program (docs/spawn.md) of `bash -c true` until it
            // settled, streams collected, beside `run` of `true`.
            let iter: usize = args[2].parse()?;
            let exec = Executor::new(ConfigInput::default())?;
            let spec = exec.resolve_spawn(dsh_core::SpawnRequest {
                argv: vec!["bash".into(), "-c".into(), "true".into()],
                ..Default::default()
            })?;
            let once = || -> Result<f64, dsh_core::DshError> {
                let t = Instant::now();
                let s = exec.spawn(&spec)?;
                s.process.wait_timeout(None)?;
                Ok(t.elapsed().as_secs_f64() * 1e6)
            };
            let (floor, samples) = time_interleaved(iter, || once().map(drop))?;
            let paired = format!(",\"paired_floor_us\":{:.3}", median(&floor));
            report_as("spawn_true", "dsh (Rust)", 0, samples, &paired);
            exec.dispose_blocking()?;
        }
        Some("terminal-spawn") => {
            // A terminal session of `true`, from the spawn until its output
            // has ended, against `run` of `true` on the same executor.
            // `bash -c true` as the floor and `run` do, and `true` itself.
            let iter: usize = args[2].parse()?;
            let exec = Executor::new(ConfigInput::default())?;
            for (label, request) in [
                ("dsh (Rust, bash -c true)", TerminalRequest::command("true")),
                ("dsh (Rust, argv true)", TerminalRequest::argv(["true"])),
            ] {
                let spec = exec.resolve_terminal(request)?;
                let once = || -> Result<f64, dsh_core::DshError> {
                    let t = Instant::now();
                    let term = exec.spawn_terminal(&spec)?;
                    while !term.read_output_timeout(None)?.ended {}
                    Ok(t.elapsed().as_secs_f64() * 1e6)
                };
                for _ in 0..5 {
                    once()?;
                }
                let samples = (0..iter).map(|_| once()).collect::<Result<Vec<_>, _>>()?;
                report_as("terminal_spawn", label, 0, samples, "");
            }
            exec.dispose_blocking()?;
        }
        Some("terminal-echo") => {
            // Keystroke -> echo through a raw-mode `cat`, blocking calls.
            let iter: usize = args[2].parse()?;
            let exec = Executor::new(ConfigInput::default())?;
            let spec = exec.resolve_terminal(TerminalRequest::argv([
                "bash",
                "-c",
                "stty raw -echo; printf ready; exec cat",
            ]))?;
            let term = exec.spawn_terminal(&spec)?;
            let mut seen = String::new();
            while !seen.contains("ready") {
                seen += &term.read_output_timeout(None)?.text;
            }
            let mut samples = Vec::new();
            for i in 0..iter + 5 {
                let key = [b'a' + (i % 26) as u8];
                let t = Instant::now();
                term.write_blocking(&key)?;
                let mut got = String::new();
                while !got.as_bytes().contains(&key[0]) {
                    got += &term.read_output_timeout(None)?.text;
                }
                if i >= 5 {
                    samples.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            report("terminal_echo", 0, samples, "");
            term.terminate_blocking()?;
            exec.dispose_blocking()?;
        }
        Some("terminal-throughput") => {
            // `head -c BYTES /dev/zero` through a terminal, read until the end.
            let bytes: usize = args[2].parse()?;
            let exec = Executor::new(ConfigInput::default())?;
            let spec = exec.resolve_terminal(TerminalRequest::argv([
                "head",
                "-c",
                &bytes.to_string(),
                "/dev/zero",
            ]))?;
            let mut samples = Vec::new();
            for _ in 0..3 {
                let t = Instant::now();
                let term = exec.spawn_terminal(&spec)?;
                let mut got = 0;
                loop {
                    let read = term.read_output_timeout(None)?;
                    got += read.text.len();
                    if read.ended {
                        break;
                    }
                }
                samples.push(t.elapsed().as_secs_f64() * 1e6);
                assert_eq!(got, bytes, "every byte arrives");
            }
            report(
                "terminal_throughput",
                0,
                samples,
                &format!(",\"bytes\":{bytes},\"lost_bytes\":0"),
            );
            exec.dispose_blocking()?;
        }
        Some("confined") => {
            // run `true` under each sandbox mode, to price confinement
            // (with the read-only mounts where this host has them: the
            // row says which).
            let iter: usize = args[2].parse()?;
            let exec = Executor::new(ConfigInput::default())?;
            let mounts = format!(",\"metadata\":{}", dsh_core::metadata_unavailable().is_none());
            for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
                let mut req = Request::new("true");
                req.sandbox_policy = Some(SandboxPolicyInput {
                    mode,
                    workspace_root: None,
                    session_id: None,
                    network: None,
                });
                let spec = exec.resolve(req)?;
                report_as(
                    "run_true",
                    &format!("dsh (Rust, {mode})"),
                    0,
                    time_runs(&exec, &spec, iter)?,
                    &mounts,
                );
            }
            // The network policy alone (the seccomp filter and Landlock's
            // TCP rules; for loopback the cgroup BPF programs too), and
            // with the files confined. `allow` is the unconfined row.
            for (mode, network, label) in [
                (
                    SandboxMode::DangerFullAccess,
                    dsh_core::NetworkPolicy::Deny,
                    "network deny",
                ),
                (
                    SandboxMode::WorkspaceWrite,
                    dsh_core::NetworkPolicy::Deny,
                    "workspace-write + network deny",
                ),
                (
                    SandboxMode::DangerFullAccess,
                    dsh_core::NetworkPolicy::Loopback,
                    "network loopback",
                ),
            ] {
                let mut req = Request::new("true");
                req.sandbox_policy = Some(SandboxPolicyInput {
                    mode,
                    workspace_root: None,
                    session_id: None,
                    network: Some(network),
                });
                let spec = exec.resolve(req)?;
                if let Err(e) = exec.run_blocking(&spec, None) {
                    eprintln!("skipping {label}: {e}");
                    continue;
                }
                report_as(
                    "run_true",
                    &format!("dsh (Rust, {label})"),
                    0,
                    time_runs(&exec, &spec, iter)?,
                    "",
                );
            }
            // Limits: the per-process resource limits, the cgroups (made,
            // entered and removed per command), and all five.
            let rlimits = dsh_core::LimitsInput {
                cpu_seconds: Some(Num(60.0)),
                file_size_bytes: Some(Num((1u64 << 30) as f64)),
                open_files: Some(Num(1024.0)),
                ..Default::default()
            };
            let cgroups = dsh_core::LimitsInput {
                memory_bytes: Some(Num((1u64 << 30) as f64)),
                processes: Some(Num(512.0)),
                ..Default::default()
            };
            let all = dsh_core::LimitsInput {
                memory_bytes: cgroups.memory_bytes,
                processes: cgroups.processes,
                ..rlimits
            };
            let support = dsh_core::limits_support();
            let cgroups_here = [dsh_core::LimitKind::Memory, dsh_core::LimitKind::Processes]
                .iter()
                .all(|k| support.get(*k) != Some(dsh_core::Mechanism::Unsupported));
            for (limits, label) in [
                (rlimits, "rlimit limits"),
                (cgroups, "cgroup limits"),
                (all, "all limits"),
            ] {
                if !cgroups_here && label != "rlimit limits" {
                    eprintln!("skipping {label}: this host has no cgroup for them");
                    continue;
                }
                let mut req = Request::new("true");
                req.limits = Some(limits);
                let spec = exec.resolve(req)?;
                report_as(
                    "run_true",
                    &format!("dsh (Rust, {label})"),
                    0,
                    time_runs(&exec, &spec, iter)?,
                    "",
                );
            }
            exec.dispose_blocking()?;
        }
        Some("throughput") => {
            let bytes: u64 = args[2].parse()?;
            let exec = Executor::new(ConfigInput {
                max_output_bytes: Some(Num(65536.0)),
                ..Default::default()
            })?;
            let spec = exec.resolve(Request::new(format!("head -c {bytes} /dev/zero")))?;
            exec.run_blocking(&exec.resolve(Request::new("true"))?, None)?;
            let mut samples = Vec::new();
            let mut growth = 0;
            for _ in 0..3 {
                let before = rss_kib();
                let t = Instant::now();
                let r = exec.run_blocking(&spec, None)?;
                samples.push(t.elapsed().as_secs_f64() * 1e6);
                growth = growth.max(rss_kib().saturating_sub(before));
                assert!(r.stdout.truncated && r.stdout.text.len() == 65536);
                assert!(
                    bytes <= 64 << 20 || r.stdout.spill_path.is_none(),
                    "spill dropped past its cap"
                );
            }
            report(
                "throughput",
                0,
                samples,
                &format!(",\"bytes\":{bytes},\"rss_growth_kib\":{growth}"),
            );
            exec.dispose_blocking()?;
        }
        Some("supervisor") => {
            // What the per-executor supervisor costs: the first command of an
            // executor starts it, dispose shuts it down.
            let iter: usize = args[2].parse()?;
            let (mut first, mut second, mut dispose) = (Vec::new(), Vec::new(), Vec::new());
            let mut rss = 0;
            for i in 0..iter {
                let exec = Executor::new(ConfigInput::default())?;
                let spec = exec.resolve(Request::new("true"))?;
                let t = Instant::now();
                exec.run_blocking(&spec, None)?;
                first.push(t.elapsed().as_secs_f64() * 1e6);
                let t = Instant::now();
                exec.run_blocking(&spec, None)?;
                second.push(t.elapsed().as_secs_f64() * 1e6);
                if i == 0 {
                    rss = supervisor_rss_kib();
                }
                let t = Instant::now();
                exec.dispose_blocking()?;
                dispose.push(t.elapsed().as_secs_f64() * 1e6);
            }
            report("supervisor_first_run", 0, first, &format!(",\"rss_kib\":{rss}"));
            report("supervisor_second_run", 0, second, "");
            report("supervisor_dispose", 0, dispose, "");
        }
        Some("host-death") => {
            let rounds: usize = args[2].parse()?;
            let commands: usize = args[3].parse()?;
            let mut samples = Vec::new();
            let mut processes = 0;
            for _ in 0..rounds {
                let (took, n) = host_death(commands)?;
                samples.push(took);
                processes = n;
            }
            report(
                "host_death",
                0,
                samples,
                &format!(",\"commands\":{commands},\"processes\":{processes}"),
            );
        }
        Some("death-host") => death_host(&args[2], args[3].parse()?)?,
        _ => {
            eprintln!("usage: dsh-bench latency ITER HOST_MB | dsh-bench throughput BYTES | dsh-bench supervisor ITER | dsh-bench host-death ROUNDS COMMANDS");
            std::process::exit(2);
        }
    }
    Ok(())
}

/// Resident memory of this process's supervisor child (`dsh-supervisor`).
fn supervisor_rss_kib() -> u64 {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_owned())
            };
            (field("Name:")? == "dsh-supervisor" && field("PPid:")? == me)
                .then(|| field("VmRSS:")?.split_whitespace().next()?.parse().ok())?
        })
        .next()
        .unwrap_or(0)
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !matches!(
                s.rsplit(')').next().unwrap_or("").trim_start().chars().next(),
                Some('Z' | 'X')
            )
        })
        .unwrap_or(false)
}

const ROUTES: [&str; 8] = [
    "setsid",
    "double",
    "nohup",
    "trapper",
    "envorphan",
    "envsetsid",
    "forkloop",
    "leader",
];

fn planted(dir: &std::path::Path, commands: usize) -> Option<Vec<u32>> {
    (0..commands)
        .flat_map(|i| ROUTES.iter().map(move |r| dir.join(i.to_string()).join(r)))
        .map(|f| std::fs::read_to_string(f).ok()?.trim().parse().ok())
        .collect()
}

/// The host `host_death` kills: `commands` background commands, each
/// planting every escape (tests/shared/plant-escapes.sh), then `ready`.
fn death_host(dir: &str, commands: usize) -> Result<(), Box<dyn std::error::Error>> {
    let exec = Executor::new(ConfigInput::default())?;
    let plant = std::fs::canonicalize("tests/shared/plant-escapes.sh")?;
    for i in 0..commands {
        let command = format!(
            "mkdir -p {dir}/{i} && . {} {dir}/{i}; exec sleep 300",
            plant.display()
        );
        exec.start(&exec.resolve(Request::new(command))?)?;
    }
    let end = Instant::now() + std::time::Duration::from_secs(60);
    while planted(std::path::Path::new(dir), commands).is_none() {
        assert!(Instant::now() < end, "not every escape was planted");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    println!("ready");
    loop {
        std::thread::park();
    }
}

/// SIGKILLs a host whose commands planted every escape; returns how long
/// (µs) until none of the planted processes was alive, and how many there
/// were.
fn host_death(commands: usize) -> Result<(f64, usize), Box<dyn std::error::Error>> {
    use std::io::BufRead;
    let dir = std::env::temp_dir().join(format!("dsh-bench-host-death-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut host = std::process::Command::new(std::env::current_exe()?)
        .args(["death-host", &dir.display().to_string(), &commands.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    std::io::BufReader::new(host.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let pids = planted(&dir, commands).ok_or("the host did not plant")?;
    host.kill()?;
    let t = Instant::now();
    host.wait()?;
    while pids.iter().any(|&p| alive(p)) && t.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    let took = t.elapsed().as_secs_f64() * 1e6;
    let _ = std::fs::remove_dir_all(&dir);
    if pids.iter().any(|&p| alive(p)) {
        return Err(format!(
            "processes survived the host: {:?}",
            pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
        )
        .into());
    }
    Ok((took, pids.len()))
}

//! `dsh-bench latency ITER HOST_MB` | `dsh-bench confined ITER` | `dsh-bench throughput BYTES`
//! Prints one JSON line per measurement (see bench/report.py).

use std::time::Instant;

use dsh_core::{ConfigInput, Executor, Num, Request, SandboxMode, SandboxPolicyInput};

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
            report("run_true", mb, time_runs(&exec, &spec, iter)?, "");
            exec.dispose_blocking()?;
        }
        Some("confined") => {
            // run `true` under each sandbox mode, to price confinement.
            let iter: usize = args[2].parse()?;
            let exec = Executor::new(ConfigInput::default())?;
            for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
                let mut req = Request::new("true");
                req.sandbox_policy = Some(SandboxPolicyInput {
                    mode,
                    workspace_root: None,
                    session_id: None,
                });
                let spec = exec.resolve(req)?;
                report_as(
                    "run_true",
                    &format!("dsh (Rust, {mode})"),
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
        _ => {
            eprintln!("usage: dsh-bench latency ITER HOST_MB | dsh-bench throughput BYTES");
            std::process::exit(2);
        }
    }
    Ok(())
}

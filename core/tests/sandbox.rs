//! Native Landlock confinement: read-only, workspace-write and
//! danger-full-access, inherited by every descendant, facts reported, and
//! fail-closed when confinement cannot be applied.
mod common;
use common::*;

use std::path::Path;
use std::time::Duration;

use dsh_core::*;

/// A base directory for the test's workspace and its "outside" sibling that
/// is neither /tmp nor the temp dir (both writable under workspace-write).
/// Removed, with everything in it, when the test ends.
fn base(name: &str) -> TempDir {
    let tmp = std::env::temp_dir();
    let root = ["/var/tmp", "/root", "/home"]
        .iter()
        .map(Path::new)
        .find(|p| p.is_dir() && !p.starts_with("/tmp") && !p.starts_with(&tmp))
        .expect("a writable directory outside /tmp");
    let dir = TempDir::new_in(root, &format!("dsh-sandbox-{name}"));
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    std::fs::create_dir_all(dir.join("outside")).unwrap();
    dir
}

/// How many writes `stderr` shows refused: by Landlock ("Permission
/// denied"), or first by the read-only mounts where the host has them
/// ("Read-only file system", docs/sandbox.md "Metadata").
fn refusals(stderr: &str) -> usize {
    stderr.matches("Permission denied").count() + stderr.matches("Read-only file system").count()
}

fn confined_run(mode: SandboxMode, dir: &Path, command: &str) -> RunResult {
    let exec = executor();
    let mut req = Request::new(command);
    req.workdir = Some(dir.join("ws"));
    req.sandbox_policy = Some(SandboxPolicyInput {
        mode,
        workspace_root: None,
        session_id: None,
        network: None,
    });
    exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap()
}

#[test]
fn read_only_denies_every_write_but_reads_execs_and_sinks_work() {
    if skip_without_landlock() {
        return;
    }
    let dir = base("ro");
    let r = confined_run(
        SandboxMode::ReadOnly,
        &dir,
        "cat /etc/hostname >/dev/null && ls / >/dev/null && echo ok > /dev/null && echo reads-ok; touch ./inside",
    );
    assert_eq!(r.stdout.text, "reads-ok\n");
    assert_ne!(r.exit_code, Some(0));
    assert!(refusals(&r.stderr.text) >= 1, "{}", r.stderr.text);
    assert!(!dir.join("ws/inside").exists());
    let info = r.sandbox.unwrap();
    assert_eq!(
        (info.mode, info.denied, info.runner_failed),
        (SandboxMode::ReadOnly, true, None)
    );
    // docs/sandbox.md: `full` from Landlock ABI 3 (truncation governed
    // too), `partial` before (Linux 6.1 has ABI 2).
    let abi = landlock_abi();
    assert_eq!(
        info.enforcement,
        Some(if abi >= 3 {
            Enforcement::Full
        } else {
            Enforcement::Partial
        }),
        "Landlock ABI {abi}"
    );
    let tmp = confined_run(SandboxMode::ReadOnly, &dir, "echo x > /tmp/dsh-ro-probe-$$");
    assert_ne!(tmp.exit_code, Some(0), "read-only: /tmp is not writable either");
}

#[test]
fn workspace_write_allows_the_workspace_and_tmp_and_denies_elsewhere_even_for_grandchildren() {
    if skip_without_landlock() {
        return;
    }
    let dir = base("ww");
    let out = dir.join("outside");
    let r = confined_run(
        SandboxMode::WorkspaceWrite,
        &dir,
        &format!(
            "echo in > ./inside && mkdir sub && echo t > \"${{TMPDIR:-/tmp}}/dsh-ww-$$\" && rm \"${{TMPDIR:-/tmp}}/dsh-ww-$$\" && echo written; \
             bash -c 'bash -c \"echo g > {o}/grandchild\"'; setsid bash -c 'echo s > {o}/escaped' </dev/null; \
             mv ./inside {o}/moved; exit 0",
            o = out.display()
        ),
    );
    assert_eq!(r.stdout.text, "written\n", "stderr: {}", r.stderr.text);
    assert!(dir.join("ws/inside").exists() && dir.join("ws/sub").is_dir());
    for name in ["grandchild", "escaped", "moved"] {
        assert!(
            !out.join(name).exists(),
            "{name} was written outside the workspace"
        );
    }
    assert!(refusals(&r.stderr.text) >= 2, "{}", r.stderr.text);
    let info = r.sandbox.unwrap();
    assert_eq!(info.mode, SandboxMode::WorkspaceWrite);
    assert!(!info.denied, "a clean exit is never classified as denied");
    let denied = confined_run(
        SandboxMode::WorkspaceWrite,
        &dir,
        &format!("echo x > {}/f", out.display()),
    );
    assert!(denied.sandbox.unwrap().denied);
}

#[test]
fn a_workspace_root_whose_name_is_not_utf8_is_opened_by_its_bytes() {
    use std::os::unix::ffi::OsStrExt;
    let dir = base("bytes");
    let root = dir.join(std::ffi::OsStr::from_bytes(b"ws-\xff\xfe"));
    std::fs::create_dir(&root).unwrap();
    let exec = executor();
    let mut req = Request::new(format!(
        "echo in > ./inside; echo out > {}/f",
        dir.join("outside").display()
    ));
    req.workdir = Some(dir.join("ws"));
    req.sandbox_policy = Some(SandboxPolicyInput {
        mode: SandboxMode::WorkspaceWrite,
        workspace_root: Some(root.clone()),
        session_id: None,
        network: None,
    });
    // The workdir (ws) is outside the root: writing there is denied...
    let r = exec
        .run_blocking(&exec.resolve(req.clone()).unwrap(), None)
        .unwrap();
    assert!(!dir.join("ws/inside").exists() && !dir.join("outside/f").exists());
    assert!(r.sandbox.unwrap().denied, "{}", r.stderr.text);
    // ...and running in the root itself, writing is allowed.
    req.workdir = Some(root.clone());
    let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
    assert!(root.join("inside").exists(), "{}", r.stderr.text);
    assert!(!dir.join("outside/f").exists());
}

#[test]
fn danger_full_access_is_unconfined() {
    let dir = base("danger");
    let r = confined_run(
        SandboxMode::DangerFullAccess,
        &dir,
        &format!("echo x > {}/f", dir.join("outside").display()),
    );
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr.text);
    assert!(dir.join("outside/f").exists());
    let info = r.sandbox.unwrap();
    assert_eq!(
        (info.mode, info.denied, info.enforcement),
        (SandboxMode::DangerFullAccess, false, None)
    );
}

#[test]
fn config_default_mode_is_stamped_and_enforced() {
    if skip_without_landlock() {
        return;
    }
    let dir = base("default");
    let exec = executor_with(|c| {
        c.sandbox_mode = Some(SandboxMode::WorkspaceWrite);
        c.cwd = Some(dir.join("ws").to_str().unwrap().into());
    });
    assert_eq!(exec.sandbox_mode(), Some(SandboxMode::WorkspaceWrite));
    let r = run(
        &exec,
        &format!("echo x > ok; echo y > {}/no", dir.join("outside").display()),
    );
    assert!(dir.join("ws/ok").exists() && !dir.join("outside/no").exists());
    assert!(r.sandbox.unwrap().denied);
}

#[test]
fn the_host_stays_unconfined() {
    if skip_without_landlock() {
        return;
    }
    let dir = base("host");
    confined_run(SandboxMode::ReadOnly, &dir, "true");
    // The host process itself can still write anywhere after a confined spawn.
    std::fs::write(dir.join("outside/host-write"), "ok").unwrap();
    let exec = executor();
    let r = run(
        &exec,
        &format!("echo x > {}/unconfined", dir.join("outside").display()),
    );
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.sandbox, None);
}

#[test]
fn background_processes_are_confined_and_carry_facts() {
    if skip_without_landlock() {
        return;
    }
    let dir = base("bg");
    let exec = executor();
    let mut req = Request::new(format!("echo x > {}/f", dir.join("outside").display()));
    req.sandbox_policy = Some(SandboxPolicyInput {
        mode: SandboxMode::WorkspaceWrite,
        workspace_root: Some(dir.join("ws")),
        session_id: None,
        network: None,
    });
    let p = exec.start(&exec.resolve(req).unwrap()).unwrap();
    assert_eq!(p.sandbox(), None, "no facts while running");
    assert!(p.wait_timeout(Some(Duration::from_secs(30))).unwrap());
    assert_eq!(p.status(), Status::Completed);
    let info = p.sandbox().unwrap();
    assert_eq!(
        (info.mode, info.denied, info.runner_failed),
        (SandboxMode::WorkspaceWrite, true, None)
    );
    assert!(!dir.join("outside/f").exists());
}

#[test]
fn confinement_that_cannot_be_applied_fails_closed_and_nothing_runs() {
    let dir = base("closed");
    let marker = dir.join("outside/ran");
    let exec = executor();
    let mut req = Request::new(format!("touch {}", marker.display()));
    req.sandbox_policy = Some(SandboxPolicyInput {
        mode: SandboxMode::WorkspaceWrite,
        workspace_root: Some("/nonexistent/dsh-workspace".into()),
        session_id: None,
        network: None,
    });
    let s = exec.resolve(req).unwrap();
    // Without Landlock it fails closed too, for that reason instead: this
    // test runs on every kernel.
    let expected_cause = match landlock_missing() {
        None => "/nonexistent/dsh-workspace",
        Some(_) => "Landlock",
    };
    match exec.run_blocking(&s, None) {
        Err(DshError::SandboxUnavailable(why)) => {
            assert!(why.contains(expected_cause), "{why}")
        }
        other => panic!("expected SandboxUnavailable, got {other:?}"),
    }
    let p = exec.start(&s).unwrap();
    assert!(p.wait_timeout(Some(Duration::from_secs(30))).unwrap());
    assert_eq!(p.status(), Status::Killed);
    let info = p.sandbox().unwrap();
    assert_eq!((info.runner_failed, info.denied), (Some(true), false));
    assert!(p.read_output().delta.contains("sandbox unavailable"));
    // Settled as a spawn failure: there is no process that could still create it.
    assert!(!marker.exists(), "the command ran although confinement failed");
}

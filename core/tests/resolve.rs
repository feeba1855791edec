//! Configuration (docs/configuration.md) and resolve (docs/requests.md):
//! defaults, caps, and clear refusals.
mod common;
use common::*;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use dsh_core::*;

fn config_err(f: impl FnOnce(&mut ConfigInput)) -> DshError {
    let mut c = ConfigInput::default();
    f(&mut c);
    Executor::new(c).unwrap_err()
}

fn field_of(e: &DshError) -> String {
    match e {
        DshError::InvalidArgument { field, .. } => field.path(NameStyle::Snake),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn config_defaults_match_the_table() {
    let c = executor().config().clone();
    assert_eq!(c.timeout_ms, 120_000);
    assert_eq!(c.max_timeout_ms, 600_000);
    assert_eq!(c.max_output_bytes, 64_000);
    assert_eq!(c.max_spill_bytes, 64 * 1024 * 1024);
    assert_eq!(c.grace_ms, 3_000);
    assert_eq!(c.retain_settled, 1_000, "docs/hosts.md: default 1 000");
    assert_eq!(c.cwd, None);
    assert_eq!(c.spill_dir, std::env::temp_dir());
    assert_eq!(c.sandbox_mode, None);
}

#[test]
fn bad_config_numbers_are_refused_naming_the_field() {
    type SetField = Box<dyn FnOnce(&mut ConfigInput)>;
    let cases: Vec<(SetField, &str)> = vec![
        (Box::new(|c| c.timeout_ms = n(0)), "config.timeout_ms"),
        (Box::new(|c| c.timeout_ms = n(-5)), "config.timeout_ms"),
        (
            Box::new(|c| c.max_timeout_ms = n(f64::NAN)),
            "config.max_timeout_ms",
        ),
        (
            Box::new(|c| c.max_output_bytes = n(f64::INFINITY)),
            "config.max_output_bytes",
        ),
        (Box::new(|c| c.max_spill_bytes = n(1.5)), "config.max_spill_bytes"),
        (Box::new(|c| c.grace_ms = n(2_147_483_648u64)), "config.grace_ms"),
        (Box::new(|c| c.grace_ms = n(1e300)), "config.grace_ms"),
        (Box::new(|c| c.cwd = Some(String::new())), "config.cwd"),
        (
            Box::new(|c| c.spill_dir = Some("/tmp/a\0b".into())),
            "config.spill_dir",
        ),
        (
            Box::new(|c| {
                c.timeout_ms = n(10_000);
                c.max_timeout_ms = n(5_000)
            }),
            "config.timeout_ms",
        ),
    ];
    for (set, field) in cases {
        let e = config_err(set);
        assert_eq!(field_of(&e), field, "{e}");
        assert!(e.to_string().contains(field), "message names the field: {e}");
    }
    // The largest legal grace is accepted.
    executor_with(|c| c.grace_ms = n(2_147_483_647u64));
}

#[test]
fn camel_case_messages_for_node() {
    let exec = executor();
    let mut req = Request::new("true");
    req.timeout_ms = n(-1);
    let e = exec.resolve(req).unwrap_err();
    assert!(
        e.message(NameStyle::Camel).contains("request.timeoutMs"),
        "{}",
        e.message(NameStyle::Camel)
    );
    assert!(e.to_string().contains("request.timeout_ms"));
}

#[test]
fn resolve_applies_defaults_and_caps() {
    let dir = temp_dir("resolve");
    let exec = executor_with(|c| {
        c.cwd = Some(dir.to_str().unwrap().into());
        c.timeout_ms = n(1_000);
        c.max_timeout_ms = n(5_000);
        c.max_output_bytes = n(777);
    });
    let s = spec(&exec, "echo hi");
    assert_eq!(s.workdir, *dir);
    assert_eq!(s.timeout_ms, 1_000);
    assert_eq!(s.stdout_max_bytes, 777);
    assert_eq!(
        (s.stdin.clone(), s.env.clone(), s.dsh_env.clone()),
        (None, None, None)
    );
    assert_eq!((s.owner.clone(), s.sandbox_policy.clone()), (None, None));

    let mut req = Request::new("echo hi");
    req.timeout_ms = n(99_999);
    req.stdout_max_bytes = n(5);
    req.workdir = Some("sub".into());
    req.owner = Some("session-1".into());
    req.stdin = Some(b"in".to_vec());
    let s = exec.resolve(req).unwrap();
    assert_eq!(s.timeout_ms, 5_000, "clamped to max_timeout_ms");
    assert_eq!(s.stdout_max_bytes, 5);
    assert_eq!(
        s.workdir,
        dir.join("sub"),
        "relative workdir joins the configured cwd"
    );
    assert_eq!(s.owner.as_deref(), Some("session-1"));
    assert_eq!(s.stdin.as_deref(), Some(&b"in"[..]));
}

#[test]
fn workdir_defaults_to_the_process_cwd_read_at_resolve_time() {
    let s = spec(&executor(), "true");
    assert_eq!(s.workdir, std::env::current_dir().unwrap());
}

#[test]
fn workdir_and_workspace_root_are_bytes_not_text() {
    let base = temp_dir("bytes");
    let exec = executor_with(|c| c.cwd = Some(base.to_str().unwrap().into()));
    // Relative and not UTF-8: joined to the configured cwd, byte for byte;
    // the default workspace root is that same directory.
    let name = OsStr::from_bytes(b"dir-\xff\xfe");
    let mut req = Request::new("true");
    req.workdir = Some(name.into());
    req.sandbox_policy = Some(SandboxPolicyInput {
        mode: SandboxMode::DangerFullAccess,
        workspace_root: None,
        session_id: None,
        network: None,
    });
    let s = exec.resolve(req).unwrap();
    assert_eq!(s.workdir, base.join(name));
    assert_eq!(s.sandbox_policy.unwrap().workspace_root, base.join(name));
    // An explicit root that is not UTF-8 is kept as given.
    let root = PathBuf::from(OsStr::from_bytes(b"/srv/\x80root"));
    let mut req = Request::new("true");
    req.sandbox_policy = Some(SandboxPolicyInput {
        mode: SandboxMode::DangerFullAccess,
        workspace_root: Some(root.clone()),
        session_id: None,
        network: None,
    });
    assert_eq!(
        exec.resolve(req).unwrap().sandbox_policy.unwrap().workspace_root,
        root
    );
    // Only NUL (and emptiness) is refused, naming the field.
    let mut req = Request::new("true");
    req.sandbox_policy = Some(SandboxPolicyInput {
        mode: SandboxMode::ReadOnly,
        workspace_root: Some(PathBuf::from(OsStr::from_bytes(b"/srv/\xff\0"))),
        session_id: None,
        network: None,
    });
    let e = exec.resolve(req).unwrap_err();
    assert_eq!(field_of(&e), "request.sandbox_policy", "{e}");
    assert!(e.to_string().contains("NUL"), "{e}");
    let mut req = Request::new("true");
    req.workdir = Some(PathBuf::new());
    let e = exec.resolve(req).unwrap_err();
    assert_eq!(field_of(&e), "request.workdir", "{e}");
}

#[test]
fn bad_requests_are_errors_never_silent_fixes() {
    let exec = executor();
    let bad = |f: &dyn Fn(&mut Request), field: &str, needle: &str| {
        let mut req = Request::new("true");
        f(&mut req);
        let e = exec.resolve(req).unwrap_err();
        assert_eq!(field_of(&e), field, "{e}");
        assert!(e.to_string().contains(needle), "{e} should mention {needle}");
    };
    bad(&|r| r.command = "echo a\0b".into(), "request.command", "NUL");
    bad(&|r| r.timeout_ms = n(0), "request.timeout_ms", "positive");
    bad(&|r| r.timeout_ms = n(f64::NAN), "request.timeout_ms", "finite");
    bad(
        &|r| r.timeout_ms = n(f64::INFINITY),
        "request.timeout_ms",
        "finite",
    );
    bad(
        &|r| r.stdout_max_bytes = n(2.5),
        "request.stdout_max_bytes",
        "whole",
    );
    bad(
        &|r| r.stdout_max_bytes = n(0),
        "request.stdout_max_bytes",
        "positive",
    );
    bad(&|r| r.workdir = Some("/tmp/x\0".into()), "request.workdir", "NUL");
    bad(&|r| r.env = Some(map(&[("", "v")])), "request.env", "empty key");
    bad(&|r| r.env = Some(map(&[("A=B", "v")])), "request.env", "'='");
    bad(&|r| r.env = Some(map(&[("A\0", "v")])), "request.env", "NUL");
    bad(&|r| r.env = Some(map(&[("A", "v\0")])), "request.env", "NUL");
    bad(
        &|r| r.dsh_env = Some(map(&[("FOO", "v")])),
        "request.dsh_env",
        "DSH_",
    );
    bad(
        &|r| r.dsh_env = Some(map(&[("dsh_foo", "v")])),
        "request.dsh_env",
        "DSH_",
    );
    bad(
        &|r| r.dsh_env = Some(map(&[("DSH_X", "a\0")])),
        "request.dsh_env",
        "NUL",
    );
}

#[test]
fn hand_built_specs_are_checked_not_redefaulted() {
    let exec = executor_with(|c| c.max_timeout_ms = n(1_000));
    let mut s = spec(&exec, "true");
    s.timeout_ms = 5_000;
    match exec.run_blocking(&s, None) {
        Err(DshError::InvalidArgument { field, .. }) => {
            assert_eq!(field.path(NameStyle::Snake), "spec.timeout_ms")
        }
        other => panic!("{other:?}"),
    }
    let mut s = spec(&exec, "true");
    s.workdir = "relative".into();
    assert!(matches!(exec.start(&s), Err(DshError::InvalidArgument { .. })));
    let mut s = spec(&exec, "true");
    s.workdir = PathBuf::from(OsStr::from_bytes(b"/tmp/a\0b"));
    let e = exec.run_blocking(&s, None).unwrap_err();
    assert_eq!(field_of(&e), "spec.workdir", "{e}");
    let mut s = spec(&exec, "true");
    s.sandbox_policy = Some(SandboxPolicy {
        mode: SandboxMode::DangerFullAccess,
        workspace_root: PathBuf::from(OsStr::from_bytes(b"/srv/\0")),
        session_id: None,
        network: NetworkPolicy::Allow,
    });
    let e = exec.run_blocking(&s, None).unwrap_err();
    assert_eq!(field_of(&e), "spec.sandbox_policy", "{e}");
    // A hand-built spec whose paths are not UTF-8 is as good as any other.
    let mut s = spec(&exec, "true");
    s.workdir = PathBuf::from(OsStr::from_bytes(b"/tmp/dir-\xff\xfe"));
    s.sandbox_policy = Some(SandboxPolicy {
        mode: SandboxMode::DangerFullAccess,
        workspace_root: s.workdir.clone(),
        session_id: None,
        network: NetworkPolicy::Allow,
    });
    s.check(&exec.config()).unwrap();
    let mut s = spec(&exec, "true");
    s.timeout_ms = 0;
    assert!(matches!(
        exec.run_blocking(&s, None),
        Err(DshError::InvalidArgument { .. })
    ));
}

#[test]
fn sandbox_policy_is_stamped_from_config_or_request() {
    let exec = executor_with(|c| c.sandbox_mode = Some(SandboxMode::ReadOnly));
    assert_eq!(exec.sandbox_mode(), Some(SandboxMode::ReadOnly));
    let s = spec(&exec, "true");
    let p = s.sandbox_policy.clone().unwrap();
    assert_eq!(p.mode, SandboxMode::ReadOnly);
    assert_eq!(p.workspace_root, s.workdir);
    let mut req = Request::new("true");
    req.sandbox_policy = Some(SandboxPolicyInput {
        mode: SandboxMode::DangerFullAccess,
        workspace_root: Some("/srv".into()),
        session_id: None,
        network: None,
    });
    let s = exec.resolve(req).unwrap();
    assert_eq!(s.sandbox_policy.unwrap().mode, SandboxMode::DangerFullAccess);
    assert_eq!(executor().sandbox_mode(), None);
    let e = SandboxMode::parse(Field::new(Scope::Request, FieldName::SandboxPolicy), "yolo").unwrap_err();
    assert!(e.to_string().contains("request.sandbox_policy") && e.to_string().contains("yolo"));
}

#[test]
fn stdout_max_bytes_raises_the_stdout_budget_above_max_output_bytes_and_stderr_keeps_it() {
    // The seam's contract: a trusted foreground caller that parses complete
    // stdout may raise its budget above the executor's in-memory cap;
    // stderr keeps `max_output_bytes`.
    let exec = executor_with(|c| c.max_output_bytes = n(1_000));
    let mut req =
        Request::new("head -c 5000 /dev/zero | tr '\\0' a; head -c 3000 /dev/zero | tr '\\0' b >&2");
    req.stdout_max_bytes = n(6_000);
    let s = exec.resolve(req).unwrap();
    assert_eq!(s.stdout_max_bytes, 6_000, "not clamped to max_output_bytes");
    let r = exec.run_blocking(&s, None).unwrap();
    assert_eq!(r.stdout.text, "a".repeat(5_000));
    assert!(!r.stdout.truncated && r.stdout.spill_path.is_none());
    assert_eq!(r.stderr.text, "b".repeat(1_000), "stderr keeps max_output_bytes");
    assert!(r.stderr.truncated);
    // Any whole number up to 2^53-1, as the seam accepts it, resolves; a
    // hand-built spec with it is accepted too.
    let mut req = Request::new("true");
    req.stdout_max_bytes = n(9_007_199_254_740_991.0);
    let huge = exec.resolve(req).unwrap();
    assert_eq!(huge.stdout_max_bytes, 9_007_199_254_740_991);
    assert_eq!(exec.run_blocking(&huge, None).unwrap().exit_code, Some(0));
    let mut req = Request::new("true");
    req.stdout_max_bytes = n(9_007_199_254_740_992.0);
    let e = exec.resolve(req).unwrap_err();
    assert!(e.to_string().contains("request.stdout_max_bytes"), "{e}");
    let mut bad = s.clone();
    bad.stdout_max_bytes = 0;
    let e = exec.run_blocking(&bad, None).unwrap_err();
    assert!(e.to_string().contains("spec.stdout_max_bytes"), "{e}");
    exec.dispose_blocking().unwrap();
}

#[test]
fn a_fractional_request_timeout_is_rounded_up_to_a_whole_millisecond() {
    // A model writes `timeoutMs: 1500.5`; the harness accepts it, so do we.
    let exec = executor();
    for (given, want) in [(1500.5, 1501), (0.25, 1), (7.0, 7)] {
        let mut req = Request::new("true");
        req.timeout_ms = n(given);
        assert_eq!(exec.resolve(req).unwrap().timeout_ms, want, "{given}");
    }
    let mut req = Request::new("true");
    req.timeout_ms = n(1e300);
    assert_eq!(
        exec.resolve(req).unwrap().timeout_ms,
        600_000,
        "clamped like any long timeout"
    );
}

#[test]
fn numeric_messages_use_the_harness_wording() {
    let e = config_err(|c| c.grace_ms = n(3e9));
    assert_eq!(
        e.message(NameStyle::Camel),
        "config.graceMs must be no greater than 2147483647, got 3000000000"
    );
    let e = config_err(|c| c.max_output_bytes = n(-1));
    assert_eq!(
        e.to_string(),
        "config.max_output_bytes must be a positive finite number, got -1"
    );
}

#[test]
fn reconfigure_changes_what_new_commands_get_and_keeps_running_ones() {
    let dir = temp_dir("reconfigure");
    let exec = executor_with(|c| c.max_output_bytes = n(1_000));
    let before = exec
        .start(&spec(&exec, "head -c 3000 /dev/zero | tr '\\0' a"))
        .unwrap();

    exec.reconfigure(ConfigInput {
        cwd: Some(dir.to_str().unwrap().into()),
        timeout_ms: n(2_000),
        max_output_bytes: n(10),
        ..Default::default()
    })
    .unwrap();
    let s = spec(&exec, "printf 0123456789abcdef");
    assert_eq!(
        (s.workdir.as_path(), s.timeout_ms, s.stdout_max_bytes),
        (&*dir, 2_000, 10)
    );
    let r = exec.run_blocking(&s, None).unwrap();
    assert_eq!((r.stdout.text.as_str(), r.stdout.truncated), ("6789abcdef", true));

    // The process started before keeps the 1000-byte window it started with.
    assert!(before
        .wait_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap());
    assert_eq!(before.read_output().delta.len(), 1_000);

    // A bad field changes nothing; the spill directory is fixed.
    let e = exec
        .reconfigure(ConfigInput {
            grace_ms: n(0),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(field_of(&e), "config.grace_ms");
    let e = exec
        .reconfigure(ConfigInput {
            spill_dir: Some(dir.to_str().unwrap().into()),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(field_of(&e), "config.spill_dir");
    assert_eq!(
        spec(&exec, "true").timeout_ms,
        2_000,
        "the last good configuration stays"
    );
}

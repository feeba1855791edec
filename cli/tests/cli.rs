//! The CLI's contract as a script sees it: exit statuses, the two output
//! forms, options reaching the command, spill files that outlive the
//! process, and an interrupt that leaves nothing running.

mod support;

use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use support::{dsh, finish, run, run_with_stdin, Json, TempDir};

#[test]
fn exits_with_the_commands_status() {
    let r = run(&["echo hello; echo oops >&2; exit 3"]);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (3, "hello\n", "oops\n")
    );
    let r = run(&["true"]);
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
}

#[test]
fn a_signal_death_is_128_plus_n() {
    let r = run(&["kill -9 $$"]);
    assert_eq!(r.code, 137);
    assert_eq!(r.stderr, "dsh-cli: killed by SIGKILL\n");
}

#[test]
fn a_timeout_is_124() {
    let r = run(&["--timeout", "200", "echo started; sleep 60"]);
    assert_eq!(r.code, 124, "{}", r.stderr);
    assert_eq!(r.stdout, "started\n");
    assert!(r.stderr.contains("timed out after 200 ms"), "{}", r.stderr);
    let r = run(&["--timeout-ms=200", "--json", "sleep 60"]);
    assert_eq!(r.code, 124);
    let j = Json::parse(&r.stdout);
    assert_eq!(j.at("timed_out"), &Json::Bool(true));
    assert_eq!(j.at("timeout_ms"), &Json::Num(200.0));
    // The operator's --timeout is not clamped to the executor's request cap.
    let j = Json::parse(&run(&["--timeout", "3600000", "--json", "true"]).stdout);
    assert_eq!(j.at("timeout_ms"), &Json::Num(3_600_000.0));
}

#[test]
fn usage_errors_are_125_and_name_the_culprit() {
    for (args, needle) in [
        (&["--bogus", "true"][..], "'--bogus'"),
        (&["--env", "NOEQUALS", "true"], "'NOEQUALS'"),
        (&["--timeout", "soon", "true"], "'soon'"),
        (&["--sandbox", "jail", "true"], "'jail'"),
        (&["--workdir"], "'--workdir'"),
        (&[], "no COMMAND"),
        (&["echo", "hi"], "'hi'"),
    ] {
        let r = run(args);
        assert_eq!(r.code, 125, "{args:?}");
        assert!(r.stderr.contains(needle), "{args:?}: {}", r.stderr);
        assert_eq!(r.stdout, "", "{args:?}");
    }
}

#[test]
fn executor_errors_are_125() {
    let r = run(&["--workdir", "/nonexistent/dsh-cli-test", "true"]);
    assert_eq!(r.code, 125);
    assert!(r.stderr.contains("/nonexistent/dsh-cli-test"), "{}", r.stderr);
    let r = run(&["--timeout", "0", "true"]);
    assert_eq!(r.code, 125);
    assert!(r.stderr.contains("timeout_ms"), "{}", r.stderr);
}

#[test]
fn help_lists_every_option_and_exit_status() {
    let r = run(&["--help"]);
    assert_eq!(r.code, 0);
    for needle in [
        "-h, --help",
        "-V, --version",
        "--timeout MS",
        "--timeout-ms",
        "--workdir DIR",
        "--env NAME=VALUE",
        "--stdin",
        "--sandbox MODE",
        "read-only | workspace-write | danger-full-access",
        "--background",
        "--json",
        "--keep-spill",
        "--spill-dir DIR",
        "\n  --  ",
        "128+N",
        "124",
        "125",
        "130",
    ] {
        assert!(r.stdout.contains(needle), "--help lacks {needle:?}");
    }
    assert_eq!(run(&["-h"]).stdout, r.stdout);
}

#[test]
fn version() {
    let r = run(&["--version"]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, concat!("dsh-cli ", env!("CARGO_PKG_VERSION"), "\n"))
    );
    assert_eq!(run(&["-V"]).stdout, r.stdout);
}

#[test]
fn double_dash_ends_options() {
    let r = run(&["--", "echo --json"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "--json\n"));
}

#[test]
fn env_and_workdir_reach_the_command() {
    let dir = TempDir::new("workdir");
    let r = run(&[
        "--env",
        "GREETING=hello world",
        "--env=EQ=a=b",
        "--env",
        "API_KEY=passed explicitly",
        "--workdir",
        dir.0.to_str().unwrap(),
        r#"printf '%s|%s|%s|%s' "$GREETING" "$EQ" "$API_KEY" "$PWD""#,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        format!("hello world|a=b|passed explicitly|{}", dir.0.display())
    );
}

#[test]
fn a_workdir_that_is_not_utf8_is_used_byte_for_byte() {
    use std::ffi::{OsStr, OsString};
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let base = TempDir::new("non-utf8");
    let dir = base.0.join(OsStr::from_bytes(b"dir-\xff\xfe"));
    std::fs::create_dir(&dir).unwrap();
    let mut inline = OsString::from("--workdir=");
    inline.push(&dir);
    for args in [
        vec![OsString::from("--workdir"), dir.clone().into_os_string()],
        vec![inline],
    ] {
        let out = dsh()
            .args(&args)
            .args(["--json", "pwd > ../pwd.out; echo done"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let r = finish(out);
        assert_eq!(r.code, 0, "{}", r.stderr);
        // The JSON stays JSON; the path itself never appears in it.
        assert_eq!(Json::parse(&r.stdout).at("stdout.text").str(), "done\n");
        let pwd = std::fs::read(base.0.join("pwd.out")).unwrap();
        assert_eq!(pwd, [dir.as_os_str().as_bytes(), b"\n"].concat());
    }
    // A missing one is named in the error, lossily: the message is text.
    let mut missing = dir.clone().into_os_string().into_vec();
    missing.extend_from_slice(b"/gone-\xff");
    let out = dsh()
        .arg("--workdir")
        .arg(OsString::from_vec(missing))
        .arg("true")
        .output()
        .unwrap();
    let r = finish(out);
    assert_eq!(r.code, 125);
    assert!(
        r.stderr.contains("ENOENT") && r.stderr.contains("gone-\u{FFFD}"),
        "{}",
        r.stderr
    );
}

#[test]
fn stdin_reaches_the_command() {
    let input = "line one\nzwei é\n\0after a NUL, no final newline";
    let r = run_with_stdin(&["--stdin", "cat"], input.as_bytes());
    assert_eq!((r.code, r.stdout.as_str()), (0, input), "{}", r.stderr);
    // Without --stdin the command's stdin is empty, not the CLI's.
    let r = run_with_stdin(&["wc -c"], b"ignored");
    assert_eq!(r.stdout.trim(), "0");
}

#[test]
fn json_has_every_field_and_round_trips_text() {
    let r = run(&[
        "--json",
        r#"printf 'q"b\\s\001\033[0m\té€😀\n'; printf 'err\r\n' >&2; exit 3"#,
    ]);
    assert_eq!(r.code, 3);
    assert_eq!(r.stderr, "");
    assert_eq!(r.stdout.lines().count(), 1, "one line: {}", r.stdout);
    let j = Json::parse(&r.stdout);
    assert_eq!(
        j.keys(),
        [
            "exit_code",
            "signal",
            "exit_status_unavailable",
            "timed_out",
            "aborted",
            "timeout_ms",
            "stdout",
            "stderr",
            "sandbox",
            "survivors",
            "background_id",
            "limit",
            "limits_enforcement"
        ]
    );
    assert_eq!(j.at("background_id"), &Json::Null);
    assert_eq!(j.at("limit"), &Json::Null);
    assert_eq!(j.at("exit_code"), &Json::Num(3.0));
    assert_eq!(j.at("signal"), &Json::Null);
    assert_eq!(j.at("timed_out"), &Json::Bool(false));
    assert_eq!(j.at("aborted"), &Json::Bool(false));
    assert_eq!(j.at("timeout_ms"), &Json::Num(120_000.0));
    assert_eq!(j.at("stdout.text").str(), "q\"b\\s\u{1}\u{1b}[0m\té€😀\n");
    assert_eq!(
        j.at("stdout").keys(),
        ["text", "truncated", "spill_path", "spill_error"]
    );
    assert_eq!(j.at("stdout.truncated"), &Json::Bool(false));
    assert_eq!(j.at("stdout.spill_path"), &Json::Null);
    assert_eq!(j.at("stderr.text").str(), "err\r\n");
    assert_eq!(j.at("sandbox"), &Json::Null);

    let j = Json::parse(&run(&["--json", "kill -9 $$"]).stdout);
    assert_eq!(j.at("exit_code"), &Json::Null);
    assert_eq!(j.at("signal").str(), "SIGKILL");
}

#[test]
fn sandbox_facts_are_reported() {
    let j = Json::parse(&run(&["--json", "--sandbox", "danger-full-access", "true"]).stdout);
    assert_eq!(j.at("sandbox.mode").str(), "danger-full-access");
    assert_eq!(j.at("sandbox.denied"), &Json::Bool(false));
    assert_eq!(j.at("sandbox.enforcement"), &Json::Null);
    assert_eq!(j.at("sandbox.network").str(), "allow");
    assert_eq!(j.at("sandbox.network_enforcement"), &Json::Null);

    let dir = TempDir::new("sandbox");
    let target = dir.path("written");
    let r = run(&["--json", "--sandbox", "read-only", &format!("echo x > {target}")]);
    if r.code == 125 {
        // A kernel without Landlock: fail closed, nothing ran.
        assert!(r.stderr.contains("sandbox unavailable"), "{}", r.stderr);
    } else {
        let j = Json::parse(&r.stdout);
        assert_eq!(j.at("sandbox.mode").str(), "read-only");
        assert_eq!(j.at("sandbox.denied"), &Json::Bool(true));
        assert_ne!(r.code, 0);
    }
    assert!(!std::path::Path::new(&target).exists());
}

/// `seq 1 N` as the command prints it.
fn seq(n: u32) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

#[test]
fn keep_spill_paths_outlive_the_cli_and_hold_the_whole_stream() {
    // Both streams well over the default 64 000-byte window.
    let r = run(&["--json", "--keep-spill", "seq 1 40000; seq 1 30000 >&2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = Json::parse(&r.stdout);
    let mut dirs = Vec::new();
    for (stream, n) in [("stdout", 40000), ("stderr", 30000)] {
        assert_eq!(j.at(&format!("{stream}.truncated")), &Json::Bool(true));
        let path = std::path::PathBuf::from(j.at(&format!("{stream}.spill_path")).str());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            seq(n),
            "{}",
            path.display()
        );
        assert!(seq(n).ends_with(j.at(&format!("{stream}.text")).str()));
        dirs.push(path.parent().unwrap().to_owned());
    }
    assert_eq!(dirs[0], dirs[1]);
    let name = dirs[0].file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("dsh-cli-"), "{name}");
    std::fs::remove_dir_all(&dirs[0]).unwrap();

    // Human output, into a chosen directory (created if missing).
    let dir = TempDir::new("spill");
    let spill_dir = dir.path("kept");
    let r = run(&["--spill-dir", &spill_dir, "seq 1 40000"]);
    assert_eq!(r.code, 0);
    assert!(seq(40000).ends_with(&r.stdout));
    let path = r
        .stderr
        .strip_prefix("dsh-cli: stdout truncated, complete stream in ")
        .and_then(|p| p.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("unexpected summary: {}", r.stderr));
    assert!(path.starts_with(&spill_dir), "{path}");
    assert_eq!(std::fs::read_to_string(path).unwrap(), seq(40000));
    // Only the kept file: the executor's private directory is gone.
    assert_eq!(std::fs::read_dir(&spill_dir).unwrap().count(), 1);
}

#[test]
fn without_keep_spill_no_path_is_printed() {
    let r = run(&["--json", "seq 1 40000"]);
    let j = Json::parse(&r.stdout);
    assert_eq!(j.at("stdout.truncated"), &Json::Bool(true));
    assert_eq!(j.at("stdout.spill_path"), &Json::Null);
    let r = run(&["seq 1 40000"]);
    assert_eq!(
        r.stderr,
        "dsh-cli: stdout truncated (--keep-spill keeps the complete stream)\n"
    );
}

#[test]
fn background_streams_and_exits_with_the_status() {
    let r = run(&["--background", "echo one; echo two >&2; exit 4"]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(r.stdout.starts_with("one\n"), "{}", r.stdout);
    assert!(r.stdout.contains("[stderr]\ntwo\n"), "{}", r.stdout);
    assert_eq!(r.stderr, "");

    let r = run(&["--background", "--timeout", "200", "sleep 60"]);
    assert_eq!(r.code, 124, "{}", r.stderr);
    assert!(r.stderr.contains("timed out after 200 ms"), "{}", r.stderr);

    let r = run(&["--background", "kill -9 $$"]);
    assert_eq!(r.code, 137);

    let r = run(&["--background", "--json", "true"]);
    assert_eq!(r.code, 125);
}

/// The command tells the test its pids through a FIFO once it runs; the test
/// then signals the CLI, and checks the exit status and that both the shell
/// and its background child are gone.
fn interrupt(signal: libc::c_int, background: bool) -> support::Run {
    let dir = TempDir::new(&format!("interrupt-{signal}-{background}"));
    let fifo = dir.path("pids");
    let c = std::ffi::CString::new(fifo.clone()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut cmd = dsh();
    if background {
        cmd.arg("--background");
    }
    let child = cmd
        .arg(format!("sleep 600 & echo $$ $! > {fifo}; wait"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(std::fs::read_to_string(fifo).unwrap()));
    let pids: Vec<i32> = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the command never started")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    let r = finish(child.wait_with_output().unwrap());
    for pid in pids {
        // Gone, or a zombie awaiting its new parent: either way not running.
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            let state = stat.rsplit(')').next().unwrap().split_whitespace().next();
            assert_eq!(state, Some("Z"), "pid {pid} still running: {stat}");
        }
    }
    r
}

#[test]
fn ctrl_c_stops_the_command_and_exits_130() {
    let r = interrupt(libc::SIGINT, false);
    assert_eq!(r.code, 130, "{}", r.stderr);
    assert!(r.stderr.contains("stopped by SIGINT"), "{}", r.stderr);
}

#[test]
fn sigterm_stops_the_command_and_exits_143() {
    let r = interrupt(libc::SIGTERM, false);
    assert_eq!(r.code, 143, "{}", r.stderr);
}

#[test]
fn ctrl_c_stops_a_background_command_too() {
    let r = interrupt(libc::SIGINT, true);
    assert_eq!(r.code, 130, "{}", r.stderr);
}

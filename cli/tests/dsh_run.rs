//! `dsh run` as a script or a remote caller sees it: output that streams
//! live and byte for byte, stdin passed through, the words after `--`,
//! exit statuses, errors that name the option, and an interrupt that
//! leaves nothing running. Each run is bounded: a hang fails the test.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::{alive, wait_bounded, Json, TempDir};

fn dsh() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
}

struct Ran {
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
}

/// Waits for `child` at most [`LIMIT`], killing it past that.
fn finish(mut child: Child) -> Ran {
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        out.read_to_end(&mut bytes).unwrap();
        bytes
    });
    let mut stderr = String::new();
    err.read_to_string(&mut stderr).unwrap();
    let status = wait_bounded(&mut child, &format!("dsh run ({stderr})"));
    Ran {
        code: status.code().unwrap_or_else(|| panic!("dsh died: {status:?}")),
        stdout: reader.join().unwrap(),
        stderr,
    }
}

fn run_with(args: &[&str], input: &[u8]) -> Ran {
    let mut child = dsh()
        .arg("run")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dsh");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // A command that does not read its input must not block the test.
    std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    finish(child)
}

fn run(args: &[&str]) -> Ran {
    run_with(args, b"")
}

fn text(r: &Ran) -> &str {
    std::str::from_utf8(&r.stdout).unwrap()
}

#[test]
fn several_words_reach_the_program_as_they_are_however_long() {
    // Past one argument's 128 KiB, and a first word bash would take for an
    // assignment: a program's name, as `env` takes it.
    let words: Vec<String> = (0..15_000).map(|i| format!("file-{i:06}")).collect();
    let mut args = vec!["printf", "%s\n"];
    args.extend(words.iter().map(String::as_str));
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(text(&r).lines().count(), 15_000);
    let r = run(&["FOO=bar", "env"]);
    assert_eq!(r.code, 127, "an assignment ran: {}", text(&r));
}

#[test]
fn one_word_is_a_command_line_and_several_are_a_program_and_its_arguments() {
    let r = run(&["--", "echo a | wc -c; echo oops >&2; exit 3"]);
    assert_eq!((r.code, text(&r), r.stderr.as_str()), (3, "2\n", "oops\n"));
    let r = run(&["--", "sh", "-c", "printf '%s|' \"$0\" \"$1\"", "it's", "$HOME *"]);
    assert_eq!((r.code, text(&r)), (0, "it's|$HOME *|"));
    // The first word ends the options: what follows is the command's.
    let r = run(&["printf", "%s", "--json"]);
    assert_eq!(text(&r), "--json");
}

#[test]
fn a_binary_stream_passes_through_byte_exact() {
    let dir = TempDir::new("dsh-run-binary");
    let file = dir.path("data");
    // 64 MiB with every byte value, in an order that finds a lost or
    // repeated block.
    let data: Vec<u8> = (0..64u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&file, &data).unwrap();
    let r = run(&["cat", &file]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout == data,
        "the stream differs ({} bytes of {})",
        r.stdout.len(),
        data.len()
    );
}

#[test]
fn output_arrives_while_the_command_runs() {
    let mut child = dsh()
        .args(["run", "--", "echo first; read -r _; echo second"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    // The command waits for a line of input before it ends: its first line
    // must come before that.
    lines.read_line(&mut first).unwrap();
    assert_eq!(first, "first\n");
    assert!(
        child.try_wait().unwrap().is_none(),
        "dsh had ended before its output came"
    );
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    lines.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "second\n");
    assert!(child.wait().unwrap().success());
}

#[test]
fn stdin_is_dshs_own_unless_told_otherwise() {
    let r = run_with(&["tr a-z A-Z"], b"hello\n");
    assert_eq!(text(&r), "HELLO\n");
    let r = run_with(&["--no-stdin", "cat; echo end"], b"ignored\n");
    assert_eq!(text(&r), "end\n");
    let dir = TempDir::new("dsh-run-stdin");
    let file = dir.path("in");
    std::fs::write(&file, b"from the file\n").unwrap();
    let r = run_with(&["--stdin-file", &file, "cat"], b"not this\n");
    assert_eq!(text(&r), "from the file\n");
    let r = run(&["--stdin-file", "/nonexistent/in", "cat"]);
    assert_eq!(r.code, 125);
    assert!(r.stderr.contains("--stdin-file"), "{}", r.stderr);
    // There, but not something to read (open gives ENXIO): dsh fails, and
    // the command never runs on an empty input.
    let socket = dir.path("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let r = run(&["--stdin-file", &socket, "cat; echo ran"]);
    assert_eq!(r.code, 125, "{}", r.stderr);
    assert!(r.stderr.contains("--stdin-file"), "{}", r.stderr);
    assert_eq!(text(&r), "", "the command ran");
}

#[test]
fn exit_statuses_tell_timeout_signal_and_failure_apart() {
    let r = run(&[
        "--timeout",
        "300",
        "--",
        "trap 'echo term; exit 7' TERM; echo started; sleep 30 & wait",
    ]);
    assert_eq!(r.code, 124, "{}", r.stderr);
    assert_eq!(text(&r), "started\nterm\n");
    assert!(r.stderr.contains("timed out"), "{}", r.stderr);
    let r = run(&["kill -9 $$"]);
    assert_eq!((r.code, r.stderr.as_str()), (137, "dsh: killed by SIGKILL\n"));
    let r = run(&["--workdir", "/nonexistent-dsh", "true"]);
    assert_eq!(r.code, 125);
    assert!(r.stderr.contains("/nonexistent-dsh"), "{}", r.stderr);
}

#[test]
fn errors_name_the_option_not_the_field() {
    for (args, needle) in [
        (&["--timeout", "0", "true"][..], "--timeout"),
        (&["--grace", "0", "true"], "--grace"),
        (&["--memory", "lots", "true"], "'--memory'"),
        (&["--bogus", "true"], "'--bogus'"),
        (&["--workspace", "/tmp", "true"], "--workspace"),
    ] {
        let r = run(args);
        assert_eq!(r.code, 125, "{args:?}");
        assert!(r.stderr.contains(needle), "{args:?}: {}", r.stderr);
        assert!(
            !r.stderr.contains("spawn."),
            "{args:?} names an internal field: {}",
            r.stderr
        );
    }
}

#[test]
fn json_gives_every_fact_and_keeps_the_last_bytes() {
    let r = run(&[
        "--json",
        "--max-output",
        "4",
        "--",
        "printf 'abcdefgh'; printf 'e' >&2; exit 2",
    ]);
    assert_eq!(r.code, 2);
    let j = Json::parse(text(&r));
    assert_eq!(
        j.keys(),
        [
            "exit_code",
            "signal",
            "exit_status_unavailable",
            "timed_out",
            "interrupted",
            "stdout",
            "stderr",
            "sandbox",
            "survivors",
            "limit",
            "limits_enforcement"
        ]
    );
    assert_eq!(j.at("exit_code"), &Json::Num(2.0));
    assert_eq!(j.at("stdout.text").str(), "efgh");
    assert_eq!(j.at("stdout.truncated"), &Json::Bool(true));
    assert_eq!(j.at("stderr.text").str(), "e");
    assert_eq!(j.at("stderr.truncated"), &Json::Bool(false));
}

#[test]
// Reaped by wait4 (for its rusage), which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn json_of_a_large_output_is_written_without_copies_of_it() {
    // 32 MiB of NUL bytes: each is six characters of JSON (\u0000), so the
    // line is 192 MiB. Serialized into a string, then copied with its
    // newline, dsh peaked at ~14 times the output; written as it is
    // serialized, at ~3.
    const OUTPUT: usize = 32 << 20;
    let mut child = dsh()
        .args(["run", "--json", "--max-output", "32M", "--"])
        .arg(format!("head -c {OUTPUT} /dev/zero"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn dsh");
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        // Counted, not kept: the test's own memory is not what is measured.
        let (mut total, mut tail, mut buf) = (0usize, Vec::new(), vec![0u8; 1 << 16]);
        loop {
            let n = out.read(&mut buf).unwrap();
            if n == 0 {
                return (total, tail);
            }
            total += n;
            tail.extend_from_slice(&buf[..n]);
            let keep = tail.len().saturating_sub(256);
            tail.drain(..keep);
        }
    });
    // wait4 gives this child's own peak memory; polled, so a hang fails.
    let pid = child.id() as libc::pid_t;
    let start = std::time::Instant::now();
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is our unreaped child; both out-pointers are live.
        let got = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(got >= 0, "wait4: {}", std::io::Error::last_os_error());
        if got == pid {
            break (status, usage);
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("dsh run --json of {OUTPUT} bytes did not end within 120 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "status {status:#x}"
    );
    let (total, tail) = reader.join().unwrap();
    // The whole stream is there, each NUL escaped.
    assert!(
        total > 6 * OUTPUT && total < 6 * OUTPUT + 4096,
        "{total} bytes of JSON"
    );
    let peak = usage.ru_maxrss as usize * 1024;
    assert!(
        peak < 5 * OUTPUT,
        "dsh peaked at {} MiB for {} MiB of output",
        peak >> 20,
        OUTPUT >> 20
    );
    assert!(
        String::from_utf8_lossy(&tail).ends_with("\"limits_enforcement\":{}}\n"),
        "{}",
        String::from_utf8_lossy(&tail)
    );
}

#[test]
fn one_pipe_for_both_streams_losing_its_reader_is_not_a_caller_gone() {
    // `dsh run … 2>&1 | head -1`: the command finishes its silent work.
    let dir = TempDir::new("dsh-run-2to1");
    let marker = dir.path("marker");
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both are fresh descriptors, owned from here on.
    let (read, write) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    let mut child = dsh()
        .args(["run", "--", &format!("echo start; sleep 1; echo done > {marker}")])
        .stdin(Stdio::null())
        .stdout(write.try_clone().unwrap())
        .stderr(write)
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(read).read_line(&mut first).unwrap(); // then the reader is gone
    assert_eq!(first, "start\n");
    let status = wait_bounded(&mut child, "dsh");
    assert_eq!(status.code(), Some(0));
    assert!(std::path::Path::new(&marker).exists(), "the command was stopped");
}

#[test]
fn an_ignored_hangup_stays_ignored() {
    use std::os::unix::process::CommandExt;
    let mut cmd = dsh();
    cmd.args(["run", "--", "sleep 1; echo survived"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // As nohup leaves it.
    // SAFETY: signal(2) is async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        })
    };
    let child = cmd.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) takes integers; the child is ours and not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    let r = finish(child);
    assert_eq!((r.code, text(&r)), (0, "survived\n"), "{}", r.stderr);
}

#[test]
fn waiting_for_a_stdin_fifo_is_interruptible() {
    let dir = TempDir::new("dsh-run-fifo");
    let fifo = dir.path("fifo");
    let c = std::ffi::CString::new(fifo.clone()).unwrap();
    // SAFETY: mkfifo takes a NUL-terminated path and a mode.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let child = dsh()
        .args(["run", "--stdin-file", &fifo, "--", "cat"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300)); // nobody writes to it
                                                    // SAFETY: kill(2) takes integers; the child is ours and not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let r = finish(child);
    assert_eq!(r.code, 130, "{}", r.stderr);
    let r = run(&["--stdin-file", "/tmp", "cat"]);
    assert_eq!(r.code, 125);
    assert!(r.stderr.contains("is a directory"), "{}", r.stderr);
}

#[test]
fn an_interrupt_stops_the_whole_tree() {
    let mut child = dsh()
        .args(["run", "--grace", "500", "--", "sleep 300 & echo $!; wait"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let sleeper: i32 = line.trim().parse().unwrap();
    assert!(alive(sleeper));
    // SAFETY: kill(2) takes integers; the child is ours and not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = wait_bounded(&mut child, "dsh after SIGINT");
    assert_eq!(status.code(), Some(130));
    assert!(!alive(sleeper), "the command's child outlived dsh");
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.contains("stopped by SIGINT"), "{err}");
}

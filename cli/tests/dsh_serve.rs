//! `dsh serve`: the protocol face as a client meets it, through the built
//! binary. What a remote harness relies on: each call does what the local
//! executor's does, errors carry the core's code and field, and a
//! connection that ends (input closed, server killed, socket server
//! stopped, ssh dropped) leaves nothing running.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod support;
use support::rpc::Rpc;
use support::sshd::{skip, Sshd};
use support::{alive, gone_within, wait_bounded, TempDir};

/// Waits until a file holds a pid (a command wrote `$!` there).
fn pid_in(file: &Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(file) {
            if let Ok(pid) = s.trim().parse() {
                return pid;
            }
        }
        assert!(
            start.elapsed() < support::LIMIT,
            "{} never held a pid",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A command that leaves a grandchild (`sleep 300 &`) and names it.
fn leaves_sleeper(file: &Path) -> Value {
    json!({ "command": format!("sleep 300 & echo $! > {}; wait", file.display()) })
}

#[test]
fn each_call_does_what_the_executor_does() {
    let mut rpc = Rpc::local();
    // Nothing before initialize; a wrong version names the field.
    assert_eq!(rpc.call("list", json!({}))["error"]["code"], -32002);
    let wrong = rpc.call("initialize", json!({ "protocol_version": 2 }));
    assert_eq!(wrong["error"]["data"]["field"], "protocol_version");
    let init = rpc.initialize(json!({ "grace_ms": 500 }));
    assert_eq!(init["protocol_version"], 1);
    assert_eq!(init["config"]["grace_ms"], 500);
    assert!(init["host"]["facts"]["limits_support"].is_object());

    let spec = rpc.spec(json!({ "command": "echo hi; printf 'e\\377' >&2; exit 3", "timeout_ms": 20000 }));
    assert_eq!(spec["timeout_ms"], 20000);
    let result = rpc.ok("run", json!({ "spec": spec }))["result"].clone();
    assert_eq!(
        (
            &result["exit_code"],
            &result["stdout"]["text"],
            &result["stderr"]["text"],
            &result["timed_out"]
        ),
        (&json!(3), &json!("hi\n"), &json!("e\u{fffd}"), &json!(false))
    );

    // Background: stdin bytes in order, consuming reads, the notification.
    let spec = rpc.spec(json!({ "command": "cat; echo end", "stdin_pipe": true, "owner": "o-1" }));
    let process = rpc.ok("start", json!({ "spec": spec }))["process"].clone();
    let id = process["id"].as_str().unwrap().to_owned();
    assert_eq!(
        (&process["status"], &process["has_stdin_pipe"]),
        (&json!("running"), &json!(true))
    );
    rpc.ok("write_stdin", json!({ "id": id, "data": "one " }));
    rpc.ok("write_stdin", json!({ "id": id, "data_base64": "dHdvCg==" }));
    assert_eq!(rpc.ok("close_stdin", json!({ "id": id }))["closed"], true);
    let waited = rpc.ok("wait", json!({ "id": id }));
    assert_eq!(
        (&waited["settled"], &waited["process"]["exit_code"]),
        (&json!(true), &json!(0))
    );
    assert_eq!(
        rpc.ok("read_output", json!({ "id": id }))["delta"],
        "one two\nend\n"
    );
    assert_eq!(rpc.ok("read_output", json!({ "id": id }))["delta"], "");
    assert_eq!(rpc.ok("owner_of", json!({ "id": id }))["owner"], "o-1");
    assert!(rpc
        .notes
        .iter()
        .any(|n| n["method"] == "task_done" && n["params"]["process"]["id"] == id));
    let closed = rpc.call("write_stdin", json!({ "id": id, "data": "x" }));
    assert_eq!(
        (&closed["error"]["data"]["code"], &closed["error"]["data"]["id"]),
        (&json!("STDIN_CLOSED"), &json!(id))
    );

    // A wait with a timeout answers unsettled; kill and forget.
    let spec = rpc.spec(json!({ "command": "sleep 300" }));
    let id2 = rpc.ok("start", json!({ "spec": spec }))["process"]["id"].clone();
    let waited = rpc.ok("wait", json!({ "id": id2, "timeout_ms": 50 }));
    assert_eq!(waited["settled"], false);
    // A bad timeout of the wrong type or value names the parameter as given.
    for bad in [json!("5"), json!(true), json!(-1)] {
        let refused = rpc.call("wait", json!({ "id": id2, "timeout_ms": bad }));
        assert_eq!(
            refused["error"]["data"]["field"], "timeout_ms",
            "{bad}: {refused}"
        );
    }
    // A timeout past any clock is no timeout (it once took the server down).
    rpc.send_line(json!({ "jsonrpc": "2.0", "id": 901, "method": "wait", "params": { "id": id2, "timeout_ms": 1e303 } }).to_string().as_bytes());
    let still = rpc.call("forget", json!({ "id": id2 }));
    assert_eq!(
        (&still["error"]["data"]["code"], &still["error"]["data"]["id"]),
        (&json!("STILL_RUNNING"), &id2)
    );
    let missing = rpc.call("kill", json!({ "id": "bash-77" }));
    assert_eq!(missing["error"]["data"]["id"], "bash-77");
    assert_eq!(rpc.ok("kill", json!({ "id": id2 }))["began"], true);
    assert_eq!(
        rpc.ok("wait", json!({ "id": id2 }))["process"]["signal"],
        "SIGTERM"
    );
    rpc.ok("forget", json!({ "id": id2 }));
    assert_eq!(rpc.ok("get", json!({ "id": id2 }))["process"], Value::Null);
    assert_eq!(
        rpc.ok("list", json!({}))["processes"].as_array().unwrap().len(),
        1
    );

    // A run cancelled by its run_id reports aborted.
    let spec = rpc.spec(json!({ "command": "sleep 300" }));
    rpc.send_line(
        json!({ "jsonrpc": "2.0", "id": 900, "method": "run", "params": { "spec": spec, "run_id": "r" } })
            .to_string()
            .as_bytes(),
    );
    let start = Instant::now();
    while !rpc.ok("cancel", json!({ "run_id": "r" }))["cancelled"]
        .as_bool()
        .unwrap()
    {
        assert!(start.elapsed() < support::LIMIT);
    }
    let aborted = rpc.answer(900)["result"]["result"].clone();
    assert_eq!(
        (&aborted["aborted"], &aborted["timed_out"]),
        (&json!(true), &json!(false))
    );

    // Errors: the core's code and field, snake_case.
    for (method, params, code, field) in [
        (
            "resolve",
            json!({ "request": { "command": "x", "work_dir": "/" } }),
            "INVALID_ARGUMENT",
            json!("request.work_dir"),
        ),
        (
            "resolve",
            json!({ "request": { "command": "x", "timeout_ms": 0 } }),
            "INVALID_ARGUMENT",
            json!("request.timeout_ms"),
        ),
        (
            "resolve",
            json!({ "request": { "command": "x", "limits": { "memory_bytes": "1G" } } }),
            "INVALID_ARGUMENT",
            json!("request.limits.memory_bytes"),
        ),
        (
            "run",
            json!({ "spec": { "command": "x" } }),
            "INVALID_ARGUMENT",
            json!("spec.workdir"),
        ),
        (
            "read_output",
            json!({ "id": "bash-99" }),
            "NOT_FOUND",
            Value::Null,
        ),
        ("kill", json!({}), "INVALID_ARGUMENT", json!("id")),
        ("list", json!({ "all": true }), "INVALID_ARGUMENT", json!("all")),
    ] {
        let e = rpc.call(method, params.clone());
        assert_eq!(
            (
                &e["error"]["data"]["code"],
                e["error"]["data"].get("field").unwrap_or(&Value::Null)
            ),
            (&json!(code), &field),
            "{method} {params}: {e}"
        );
    }
    assert_eq!(rpc.call("walk", json!({}))["error"]["code"], -32601);

    // dispose ends the session's executor; later calls say so.
    rpc.ok("dispose", json!({}));
    let e = rpc.call("start", json!({ "spec": spec }));
    assert_eq!(e["error"]["data"]["code"], "DISPOSED");
}

#[test]
fn the_end_of_the_input_ends_everything_it_started() {
    let dir = TempDir::new("serve-eof");
    let mut rpc = Rpc::local();
    rpc.initialize(json!({}));
    let spec = rpc.spec(leaves_sleeper(&dir.0.join("bg")));
    rpc.ok("start", json!({ "spec": spec }));
    let background = pid_in(&dir.0.join("bg"));
    // A foreground run in flight too.
    let spec = rpc.spec(leaves_sleeper(&dir.0.join("fg")));
    rpc.send_line(
        json!({ "jsonrpc": "2.0", "id": 77, "method": "run", "params": { "spec": spec } })
            .to_string()
            .as_bytes(),
    );
    let foreground = pid_in(&dir.0.join("fg"));
    rpc.close_input();
    gone_within(
        background,
        Duration::from_secs(1),
        "background, after the input closed",
    );
    gone_within(
        foreground,
        Duration::from_secs(1),
        "foreground, after the input closed",
    );
    assert!(rpc.wait_exit().success());
}

#[test]
fn a_killed_server_leaves_nothing_running() {
    let dir = TempDir::new("serve-kill");
    let mut rpc = Rpc::local();
    rpc.initialize(json!({}));
    let spec = rpc.spec(leaves_sleeper(&dir.0.join("bg")));
    rpc.ok("start", json!({ "spec": spec }));
    let sleeper = pid_in(&dir.0.join("bg"));
    rpc.child().kill().unwrap();
    rpc.child().wait().unwrap();
    gone_within(sleeper, Duration::from_secs(1), "after the server was killed");
}

#[test]
fn a_unix_socket_is_private_and_a_signal_ends_it_all() {
    let dir = TempDir::new("serve-unix");
    let socket = dir.0.join("dsh.sock");
    let listen = format!("unix:{}", socket.display());
    let mut server = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["serve", "--listen", &listen])
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(start.elapsed() < support::LIMIT, "the socket never accepted");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket is open to others: {mode:o}");
    // A second server on a live socket is refused, and leaves it alone.
    let second = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["serve", "--listen", &listen])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("another server"),
        "{second:?}"
    );

    // Two connections, each its own executor (its own bash-1).
    let mut clients: Vec<Rpc> = (0..2).map(|_| Rpc::unix(&socket)).collect();
    let mut sleepers = Vec::new();
    for (i, rpc) in clients.iter_mut().enumerate() {
        rpc.initialize(json!({}));
        let file = dir.0.join(format!("s{i}"));
        let spec = rpc.spec(leaves_sleeper(&file));
        assert_eq!(
            rpc.ok("start", json!({ "spec": spec }))["process"]["id"],
            "bash-1"
        );
        sleepers.push(pid_in(&file));
    }
    // SAFETY: kill(2) takes integers.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    for pid in sleepers {
        gone_within(pid, Duration::from_secs(5), "after SIGTERM to the socket server");
    }
    assert!(wait_bounded(&mut server, "dsh serve --listen").success());
    assert!(!socket.exists(), "the socket file was left behind");
}

#[test]
fn of_servers_started_at_once_on_one_socket_one_listens_and_the_others_are_refused() {
    // Each checks that no server listens, then puts its socket in place:
    // one that replaced another's live socket would go on listening on a
    // name nobody can reach. Tried in rounds, so the race is met.
    let dir = TempDir::new("serve-race");
    let socket = dir.0.join("dsh.sock");
    let listen = format!("unix:{}", socket.display());
    /// Kills what is left, also when an assertion fails.
    struct Servers(Vec<std::process::Child>);
    impl Drop for Servers {
        fn drop(&mut self) {
            for s in &mut self.0 {
                let _ = s.kill();
                let _ = s.wait();
            }
        }
    }
    for round in 0..15 {
        let mut guard = Servers(Vec::new());
        let servers = &mut guard.0;
        *servers = (0..6)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_dsh"))
                    .args(["serve", "--listen", &listen])
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let start = Instant::now();
        // The refused ones exit (125); wait until all but one have.
        let live = loop {
            let live: Vec<usize> = servers
                .iter_mut()
                .enumerate()
                .filter_map(|(i, s)| s.try_wait().unwrap().is_none().then_some(i))
                .collect();
            if live.len() <= 1 && std::os::unix::net::UnixStream::connect(&socket).is_ok() {
                break live;
            }
            assert!(
                start.elapsed() < support::LIMIT,
                "round {round}: {} servers still running",
                live.len()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(live.len(), 1, "round {round}");
        for (i, s) in servers.iter_mut().enumerate() {
            if i != live[0] {
                assert_eq!(s.wait().unwrap().code(), Some(125), "round {round}");
            }
        }
        let winner = &mut servers[live[0]];
        // SAFETY: kill(2) takes integers.
        unsafe { libc::kill(winner.id() as i32, libc::SIGTERM) };
        assert!(wait_bounded(winner, "dsh serve --listen").success());
        assert!(!socket.exists(), "round {round}: the socket file was left behind");
    }
}

#[test]
fn over_ssh_a_dropped_connection_ends_the_session() {
    let sshd = match Sshd::start("serve") {
        Ok(s) => s,
        Err(why) => return skip(&why),
    };
    let file = sshd.dir.join("sleeper");
    let mut command = sshd.ssh(&format!("{} serve --stdio", env!("CARGO_BIN_EXE_dsh")));
    command.stderr(std::process::Stdio::null());
    let mut rpc = Rpc::spawn(command);
    rpc.initialize(json!({}));
    let spec = rpc.spec(json!({ "command": "echo over ssh", "timeout_ms": 20000 }));
    assert_eq!(
        rpc.ok("run", json!({ "spec": spec }))["result"]["stdout"]["text"],
        "over ssh\n"
    );
    let spec = rpc.spec(leaves_sleeper(&file));
    rpc.ok("start", json!({ "spec": spec }));
    let sleeper = pid_in(&file);
    // The connection goes: its client is killed, as a network loss would.
    rpc.child().kill().unwrap();
    rpc.child().wait().unwrap();
    gone_within(
        sleeper,
        Duration::from_secs(1),
        "after the ssh connection dropped",
    );
}

#[test]
fn a_mirror_reads_by_offset_names_its_processes_and_hears_of_new_output() {
    let mut rpc = Rpc::local();
    let init = rpc.ok(
        "initialize",
        json!({ "protocol_version": 1, "output_notifications": true }),
    );
    assert!(init["notifications"]
        .as_array()
        .unwrap()
        .contains(&json!("output")));
    // The client names the process; the name is held.
    let spec = rpc.spec(json!({ "command": "printf 'a\\xc3'; sleep 0.3; printf '\\xa9b'; echo E >&2; sleep 300", "stdin_pipe": true }));
    let p = rpc.ok("start", json!({ "spec": spec, "id": "mine-1" }))["process"].clone();
    assert_eq!(p["id"], "mine-1");
    let taken = rpc.call("start", json!({ "spec": spec, "id": "mine-1" }));
    assert_eq!(taken["error"]["data"]["field"], "spec.id");
    // Reads by offset never consume, and never split a character.
    let wait_for = |rpc: &mut Rpc, end: u64| {
        let start = Instant::now();
        loop {
            let note = rpc.next();
            if note["method"] == "output"
                && note["params"]["id"] == "mine-1"
                && note["params"]["stdout_end"].as_u64() >= Some(end)
            {
                return note;
            }
            assert!(start.elapsed() < support::LIMIT, "no output notification");
        }
    };
    let note = wait_for(&mut rpc, 2);
    assert_eq!(note["params"]["settled"], false);
    let first = rpc.ok(
        "read_from",
        json!({ "id": "mine-1", "stream": "stdout", "from": 0 }),
    );
    assert_eq!((&first["text"], &first["next_offset"]), (&json!("a"), &json!(1)));
    wait_for(&mut rpc, 4);
    let rest = rpc.ok(
        "read_from",
        json!({ "id": "mine-1", "stream": "stdout", "from": 1 }),
    );
    assert_eq!(rest["text"], "\u{e9}b");
    let again = rpc.ok(
        "read_from",
        json!({ "id": "mine-1", "stream": "stdout", "from": 0 }),
    );
    assert_eq!(again["text"], "a\u{e9}b");
    // The consuming read still sees everything: offset reads took nothing.
    let start = Instant::now();
    loop {
        let err = rpc.ok("read_from", json!({ "id": "mine-1", "stream": "stderr" }));
        if err["text"] == "E\n" {
            break;
        }
        assert!(start.elapsed() < support::LIMIT);
    }
    assert_eq!(
        rpc.ok("read_output", json!({ "id": "mine-1" }))["delta"],
        "a\u{e9}b\n[stderr]\nE\n"
    );
    let offsets = rpc.ok("get", json!({ "id": "mine-1" }))["process"]["output"].clone();
    assert_eq!(
        offsets,
        json!({ "stdout_read": 4, "stderr_read": 2, "stdout_end": 4, "stderr_end": 2 })
    );
    let bad = rpc.call("read_from", json!({ "id": "mine-1", "stream": "both" }));
    assert_eq!(bad["error"]["data"]["field"], "stream");

    // A run's hand-over registers under the id the client gave.
    let spec =
        rpc.spec(json!({ "command": "echo early; sleep 300", "timeout_ms": 300, "on_expiry": "background" }));
    let result = rpc.ok("run", json!({ "spec": spec, "background_id": "mine-2" }))["result"].clone();
    assert_eq!(
        (&result["background_id"], &result["stdout"]["text"]),
        (&json!("mine-2"), &json!("early\n"))
    );
    // Its mirror starts where the result ended.
    let handed = rpc.ok("get", json!({ "id": "mine-2" }))["process"]["output"].clone();
    assert_eq!(handed["stdout_read"], 6);
    rpc.ok("kill", json!({ "id": "mine-2" }));
    rpc.ok("kill", json!({ "id": "mine-1" }));
    let settled = wait_until_settled_note(&mut rpc, "mine-1");
    assert_eq!(settled["params"]["settled"], true);
}

/// The `output` notification that says `id` settled.
fn wait_until_settled_note(rpc: &mut Rpc, id: &str) -> Value {
    let start = Instant::now();
    loop {
        let note = rpc.next();
        if note["method"] == "output" && note["params"]["id"] == id && note["params"]["settled"] == true {
            return note;
        }
        assert!(
            start.elapsed() < support::LIMIT,
            "no final output notification for {id}"
        );
    }
}

/// `count` numbered lines, one per 20 ms, then a long sleep.
const LINES: &str = "for i in $(seq 1 60); do echo line-$i; sleep 0.02; done; sleep 300";

fn expected_lines() -> String {
    (1..=60).map(|i| format!("line-{i}\n")).collect()
}

/// Reads `id`'s stdout by offset from `from` until `want` bytes are there.
fn read_until(rpc: &mut Rpc, id: &str, from: u64, want: usize) -> (String, u64) {
    let (mut text, mut at) = (String::new(), from);
    let start = Instant::now();
    while text.len() < want {
        let r = rpc.ok("read_from", json!({ "id": id, "stream": "stdout", "from": at }));
        assert_eq!(r["lossy"], false);
        text.push_str(r["text"].as_str().unwrap());
        at = r["next_offset"].as_u64().unwrap();
        assert!(start.elapsed() < support::LIMIT, "only {text:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    (text, at)
}

#[test]
fn over_ssh_a_lingering_session_resumes_with_every_byte_once() {
    let sshd = match Sshd::start("linger") {
        Ok(s) => s,
        Err(why) => return skip(&why),
    };
    let socket = sshd.dir.join("linger.sock");
    let relay = format!(
        "{} serve --stdio --linger 60 --socket {}",
        env!("CARGO_BIN_EXE_dsh"),
        socket.display()
    );
    let connect = |sshd: &Sshd| {
        let mut command = sshd.ssh(&relay);
        command.stderr(std::process::Stdio::null());
        Rpc::spawn(command)
    };
    let mut first = connect(&sshd);
    let init = first.initialize(json!({}));
    let token = init["session"]["token"]
        .as_str()
        .expect("a lingering session has a token")
        .to_owned();
    assert_eq!(init["session"]["linger_ms"], 60_000);
    let spec = first.spec(json!({ "command": LINES }));
    first.ok("start", json!({ "spec": spec, "id": "job" }));
    // A foreground run whose answer comes while nobody is connected.
    let spec = first.spec(json!({ "command": "sleep 1; echo late", "timeout_ms": 30000 }));
    first.send_line(
        json!({ "jsonrpc": "2.0", "id": 500, "method": "run", "params": { "spec": spec } })
            .to_string()
            .as_bytes(),
    );
    let (before, cursor) = read_until(&mut first, "job", 0, 40);
    // The connection drops mid-run.
    first.child().kill().unwrap();
    first.child().wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let mut second = connect(&sshd);
    let resumed = second.ok("initialize", json!({ "protocol_version": 1, "resume": token }));
    assert_eq!(
        (&resumed["session"]["resumed"], &resumed["session"]["missed"]),
        (&json!(true), &json!(false))
    );
    let all = expected_lines();
    let (after, _) = read_until(&mut second, "job", cursor, all.len() - before.len());
    assert_eq!(before + &after, all, "every byte once, in order");
    // The run's answer, kept while nobody was connected.
    let late = match second.others.iter().find(|m| m["id"] == 500) {
        Some(m) => m.clone(),
        None => second.answer(500),
    };
    assert_eq!(late["result"]["result"]["stdout"]["text"], "late\n");
    // A second connection cannot take an attached session.
    let mut third = connect(&sshd);
    let refused = third.call("initialize", json!({ "protocol_version": 1, "resume": token }));
    assert!(
        refused["error"]["message"].as_str().unwrap().contains("attached"),
        "{refused}"
    );
    second.ok("dispose", json!({}));
    let gone = third.call("initialize", json!({ "protocol_version": 1, "resume": token }));
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    // The server the relay started outlives its connections by design; a
    // SIGTERM ends it, and it removes its socket.
    let server = processes_naming(&socket.display().to_string());
    assert_eq!(server.len(), 1, "one lingering server: {server:?}");
    // SAFETY: kill(2) takes integers.
    unsafe { libc::kill(server[0], libc::SIGTERM) };
    gone_within(
        server[0],
        Duration::from_secs(5),
        "the lingering server after SIGTERM",
    );
    assert!(!socket.exists());
}

/// The pids whose command line names `needle` (a `dsh serve --listen`).
fn processes_naming(needle: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                String::from_utf8_lossy(&c).contains(needle)
                    && String::from_utf8_lossy(&c).contains("--listen")
            })
        })
        .filter(|pid| alive(*pid))
        .collect()
}

#[test]
fn a_session_not_resumed_in_its_linger_time_is_ended() {
    let dir = TempDir::new("serve-linger-end");
    let socket = dir.0.join("s.sock");
    let mut server = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args([
            "serve",
            "--listen",
            &format!("unix:{}", socket.display()),
            "--linger",
            "1",
        ])
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(start.elapsed() < support::LIMIT);
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut rpc = Rpc::unix(&socket);
    let token = rpc.initialize(json!({}))["session"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let spec = rpc.spec(leaves_sleeper(&dir.0.join("bg")));
    rpc.ok("start", json!({ "spec": spec }));
    let sleeper = pid_in(&dir.0.join("bg"));
    drop(rpc);
    // Kept for its linger time (1 s), then ended.
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(sleeper), "ended before its linger time");
    gone_within(sleeper, Duration::from_secs(3), "after its linger time");
    let mut late = Rpc::unix(&socket);
    let refused = late.call("initialize", json!({ "protocol_version": 1, "resume": token }));
    assert_eq!(refused["error"]["code"], -32602);
    // SAFETY: kill(2) takes integers.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    assert!(wait_bounded(&mut server, "dsh serve").success());
}

#[test]
fn a_socket_that_exists_accepts_at_once() {
    let dir = TempDir::new("serve-ready");
    for round in 0..10 {
        let socket = dir.0.join(format!("s{round}.sock"));
        let mut server = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .args(["serve", "--listen", &format!("unix:{}", socket.display())])
            .spawn()
            .unwrap();
        let start = Instant::now();
        while !socket.exists() {
            assert!(start.elapsed() < support::LIMIT, "the socket never appeared");
            std::thread::sleep(Duration::from_micros(200));
        }
        let connected = std::os::unix::net::UnixStream::connect(&socket);
        assert!(
            connected.is_ok(),
            "round {round}: the socket was there but refused: {connected:?}"
        );
        // SAFETY: kill(2) takes integers.
        unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
        assert!(wait_bounded(&mut server, "dsh serve").success());
        let leftovers: Vec<_> = std::fs::read_dir(&dir.0)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
    }
}

/// A server in pid, mount and network namespaces of its own, as in a
/// container (`kubectl exec` into a pod): the same stdio transport.
#[test]
fn a_server_in_namespaces_of_its_own_serves_and_ends_with_its_connection() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/unshare").exists() {
        return skip("needs root and unshare(1) (util-linux) to make the namespaces");
    }
    let dir = TempDir::new("serve-ns");
    let mut command = Command::new("/usr/bin/unshare");
    command
        .args(["--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--"])
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .args(["serve", "--stdio"]);
    let mut rpc = Rpc::spawn(command);
    rpc.initialize(json!({}));
    // Its own pid namespace (the server is pid 1 there) and network (only lo).
    let spec = rpc.spec(json!({ "command": "echo $PPID; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", "timeout_ms": 30000 }));
    let r = rpc.ok("run", json!({ "spec": spec }))["result"].clone();
    let text = r["stdout"]["text"].as_str().unwrap().to_owned();
    let mut lines = text.lines();
    let parent: i32 = lines.next().unwrap().parse().unwrap();
    assert!(
        parent < 100,
        "not in a pid namespace of its own: the command's parent is {parent}"
    );
    assert_eq!(
        lines.collect::<Vec<_>>(),
        ["lo"],
        "not in a network namespace of its own: {text}"
    );
    // A process left running there, named from outside by its tag file.
    let spec =
        rpc.spec(json!({ "command": format!("sleep 300 & echo $! > {}; wait", dir.0.join("ns").display()) }));
    rpc.ok("start", json!({ "spec": spec, "id": "left" }));
    let inner = pid_in(&dir.0.join("ns"));
    // Its pid outside: the sleep in the server's pid namespace whose pid
    // there is the one it wrote.
    let unshare = rpc.child().id();
    let server: i32 = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
        .unwrap()
        .split_whitespace()
        .next()
        .expect("unshare's child, the server")
        .parse()
        .unwrap();
    let namespace = |pid: i32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let find = || -> Vec<i32> {
        processes_named("sleep")
            .into_iter()
            .filter(|pid| namespace(*pid).is_some() && namespace(*pid) == namespace(server))
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                    s.lines().any(|l| {
                        l.starts_with("NSpid:") && l.split_whitespace().last() == Some(&inner.to_string())
                    })
                })
            })
            .collect()
    };
    // `$!` is written when bash has forked it, maybe before it is `sleep`.
    let start = Instant::now();
    let mut outside = find();
    while outside.is_empty() && start.elapsed() < support::LIMIT {
        std::thread::sleep(Duration::from_millis(10));
        outside = find();
    }
    assert_eq!(
        outside.len(),
        1,
        "the sleep in the server's pid namespace: {outside:?}"
    );
    rpc.close_input();
    for pid in outside {
        gone_within(
            pid,
            Duration::from_secs(2),
            "in the namespaces, after the connection ended",
        );
    }
    assert!(rpc.wait_exit().success());
}

/// The pids of live processes whose name (comm) is `name`.
fn processes_named(name: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name))
        .filter(|pid| alive(*pid))
        .collect()
}

#[test]
fn terminal_sessions_over_the_protocol() {
    let mut rpc = Rpc::local();
    let init = rpc.initialize(json!({}));
    assert!(init["methods"]
        .as_array()
        .unwrap()
        .contains(&json!("terminal_spawn")));
    let t = rpc.ok(
        "terminal_spawn",
        json!({ "request": { "argv": ["bash", "--norc", "--noprofile", "-i"], "rows": 30, "cols": 100, "env": { "PS1": "$ " } } }),
    )["terminal"]
        .clone();
    let id = t["id"].as_str().unwrap().to_owned();
    assert_eq!((&t["exited"], t["pid"].as_i64().is_some()), (&json!(false), true));
    // Waiting for input, as the kernel shows it.
    assert_eq!(
        rpc.ok(
            "terminal_wait_input_waiting",
            json!({ "id": id, "timeout_ms": 20000 })
        )["waiting"],
        true
    );
    rpc.ok(
        "terminal_write",
        json!({ "id": id, "data": "stty size; echo \"é\"x\n" }),
    );
    let mut seen = String::new();
    let start = Instant::now();
    while !seen.contains("30 100") || !seen.contains("éx") {
        assert!(start.elapsed() < support::LIMIT, "saw {seen:?}");
        let r = rpc.ok("terminal_read", json!({ "id": id, "wait_ms": 5000 }));
        seen.push_str(r["text"].as_str().unwrap());
    }
    rpc.ok("terminal_resize", json!({ "id": id, "rows": 40, "cols": 120 }));
    let fg = rpc.ok("terminal_inspect_foreground", json!({ "id": id }))["foreground"].clone();
    assert!(fg["process_group_id"].as_i64().is_some(), "{fg}");
    let bad = rpc.call("terminal_resize", json!({ "id": id, "rows": 0, "cols": 1 }));
    assert_eq!(bad["error"]["data"]["field"], "terminal.rows");
    let bad = rpc.call(
        "terminal_signal_foreground",
        json!({ "id": id, "signal": "SIGUSR1" }),
    );
    assert_eq!(bad["error"]["data"]["field"], "terminal.signal");
    // A long-poll answers empty when nothing comes in time (once the
    // prompt the resize redrew has been read).
    let start = Instant::now();
    loop {
        let quiet = rpc.ok("terminal_read", json!({ "id": id, "wait_ms": 300 }));
        if quiet["text"] == "" {
            assert_eq!(quiet["ended"], false);
            break;
        }
        assert!(start.elapsed() < support::LIMIT, "never quiet");
    }
    rpc.ok("terminal_write", json!({ "id": id, "data": "exit 7\n" }));
    let waited = rpc.ok("terminal_wait", json!({ "id": id, "timeout_ms": 30000 }));
    assert_eq!(
        (&waited["exited"], &waited["terminal"]["exit_code"]),
        (&json!(true), &json!(7))
    );
    let exit = rpc.note(|n| n["method"] == "terminal_exit");
    assert_eq!(exit["params"]["terminal"]["id"], id);
    // Read to the end: `ended` once everything was taken.
    let start = Instant::now();
    loop {
        let r = rpc.ok("terminal_read", json!({ "id": id, "wait_ms": 1000 }));
        if r["ended"] == true {
            break;
        }
        assert!(start.elapsed() < support::LIMIT);
    }
    let closed = rpc.call("terminal_write", json!({ "id": id, "data": "x" }));
    assert_eq!(closed["error"]["data"]["code"], "TERMINAL_CLOSED");
    let unknown = rpc.call("terminal_get", json!({ "id": "term-99" }));
    assert_eq!(unknown["error"]["data"]["code"], "TERMINAL_CLOSED");

    // terminate ends a session that ignores SIGHUP and SIGTERM.
    let t = rpc.ok(
        "terminal_spawn",
        json!({ "request": { "command": "trap '' HUP TERM; sleep 300", "grace_ms": 200 } }),
    )["terminal"]
        .clone();
    let survivors = rpc.ok("terminal_terminate", json!({ "id": t["id"] }))["survivors"].clone();
    assert_eq!(survivors, 0);
    assert_eq!(
        rpc.ok("terminal_get", json!({ "id": t["id"] }))["terminal"]["exited"],
        true
    );
    let both = rpc.call(
        "terminal_spawn",
        json!({ "request": { "command": "true", "argv": ["true"] } }),
    );
    assert_eq!(both["error"]["data"]["field"], "request.command");
    let rows = rpc.call(
        "terminal_spawn",
        json!({ "request": { "argv": ["true"], "rows": 0 } }),
    );
    assert_eq!(rows["error"]["data"]["field"], "request.rows");

    // A session's exit is never told before its spawn is answered (a
    // client that lets the server name it could not place it).
    let mut answered = std::collections::HashSet::new();
    for i in 0..100 {
        rpc.send_line(json!({ "jsonrpc": "2.0", "id": 1000 + i, "method": "terminal_spawn", "params": { "request": { "argv": ["true"] } } }).to_string().as_bytes());
    }
    let mut exits = 0;
    while answered.len() < 100 || exits < 100 {
        let m = rpc.next();
        if m["method"] == "terminal_exit" {
            let tid = m["params"]["terminal"]["id"].as_str().unwrap().to_owned();
            assert!(
                answered.contains(&tid),
                "{tid} exited before its spawn was answered"
            );
            exits += 1;
        } else if let Some(tid) = m["result"]["terminal"]["id"].as_str() {
            answered.insert(tid.to_owned());
        }
    }
}

/// `dsh serve --stdio --linger 5 --socket SOCKET`, its input a pipe kept
/// open (as an idle ssh connection's would be).
fn relay_to(socket: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["serve", "--stdio", "--linger", "5", "--socket"])
        .arg(socket)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The pid of the one lingering server at `socket`, once it runs.
fn lingering_server(socket: &Path) -> i32 {
    let start = Instant::now();
    loop {
        if let [pid] = processes_naming(&socket.display().to_string())[..] {
            return pid;
        }
        assert!(start.elapsed() < support::LIMIT, "no lingering server started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_relay_whose_lingering_server_died_ends_though_its_input_is_open() {
    let dir = TempDir::new("serve-relay-orphan");
    let socket = dir.0.join("r.sock");
    let mut relay = relay_to(&socket);
    let server = lingering_server(&socket);
    // SAFETY: kill(2) takes integers.
    unsafe { libc::kill(server, libc::SIGKILL) };
    let status = wait_bounded(&mut relay, "the relay after its server died");
    assert!(
        !status.success(),
        "the relay said nothing of its server's death: {status}"
    );
    // And SIGTERM ends a relay whose input is open.
    let mut second = relay_to(&socket);
    lingering_server(&socket);
    // SAFETY: kill(2) takes integers.
    unsafe { libc::kill(second.id() as i32, libc::SIGTERM) };
    wait_bounded(&mut second, "the relay after SIGTERM");
    for pid in processes_naming(&socket.display().to_string()) {
        // SAFETY: kill(2) takes integers.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
}

#[test]
fn a_relay_whose_input_ends_still_passes_on_the_last_answers() {
    let dir = TempDir::new("serve-relay-halfclose");
    let socket = dir.0.join("r.sock");
    let requests = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol_version":1}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"list","params":{}}"#,
        "\n"
    );
    for round in 0..10 {
        let mut relay = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .args(["serve", "--stdio", "--linger", "5", "--socket"])
            .arg(&socket)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        relay
            .stdin
            .take()
            .unwrap()
            .write_all(requests.as_bytes())
            .unwrap();
        wait_bounded(&mut relay, "the relay after its input ended");
        let mut out = String::new();
        relay.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        let answers: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
        assert_eq!(ids, [&json!(1), &json!(2)], "round {round}: {out}");
        assert!(
            answers[0]["result"]["session"]["token"].is_string(),
            "the token is what resumes"
        );
    }
    for pid in processes_naming(&socket.display().to_string()) {
        // SAFETY: kill(2) takes integers.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
}

//! `dsh serve`: a run's output streamed as it arrives (`run {stream:
//! true}` and its `run_output` notifications), the bound on what a slow
//! client can make the server hold, and what a resuming connection is told
//! it will still be answered (`session.pending`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

mod support;
use support::rpc::Rpc;
use support::{wait_bounded, TempDir};

fn decode(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64")
}

/// The `run_output` chunks of `run_id` among `notes`, per stream, checking
/// that each begins where the last one of its stream ended.
fn streamed(notes: &[Value], run_id: &str) -> (Vec<u8>, Vec<u8>) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    for n in notes.iter().filter(|n| n["method"] == "run_output") {
        let p = &n["params"];
        assert_eq!(p["run_id"], run_id, "{n}");
        let bytes = match p["stream"].as_str() {
            Some("stdout") => &mut out,
            Some("stderr") => &mut err,
            other => panic!("a stream named {other:?}"),
        };
        assert_eq!(
            p["offset"],
            json!(bytes.len()),
            "a chunk did not start where the last ended"
        );
        let chunk = decode(p["data_base64"].as_str().unwrap());
        assert!(!chunk.is_empty(), "an empty chunk: {n}");
        bytes.extend(chunk);
    }
    (out, err)
}

#[test]
fn a_streamed_run_sends_every_byte_in_order_before_its_answer() {
    let mut rpc = Rpc::local();
    rpc.initialize(json!({ "max_output_bytes": 4096 }));
    // Past the output cap, with bytes that are not UTF-8 and characters
    // that chunk boundaries may cut.
    let spec = rpc.spec(json!({
        "command": "for i in $(seq 1 60000); do echo \"é$i\"; done; printf '\\xff\\xfe'; echo oops >&2",
        "timeout_ms": 60000,
    }));
    let answer = rpc.call("run", json!({ "spec": spec, "run_id": "r1", "stream": true }));
    let result = &answer["result"]["result"];
    assert_eq!(result["exit_code"], 0, "{answer}");
    assert_eq!(
        result["stdout"]["truncated"], true,
        "the result keeps only the cap"
    );
    let (out, err) = streamed(&rpc.notes, "r1");
    let mut want: Vec<u8> = (1..=60000).flat_map(|i| format!("é{i}\n").into_bytes()).collect();
    want.extend([0xff, 0xfe]);
    assert_eq!(out.len(), want.len());
    assert!(
        out == want,
        "the streamed stdout differs from what the command wrote"
    );
    assert_eq!(err, b"oops\n");
    let ends = &answer["result"]["stream_ends"];
    assert_eq!(
        (&ends["stdout"], &ends["stderr"]),
        (&json!(want.len()), &json!(5))
    );
    // Nothing of it comes after the answer.
    assert!(rpc.quiet_for(Duration::from_millis(300)));
}

#[test]
fn a_streamed_run_shows_its_first_bytes_while_it_runs() {
    let mut rpc = Rpc::local();
    rpc.initialize(json!({}));
    let spec = rpc.spec(json!({ "command": "echo first; sleep 30", "timeout_ms": 60000 }));
    rpc.send_line(
        json!({ "jsonrpc": "2.0", "id": 900, "method": "run",
                "params": { "spec": spec, "run_id": "live", "stream": true } })
        .to_string()
        .as_bytes(),
    );
    let first = rpc.note(|n| n["method"] == "run_output");
    assert_eq!(
        decode(first["params"]["data_base64"].as_str().unwrap()),
        b"first\n"
    );
    assert_eq!(rpc.ok("cancel", json!({ "run_id": "live" }))["cancelled"], true);
    let answer = rpc.answer(900);
    assert_eq!(answer["result"]["result"]["aborted"], true, "{answer}");
    assert_eq!(answer["result"]["result"]["stdout"]["text"], "first\n");
}

#[test]
fn a_streamed_run_needs_a_run_id() {
    let mut rpc = Rpc::local();
    rpc.initialize(json!({}));
    let spec = rpc.spec(json!({ "command": "echo never" }));
    let refused = rpc.call("run", json!({ "spec": spec, "stream": true }));
    assert_eq!(refused["error"]["data"]["field"], "run_id", "{refused}");
    let empty = rpc.call("run", json!({ "spec": spec, "run_id": "", "stream": true }));
    assert_eq!(empty["error"]["data"]["field"], "run_id", "{empty}");
    let wrong = rpc.call("run", json!({ "spec": spec, "run_id": "x", "stream": "yes" }));
    assert_eq!(wrong["error"]["data"]["field"], "stream", "{wrong}");
}

/// A server the test started: killed if the test fails before it stops it.
struct Server(Option<Child>);

impl Server {
    fn id(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A `dsh serve --listen` on a socket in `dir`, and the socket's path.
fn listening(dir: &TempDir, linger: Option<&str>) -> (Server, std::path::PathBuf) {
    let socket = dir.0.join("s.sock");
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
    command.args(["serve", "--listen", &format!("unix:{}", socket.display())]);
    if let Some(seconds) = linger {
        command.args(["--linger", seconds]);
    }
    let server = Server(Some(command.spawn().unwrap()));
    let start = Instant::now();
    while UnixStream::connect(&socket).is_err() {
        assert!(start.elapsed() < support::LIMIT, "the server never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    (server, socket)
}

fn stop(mut server: Server) {
    let mut child = server.0.take().unwrap();
    // SAFETY: kill(2) takes integers.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(wait_bounded(&mut child, "dsh serve").success());
}

/// The largest the server's resident memory has been, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A raw connection to the server at `socket`: where requests are written,
/// and its messages line by line (for tests that pace their own reads).
fn connect(socket: &std::path::Path) -> (UnixStream, BufReader<UnixStream>) {
    let stream = UnixStream::connect(socket).unwrap();
    (stream.try_clone().unwrap(), BufReader::new(stream))
}

/// A request as one line of the protocol.
fn request_line(id: u64, method: &str, params: Value) -> String {
    format!(
        "{}\n",
        json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
    )
}

/// The server's next message; the server must not have hung up.
fn read_message(lines: &mut BufReader<UnixStream>) -> Value {
    let mut line = String::new();
    assert!(lines.read_line(&mut line).unwrap() > 0, "the server hung up");
    serde_json::from_str(&line).unwrap()
}

#[test]
fn a_client_that_does_not_read_holds_the_command_back_and_costs_a_bounded_queue() {
    let dir = TempDir::new("serve-stream-slow");
    let (server, socket) = listening(&dir, None);
    let (mut input, mut lines) = connect(&socket);
    let call = |input: &mut UnixStream, id: u64, method: &str, params: Value| {
        input
            .write_all(request_line(id, method, params).as_bytes())
            .unwrap();
    };
    call(&mut input, 1, "initialize", json!({ "protocol_version": 1 }));
    read_message(&mut lines);
    call(
        &mut input,
        2,
        "resolve",
        json!({ "request": { "command": "head -c 67108864 /dev/zero", "timeout_ms": 120000 } }),
    );
    let spec = read_message(&mut lines)["result"]["spec"].clone();
    let before = peak_rss_kib(server.id());
    // 64 MiB streamed to a client that reads nothing for a while: an
    // unbounded queue would hold all of it (85 MiB of base64); the server
    // holds the command back instead, and nothing is left out.
    call(
        &mut input,
        3,
        "run",
        json!({ "spec": spec, "run_id": "z", "stream": true }),
    );
    call(&mut input, 4, "list", json!({}));
    let settled = Instant::now();
    let (mut streamed_bytes, mut next, mut answer) = (0u64, 0u64, None);
    std::thread::sleep(Duration::from_secs(3));
    while answer.is_none() {
        assert!(settled.elapsed() < support::LIMIT, "no answer to the run");
        let m = read_message(&mut lines);
        if m["method"] == "run_output" {
            let offset = m["params"]["offset"].as_u64().unwrap();
            assert_eq!(m["params"]["stream"], "stdout", "{m}");
            assert_eq!(offset, next, "a chunk was left out or repeated");
            let n = decode(m["params"]["data_base64"].as_str().unwrap()).len() as u64;
            streamed_bytes += n;
            next = offset + n;
        } else if m["id"] == 3 {
            answer = Some(m);
        }
    }
    let answer = answer.unwrap();
    assert_eq!(answer["result"]["result"]["exit_code"], 0, "{answer}");
    assert_eq!(streamed_bytes, 64 << 20);
    assert_eq!(answer["result"]["stream_ends"]["stdout"], json!(64u64 << 20));
    let grew = peak_rss_kib(server.id()).saturating_sub(before);
    assert!(
        grew < 48 * 1024,
        "the server grew by {grew} KiB for a client that did not read"
    );
    stop(server);
}

#[test]
fn a_resumed_session_is_told_which_calls_it_will_still_get_answers_to() {
    let dir = TempDir::new("serve-pending");
    let (server, socket) = listening(&dir, Some("30"));
    let mut first = Rpc::unix(&socket);
    let token = first.initialize(json!({}))["session"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let started = first.spec(json!({ "command": "sleep 30" }));
    first.ok("start", json!({ "spec": started, "id": "job" }));
    let quick = first.spec(json!({ "command": "sleep 0.3; echo done", "timeout_ms": 30000 }));
    let send = |rpc: &mut Rpc, id: u64, method: &str, params: Value| {
        rpc.send_line(
            json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
                .to_string()
                .as_bytes(),
        )
    };
    // 70 ends while nobody is connected (its answer kept); 71 still waits
    // when the next connection comes; 72 was answered before the drop.
    send(&mut first, 70, "run", json!({ "spec": quick }));
    send(&mut first, 71, "wait", json!({ "id": "job" }));
    send(&mut first, 72, "list", json!({}));
    first.answer(72);
    drop(first);
    std::thread::sleep(Duration::from_secs(1));

    let mut second = Rpc::unix(&socket);
    let resumed = second.ok("initialize", json!({ "protocol_version": 1, "resume": token }));
    let mut pending: Vec<u64> = resumed["session"]["pending"]
        .as_array()
        .expect("pending is a list")
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    pending.sort();
    assert_eq!(pending, [70, 71], "{resumed}");
    assert_eq!(second.answer(70)["result"]["result"]["stdout"]["text"], "done\n");
    second.ok("kill", json!({ "id": "job" }));
    assert_eq!(second.answer(71)["result"]["settled"], true);
    // A new session owes nothing.
    let mut other = Rpc::unix(&socket);
    assert_eq!(other.initialize(json!({}))["session"]["pending"], json!([]));
    stop(server);
}

#[test]
fn a_resumed_session_streams_again_after_a_connection_that_read_nothing() {
    let dir = TempDir::new("serve-stream-resume");
    let (server, socket) = listening(&dir, Some("30"));
    // A connection that streams 64 MiB, reads nothing, and drops: what it
    // left unwritten must not count against the next connection.
    let (mut input, mut lines) = connect(&socket);
    let mut line = String::new();
    input
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocol_version\":1}}\n",
        )
        .unwrap();
    lines.read_line(&mut line).unwrap();
    let token = serde_json::from_str::<Value>(&line).unwrap()["result"]["session"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = json!({ "jsonrpc": "2.0", "id": 2, "method": "run", "params": {
        "spec": { "command": "head -c 67108864 /dev/zero", "workdir": "/", "timeout_ms": 120000,
                  "stdout_max_bytes": 1000, "stdin_base64": null, "stdin_pipe": false, "on_expiry": "kill",
                  "env": {}, "dsh_env": {}, "owner": null, "sandbox_policy": null, "limits": {} },
        "run_id": "big", "stream": true } });
    input.write_all(format!("{run}\n").as_bytes()).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    drop((input, lines));

    let mut rpc = Rpc::unix(&socket);
    let resumed = rpc.ok("initialize", json!({ "protocol_version": 1, "resume": token }));
    assert_eq!(resumed["session"]["resumed"], true);
    // The run's answer was queued behind chunks never written: it is kept,
    // and said to be coming.
    assert_eq!(resumed["session"]["pending"], json!([2]), "{resumed}");
    let big = rpc.answer(2);
    assert_eq!(big["result"]["result"]["exit_code"], 0, "{big}");
    let spec = rpc.spec(json!({ "command": "echo again" }));
    let answer = rpc.call("run", json!({ "spec": spec, "run_id": "small", "stream": true }));
    assert_eq!(answer["result"]["stream_ends"]["stdout"], 6);
    let notes: Vec<Value> = rpc
        .notes
        .iter()
        .filter(|n| n["params"]["run_id"] == "small")
        .cloned()
        .collect();
    let (out, _) = streamed(&notes, "small");
    assert_eq!(out, b"again\n", "the resumed session's stream was withheld");
    stop(server);
}

#[test]
fn an_answer_that_comes_after_the_input_ended_is_kept_for_the_resume() {
    let dir = TempDir::new("serve-halfclose-kept");
    let (server, socket) = listening(&dir, Some("30"));
    let (mut input, mut lines) = connect(&socket);
    let mut read_all = String::new();
    input
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocol_version\":1}}\n",
        )
        .unwrap();
    lines.read_line(&mut read_all).unwrap();
    let token = serde_json::from_str::<Value>(&read_all).unwrap()["result"]["session"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = json!({ "jsonrpc": "2.0", "id": 5, "method": "run", "params": {
        "spec": { "command": "sleep 0.5; echo late", "workdir": "/", "timeout_ms": 30000,
                  "stdout_max_bytes": 1000, "stdin_base64": null, "stdin_pipe": false, "on_expiry": "kill",
                  "env": {}, "dsh_env": {}, "owner": null, "sandbox_policy": null, "limits": {} } } });
    // Output the client has not read yet is ahead of everything else.
    let flood = json!({ "jsonrpc": "2.0", "id": 4, "method": "run", "params": {
        "spec": { "command": "head -c 6000000 /dev/zero", "workdir": "/", "timeout_ms": 30000,
                  "stdout_max_bytes": 1000, "stdin_base64": null, "stdin_pipe": false, "on_expiry": "kill",
                  "env": {}, "dsh_env": {}, "owner": null, "sandbox_policy": null, "limits": {} },
        "run_id": "flood", "stream": true } });
    input.write_all(format!("{flood}\n{run}\n").as_bytes()).unwrap();
    // The client is done sending, and reads on to the end, a little later.
    std::thread::sleep(Duration::from_millis(200));
    input.shutdown(std::net::Shutdown::Write).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut lines, &mut rest).unwrap();
    let mut rpc = Rpc::unix(&socket);
    let resumed = rpc.ok("initialize", json!({ "protocol_version": 1, "resume": token }));
    let pending = resumed["session"]["pending"].as_array().unwrap();
    if rest.contains("\"id\":5,") || rest.contains(",\"id\":5") {
        // Written before the end: then it is not owed again.
        assert!(!pending.contains(&json!(5)), "{pending:?}");
    } else {
        assert!(pending.contains(&json!(5)), "the answer was lost: {pending:?}");
        assert_eq!(rpc.answer(5)["result"]["result"]["stdout"]["text"], "late\n");
    }
    stop(server);
}

#[test]
fn a_client_that_pipelines_requests_and_reads_late_costs_a_bounded_queue() {
    // 3 000 reads of a 64 000-byte output (about 85 KB of JSON each) sent
    // at once, their answers read only later: an unbounded outbox held all
    // of them (over 200 MB); the server stops reading requests instead,
    // and every answer still comes, in order.
    let dir = TempDir::new("serve-pipelined");
    let (server, socket) = listening(&dir, None);
    let (mut input, mut lines) = connect(&socket);
    // The answer to `id`, past any notification.
    let answer_to = |lines: &mut BufReader<UnixStream>, id: u64| -> Value {
        loop {
            let m = read_message(lines);
            if m["id"] == id {
                return m;
            }
            assert!(m.get("id").is_none(), "an answer out of order: {m}");
        }
    };
    input
        .write_all(request_line(1, "initialize", json!({ "protocol_version": 1 })).as_bytes())
        .unwrap();
    answer_to(&mut lines, 1);
    let request = json!({ "request": { "command": "head -c 48000 /dev/zero | base64 -w0" } });
    input
        .write_all(request_line(2, "resolve", request).as_bytes())
        .unwrap();
    let spec = answer_to(&mut lines, 2)["result"]["spec"].clone();
    input
        .write_all(request_line(3, "start", json!({ "id": "big", "spec": spec })).as_bytes())
        .unwrap();
    answer_to(&mut lines, 3);
    input
        .write_all(request_line(4, "wait", json!({ "id": "big" })).as_bytes())
        .unwrap();
    answer_to(&mut lines, 4);
    let before = peak_rss_kib(server.id());
    const READS: u64 = 3000;
    let writer = std::thread::spawn(move || {
        let read_from = json!({ "id": "big", "stream": "stdout" });
        for id in 0..READS {
            // Blocks once the server stops reading: that is the point.
            input
                .write_all(request_line(100 + id, "read_from", read_from.clone()).as_bytes())
                .unwrap();
        }
        input
    });
    // Long enough for an unbounded server to have queued every answer.
    std::thread::sleep(Duration::from_secs(3));
    let grew = peak_rss_kib(server.id()).saturating_sub(before);
    for id in 0..READS {
        let answer = answer_to(&mut lines, 100 + id);
        assert_eq!(answer["result"]["text"].as_str().map(str::len), Some(64000));
    }
    drop(writer.join().unwrap());
    assert!(
        grew < 48 * 1024,
        "the server grew by {grew} KiB for a client that read its answers late"
    );
    stop(server);
}

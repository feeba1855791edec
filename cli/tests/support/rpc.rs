//! A minimal client of the protocol for the tests: a `dsh serve` (or any
//! transport command) with its stdin and stdout piped, a thread that reads
//! its lines, and calls that wait for their own answer with a bound.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::LIMIT;

pub struct Rpc {
    /// The transport command, when there is one.
    pub child: Option<Child>,
    /// The socket, when connected to one: shut down when the client goes
    /// (the reading thread holds a copy, which would keep it open).
    socket: Option<std::os::unix::net::UnixStream>,
    stdin: Option<Box<dyn Write + Send>>,
    lines: Receiver<Value>,
    next_id: u64,
    /// Notifications seen while waiting for answers, in order.
    pub notes: Vec<Value>,
    /// Answers to requests sent with `send_line`, seen while waiting for
    /// another answer.
    pub others: Vec<Value>,
}

impl Rpc {
    /// Starts `command` (a `dsh serve --stdio`, or ssh running one).
    pub fn spawn(mut command: Command) -> Rpc {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the server");
        let out = child.stdout.take().unwrap();
        let stdin = child.stdin.take().map(|s| Box::new(s) as Box<dyn Write + Send>);
        Rpc::over(Some(child), stdin, out)
    }

    /// A client of `dsh serve --listen unix:PATH`.
    pub fn unix(path: &std::path::Path) -> Rpc {
        let stream = std::os::unix::net::UnixStream::connect(path).expect("connect");
        let reader = stream.try_clone().unwrap();
        let mut rpc = Rpc::over(None, Some(Box::new(stream.try_clone().unwrap())), reader);
        rpc.socket = Some(stream);
        rpc
    }

    fn over(
        child: Option<Child>,
        stdin: Option<Box<dyn Write + Send>>,
        out: impl std::io::Read + Send + 'static,
    ) -> Rpc {
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                let v: Value =
                    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Rpc {
            child,
            socket: None,
            stdin,
            lines,
            next_id: 0,
            notes: Vec::new(),
            others: Vec::new(),
        }
    }

    pub fn local() -> Rpc {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
        c.args(["serve", "--stdio"]);
        Rpc::spawn(c)
    }

    pub fn send_line(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("input still open");
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next message from the server, within [`LIMIT`].
    pub fn next(&mut self) -> Value {
        match self.lines.recv_timeout(LIMIT) {
            Ok(v) => v,
            Err(RecvTimeoutError::Timeout) => panic!("the server said nothing within {LIMIT:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("the server's output ended"),
        }
    }

    /// The first notification (kept or coming) that `wanted` accepts;
    /// those before it are dropped.
    pub fn note(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        while !self.notes.is_empty() {
            let n = self.notes.remove(0);
            if wanted(&n) {
                return n;
            }
        }
        let start = Instant::now();
        loop {
            assert!(start.elapsed() < LIMIT, "no such notification within {LIMIT:?}");
            let v = self.next();
            if v.get("method").is_some() && wanted(&v) {
                return v;
            }
        }
    }

    /// Sends a request and returns its whole answer (`result` or `error`).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string();
        self.send_line(line.as_bytes());
        self.answer(id)
    }

    /// Waits for the answer to request `id`, keeping notifications.
    pub fn answer(&mut self, id: u64) -> Value {
        let start = Instant::now();
        loop {
            assert!(start.elapsed() < LIMIT, "no answer to {id} within {LIMIT:?}");
            let v = self.next();
            if v.get("id") == Some(&json!(id)) {
                return v;
            }
            if v.get("method").is_some() {
                self.notes.push(v);
            } else {
                self.others.push(v);
            }
        }
    }

    /// A call that must succeed: its `result`.
    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        let answer = self.call(method, params.clone());
        match answer.get("result") {
            Some(r) => r.clone(),
            None => panic!("{method} {params} failed: {answer}"),
        }
    }

    pub fn initialize(&mut self, config: Value) -> Value {
        self.ok("initialize", json!({ "protocol_version": 1, "config": config }))
    }

    /// Resolves `request` and returns the spec.
    pub fn spec(&mut self, request: Value) -> Value {
        self.ok("resolve", json!({ "request": request }))["spec"].clone()
    }

    /// Closes the server's input, as a client that goes away does.
    pub fn close_input(&mut self) {
        self.stdin = None;
        if let Some(s) = &self.socket {
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
    }

    /// The transport command.
    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("a transport command")
    }

    /// Waits (bounded) for the transport command to exit.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        super::wait_bounded(self.child(), "dsh serve")
    }

    /// True when nothing more comes within `d` (the output ended counts).
    pub fn quiet_for(&self, d: Duration) -> bool {
        matches!(
            self.lines.recv_timeout(d),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected)
        )
    }
}

impl Drop for Rpc {
    fn drop(&mut self) {
        if let Some(s) = &self.socket {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

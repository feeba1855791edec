//! One connection's executor and the methods of docs/protocol.md. Calls
//! are taken in the order they arrive: everything but a wait is done before
//! the next line is read (so `start` then `read_output` is never reordered);
//! a call that waits (`run`, `wait`, `write_stdin`, `dispose`) is admitted
//! in order and answered when it completes, out of order with later calls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use dsh_core::{CancelToken, DshError, Executor, OutputStream, OutputTap, Process};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::frame::{self, Call, RpcError, INVALID_PARAMS, METHOD_NOT_FOUND, NOT_INITIALIZED};
use super::hub::{lock, Backlog, Hub, Link};
use super::input::{self, Fault, Fields, Outcome};
use super::output::{
    config_json, host_facts, offset_read_json, process_json, read_json, run_result_json, spec_json,
    stream_name,
};
use super::stream_queue::StreamQueue;
use super::terminals::{self, Terminals};
use super::PROTOCOL_VERSION;

/// Every method, in the order docs/protocol.md lists them.
pub const METHODS: &[&str] = &[
    "initialize",
    "resolve",
    "run",
    "cancel",
    "start",
    "get",
    "list",
    "owner_of",
    "read_output",
    "read_from",
    "wait",
    "write_stdin",
    "close_stdin",
    "kill",
    "forget",
    "reconfigure",
    "dispose",
];

/// Every notification the server sends.
pub const NOTIFICATIONS: &[&str] = &["task_done", "output", "run_output", "terminal_exit"];

/// What goes to the client, in order; the connection's writer drains it.
pub enum Out {
    /// One message.
    Line(String),
    /// A `run_output` notification, counted in `queue` until written.
    Streamed { line: String, queue: Arc<StreamQueue> },
    /// Nothing more: the writer flushes and stops.
    End,
}

pub use super::outbox::Outbox;

pub struct Session {
    exec: OnceLock<Executor>,
    /// The connection the session's messages go to, or what is kept for
    /// the next one while it lingers.
    link: Mutex<Link>,
    /// The cancel token of each `run` given a `run_id`, until it settles.
    runs: Mutex<HashMap<String, CancelToken>>,
    hub: Arc<Hub>,
    /// Set when the session may linger (`--linger`): what resumes it.
    token: OnceLock<String>,
    /// Bumped at each attach and detach, so a linger timer knows whether
    /// the session it was set for was resumed meanwhile.
    generation: AtomicU64,
    output_notifications: AtomicBool,
    terminals: Terminals,
    /// The ids of the calls taken and not answered yet: with the answers
    /// kept in a backlog, what a resuming connection is still owed.
    owed: Mutex<Vec<Value>>,
    /// `run_output` handed to the connection and not yet written.
    stream_queue: Arc<StreamQueue>,
}

/// The answer to a call: now, or later from a task that sends it itself.
pub(super) enum Reply {
    Now(Value),
    Later,
}

/// What a connection does after a line.
pub enum Next {
    /// Goes on with the same session.
    Stay,
    /// Resumes the session this `initialize` names ([`Session::resume`]).
    Resume(Call),
}

/// How long a resume waits for the session's old connection to end.
pub const RESUME_WAIT: Duration = Duration::from_secs(5);

impl Session {
    pub fn new(out: Outbox, hub: Arc<Hub>) -> Arc<Session> {
        Arc::new(Session {
            exec: OnceLock::new(),
            link: Mutex::new(Link::Attached(out)),
            runs: Mutex::new(HashMap::new()),
            hub,
            token: OnceLock::new(),
            generation: AtomicU64::new(0),
            output_notifications: AtomicBool::new(false),
            terminals: Terminals::default(),
            owed: Mutex::new(Vec::new()),
            stream_queue: Arc::default(),
        })
    }

    /// The hub's linger time, when this session is kept after its
    /// connection ends.
    pub fn linger(&self) -> Option<Duration> {
        match (self.hub.linger, self.token.get(), self.exec.get()) {
            (Some(linger), Some(_), Some(exec)) if !exec.is_disposed() => Some(linger),
            _ => None,
        }
    }

    /// The connection whose outbox is `out` ended (not by a server
    /// shutdown): a session that may linger is kept for the hub's linger
    /// time, awaiting `resume`, with what `unsent` still holds (what the
    /// connection never began to write) first in what is kept; any other is
    /// disposed, and everything it started ended and awaited.
    pub async fn end_connection(self: &Arc<Self>, out: &Outbox, unsent: Option<UnboundedReceiver<Out>>) {
        let Some(linger) = self.linger() else {
            return self.close().await;
        };
        let generation = {
            let mut link = lock(&self.link);
            if let Link::Attached(current) = &*link {
                if !current.same_channel(out) {
                    // Another connection has it already: not ours to end.
                    return;
                }
            }
            let mut kept = Backlog::default();
            if let Some(mut unsent) = unsent {
                // Under the link's lock nothing more is sent to it.
                unsent.close();
                while let Ok(message) = unsent.try_recv() {
                    if let Out::Line(line) = message {
                        kept.push(frame::answered_id(&line), line);
                    }
                }
            }
            if let Link::Detached(later) = std::mem::replace(&mut *link, Link::Detached(Backlog::default())) {
                kept.append(later);
            }
            *link = Link::Detached(kept);
            // Written no more: nothing of the old connection is waiting.
            self.stream_queue.reset();
            self.generation.fetch_add(1, Ordering::SeqCst) + 1
        };
        let session = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(linger).await;
            // Resumed meanwhile (and maybe detached again): not this timer's.
            if session.generation.load(Ordering::SeqCst) == generation {
                session.close().await;
            }
        });
    }

    /// Takes over a lingering session for a new connection: the answer to
    /// its `initialize` first (`welcome`, told whether messages were
    /// dropped while away and which calls will still be answered), then
    /// what was kept, in order. Refused while another connection has it.
    fn attach(&self, out: &Outbox, id: &Value, mut welcome: Value) -> Outcome<()> {
        let mut link = lock(&self.link);
        let Link::Detached(backlog) = &*link else {
            return Err(Fault::Rpc(RpcError::new(
                frame::INVALID_REQUEST,
                "the session is attached to another connection",
            )));
        };
        welcome["session"]["missed"] = json!(backlog.missed);
        welcome["session"]["pending"] = json!(self.pending(backlog));
        let Link::Detached(backlog) = std::mem::replace(&mut *link, Link::Attached(out.clone())) else {
            unreachable!("matched above, under the same lock")
        };
        self.generation.fetch_add(1, Ordering::SeqCst);
        let _ = out.send(Out::Line(frame::response(id, welcome)));
        backlog.drain_into(out);
        Ok(())
    }

    /// The session's executor, once `initialize` made it.
    pub fn executor(&self) -> Option<&Executor> {
        self.exec.get()
    }

    /// Takes one line: decodes it, runs the call, answers it (now or when
    /// it completes). Never panics on any input.
    pub fn handle_line(self: &Arc<Self>, line: &[u8]) -> Next {
        match frame::decode(line) {
            Ok(call) if call.method == "initialize" && call.params.contains_key("resume") => {
                Next::Resume(call)
            }
            Ok(call) => {
                self.handle(call);
                Next::Stay
            }
            Err((Some(id), e)) => {
                let answers = (!id.is_null()).then_some(&id);
                self.send(answers, frame::error_response(&id, &e));
                Next::Stay
            }
            Err((None, _)) => Next::Stay,
        }
    }

    /// To the attached connection, or kept for the next one. A message for
    /// a connection that is going (its writer has stopped) is kept too.
    /// `answers`: the id of the call it answers.
    fn send(&self, answers: Option<&Value>, line: String) {
        let mut link = lock(&self.link);
        match &mut *link {
            Link::Attached(out) => {
                if let Err(e) = out.send(Out::Line(line)) {
                    let Out::Line(line) = e.0 else { return };
                    let mut backlog = Backlog::default();
                    backlog.push(answers.cloned(), line);
                    *link = Link::Detached(backlog);
                }
            }
            Link::Detached(backlog) => backlog.push(answers.cloned(), line),
        }
    }

    /// A chunk of a streamed run's output, to the attached connection only
    /// (nothing is kept while none is: the result has the output); the
    /// session's streamed runs are held back while the connection is
    /// behind (docs/protocol.md, `run`).
    fn stream(&self, run_id: &str, stream: OutputStream, offset: u64, chunk: &[u8]) {
        if !self.is_attached() {
            // Not even encoded: nobody would read it.
            return self.stream_queue.reset();
        }
        let line = frame::notification(
            "run_output",
            json!({
                "run_id": run_id,
                "stream": stream_name(stream),
                "offset": offset,
                "data_base64": input::encode_base64(chunk),
            }),
        );
        let queue = &self.stream_queue;
        let Link::Attached(out) = &*lock(&self.link) else {
            return queue.reset();
        };
        if !queue.queue(line.len()) {
            return;
        }
        let bytes = line.len();
        let streamed = Out::Streamed {
            line,
            queue: queue.clone(),
        };
        if out.send(streamed).is_err() {
            queue.written(bytes);
        }
    }

    /// The calls a resuming connection will get answers to: those still
    /// running and those answered into the backlog. (An answer moves from
    /// the first to the second before it leaves `owed`, so none is missed.)
    fn pending(&self, backlog: &Backlog) -> Vec<Value> {
        let mut pending: Vec<Value> = backlog.answers().cloned().collect();
        for id in lock(&self.owed).iter() {
            if !pending.contains(id) {
                pending.push(id.clone());
            }
        }
        pending
    }

    fn is_attached(&self) -> bool {
        matches!(&*lock(&self.link), Link::Attached(_))
    }

    /// `initialize {resume: token}` on a new connection: the session it
    /// takes over, if it did. A client that reconnects at once may come
    /// before the server has seen its old connection end: the session is
    /// waited for, up to [`RESUME_WAIT`].
    pub async fn resume(self: &Arc<Self>, call: Call) -> Option<Arc<Session>> {
        let Call { id, params, .. } = call;
        let out = match &*lock(&self.link) {
            Link::Attached(out) => out.clone(),
            Link::Detached(_) => return None,
        };
        let deadline = tokio::time::Instant::now() + RESUME_WAIT;
        let fault = loop {
            let (session, welcome) = match self.resumable(&params) {
                Ok(found) => found,
                Err(f) => break f,
            };
            let Some(id) = &id else { return None };
            match session.attach(&out, id, welcome) {
                Ok(()) => return Some(session),
                Err(f) if tokio::time::Instant::now() >= deadline => break f,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        self.answer(&id, Err(fault));
        None
    }

    /// The lingering session `params` names, and the answer it resumes with.
    fn resumable(&self, params: &Map<String, Value>) -> Outcome<(Arc<Session>, Value)> {
        let p = Fields::of(params, "", &["protocol_version", "resume", "client"])?;
        check_version(&p)?;
        if self.exec.get().is_some() {
            return Err(already_initialized());
        }
        let token = p.required_string("resume")?;
        let session = self.hub.find(&token).ok_or_else(|| Fault::Shape {
            field: "resume".into(),
            problem: "has no session to resume with this token: it was never made here, its linger time passed, or it was disposed"
                .into(),
        })?;
        let welcome = session.welcome(true)?;
        Ok((session, welcome))
    }

    pub(super) fn terminals(&self) -> &Terminals {
        &self.terminals
    }

    /// A notification: to the connection, or kept for the next one.
    pub(super) fn notify(&self, method: &str, params: Value) {
        self.send(None, frame::notification(method, params));
    }

    pub(super) fn answer(&self, id: &Option<Value>, outcome: Outcome<Value>) {
        // A notification is answered by nothing, not even its error.
        let Some(id) = id else { return };
        self.send(
            Some(id),
            match outcome {
                Ok(result) => frame::response(id, result),
                Err(fault) => frame::error_response(id, &fault.to_rpc()),
            },
        );
        // Only now, so that it is always in `owed` or in the backlog.
        let mut owed = lock(&self.owed);
        if let Some(i) = owed.iter().position(|o| o == id) {
            owed.remove(i);
        }
    }

    fn handle(self: &Arc<Self>, call: Call) {
        let Call { id, method, params } = call;
        if let Some(id) = &id {
            lock(&self.owed).push(id.clone());
        }
        match self.dispatch(&id, &method, &params) {
            Ok(Reply::Later) => {}
            Ok(Reply::Now(v)) => self.answer(&id, Ok(v)),
            Err(f) => self.answer(&id, Err(f)),
        }
    }

    pub(super) fn exec(&self) -> Outcome<&Executor> {
        self.exec.get().ok_or_else(|| {
            Fault::Rpc(RpcError::new(
                NOT_INITIALIZED,
                "the session is not initialized: send initialize first",
            ))
        })
    }

    fn process(&self, p: &Fields<'_>) -> Outcome<Process> {
        let id = input::id(p)?;
        self.exec()?.get(&id).ok_or(Fault::Core(DshError::NotFound(id)))
    }

    fn dispatch(
        self: &Arc<Self>,
        id: &Option<Value>,
        method: &str,
        params: &Map<String, Value>,
    ) -> Outcome<Reply> {
        if let Some(outcome) = self.dispatch_terminal(id, method, params) {
            return outcome;
        }
        let known = |keys: &[&str]| Fields::of(params, "", keys);
        let now = |v: Value| Ok(Reply::Now(v));
        match method {
            "initialize" => now(self.initialize(&known(&[
                "protocol_version",
                "config",
                "client",
                "output_notifications",
            ])?)?),
            "resolve" => {
                let p = known(&["request"])?;
                let request = input::request(p.required("request")?)?;
                let spec = self.exec()?.resolve(request)?;
                now(json!({ "spec": spec_json(&spec)? }))
            }
            "run" => self.run(id, &known(&["spec", "run_id", "background_id", "stream"])?),
            "cancel" => {
                let run_id = known(&["run_id"])?.required_string("run_id")?;
                let token = lock(&self.runs).get(&run_id).cloned();
                if let Some(t) = &token {
                    t.cancel();
                }
                now(json!({ "cancelled": token.is_some() }))
            }
            "start" => {
                let p = known(&["spec", "id"])?;
                let spec = input::spec(p.required("spec")?)?;
                let exec = self.exec()?;
                let process = match p.string("id")? {
                    Some(id) => exec.start_as(&spec, None, &id)?,
                    None => exec.start(&spec)?,
                };
                now(json!({ "process": process_json(&process) }))
            }
            "get" => {
                let p = known(&["id"])?;
                let process = self.exec()?.get(&input::id(&p)?);
                now(json!({ "process": process.as_ref().map(process_json) }))
            }
            "list" => {
                known(&[])?;
                let all: Vec<Value> = self.exec()?.list().iter().map(process_json).collect();
                now(json!({ "processes": all }))
            }
            "owner_of" => {
                let p = known(&["id"])?;
                now(json!({ "owner": self.exec()?.owner_of(&input::id(&p)?)? }))
            }
            "read_output" => {
                let p = known(&["id"])?;
                now(read_json(&self.exec()?.read_output(&input::id(&p)?)?))
            }
            "read_from" => {
                let p = known(&["id", "stream", "from"])?;
                let process = self.process(&p)?;
                let stream = match p.required_string("stream")?.as_str() {
                    "stdout" => OutputStream::Stdout,
                    "stderr" => OutputStream::Stderr,
                    other => {
                        return Err(Fault::Shape {
                            field: "stream".into(),
                            problem: format!("must be \"stdout\" or \"stderr\", got {other:?}"),
                        })
                    }
                };
                let from = match p.get("from") {
                    Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().unwrap_or(0),
                    None => 0,
                    Some(other) => {
                        return Err(Fault::Shape {
                            field: "from".into(),
                            problem: format!("must be a whole number of bytes, got {other}"),
                        })
                    }
                };
                now(offset_read_json(&process.read_from(stream, from)))
            }
            "wait" => self.wait(id, &known(&["id", "timeout_ms"])?),
            "write_stdin" => self.write_stdin(id, &known(&["id", "data", "data_base64"])?),
            "close_stdin" => now(json!({ "closed": self.process(&known(&["id"])?)?.close_stdin()? })),
            "kill" => {
                let p = known(&["id"])?;
                now(json!({ "began": self.exec()?.kill(&input::id(&p)?)? }))
            }
            "forget" => {
                let p = known(&["id"])?;
                self.exec()?.forget(&input::id(&p)?)?;
                now(json!({}))
            }
            "reconfigure" => {
                let p = known(&["config"])?;
                let exec = self.exec()?;
                exec.reconfigure(input::config(p.get("config"))?)?;
                now(json!({ "config": config_json(&exec.config())? }))
            }
            "dispose" => {
                known(&[])?;
                self.exec()?;
                let (session, id) = (self.clone(), id.clone());
                tokio::spawn(async move {
                    session.close().await;
                    session.answer(&id, Ok(json!({})));
                });
                Ok(Reply::Later)
            }
            other => Err(Fault::Rpc(RpcError::new(
                METHOD_NOT_FOUND,
                format!(
                    "no method {other:?} (this server has: {}, {})",
                    METHODS.join(", "),
                    terminals::METHODS.join(", ")
                ),
            ))),
        }
    }

    fn initialize(self: &Arc<Self>, p: &Fields<'_>) -> Outcome<Value> {
        check_version(p)?;
        if let Some(client) = p.get("client") {
            Fields::new(client, "client", &["name", "version"])?;
        }
        if self.exec.get().is_some() {
            return Err(already_initialized());
        }
        let notify = p.bool("output_notifications")?.unwrap_or(false);
        let exec = Executor::new(input::config(p.get("config"))?)?;
        let session = Arc::downgrade(self);
        exec.on_task_done(Arc::new(move |process: &Process| {
            if let Some(session) = session.upgrade() {
                session.send(
                    None,
                    frame::notification("task_done", json!({ "process": process_json(process) })),
                );
            }
        }));
        // Two initializes racing is not possible: calls are taken in order.
        let _ = self.exec.set(exec);
        if let Some(token) = self.hub.enroll(self) {
            let _ = self.token.set(token);
        }
        if notify {
            self.output_notifications.store(true, Ordering::SeqCst);
            tokio::spawn(watch_output(Arc::downgrade(self)));
        }
        self.welcome(false)
    }

    /// The answer to `initialize`, made or resumed.
    fn welcome(&self, resumed: bool) -> Outcome<Value> {
        let exec = self.exec()?;
        let cwd = std::env::current_dir()
            .ok()
            .and_then(|d| d.to_str().map(str::to_owned));
        let session = match (self.token.get(), self.hub.linger) {
            (Some(token), Some(linger)) => json!({
                "token": token,
                "linger_ms": linger.as_millis() as u64,
                "resumed": resumed,
                "missed": false,
                "pending": [],
            }),
            _ => Value::Null,
        };
        Ok(json!({
            "protocol_version": PROTOCOL_VERSION,
            "server": { "name": "dsh", "version": env!("CARGO_PKG_VERSION") },
            "max_message_bytes": super::MAX_MESSAGE_BYTES,
            "methods": METHODS.iter().chain(terminals::METHODS).collect::<Vec<_>>(),
            "notifications": NOTIFICATIONS,
            "host": { "cwd": cwd, "facts": host_facts() },
            "config": config_json(&exec.config())?,
            "sandbox_mode": exec.sandbox_mode().map(|m| m.as_str()),
            "session": session,
        }))
    }

    fn run(self: &Arc<Self>, id: &Option<Value>, p: &Fields<'_>) -> Outcome<Reply> {
        let spec = input::spec(p.required("spec")?)?;
        let run_id = p.string("run_id")?;
        let background_id = p.string("background_id")?;
        let streamed = p.bool("stream")?.unwrap_or(false);
        if run_id.as_deref() == Some("") {
            return Err(Fault::Shape {
                field: "run_id".into(),
                problem: "must not be empty".into(),
            });
        }
        if streamed && run_id.is_none() {
            return Err(Fault::Shape {
                field: "run_id".into(),
                problem: "is needed with stream: true (run_output names the run by it)".into(),
            });
        }
        let exec = self.exec()?;
        let token = CancelToken::new();
        if let Some(r) = &run_id {
            let mut runs = lock(&self.runs);
            if runs.contains_key(r) {
                return Err(Fault::Shape {
                    field: "run_id".into(),
                    problem: format!("{r:?} is already running: give each run its own"),
                });
            }
            runs.insert(r.clone(), token.clone());
        }
        // Where each stream ended, as the tap saw it: what the client
        // compares its chunks with (some may have been left out).
        let ends = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let future = match (&background_id, &run_id) {
            (b, Some(r)) if streamed => {
                let (session, r, ends) = (Arc::downgrade(self), r.clone(), ends.clone());
                let valve = self.stream_queue.valve.clone();
                let tap: OutputTap = Arc::new(move |stream, offset, chunk: &[u8]| {
                    let end = &ends[usize::from(stream == OutputStream::Stderr)];
                    end.store(offset + chunk.len() as u64, Ordering::SeqCst);
                    if let Some(session) = session.upgrade() {
                        session.stream(&r, stream, offset, chunk);
                    }
                });
                exec.run_streamed(&spec, Some(&token), b.as_deref(), tap, Some(valve))
            }
            (Some(b), _) => exec.run_as(&spec, Some(&token), b),
            (None, _) => exec.run(&spec, Some(&token)),
        };
        let (session, id) = (self.clone(), id.clone());
        tokio::spawn(async move {
            let outcome = future.await;
            if let Some(r) = &run_id {
                lock(&session.runs).remove(r);
            }
            let outcome = outcome
                .map(|r| match streamed {
                    true => json!({
                        "result": run_result_json(&r),
                        "stream_ends": {
                            "stdout": ends[0].load(Ordering::SeqCst),
                            "stderr": ends[1].load(Ordering::SeqCst),
                        },
                    }),
                    false => json!({ "result": run_result_json(&r) }),
                })
                .map_err(Fault::Core);
            session.answer(&id, outcome);
        });
        Ok(Reply::Later)
    }

    fn wait(self: &Arc<Self>, id: &Option<Value>, p: &Fields<'_>) -> Outcome<Reply> {
        let process = self.process(p)?;
        // A parameter of this call, not a request's field: named as given.
        let bad = |problem: String| Fault::Shape {
            field: "timeout_ms".into(),
            problem,
        };
        let timeout = match p.get("timeout_ms") {
            None => None,
            Some(Value::Number(n)) => match n.as_f64().unwrap_or(f64::NAN) {
                // Past what a clock can count (1e303 ms) is no limit at all.
                ms if ms >= 0.0 && ms.is_finite() => Duration::try_from_secs_f64(ms / 1000.0).ok(),
                ms => {
                    return Err(bad(format!(
                        "must be a non-negative finite number of milliseconds, got {ms}"
                    )))
                }
            },
            Some(other) => return Err(bad(format!("must be a number, got {}", frame::type_of(other)))),
        };
        let (session, id) = (self.clone(), id.clone());
        tokio::spawn(async move {
            let settled = match timeout {
                None => {
                    process.wait().await;
                    true
                }
                Some(t) => tokio::time::timeout(t, process.wait()).await.is_ok(),
            };
            session.answer(
                &id,
                Ok(json!({ "settled": settled, "process": process_json(&process) })),
            );
        });
        Ok(Reply::Later)
    }

    fn write_stdin(self: &Arc<Self>, id: &Option<Value>, p: &Fields<'_>) -> Outcome<Reply> {
        let process = self.process(p)?;
        let bytes = input::data(p)?;
        let (session, id) = (self.clone(), id.clone());
        // Taken in call order, each whole; answered once every byte was
        // taken by the bounded stdin buffer (back-pressure).
        process.write_stdin_with(bytes, move |outcome| {
            session.answer(&id, outcome.map(|()| json!({})).map_err(Fault::Core));
        });
        Ok(Reply::Later)
    }

    /// The session ends: everything it started is ended and awaited.
    pub async fn close(&self) {
        if let Some(token) = self.token.get() {
            self.hub.forget(token);
        }
        if let Some(exec) = self.exec.get() {
            exec.dispose().await;
        }
    }
}

/// How often new output is looked for, for `output` notifications: at
/// most one per process per tick.
const OUTPUT_TICK: Duration = Duration::from_millis(50);

/// Sends `output` when a process's output grew since the last one (and a
/// last one with the final ends once it settled): a client that mirrors
/// the output by offset (`read_from`) learns when to read, and reads only
/// what is new. Ends with the session.
async fn watch_output(session: std::sync::Weak<Session>) {
    let mut told: HashMap<String, (u64, u64)> = HashMap::new();
    let mut done: std::collections::HashSet<String> = std::collections::HashSet::new();
    loop {
        tokio::time::sleep(OUTPUT_TICK).await;
        let Some(session) = session.upgrade() else { return };
        let Some(exec) = session.exec.get() else { return };
        if exec.is_disposed() {
            return;
        }
        for process in exec.list() {
            let id = process.id();
            if done.contains(id) {
                continue;
            }
            // Settled first: the ends read after it are final.
            let settled = process.is_settled();
            let o = process.output_offsets();
            let ends = (o.stdout_end, o.stderr_end);
            // While no connection is attached nothing is kept of these: the
            // resuming client reads again from its own offsets.
            if (settled || told.get(id) != Some(&ends)) && session.is_attached() {
                session.send(
                    None,
                    frame::notification(
                        "output",
                        json!({ "id": id, "stdout_end": ends.0, "stderr_end": ends.1, "settled": settled }),
                    ),
                );
            }
            if settled {
                done.insert(id.to_owned());
                told.remove(id);
            } else {
                told.insert(id.to_owned(), ends);
            }
        }
    }
}

fn check_version(p: &Fields<'_>) -> Outcome<()> {
    match p.get("protocol_version") {
        Some(v) if v == &json!(PROTOCOL_VERSION) => Ok(()),
        other => {
            let mut e = RpcError::new(
                INVALID_PARAMS,
                format!(
                    "protocol_version must be {PROTOCOL_VERSION} (the version this server speaks), got {}",
                    other.map_or("nothing".to_owned(), Value::to_string)
                ),
            );
            e.data = Some(json!({ "code": "INVALID_ARGUMENT", "field": "protocol_version" }));
            Err(Fault::Rpc(e))
        }
    }
}

fn already_initialized() -> Fault {
    Fault::Rpc(RpcError::new(
        frame::INVALID_REQUEST,
        "the session is already initialized",
    ))
}

//! Terminal sessions over the protocol (docs/terminals.md): `terminal_*`
//! methods on the session's executor. Output is read by long-poll
//! (`terminal_read` with `wait_ms`), which is its own flow control: the
//! server sends output only as fast as the client asks for it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_core::{
    DshError, Field, FieldName, Num, Scope, Terminal, TerminalProgram, TerminalRequest, TerminalSignal,
};
use serde_json::{json, Map, Value};

use super::hub::lock;
use super::input::{self, Fault, Fields, Outcome};
use super::session::{Reply, Session};

/// The methods of this module.
pub const METHODS: &[&str] = &[
    "terminal_spawn",
    "terminal_get",
    "terminal_read",
    "terminal_write",
    "terminal_resize",
    "terminal_inspect_foreground",
    "terminal_wait_input_waiting",
    "terminal_signal_foreground",
    "terminal_terminate",
    "terminal_wait",
];

/// A session's terminals, by id.
#[derive(Default)]
pub struct Terminals {
    by_id: Mutex<HashMap<String, Terminal>>,
    /// Ids in spawn order, for dropping the oldest ended ones.
    order: Mutex<std::collections::VecDeque<String>>,
    next: Mutex<u64>,
}

/// Ended terminal sessions kept answerable (`terminal_get`, the rest of
/// their output) beyond this many sessions in all, oldest dropped first, as
/// the registry keeps settled processes (`retain_settled`).
const RETAIN_TERMINALS: usize = 1000;

impl Terminals {
    fn insert(&self, id: String, terminal: Terminal) {
        let mut by_id = lock(&self.by_id);
        let mut order = lock(&self.order);
        by_id.insert(id.clone(), terminal);
        order.push_back(id);
        let mut excess = by_id.len().saturating_sub(RETAIN_TERMINALS);
        order.retain(|old| {
            if excess > 0 && by_id.get(old).is_some_and(Terminal::has_exited) {
                by_id.remove(old);
                excess -= 1;
                return false;
            }
            true
        });
    }
}

fn snapshot(id: &str, t: &Terminal) -> Value {
    json!({
        "id": id,
        "pid": t.pid(),
        "exited": t.has_exited(),
        "exit_code": t.exit_code(),
        "signal": t.signal(),
        "exit_status_unavailable": t.exit_status_unavailable(),
        "survivors": t.survivors(),
        "output_ended": t.output_ended(),
    })
}

const REQUEST_KEYS: &[&str] = &[
    "argv",
    "command",
    "cwd",
    "env",
    "dsh_env",
    "rows",
    "cols",
    "grace_ms",
    "sandbox_policy",
];

/// A terminal request: exactly one of `argv` (a program and its arguments)
/// and `command` (a line for bash).
fn request(v: &Value) -> Outcome<TerminalRequest> {
    // `request.*`, as the core names a terminal request's fields.
    let r = Fields::new(v, "request", REQUEST_KEYS)?;
    let f = |name| Field::new(Scope::Request, name);
    let program = match (r.get("argv"), r.string("command")?) {
        (Some(Value::Array(words)), None) => TerminalProgram::Argv(
            words
                .iter()
                .map(|w| match w {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(Fault::Shape {
                        field: "request.argv".into(),
                        problem: "must be an array of strings".into(),
                    }),
                })
                .collect::<Outcome<_>>()?,
        ),
        (None, Some(command)) => TerminalProgram::Command(command),
        (Some(_), Some(_)) => {
            return Err(Fault::Shape {
                field: "request.command".into(),
                problem: "cannot be given with request.argv: one or the other".into(),
            })
        }
        (Some(_), None) => {
            return Err(Fault::Shape {
                field: "request.argv".into(),
                problem: "must be an array of strings".into(),
            })
        }
        (None, None) => {
            return Err(Fault::Shape {
                field: "request.argv".into(),
                problem: "is required (or request.command)".into(),
            })
        }
    };
    let mut t = match program {
        TerminalProgram::Argv(argv) => TerminalRequest::argv(argv),
        TerminalProgram::Command(c) => TerminalRequest::command(c),
    };
    t.cwd = r.string("cwd")?.map(PathBuf::from);
    t.env = r.strings("env")?;
    t.dsh_env = r.strings("dsh_env")?;
    t.rows = r.number("rows", f(FieldName::Rows))?;
    t.cols = r.number("cols", f(FieldName::Cols))?;
    t.grace_ms = r.number("grace_ms", f(FieldName::GraceMs))?;
    t.sandbox_policy = input::policy_input(&r, Scope::Request)?;
    Ok(t)
}

/// A duration in milliseconds (`wait_ms`, `timeout_ms`): none is no limit,
/// and one past what a clock can count is none too.
fn millis(p: &Fields<'_>, key: &str) -> Outcome<Option<Duration>> {
    match p.get(key) {
        None => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(ms) if ms >= 0.0 => Ok(Duration::try_from_secs_f64(ms / 1000.0).ok()),
            _ => Err(Fault::Shape {
                field: key.into(),
                problem: format!("must be a non-negative number of milliseconds, got {n}"),
            }),
        },
        Some(other) => Err(Fault::Shape {
            field: key.into(),
            problem: format!("must be a number of milliseconds, got {other}"),
        }),
    }
}

impl Session {
    fn terminal(&self, p: &Fields<'_>) -> Outcome<(String, Terminal)> {
        let id = p.required_string("id")?;
        let t = lock(&self.terminals().by_id).get(&id).cloned();
        t.map(|t| (id.clone(), t)).ok_or_else(|| {
            Fault::Core(DshError::TerminalClosed(format!(
                "no terminal session with id {id:?}"
            )))
        })
    }

    /// A `terminal_*` call, or `None` for another method.
    pub(super) fn dispatch_terminal(
        self: &Arc<Self>,
        id: &Option<Value>,
        method: &str,
        params: &Map<String, Value>,
    ) -> Option<Outcome<Reply>> {
        METHODS
            .contains(&method)
            .then(|| self.terminal_call(id, method, params))
    }

    fn terminal_call(
        self: &Arc<Self>,
        id: &Option<Value>,
        method: &str,
        params: &Map<String, Value>,
    ) -> Outcome<Reply> {
        let known = |keys: &[&str]| Fields::of(params, "", keys);
        let later = |f: Box<dyn FnOnce(Arc<Session>, Option<Value>) + Send>| {
            f(self.clone(), id.clone());
            Ok(Reply::Later)
        };
        match method {
            "terminal_spawn" => {
                let p = known(&["request", "id"])?;
                let spec = self.exec()?.resolve_terminal(request(p.required("request")?)?)?;
                let tid = match p.string("id")? {
                    Some(tid) => tid,
                    None => {
                        let mut next = lock(&self.terminals().next);
                        *next += 1;
                        format!("term-{next}")
                    }
                };
                if lock(&self.terminals().by_id).contains_key(&tid) {
                    return Err(Fault::Shape {
                        field: "id".into(),
                        problem: format!("{tid:?} is taken by another terminal"),
                    });
                }
                let terminal = self.exec()?.spawn_terminal(&spec)?;
                self.terminals().insert(tid.clone(), terminal.clone());
                later(Box::new(move |session, id| {
                    // Answered before the exit can be told: a client hears of
                    // the session before it hears that it ended.
                    session.answer(&id, Ok(json!({ "terminal": snapshot(&tid, &terminal) })));
                    let weak = Arc::downgrade(&session);
                    let t = terminal.clone();
                    terminal.when_exited(move || {
                        if let Some(session) = weak.upgrade() {
                            session.notify("terminal_exit", json!({ "terminal": snapshot(&tid, &t) }));
                        }
                    });
                }))
            }
            "terminal_get" => {
                let (tid, t) = self.terminal(&known(&["id"])?)?;
                Ok(Reply::Now(json!({ "terminal": snapshot(&tid, &t) })))
            }
            "terminal_read" => {
                let p = known(&["id", "wait_ms"])?;
                let (_, t) = self.terminal(&p)?;
                let wait = millis(&p, "wait_ms")?;
                let read = t.read_output();
                if !read.text.is_empty()
                    || read.ended
                    || wait == Some(Duration::ZERO)
                    || p.get("wait_ms").is_none()
                {
                    return Ok(Reply::Now(json!({ "text": read.text, "ended": read.ended })));
                }
                later(Box::new(move |session, id| {
                    tokio::spawn(async move {
                        let next = match wait {
                            Some(w) => tokio::time::timeout(w, t.next_output()).await.ok(),
                            None => Some(t.next_output().await),
                        };
                        let answer = match next {
                            Some(Some(text)) => json!({ "text": text, "ended": false }),
                            Some(None) => json!({ "text": "", "ended": true }),
                            None => json!({ "text": "", "ended": t.output_ended() }),
                        };
                        session.answer(&id, Ok(answer));
                    });
                }))
            }
            "terminal_write" => {
                let p = known(&["id", "data", "data_base64"])?;
                let (_, t) = self.terminal(&p)?;
                let bytes = input::data(&p)?;
                later(Box::new(move |session, id| {
                    t.write_with(bytes, move |outcome| {
                        session.answer(&id, outcome.map(|()| json!({})).map_err(Fault::Core));
                    })
                }))
            }
            "terminal_resize" => {
                let p = known(&["id", "rows", "cols"])?;
                let (_, t) = self.terminal(&p)?;
                let f = |name| Field::new(Scope::Terminal, name);
                let rows = p.number("rows", f(FieldName::Rows))?.unwrap_or(Num(f64::NAN));
                let cols = p.number("cols", f(FieldName::Cols))?.unwrap_or(Num(f64::NAN));
                t.resize(rows, cols)?;
                Ok(Reply::Now(json!({})))
            }
            "terminal_inspect_foreground" => {
                let (_, t) = self.terminal(&known(&["id"])?)?;
                later(Box::new(move |session, id| {
                    t.inspect_foreground_with(move |fg| {
                        let fg = fg.map(|f| json!({ "process_group_id": f.process_group_id, "input_waiting": f.input_waiting }));
                        session.answer(&id, Ok(json!({ "foreground": fg })));
                    })
                }))
            }
            "terminal_wait_input_waiting" => {
                let p = known(&["id", "timeout_ms"])?;
                let (_, t) = self.terminal(&p)?;
                let timeout = millis(&p, "timeout_ms")?;
                later(Box::new(move |session, id| {
                    t.wait_input_waiting_with(timeout, move |waiting| {
                        session.answer(&id, Ok(json!({ "waiting": waiting })));
                    })
                }))
            }
            "terminal_signal_foreground" => {
                let p = known(&["id", "signal"])?;
                let (_, t) = self.terminal(&p)?;
                let signal = TerminalSignal::parse(
                    Field::new(Scope::Terminal, FieldName::Signal),
                    &p.required_string("signal")?,
                )?;
                Ok(Reply::Now(
                    json!({ "process_group_id": t.signal_foreground(signal)? }),
                ))
            }
            "terminal_terminate" => {
                let (_, t) = self.terminal(&known(&["id"])?)?;
                later(Box::new(move |session, id| {
                    t.terminate_with(move |survivors| {
                        session.answer(&id, Ok(json!({ "survivors": survivors })))
                    })
                }))
            }
            "terminal_wait" => {
                let p = known(&["id", "timeout_ms"])?;
                let (tid, t) = self.terminal(&p)?;
                let timeout = millis(&p, "timeout_ms")?;
                later(Box::new(move |session, id| {
                    tokio::spawn(async move {
                        let exited = match timeout {
                            Some(w) => tokio::time::timeout(w, t.wait()).await.is_ok(),
                            None => {
                                t.wait().await;
                                true
                            }
                        };
                        session.answer(
                            &id,
                            Ok(json!({ "exited": exited, "terminal": snapshot(&tid, &t) })),
                        );
                    });
                }))
            }
            // Every name of METHODS has its arm above.
            other => Err(Fault::Core(DshError::Internal(format!("no arm for {other}")))),
        }
    }
}

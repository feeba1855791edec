//! Sessions that outlive their connection (`dsh serve --linger`): each has
//! a token, is kept for the linger time after its connection ends, and a
//! new connection that sends `initialize {resume: token}` takes it over:
//! its processes, their output (read again by offset), and every message
//! the server had for it meanwhile, in order.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use serde_json::Value;

use super::session::{Out, Outbox, Session};

/// The sessions of one server process.
pub struct Hub {
    /// `None`: a session ends with its connection.
    pub linger: Option<Duration>,
    sessions: Mutex<HashMap<String, Weak<Session>>>,
}

impl Hub {
    pub fn new(linger: Option<Duration>) -> Arc<Hub> {
        Arc::new(Hub {
            linger,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    /// A new session's token, when sessions linger here.
    pub fn enroll(&self, session: &Arc<Session>) -> Option<String> {
        self.linger?;
        let token = new_token();
        lock(&self.sessions).insert(token.clone(), Arc::downgrade(session));
        Some(token)
    }

    pub fn find(&self, token: &str) -> Option<Arc<Session>> {
        lock(&self.sessions).get(token).and_then(Weak::upgrade)
    }

    pub fn forget(&self, token: &str) {
        lock(&self.sessions).remove(token);
    }

    /// How many sessions are kept (attached or lingering).
    pub fn len(&self) -> usize {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, s| s.strong_count() > 0);
        sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every session kept (a server that stops ends them all).
    pub fn all(&self) -> Vec<Arc<Session>> {
        lock(&self.sessions).values().filter_map(Weak::upgrade).collect()
    }
}

/// 128 random bits as hex: the only thing that lets a connection take a
/// session over, so it comes from the kernel's generator.
fn new_token() -> String {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        // The system call, not glibc's wrapper: the prebuilt dsh links
        // against glibc 2.17, which has none (getrandom(2) is Linux 3.17).
        // SAFETY: the pointer and length describe the unfilled tail of
        // `bytes`, which getrandom(2) only writes into.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getrandom,
                bytes[filled..].as_mut_ptr(),
                bytes.len() - filled,
                0,
            )
        };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            // getrandom has existed since Linux 3.17; without it there is
            // no token worth the name, and no lingering session either.
            panic!("getrandom failed: {}", std::io::Error::last_os_error());
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a session's messages go: its connection, or a backlog kept for
/// the connection that resumes it.
pub enum Link {
    Attached(Outbox),
    Detached(Backlog),
}

/// Messages kept while no connection is attached, up to a bound: past it
/// the oldest are dropped and the resuming client is told (`missed`).
#[derive(Default)]
pub struct Backlog {
    /// Each message, with the id of the call it answers (`None`: a
    /// notification).
    lines: VecDeque<(Option<Value>, String)>,
    bytes: usize,
    pub missed: bool,
}

/// A lingering session keeps at most this much for its next connection.
const BACKLOG_BYTES: usize = 16 << 20;

impl Backlog {
    pub fn push(&mut self, answers: Option<Value>, line: String) {
        self.bytes += line.len();
        self.lines.push_back((answers, line));
        while self.bytes > BACKLOG_BYTES {
            match self.lines.pop_front() {
                Some((_, old)) => {
                    self.bytes -= old.len();
                    self.missed = true;
                }
                None => break,
            }
        }
    }

    /// Keeps `later`'s messages after these.
    pub fn append(&mut self, later: Backlog) {
        self.missed |= later.missed;
        for (answers, line) in later.lines {
            self.push(answers, line);
        }
    }

    /// The ids of the calls whose answers are kept here.
    pub fn answers(&self) -> impl Iterator<Item = &Value> {
        self.lines.iter().filter_map(|(id, _)| id.as_ref())
    }

    /// Sends everything kept, in order, to a connection taking over.
    pub fn drain_into(self, out: &Outbox) {
        for (_, line) in self.lines {
            let _ = out.send(Out::Line(line));
        }
    }
}

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

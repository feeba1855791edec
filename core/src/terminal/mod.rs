//! Terminal sessions (docs/terminals.md): a program started by the
//! executor's supervisor as the leader of a new session whose controlling
//! terminal is a pseudo-terminal the host holds the master of. Output is
//! read from the master into a bounded buffer (when it is full, reading
//! stops and the program waits, as on a real terminal), input is written
//! to it, and the whole-tree guarantees of commands apply to the session.

pub(crate) mod foreground;
pub(crate) mod session;

pub use session::TerminalTask;
mod write;

use write::{input_gone, WriteRequest};
pub use write::{PendingWrite, WriteBuffer, WRITE_PIECE};

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::host::callbacks;
use crate::host::forked;
use crate::host::latch::{Latch, WaiterId};
use crate::host::runtime;
use crate::launch::ending::ExitFields;
use crate::launch::pty;
use crate::launch::sweeper::sweep_counted;
use crate::launch::tree::{group_in_stat, session_in_stat, TagMatch};
use crate::spec::config::Num;
use crate::spec::error::{DshError, Field, FieldName, Result, Scope};
use crate::spec::terminal::{dimension, TerminalSignal};
use crate::sys::lock;
use crate::sys::pidfd_open;
use crate::watch::escalation::kill_after;
use crate::watch::output::incomplete_suffix;
use crate::watch::supervise::Stop;

const CHUNK: usize = 64 * 1024;

/// The terminal's foreground process group (see
/// [`Terminal::inspect_foreground`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Foreground {
    /// The group the terminal driver publishes as its foreground.
    pub process_group_id: i32,
    /// True only when the kernel shows that group blocked reading the
    /// terminal (the rule is in docs/terminals.md).
    pub input_waiting: bool,
}

/// What one [`Terminal::read_output`] returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TerminalRead {
    /// Output since the previous read, never split inside a UTF-8
    /// character (an incomplete one waits for the next read).
    pub text: String,
    /// True once the output has ended and every byte was read: no read
    /// will return more.
    pub ended: bool,
}

/// Unread output: at most `cap` bytes; the session stops reading the
/// terminal while it is full.
struct Output {
    bytes: VecDeque<u8>,
    cap: usize,
    ended: bool,
}

impl Output {
    fn room(&self) -> usize {
        self.cap.saturating_sub(self.bytes.len())
    }

    fn take(&mut self) -> TerminalRead {
        let mut bytes: Vec<u8> = self.bytes.drain(..).collect();
        if !self.ended {
            let hold = incomplete_suffix(&bytes);
            let tail = bytes.split_off(bytes.len() - hold);
            self.bytes.extend(tail);
        }
        TerminalRead {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            ended: self.ended && self.bytes.is_empty(),
        }
    }
}

struct State {
    ending: ExitFields,
    /// The session task has ended: output ended, leader released.
    finished: bool,
    /// The session task handled a stop (terminate or dispose).
    stopped: bool,
    survivors: u32,
}

struct SessionInner {
    host_pid: libc::pid_t,
    pid: libc::pid_t,
    tag: String,
    grace: Duration,
    /// A copy of the master for writes on the caller's thread and `ioctl`s
    /// (resize, foreground group); the session task reads and writes its
    /// own. Closed when the session ends, so the terminal hangs up then,
    /// whatever handles are still held.
    control: Mutex<Option<OwnedFd>>,
    rdev: libc::dev_t,
    state: Mutex<State>,
    /// Set when the leader has exited, after `state` has its ending.
    exited: Latch,
    finished_tx: watch::Sender<bool>,
    output: Mutex<Output>,
    output_cv: Condvar,
    /// Bumped when output arrives or ends.
    output_tx: watch::Sender<u64>,
    /// Called when output arrives or ends, from whichever thread read it
    /// (see [`Terminal::set_output_news`]).
    output_news: Mutex<Option<OutputNews>>,
    /// Woken when a reader made room.
    room: Notify,
    writes: mpsc::UnboundedSender<WriteRequest>,
    /// How many writes are queued: while any is, a new write queues behind
    /// it instead of writing at once (order is kept).
    write_gate: Arc<Mutex<usize>>,
    stop_tx: watch::Sender<Option<Stop>>,
    /// The survivors of the first `terminate()` that finished.
    terminated: tokio::sync::Mutex<Option<u32>>,
}

/// What a host is told when a terminal's output arrives or ends.
pub type OutputNews = Arc<dyn Fn() + Send + Sync>;

impl SessionInner {
    /// Output arrived or ended: every kind of reader is told.
    fn output_changed(&self) {
        self.output_cv.notify_all();
        self.output_tx.send_modify(|v| *v += 1);
        let news = lock(&self.output_news).clone();
        if let Some(news) = news {
            news();
        }
    }
}

/// A live terminal session. Cloning shares it.
#[derive(Clone)]
pub struct Terminal {
    shared: Arc<SessionInner>,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal").field("pid", &self.shared.pid).finish()
    }
}

fn closed(what: &str) -> DshError {
    DshError::TerminalClosed(what.to_owned())
}

/// `pidfd_send_signal` flag (Linux 6.9+): signal the process group of the
/// pinned process.
const PIDFD_SIGNAL_PROCESS_GROUP: libc::c_uint = 1 << 2;

impl Terminal {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// The session leader's pid (also its session id and the id of its
    /// process group).
    pub fn pid(&self) -> i32 {
        self.shared.pid
    }

    /// True once the leader has exited (`exit_code` / `signal` are then
    /// final).
    pub fn has_exited(&self) -> bool {
        self.shared.exited.is_set()
    }

    /// The leader's exit code; `None` while it runs or when a signal ended
    /// it.
    pub fn exit_code(&self) -> Option<i32> {
        self.state().ending.exit_code
    }

    /// The signal that ended the leader (`"SIGHUP"`), if one did.
    pub fn signal(&self) -> Option<String> {
        self.state().ending.signal.clone()
    }

    /// True when the leader ended but nobody could say how (its supervisor
    /// was killed).
    pub fn exit_status_unavailable(&self) -> bool {
        self.state().ending.unavailable
    }

    /// After `terminate()` or dispose: how many members of the session were
    /// still alive when the stop finished (expected: 0).
    pub fn survivors(&self) -> u32 {
        self.state().survivors
    }

    /// Consuming read: the output since the previous read (of any kind),
    /// never the same bytes twice. Reading makes room: while `max_output_bytes`
    /// of output wait unread, the program's writes to the terminal block.
    pub fn read_output(&self) -> TerminalRead {
        let read = lock(&self.shared.output).take();
        self.shared.room.notify_one();
        read
    }

    /// Has `news` called, on whichever thread read it, each time output
    /// arrives or ends (replacing what was set before). For a face that
    /// settles its own readers where the output is read: Node's, whose
    /// session is read on the JS thread's loop, is told when a core
    /// thread read some instead (a reader made room for it). `news` must
    /// return quickly and must not block or call back into the terminal.
    pub fn set_output_news(&self, news: OutputNews) {
        *lock(&self.shared.output_news) = Some(news);
    }

    /// True once the output has ended and every byte was read (takes
    /// nothing).
    pub fn output_ended(&self) -> bool {
        let out = lock(&self.shared.output);
        out.ended && out.bytes.is_empty()
    }

    /// Waits until there is output (or it has ended) and takes it: `None`
    /// once the output has ended and everything was read.
    pub async fn next_output(&self) -> Option<String> {
        let mut rx = self.shared.output_tx.subscribe();
        loop {
            rx.borrow_and_update();
            let read = self.read_output();
            if !read.text.is_empty() {
                return Some(read.text);
            }
            if read.ended {
                return None;
            }
            if rx.changed().await.is_err() {
                return None;
            }
        }
    }

    /// [`Terminal::next_output`] for a host whose hand-off to its own event
    /// loop is thread-safe and never blocks (Node's promises): `on_output`
    /// runs on one of the core's I/O threads, with no hop through the
    /// callback thread (a keystroke's echo reaches the host one thread
    /// wake-up sooner). It must return quickly and must not block.
    pub fn next_output_io_callback(&self, on_output: impl FnOnce(Option<String>) + Send + 'static) {
        let this = self.clone();
        runtime::handle().spawn(async move { on_output(this.next_output().await) });
    }

    /// Calls `on_ready` on the callback thread once there is output to
    /// read or the output has ended (at once if so already). It takes
    /// nothing: the reader then takes what there is with
    /// [`Terminal::read_output`]. For a face whose readers may give up while
    /// they wait (Python's cancelled tasks): a reader that is gone when the
    /// wait ends has taken nothing, so nothing is lost or reordered.
    /// [`DshError::ForkedChild`] in a forked child.
    pub fn when_output_ready(&self, on_ready: impl FnOnce() + Send + 'static) -> Result<()> {
        forked::check_host(self.shared.host_pid)?;
        let this = self.clone();
        runtime::handle().spawn(async move {
            let mut rx = this.shared.output_tx.subscribe();
            loop {
                rx.borrow_and_update();
                if !nothing_to_read(&lock(&this.shared.output)) || rx.changed().await.is_err() {
                    break;
                }
            }
            callbacks::dispatch(on_ready);
        });
        Ok(())
    }

    /// Blocks until there is output, it has ended, or `timeout` passed
    /// (`None`: no limit), and takes what there is. Refused where blocking
    /// is (inside a callback or an async runtime) unless `timeout` is zero.
    pub fn read_output_timeout(&self, timeout: Option<Duration>) -> Result<TerminalRead> {
        if runtime::may_block(timeout, Some(self.shared.host_pid))? {
            let guard = lock(&self.shared.output);
            let guard = match timeout {
                None => self
                    .shared
                    .output_cv
                    .wait_while(guard, |o| nothing_to_read(o))
                    .unwrap_or_else(|e| e.into_inner()),
                Some(t) => {
                    self.shared
                        .output_cv
                        .wait_timeout_while(guard, t, |o| nothing_to_read(o))
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
            drop(guard);
        }
        Ok(self.read_output())
    }

    /// Changes the window size; the foreground group gets SIGWINCH. Each
    /// must be a whole number from 1 to 65535.
    pub fn resize(&self, rows: Num, cols: Num) -> Result<()> {
        let rows = dimension(Field::new(Scope::Terminal, FieldName::Rows), rows)?;
        let cols = dimension(Field::new(Scope::Terminal, FieldName::Cols), cols)?;
        forked::check_host(self.shared.host_pid)?;
        let ended = || closed("the terminal session has ended: it cannot be resized");
        // Refused from the program's exit, as a write is, not from the
        // session's end a moment later: the same call cannot succeed or
        // fail by how fast the session winds down.
        if self.has_exited() {
            return Err(closed("the terminal's program has exited: it cannot be resized"));
        }
        let control = lock(&self.shared.control);
        let fd = control.as_ref().ok_or_else(ended)?;
        pty::set_size(fd, rows, cols).map_err(|e| closed(&format!("cannot resize the terminal: {e}")))
    }

    /// The terminal's foreground process group and whether the kernel shows
    /// it waiting for input (docs/terminals.md); `None` when there is none
    /// (the program has exited).
    pub fn inspect_foreground(&self) -> Option<Foreground> {
        let pgid = self.foreground_group()?;
        // Bytes of ours still queued for the terminal: the program has
        // input coming, whatever it does now.
        let writing = *lock(&self.shared.write_gate) > 0;
        Some(Foreground {
            process_group_id: pgid,
            input_waiting: !writing
                && crate::terminal::foreground::input_waiting(self.shared.pid, pgid, self.shared.rdev),
        })
    }

    /// [`Terminal::inspect_foreground`] off the caller's thread (it reads
    /// `/proc`): `on_done` gets the answer on the callback thread.
    pub fn inspect_foreground_with(&self, on_done: impl FnOnce(Option<Foreground>) + Send + 'static) {
        let this = self.clone();
        runtime::handle().spawn_blocking(move || {
            let fg = this.inspect_foreground();
            callbacks::dispatch(move || on_done(fg));
        });
    }

    fn foreground_group(&self) -> Option<libc::pid_t> {
        if forked::check_host(self.shared.host_pid).is_err() {
            return None;
        }
        // The leader is unreaped until the session task ends, so the
        // session id, and the groups in it, are still this session's.
        if self.has_exited() || self.state().finished {
            return None;
        }
        let control = lock(&self.shared.control);
        pty::foreground_group(control.as_ref()?)
    }

    /// Delivers `signal` to the terminal's foreground process group and
    /// returns that group's id. The group is checked to belong to this
    /// session and pinned (by a pidfd on its leader) before it is
    /// signalled. No foreground group (the program has exited):
    /// [`DshError::TerminalClosed`].
    pub fn signal_foreground(&self, signal: TerminalSignal) -> Result<i32> {
        forked::check_host(self.shared.host_pid)?;
        let none = || closed("the terminal has no foreground process group (its program has exited)");
        let pgid = self.foreground_group().ok_or_else(none)?;
        let sig = signal.number();
        let session = self.shared.pid;
        if signal == TerminalSignal::Kill && pgid == session {
            // The program itself in front (the shell between jobs): SIGKILL
            // would end the session with no hang-up, no grace and nothing
            // left behind ended. That is terminate()'s job, as the harness's
            // own provider says.
            return Err(DshError::InvalidArgument {
                field: Field::new(Scope::Terminal, FieldName::Signal),
                problem: "SIGKILL is refused while the terminal's own program is in the foreground \
                          (it would end the session): use terminate()"
                    .to_owned(),
            });
        }
        let in_session = |pid: libc::pid_t| {
            crate::sys::proc::read(&format!("{pid}/stat"))
                .ok()
                .is_some_and(|s| group_in_stat(&s) == Some(pgid) && session_in_stat(&s) == Some(session))
        };
        if let Ok(pidfd) = pidfd_open(pgid) {
            // Pinned: re-check that it still leads that group of ours.
            if in_session(pgid)
                && crate::sys::pidfd_send_signal_with(&pidfd, sig, PIDFD_SIGNAL_PROCESS_GROUP).is_ok()
            {
                return Ok(pgid);
            }
        }
        // The group's leader has gone (or the kernel predates group
        // signalling by pidfd): a group id is not reused while any member
        // has it, and a member of ours still does.
        if crate::terminal::foreground::members(session, pgid).is_empty() {
            return Err(none());
        }
        // SAFETY: killpg takes integers only.
        if unsafe { libc::killpg(pgid, sig) } != 0 {
            return Err(none());
        }
        Ok(pgid)
    }

    /// Completes once the leader has exited.
    pub async fn wait(&self) {
        self.shared.exited.wait().await
    }

    /// Blocks until the leader has exited or `timeout` passed; whether it
    /// has. Refused where blocking is, unless it has exited or `timeout` is
    /// zero.
    pub fn wait_timeout(&self, timeout: Option<Duration>) -> Result<bool> {
        if self.has_exited() {
            return Ok(true);
        }
        if !runtime::may_block(timeout, Some(self.shared.host_pid))? {
            return Ok(false);
        }
        Ok(self.shared.exited.wait_timeout(timeout))
    }

    /// Calls `f` on the callback thread once the leader has exited (soon,
    /// if it has); the id withdraws it ([`Terminal::cancel_when_exited`]).
    pub fn when_exited(&self, f: impl FnOnce() + Send + 'static) -> WaiterId {
        WaiterId(self.shared.exited.when_set(f))
    }

    /// Withdraws a `when_exited` callback that has not run, so a caller that
    /// stopped waiting (a cancelled future) leaves nothing behind; false if
    /// it already ran (or was queued to run) or was withdrawn.
    pub fn cancel_when_exited(&self, id: WaiterId) -> bool {
        self.shared.exited.withdraw(id.0)
    }

    async fn finished(&self) {
        let mut rx = self.shared.finished_tx.subscribe();
        let _ = rx.wait_for(|f| *f).await;
    }

    /// Ends every member of the session (SIGHUP and SIGTERM, SIGKILL after
    /// the grace period) and completes only when none is left, with the
    /// number the last scan still found alive (expected: 0). Idempotent:
    /// later calls wait for the same end. After the program ended by itself,
    /// it still ends whatever the session left behind (found by its tag).
    /// Pending writes fail with [`DshError::TerminalClosed`].
    pub async fn terminate(&self) -> u32 {
        if forked::check_host(self.shared.host_pid).is_err() {
            return 0;
        }
        self.shared.stop_tx.send_if_modified(|s| {
            if s.is_none() {
                *s = Some(Stop::Kill);
                true
            } else {
                false
            }
        });
        self.finished().await;
        let mut done = self.shared.terminated.lock().await;
        if let Some(s) = *done {
            return s;
        }
        let (stopped, survivors) = {
            let s = self.state();
            (s.stopped, s.survivors)
        };
        let survivors = if stopped {
            survivors
        } else {
            // Ended by itself before the stop: what its tag still marks.
            let left = end_leftovers(&self.shared.tag, self.shared.grace).await;
            self.state().survivors = left;
            left
        };
        *done = Some(survivors);
        survivors
    }

    /// [`Terminal::terminate`] for hosts with their own loop.
    pub fn terminate_with(&self, on_done: impl FnOnce(u32) + Send + 'static) {
        let this = self.clone();
        runtime::handle().spawn(async move {
            let n = this.terminate().await;
            callbacks::dispatch(move || on_done(n));
        });
    }

    /// [`Terminal::terminate`] for threads outside an async runtime.
    pub fn terminate_blocking(&self) -> Result<u32> {
        forked::check_host(self.shared.host_pid)?;
        runtime::refuse_blocking()?;
        let this = self.clone();
        runtime::block_on(async move { this.terminate().await })
    }
}

/// Nothing a read would return: no whole character waits, and the output
/// has not ended.
fn nothing_to_read(o: &Output) -> bool {
    o.bytes.len() <= incomplete_suffix_len(o) && !o.ended
}

fn incomplete_suffix_len(o: &Output) -> usize {
    if o.bytes.len() > 3 {
        return 0;
    }
    let v: Vec<u8> = o.bytes.iter().copied().collect();
    incomplete_suffix(&v)
}

/// SIGTERM to whatever carries `tag`, SIGKILL after `grace` to what is
/// left; returns how many the last scan found alive.
async fn end_leftovers(tag: &str, grace: Duration) -> u32 {
    if sweep_counted(TagMatch::command(tag), libc::SIGTERM).await.total == 0 {
        return 0;
    }
    kill_after(TagMatch::command(tag), Instant::now() + grace).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_holds_back_an_incomplete_character_until_the_end() {
        let mut o = Output {
            bytes: VecDeque::new(),
            cap: 16,
            ended: false,
        };
        let euro = "€".as_bytes();
        o.bytes.extend(b"ab");
        o.bytes.extend(&euro[..2]);
        assert_eq!(
            o.take(),
            TerminalRead {
                text: "ab".into(),
                ended: false
            }
        );
        o.bytes.extend(&euro[2..]);
        assert_eq!(o.take().text, "€");
        o.bytes.extend(&euro[..1]);
        o.ended = true;
        let last = o.take();
        assert_eq!(
            last.text, "\u{FFFD}",
            "at the end, a broken character is replaced, not lost"
        );
        assert!(last.ended);
    }

    #[test]
    fn signals_parse_by_name_only() {
        let f = Field::new(Scope::Terminal, FieldName::Signal);
        assert_eq!(TerminalSignal::parse(f, "SIGTSTP").unwrap(), TerminalSignal::Tstp);
        let e = TerminalSignal::parse(f, "SIGUSR1").unwrap_err().to_string();
        assert!(e.contains("must be one of SIGINT"), "{e}");
    }
}

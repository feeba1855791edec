//! Ctrl-C has to stop the command, not just dsh-cli. The core starts every
//! command as the leader of its own process group, so the terminal's SIGINT
//! reaches only us; dying on it would leave the command running. Instead the
//! signals are blocked before any thread exists (threads inherit the mask;
//! the core spawns commands with an empty one) and one thread takes them with
//! `sigwait` and fires the run's cancel token. No signal handler runs, so
//! nothing has to be async-signal-safe.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use dsh_core::CancelToken;
use nix::sys::signal::{SigSet, Signal};

/// The signals that stop the command: Ctrl-C, and a supervisor's SIGTERM or
/// a closed terminal's SIGHUP, which must not orphan it either.
const STOPPING: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Whether `sig`'s disposition is SIG_IGN.
fn ignored(sig: Signal) -> bool {
    // SAFETY: a zeroed sigaction is a valid value of the plain C struct.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a NULL new action only reads the current one into `old`.
    let read = unsafe { libc::sigaction(sig as libc::c_int, std::ptr::null(), &mut old) } == 0;
    read && old.sa_sigaction == libc::SIG_IGN
}

pub struct Interrupt {
    token: CancelToken,
    received: Arc<AtomicI32>,
}

impl Interrupt {
    /// Must run before any other thread is started.
    pub fn install() -> std::io::Result<Interrupt> {
        let mut set = SigSet::empty();
        // A signal the caller made us ignore (`nohup`, a script's background
        // job and its terminal's Ctrl-C) stays ignored: a blocked signal
        // would be taken by `sigwait` even so.
        for sig in STOPPING.into_iter().filter(|&sig| !ignored(sig)) {
            set.add(sig);
        }
        set.thread_block()?;
        let token = CancelToken::new();
        let received = Arc::new(AtomicI32::new(0));
        let (t, r) = (token.clone(), received.clone());
        std::thread::Builder::new()
            .name("dsh-cli-signals".into())
            .spawn(move || {
                // Later signals stay blocked and pending: the first one has
                // already begun the command's termination (with its grace).
                if let Ok(sig) = set.wait() {
                    r.store(sig as i32, Ordering::SeqCst);
                    t.cancel();
                }
            })?;
        Ok(Interrupt { token, received })
    }

    pub fn token(&self) -> &CancelToken {
        &self.token
    }

    /// The signal that arrived, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.received.load(Ordering::SeqCst) {
            0 => None,
            sig => Some(sig),
        }
    }
}

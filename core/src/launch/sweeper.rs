//! The sweep thread: every sweep of a command's tree (a signal to each
//! process [`TagMatch`] selects, or a count of them) is queued here.
//!
//! A sweep reads all of `/proc`, so sweeps run on one thread of their own
//! (never on the I/O threads that carry other commands' output), and every
//! request that arrives while a scan is under way is served by the next
//! scan together: stopping N commands at once costs a few scans, not N.

use std::collections::HashSet;
use std::sync::mpsc::{channel, Receiver, Sender};

use tokio::sync::oneshot;

use crate::host::forked::PerProcess;
use crate::launch::tree::{scan_and_signal, Hits, ScanRequest, TagMatch};

/// How many rescans a request gets in all ([`Request::again`]): a process
/// forked while a scan was reading `/proc` is caught by the next. (A
/// SIGKILLed process is a zombie soon, with an empty environ: not found
/// again.)
const RESCANS: u32 = 16;

/// How many of them a request gets for ends that may hide a child alone
/// (the scan found nobody): each catches one link of a fork-and-exit
/// chain, and a busy host has ends that are not the request's (a process
/// gone before a scan looked at it says nothing of whose it was).
const UNSEEN_RESCANS: u32 = 3;

/// What a sweep did: how many processes it signalled in all, and how many
/// its last scan still found (for SIGKILL: alive after every rescan).
#[derive(Debug, Default)]
pub(crate) struct Swept {
    pub total: usize,
    pub last: usize,
    /// For a census: pidfds of the live members found.
    pub members: Vec<std::os::fd::OwnedFd>,
}

struct Request {
    matcher: TagMatch,
    sig: libc::c_int,
    census: bool,
    swept: Swept,
    rescans: u32,
    /// Rescans for an unseen end alone ([`UNSEEN_RESCANS`]).
    unseen_rescans: u32,
    /// What its scans learned: see [`ScanRequest`].
    killed: HashSet<libc::pid_t>,
    sessions: HashSet<libc::pid_t>,
    zombies: HashSet<libc::pid_t>,
    reply: Option<oneshot::Sender<Swept>>,
}

impl Request {
    /// A request no scan has served yet.
    fn new(matcher: TagMatch, sig: libc::c_int, census: bool, reply: Option<oneshot::Sender<Swept>>) -> Self {
        Request {
            matcher,
            sig,
            census,
            swept: Swept::default(),
            rescans: 0,
            unseen_rescans: 0,
            killed: HashSet::new(),
            sessions: HashSet::new(),
            zombies: HashSet::new(),
            reply,
        }
    }

    /// Whether a scan that did `hit` calls for another: a SIGKILL until a
    /// scan finds nobody, and a count that found nobody, while a scan saw
    /// an end that may hide a child ([`scan_and_signal`]); counts it.
    fn again(&mut self, hit: &Hits) -> bool {
        let found = hit.count > 0;
        let unseen = hit.unseen_end && !found && self.unseen_rescans < UNSEEN_RESCANS;
        let again = match self.sig {
            libc::SIGKILL => found || unseen,
            0 => unseen,
            _ => false,
        };
        if again && self.rescans < RESCANS {
            self.rescans += 1;
            self.unseen_rescans += u32::from(unseen);
            return true;
        }
        false
    }
}

fn sweeper(rx: Receiver<Request>) {
    let mut pending: Vec<Request> = Vec::new();
    loop {
        if pending.is_empty() {
            match rx.recv() {
                Ok(r) => pending.push(r),
                Err(_) => return,
            }
        }
        pending.extend(rx.try_iter());
        let batch: Vec<ScanRequest> = pending
            .iter()
            .map(|r| ScanRequest {
                matcher: &r.matcher,
                sig: r.sig,
                census: r.census,
                killed: &r.killed,
                sessions: &r.sessions,
                zombies: &r.zombies,
            })
            .collect();
        let scan = scan_and_signal(&batch);
        let mut again = Vec::new();
        for (mut r, hit) in pending.drain(..).zip(scan.hits) {
            r.swept.total += hit.count;
            r.swept.last = hit.count;
            if r.again(&hit) {
                r.killed.extend(&hit.killed);
                r.sessions.extend(&hit.sessions);
                r.zombies.extend(&scan.zombies);
                again.push(r);
            } else if let Some(reply) = r.reply.take() {
                r.swept.members = hit.pidfds;
                let _ = reply.send(r.swept);
            }
        }
        pending = again;
    }
}

static SWEEPER: PerProcess<Sender<Request>> = PerProcess::new();

fn submit(matcher: TagMatch, sig: libc::c_int, census: bool, reply: Option<oneshot::Sender<Swept>>) {
    let tx = SWEEPER.get(|| {
        let (tx, rx) = channel();
        std::thread::Builder::new()
            .name("dsh-sweep".into())
            .spawn(move || sweeper(rx))
            .expect("cannot start the dsh sweep thread");
        tx
    });
    let _ = tx.send(Request::new(matcher, sig, census, reply));
}

/// Queues a sweep: `sig` to every live process the matcher selects (for
/// SIGKILL, again until a scan finds nobody; signal 0 only counts them;
/// either scans again after an end that may hide a child, see
/// [`Request::again`]). Returns at once.
pub(crate) fn sweep(matcher: TagMatch, sig: libc::c_int) {
    submit(matcher, sig, false, None);
}

/// [`sweep`], completing with what it did.
pub(crate) async fn sweep_counted(matcher: TagMatch, sig: libc::c_int) -> Swept {
    let (tx, rx) = oneshot::channel();
    submit(matcher, sig, false, Some(tx));
    rx.await.unwrap_or_default()
}

/// The live processes the matcher selects, each pinned by a pidfd (at
/// most [`CENSUS_PIDFDS`](crate::launch::tree::CENSUS_PIDFDS); `total`
/// says how many there were): a watch for their end waits on these
/// instead of scanning again and again.
pub(crate) async fn census(matcher: TagMatch) -> Swept {
    let (tx, rx) = oneshot::channel();
    submit(matcher, 0, true, Some(tx));
    rx.await.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(sig: libc::c_int) -> Request {
        Request::new(TagMatch::command("t"), sig, false, None)
    }

    fn hit(count: usize, unseen_end: bool) -> Hits {
        Hits {
            count,
            unseen_end,
            ..Hits::default()
        }
    }

    #[test]
    fn a_sigterm_sweep_never_scans_twice() {
        // One stop gives a process one SIGTERM, whatever the scan saw.
        let mut r = request(libc::SIGTERM);
        assert!(!r.again(&hit(3, true)));
        assert!(!r.again(&hit(0, true)));
    }

    #[test]
    fn a_sigkill_sweep_scans_while_it_finds_someone_and_for_unseen_ends_a_few_times() {
        let mut r = request(libc::SIGKILL);
        assert!(!r.again(&hit(0, false)), "nobody, nothing unseen: done");
        for _ in 0..UNSEEN_RESCANS {
            assert!(r.again(&hit(0, true)));
        }
        assert!(
            !r.again(&hit(0, true)),
            "unseen ends alone rescan {UNSEEN_RESCANS} times"
        );
        // Finding someone still rescans, up to the whole bound.
        while r.rescans < RESCANS {
            assert!(r.again(&hit(1, false)));
        }
        assert!(!r.again(&hit(1, true)), "{RESCANS} rescans in all");
    }

    #[test]
    fn a_count_rescans_only_when_it_found_nobody_and_saw_an_unseen_end() {
        let mut r = request(0);
        assert!(!r.again(&hit(2, true)), "members found: the caller waits on them");
        assert!(!r.again(&hit(0, false)));
        assert!(r.again(&hit(0, true)));
    }
}

//! Signalling a command's whole tree: its process group while the leader is
//! unreaped, plus every process carrying the command's `DSH_EXEC_TAG`,
//! every process still in the command's session (its leader is a session
//! leader, unreaped while it can be signalled, so no other session can have
//! its id), and every descendant of one of those (by parent pid). That
//! catches descendants that left the group (`setsid`, double forks,
//! `nohup`), children that replaced their environment (`env -i`) while
//! their parent lives, and ones that did so and were orphaned but stayed in
//! the session.
//!
//! For an executor (dispose), every descendant of its supervisor is
//! selected as well: the supervisor is a subreaper and the parent of every
//! command, so nothing its commands started leaves its subtree, whatever it
//! did to its environment, session or parent.
//!
//! Not attributable to one command (`kill()`, a timeout, a cancellation):
//! a process that dropped the tag (exec with a new environment) *and* left
//! the session (`setsid`) *and* was orphaned before the sweep — it is then
//! the supervisor's child, like the orphans of every other command of the
//! executor, and nothing says which command it came from. Dispose and the
//! host's death end it. Processes of another user are not seen (their
//! environ is unreadable). The tag is read from `/proc/<pid>/environ`, the
//! environment at exec time, so a process that merely unsets the variable
//! keeps it there.
//!
//! The sweeps themselves run on a thread of their own (`sweeper.rs`).

use std::collections::{HashMap, HashSet};

use crate::host::forked::{current_pid, PerProcess};
use crate::sys::{pidfd_open, pidfd_send_signal, stat_fields};

/// Signals the process group `pgid`. Only sound while its leader is our
/// unreaped child: until then no other process can be given that id.
/// True when the group took the signal (false: no such group).
pub(crate) fn signal_group(pgid: libc::pid_t, sig: libc::c_int) -> bool {
    // SAFETY: killpg takes only integers and touches no memory of ours.
    // (Hitting the right group is the caller's invariant, not a
    // memory-safety one.)
    let sent = unsafe { libc::killpg(pgid, sig) == 0 };
    if sent && continued_after(sig) {
        // SAFETY: as above.
        unsafe { libc::killpg(pgid, libc::SIGCONT) };
    }
    sent
}

/// Whether a stop's `sig` is followed by a SIGCONT (as `timeout` and
/// systemd do): a stopped process would keep the SIGTERM (or a terminal's
/// SIGHUP) pending until the SIGKILL after the grace.
pub(crate) fn continued_after(sig: libc::c_int) -> bool {
    matches!(sig, libc::SIGTERM | libc::SIGHUP)
}

/// Which processes a sweep leaves alone because their command's group
/// signal reaches them. SIGTERM must arrive once: a trap would run twice,
/// and many servers take a second SIGTERM as "quit now, skip the cleanup".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spare {
    Nobody,
    /// Members of this process group (a command whose group was signalled).
    Group(libc::pid_t),
    /// Members of any group led by a live command of the sweep, that is a
    /// tagged child of the executor's supervisor leading its group whose
    /// supervision is claimed (from the launch until its loop returns:
    /// dispose: every such command's loop signals its own group).
    CommandGroups,
}

/// Which tags a sweep is for: one command's exact tag, or every tag
/// starting with an executor's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TagMatch {
    tag: Vec<u8>,
    exact: bool,
    spare: Spare,
    /// The executor's supervisor, the parent of every command leader; for
    /// an executor's sweep, its whole subtree is selected.
    supervisor: Option<libc::pid_t>,
    /// A command's session (its leader's pid): its untagged members are
    /// selected too.
    session: Option<libc::pid_t>,
}

impl TagMatch {
    /// Processes of one command.
    pub(crate) fn command(tag: &str) -> Self {
        TagMatch {
            tag: tag.as_bytes().to_vec(),
            exact: true,
            spare: Spare::Nobody,
            supervisor: None,
            session: None,
        }
    }

    /// Processes of every command of an executor.
    pub(crate) fn executor(prefix: &str) -> Self {
        TagMatch {
            tag: prefix.as_bytes().to_vec(),
            exact: false,
            spare: Spare::Nobody,
            supervisor: None,
            session: None,
        }
    }

    pub(crate) fn sparing(self, spare: Spare) -> Self {
        TagMatch { spare, ..self }
    }

    /// Processes of an executor whose supervisor is `supervisor`: with
    /// [`TagMatch::executor`], everything in its subtree.
    pub(crate) fn under(self, supervisor: Option<libc::pid_t>) -> Self {
        TagMatch { supervisor, ..self }
    }

    /// Processes of the command whose leader is `leader` (unreaped): the
    /// members of its session too.
    pub(crate) fn in_session(self, leader: libc::pid_t) -> Self {
        TagMatch {
            session: Some(leader),
            ..self
        }
    }

    /// Whose descendants are selected without being selected themselves:
    /// an executor's supervisor.
    fn root(&self) -> Option<libc::pid_t> {
        self.supervisor.filter(|_| !self.exact)
    }

    /// Whether a target in process group `group` is left to its group
    /// signal; `leaders` are the targets that lead their command's group.
    fn spares(&self, group: Option<libc::pid_t>, leaders: &HashSet<libc::pid_t>) -> bool {
        match (self.spare, group) {
            (Spare::Nobody, _) | (_, None) => false,
            (Spare::Group(g), Some(group)) => group == g,
            (Spare::CommandGroups, Some(group)) => leaders.contains(&group),
        }
    }

    fn matches(&self, value: &[u8]) -> bool {
        if self.exact {
            value == self.tag.as_slice()
        } else {
            value.starts_with(&self.tag)
        }
    }
}

/// The value of `DSH_EXEC_TAG` in a NUL-separated environ block.
pub(crate) fn tag_in(environ: &[u8]) -> Option<&[u8]> {
    let name = crate::launch::env::EXEC_TAG_VAR.as_bytes();
    environ
        .split(|&b| b == 0)
        .find_map(|entry| entry.strip_prefix(name).and_then(|rest| rest.strip_prefix(b"=")))
}

/// The parent pid in a `/proc/<pid>/stat` line; `None` for a zombie or a
/// dead process (its children are already re-parented) or a malformed
/// line. State and ppid follow the last ')': the command name may itself
/// contain one.
pub(crate) fn parent_in_stat(stat: &[u8]) -> Option<libc::pid_t> {
    let mut fields = stat_fields(stat);
    if matches!(fields.next(), Some("Z" | "X")) {
        return None;
    }
    fields.next()?.parse().ok()
}

/// The process group in a `/proc/<pid>/stat` line (zombies have one too).
pub(crate) fn group_in_stat(stat: &[u8]) -> Option<libc::pid_t> {
    stat_fields(stat).nth(2)?.parse().ok()
}

/// What a scan of `/proc` found about a process without the tag: its parent
/// and its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Untagged {
    pub parent: libc::pid_t,
    pub session: libc::pid_t,
}

/// The processes a batch of requests selects: for each request, those
/// whose tag it matches, the untagged members of its command's session,
/// and all their descendants and the descendants of its root (by parent
/// pid). Pure, so the attribution rule is tested on its own.
pub(crate) fn select(
    requests: &[&TagMatch],
    tags: &HashMap<libc::pid_t, Vec<u8>>,
    untagged: &HashMap<libc::pid_t, Untagged>,
) -> Vec<HashSet<libc::pid_t>> {
    let mut children: HashMap<libc::pid_t, Vec<libc::pid_t>> = HashMap::new();
    for (&pid, u) in untagged {
        children.entry(u.parent).or_default().push(pid);
    }
    requests
        .iter()
        .map(|m| {
            let mut selected: HashSet<libc::pid_t> = tags
                .iter()
                .filter(|(_, t)| m.matches(t))
                .map(|(&p, _)| p)
                .chain(
                    untagged
                        .iter()
                        .filter(|(_, u)| m.session == Some(u.session))
                        .map(|(&p, _)| p),
                )
                .collect();
            let mut frontier: Vec<libc::pid_t> = selected.iter().copied().chain(m.root()).collect();
            while let Some(pid) = frontier.pop() {
                for &child in children.get(&pid).into_iter().flatten() {
                    if selected.insert(child) {
                        frontier.push(child);
                    }
                }
            }
            selected
        })
        .collect()
}

thread_local! {
    /// A scan could not open something for want of descriptors (EMFILE,
    /// ENFILE): what it did not see may still run. Scans run on the
    /// sweeper thread, one at a time.
    static STARVED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Notes an open that failed for want of descriptors.
fn starved_by(e: &std::io::Error) {
    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
        STARVED.with(|s| s.set(true));
    }
}

/// Reads `path` of `/proc` (through the view the host kept: `sys::proc`).
fn read_file(path: &str, buf: &mut Vec<u8>) -> bool {
    crate::sys::proc::read_into(path, buf)
        .inspect_err(starved_by)
        .is_ok()
}

/// The session in a `/proc/<pid>/stat` line.
pub(crate) fn session_in_stat(stat: &[u8]) -> Option<libc::pid_t> {
    stat_fields(stat).nth(3)?.parse().ok()
}

/// What `/proc/<pid>/stat` says of a process without the tag.
enum StatSays {
    Live(Untagged),
    /// Ended by SIGKILL: it hides nothing ([`End::Killed`]).
    Killed,
    /// Ended otherwise: a zombie, with the parent that has to reap it and
    /// its session; `None` when it was gone before it could be read.
    Ended(Option<Untagged>),
}

fn untagged_of(pid: libc::pid_t, buf: &mut Vec<u8>) -> StatSays {
    if !read_file(&format!("{pid}/stat"), buf) {
        return StatSays::Ended(None);
    }
    let session = session_in_stat(buf);
    match end_in_stat(buf) {
        Some(End::Killed) => StatSays::Killed,
        Some(End::Other) => {
            // A zombie's ppid is still there ([`parent_in_stat`] says None:
            // its own children are re-parented already).
            let parent = stat_fields(buf).nth(1).and_then(|f| f.parse().ok());
            StatSays::Ended(
                parent
                    .zip(session)
                    .map(|(parent, session)| Untagged { parent, session }),
            )
        }
        None => match (parent_in_stat(buf), session) {
            (Some(parent), Some(session)) => StatSays::Live(Untagged { parent, session }),
            _ => StatSays::Ended(None),
        },
    }
}

/// How a process that a scan listed had ended when the scan looked at it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    /// By SIGKILL. The kernel ends a fork under way at a SIGKILL, so the
    /// children it made exist from before the signal; and the SIGKILLs a
    /// tree gets come from its stop (its group's before the sweep is
    /// queued, a scan's before the next scan lists), so they were listed.
    /// (Someone else's SIGKILL landing while a scan runs is not covered.)
    Killed,
    /// Otherwise: it may have forked a child the listing skipped.
    Other,
}

/// [`End`] from a `/proc/<pid>/stat` line: a zombie's exit status (the
/// 52nd field) says whether SIGKILL ended it.
fn end_in_stat(stat: &[u8]) -> Option<End> {
    let mut fields = stat_fields(stat);
    if !matches!(fields.next(), Some("Z" | "X")) {
        return None;
    }
    let status: Option<i32> = fields.nth(48).and_then(|f| f.parse().ok());
    Some(match status {
        Some(s) if s & 0x7f == libc::SIGKILL => End::Killed,
        _ => End::Other,
    })
}

fn tag_of(pid: libc::pid_t, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let environ = format!("{pid}/environ");
    if !read_file(&environ, buf) {
        return None;
    }
    // A process in execve shows no environment for a moment (its new
    // memory has none yet, or only the place of one while it is laid
    // out, or the read took its old memory as it went): read as untagged
    // then, it would escape a sweep, and a census would take its tree for
    // gone. One whose environment is empty for good (the supervisor's,
    // `env -i`'s) is not read again.
    let mut rereads = 0;
    while buf.is_empty() && rereads < EXEC_REREADS {
        match environment_now(pid) {
            Environment::Coming => std::thread::sleep(std::time::Duration::from_millis(1)),
            Environment::There => {}
            Environment::Empty | Environment::NoProcess => break,
        }
        if !read_file(&environ, buf) {
            return None;
        }
        rereads += 1;
    }
    tag_in(buf).map(<[u8]>::to_vec)
}

/// How many times an environment that reads empty is read again.
const EXEC_REREADS: u32 = 10;

/// The kernel's flag of a kernel thread in `/proc/<pid>/stat`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// What a process's memory says of its environment at this moment.
#[derive(Debug, PartialEq, Eq)]
enum Environment {
    /// In execve: its new memory has no environment yet (`env_end` 0), or
    /// its place only, while the strings are laid out (an empty one in a
    /// running process: an execve runs).
    Coming,
    /// Laid out and not empty (a read that found none read the memory
    /// an execve was leaving).
    There,
    /// Empty, in a process that is not running: an empty environment
    /// still has a place.
    Empty,
    /// No process of user space: a zombie, a kernel thread, gone.
    NoProcess,
}

/// What `/proc/<pid>/stat` says of a process: its state letter, whether it
/// is a kernel thread, and where its environment starts and ends.
#[derive(Debug)]
struct EnvironmentBounds {
    state: u8,
    kernel_thread: bool,
    start: u64,
    end: u64,
}

fn environment_bounds(pid: libc::pid_t) -> Option<EnvironmentBounds> {
    let mut stat = Vec::new();
    if !read_file(&format!("{pid}/stat"), &mut stat) {
        return None;
    }
    // From the state on: state is 0, flags 6, env_start 47, env_end 48
    // (stat's 3rd, 9th, 50th and 51st fields, proc(5)).
    let fields: Vec<&str> = stat_fields(&stat).collect();
    let number = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(EnvironmentBounds {
        state: *fields.first()?.as_bytes().first()?,
        kernel_thread: number(6)? & PF_KTHREAD != 0,
        start: number(47)?,
        end: number(48)?,
    })
}

/// [`Environment`] from [`environment_bounds`].
fn environment_now(pid: libc::pid_t) -> Environment {
    match environment_bounds(pid) {
        None => Environment::NoProcess,
        Some(b) if b.kernel_thread || matches!(b.state, b'Z' | b'X') => Environment::NoProcess,
        Some(b) if b.end == 0 => Environment::Coming,
        Some(b) if b.end > b.start => Environment::There,
        Some(b) if matches!(b.state, b'R' | b'D') => Environment::Coming,
        Some(_) => Environment::Empty,
    }
}

/// How many members a census hands back pinned: a watch waits for them,
/// then counts again (the rest are found then).
pub(crate) const CENSUS_PIDFDS: usize = 2;

/// What one scan did for one request: how many processes it signalled and,
/// for a census, pidfds of them (at most [`CENSUS_PIDFDS`]).
#[derive(Default)]
pub(crate) struct Hits {
    pub(crate) count: usize,
    pub(crate) pidfds: Vec<std::os::fd::OwnedFd>,
    /// The processes it sent SIGKILL, and the sessions of those it would
    /// signal (selected, re-checked, not spared).
    pub(crate) killed: Vec<libc::pid_t>,
    pub(crate) sessions: HashSet<libc::pid_t>,
    /// A process that may have been the request's ended on its own during
    /// the scan: it may have forked a child the listing skipped.
    pub(crate) unseen_end: bool,
}

/// What one scan did: for each request, and the zombies it saw ended
/// otherwise than by SIGKILL.
pub(crate) struct Scan {
    pub(crate) hits: Vec<Hits>,
    pub(crate) zombies: Vec<libc::pid_t>,
}

/// One request in a scan, with what its earlier scans learned.
pub(crate) struct ScanRequest<'a> {
    pub(crate) matcher: &'a TagMatch,
    pub(crate) sig: libc::c_int,
    pub(crate) census: bool,
    /// Processes its scans sent SIGKILL: they fork no more, so their end
    /// hides nothing.
    pub(crate) killed: &'a HashSet<libc::pid_t>,
    /// Sessions of processes its scans selected.
    pub(crate) sessions: &'a HashSet<libc::pid_t>,
    /// Zombies its scans saw: a zombie seen before ended before this
    /// listing, so what it forked is listed.
    pub(crate) zombies: &'a HashSet<libc::pid_t>,
}

/// One scan of `/proc` for a batch of requests; returns what each did.
/// Each target is pinned with a pidfd and re-checked before the signal, so
/// a pid recycled between the scan and the kill is never hit.
///
/// A child forked after the listing passed its pid (the listing is taken
/// first, then each process is read; and `/proc` lists a pid only once its
/// process is complete) is not in this scan; its parent was. If the parent
/// then ends on its own before the scan signals it, the scan finds
/// neither: such an end is reported (`unseen_end`) and the next scan finds
/// the child. A parent that gets the SIGKILL forks no more (the kernel
/// ends a fork under way), and the children it made before are complete
/// by then, so the next scan lists them.
pub(crate) fn scan_and_signal(requests: &[ScanRequest]) -> Scan {
    STARVED.with(|s| s.set(false));
    let me = current_pid();
    let mut buf = Vec::with_capacity(4096);
    let mut tags = HashMap::new();
    let mut untagged = HashMap::new();
    // Listed, then found ended (not by SIGKILL): with parent and session
    // when a zombie says.
    let mut ended: Vec<(libc::pid_t, Option<Untagged>)> = Vec::new();
    let pids = crate::sys::proc::pids();
    if pids.is_empty() {
        // This process is always listed: /proc could not be read.
        STARVED.with(|s| s.set(true));
    }
    for pid in pids {
        if pid == me {
            continue;
        }
        match tag_of(pid, &mut buf) {
            Some(tag) => {
                tags.insert(pid, tag);
            }
            None => match untagged_of(pid, &mut buf) {
                StatSays::Live(u) => {
                    untagged.insert(pid, u);
                }
                StatSays::Killed => {}
                StatSays::Ended(zombie) => ended.push((pid, zombie)),
            },
        }
    }
    let matchers: Vec<&TagMatch> = requests.iter().map(|r| r.matcher).collect();
    let selections = select(&matchers, &tags, &untagged);
    let targets: HashSet<libc::pid_t> = selections.iter().flatten().copied().collect();
    // Pin each target with a pidfd, then re-read what decides it, so a pid
    // recycled since the scan is never signalled.
    struct Target {
        pid: libc::pid_t,
        pidfd: std::os::fd::OwnedFd,
        tag: Option<Vec<u8>>,
        parent: Option<libc::pid_t>,
        group: Option<libc::pid_t>,
        session: Option<libc::pid_t>,
        end: Option<End>,
    }
    let pinned: Vec<Target> = targets
        .into_iter()
        .filter_map(|pid| {
            let pidfd = pidfd_open(pid).inspect_err(starved_by).ok()?;
            let tag = tag_of(pid, &mut buf);
            let stat = read_file(&format!("{pid}/stat"), &mut buf).then(|| buf.clone());
            let parent = stat.as_deref().and_then(parent_in_stat);
            let group = stat.as_deref().and_then(group_in_stat);
            let session = stat.as_deref().and_then(session_in_stat);
            let end = stat.as_deref().and_then(end_in_stat);
            Some(Target {
                pid,
                pidfd,
                tag,
                parent,
                group,
                session,
                end,
            })
        })
        .collect();
    let pinned = ancestors_first(pinned, |t| t.pid, |t| t.parent);
    let pinned_pids: HashSet<libc::pid_t> = pinned.iter().map(|t| t.pid).collect();
    let mut hits: Vec<Hits> = requests.iter().map(|_| Hits::default()).collect();
    for (i, (r, selected)) in requests.iter().zip(&selections).enumerate() {
        let (m, sig, census) = (r.matcher, r.sig, r.census);
        let mine = |t: &Target| t.tag.as_deref().is_some_and(|tag| m.matches(tag));
        // A command's leader is the supervisor's child and leads its own
        // group (a descendant that called setsid leads a group too, but is
        // not the supervisor's child, and nobody signals its group for it).
        let leaders: HashSet<libc::pid_t> = match m.spare {
            Spare::CommandGroups => {
                let live = live_leaders();
                pinned
                    .iter()
                    .filter(|t| {
                        mine(t)
                            && t.group == Some(t.pid)
                            && t.parent.is_some()
                            && t.parent == m.supervisor
                            && t.tag
                                .as_deref()
                                .is_some_and(|tag| leads_a_live_command(&live, tag, t.pid))
                    })
                    .map(|t| t.pid)
                    .collect()
            }
            _ => HashSet::new(),
        };
        // Selected and then not signalled (ended, or no longer what was
        // selected), not by a SIGKILL: it may have forked meanwhile.
        let mut unsent = false;
        let mut pinned_here = 0;
        for t in pinned.iter().filter(|t| selected.contains(&t.pid)) {
            pinned_here += 1;
            // Re-checked on the pinned process: a recycled pid fails every
            // one of these (a live parent or session is unique to its id).
            let still = mine(t)
                || t.parent
                    .is_some_and(|pp| selected.contains(&pp) || Some(pp) == m.root())
                || (m.session.is_some() && t.session == m.session);
            let spared = sig != libc::SIGKILL && m.spares(t.group, &leaders);
            if still && !spared {
                hits[i].sessions.extend(t.session);
            }
            if spared {
                continue;
            }
            if !(still && pidfd_send_signal(&t.pidfd, sig).is_ok()) {
                unsent |= t.end != Some(End::Killed) && !r.killed.contains(&t.pid);
                continue;
            }
            if continued_after(sig) {
                let _ = pidfd_send_signal(&t.pidfd, libc::SIGCONT);
            }
            hits[i].count += 1;
            if sig == libc::SIGKILL {
                hits[i].killed.push(t.pid);
            }
            if census && hits[i].pidfds.len() < CENSUS_PIDFDS {
                if let Ok(fd) = t.pidfd.try_clone() {
                    hits[i].pidfds.push(fd);
                }
            }
        }
        // Selected and gone before it could be pinned, or ended before it
        // could be looked at, and not by a SIGKILL of this request.
        let by_us = |pid: &libc::pid_t| r.killed.contains(pid);
        unsent |= pinned_here < selected.len()
            && selected
                .iter()
                .any(|pid| !pinned_pids.contains(pid) && !by_us(pid));
        // A zombie says its parent and session, not its tag: it counts
        // when those tie it to the request (a fork-and-exit chain whose
        // every member lived within one scan can still go unseen).
        let ours = |u: &Untagged| {
            m.session == Some(u.session)
                || r.sessions.contains(&u.session)
                || hits[i].sessions.contains(&u.session)
                || selected.contains(&u.parent)
                || r.killed.contains(&u.parent)
        };
        // The command's leader is held unreaped until released, and its
        // stop counts and sweeps after its exit: a zombie then, and what it
        // forked is listed.
        let held = |pid: &libc::pid_t| m.session == Some(*pid) || r.zombies.contains(pid);
        hits[i].unseen_end = unsent
            || ended
                .iter()
                .any(|(pid, u)| !by_us(pid) && !held(pid) && u.as_ref().is_none_or(ours));
    }
    // A count (signal 0: "is anyone left?") that could not look at
    // everything says someone may be: never "nobody" by accident.
    if STARVED.with(std::cell::Cell::get) {
        for (h, r) in hits.iter_mut().zip(requests) {
            if r.sig == 0 && h.count == 0 {
                h.count = 1;
            }
        }
    }
    let zombies = ended
        .into_iter()
        .filter(|(_, u)| u.is_some())
        .map(|(pid, _)| pid)
        .collect();
    Scan { hits, zombies }
}

/// `targets` with every process before its descendants among them: a
/// parent signalled after its child could see the child die and go on (a
/// shell runs its next command) before its own signal lands.
fn ancestors_first<T>(
    mut targets: Vec<T>,
    pid: impl Fn(&T) -> libc::pid_t,
    parent: impl Fn(&T) -> Option<libc::pid_t>,
) -> Vec<T> {
    let parents: HashMap<libc::pid_t, Option<libc::pid_t>> =
        targets.iter().map(|t| (pid(t), parent(t))).collect();
    let depth = |mut at: libc::pid_t| {
        let mut depth = 0;
        while let Some(&Some(up)) = parents.get(&at) {
            // A loop in a racy snapshot must not loop here.
            if !parents.contains_key(&up) || depth > parents.len() {
                break;
            }
            depth += 1;
            at = up;
        }
        depth
    };
    targets.sort_by_cached_key(|t| depth(pid(t)));
    targets
}

/// The commands whose supervision will signal their own group on a stop,
/// by tag (claimed at the launch, before the loop first runs, and held
/// until it returns): with the leader's pid once it is known. Only their
/// groups are spared by [`Spare::CommandGroups`]; a process merely looking
/// like a leader (a setsid leftover re-parented to the supervisor) gets the
/// sweep's signal.
static LIVE_LEADERS: PerProcess<std::sync::Mutex<HashMap<Vec<u8>, Option<libc::pid_t>>>> = PerProcess::new();

fn live_leaders() -> std::sync::MutexGuard<'static, HashMap<Vec<u8>, Option<libc::pid_t>>> {
    crate::sys::lock(LIVE_LEADERS.get(Default::default))
}

/// Whether the sweep leaves the group `pid` leads to the loop of `tag`:
/// the loop's leader, or, before its pid is known (a command's comes a few
/// milliseconds late, or at the first poll of a run on a host's loop), the
/// one tagged group leader it can be.
fn leads_a_live_command(live: &HashMap<Vec<u8>, Option<libc::pid_t>>, tag: &[u8], pid: libc::pid_t) -> bool {
    match live.get(tag) {
        Some(Some(leader)) => *leader == pid,
        Some(None) => true,
        None => false,
    }
}

/// Marks a command's supervision live for as long as it is held (by the
/// launched command, then its loop).
pub(crate) struct LiveLeader(Vec<u8>);

impl LiveLeader {
    pub(crate) fn new(tag: &str) -> LiveLeader {
        live_leaders().insert(tag.as_bytes().to_vec(), None);
        LiveLeader(tag.as_bytes().to_vec())
    }

    /// The leader's pid, once known.
    pub(crate) fn mark(&mut self, pid: libc::pid_t) {
        live_leaders().insert(self.0.clone(), Some(pid));
    }
}

impl Drop for LiveLeader {
    fn drop(&mut self) {
        live_leaders().remove(&self.0);
    }
}

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;

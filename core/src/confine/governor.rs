//! The governor at run time (docs/limits.md): which mechanism enforces each
//! limit on this host, the per-command cgroups (made before the spawn,
//! entered by the command's own process before exec, removed after its
//! tree has ended), the resource limits the supervisor's child sets, and
//! the kernel's facts each group gives (`cause.rs` weighs them).
//!
//! Mechanisms, chosen per limit:
//! - `memory` and `processes` cover a whole tree, so they need a cgroup:
//!   a group of the command's own under the host's group in the writable
//!   v1 `memory` and `pids` hierarchies, else in the v2 hierarchy (where,
//!   `unified.rs`). The kernel's counters are the facts (v1: `under_oom`
//!   and `oom_kill` in `memory.oom_control`; v2: `oom` in
//!   `memory.events`; both: `max` in `pids.events`).
//! - `cpu`, `file_size` and `open_files` are per-process resource limits
//!   (`setrlimit` in the child before exec, inherited by every descendant).
//!   The facts are the leader's death signal (SIGXCPU, SIGXFSZ); the kernel
//!   reports no fact for `open_files` (an open fails with EMFILE).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::confine::cgroupfs::{find_mount, own_path, writable_group_dir};
use crate::confine::unified;
use crate::host::forked::PerProcess;
use crate::spec::error::{DshError, Result};
use crate::spec::limits::{unavailable, LimitKind, Limits, LimitsEnforcement, Mechanism};

/// The host's own group in the writable v1 hierarchies that the governor
/// uses, or why there is none.
#[derive(Debug, Clone)]
struct Hierarchies {
    memory: std::result::Result<PathBuf, String>,
    pids: std::result::Result<PathBuf, String>,
}

fn hierarchies() -> &'static Hierarchies {
    static H: OnceLock<Hierarchies> = OnceLock::new();
    H.get_or_init(|| {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let find = |controller: &str| own_group(&mountinfo, &cgroups, controller);
        Hierarchies {
            memory: find("memory"),
            pids: find("pids"),
        }
    })
}

/// The directory of this process's group in the v1 hierarchy of
/// `controller`, if it is mounted read-write and writable by us.
fn own_group(mountinfo: &str, cgroups: &str, controller: &str) -> std::result::Result<PathBuf, String> {
    let none = || format!("no cgroup v1 {controller} hierarchy is mounted");
    let has_controller = |list: &str| list.split(',').any(|c| c == controller);
    let mount = find_mount(mountinfo, "cgroup", has_controller).ok_or_else(none)?;
    if !mount.writable {
        return Err(format!(
            "the cgroup v1 {controller} hierarchy is mounted read-only"
        ));
    }
    let path = own_path(cgroups, has_controller).ok_or_else(none)?;
    writable_group_dir(&mount, &path)
}

/// Where the group of a cgroup limit is made.
#[derive(Debug, Clone, Copy)]
enum Placement {
    /// Under this directory of the limit's v1 hierarchy.
    V1(&'static Path),
    /// Under this directory of the v2 hierarchy, in the one v2 group of the
    /// command (a process is in one v2 group only).
    V2(&'static Path),
}

/// Where the group of the cgroup limit `kind` (memory or processes) is
/// made: its v1 hierarchy where one is writable, else the v2 hierarchy.
/// The first call for a v2 limit may move the host (see `unified.rs`).
fn placement(kind: LimitKind) -> std::result::Result<Placement, String> {
    let h = hierarchies();
    let (v1, controller) = match kind {
        LimitKind::Memory => (&h.memory, "memory"),
        _ => (&h.pids, "pids"),
    };
    let v1_why = match v1 {
        Ok(dir) => return Ok(Placement::V1(dir)),
        Err(why) => why,
    };
    unified::limit_parent()
        .and_then(|parent| parent.for_controller(controller))
        .map(Placement::V2)
        .map_err(|v2_why| format!("{v1_why}; cgroup v2: {v2_why}"))
}

/// How this host enforces `kind`, or why it cannot.
fn mechanism_or_why(kind: LimitKind) -> std::result::Result<Mechanism, String> {
    match kind {
        LimitKind::Memory | LimitKind::Processes => placement(kind).map(|p| match p {
            Placement::V1(_) => Mechanism::CgroupV1,
            Placement::V2(_) => Mechanism::CgroupV2,
        }),
        LimitKind::Cpu | LimitKind::FileSize | LimitKind::OpenFiles => Ok(Mechanism::Rlimit),
    }
}

/// How this host would enforce each limit: its mechanism, or
/// [`Mechanism::Unsupported`] (a command asking for it fails closed with
/// [`DshError::LimitUnavailable`]).
pub fn limits_support() -> LimitsEnforcement {
    let mut e = LimitsEnforcement::default();
    for kind in LimitKind::ALL {
        e.set(
            kind,
            Some(mechanism_or_why(kind).unwrap_or(Mechanism::Unsupported)),
        );
    }
    e
}

/// Fail closed: every limit of `limits` must be enforceable here.
pub(crate) fn check(limits: &Limits) -> Result<LimitsEnforcement> {
    let mut e = LimitsEnforcement::default();
    for (kind, _) in limits.entries() {
        let mechanism = mechanism_or_why(kind).map_err(|why| unavailable(kind, why))?;
        e.set(kind, Some(mechanism));
    }
    Ok(e)
}

/// The directories under which a supervisor's command groups are made;
/// the supervisor removes what is left of its own (`dsh.<its pid>.*`) when
/// it ends.
pub(crate) fn group_parents() -> Vec<PathBuf> {
    let h = hierarchies();
    [&h.memory, &h.pids]
        .into_iter()
        .filter_map(|d| d.as_ref().ok().cloned())
        .chain(unified::group_parents())
        .collect()
}

/// Resource limits the command's process sets before exec; the wire form
/// is `struct limits` of supervisor.c.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Rlimits {
    pub cpu: Option<u64>,
    pub fsize: Option<u64>,
    pub nofile: Option<u64>,
}

/// One command's groups: made before its spawn, entered by its process
/// (through the `cgroup.procs` descriptors) before exec.
pub(crate) struct CommandGroup {
    /// `dsh.<supervisor pid>.<n>`, the same in each hierarchy.
    name: String,
    /// The v1 groups.
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    /// The cgroup v2 group: the v2 limits and the `loopback` network
    /// filter.
    unified: Option<PathBuf>,
    /// The limits the v2 group carries.
    unified_limits: Vec<LimitKind>,
    /// The v1 groups' `cgroup.procs`.
    procs: Vec<OwnedFd>,
    /// The v2 group's directory, which the command is born in.
    unified_dir: Option<OwnedFd>,
    /// What each group is for: those of `procs` in order, then the v2 one.
    kinds: Vec<GroupKind>,
}

/// What a group of a command is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupKind {
    Limit(LimitKind),
    Loopback,
}

/// Groups that still held a process (a background job the command left on
/// purpose) when their command's tree was done with: removed by a later
/// command's cleanup once empty, so a long-lived executor does not collect
/// them; the supervisor removes whatever is left when it ends. Per process:
/// a child forked while another thread held the list starts a list of its
/// own (the parent's groups are the parent's supervisor's to remove).
static LEFTOVER: PerProcess<std::sync::Mutex<Vec<PathBuf>>> = PerProcess::new();

/// The error for a `loopback` network policy this host cannot enforce.
fn loopback_unavailable(why: impl std::fmt::Display) -> DshError {
    DshError::SandboxUnavailable(format!("network loopback cannot be enforced here: {why}"))
}

/// Removes `dir`; true when it is gone (or was already).
fn removed(dir: &Path) -> bool {
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// Removes `dirs`, keeping the busy ones for later, and retries the ones
/// kept before.
fn remove_dirs(dirs: impl IntoIterator<Item = PathBuf>) {
    let mut left = LEFTOVER
        .get(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    left.retain(|d| !removed(d));
    left.extend(dirs.into_iter().filter(|d| !removed(d)));
}

/// Removes every kept group that is empty now: at `dispose()`, after the
/// executor's sweeps, so that a group whose supervisor died (a command may
/// SIGKILL it) and could not remove it is not left behind. A group still
/// held by a live process (another executor's job) stays kept.
pub(crate) fn remove_leftovers() {
    remove_dirs([]);
}

static NEXT_GROUP: AtomicU64 = AtomicU64::new(1);

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| io::Write::write_all(&mut f, value.as_bytes()))
}

fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    // std opens with O_CLOEXEC.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)?;
    Ok(OwnedFd::from(file))
}

fn open_procs(dir: &Path) -> io::Result<OwnedFd> {
    // std opens with O_CLOEXEC.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))?;
    Ok(OwnedFd::from(file))
}

/// Whether a limit's file must exist in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needed {
    Always,
    WhereTheKernelHasIt,
}

/// Makes group `name` under `parent` and writes each of its `files`
/// (name, value); an error removes it again and says why.
fn make_group(
    parent: &Path,
    name: &str,
    files: &[(&str, &str, Needed)],
) -> std::result::Result<PathBuf, String> {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (file, value, needed) in files {
        match write_file(&dir.join(file), value) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && *needed == Needed::WhereTheKernelHasIt => {}
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(format!("cannot set {file}: {e}"));
            }
            Ok(()) => {}
        }
    }
    Ok(dir)
}

/// The files of a memory limit of `bytes` in a v1 group.
fn memory_v1_files(bytes: &str) -> [(&'static str, &str, Needed); 3] {
    [
        ("memory.limit_in_bytes", bytes, Needed::Always),
        // Swap counts too, where the kernel accounts it: a limit that
        // swapping could evade is no limit.
        ("memory.memsw.limit_in_bytes", bytes, Needed::WhereTheKernelHasIt),
        // A task that reaches the limit is held, not killed alone (its
        // shell would go on to its next command): the governor sees
        // `under_oom` and ends the whole tree.
        ("memory.oom_control", "1", Needed::Always),
    ]
}

/// The files of a memory limit of `bytes` in a v2 group.
fn memory_v2_files(bytes: &str) -> [(&'static str, &str, Needed); 3] {
    [
        ("memory.max", bytes, Needed::Always),
        // No swap at all, where the kernel has swap accounting: a limit
        // that swapping could evade is no limit.
        ("memory.swap.max", "0", Needed::WhereTheKernelHasIt),
        // The OOM killer ends every process of the group at once, so the
        // shell of a killed child cannot go on to its next command.
        ("memory.oom.group", "1", Needed::Always),
    ]
}

impl CommandGroup {
    /// Makes the groups `limits` needs, for a command of the supervisor
    /// `supervisor_pid`; `None` when no limit needs a cgroup.
    pub(crate) fn new(
        limits: &Limits,
        loopback: bool,
        supervisor_pid: libc::pid_t,
    ) -> Result<Option<CommandGroup>> {
        if limits.memory_bytes.is_none() && limits.processes.is_none() && !loopback {
            return Ok(None);
        }
        let name = format!(
            "dsh.{supervisor_pid}.{}",
            NEXT_GROUP.fetch_add(1, Ordering::Relaxed)
        );
        let mut group = CommandGroup {
            name,
            memory: None,
            pids: None,
            unified: None,
            unified_limits: Vec::new(),
            procs: Vec::new(),
            unified_dir: None,
            kinds: Vec::new(),
        };
        let memory = limits.memory_bytes.map(|b| b.to_string());
        let processes = limits.processes.map(|n| n.to_string());
        // The v2 group's files, and its parent (the same for every v2 limit).
        let mut v2_files = Vec::new();
        let mut v2_parent = None;
        if let Some(bytes) = &memory {
            match placement(LimitKind::Memory).map_err(|why| unavailable(LimitKind::Memory, why))? {
                Placement::V1(parent) => {
                    group.v1_group(LimitKind::Memory, parent, &memory_v1_files(bytes))?
                }
                Placement::V2(parent) => {
                    v2_parent = Some(parent);
                    v2_files.extend(memory_v2_files(bytes));
                    group.unified_limits.push(LimitKind::Memory);
                }
            }
        }
        if let Some(n) = &processes {
            let files = [("pids.max", n.as_str(), Needed::Always)];
            match placement(LimitKind::Processes).map_err(|why| unavailable(LimitKind::Processes, why))? {
                Placement::V1(parent) => group.v1_group(LimitKind::Processes, parent, &files)?,
                Placement::V2(parent) => {
                    v2_parent = Some(parent);
                    v2_files.extend(files);
                    group.unified_limits.push(LimitKind::Processes);
                }
            }
        }
        if v2_parent.is_some() || loopback {
            group.unified_group(v2_parent, &v2_files, loopback)?;
        }
        Ok(Some(group))
    }

    /// Makes the v1 group of limit `kind` under `parent` with its `files`,
    /// and keeps its `cgroup.procs` open for the command's process to
    /// enter.
    fn v1_group(&mut self, kind: LimitKind, parent: &Path, files: &[(&str, &str, Needed)]) -> Result<()> {
        let dir = make_group(parent, &self.name, files).map_err(|why| unavailable(kind, why))?;
        // Kept at once, so an error below removes it with the group.
        let made = match kind {
            LimitKind::Memory => &mut self.memory,
            _ => &mut self.pids,
        };
        *made = Some(dir.clone());
        self.procs
            .push(open_procs(&dir).map_err(|e| unavailable(kind, format!("cannot open cgroup.procs: {e}")))?);
        self.kinds.push(GroupKind::Limit(kind));
        Ok(())
    }

    /// Makes the command's v2 group (its v2 limits' `files` under
    /// `parent`, else under the host's own group) and attaches the
    /// `loopback` filter to it if asked.
    fn unified_group(
        &mut self,
        parent: Option<&Path>,
        files: &[(&str, &str, Needed)],
        loopback: bool,
    ) -> Result<()> {
        // What a failure is reported as: the first v2 limit, else loopback.
        let kind = match self.unified_limits.first() {
            Some(&k) => GroupKind::Limit(k),
            None => GroupKind::Loopback,
        };
        let fail = |why: String| match kind {
            GroupKind::Limit(k) => unavailable(k, why),
            GroupKind::Loopback => loopback_unavailable(why),
        };
        if loopback {
            crate::confine::netfilter::available().map_err(loopback_unavailable)?;
        }
        let parent = match parent {
            Some(p) => p,
            None => unified::own_group().map_err(fail)?,
        };
        let dir = make_group(parent, &self.name, files).map_err(fail)?;
        self.unified = Some(dir.clone());
        if loopback {
            crate::confine::netfilter::attach(&dir).map_err(loopback_unavailable)?;
        }
        self.unified_dir = Some(open_dir(&dir).map_err(|e| fail(format!("cannot open the group: {e}")))?);
        self.kinds.push(kind);
        Ok(())
    }

    /// What the `index`th group is for (the v1 ones in [`procs`]'s
    /// order, then the v2 one).
    ///
    /// [`procs`]: CommandGroup::procs
    pub(crate) fn kind_at(&self, index: usize) -> Option<GroupKind> {
        self.kinds.get(index).copied()
    }

    /// The v1 groups' `cgroup.procs` descriptors, which the command's
    /// process writes itself into: at most two.
    pub(crate) fn procs(&self) -> Vec<RawFd> {
        self.procs.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// The v2 group's directory, which the command is born in (`clone3`
    /// with CLONE_INTO_CGROUP: it never has to migrate there).
    pub(crate) fn born_in(&self) -> Option<RawFd> {
        self.unified_dir.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Where the kernel says that a limit may have been reached, so the
    /// governor can wait for it instead of polling: the v2 events files,
    /// which announce a change to inotify (`memory.events`, `pids.events`),
    /// and the v1 memory group, whose OOM is announced through an eventfd
    /// registered in `cgroup.event_control`. `None` when a limit cannot be
    /// announced (v1 `pids.events` never is): the counters are polled.
    pub(crate) fn event_sources(&self) -> Option<(Vec<PathBuf>, Option<&Path>)> {
        if self.pids.is_some() {
            return None;
        }
        let mut files = Vec::new();
        if let Some(dir) = &self.unified {
            for (kind, file) in [
                (LimitKind::Memory, "memory.events"),
                (LimitKind::Processes, "pids.events"),
            ] {
                if self.unified_limits.contains(&kind) {
                    files.push(dir.join(file));
                }
            }
        }
        Some((files, self.memory.as_deref()))
    }

    /// The kernel's facts: the first limit of the group that was reached
    /// (the OOM killer acted, or a fork was refused).
    pub(crate) fn reached(&self) -> Option<LimitKind> {
        if let Some(dir) = &self.memory {
            // `under_oom`: a task waits on the limit (held, see `new`);
            // `oom_kill`: the kernel killed one anyway.
            let oom = dir.join("memory.oom_control");
            if counter(&oom, "under_oom") > 0 || counter(&oom, "oom_kill") > 0 {
                return Some(LimitKind::Memory);
            }
        }
        if let Some(dir) = &self.pids {
            if counter(&dir.join("pids.events"), "max") > 0 {
                return Some(LimitKind::Processes);
            }
        }
        if let Some(dir) = &self.unified {
            // `oom`: the group's usage reached `memory.max` and an
            // allocation was about to fail. Not `oom_kill`: it also counts
            // kills by a global OOM, and a group whose processes cannot be
            // chosen (`oom_score_adj` -1000) sees no kill at all.
            if self.unified_limits.contains(&LimitKind::Memory)
                && counter(&dir.join("memory.events"), "oom") > 0
            {
                return Some(LimitKind::Memory);
            }
            if self.unified_limits.contains(&LimitKind::Processes)
                && counter(&dir.join("pids.events"), "max") > 0
            {
                return Some(LimitKind::Processes);
            }
        }
        None
    }

    /// Removes the groups once the command's tree has ended. A group still
    /// holding processes (a background job the command left on purpose)
    /// stays, and the supervisor removes it when it ends.
    pub(crate) fn remove(mut self) {
        self.procs.clear();
        self.unified_dir = None;
        remove_dirs(
            [self.memory.take(), self.pids.take(), self.unified.take()]
                .into_iter()
                .flatten(),
        );
    }

    /// SIGKILLs every process the kernel counts in the group (once the
    /// limit was reached): the exact membership, whatever the processes
    /// did to their session, environment or parent. Each is pinned with a
    /// pidfd and re-checked to be in the group before it is signalled.
    /// Returns how many were signalled.
    pub(crate) fn kill_members(&self) -> usize {
        let Some(dir) = self
            .pids
            .as_ref()
            .or(self.memory.as_ref())
            .or(self.unified.as_ref())
        else {
            return 0;
        };
        // Not `cgroup.kill` (v2): written during a fork bomb while the
        // sweeps read /proc, it left both CPUs of a 6.1 kernel stuck in the
        // kernel (a soft lockup, once in four runs of the VM stage).
        let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
            return 0;
        };
        let suffix = format!("/{}", self.name);
        let mut hit = 0;
        for pid in procs.lines().filter_map(|l| l.trim().parse::<libc::pid_t>().ok()) {
            let Ok(pidfd) = crate::sys::pidfd_open(pid) else {
                continue;
            };
            let member = crate::sys::proc::read(&format!("{pid}/cgroup"))
                .is_ok_and(|c| c.split(|&b| b == b'\n').any(|l| l.ends_with(suffix.as_bytes())));
            if member && crate::sys::pidfd_send_signal(&pidfd, libc::SIGKILL).is_ok() {
                hit += 1;
            }
        }
        hit
    }
}

impl Drop for CommandGroup {
    /// A group whose command never started (a spawn failure) is removed.
    fn drop(&mut self) {
        remove_dirs(
            [self.memory.take(), self.pids.take(), self.unified.take()]
                .into_iter()
                .flatten(),
        );
    }
}

/// A `name value` line of a cgroup's flat keyed file; 0 when absent.
fn counter(path: &Path, name: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == name).then(|| v.trim().parse().ok()).flatten()
            })
        })
        .unwrap_or(0)
}

/// The per-process limits of `limits`, for the supervisor's child.
pub(crate) fn rlimits(limits: &Limits) -> Option<Rlimits> {
    let r = Rlimits {
        cpu: limits.cpu_seconds,
        fsize: limits.file_size_bytes,
        nofile: limits.open_files,
    };
    (r != Rlimits::default()).then_some(r)
}

/// What the supervisor says a command's process could not apply: one of
/// its resource limits, or the group at this index among those it was
/// handed (decoded from the wire by `launch::wire`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unapplied {
    Rlimit(LimitKind),
    Group(usize),
    Unknown,
}

/// The error for a limit (or the loopback group) the command's own
/// process could not apply.
pub(crate) fn apply_failed(what: Unapplied, errno: i32, group: Option<&CommandGroup>) -> DshError {
    let err = io::Error::from_raw_os_error(errno);
    let why = format!("the command's process could not apply it: {err}");
    let kind = match what {
        Unapplied::Rlimit(kind) => Some(GroupKind::Limit(kind)),
        Unapplied::Group(i) => group.and_then(|g| g.kind_at(i)),
        Unapplied::Unknown => None,
    };
    match kind {
        Some(GroupKind::Limit(kind)) => unavailable(kind, why),
        Some(GroupKind::Loopback) => loopback_unavailable(format!("cannot enter its group: {err}")),
        None => DshError::Internal(format!("a limit could not be applied: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_own_group_of_a_v1_hierarchy() {
        let mountinfo = "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n\
                         31 25 0:27 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n";
        let cgroups = "8:pids:/\n4:memory:/a/b\n0::/\n";
        // The directories do not exist here, so the writability check
        // explains itself rather than succeeding.
        let e = own_group(mountinfo, cgroups, "memory").unwrap_err();
        assert!(e.contains("/sys/fs/cgroup/memory/a/b"), "{e}");
        let e = own_group(mountinfo, cgroups, "cpu").unwrap_err();
        assert!(e.contains("no cgroup v1 cpu hierarchy is mounted"), "{e}");
        let ro = mountinfo.replace("rw,relatime shared:9", "ro,relatime shared:9");
        let e = own_group(&ro, cgroups, "memory").unwrap_err();
        assert!(e.contains("read-only"), "{e}");
    }
}

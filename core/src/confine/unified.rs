//! Where a command's cgroup v2 group is made (docs/limits.md, "cgroup
//! v2"): the host's own group in the unified hierarchy, and the group
//! under which command groups can have the `memory` and `pids`
//! controllers.
//!
//! cgroup v2 lets a group enable controllers for its children only while
//! it holds no process itself (the root group aside): the "no internal
//! process" rule. So the parent of the command groups is, in order:
//! 1. the host's own group, when it can enable the controllers there (the
//!    real root of the hierarchy, as in a VM; a container's namespace root
//!    is refused by the kernel and goes to step 3);
//! 2. the parent of the host's group, when the host's group is the leaf
//!    `dsh-host` an executor made (step 3, in this process's parent, say)
//!    and the parent has the controllers enabled and lets us make groups
//!    and move processes: never a group of somebody else's, such as a
//!    systemd slice beside the host's service, where the host's own
//!    limits would not apply;
//! 3. the host's own group once its processes are moved into a leaf
//!    `dsh-host` of their own: only when the group is writable by us
//!    (root, or delegated to our user as `systemd-run --scope -p
//!    Delegate=yes` does) and every process in it is the host's own (the
//!    host, its ancestors, its descendants, and what runs in the host's
//!    session: a `tee` beside it, a watchdog a `timeout` left). Processes
//!    of anybody else are never moved: the limits are then unavailable,
//!    saying why.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::confine::cgroupfs::{find_mount, own_path, writable, writable_group_dir, CgroupMount};

/// The leaf the host's processes move into (step 3 above).
const HOST_LEAF: &str = "dsh-host";

/// This process's group in the cgroup v2 hierarchy, if one is mounted
/// read-write and the group is writable by us; with the mount.
fn own() -> &'static Result<(CgroupMount, PathBuf), String> {
    static P: OnceLock<Result<(CgroupMount, PathBuf), String>> = OnceLock::new();
    P.get_or_init(|| {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mount = find_mount(&mountinfo, "cgroup2", |_| true)
            .filter(|m| m.writable)
            .ok_or("no cgroup v2 hierarchy is mounted read-write")?;
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        // The v2 line is the one with no controllers: `0::/path`.
        let path = own_path(&cgroups, str::is_empty).ok_or("this process has no cgroup v2 group")?;
        let dir = writable_group_dir(&mount, &path)?;
        Ok((mount, dir))
    })
}

/// The host's own cgroup v2 group (the parent of `loopback` groups that
/// carry no limit).
pub(crate) fn own_group() -> Result<&'static Path, String> {
    own().as_ref().map(|(_, dir)| dir.as_path()).map_err(Clone::clone)
}

/// The group under which command groups get the v2 controllers, and
/// which of `memory` and `pids` it enables for them.
#[derive(Debug)]
pub(crate) struct LimitParent {
    pub dir: PathBuf,
    enabled: Vec<String>,
}

impl LimitParent {
    /// The parent directory, if it enables `controller` for its children;
    /// otherwise why not.
    pub(crate) fn for_controller(&'static self, controller: &str) -> Result<&'static Path, String> {
        if self.enabled.iter().any(|c| c == controller) {
            Ok(&self.dir)
        } else {
            Err(format!(
                "the cgroup v2 {controller} controller is not available to the groups under {} \
                 (its parent group did not delegate it)",
                self.dir.display()
            ))
        }
    }
}

/// The parent of command groups with limits, found (and, at step 3, made)
/// the first time a v2 limit is needed in this process. Only a parent is
/// kept: a failure (a short-lived stranger in the group, say) is looked at
/// again by the next command that asks.
pub(crate) fn limit_parent() -> Result<&'static LimitParent, String> {
    static P: OnceLock<LimitParent> = OnceLock::new();
    static FINDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if let Some(parent) = P.get() {
        return Ok(parent);
    }
    // One search at a time: step 3 moves processes.
    let _one = FINDING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(parent) = P.get() {
        return Ok(parent);
    }
    let (mount, own) = own().as_ref().map_err(Clone::clone)?;
    let found = find_limit_parent(mount, own)?;
    Ok(P.get_or_init(|| found))
}

const CONTROLLERS: [&str; 2] = ["memory", "pids"];

fn words(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Asks `dir` to enable `wanted` for its children; what it enables after.
fn enable(dir: &Path, wanted: &[String]) -> io::Result<Vec<String>> {
    let line: Vec<String> = wanted.iter().map(|c| format!("+{c}")).collect();
    std::fs::write(dir.join("cgroup.subtree_control"), line.join(" "))?;
    Ok(words(&dir.join("cgroup.subtree_control")))
}

fn find_limit_parent(mount: &CgroupMount, own: &Path) -> Result<LimitParent, String> {
    let offered = words(&own.join("cgroup.controllers"));
    let wanted: Vec<String> = CONTROLLERS
        .iter()
        .filter(|c| offered.iter().any(|o| o == *c))
        .map(|c| (*c).to_owned())
        .collect();
    if wanted.is_empty() {
        return Err(format!(
            "the host's cgroup v2 group {} has neither the memory nor the pids controller \
             (its parent group did not delegate them)",
            own.display()
        ));
    }
    // 1. The host's own group.
    let enabled_here = match enable(own, &wanted) {
        Ok(enabled) => {
            return Ok(LimitParent {
                dir: own.to_owned(),
                enabled,
            })
        }
        Err(e) => e,
    };
    // 2. Beside the host, in its parent, when the host is in our leaf.
    let at_mount_root = own == Path::new(&mount.mountpoint);
    let in_our_leaf = own.file_name() == Some(std::ffi::OsStr::new(HOST_LEAF));
    if let Some(parent) = own.parent().filter(|_| !at_mount_root && in_our_leaf) {
        let enabled = words(&parent.join("cgroup.subtree_control"));
        if wanted.iter().any(|w| enabled.contains(w)) && may_write(parent) {
            return Ok(LimitParent {
                dir: parent.to_owned(),
                enabled,
            });
        }
    }
    // 3. The host's own processes into a leaf of their own.
    if enabled_here.raw_os_error() != Some(libc::EBUSY) {
        return Err(format!(
            "cannot enable the cgroup v2 controllers in {}: {enabled_here}",
            own.display()
        ));
    }
    // A host that is itself a command of an executor (a nested dsh) sits
    // in that command's group: reorganizing it would leave the outer
    // executor a group it cannot remove.
    if own
        .file_name()
        .is_some_and(|n| n.as_encoded_bytes().starts_with(b"dsh."))
    {
        return Err(format!(
            "the host runs in the cgroup of a command of another executor ({}), which it may not reorganize",
            own.display()
        ));
    }
    move_host_into_leaf(own)?;
    let mut last = enabled_here;
    // A process the host forks meanwhile lands in the group again: moved
    // on the next pass.
    for _ in 0..20 {
        match enable(own, &wanted) {
            Ok(enabled) => {
                return Ok(LimitParent {
                    dir: own.to_owned(),
                    enabled,
                })
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                last = e;
                move_host_into_leaf(own)?;
            }
            Err(e) => {
                last = e;
                break;
            }
        }
    }
    Err(format!(
        "cannot enable the cgroup v2 controllers in {} after moving the host into {}: {last}",
        own.display(),
        own.join(HOST_LEAF).display()
    ))
}

/// Whether we may make groups in `dir` and move processes across it.
fn may_write(dir: &Path) -> bool {
    writable(dir).is_ok() && writable(&dir.join("cgroup.procs")).is_ok()
}

/// Moves every process of `group` into its leaf [`HOST_LEAF`], if each is
/// the host's own (this process, an ancestor, a descendant, or in this
/// process's session).
fn move_host_into_leaf(group: &Path) -> Result<(), String> {
    let procs = std::fs::read_to_string(group.join("cgroup.procs"))
        .map_err(|e| format!("cannot read {}: {e}", group.join("cgroup.procs").display()))?;
    let pids: Vec<libc::pid_t> = procs.lines().filter_map(|l| l.trim().parse().ok()).collect();
    let me = std::process::id() as libc::pid_t;
    let ancestors = ancestry(me);
    let session = session_of(me);
    let hosts = |p: libc::pid_t| {
        p == me
            || ancestors.contains(&p)
            || ancestry(p).contains(&me)
            || (session.is_some() && session_of(p) == session)
    };
    if let Some(stranger) = pids.iter().find(|&&p| !hosts(p)) {
        return Err(format!(
            "the host's cgroup v2 group {} holds processes that are not the host's (pid {stranger}: {}), \
             so it cannot give command groups the memory and pids controllers (cgroup v2 lets only \
             a group without processes do that): run the host in a delegated group of its own \
             (systemd-run --scope -p Delegate=yes), or move the other processes into a leaf group \
             and enable the controllers in {}",
            group.display(),
            describe(*stranger),
            group.join("cgroup.subtree_control").display()
        ));
    }
    let leaf = group.join(HOST_LEAF);
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", leaf.display())),
    }
    for pid in pids {
        match std::fs::write(leaf.join("cgroup.procs"), pid.to_string()) {
            Ok(()) => {}
            // Gone meanwhile.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(format!("cannot move pid {pid} into {}: {e}", leaf.display())),
        }
    }
    Ok(())
}

/// `pid`'s name, parent and session, for an error message.
fn describe(pid: libc::pid_t) -> String {
    let comm = crate::sys::proc::read(&format!("{pid}/comm")).unwrap_or_default();
    let parent = ancestry(pid).first().copied().unwrap_or(0);
    let session = session_of(pid).unwrap_or(0);
    format!(
        "{}, child of {parent}, session {session}",
        String::from_utf8_lossy(&comm).trim_end()
    )
}

/// The session `pid` is in.
fn session_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = crate::sys::proc::read(&format!("{pid}/stat")).ok()?;
    let session = crate::sys::stat_fields(&stat).nth(3)?.parse().ok();
    // 0: the session's leader is outside our pid namespace (`docker
    // exec`), so the id says nothing about whose the process is.
    session.filter(|&s| s != 0)
}

/// The parent chain of `pid` (its parent, grandparent, … up to pid 1).
fn ancestry(pid: libc::pid_t) -> Vec<libc::pid_t> {
    let mut chain = Vec::new();
    let mut at = pid;
    while at > 1 && chain.len() < 4096 {
        let Some(parent) = crate::sys::proc::read(&format!("{at}/stat"))
            .ok()
            .and_then(|stat| crate::sys::stat_fields(&stat).nth(1)?.parse::<libc::pid_t>().ok())
        else {
            break;
        };
        chain.push(parent);
        at = parent;
    }
    chain
}

/// The directories a command's v2 group may be made in (the host's own
/// group and its parent), for the supervisor's cleanup when it ends;
/// found without moving anything.
pub(crate) fn group_parents() -> Vec<PathBuf> {
    let Ok((mount, own)) = own().as_ref() else {
        return Vec::new();
    };
    let mut dirs = vec![own.clone()];
    if own != Path::new(&mount.mountpoint) {
        dirs.extend(own.parent().map(Path::to_owned));
    }
    dirs
}
